//! Hosts that stall and come back: a worker stopped until the master takes
//! it for dead has its VPs frozen by its lease guardian before they are
//! started elsewhere, and ends them when it answers again; the same Tid
//! never runs twice. A master killed with news it could not replicate (its
//! voters stopped): a worker says again that its VP runs, and a VP's end
//! is neither lost nor followed by a second run.

use std::path::Path;
use std::time::{Duration, Instant};

use mig_tests::{bin, job_succeeds, of_vp, ran, up, wait_until, Up, Vm};
use nix::sys::signal::Signal;

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
        let r = ran(vm.dir.path(), tid, &mut seen);
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
    assert!(wait_until(Duration::from_secs(5), || of_vp(
        vm.dir.path(),
        tid
    )
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

#[test]
fn mig_up_on_an_earlier_machines_state_says_so_and_keeps_its_logs() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("vm");
    let first = up(&dir, 2);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let vm = Up(dir.clone());
    // A second one on the same directory while the first runs: refused.
    let again = up(&dir, 2);
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already running"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let log = dir.join("h0/migd.log");
    let before = std::fs::read_to_string(&log).expect("log");
    drop(vm);
    // After a halt: started again, it says what it found and adds to the
    // logs.
    let second = up(&dir, 2);
    let _vm = Up(dir.clone());
    let said = String::from_utf8_lossy(&second.stderr);
    assert!(second.status.success(), "{said}");
    assert!(
        said.contains("holds an earlier virtual machine's state"),
        "{said}"
    );
    let after = std::fs::read_to_string(&log).expect("log");
    assert!(after.starts_with(&before), "the old log was not kept");
    assert!(
        after.contains("a new virtual machine starts here"),
        "{after}"
    );
}

#[test]
fn a_request_to_a_daemon_that_does_not_answer_fails_naming_it() {
    let mut vm = Vm::start(1);
    vm.signal(0, Signal::SIGSTOP);
    let t = Instant::now();
    let out = mig_tests::command("mig")
        .env("MIG_DAEMON", vm.sock())
        .env("MIG_TIMEOUT_S", "1")
        .arg("ps")
        .output()
        .expect("mig");
    vm.signal(0, Signal::SIGCONT);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("did not answer within 1 s") && err.contains("control.sock"),
        "{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(30));
    vm.mig_ok(&["ps"]);
}

#[test]
fn a_master_stopped_for_a_while_freezes_the_workers_vps_and_on_its_return_all_goes_on() {
    let mut vm = Vm::start(2);
    let stop = vm.dir.path().join("stop");
    let job = vm.start_job(2, &bin("testvp"), &[Path::new("spin"), &stop]);
    assert!(wait_until(Duration::from_secs(10), || vm
        .json(&["ps"])
        .as_array()
        .is_some_and(
            |a| a.len() == 2 && a.iter().all(|v| v["state"] == "running")
        )));
    // (Leases are granted with heartbeats: let a few pass.)
    std::thread::sleep(Duration::from_millis(1500));
    // Past the workers' leases (2.5 s) and the silence after which a host
    // is given up (3 s): nobody can grant, nobody is given up.
    vm.signal(0, Signal::SIGSTOP);
    std::thread::sleep(Duration::from_secs(4));
    vm.signal(0, Signal::SIGCONT);
    assert!(
        wait_until(Duration::from_secs(10), || vm
            .log(1)
            .contains("the VPs are thawed")),
        "{}",
        vm.log(1)
    );
    assert!(vm.log(1).contains("its VPs are frozen"), "{}", vm.log(1));
    assert!(
        !vm.log(1).contains("fenced"),
        "{}\n{}",
        vm.log(1),
        vm.log(0)
    );
    assert!(!vm.log(0).contains("left the pool"), "{}", vm.log(0));
    std::fs::write(&stop, "").expect("stop");
    let lines = job_succeeds(job, &vm.log(0));
    assert_eq!(
        lines.iter().filter(|l| l.contains("spin done")).count(),
        2,
        "{lines:?}\n{}\n{}",
        vm.log(0),
        vm.log(1)
    );
}

#[test]
fn a_worker_whose_link_to_the_master_is_cut_mid_output_loses_no_line_and_doubles_none() {
    // Every connection to the master's port is aborted (`ss -K`, as a
    // firewall's reset would), three times while each VP of a plain
    // shell job writes 40,000 numbered lines, each time after the master
    // was stopped for a moment (what the worker sent meanwhile waits in
    // the sockets, and goes with them): what was on its way when the link
    // went is sent again on the next, and shown once.
    mig_tests::tool("ss", "iproute2");
    let mut vm = Vm::start(2);
    let port = vm.addr.rsplit(':').next().expect("port").to_string();
    const LINES: u32 = 40_000;
    let prog = "for i in $(seq 0 199); do seq $((i*200)) $((i*200+199)); sleep 0.02; done";
    let job = vm.start_job(2, Path::new("/bin/sh"), &["-c", prog]);
    assert!(wait_until(Duration::from_secs(10), || vm
        .json(&["ps"])
        .as_array()
        .is_some_and(|a| a
            .iter()
            .any(|v| v["host"] == "h1" && v["state"] == "running"))));
    let filter = format!("( sport = :{port} or dport = :{port} )");
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(400));
        vm.signal(0, Signal::SIGSTOP);
        std::thread::sleep(Duration::from_millis(300));
        let out = std::process::Command::new("ss")
            .args(["-K", "state", "established", &filter])
            .output()
            .expect("ss");
        vm.signal(0, Signal::SIGCONT);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = job.wait_with_output().expect("job");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        vm.log(0)
    );
    assert!(
        vm.log(1).contains("lost the master"),
        "no link was cut (`ss -K` needs root and a kernel built with \
         CONFIG_INET_DIAG_DESTROY): {}",
        vm.log(1)
    );
    // `[tTID HOST] N`, by VP.
    let mut by_vp: std::collections::BTreeMap<String, Vec<u32>> = Default::default();
    for l in stdout.lines() {
        let (who, n) = l.split_once("] ").expect("a VP's line");
        by_vp
            .entry(who.to_string())
            .or_default()
            .push(n.parse().expect("a number"));
    }
    assert!(
        by_vp.keys().any(|k| k.ends_with(" h1")),
        "{:?}",
        by_vp.keys()
    );
    assert_eq!(by_vp.len(), 2, "{:?}", by_vp.keys());
    for (who, mut ns) in by_vp {
        let shown = ns.len();
        ns.sort_unstable();
        ns.dedup();
        assert_eq!(
            (shown, ns.len(), ns.first(), ns.last()),
            (LINES as usize, LINES as usize, Some(&0), Some(&(LINES - 1))),
            "{who}: lines shown, distinct, first, last\n{}",
            vm.log(1)
        );
    }
}

#[test]
fn the_master_killed_again_and_again_under_heat_is_replaced_and_the_answer_is_right() {
    let kills: usize = mig_tests::env_num("KILLS", 10);
    // Six hosts: five voters, and h5, which never votes, so never becomes
    // the master and is never killed: the job is waited for through it.
    let mut vm = Vm::start_config(6, "[daemon]\ncheckpoint_interval_s = 0.3\n");
    let steady = 5;
    assert!(
        wait_until(Duration::from_secs(20), || vm.hosts_at(steady).is_some_and(
            |h| h.iter().filter(|h| h["voter"] == true).count() == 5
        )),
        "{:?}\n{}",
        vm.hosts_at(steady),
        vm.log(0)
    );
    let mut job = mig_tests::command("mig")
        .env("MIG_DAEMON", vm.sock_of(steady))
        .args(["spawn", "-n", "4", "--wait", "--"])
        .arg(bin("heat"))
        .args(["--rows", "48", "--cols", "48", "--iters"])
        // Long enough to outlive every kill.
        .arg((8_000 * (kills + 1)).to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("mig spawn");
    let logs = |vm: &Vm| {
        (0..vm.daemons.len())
            .map(|i| vm.log(i))
            .collect::<Vec<_>>()
            .join("\n-----\n")
    };
    let mut took = Vec::new();
    let mut killed_pids: Vec<u32> = Vec::new();
    for k in 0..kills {
        // Whoever is master now, once a checkpoint of the job was taken
        // under it and the voters are whole again (five, all alive: the
        // machine survives a minority of them failing, not a majority
        // failing one after another faster than they are replaced).
        let mut master = None;
        let voters_whole = |vm: &Vm, killed: &[u32]| {
            vm.hosts_at(steady).is_some_and(|h| {
                let voting = |h: &&serde_json::Value| {
                    h["voter"] == true
                        && h["alive"] == true
                        && !killed.iter().any(|&k| h["pid"] == k)
                };
                h.iter().filter(voting).count() == 5
            })
        };
        assert!(
            wait_until(Duration::from_secs(90), || {
                master = vm.master_seen_by(steady);
                master.is_some_and(|m| {
                    m != steady
                        && vm.daemons.get(m).is_some_and(Option::is_some)
                        && vm.log(m).contains("checkpointed (generation")
                }) && voters_whole(&vm, &killed_pids)
            }),
            "kill {k}: no master with a checkpoint: {master:?}\n{}",
            logs(&vm)
        );
        let m = master.expect("a master");
        if job.try_wait().ok().flatten().is_some() {
            let out = job.wait_with_output().expect("job output");
            panic!(
                "kill {k}: the job ended before every kill was made: {}\n{}\n{}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                logs(&vm)
            );
        }
        killed_pids.push(vm.pid(m));
        vm.signal(m, Signal::SIGKILL);
        let killed = Instant::now();
        vm.wait(m, Duration::from_secs(5));
        // `mig ps` through a surviving daemon is answered by the new master.
        assert!(
            wait_until(Duration::from_secs(15), || {
                vm.master_seen_by(steady).is_some_and(|n| n != m)
                    && vm.mig_at(steady, &["ps"]).status.success()
            }),
            "kill {k}: no new master\n{}",
            logs(&vm)
        );
        took.push(killed.elapsed());
        // The killed daemon comes back as a new host, joining a worker (it
        // is sent on to the master).
        let join = std::fs::read_to_string(vm.dir.path().join(format!("h{steady}/addr")))
            .expect("address file");
        let conf = vm.dir.path().join("migd.toml");
        let (c, _) = vm.daemon(
            m,
            Some(join.trim()),
            &["--config", conf.to_str().expect("path")],
        );
        vm.daemons[m] = Some(c);
    }
    let lines = job_succeeds(job, &logs(&vm));
    assert!(
        lines
            .iter()
            .any(|l| l.contains("identical to the serial run: ok")),
        "{lines:?}"
    );
    took.sort();
    eprintln!("kill of the master to `mig ps` answered by the new one: {took:?}");
}

#[test]
fn a_master_stopped_past_an_election_steps_down_on_its_return_and_acts_no_more() {
    let mut vm = Vm::start_config(3, "[daemon]\ncheckpoint_interval_s = 0.3\n");
    assert!(wait_until(Duration::from_secs(20), || vm
        .hosts_at(1)
        .is_some_and(|h| h
            .iter()
            .filter(|h| h["voter"] == true)
            .count()
            == 3)));
    let job = mig_tests::command("mig")
        .env("MIG_DAEMON", vm.sock_of(1))
        .args(["spawn", "-n", "3", "--wait", "--"])
        .arg(bin("heat"))
        .args(["--rows", "48", "--cols", "48", "--iters", "40000"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("mig spawn");
    // A client waiting on a job through the master itself: it hears the
    // job's end from the next master, through this daemon as a worker.
    let through_old = mig_tests::command("mig")
        .env("MIG_DAEMON", vm.sock_of(0))
        .args(["spawn", "-n", "1", "--wait", "--", "/bin/sleep", "4"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("mig spawn");
    assert!(wait_until(Duration::from_secs(20), || vm
        .log(0)
        .contains("checkpointed (generation")));
    // Three heartbeats: long enough for the others to elect a new master.
    vm.signal(0, Signal::SIGSTOP);
    std::thread::sleep(Duration::from_millis(1500));
    vm.signal(0, Signal::SIGCONT);
    let logs = |vm: &Vm| {
        (0..3)
            .map(|i| vm.log(i))
            .collect::<Vec<_>>()
            .join("\n-----\n")
    };
    assert!(
        // (By its own clock, or by hearing of the later term first if the
        // loop was stopped mid-turn.)
        wait_until(Duration::from_secs(10), || {
            let log = vm.log(0);
            (log.contains("stepping down") || log.contains("stepped down as master"))
                && log.contains("following the new master")
        }),
        "{}",
        logs(&vm)
    );
    // One master afterwards, and not the old one.
    let hosts = vm.hosts_at(0).expect("hosts through the old master");
    let masters: Vec<&str> = hosts
        .iter()
        .filter(|h| h["master"] == true)
        .filter_map(|h| h["name"].as_str())
        .collect();
    assert_eq!(masters.len(), 1, "{hosts:?}");
    assert_ne!(masters[0], "h0");
    assert_eq!(vm.master_seen_by(1), vm.master_seen_by(2));
    let lines = job_succeeds(job, &logs(&vm));
    assert!(
        lines
            .iter()
            .any(|l| l.contains("identical to the serial run: ok")),
        "{lines:?}"
    );
    job_succeeds(through_old, &logs(&vm));
    // From its return on, the old master decided nothing: no checkpoint,
    // no host given up, no VP placed (the log says who acts, by term).
    let old = vm.log(0);
    // (It says "stepping down" by its own clock, "stepped down as master"
    // on hearing the later term first.)
    let at = old
        .find("stepping down")
        .or_else(|| old.find("stepped down as master"))
        .expect("stepped down");
    let after = &old[at..];
    // (Until it is elected again, in a later term: on a busy machine the
    // new master may lose its own lead, and this one win it back fairly.)
    let after = &after[..after.find("elected master").unwrap_or(after.len())];
    for acting in [
        "checkpointing job",
        "left the pool",
        "restarting job",
        "took over",
    ] {
        assert!(
            !after.contains(acting),
            "{acting:?} after stepping down:\n{after}"
        );
    }
}

/// VPs as daemon `i` (through the master it knows) lists them.
fn ps_at(vm: &Vm, i: usize) -> Option<Vec<serde_json::Value>> {
    let out = vm.mig_at(i, &["ps", "--json"]);
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .ok()?
        .as_array()
        .cloned()
}

/// Four hosts, three of them voters (h0 the master, h1, h2) and h3, which
/// never votes; the others' owners took them back, so a job of one VP
/// running `argv` can only go to h3. h3 is stopped while the spawn is
/// committed (its Start waits in its socket), then the voters are stopped
/// (nothing the master hears from then on is committed) and h3 resumed:
/// it starts the VP and says so to the master. Returns the machine and h3.
fn spawned_past_the_voters(argv: &[&str]) -> (Vm, usize) {
    let mut vm = Vm::start(4);
    let steady = 3;
    assert!(
        wait_until(Duration::from_secs(20), || vm
            .hosts_at(steady)
            .is_some_and(|h| h.iter().filter(|h| h["voter"] == true).count()
                == 3
                && h.iter().any(|h| h["name"] == "h3" && h["voter"] == false))),
        "{:?}",
        vm.hosts_at(steady)
    );
    for h in ["h0", "h1", "h2"] {
        assert!(vm.mig(&["owner", "reclaim", "--host", h]).status.success());
    }
    vm.signal(3, Signal::SIGSTOP);
    let mut args = vec!["spawn", "-n", "1", "--"];
    args.extend_from_slice(argv);
    let out = vm.mig(&args);
    assert!(out.status.success(), "{out:?}");
    vm.signal(1, Signal::SIGSTOP);
    vm.signal(2, Signal::SIGSTOP);
    vm.signal(3, Signal::SIGCONT);
    (vm, steady)
}

/// `spawned_past_the_voters`' end: h0, the master, SIGKILLed with what it
/// could not commit; h1 and h2 resumed, to elect another.
fn kill_master_and_wake_the_voters(vm: &mut Vm) {
    vm.signal(0, Signal::SIGKILL);
    vm.wait(0, Duration::from_secs(5));
    vm.signal(1, Signal::SIGCONT);
    vm.signal(2, Signal::SIGCONT);
}

#[test]
fn a_vp_start_the_killed_master_never_replicated_is_said_again_to_the_next() {
    let (mut vm, steady) = spawned_past_the_voters(&["/bin/sleep", "60"]);
    let tid = 0x40001;
    assert!(
        wait_until(Duration::from_secs(10), || of_vp(vm.dir.path(), tid).len()
            == 1),
        "the VP never started on h3\n{}",
        vm.log(3)
    );
    let started = of_vp(vm.dir.path(), tid);
    // (Time for h3's word to reach the master.)
    std::thread::sleep(Duration::from_millis(300));
    // The master dies with its news; the voters come back and elect
    // another from what they hold: a VP still starting.
    kill_master_and_wake_the_voters(&mut vm);
    // h3 attaches to the new master and says again that the VP runs: it is
    // running there, the same process, and nowhere else.
    let running = |vm: &Vm| {
        ps_at(vm, steady)
            .is_some_and(|v| v.len() == 1 && v[0]["host"] == "h3" && v[0]["state"] == "running")
    };
    assert!(
        wait_until(Duration::from_secs(30), || running(&vm)),
        "{:?}\n{}\n-----\n{}\n-----\n{}",
        ps_at(&vm, steady),
        vm.log(1),
        vm.log(2),
        vm.log(3)
    );
    assert_eq!(of_vp(vm.dir.path(), tid), started);
    // And it stays so (not started again as lost).
    std::thread::sleep(Duration::from_secs(2));
    assert!(running(&vm), "{:?}", ps_at(&vm, steady));
    assert_eq!(of_vp(vm.dir.path(), tid), started);
}

#[test]
fn a_vp_that_ends_while_the_voters_are_stopped_and_the_master_is_killed_ran_once() {
    // As above, but the VP also ends while the voters are stopped and the
    // master is killed: the next master knows the end (from what the old
    // one had sent the voters, or from h3 saying it again), the job ends
    // with the VP's status, and the VP is not started again.
    // Each run of the VP leaves a line: it must run once.
    let dir = tempfile::tempdir().expect("temp dir");
    let runs = dir.path().join("runs");
    let script = format!("echo ran >> {}; exit 3", runs.display());
    let (mut vm, steady) = spawned_past_the_voters(&["/bin/sh", "-c", &script]);
    assert!(
        wait_until(Duration::from_secs(10), || runs.exists()),
        "the VP never ran on h3\n{}\n-----\n{}",
        vm.log(0),
        vm.log(3)
    );
    // (Time for h3's word of its end to reach the master.)
    std::thread::sleep(Duration::from_millis(300));
    kill_master_and_wake_the_voters(&mut vm);
    let ended = |vm: &Vm| {
        let out = vm.mig_at(steady, &["jobs", "--json"]);
        serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .ok()
            .and_then(|v| v.as_array().cloned())
            .and_then(|jobs| jobs.into_iter().find(|j| j["job"] == "j1"))
            .filter(|j| j["state"] == "exited")
            .map(|j| j["status"].clone())
    };
    assert!(
        wait_until(Duration::from_secs(30), || ended(&vm).is_some()),
        "{}\n-----\n{}",
        String::from_utf8_lossy(&vm.mig_at(steady, &["jobs"]).stdout),
        vm.all_logs()
    );
    assert_eq!(ended(&vm), Some(serde_json::json!(3)));
    let lines = std::fs::read_to_string(&runs).unwrap_or_default();
    assert_eq!(lines.lines().count(), 1, "the VP ran again: {lines:?}");
}

#[test]
fn a_vp_sent_to_a_worker_whose_lease_lapsed_starts_once_it_runs_again() {
    // h1 stopped past its lease (2.5 s: its guardian freezes its cells)
    // but not past the master's patience (3 s); meanwhile a VP is sent to
    // it. Once back, h1 runs it and still serves. (A VP started into a
    // frozen cell would hold the daemon, which waits for its exec: a VP
    // waits for the lease to run again. This test passes without that
    // wait too, the grant here coming first; the hardening test's
    // spoilt links found the hang.)
    let mut vm = Vm::start(2);
    assert!(vm
        .mig(&["owner", "reclaim", "--host", "h0"])
        .status
        .success());
    vm.signal(1, Signal::SIGSTOP);
    let stopped = Instant::now();
    let out = vm.mig(&["spawn", "-n", "1", "--", "/bin/sleep", "60"]);
    assert!(out.status.success(), "{out:?}");
    std::thread::sleep(Duration::from_millis(2700).saturating_sub(stopped.elapsed()));
    vm.signal(1, Signal::SIGCONT);
    let running = |vm: &Vm| {
        vm.json(&["ps"])
            .as_array()
            .is_some_and(|v| v.len() == 1 && v[0]["host"] == "h1" && v[0]["state"] == "running")
    };
    assert!(
        wait_until(Duration::from_secs(10), || running(&vm)),
        "{:?}\n{}\n-----\n{}",
        vm.json(&["ps"]),
        vm.log(0),
        vm.log(1)
    );
    // And h1 still serves: its daemon is not stuck.
    assert!(vm.mig_at(1, &["hosts"]).status.success());
}

/// Wait until daemon `at` sees three voters.
fn three_voters(vm: &Vm, at: usize) {
    assert!(
        wait_until(Duration::from_secs(20), || vm.hosts_at(at).is_some_and(
            |h| h.iter().filter(|h| h["voter"] == true).count() == 3
        )),
        "{:?}",
        vm.hosts_at(at)
    );
}

/// The lines of VPs' output in a `mig spawn --wait`'s stdout.
fn vp_lines(out: &std::process::Output) -> usize {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("[t"))
        .count()
}

/// No daemon was elected master after the first, and none stepped down.
fn one_master_throughout(vm: &Vm) {
    let all = vm.all_logs();
    assert!(
        !all.contains("elected master") && !all.contains("stepped down"),
        "{all}"
    );
}

#[test]
fn the_next_master_has_the_output_jobs_printed_before_the_master_was_killed() {
    let mut vm = Vm::start(4);
    let steady = 3;
    three_voters(&vm, steady);
    let stop = vm.dir.path().join("stop");
    let script = format!(
        "for i in 1 2 3 4 5; do echo printed $i; done; while [ ! -e '{}' ]; do sleep 0.05; done",
        stop.display()
    );
    let out = vm.mig_at(
        steady,
        &["spawn", "-n", "4", "--", "/bin/sh", "-c", &script],
    );
    assert!(out.status.success(), "{out:?}");
    let logs_at = |vm: &Vm, i: usize| -> Vec<String> {
        String::from_utf8_lossy(&vm.mig_at(i, &["logs", "j1"]).stdout)
            .lines()
            .filter(|l| l.contains("printed"))
            .map(str::to_string)
            .collect()
    };
    assert!(
        wait_until(Duration::from_secs(10), || logs_at(&vm, steady).len() == 20),
        "{:?}",
        logs_at(&vm, steady)
    );
    let before = logs_at(&vm, steady);
    vm.signal(0, Signal::SIGKILL);
    vm.wait(0, Duration::from_secs(5));
    let next = || vm.master_seen_by(steady).filter(|&m| m != 0);
    assert!(
        wait_until(Duration::from_secs(20), || next().is_some()),
        "no master after h0:\n{}",
        vm.log(1)
    );
    let after = logs_at(&vm, steady);
    let lost: Vec<&String> = before.iter().filter(|l| !after.contains(l)).collect();
    assert!(
        lost.is_empty(),
        "lost with the master: {lost:?}\nnow: {after:?}"
    );
    std::fs::write(&stop, "").expect("stop");
}

#[test]
fn a_job_printing_a_flood_of_lines_keeps_its_master_and_loses_none() {
    // Three hosts, so three voters: the master owes them heartbeats while
    // it carries every line to the job's waiter, its files and the voters.
    let vm = Vm::start(3);
    three_voters(&vm, 0);
    let n = 40_000;
    let out = vm.mig(&[
        "spawn",
        "-n",
        "3",
        "--wait",
        "--",
        "/usr/bin/seq",
        "1",
        &n.to_string(),
    ]);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        vm.all_logs()
    );
    assert_eq!(vp_lines(&out), 3 * n, "{}", vm.all_logs());
    let kept = String::from_utf8_lossy(&vm.mig(&["logs", "j1"]).stdout)
        .lines()
        .count();
    assert_eq!(kept, 3 * n);
    one_master_throughout(&vm);
}

#[test]
fn many_jobs_flooding_their_output_at_once_all_finish_whole_under_one_master() {
    let vm = Vm::start_procs(3, 2, &[]);
    three_voters(&vm, 0);
    let (jobs, n) = (30, 20_000);
    let waiters: Vec<_> = (0..jobs)
        .map(|_| {
            mig_tests::command("mig")
                .env("MIG_DAEMON", vm.sock())
                .args(["spawn", "-n", "2", "--wait", "--", "/usr/bin/seq", "1"])
                .arg(n.to_string())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("mig spawn")
        })
        .collect();
    for w in waiters {
        let out = w.wait_with_output().expect("waiter");
        assert!(
            out.status.success(),
            "{}\n{}",
            String::from_utf8_lossy(&out.stderr),
            vm.all_logs()
        );
        assert_eq!(
            vp_lines(&out),
            2 * n,
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    one_master_throughout(&vm);
}

#[test]
fn a_worker_that_waits_for_a_master_stops_when_told() {
    // Three voters; two killed: no majority, no master to be had.
    let mut vm = Vm::start(3);
    three_voters(&vm, 2);
    for i in [0, 1] {
        vm.signal(i, Signal::SIGKILL);
        vm.wait(i, Duration::from_secs(5));
    }
    assert!(wait_until(Duration::from_secs(10), || vm
        .log(2)
        .contains("lost the master")));
    // It waits on (it would follow a master however late), until told.
    std::thread::sleep(Duration::from_secs(4));
    assert!(vm.daemons[2]
        .as_mut()
        .is_some_and(|c| c.try_wait().ok().flatten().is_none()));
    let out = vm.mig_at(2, &["halt"]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("halting this host only"), "{said}");
    assert!(
        vm.wait(2, Duration::from_secs(10)).is_some(),
        "{}",
        vm.log(2)
    );
}

#[test]
fn a_question_the_stopped_master_never_answered_is_answered_by_the_next() {
    // `mig hosts` through h1 and through h2 reaches the master, which is
    // stopped for good before it answers: the others elect one of them.
    // Neither request is left waiting for an answer that never comes (the
    // one elected takes over, the other follows it): each fails with the
    // master's change, and `mig` asks the next master again.
    let mut vm = Vm::start(3);
    three_voters(&vm, 1);
    vm.signal(0, Signal::SIGSTOP);
    let ask = |i: usize| {
        mig_tests::command("mig")
            .env("MIG_DAEMON", vm.sock_of(i))
            .env("MIG_TIMEOUT_S", "45")
            .args(["hosts", "--json"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("mig hosts")
    };
    let asked = [ask(1), ask(2)];
    for out in asked.map(|c| c.wait_with_output().expect("mig hosts")) {
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{said}\n{}", vm.all_logs());
        let hosts: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert!(
            hosts
                .as_array()
                .is_some_and(|a| a.iter().any(|h| h["master"] == true && h["name"] != "h0")),
            "{hosts}"
        );
    }
}

#[test]
fn every_host_the_consensus_counts_as_a_voter_knows_it_votes_and_the_master_is_replaced() {
    // Six hosts joining at once: five voters, two changes made in a
    // moment, the later voters made while their links to the master may
    // not be up yet. Each must hear that it votes; then, with the master
    // killed, the four left elect another.
    for round in 0..3 {
        let mut vm = Vm::start(6);
        let made = |vm: &Vm| {
            vm.log(0)
                .lines()
                .any(|l| l.contains("voters changed") && l.matches(" (").count() == 5)
        };
        assert!(
            wait_until(Duration::from_secs(20), || made(&vm)),
            "round {round}: five voters were never made\n{}",
            vm.all_logs()
        );
        let knows = |vm: &Vm| {
            (1..6)
                .filter(|&i| {
                    vm.log(i)
                        .contains("this host keeps a copy of the master's state")
                })
                .count()
        };
        assert!(
            wait_until(Duration::from_secs(10), || knows(&vm) == 4),
            "round {round}: {} of the 4 other voters know they vote\n{}",
            knows(&vm),
            vm.all_logs()
        );
        vm.signal(0, nix::sys::signal::Signal::SIGKILL);
        assert!(
            wait_until(Duration::from_secs(30), || vm
                .master_seen_by(5)
                .is_some_and(|m| m != 0)),
            "round {round}: no new master\n{}",
            vm.all_logs()
        );
    }
}
