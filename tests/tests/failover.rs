//! Hosts that stall and come back: a worker stopped until the master takes
//! it for dead has its VPs frozen by its lease guardian before they are
//! started elsewhere, and ends them when it answers again; the same Tid
//! never runs twice.

use std::path::Path;
use std::time::{Duration, Instant};

use mig_tests::{bin, job_succeeds, processes_with, wait_until, Vm};
use nix::sys::signal::Signal;

/// CPU ticks (user + system) a process has used.
fn ticks(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let f: Vec<&str> = s[s.rfind(')')? + 1..].split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// The processes of VP `tid` that used CPU since `before` (pid -> ticks).
fn ran(tid: u64, before: &mut std::collections::HashMap<u32, u64>) -> Vec<u32> {
    let mut out = Vec::new();
    for p in processes_with(&[format!("MIG_TID={tid}")]) {
        let Some(t) = ticks(p) else { continue };
        if before.get(&p).is_some_and(|&b| t > b) {
            out.push(p);
        }
        before.insert(p, t);
    }
    out
}

#[test]
fn a_worker_stopped_until_declared_dead_never_leaves_a_vp_running_twice() {
    // (With a checkpoint to restart the job from: its VPs may talk.)
    let mut vm = Vm::start_config(2, "[daemon]\ncheckpoint_interval_s = 0.5\n");
    let stop = vm.dir.path().join("stop");
    let job = vm.start_job(2, &bin("testvp"), &[Path::new("spin"), &stop]);
    let on_h1 = || {
        vm.json(&["ps"]).as_array().and_then(|a| {
            a.iter()
                .find(|v| v["host"] == "h1" && v["state"] == "running")
                .and_then(|v| v["tid"].as_str())
                .and_then(|t| u64::from_str_radix(t.trim_start_matches('t'), 16).ok())
        })
    };
    assert!(wait_until(Duration::from_secs(10), || on_h1().is_some()));
    let tid = on_h1().expect("a VP on h1");
    assert!(
        wait_until(Duration::from_secs(10), || vm
            .log(0)
            .contains("checkpointed")),
        "{}",
        vm.log(0)
    );
    vm.signal(1, Signal::SIGSTOP);
    let stopped_at = Instant::now();
    let mut seen = std::collections::HashMap::new();
    let mut twice = Vec::new();
    let mut restarted = false;
    // Stopped for 5 s (the master gives up on it after 3 s), then back.
    while stopped_at.elapsed() < Duration::from_secs(8) {
        if stopped_at.elapsed() >= Duration::from_secs(5) && !restarted {
            restarted = true;
            vm.signal(1, Signal::SIGCONT);
        }
        std::thread::sleep(Duration::from_millis(100));
        let r = ran(tid, &mut seen);
        if r.len() > 1 {
            twice.push((stopped_at.elapsed(), r));
        }
    }
    assert!(
        twice.is_empty(),
        "VP t{tid:x} ran twice at once: {twice:?}\n{}\n{}",
        vm.log(0),
        vm.log(1)
    );
    // It started again on h0 (and may have moved back to h1 since); h1
    // ended its old process first and joined again.
    assert!(seen.len() >= 2, "{seen:?}\n{}", vm.log(0));
    assert!(
        wait_until(Duration::from_secs(10), || vm
            .log(1)
            .contains("back in the virtual machine")),
        "{}",
        vm.log(1)
    );
    let log1 = vm.log(1);
    assert!(log1.contains("its VPs are frozen"), "{log1}");
    assert!(log1.contains("fenced by the master"), "{log1}");
    assert!(
        vm.json(&["hosts"])
            .as_array()
            .is_some_and(|a| a.iter().any(|h| h["name"] == "h1" && h["alive"] == true)),
        "h1 is not back"
    );
    assert!(wait_until(Duration::from_secs(5), || processes_with(&[
        format!("MIG_TID={tid}")
    ])
    .len()
        == 1));
    std::fs::write(&stop, "").expect("stop");
    let lines = job_succeeds(job, &vm.log(0));
    assert_eq!(
        lines.iter().filter(|l| l.contains("spin done")).count(),
        2,
        "{lines:?}"
    );
}
