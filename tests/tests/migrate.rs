//! Migration on real daemons: a running VP checkpoints at a safe point and
//! goes on on another host with the same Tid, and no message is lost,
//! duplicated or reordered, however often it moves.

use std::ffi::OsStr;
use std::time::Duration;

use mig_tests::{bin, job_lines, job_succeeds, wait_until, Vm};

/// `stream` (at `program`) on 2 VPs as a `--wait` job, with `--json`,
/// `flags`, and `--until stop`.
fn stream_job(
    vm: &Vm,
    program: &std::path::Path,
    flags: &[&str],
    stop: &std::path::Path,
) -> std::process::Child {
    let mut args: Vec<&OsStr> = vec![OsStr::new("--json")];
    args.extend(flags.iter().map(OsStr::new));
    args.extend([OsStr::new("--until"), stop.as_os_str()]);
    vm.start_job(2, program, &args)
}

#[test]
fn a_stream_consumer_moved_200_times_loses_nothing() {
    let vm = Vm::start(3);
    let stop = vm.dir.path().join("stop");
    // A producer that pauses after every message: on a busy machine one
    // that outpaces its consumer builds a backlog while the consumer
    // moves, which it must work through before its next safe point, and
    // each move then takes longer than the last.
    let job = stream_job(&vm, &bin("stream"), &["--pause-every", "1"], &stop);
    let consumer = "t40002";
    assert!(
        wait_until(Duration::from_secs(10), || vm
            .where_is(consumer)
            .is_some_and(|(_, s)| s == "running")),
        "the consumer never ran"
    );
    for k in 0..200 {
        let (from, _) = vm.where_is(consumer).expect("consumer");
        let to = ["h0", "h1", "h2"]
            .into_iter()
            .find(|h| *h != from && (k % 2 == 0 || *h != "h0"))
            .unwrap_or("h1");
        // A move called off (no safe point in time: the machine is busy,
        // or the master changed under it) leaves the VP running where it
        // was, as promised; it is asked again, up to three times.
        let mut arrived = false;
        for _ in 0..3 {
            let out = vm.migrate(consumer, to);
            assert!(
                out.status.success(),
                "move {k} to {to}: {}\n{}\n{}\n{}",
                String::from_utf8_lossy(&out.stderr),
                vm.log(0),
                vm.log(1),
                vm.log(2)
            );
            arrived = wait_until(Duration::from_secs(30), || {
                vm.where_is(consumer) == Some((to.to_string(), "running".to_string()))
            });
            if arrived
                || !vm
                    .where_is(consumer)
                    .is_some_and(|(h, s)| h == from && s == "running")
            {
                break;
            }
        }
        assert!(
            arrived,
            "move {k}: the consumer did not come up on {to}: {:?}\n{}\n{}\n{}",
            vm.where_is(consumer),
            vm.log(0),
            vm.log(1),
            vm.log(2)
        );
    }
    std::fs::write(&stop, b"").expect("stop file");
    let lines = job_succeeds(job, "");
    let last = lines.last().expect("output");
    let v: serde_json::Value = serde_json::from_str(last).expect("JSON tally");
    // Every move restored it from its own image (the scheduler may have
    // moved it too), but one that missed its safe point on a busy machine
    // and was saved from outside instead (its memory goes on as it was).
    let instead: u64 = (0..3)
        .map(|i| {
            vm.log(i)
                .matches("it is saved from outside instead")
                .count() as u64
        })
        .sum();
    assert!(
        v["restored"].as_u64().is_some_and(|n| n + instead >= 200),
        "{last}, {instead} saved from outside instead"
    );
    assert_eq!(v["lost"], 0, "{last}");
    assert_eq!(v["duplicated"], 0, "{last}");
    assert_eq!(v["out_of_order"], 0, "{last}");
    assert!(v["received"].as_u64().is_some_and(|n| n > 0), "{last}");
}

#[test]
fn bad_moves_are_clear_errors_and_the_vp_stays() {
    let vm = Vm::start(2);
    let stop = vm.dir.path().join("stop");
    let job = vm.start_job(
        2,
        &bin("stream"),
        &[
            OsStr::new("--json"),
            OsStr::new("--until"),
            stop.as_os_str(),
        ],
    );
    assert!(wait_until(Duration::from_secs(10), || vm
        .where_is("t40002")
        .is_some_and(|(_, s)| s == "running")));
    let (at, _) = vm.where_is("t40002").expect("consumer");
    for (args, says) in [
        (vec!["migrate", "t40002", "--to", "h9"], "no live host"),
        (
            vec!["migrate", "t40002", "--to", at.as_str()],
            "already runs on",
        ),
        (vec!["migrate", "t4ffff", "--to", "h1"], "no VP"),
    ] {
        let out = vm.mig(&args);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    assert_eq!(vm.where_is("t40002").map(|(h, _)| h), Some(at));
    std::fs::write(&stop, b"").expect("stop file");
    let out = job.wait_with_output().expect("job");
    assert!(out.status.success());
}

#[test]
fn a_heat_stencil_moved_mid_run_gives_the_serial_answer_bit_for_bit() {
    let vm = Vm::start(3);
    let job = vm.start_job(
        3,
        &bin("heat"),
        &["--rows", "40", "--cols", "40", "--iters", "8000"],
    );
    let mut moved = 0;
    for tid in ["t40002", "t40003", "t40002"] {
        let running = wait_until(Duration::from_secs(10), || {
            vm.where_is(tid).is_some_and(|(_, s)| s == "running")
        });
        let Some((from, _)) = vm.where_is(tid).filter(|_| running) else {
            break; // the job ended first
        };
        let to = ["h0", "h1", "h2"]
            .into_iter()
            .find(|h| *h != from)
            .unwrap_or("h0");
        if vm.migrate(tid, to).status.success()
            && wait_until(Duration::from_secs(10), || {
                vm.where_is(tid) == Some((to.to_string(), "running".to_string()))
            })
        {
            moved += 1;
        }
    }
    let out = job.wait_with_output().expect("job");
    let lines = job_lines(&out);
    assert!(
        out.status.success(),
        "{lines:?}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(moved >= 1, "no move happened while the job ran");
    eprintln!("heat: {moved} moves while it ran");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("identical to the serial run: ok")),
        "{lines:?}"
    );
}

#[test]
fn a_vp_that_reaches_no_safe_point_is_saved_from_outside_instead_and_finishes_there() {
    // It links libmig and says it moves itself, then computes (sleeps)
    // for 5 s without a safe point: past the 300 ms it is given, it is
    // saved from outside as a plain program is, and the request it never
    // read is withdrawn inside it (it reads both at its end, and ends).
    let vm = Vm::start_config(2, "[daemon]\nmove_timeout_ms = 300\n");
    let job = vm.start_job(1, &bin("testvp"), &["stubborn", "5000"]);
    assert!(wait_until(Duration::from_secs(10), || vm
        .where_is("t40001")
        .is_some_and(|(_, s)| s == "running")));
    let (at, _) = vm.where_is("t40001").expect("running");
    let to = if at == "h0" { "h1" } else { "h0" };
    let out = vm.mig(&["migrate", "t40001", "--to", to]);
    let logs = || format!("{}\n{}", vm.log(0), vm.log(1));
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        logs()
    );
    assert_eq!(
        vm.where_is("t40001"),
        Some((to.to_string(), "running".into()))
    );
    assert!(
        logs().contains("no safe point within 300 ms: it is saved from outside instead"),
        "{}",
        logs()
    );
    let lines = job_succeeds(job, &logs());
    assert_eq!(
        lines.iter().filter(|l| *l == "stubborn done").count(),
        1,
        "{lines:?}"
    );
}

#[test]
fn a_vp_saved_from_outside_instead_moves_itself_again_where_it_lands() {
    // It sleeps 3 s without a safe point, and is moved meanwhile: saved
    // from outside instead (the request withdrawn inside it). Awake, with
    // a safe point every 5 ms, it moves itself the next time, and a job
    // checkpoint finds it at its safe point too, on the host it landed on.
    let vm = Vm::start_config(3, "[daemon]\nmove_timeout_ms = 1000\n");
    let dir = tempfile::tempdir().expect("tempdir");
    let stop = dir.path().join("stop");
    let job = vm.start_job(
        1,
        &bin("testvp"),
        &[OsStr::new("late"), OsStr::new("3000"), stop.as_os_str()],
    );
    let logs = || (0..3).map(|i| vm.log(i)).collect::<Vec<_>>().join("\n");
    let running = |vm: &Vm| {
        wait_until(Duration::from_secs(30), || {
            vm.where_is("t40001").is_some_and(|(_, s)| s == "running")
        })
    };
    assert!(running(&vm), "{}", logs());
    let move_on = |vm: &Vm| {
        let (at, _) = vm.where_is("t40001").expect("placed");
        let to = ["h0", "h1", "h2"]
            .into_iter()
            .find(|h| *h != at)
            .expect("another host");
        let out = vm.mig(&["migrate", "t40001", "--to", to]);
        assert!(
            out.status.success(),
            "{}\n{}",
            String::from_utf8_lossy(&out.stderr),
            logs()
        );
        assert!(running(vm), "{}", logs());
        assert_eq!(vm.where_is("t40001").map(|(h, _)| h), Some(to.to_string()));
    };
    move_on(&vm);
    assert!(
        wait_until(Duration::from_secs(30), || vm
            .output("j1")
            .contains("awake")),
        "{}",
        logs()
    );
    move_on(&vm);
    let saved = logs()
        .matches("no safe point within 1000 ms: it is saved from outside instead")
        .count();
    assert_eq!(saved, 1, "{}", logs());
    vm.mig_ok(&["checkpoint", "j1"]);
    std::fs::write(&stop, "").expect("stop");
    let lines = job_succeeds(job, &logs());
    // Started, and restored once from its own image.
    assert_eq!(
        lines
            .iter()
            .filter(|l| *l == "late done: started 2 times")
            .count(),
        1,
        "{lines:?}"
    );
}

#[test]
fn a_vp_moves_to_another_architecture_where_its_program_exists_and_nowhere_else() {
    let mut vm = Vm::start(1);
    let addr = vm.addr.clone();
    for (i, arch) in [(1, "aarch64-linux"), (2, "riscv64-linux")] {
        let (c, _) = vm.daemon(i, Some(&addr), &["--arch", arch]);
        vm.daemons.push(Some(c));
    }
    assert!(wait_until(Duration::from_secs(5), || vm
        .json(&["hosts"])
        .as_array()
        .is_some_and(|h| h.len() == 3)));
    // The job's program per architecture: a template; only x86_64 and
    // aarch64 builds exist.
    let progs = tempfile::tempdir().expect("tmp");
    let local = vm.json(&["hosts"])[0]["arch"]
        .as_str()
        .expect("arch")
        .to_string();
    for arch in [local.as_str(), "aarch64-linux"] {
        std::os::unix::fs::symlink(bin("stream"), progs.path().join(format!("stream-{arch}")))
            .expect("symlink");
    }
    let template = progs.path().join("stream-{arch}");
    let stop = vm.dir.path().join("stop");
    let job = stream_job(&vm, &template, &["--pause-every", "20"], &stop);
    assert!(wait_until(Duration::from_secs(10), || vm
        .where_is("t40002")
        == Some(("h0".into(), "running".into()))));
    // h2 has no build for its architecture: it refuses the VP, which runs
    // on where it was (the master looks at no disk; h2 tries and says why).
    let t = std::time::Instant::now();
    let err = loop {
        let out = vm.mig(&["migrate", "t40002", "--to", "h2"]);
        assert!(!out.status.success(), "moved to h2");
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        if !err.contains("has not said it can") || t.elapsed() > Duration::from_secs(10) {
            break err;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let missing = progs.path().join("stream-riscv64-linux");
    assert!(
        err.contains("h2 (riscv64-linux) could not take it in")
            && err.contains(&format!("{}: not found", missing.display()))
            && err.contains("still on h0"),
        "{err}\n{}",
        vm.all_logs()
    );
    assert!(
        wait_until(Duration::from_secs(10), || vm.where_is("t40002")
            == Some(("h0".into(), "running".into()))),
        "{:?}",
        vm.where_is("t40002")
    );
    let out = vm.migrate("t40002", "h1");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        wait_until(Duration::from_secs(10), || vm.where_is("t40002")
            == Some(("h1".into(), "running".into()))),
        "{}",
        vm.log(1)
    );
    std::fs::write(&stop, b"").expect("stop file");
    let out = job.wait_with_output().expect("job");
    let lines = job_lines(&out);
    assert!(out.status.success(), "{lines:?}");
    let v: serde_json::Value = serde_json::from_str(lines.last().expect("tally")).expect("JSON");
    // Restored twice: on h0 from the image h2 refused, then on h1.
    assert_eq!(
        (
            v["restored"].as_u64(),
            v["lost"].as_u64(),
            v["duplicated"].as_u64()
        ),
        (Some(2), Some(0), Some(0)),
        "{v}"
    );
}

#[test]
fn a_large_state_sent_on_while_it_is_written_arrives_byte_for_byte() {
    // 24 MiB: several parts go while the VP still writes, then the rest
    // and the preamble (which the move's source logs in detail).
    let vm = Vm::start_config(2, "[daemon]\nlog = \"info,server::move_out=debug\"\n");
    let job = vm.start_job(1, &bin("testvp"), &["hold", "24", "check"]);
    let tid = "t40001";
    assert!(wait_until(Duration::from_secs(20), || vm
        .where_is(tid)
        .is_some_and(|(_, s)| s == "running")));
    // Four moves: the fourth starts at a safe point, which the VP reaches
    // only after saying how its third restore went.
    for _ in 0..4 {
        let (from, _) = vm.where_is(tid).expect("placed");
        let to = if from == "h0" { "h1" } else { "h0" };
        assert!(vm.migrate(tid, to).status.success());
        assert!(
            wait_until(Duration::from_secs(20), || vm
                .where_is(tid)
                .is_some_and(|(h, s)| h == to && s == "running")),
            "{}\n{}",
            vm.log(0),
            vm.log(1)
        );
    }
    let _ = vm.mig(&["kill", tid]);
    let out = job.wait_with_output().expect("job");
    let lines = job_lines(&out);
    let intact = lines
        .iter()
        .filter(|l| *l == &format!("restored {} intact", 24 << 20))
        .count();
    assert!(
        intact >= 3,
        "{lines:?}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!String::from_utf8_lossy(&out.stderr).contains("differs"));
    // The parts went while the VP was writing its image.
    let logs = format!("{}{}", vm.log(0), vm.log(1));
    assert!(logs.contains("sending on the image of VP t40001"), "{logs}");
}

#[test]
fn an_image_cut_off_mid_way_leaves_no_partial_file_and_the_vp_starts_again() {
    // A VP runs at nice 19: on a busy machine it may take long to reach
    // the safe point it writes its image at (what is tested is the cut).
    let mut vm = Vm::start_config(3, "[daemon]\nmove_timeout_ms = 60000\n");
    let job = vm.start_job(1, &bin("testvp"), &["hold", "192"]);
    let tid = "t40001";
    let on = |vm: &Vm, h: &str| {
        wait_until(Duration::from_secs(30), || {
            vm.where_is(tid)
                .is_some_and(|(at, s)| at == h && s == "running")
        })
    };
    assert!(wait_until(Duration::from_secs(30), || vm
        .where_is(tid)
        .is_some_and(|(_, s)| s == "running")));
    // The source must not be the master: its end would be a change of
    // master too. (The master is h0 at first, but one busy relaying a large
    // image may lose its place to another voter.)
    let master = |vm: &Vm| -> String {
        let hosts = vm.json(&["hosts"]);
        hosts
            .as_array()
            .and_then(|a| a.iter().find(|h| h["master"] == true))
            .and_then(|h| h["name"].as_str())
            .unwrap_or("h0")
            .to_string()
    };
    let others = |vm: &Vm, but: &[&str]| -> String {
        let m = master(vm);
        ["h0", "h1", "h2"]
            .into_iter()
            .find(|h| *h != m && !but.contains(h))
            .expect("a third host")
            .to_string()
    };
    if vm.where_is(tid).is_some_and(|(h, _)| h == master(&vm)) {
        let to = others(&vm, &[]);
        assert!(vm.migrate(tid, &to).status.success());
        assert!(on(&vm, &to), "{}", vm.log(0));
    }
    let (from, _) = vm.where_is(tid).expect("placed");
    let to = others(&vm, &[&from]);
    let index = |h: &str| h[1..].parse::<usize>().expect("hN");
    let (src, dst) = (index(&from), index(&to));
    let part = vm
        .dir
        .path()
        .join(format!("h{dst}"))
        .join("t40001.restore.part");
    assert!(vm.migrate(tid, &format!("h{dst}")).status.success());
    // As soon as its image starts arriving, its source host dies.
    let logs = |vm: &Vm| format!("{}\n{}\n{}", vm.log(0), vm.log(1), vm.log(2));
    assert!(
        wait_until(Duration::from_secs(30), || part.exists()),
        "{}",
        logs(&vm)
    );
    vm.signal(src, nix::sys::signal::Signal::SIGKILL);
    // (Generous: on a loaded machine the parts already in flight may take
    // a while to be written.)
    let cut_off = "cannot restore VP t40001: its image stopped coming after";
    assert!(
        wait_until(Duration::from_secs(60), || vm.log(dst).contains(cut_off)),
        "{}",
        logs(&vm)
    );
    assert!(!part.exists(), "{}", vm.log(dst));
    // Nothing of it is left (its source died with the image it kept): it
    // is lost on its way, and starts again (a job of one VP) on a host
    // that is alive.
    let src_name = format!("h{src}");
    assert!(
        wait_until(Duration::from_secs(60), || vm
            .where_is(tid)
            .is_some_and(|(h, s)| s == "running" && h != src_name)),
        "{:?}\n{}",
        vm.where_is(tid),
        logs(&vm)
    );
    let _ = vm.mig(&["kill", "j1"]);
    let _ = job.wait_with_output();
}

#[test]
fn a_vp_moved_by_hand_takes_its_place_in_the_allocation_map_with_it() {
    let vm = Vm::start(2);
    let stop = vm.dir.path().join("stop");
    let job = vm.start_job(1, &bin("testvp"), &[OsStr::new("spin"), stop.as_os_str()]);
    let tid = "t40001";
    assert!(wait_until(Duration::from_secs(20), || vm
        .where_is(tid)
        .is_some_and(|(_, s)| s == "running")));
    let mapped_on = |vm: &Vm| -> Vec<String> {
        vm.json(&["map"])["slots"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|s| s.as_array().cloned().unwrap_or_default())
            .filter_map(|c| c["processor"].as_str().map(str::to_string))
            .collect()
    };
    let (from, _) = vm.where_is(tid).expect("placed");
    assert!(mapped_on(&vm)
        .iter()
        .all(|p| p.starts_with(&format!("{from}/"))));
    let to = if from == "h0" { "h1" } else { "h0" };
    let out = vm.migrate(tid, to);
    assert!(out.status.success(), "{}", vm.log(0));
    assert!(wait_until(Duration::from_secs(20), || vm
        .where_is(tid)
        .is_some_and(|(h, s)| h == to && s == "running")));
    assert!(
        wait_until(Duration::from_secs(10), || {
            let on = mapped_on(&vm);
            !on.is_empty() && on.iter().all(|p| p.starts_with(&format!("{to}/")))
        }),
        "{}\n{}",
        vm.json(&["map"]),
        vm.log(0)
    );
    // And back, waiting for it: mig migrate says when it has moved.
    let out = vm.mig(&["migrate", tid, "--to", &from]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("moved to {from}")),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(vm.where_is(tid), Some((from.clone(), "running".into())));
    std::fs::write(&stop, "").expect("stop");
    let lines = job_succeeds(job, &vm.log(0));
    // It started three times: where it began, there, and back.
    assert!(lines.iter().any(|l| l.contains("on 3 hosts")), "{lines:?}");
}

#[test]
fn a_vp_whose_target_dies_mid_move_runs_on_from_what_its_source_kept() {
    // (A long move timeout: the VP that reaches no safe point must still be
    // on its way when its target dies.)
    let mut vm = Vm::start_config(4, "[daemon]\nmove_timeout_ms = 30000\n");
    let logs = |vm: &Vm| (0..4).map(|i| vm.log(i)).collect::<Vec<_>>().join("\n");
    let index = |h: &str| h[1..].parse::<usize>().expect("hN");
    let running = |vm: &Vm, tid: &str| {
        wait_until(Duration::from_secs(30), || {
            vm.where_is(tid).is_some_and(|(_, s)| s == "running")
        })
    };
    // A target that is neither the master (h0) nor where the VP is.
    let target_for = |from: &str, dead: &[&str]| -> String {
        ["h1", "h2", "h3"]
            .into_iter()
            .find(|h| *h != from && !dead.contains(h))
            .expect("a target")
            .to_string()
    };

    // 1. The image was written and sent, and the target never started it.
    let stop = vm.dir.path().join("stop");
    let spin = vm.start_job(1, &bin("testvp"), &[OsStr::new("spin"), stop.as_os_str()]);
    assert!(running(&vm, "t40001"), "{}", logs(&vm));
    let (from, _) = vm.where_is("t40001").expect("placed");
    let to = target_for(&from, &[]);
    let kept = vm
        .dir
        .path()
        .join(format!("h{}", index(&from)))
        .join("t40001.sent");
    vm.signal(index(&to), nix::sys::signal::Signal::SIGSTOP);
    let out = vm.migrate("t40001", &to);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        wait_until(Duration::from_secs(30), || kept.exists()),
        "the source kept no image\n{}",
        logs(&vm)
    );
    vm.signal(index(&to), nix::sys::signal::Signal::SIGKILL);
    assert!(
        wait_until(Duration::from_secs(30), || vm.where_is("t40001")
            == Some((from.clone(), "running".into()))),
        "the VP did not run on at its source: {:?}\n{}",
        vm.where_is("t40001"),
        logs(&vm)
    );
    assert!(
        vm.log(index(&from))
            .contains("starts again here from the image it sent"),
        "{}",
        logs(&vm)
    );
    assert!(!kept.exists(), "its kept image was not removed");
    let dead = to;

    // 2. The VP had not reached its safe point when its target died.
    let stubborn = vm.start_job(1, &bin("testvp"), &["stubborn", "6000"]);
    let mut tid = String::new();
    assert!(
        wait_until(Duration::from_secs(30), || {
            let ps = vm.json(&["ps"]);
            let found = ps.as_array().and_then(|a| {
                a.iter()
                    .find(|v| v["job"] == "j2" && v["state"] == "running")
                    .and_then(|v| v["tid"].as_str())
            });
            found.map(|t| tid = t.to_string()).is_some()
        }),
        "{}",
        logs(&vm)
    );
    let tid = tid.as_str();
    let (from, _) = vm.where_is(tid).expect("placed");
    let to = target_for(&from, &[&dead]);
    let out = vm.migrate(tid, &to);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        vm.where_is(tid).map(|(_, s)| s),
        Some(format!("moving to {to}"))
    );
    vm.signal(index(&to), nix::sys::signal::Signal::SIGKILL);
    assert!(
        wait_until(Duration::from_secs(30), || vm.where_is(tid)
            == Some((from.clone(), "running".into()))),
        "the VP did not stay at its source: {:?}\n{}",
        vm.where_is(tid),
        logs(&vm)
    );
    assert!(
        vm.log(index(&from))
            .contains("its move's target is gone; it stays here"),
        "{}",
        logs(&vm)
    );
    let lines = job_succeeds(stubborn, "the VP that stayed");
    assert!(lines.iter().any(|l| l == "stubborn done"), "{lines:?}");

    // Both jobs end well: the first once told to.
    std::fs::write(&stop, b"").expect("stop file");
    let lines = job_succeeds(spin, "the VP that started again from its image");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("spin done:") && l.ends_with("on 2 hosts")),
        "{lines:?}"
    );
}

#[test]
fn a_stream_over_a_direct_link_loses_nothing_as_its_consumer_moves_away_and_back() {
    // Two hosts of two processors: the consumer moves between the
    // producer's host (where they talk through a direct link's ring) and
    // the other (through the daemons), 40 times, while the stream runs.
    let vm = Vm::start_procs(2, 2, &[]);
    let stop = vm.dir.path().join("stop");
    let job = stream_job(
        &vm,
        &bin("stream"),
        &["--direct", "--pause-every", "20"],
        &stop,
    );
    let logs = || format!("{}\n{}", vm.log(0), vm.log(1));
    let running = |tid: &str| {
        wait_until(Duration::from_secs(20), || {
            vm.where_is(tid).is_some_and(|(_, s)| s == "running")
        })
    };
    assert!(running("t40001") && running("t40002"), "{}", logs());
    let (producer, _) = vm.where_is("t40001").expect("producer");
    for k in 0..40 {
        let (at, _) = vm.where_is("t40002").expect("consumer");
        let to = if at == "h0" { "h1" } else { "h0" };
        let out = vm.migrate("t40002", to);
        assert!(
            out.status.success(),
            "move {k}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            logs()
        );
        assert!(
            wait_until(Duration::from_secs(20), || vm.where_is("t40002")
                == Some((to.to_string(), "running".to_string()))),
            "move {k}: not up on {to}\n{}",
            logs()
        );
        if to == producer {
            // Let messages flow over the direct link for a moment.
            std::thread::sleep(Duration::from_millis(30));
        }
    }
    std::fs::write(&stop, b"").expect("stop file");
    let lines = job_succeeds(job, "");
    let last = lines.last().expect("output");
    let v: serde_json::Value = serde_json::from_str(last).expect("JSON tally");
    assert_eq!(v["restored"], 40, "{last}");
    assert_eq!(v["lost"], 0, "{last}");
    assert_eq!(v["duplicated"], 0, "{last}");
    assert_eq!(v["out_of_order"], 0, "{last}");
    assert!(v["direct"].as_u64().is_some_and(|n| n > 0), "{last}");
}

#[test]
fn a_target_that_cannot_start_the_program_sends_the_vp_back_to_run_on() {
    // The job's program is in a directory of its own; h2 (a mount
    // namespace of its own) sees an empty directory there: the master
    // finds the program, h2 cannot start it from the image it got.
    let progs = tempfile::tempdir().expect("tmp");
    let dir = progs.path().join("bin");
    let empty = progs.path().join("empty");
    std::fs::create_dir_all(&dir).expect("bin dir");
    std::fs::create_dir_all(&empty).expect("empty dir");
    let prog = dir.join("stream");
    std::fs::copy(bin("stream"), &prog).expect("copy stream");
    let mut vm = Vm::start(2);
    let stop = vm.dir.path().join("stop");
    let job = stream_job(&vm, &prog, &["--pause-every", "20"], &stop);
    assert!(wait_until(Duration::from_secs(10), || vm
        .where_is("t40002")
        .is_some_and(|(_, s)| s == "running")));
    let (src, _) = vm.where_is("t40002").expect("consumer");
    let addr = vm.addr.clone();
    let (c, _) = vm.daemon_seeing(2, Some(&addr), &[], &[(&empty, &dir)]);
    vm.daemons.push(Some(c));
    assert!(wait_until(Duration::from_secs(10), || vm
        .json(&["hosts"])
        .as_array()
        .is_some_and(|h| h.len() == 3)));
    let out = vm.mig(&["migrate", "t40002", "--to", "h2"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "moved to h2: {err}");
    let arch = vm.json(&["hosts"])[0]["arch"]
        .as_str()
        .expect("arch")
        .to_string();
    assert!(
        err.contains(&format!("h2 ({arch}) could not take it in"))
            && err.contains(&format!("{}: not found", prog.display())),
        "{err}\n{}",
        vm.all_logs()
    );
    assert!(
        wait_until(Duration::from_secs(20), || vm.where_is("t40002")
            == Some((src.clone(), "running".into()))),
        "{:?}\n{}",
        vm.where_is("t40002"),
        vm.all_logs()
    );
    std::fs::write(&stop, b"").expect("stop file");
    let lines = job_succeeds(job, &vm.all_logs());
    let v: serde_json::Value = serde_json::from_str(lines.last().expect("tally")).expect("JSON");
    assert_eq!(
        (v["lost"].as_u64(), v["duplicated"].as_u64()),
        (Some(0), Some(0)),
        "{v}"
    );
}
