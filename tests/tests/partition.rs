//! Partitions: the master, then a worker, cut off from the others for
//! 10 s (iptables dropping every packet of its loopback address) while a
//! job of one VP a host runs. No VP runs twice, the job's answer is right,
//! no host is fenced while its lease ran, the voters change one at a time,
//! and every host is back in the pool after each heal.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mig_tests::{bin, job_succeeds, ran, wait_until, Partition, Vm};

const HOSTS: usize = 5;

/// Are all hosts alive, as daemon `at` sees them?
fn all_alive(vm: &Vm, at: usize) -> bool {
    vm.hosts_at(at)
        .is_some_and(|h| h.len() == HOSTS && h.iter().all(|h| h["alive"] == true))
}

/// Checkpoints taken so far, as the daemons' logs say.
fn checkpoints(vm: &Vm) -> usize {
    vm.all_logs().matches("checkpointed (generation").count()
}

/// A host fenced while its lease ran: its log says it was fenced with no
/// word of its lease guardian, since the last renewal, that the lease had
/// lapsed.
fn fenced_with_a_lease(log: &str) -> Option<String> {
    let mut lapsed = false;
    for line in log.lines() {
        if line.contains("its VPs are frozen") {
            lapsed = true;
        } else if line.contains("the lease is renewed") {
            lapsed = false;
        } else if line.contains("fenced by the master") && !lapsed {
            return Some(line.to_string());
        }
    }
    None
}

#[test]
fn a_master_then_a_worker_cut_off_for_10_s_run_no_vp_twice_and_fence_no_host_whose_lease_ran() {
    let vm = Vm::start_apart(HOSTS, "[daemon]\ncheckpoint_interval_s = 1\n");
    // The job is waited for through the last host, which is never cut off.
    let waiter = HOSTS - 1;
    assert!(
        wait_until(Duration::from_secs(30), || vm.hosts_at(waiter).is_some_and(
            |h| h.iter().filter(|h| h["voter"] == true).count() == HOSTS
        )),
        "{:?}",
        vm.hosts_at(waiter)
    );
    let stop = vm.dir.path().join("stop");
    let job = mig_tests::command("mig")
        .env("MIG_DAEMON", vm.sock_of(waiter))
        .args(["spawn", "-n", &HOSTS.to_string(), "--wait", "--"])
        .arg(bin("testvp"))
        .arg("relay")
        .arg(&stop)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("mig spawn");
    // One VP a host, the master's included.
    let mut tids: Vec<u64> = Vec::new();
    assert!(
        wait_until(Duration::from_secs(60), || {
            let ps = vm
                .hosts_at(waiter)
                .map(|_| vm.mig_at(waiter, &["ps", "--json"]));
            tids = ps
                .and_then(|o| serde_json::from_slice::<serde_json::Value>(&o.stdout).ok())
                .and_then(|v| v.as_array().cloned())
                .unwrap_or_default()
                .iter()
                .filter(|v| v["state"] == "running")
                .filter_map(|v| v["tid"].as_str())
                .filter_map(|t| u64::from_str_radix(t.trim_start_matches('t'), 16).ok())
                .collect();
            tids.len() == HOSTS
        }),
        "the job did not start\n{}",
        vm.log(0)
    );
    // Every 100 ms: the processes of each VP that used the processor
    // meanwhile, and any VP with two at once.
    let done = Arc::new(AtomicBool::new(false));
    let twice = Arc::new(Mutex::new(Vec::new()));
    let sampler = {
        let (done, twice, dir, tids) = (
            Arc::clone(&done),
            Arc::clone(&twice),
            vm.dir.path().to_path_buf(),
            tids.clone(),
        );
        std::thread::spawn(move || {
            let mut seen: HashMap<u64, HashMap<u32, u64>> = HashMap::new();
            while !done.load(Ordering::Relaxed) {
                for &tid in &tids {
                    let r = ran(&dir, tid, seen.entry(tid).or_default());
                    if r.len() > 1 {
                        twice.lock().expect("lock").push((tid, r));
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let checkpointed = |vm: &Vm, after: usize| {
        assert!(
            wait_until(Duration::from_secs(60), || checkpoints(vm) > after),
            "no checkpoint of the job\n{}",
            vm.all_logs()
        );
    };
    checkpointed(&vm, 0);
    // The master, cut off: the others elect another, which starts the VP
    // the old master ran again from the job's checkpoint once the old
    // master's lease has lapsed; healed, the old master steps down, ends
    // its VP (fenced) and joins again.
    let master = vm.master_seen_by(waiter).expect("a master");
    {
        let _cut = Partition::of(&vm.ip(master));
        std::thread::sleep(Duration::from_secs(10));
    }
    assert!(
        wait_until(Duration::from_secs(60), || all_alive(&vm, waiter)),
        "not every host back after the master's partition: {:?}\n{}",
        vm.hosts_at(waiter),
        vm.all_logs()
    );
    checkpointed(&vm, checkpoints(&vm));
    // A worker, cut off: given up once its lease has lapsed, its VP
    // started again elsewhere; healed, it is fenced and joins again.
    let now = vm.master_seen_by(waiter).expect("a master");
    let worker = (0..HOSTS)
        .find(|&i| i != now && i != waiter)
        .expect("a worker");
    {
        let _cut = Partition::of(&vm.ip(worker));
        std::thread::sleep(Duration::from_secs(10));
    }
    assert!(
        wait_until(Duration::from_secs(60), || all_alive(&vm, waiter)),
        "not every host back after h{worker}'s partition: {:?}\n{}",
        vm.hosts_at(waiter),
        vm.all_logs()
    );
    std::fs::write(&stop, "").expect("stop file");
    let lines = job_succeeds(job, &vm.all_logs());
    done.store(true, Ordering::Relaxed);
    sampler.join().expect("sampler");
    let logs = vm.all_logs();
    assert!(
        lines.iter().any(|l| l.contains(&format!(
            "of {HOSTS} VPs, every token once and in order: ok"
        ))),
        "{lines:?}\n{logs}"
    );
    let twice = twice.lock().expect("lock").clone();
    assert!(twice.is_empty(), "VPs ran twice at once: {twice:?}\n{logs}");
    for i in 0..HOSTS {
        if let Some(line) = fenced_with_a_lease(&vm.log(i)) {
            panic!("h{i} was fenced while its lease ran: {line}\n{logs}");
        }
    }
    // One voter out (and one in) a change, whatever happened.
    let changes: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("voters change:"))
        .collect();
    assert!(
        changes
            .iter()
            .all(|l| l.matches("votes no more").count() <= 1),
        "{changes:#?}"
    );
    assert!(
        vm.hosts_at(waiter)
            .is_some_and(|h| h.iter().filter(|h| h["voter"] == true).count() >= 3),
        "{:?}",
        vm.hosts_at(waiter)
    );
    // Both cut-off hosts were given up and fenced: the test went where it
    // meant to.
    for i in [master, worker] {
        assert!(
            vm.log(i).contains("fenced by the master"),
            "h{i} was not fenced\n{logs}"
        );
    }
}
