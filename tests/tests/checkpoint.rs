//! Job checkpoints on real daemons: a consistent checkpoint of a whole job,
//! a host killed with SIGKILL mid-run and the job finishing with the right
//! answer from its checkpoint, a damaged checkpoint refused and the one
//! before it used.

use std::path::Path;
use std::process::Child;
use std::time::Duration;

use mig_tests::{bin, job_succeeds, wait_until, Vm};

/// The heat stencil on 3 VPs: deterministic, checked against a serial run.
fn heat(vm: &Vm, iters: &str) -> Child {
    vm.start_job(
        3,
        &bin("heat"),
        &["--rows", "48", "--cols", "48", "--iters", iters],
    )
}

fn running(vm: &Vm) -> usize {
    vm.json(&["ps"])
        .as_array()
        .map(|a| a.iter().filter(|v| v["state"] == "running").count())
        .unwrap_or(0)
}

fn finishes_right(job: Child, vm: &Vm) {
    let lines = job_succeeds(job, &vm.log(0));
    assert!(
        lines
            .iter()
            .any(|l| l.contains("identical to the serial run: ok")),
        "{lines:?}"
    );
}

#[test]
fn a_host_killed_mid_run_and_the_job_finishes_from_its_checkpoint() {
    let mut vm = Vm::start_config(3, "[daemon]\ncheckpoint_interval_s = 0.3\n");
    let job = heat(&vm, "12000");
    assert!(wait_until(Duration::from_secs(10), || running(&vm) == 3));
    assert!(
        wait_until(Duration::from_secs(20), || vm
            .log(0)
            .contains("checkpointed (generation 2)")),
        "{}",
        vm.log(0)
    );
    // A copy of every image on the master, and of some on the other hosts.
    let g = |h: &str, sub: &str| vm.dir.path().join(h).join(sub).join("j1");
    assert!(g("h0", "ckpt").is_dir());
    // Only the last two generations are kept.
    let kept = std::fs::read_dir(g("h0", "ckpt"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert!((1..=2).contains(&kept), "{kept} generations kept");
    assert!(g("h1", "replicas").is_dir() || g("h2", "replicas").is_dir());
    vm.signal(2, nix::sys::signal::Signal::SIGKILL);
    assert!(
        wait_until(Duration::from_secs(10), || vm
            .log(0)
            .contains("restarting job j1 from its checkpoint")),
        "{}",
        vm.log(0)
    );
    finishes_right(job, &vm);
}

#[test]
fn a_damaged_checkpoint_is_refused_and_the_one_before_is_used() {
    let vm = Vm::start(3);
    let job = heat(&vm, "12000");
    assert!(wait_until(Duration::from_secs(10), || running(&vm) == 3));
    // Back to back: a VP may read the end of one and the start of the next
    // at once.
    for g in 1..=5 {
        let out = vm.mig(&["checkpoint", "j1"]);
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && said.contains(&format!("generation {g}")),
            "{said}{}\n{}\n{}\n{}",
            String::from_utf8_lossy(&out.stderr),
            vm.log(0),
            vm.log(1),
            vm.log(2)
        );
    }
    // Generation 5: one image truncated, one with a flipped byte.
    let g2 = vm.dir.path().join("h0/ckpt/j1/g5");
    let truncated = g2.join("t40001.img");
    let bytes = std::fs::read(&truncated).expect("image");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).expect("truncate");
    let flipped = g2.join("t40002.img");
    let mut bytes = std::fs::read(&flipped).expect("image");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&flipped, &bytes).expect("flip");
    let out = vm.mig(&["restart", "j1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        wait_until(Duration::from_secs(10), || vm
            .log(0)
            .contains("restoring from generation 4")),
        "{}",
        vm.log(0)
    );
    let log = vm.log(0);
    assert!(
        log.contains("checkpoint generation 5 refused") && log.contains("t40001.img"),
        "{log}"
    );
    finishes_right(job, &vm);
}

#[test]
fn checkpoint_and_restart_say_what_is_wrong() {
    let vm = Vm::start(1);
    let out = vm.mig(&["checkpoint", "j9"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no job \"j9\""));
    let stop = vm.dir.path().join("stop");
    let job = vm.start_job(1, &bin("testvp"), &[Path::new("spin"), &stop]);
    assert!(wait_until(Duration::from_secs(10), || running(&vm) == 1));
    let out = vm.mig(&["restart", "j1"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("has no checkpoint yet"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&stop, "").expect("stop");
    let _ = job.wait_with_output();
}

/// The Tids of the job's running VPs, as `mig ps --json` shows them.
fn running_tids(vm: &Vm) -> Vec<String> {
    vm.json(&["ps"])
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|v| v["state"] == "running")
                .map(|v| v["tid"].to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_restart_drops_the_vps_spawned_after_its_checkpoint() {
    let vm = Vm::start(2);
    let stop = vm.dir.path().join("stop");
    let job = vm.start_job(1, &bin("testvp"), &[Path::new("respawn"), &stop]);
    assert!(wait_until(Duration::from_secs(10), || running(&vm) == 1));
    let out = vm.mig(&["checkpoint", "j1"]);
    assert!(out.status.success(), "{}", vm.log(0));
    // After the checkpoint, the VP spawns a child.
    std::fs::write(format!("{}.spawn", stop.display()), "").expect("go");
    assert!(wait_until(Duration::from_secs(10), || running(&vm) == 2));
    let first = running_tids(&vm);
    vm.mig_ok(&["restart", "j1"]);
    // The child is not in the checkpoint: it is dropped, and the parent,
    // rolled back to before it spawned it, spawns another.
    assert!(
        wait_until(Duration::from_secs(10), || {
            let now = running_tids(&vm);
            now.len() == 2 && now.iter().any(|t| !first.contains(t))
        }),
        "{:?} then {:?}\n{}",
        first,
        running_tids(&vm),
        vm.log(0)
    );
    assert!(vm
        .log(0)
        .contains("1 VPs spawned after its checkpoint dropped"));
    std::fs::write(&stop, "").expect("stop");
    let lines = job_succeeds(job, &vm.log(0));
    for want in ["spawned", "up, life 2, child None", "respawn done"] {
        assert!(lines.iter().any(|l| l.contains(want)), "{want}: {lines:?}");
    }
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("spawned") && l.ends_with("in life 2")),
        "{lines:?}"
    );
}

#[test]
fn messages_sent_after_the_checkpoint_a_job_restarts_from_are_never_delivered() {
    let vm = Vm::start(2);
    let stop = vm.dir.path().join("stop");
    let job = vm.start_job(2, &bin("testvp"), &[Path::new("sequence"), &stop]);
    assert!(wait_until(Duration::from_secs(10), || running(&vm) == 2));
    // Twice: checkpoint, let the stream run on, go back to the checkpoint.
    for round in 1..=2 {
        let out = vm.mig(&["checkpoint", "j1"]);
        assert!(out.status.success(), "{}", vm.log(0));
        std::thread::sleep(Duration::from_millis(200));
        let out = vm.mig(&["restart", "j1"]);
        assert!(out.status.success(), "{}", vm.log(0));
        assert!(
            wait_until(Duration::from_secs(10), || vm
                .log(0)
                .matches("restoring from generation")
                .count()
                == round
                && running(&vm) == 2),
            "{}",
            vm.log(0)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::fs::write(&stop, "").expect("stop");
    let lines = job_succeeds(job, &vm.log(0));
    let last: serde_json::Value = lines
        .iter()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no summary: {lines:?}"));
    assert_eq!(last["lives"], 3, "{last}");
    assert_eq!(last["out_of_order"], 0, "{last}");
    assert_eq!(last["stale"], 0, "{last}");
    assert!(last["received"].as_u64().unwrap_or(0) > 0, "{last}");
}

/// The VPs the scheduler's map places, over every slot.
fn mapped_vps(vm: &Vm) -> usize {
    vm.json(&["map"])["slots"]
        .as_array()
        .map(|slots| {
            slots
                .iter()
                .flat_map(|s| s.as_array().cloned().unwrap_or_default())
                .map(|c| c["vps"].as_array().map_or(0, Vec::len))
                .sum()
        })
        .unwrap_or(0)
}

#[test]
fn a_vp_that_ended_after_the_checkpoint_is_scheduled_again_when_it_comes_back() {
    let vm = Vm::start(2);
    let stop = vm.dir.path().join("stop");
    let job = vm.start_job(2, &bin("testvp"), &[Path::new("spin"), &stop]);
    assert!(wait_until(Duration::from_secs(10), || running(&vm) == 2));
    assert_eq!(mapped_vps(&vm), 2);
    let out = vm.mig(&["checkpoint", "j1"]);
    assert!(out.status.success(), "{}\n{}", vm.log(0), vm.log(1));
    // VP 1 ends after the checkpoint: the scheduler lets its cell go.
    let one = format!("{}.1", stop.display());
    std::fs::write(&one, "").expect("end VP 1");
    assert!(wait_until(Duration::from_secs(10), || running(&vm) == 1));
    assert!(wait_until(Duration::from_secs(10), || mapped_vps(&vm) == 1));
    // The restart brings it back from the checkpoint: it runs, and has its
    // place in the map again (so gang slicing knows it).
    std::fs::remove_file(&one).expect("VP 1 may run again");
    vm.mig_ok(&["restart", "j1"]);
    assert!(
        wait_until(Duration::from_secs(20), || running(&vm) == 2),
        "{}",
        vm.log(0)
    );
    assert!(
        wait_until(Duration::from_secs(10), || mapped_vps(&vm) == 2),
        "{}\n{}",
        vm.json(&["map"]),
        vm.log(0)
    );
    std::fs::write(&stop, "").expect("stop");
    let lines = job_succeeds(job, &vm.log(0));
    assert_eq!(
        lines.iter().filter(|l| l.contains("spin done")).count(),
        3,
        "{lines:?}"
    );
}
