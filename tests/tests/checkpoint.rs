//! Job checkpoints on real daemons: a consistent checkpoint of a whole job,
//! each image kept on two hosts, a host killed with SIGKILL mid-run and the
//! job finishing with the right answer from its checkpoint, a damaged
//! checkpoint refused and the one before it used, and no image left
//! behind by a job that ended.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use mig_tests::{bin, job_succeeds, up, wait_until, Up, Vm};

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
    // Every image of a complete generation on two hosts; only the last
    // two generations kept anywhere.
    let (g, images) = newest_whole(&vm);
    assert_eq!(images.len(), 3, "generation {g}: {images:?}");
    assert!(images.values().all(|c| c.len() == 2), "{images:?}");
    for h in 0..3 {
        let kept = std::fs::read_dir(vm.dir.path().join(format!("h{h}/ckpt/j1")))
            .map(|d| d.count())
            .unwrap_or(0);
        assert!(kept <= 2, "h{h} keeps {kept} generations");
    }
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

/// Every copy of generation `g`'s images of job j1, by image (its file
/// name), on any of the three hosts.
fn copies(vm: &Vm, g: u64) -> BTreeMap<String, Vec<PathBuf>> {
    let mut out: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for h in 0..3 {
        let dir = vm.dir.path().join(format!("h{h}/ckpt/j1/g{g}"));
        // (Whole images only: a copy may still be arriving.)
        for p in std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "img"))
        {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
            out.entry(name.unwrap_or_default()).or_default().push(p);
        }
    }
    out
}

/// The newest generation of job j1 that the master says is complete, and
/// its copies.
fn newest_whole(vm: &Vm) -> (u64, BTreeMap<String, Vec<PathBuf>>) {
    let log = vm.log(0);
    let g = log
        .lines()
        .filter_map(|l| l.split("checkpointed (generation ").nth(1))
        .filter_map(|r| r.split(')').next()?.parse::<u64>().ok())
        .next_back()
        .expect("a complete generation");
    (g, copies(vm, g))
}

/// Truncate one image, flip a byte in the others.
fn damage(files: &[PathBuf]) {
    for (i, f) in files.iter().enumerate() {
        let mut bytes = std::fs::read(f).expect("image");
        if i == 0 {
            bytes.truncate(bytes.len() / 2);
        } else {
            let mid = bytes.len() / 2;
            bytes[mid] ^= 0x40;
        }
        std::fs::write(f, &bytes).expect("damage");
    }
}

#[test]
fn damaged_images_are_refused_their_copies_used_and_with_none_intact_nothing_is_stopped() {
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
    // One copy of every image of both generations kept (5 and 4) damaged:
    // each is found so, the other copy is used, and 5 is.
    let g5 = copies(&vm, 5);
    let g4 = copies(&vm, 4);
    assert!(
        g5.len() == 3 && g5.values().chain(g4.values()).all(|c| c.len() == 2),
        "{g5:?} {g4:?}"
    );
    let (first, second): (Vec<PathBuf>, Vec<PathBuf>) = g5
        .values()
        .chain(g4.values())
        .map(|c| (c[0].clone(), c[1].clone()))
        .unzip();
    damage(&first);
    let out = vm.mig(&["restart", "j1"]);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("generation 5"),
        "{}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        vm.log(0)
    );
    // It answers once the job runs again.
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("3 VPs run again"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(running(&vm), 3);
    let log = vm.log(0);
    assert!(log.contains("restoring from generation 5"), "{log}");
    assert!(
        log.contains("t40001.img: checkpoint is truncated")
            || log.contains("t40001.img: checkpoint is corrupted"),
        "{log}"
    );
    assert!(wait_until(Duration::from_secs(10), || running(&vm) == 3));
    // Every copy of every generation damaged: a clear error, a non-zero
    // exit, and the job is not stopped: it goes on and finishes right.
    // (The first copies are still damaged.)
    damage(&second);
    let pids = || -> Vec<u64> {
        vm.json(&["ps"])
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v["pid"].as_u64())
            .collect()
    };
    let before = pids();
    let out = vm.mig(&["restart", "j1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("no intact copy") && err.contains("goes on as it was"),
        "{err}"
    );
    assert_eq!(before, pids(), "a VP was stopped");
    finishes_right(job, &vm);
}

#[test]
fn with_default_settings_a_host_killed_before_any_checkpoint_ends_the_job_with_the_reason() {
    // Its VPs exchange halos: one started again from the beginning while
    // the others are mid-run would leave them waiting for ever.
    let mut vm = Vm::start(3);
    let job = heat(&vm, "200000");
    // (Once each has said it keeps its state through libmig.)
    assert!(wait_until(Duration::from_secs(10), || vm
        .json(&["ps"])
        .as_array()
        .is_some_and(|a| a.len() == 3
            && a.iter().all(
                |v| v["state"] == "running" && v["movable"] == true
            ))));
    vm.signal(2, nix::sys::signal::Signal::SIGKILL);
    let out = job.wait_with_output().expect("spawn --wait");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        out.status.code(),
        Some(libmig::msg::STATUS_LOST),
        "the status of a job mig ended: {text}"
    );
    assert!(
        text.contains("no checkpoint to go back to"),
        "{text}\n{}",
        vm.log(0)
    );
    assert!(!text.contains("failed to start"), "{text}");
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
        .contains("1 VP spawned after its checkpoint dropped"));
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

#[test]
fn a_checkpoint_larger_than_a_frame_is_taken_kept_and_restored() {
    // 80 MiB of state per VP: more than one frame holds (64 MiB), so the
    // images travel to the master in pieces. (Writing them may take more
    // than the default 10 s on a busy machine, where VPs get only what
    // the owners' work leaves: that failure is right, and not this test's
    // subject.)
    let vm = Vm::start_config(2, "[daemon]\nmove_timeout_ms = 60000\n");
    vm.mig_ok(&[
        "spawn",
        "-n",
        "2",
        "--",
        &bin("testvp").display().to_string(),
        "hold",
        "80",
        "check",
    ]);
    assert!(wait_until(Duration::from_secs(30), || running(&vm) == 2));
    assert!(wait_until(Duration::from_secs(30), || vm
        .output("j1")
        .matches("] ready")
        .count()
        == 2));
    let out = vm.mig(&["checkpoint", "j1"]);
    assert!(
        out.status.success(),
        "{}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        vm.log(0),
        vm.log(1)
    );
    let out = vm.mig(&["restart", "j1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        wait_until(Duration::from_secs(60), || vm
            .output("j1")
            .matches("restored 83886080 intact")
            .count()
            == 2),
        "{}\n{}",
        vm.log(0),
        vm.log(1)
    );
    vm.mig_ok(&["kill", "j1"]);
}

/// The image files under every host's `ckpt/` in a machine's directory.
fn images_in(dir: &Path) -> Vec<PathBuf> {
    fn walk(p: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(p).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    for h in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        walk(&h.path().join("ckpt"), &mut out);
    }
    out
}

#[test]
fn no_image_outlives_its_job_nor_the_machine_it_ran_on() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("vm");
    let ok = |out: std::process::Output| {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    ok(up(&dir, 3));
    let vm = Up(dir.clone());
    let heat = bin("heat").display().to_string();
    let spawn = |vm: &Up| {
        let job = ok(vm.mig(&["spawn", "-n", "3", "--", &heat, "--iters", "100000000"]));
        assert!(wait_until(Duration::from_secs(20), || {
            let out = vm.mig(&["ps", &job, "--json"]);
            serde_json::from_slice::<serde_json::Value>(&out.stdout).is_ok_and(|ps| {
                ps.as_array().is_some_and(|a| {
                    a.len() == 3
                        && a.iter()
                            .all(|v| v["state"] == "running" && v["movable"] == true)
                })
            })
        }));
        job
    };
    // Checkpointed, restarted from it, then killed: nothing of it is left.
    let job = spawn(&vm);
    ok(vm.mig(&["checkpoint", &job]));
    assert!(!images_in(&dir).is_empty());
    ok(vm.mig(&["restart", &job]));
    ok(vm.mig(&["kill", &job]));
    assert!(
        wait_until(Duration::from_secs(10), || images_in(&dir).is_empty()),
        "{:?}",
        images_in(&dir)
    );
    // Checkpointed and running when the machine halts: its images stay
    // until the next machine there starts, which says they are removed and
    // removes them (no master counts them any more).
    let job = spawn(&vm);
    ok(vm.mig(&["checkpoint", &job]));
    drop(vm);
    assert!(!images_in(&dir).is_empty());
    let again = up(&dir, 3);
    let said = String::from_utf8_lossy(&again.stderr).into_owned();
    ok(again);
    let vm = Up(dir.clone());
    assert!(
        said.contains(&format!("the checkpoints of {job} it left")) && said.contains("are removed"),
        "{said}"
    );
    assert!(
        wait_until(Duration::from_secs(10), || images_in(&dir).is_empty()),
        "{:?}",
        images_in(&dir)
    );
    drop(vm);
    let third = up(&dir, 3);
    let said = String::from_utf8_lossy(&third.stderr).into_owned();
    ok(third);
    let _vm = Up(dir.clone());
    assert!(!said.contains("checkpoints"), "{said}");
}
