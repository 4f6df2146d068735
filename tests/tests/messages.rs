//! Message passing on real daemons over loopback: the examples check their
//! own answers, and `testvp` exercises order, wildcards, groups, notify,
//! size limits, errors, a misbehaving VP and flow control.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use mig_tests::{bin, job_lines, peak_rss_mib, Vm};

/// Run a job to its end; its lines and whether it succeeded.
fn job(vm: &Vm, n: u32, prog: &str, args: &[&str]) -> (bool, Vec<String>) {
    let n = n.to_string();
    let path = bin(prog);
    let path = path.to_str().expect("a UTF-8 path");
    let mut a = vec!["spawn", "-n", &n, "--wait", "--", path];
    a.extend_from_slice(args);
    let out = vm.mig(&a);
    let lines = job_lines(&out);
    if !out.status.success() {
        eprintln!(
            "job {prog} failed:\n{}\n{}\nmaster log:\n{}",
            lines.join("\n"),
            String::from_utf8_lossy(&out.stderr),
            vm.log(0)
        );
    }
    (out.status.success(), lines)
}

fn has(lines: &[String], needle: &str) -> bool {
    lines.iter().any(|l| l.contains(needle))
}

#[test]
fn many_senders_keep_their_order_and_wildcards_match() {
    let vm = Vm::start_procs(3, 2, &[]);
    let (ok, lines) = job(&vm, 6, "testvp", &["fifo", "300"]);
    assert!(
        ok && has(&lines, "fifo ok 1500 from 5 senders"),
        "{lines:?}"
    );
}

#[test]
fn a_program_waiting_on_its_sockets_itself_is_woken_by_a_direct_links_ring() {
    // One host of two processors: the two VPs share it, so their messages
    // take a direct link's ring, which no socket shows by itself.
    let vm = Vm::start_procs(1, 2, &[]);
    let (ok, lines) = job(&vm, 2, "testvp", &["select", "500"]);
    let done = lines
        .iter()
        .find(|l| l.contains("select: 500 messages"))
        .cloned()
        .unwrap_or_default();
    assert!(ok && !done.is_empty(), "{lines:?}");
    // Most came over the direct link (the first through the daemon).
    let direct: u32 = done
        .split(", ")
        .nth(1)
        .and_then(|w| w.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(direct > 400, "{done}");
}

#[test]
fn groups_of_16_vps_over_4_daemons_give_exact_results() {
    let vm = Vm::start(4);
    let (ok, lines) = job(&vm, 16, "groups", &[]);
    assert!(
        ok && has(
            &lines,
            "groups: 16 members: barrier bcast reduce gather scatter: ok"
        ),
        "{lines:?}"
    );
}

#[test]
fn the_examples_check_their_answers_across_daemons() {
    let vm = Vm::start_procs(2, 2, &[]);
    let (ok, lines) = job(
        &vm,
        4,
        "heat",
        &["--rows", "64", "--cols", "48", "--iters", "200"],
    );
    assert!(
        ok && has(&lines, "identical to the serial run: ok"),
        "{lines:?}"
    );
    let (ok, lines) = job(&vm, 4, "pi", &["--samples", "4000000", "--chunk", "100000"]);
    assert!(ok && has(&lines, "chunks 40 vps 4: ok"), "{lines:?}");
    let (ok, lines) = job(
        &vm,
        4,
        "pingpong",
        &["--quick", "--json", "--sizes", "65536,1048576"],
    );
    assert!(ok, "{lines:?}");
    let last = lines.last().expect("pingpong printed nothing");
    let v: serde_json::Value = serde_json::from_str(last).expect("the last line is JSON");
    for route in ["daemon", "direct", "remote"] {
        for key in [
            format!("rtt_8B_{route}_p50_us"),
            format!("rtt_8B_{route}_p99_us"),
            format!("bw_64KiB_{route}_MBps"),
            format!("bw_1MiB_{route}_MBps"),
        ] {
            assert!(v[&key].as_f64().is_some_and(|x| x > 0.0), "{key} in {last}");
        }
    }
    assert_eq!(v["direct_link"], true, "{last}");
}

#[test]
fn a_64_mib_message_arrives_intact_locally_and_between_daemons() {
    let vm = Vm::start_procs(1, 2, &[]);
    let (ok, lines) = job(&vm, 2, "testvp", &["big"]);
    assert!(ok && has(&lines, "big: 67108864 bytes intact"), "{lines:?}");
    let vm = Vm::start(2);
    let (ok, lines) = job(&vm, 2, "testvp", &["big"]);
    assert!(ok && has(&lines, "big: 67108864 bytes intact"), "{lines:?}");
}

#[test]
fn a_burst_of_large_messages_arrives_intact_on_every_route() {
    // Shared buffers are reused as soon as their bytes are out: on one
    // host by the daemon and direct routes, between two by both daemons.
    for (hosts, route) in [(1, "daemon"), (1, "direct"), (2, "daemon")] {
        let vm = if hosts == 1 {
            Vm::start_procs(1, 2, &[])
        } else {
            Vm::start(2)
        };
        let (ok, lines) = job(&vm, 2, "testvp", &["burst", route]);
        assert!(
            ok && has(&lines, "burst: 60 messages, 0 corrupted"),
            "{hosts} hosts, {route}: {lines:?}"
        );
    }
}

#[test]
fn errors_are_clear_results() {
    let vm = Vm::start(2);
    let (ok, lines) = job(&vm, 1, "testvp", &["errors"]);
    assert!(ok, "{lines:?}");
    for l in [
        "unknown: refused",
        "exited: refused: message to t",
        "too large: refused",
        "kill unknown: refused",
        "errors ok",
    ] {
        assert!(has(&lines, l), "{l:?} missing in {lines:?}");
    }
}

#[test]
fn a_vp_sending_garbage_is_cut_off_and_the_daemon_serves_on() {
    let vm = Vm::start_procs(1, 2, &[]);
    let (ok, lines) = job(&vm, 1, "testvp", &["garbage"]);
    assert!(ok && has(&lines, "disconnected"), "{lines:?}");
    assert!(vm.log(0).contains("disconnected VP"), "{}", vm.log(0));
    let (ok, lines) = job(&vm, 4, "groups", &[]);
    assert!(ok && has(&lines, ": ok"), "{lines:?}");
}

#[test]
fn notices_come_for_an_exited_vp_a_killed_daemon_and_a_new_one() {
    let mut vm = Vm::start(3);
    let mut child = mig_tests::command("mig")
        .env("MIG_DAEMON", vm.sock())
        .args(["spawn", "-n", "1", "--wait", "--"])
        .arg(bin("testvp"))
        .arg("notify")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("mig spawn");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut next = || lines.next().and_then(Result::ok).unwrap_or_default();
    assert!(next().ends_with("child exited 3"));
    let ready = next();
    let on = ready.rsplit(' ').next().unwrap_or("").to_string();
    assert!(ready.contains("ready on h"), "{ready}");
    // Kill a worker the notified VP is not on.
    let victim = if on == "h1" { 2 } else { 1 };
    vm.signal(victim, nix::sys::signal::Signal::SIGKILL);
    let left = next();
    assert!(left.ends_with(&format!("host left h{victim}")), "{left}");
    let addr = vm.addr.clone();
    let (c, _) = vm.daemon(3, Some(&addr), &[]);
    vm.daemons.push(Some(c));
    let joined = next();
    assert!(joined.ends_with("host joined h3"), "{joined}");
    // The job's status is its first failing VP's: the child's 3.
    assert_eq!(child.wait().expect("wait").code(), Some(3));
}

#[test]
fn a_slow_receiver_holds_the_sender_back_and_daemons_stay_small() {
    // 1 GiB through one daemon, then 512 MiB through two. What is measured
    // is flow control: no periodic job checkpoint, which (saving such VPs
    // from outside) holds the bytes of their shared buffers in the
    // daemon's memory for a while, whatever flow control does.
    let no_checkpoints = "[daemon]\ncheckpoint_interval_s = 0\n";
    let vm = Vm::start_procs_config(1, 2, no_checkpoints);
    let (ok, lines) = job(&vm, 2, "testvp", &["flood", "1024"]);
    assert!(
        ok && has(&lines, "flood: 1073741824 bytes received"),
        "{lines:?}"
    );
    let peak = peak_rss_mib(vm.pid(0)).expect("VmHWM");
    assert!(peak < 160, "the daemon peaked at {peak} MiB for 1 GiB");
    let vm = Vm::start_config(2, no_checkpoints);
    let (ok, lines) = job(&vm, 2, "testvp", &["flood", "512"]);
    assert!(
        ok && has(&lines, "flood: 536870912 bytes received"),
        "{lines:?}"
    );
    for i in 0..2 {
        let peak = peak_rss_mib(vm.pid(i)).expect("VmHWM");
        assert!(peak < 160, "daemon h{i} peaked at {peak} MiB for 512 MiB");
    }
}

#[test]
fn a_sender_to_a_vp_that_cannot_be_reached_is_held_back() {
    // A VP of an aarch64 job loses its only aarch64 host: it waits for a
    // processor, and what is sent to it is held... up to a limit.
    let mut vm = Vm::start(1);
    let addr = vm.addr.clone();
    let (c, _) = vm.daemon(1, Some(&addr), &["--arch", "aarch64-linux"]);
    vm.daemons.push(Some(c));
    let h1 = vm.dir.path().join("h1").join("control.sock");
    let out = mig_tests::command("mig")
        .env("MIG_DAEMON", &h1)
        .args(["spawn", "-n", "1", "--"])
        .arg(bin("testvp"))
        .args(["hold", "0"])
        .output()
        .expect("spawn on h1");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let state = |vm: &Vm| {
        vm.json(&["ps"])
            .as_array()
            .and_then(|a| a.first().cloned())
            .and_then(|v| {
                let host = v["host"].as_str().unwrap_or("").to_string();
                Some((host, v["state"].as_str()?.to_string()))
            })
    };
    assert!(mig_tests::wait_until(
        std::time::Duration::from_secs(10),
        || state(&vm) == Some(("h1".into(), "running".into()))
    ));
    vm.signal(1, nix::sys::signal::Signal::SIGKILL);
    assert!(
        mig_tests::wait_until(std::time::Duration::from_secs(10), || state(&vm)
            .is_some_and(|(_, s)| s == "waiting")),
        "{:?}",
        state(&vm)
    );
    let mut sender = mig_tests::command("mig")
        .env("MIG_DAEMON", vm.sock())
        .args(["spawn", "-n", "1", "--wait", "--"])
        .arg(bin("testvp"))
        .args(["floodto", "t40001", "200"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("sender");
    let lines = BufReader::new(sender.stdout.take().expect("stdout")).lines();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in lines.map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    std::thread::sleep(std::time::Duration::from_secs(3));
    let first = rx.try_iter().count();
    std::thread::sleep(std::time::Duration::from_secs(1));
    let more = rx.try_iter().count();
    let _ = sender.kill();
    let _ = sender.wait();
    assert!(first > 0, "the sender sent nothing");
    assert!(
        first < 80,
        "{first} MiB went out for a VP that cannot be reached\n{}",
        vm.log(0)
    );
    assert_eq!(more, 0, "the sender kept going");
}
