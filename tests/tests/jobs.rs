//! Jobs one can find after they end, on real daemons: `mig jobs`, `mig
//! show`, `mig logs [-f]` and `mig wait` on running and ended jobs, through
//! the master and a worker; the history kept across a halt and `mig up` on
//! the same directory; Ctrl-C on `mig spawn --wait` as srun takes it.

use std::process::Stdio;
use std::time::Duration;

use mig_tests::{command, job_lines, up, wait_until, Up, Vm};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The job `id` in `mig jobs --json`.
fn job_json(vm: &Vm, at: usize, id: &str) -> Option<serde_json::Value> {
    let out = vm.mig_at(at, &["jobs", "--all", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    all.as_array()?.iter().find(|j| j["job"] == id).cloned()
}

#[test]
fn jobs_can_be_listed_shown_followed_and_waited_for_after_they_end() {
    let vm = Vm::start(2);
    // A job that fails: VP 1 exits 3, both print to stdout and stderr.
    let out = vm.mig(&[
        "spawn",
        "-n",
        "2",
        "--wait",
        "--",
        "/bin/sh",
        "-c",
        "echo out $MIG_VP; echo err $MIG_VP >&2; exit $((MIG_VP * 3))",
    ]);
    assert_eq!(out.status.code(), Some(3));
    let j1 = job_json(&vm, 0, "j1").expect("j1 listed");
    assert_eq!(j1["state"], "exited");
    assert!(j1["cpu_ms"].is_u64(), "{j1}");
    assert_eq!(j1["status"], 3);
    assert_eq!(j1["vps"], 2);
    assert_eq!(j1["program"], "/bin/sh");
    assert!(j1["ended_ms"].as_u64() >= j1["submitted_ms"].as_u64());
    // Its output, kept: stdout and stderr of both VPs, through a worker too.
    for at in [0, 1] {
        let logs = vm.mig_at(at, &["logs", "j1"]);
        assert!(logs.status.success(), "{}", stderr(&logs));
        let text = stdout(&logs);
        for want in ["] out 0", "] out 1", " stderr] err 0", " stderr] err 1"] {
            assert!(text.contains(want), "{want:?} in {text}");
        }
    }
    // ...and as JSON, one object a line.
    let logs = vm.mig_ok(&["logs", "j1", "--json"]);
    let lines: Vec<serde_json::Value> = stdout(&logs)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert!(
        lines.iter().any(|l| l["stream"] == "stderr"
            && l["line"] == "err 1"
            && l["tid"].as_str().is_some_and(|t| t.starts_with('t'))),
        "{lines:?}"
    );
    // `mig show`, text and JSON.
    let show = vm.mig(&["show", "j1"]);
    let text = stdout(&show);
    assert!(text.contains("JobId=j1 State=exited"), "{text}");
    assert!(text.contains("ExitStatus=3"), "{text}");
    // A running job: listed as running with its VPs, followed to its end,
    // waited for through the worker.
    let started = vm.mig(&[
        "spawn",
        "--",
        "/bin/sh",
        "-c",
        "for i in 1 2 3 4 5; do echo tick $i; sleep 0.2; done; exit 7",
    ]);
    let j2 = stdout(&started).trim().to_string();
    assert_eq!(job_json(&vm, 0, &j2).expect("listed")["state"], "running");
    // mig ps: its command and how long it has run, filtered by job.
    let ps = stdout(&vm.mig(&["ps", &j2]));
    assert!(
        ps.contains("COMMAND") && ps.contains("/bin/sh -c for i"),
        "{ps}"
    );
    assert_eq!(ps.lines().count(), 2, "the heading and j2's one VP: {ps}");
    let show = vm.mig(&["show", &j2, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&show.stdout).expect("JSON");
    assert_eq!(v["vp_list"].as_array().map(Vec::len), Some(1), "{v}");
    let waiter = command("mig")
        .env("MIG_DAEMON", vm.sock_of(1))
        .args(["wait", &j2, "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("mig wait");
    let follow = vm.mig(&["logs", "-f", &j2]);
    let ticks: Vec<String> = job_lines(&follow);
    assert_eq!(
        ticks,
        (1..=5).map(|i| format!("tick {i}")).collect::<Vec<_>>(),
        "-f follows until the end"
    );
    let waited = waiter.wait_with_output().expect("wait");
    assert_eq!(waited.status.code(), Some(7));
    let end: serde_json::Value = serde_json::from_slice(&waited.stdout).expect("JSON");
    assert_eq!(end["status"], 7);
    // CPU time: a VP that computes for a while is counted.
    let out = vm.mig(&[
        "spawn",
        "--wait",
        "--",
        "/bin/sh",
        "-c",
        "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done",
    ]);
    assert!(out.status.success());
    let busy = job_json(&vm, 0, "j3").expect("j3 listed");
    assert!(busy["cpu_ms"].as_u64() >= Some(50), "{busy}");
    // Waiting for an ended job answers at once; unknown jobs are errors.
    assert_eq!(vm.mig(&["wait", "j1"]).status.code(), Some(3));
    for args in [["wait", "j99"], ["logs", "j99"], ["show", "j99"]] {
        let out = vm.mig(&args);
        assert!(!out.status.success());
        assert!(stderr(&out).contains("no job j99"), "{}", stderr(&out));
    }
    // A name that is not a job id reads no file.
    let out = vm.mig(&["logs", "../../etc/passwd"]);
    assert!(!out.status.success());
    assert!(!stdout(&out).contains("root:"));
}

#[test]
fn the_history_outlives_a_halt_and_new_jobs_do_not_reuse_its_ids() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("vm");
    let first = up(&dir, 1);
    assert!(first.status.success(), "{}", stderr(&first));
    let vm = Up(dir.clone());
    let out = vm.mig(&["spawn", "--wait", "--", "/bin/echo", "before the halt"]);
    assert!(out.status.success());
    // A job still running at the halt (j2) ends with it, in the history.
    let out = vm.mig(&["spawn", "--", "/bin/sleep", "60"]);
    assert!(out.status.success(), "{}", stderr(&out));
    drop(vm);
    // Damage: a line of garbage and a cut-off line are skipped.
    let hist = dir.join("h0/history.jsonl");
    let mut bytes = std::fs::read(&hist).expect("history.jsonl");
    bytes.extend_from_slice(b"\xff garbage\n{\"job\":\"j7\",\"prog");
    std::fs::write(&hist, bytes).expect("write");
    // And the output of a job whose end the history never got (it ran at
    // the halt, say).
    std::fs::write(dir.join("h0/jobs/j5.out"), "[t40009 h0] an earlier j5\n").expect("write");
    let second = up(&dir, 1);
    assert!(second.status.success(), "{}", stderr(&second));
    // Said on the console, not only in the log.
    assert!(
        stderr(&second).contains("history.jsonl: 2 lines are not a job's record (line 3, 4)"),
        "{}",
        stderr(&second)
    );
    let vm = Up(dir.clone());
    let out = vm.mig(&["jobs", "--json"]);
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let j1 = all
        .as_array()
        .and_then(|a| a.iter().find(|j| j["job"] == "j1"))
        .expect("j1 kept");
    assert_eq!(j1["status"], 0);
    assert_eq!(j1["args"][0], "before the halt");
    let j2 = all
        .as_array()
        .and_then(|a| a.iter().find(|j| j["job"] == "j2"))
        .unwrap_or_else(|| panic!("j2, running at the halt, not listed: {all}"));
    assert_eq!(j2["state"], "halted", "{j2}");
    assert!(j2["ended_ms"].as_u64().is_some(), "{j2}");
    let logs = vm.mig(&["logs", "j1"]);
    assert!(
        stdout(&logs).contains("before the halt"),
        "{}",
        stdout(&logs)
    );
    let next = vm.mig(&["spawn", "--wait", "--", "/bin/echo", "a new job"]);
    assert!(next.status.success(), "{}", stderr(&next));
    assert!(
        stdout(&vm.mig(&["jobs", "--json"])).contains("\"j6\""),
        "ids go on above every earlier job's files"
    );
    let logs = stdout(&vm.mig(&["logs", "j6"]));
    assert!(
        logs.contains("a new job") && !logs.contains("earlier"),
        "{logs}"
    );
    let log = std::fs::read_to_string(dir.join("h0/migd.log")).expect("log");
    assert!(log.contains("not a job's record"), "{log}");
}

#[test]
fn ctrl_c_on_spawn_wait_leaves_the_job_running_and_twice_kills_it() {
    let vm = Vm::start(1);
    for twice in [false, true] {
        let child = command("mig")
            .env("MIG_DAEMON", vm.sock())
            .args(["spawn", "--wait", "--", "/bin/sleep", "30"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("mig spawn");
        let pid = Pid::from_raw(child.id() as i32);
        let job = if twice { "j2" } else { "j1" };
        assert!(wait_until(Duration::from_secs(10), || {
            job_json(&vm, 0, job).is_some_and(|j| j["state"] == "running")
        }));
        // The CLI's handler is in place once the job has started; give it
        // the moment it takes to get there.
        std::thread::sleep(Duration::from_millis(300));
        kill(pid, Signal::SIGINT).expect("SIGINT");
        if twice {
            std::thread::sleep(Duration::from_millis(300));
            kill(pid, Signal::SIGINT).expect("SIGINT");
        }
        let out = child.wait_with_output().expect("mig spawn ends");
        let said = stderr(&out);
        assert!(said.contains(&format!("mig logs -f {job}")), "{said}");
        let state = job_json(&vm, 0, job).expect("listed");
        if twice {
            assert!(said.contains("killing job"), "{said}");
            assert_eq!(state["state"], "killed", "{state}");
        } else {
            assert_eq!(out.status.code(), Some(130), "{said}");
            assert_eq!(state["state"], "running", "the job goes on: {state}");
            assert!(vm.mig(&["kill", job]).status.success());
        }
    }
}

#[test]
fn the_map_shows_each_processors_capacity_and_a_legend() {
    let vm = Vm::start_with(2, &["--capacity", "2.5"]);
    let job = vm.mig(&["spawn", "-n", "2", "--", "/bin/sleep", "10"]);
    assert!(job.status.success());
    assert!(wait_until(Duration::from_secs(10), || {
        stdout(&vm.mig(&["map"])).contains("j1")
    }));
    let text = stdout(&vm.mig(&["map"]));
    assert!(text.contains("h0/0") && text.contains("×2.50"), "{text}");
    assert!(text.contains("legend:"), "{text}");
    assert!(vm.mig(&["kill", "j1"]).status.success());
    // One VP of j2 on one processor, then a bag of tasks j3 over both in a
    // slot of its own: its VP on the other processor fills the free cell
    // beside j2, and the map says so.
    vm.mig_ok(&["spawn", "--", "/bin/sleep", "10"]);
    vm.mig_ok(&[
        "spawn",
        "--independent",
        "-n",
        "2",
        "--",
        "/bin/sleep",
        "10",
    ]);
    assert!(
        wait_until(Duration::from_secs(10), || stdout(&vm.mig(&["map"]))
            .contains("(j3)")),
        "{}",
        stdout(&vm.mig(&["map"]))
    );
    let json = vm.json(&["map"]);
    assert!(
        json["slots"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|s| s.as_array().into_iter().flatten())
            .any(|c| c["job"] == "j3" && c["independent"] == true),
        "{json}"
    );
    for j in ["j2", "j3"] {
        vm.mig_ok(&["kill", j]);
    }
}

#[test]
fn a_suspended_job_stops_where_it_is_gives_its_processors_away_and_resumes() {
    let vm = Vm::start(2);
    // Two VPs of a shell loop (a program that knows nothing of mig), one on
    // each host's one processor.
    let out = vm.mig_ok(&[
        "spawn",
        "-n",
        "2",
        "--",
        "/bin/sh",
        "-c",
        "i=0; while :; do i=$((i+1)); echo tick $i; sleep 0.05; done",
    ]);
    let j = stdout(&out).trim().to_string();
    let procs = || -> Vec<u32> {
        let mut p = vm.job_processes(&j, "h0");
        p.extend(vm.job_processes(&j, "h1"));
        p
    };
    assert!(
        wait_until(Duration::from_secs(20), || procs().len() >= 2),
        "the job's VPs never ran"
    );
    let said = stdout(&vm.mig_ok(&["suspend", &j]));
    assert!(
        said.contains("suspended: 2 VPs stopped on h0, h1"),
        "{said}"
    );
    // (Generous: /proc shows a stop once the process is next scheduled,
    // which on a loaded machine takes a while.)
    assert!(
        wait_until(Duration::from_secs(30), || procs()
            .iter()
            .all(|&p| mig_tests::stopped(p))),
        "every process of the job stops"
    );
    // Stopped it stays: its output does not grow, through slot switches too.
    let before = stdout(&vm.mig(&["logs", &j])).len();
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(stdout(&vm.mig(&["logs", &j])).len(), before);
    assert!(procs().iter().all(|&p| mig_tests::stopped(p)));
    // Seen as suspended, and its processors given away: the map holds none
    // of its cells, and a job that needs both processors runs at once.
    assert_eq!(job_json(&vm, 0, &j).expect("listed")["state"], "suspended");
    let ps = vm.json(&["ps", &j]);
    assert!(
        ps.as_array()
            .is_some_and(|a| a.len() == 2 && a.iter().all(|v| v["state"] == "suspended")),
        "{ps}"
    );
    let map = stdout(&vm.mig(&["map", "--json"]));
    assert!(!map.contains(&format!("\"{j}\"")), "{map}");
    let other = vm.mig(&[
        "spawn", "-n", "2", "--wait", "--", "/bin/sh", "-c", "echo hi",
    ]);
    assert!(other.status.success(), "{}", stderr(&other));
    // As text: who started each job by name, and every row in line with
    // the heading though "suspended" is the longest state.
    let text = stdout(&vm.mig_ok(&["jobs"]));
    let lines: Vec<&str> = text.lines().collect();
    let column = |word: &str| lines[0].find(word).expect("a heading");
    let me = nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .expect("this test's user")
        .name;
    assert_eq!(lines.len(), 3, "{text}");
    for l in &lines[1..] {
        assert!(l[column("USER")..].starts_with(&me), "{text}");
        assert!(l[column("COMMAND")..].starts_with("/bin/sh -c "), "{text}");
    }
    // Requests that make no sense are refused, saying why.
    for (args, says) in [
        (vec!["suspend", j.as_str()], "already suspended"),
        (vec!["resume", "j2"], "has already ended"),
        (vec!["resume", "j99"], "no job \"j99\""),
        (vec!["checkpoint", j.as_str()], "is suspended"),
    ] {
        let out = vm.mig(&args);
        assert!(!out.status.success(), "{args:?}");
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
    // Resumed: it runs again where it was, its output growing.
    let said = stdout(&vm.mig_ok(&["resume", &j, "--json"]));
    let v: serde_json::Value = serde_json::from_str(&said).expect("JSON");
    assert_eq!(v["ok"], true, "{said}");
    assert!(
        wait_until(Duration::from_secs(10), || procs()
            .iter()
            .all(|&p| !mig_tests::stopped(p))),
        "the job's processes run again"
    );
    assert!(wait_until(Duration::from_secs(10), || stdout(
        &vm.mig(&["logs", &j])
    )
    .len()
        > before));
    assert_eq!(job_json(&vm, 0, &j).expect("listed")["state"], "running");
    let out = vm.mig(&["resume", &j]);
    assert!(stderr(&out).contains("not suspended"), "{}", stderr(&out));
    vm.mig_ok(&["kill", &j]);
}

#[test]
fn ps_and_jobs_show_the_cpu_time_of_running_vps() {
    let vm = Vm::start(1);
    let out = vm.mig_ok(&["spawn", "--", "/bin/sh", "-c", "while :; do :; done"]);
    let j = stdout(&out).trim().to_string();
    // Hosts say every couple of seconds what their VPs have used.
    let cpu = || -> u64 {
        let ps = vm.json(&["ps", &j]);
        ps.as_array()
            .and_then(|a| a.first())
            .and_then(|v| v["cpu_ms"].as_u64())
            .unwrap_or(0)
    };
    assert!(
        wait_until(Duration::from_secs(20), || cpu() >= 300),
        "the busy VP's CPU time shows in mig ps"
    );
    let listed = job_json(&vm, 0, &j).expect("listed");
    assert!(listed["cpu_ms"].as_u64() >= Some(300), "{listed}");
    let ps = stdout(&vm.mig(&["ps"]));
    assert!(
        ps.lines().next().is_some_and(|h| h.contains(" CPU ")),
        "{ps}"
    );
    let show = stdout(&vm.mig(&["show", &j]));
    assert!(show.contains("CPU=") && show.contains("(so far)"), "{show}");
    vm.mig_ok(&["kill", &j]);
}

/// `mig top` in a pseudo-terminal of `cols` x `rows`, as ssh gives one: a
/// session of its own with the terminal as its controlling one. The child,
/// and the terminal's master side to read the screen from and type at.
fn top_in_a_terminal(vm: &Vm, cols: u16, rows: u16) -> (std::process::Child, std::fs::File) {
    use std::os::unix::process::CommandExt;
    let size = nix::pty::Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = nix::pty::openpty(Some(&size), None).expect("openpty");
    let slave = pty.slave;
    // Not `command`: that puts it in a process group, and a group's leader
    // cannot start a session.
    let mut cmd = std::process::Command::new(mig_tests::bin("mig"));
    cmd.env("MIG_DAEMON", vm.sock())
        .env("TERM", "xterm")
        .args(["top", "--interval", "0.3"])
        .stdin(Stdio::from(slave.try_clone().expect("dup")))
        .stdout(Stdio::from(slave.try_clone().expect("dup")))
        .stderr(Stdio::from(slave));
    // SAFETY: prctl, setsid and ioctl are async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            // Ends with the test, as `command`'s children do.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            nix::unistd::setsid()?;
            if libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().expect("mig top");
    (child, std::fs::File::from(pty.master))
}

#[test]
fn mig_top_draws_hosts_map_jobs_and_events_live_in_a_plain_terminal_and_quits_on_q() {
    use std::io::{Read, Write};
    use std::sync::{Arc, Mutex};
    let vm = Vm::start(2);
    // Without a terminal: refused, pointing at --once.
    let out = vm.mig(&["top"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--once"), "{}", stderr(&out));
    let (mut top, mut screen) = top_in_a_terminal(&vm, 110, 36);
    let seen = Arc::new(Mutex::new(Vec::<u8>::new()));
    let reader = {
        let seen = Arc::clone(&seen);
        let mut screen = screen.try_clone().expect("dup");
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // Ends with EIO once the terminal's last user has gone.
            while let Ok(n) = screen.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.lock().expect("lock").extend_from_slice(&buf[..n]);
            }
        })
    };
    let text = || String::from_utf8_lossy(&seen.lock().expect("lock")).into_owned();
    // What the terminal shows now: the bytes so far played through a
    // terminal emulator (the screen is drawn by moving the cursor over what
    // has not changed, so the raw bytes hold words, not lines).
    let on_screen = || {
        let mut term = vt100::Parser::new(36, 110, 0);
        term.process(&seen.lock().expect("lock"));
        term.screen().contents()
    };
    assert!(
        wait_until(Duration::from_secs(10), || {
            let s = on_screen();
            s.contains("Allocation map") && s.contains("h1/0")
        }),
        "{}",
        on_screen()
    );
    // A job started meanwhile appears, live, as a row and an event.
    let started = vm.mig_ok(&["spawn", "-n", "2", "--", "/bin/sh", "-c", "sleep 30"]);
    let job = stdout(&started).trim().to_string();
    assert!(
        wait_until(Duration::from_secs(20), || {
            let s = on_screen();
            s.contains(&format!("{job} started: 2 VPs of /bin/sh"))
                && s.contains("2 running")
                && s.contains("/bin/sh -c sleep 30")
        }),
        "{}",
        on_screen()
    );
    screen.write_all(b"q").expect("type q");
    assert!(
        wait_until(Duration::from_secs(5), || top
            .try_wait()
            .ok()
            .flatten()
            .is_some()),
        "q did not end mig top"
    );
    let status = top.wait().expect("wait");
    assert!(status.success(), "{status}");
    drop(screen);
    let _ = reader.join();
    // The screen it took is given back: the alternate screen entered, then left.
    let all = text();
    let enter = all.find("\u{1b}[?1049h").expect("alternate screen entered");
    let leave = all.rfind("\u{1b}[?1049l").expect("alternate screen left");
    assert!(enter < leave);
    // One frame as text, for scripts.
    let once = stdout(&vm.mig_ok(&["top", "--once", "--width", "100", "--height", "30"]));
    assert!(once.contains(&job) && once.contains("h1"), "{once}");
    assert_eq!(once.lines().count(), 30);
    let look = vm.json(&["top", "--once"]);
    assert_eq!(look["hosts"].as_array().map(Vec::len), Some(2), "{look}");
    assert!(
        look["jobs"]
            .as_array()
            .is_some_and(|j| j.iter().any(|j| j["job"] == job.as_str())),
        "{look}"
    );
    assert_eq!(look["vps"].as_array().map(Vec::len), Some(2), "{look}");
    assert!(look["map"]["slots"].is_array(), "{look}");
    vm.mig_ok(&["kill", &job]);
}

#[test]
fn a_vp_that_takes_more_memory_than_its_job_asked_for_is_ended_saying_so() {
    let vm = Vm::start(1);
    let testvp = mig_tests::bin("testvp").display().to_string();
    // Within what it asked for, it runs to its end.
    let out = vm.mig(&[
        "spawn",
        "--mem",
        "64",
        "--wait",
        "--",
        "/bin/sh",
        "-c",
        "echo fine",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("fine"));
    if vm.log(0).contains("no mem controller") {
        // A host without the memory controller says it does not hold VPs
        // to what they asked for (and runs them all the same, above).
        assert!(vm.log(0).contains("`mig spawn --mem` is not enforced here"));
        return;
    }
    // 200 MiB in a VP whose job asked for 64 MB.
    let out = vm.mig(&[
        "spawn", "--mem", "64", "--wait", "--", &testvp, "hold", "200",
    ]);
    assert_eq!(out.status.code(), Some(137), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "killed by signal 9: it used more than the 64 MB of memory its job asked for \
             (mig spawn --mem)"
        ),
        "{}\n{}",
        stderr(&out),
        vm.log(0)
    );
}

#[test]
fn a_job_that_asks_for_memory_runs_only_where_a_host_offers_it() {
    let mut vm = Vm::start_with(1, &["--memory-mb", "1000"]);
    let addr = vm.addr.clone();
    let (big, _) = vm.daemon(1, Some(&addr), &["--memory-mb", "8000"]);
    vm.daemons.push(Some(big));
    assert!(wait_until(Duration::from_secs(10), || {
        vm.json(&["hosts"])
            .as_array()
            .is_some_and(|h| h.iter().filter(|h| h["alive"] == true).count() == 2)
    }));
    let hosts = vm.json(&["hosts"]);
    let offers = |name: &str| {
        hosts
            .as_array()
            .and_then(|a| a.iter().find(|h| h["name"] == name))
            .map(|h| h["memory_mb"].clone())
    };
    assert_eq!(offers("h0"), Some(serde_json::json!(1000)), "{hosts}");
    assert_eq!(offers("h1"), Some(serde_json::json!(8000)), "{hosts}");
    // 3 GB a VP: both VPs on h1, though h0's processor is free.
    let job = stdout(&vm.mig_ok(&[
        "spawn", "-n", "2", "--mem", "3G", "--", "/bin/sh", "-c", "sleep 30",
    ]))
    .trim()
    .to_string();
    assert!(wait_until(Duration::from_secs(10), || {
        let ps = vm.json(&["ps", &job]);
        ps.as_array().is_some_and(|a| {
            a.len() == 2
                && a.iter()
                    .all(|v| v["state"] == "running" && v["host"] == "h1")
        })
    }));
    // Moved by hand to a host without the memory: refused, saying why.
    let ps = vm.json(&["ps", &job]);
    let tid = ps[0]["tid"].as_str().expect("tid").to_string();
    let out = vm.mig(&["migrate", &tid, "--to", "h0"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("needs 3072 MB of memory and h0 offers 1000 MB"),
        "{}",
        stderr(&out)
    );
    // A third VP of 3 GB: h1's memory holds its two (6 GB of 8) but not
    // a third in another slot, so it waits, until the first job ends.
    let third = stdout(&vm.mig_ok(&["spawn", "--mem", "3G", "--", "/bin/sh", "-c", "sleep 30"]))
        .trim()
        .to_string();
    let state = |vm: &Vm| vm.json(&["ps", &third])[0]["state"].clone();
    assert_eq!(state(&vm), "waiting", "{}", vm.json(&["ps", &third]));
    // More than any host offers: refused at once.
    let out = vm.mig(&["spawn", "--mem", "16GB", "--", "/bin/true"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("no host offers 16384 MB of memory a VP: the most is 8000 MB, on h1"),
        "{}",
        stderr(&out)
    );
    let out = vm.mig(&["spawn", "--mem", "lots", "--", "/bin/true"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("a unit K, M, G or T"),
        "says what it takes: {}",
        stderr(&out)
    );
    // A job that asks for nothing goes anywhere.
    let out = vm.mig_ok(&["spawn", "-n", "2", "--wait", "--", "/bin/true"]);
    assert!(out.status.success());
    vm.mig_ok(&["kill", &job]);
    assert!(
        wait_until(Duration::from_secs(10), || state(&vm) == "running"),
        "{}",
        vm.json(&["ps", &third])
    );
    vm.mig_ok(&["kill", &third]);
}

#[test]
fn a_vp_its_own_job_kills_is_no_failure_and_one_mig_kill_ends_is() {
    let vm = Vm::start(2);
    let never = vm.dir.path().join("never");
    let testvp = mig_tests::bin("testvp");
    let out = vm.mig(&[
        "spawn",
        "--wait",
        "--",
        testvp.to_str().expect("utf-8"),
        "killkid",
        never.to_str().expect("utf-8"),
    ]);
    let lines = job_lines(&out);
    assert!(lines.iter().any(|l| l.contains("killed t")), "{lines:?}");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("signal"), "{}", stderr(&out));
    let j1 = job_json(&vm, 0, "j1").expect("j1 in mig jobs");
    assert_eq!(j1["status"], 0);
    // A VP killed from outside its job is a failure, as before.
    let job = vm.start_job(1, &testvp, &[std::path::Path::new("spin"), &never]);
    assert!(wait_until(Duration::from_secs(10), || vm
        .json(&["ps"])
        .as_array()
        .is_some_and(|a| a.iter().any(|v| v["state"] == "running"))));
    let tid = vm.json(&["ps"])[0]["tid"]
        .as_str()
        .expect("a Tid")
        .to_string();
    vm.mig_ok(&["kill", &tid]);
    let out = job.wait_with_output().expect("spawn --wait");
    assert_eq!(out.status.code(), Some(128 + 9), "{}", stderr(&out));
}
