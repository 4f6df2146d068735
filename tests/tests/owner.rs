//! The owner monitor on real daemons: a host's owner coming back (a CPU-bound
//! program on their desk, typing at a terminal, `mig owner reclaim`) stops
//! its VPs and the scheduler moves them off; the owner leaving gives the host
//! back to the pool and it is used again. VPs' own load is never the owner's.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mig_tests::{bin, job_succeeds, stopped, wait_until, Desk, Vm};

fn policy(dir: &Path, text: &str) -> String {
    let p = dir.join("owner.toml");
    std::fs::write(&p, text).expect("config");
    p.display().to_string()
}

/// Host `name`'s owner report, from `mig hosts --json`.
fn owner(vm: &Vm, name: &str) -> serde_json::Value {
    vm.json(&["hosts"])
        .as_array()
        .and_then(|a| a.iter().find(|h| h["name"] == name).cloned())
        .map(|h| h["owner"].clone())
        .unwrap_or_default()
}

/// The hosts of every VP of the job, by Tid.
fn hosts_of(vm: &Vm) -> Vec<(String, String, u32)> {
    vm.json(&["ps"])
        .as_array()
        .map(|a| {
            a.iter()
                .map(|v| {
                    (
                        v["host"].as_str().unwrap_or("").to_string(),
                        v["state"].as_str().unwrap_or("").to_string(),
                        v["pid"].as_u64().unwrap_or(0) as u32,
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `mig ARGS` succeeds; its stdout.
fn mig_ok(vm: &Vm, args: &[&str]) -> String {
    let out = vm.mig(args);
    assert!(
        out.status.success(),
        "mig {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Both VPs of a `spin` job ended well.
/// All `n` VPs of the VM run and have said they can be moved (a VP that has
/// just started may not have yet, and is then not moved off a reclaimed host).
fn running_movable(vm: &Vm, n: usize) -> bool {
    let ps = vm.json(&["ps"]);
    let vps = ps.as_array().cloned().unwrap_or_default();
    vps.len() == n
        && vps
            .iter()
            .all(|v| v["state"] == "running" && v["movable"] == true && v["host"].is_string())
}

fn both_spun(lines: &[String]) {
    assert_eq!(
        lines.iter().filter(|l| l.contains("spin done")).count(),
        2,
        "{lines:?}"
    );
}

fn finish(vm: &Vm, job: Child) -> Vec<String> {
    std::fs::write(vm.dir.path().join("stop"), "").expect("stop file");
    job_succeeds(job, "")
}

#[test]
fn a_cpu_hog_on_the_desk_takes_the_host_back_and_its_end_gives_it_back() {
    let mut desk = Desk::open();
    let mut vm = Vm::start(1);
    let conf = policy(
        vm.dir.path(),
        "[owner]\npoll_ms = 20\nreclaim_load = 0.2\noffer_max_load = 0.1\noffer_after_idle_s = 1\n",
    );
    let scope = format!("tree:{}", desk.pid());
    let addr = vm.addr.clone();
    let (c, _) = vm.daemon(
        1,
        Some(&addr),
        &["--owner-scope", &scope, "--config", &conf],
    );
    vm.daemons.push(Some(c));
    let stop = vm.dir.path().join("stop");
    let job = vm.start_job(2, &bin("testvp"), &[Path::new("spin"), &stop]);
    assert!(
        wait_until(Duration::from_secs(10), || running_movable(&vm, 2)),
        "{:?}",
        hosts_of(&vm)
    );
    assert!(
        hosts_of(&vm).iter().any(|(h, _, _)| h == "h1"),
        "{:?}",
        hosts_of(&vm)
    );
    assert_eq!(owner(&vm, "h1")["state"], "offered");

    // The owner starts a busy loop: h1 is theirs again, its VP moves to h0.
    desk.type_line("while :; do :; done &");
    // (On a machine busy with other work the first try, in the idle
    // class, can starve; the retry comes 5 s after it.)
    assert!(
        wait_until(Duration::from_secs(30), || hosts_of(&vm)
            .iter()
            .all(|(h, s, _)| h == "h0" && s == "running")),
        "{:?}\n{}",
        hosts_of(&vm),
        vm.log(1)
    );
    let o = owner(&vm, "h1");
    assert_eq!(o["state"], "reclaimed", "{o}");
    assert!(
        o["decided_by"].as_str().unwrap_or("").starts_with("load:"),
        "{o}"
    );

    // The owner stops it: after 1 s idle h1 is offered, and the scheduler
    // spreads the job over both hosts again (MTAT: it gets faster).
    desk.type_line("kill $!");
    assert!(
        wait_until(Duration::from_secs(10), || hosts_of(&vm)
            .iter()
            .any(|(h, s, _)| h == "h1" && s == "running")),
        "h1 was not used again: {:?}\n{}",
        hosts_of(&vm),
        vm.log(0)
    );
    assert_eq!(owner(&vm, "h1")["state"], "offered");
    // One VP went from h1 to h0 and back, at its safe points or, where it
    // missed one on a busy machine, saved from outside (which its own
    // count of hosts does not see).
    let log = vm.log(0);
    assert!(
        log.contains(" moved from h1 to h0") && log.contains(" moved from h0 to h1"),
        "{log}"
    );
    let lines = finish(&vm, job);
    assert_eq!(
        lines.iter().filter(|l| l.contains("spin done")).count(),
        2,
        "{lines:?}"
    );
}

#[test]
fn reclaim_and_release_by_hand_and_vps_wait_stopped_when_no_host_is_free() {
    let vm = Vm::start(2);
    let stop = vm.dir.path().join("stop");
    let job = vm.start_job(2, &bin("testvp"), &[Path::new("spin"), &stop]);
    assert!(wait_until(Duration::from_secs(10), || running_movable(
        &vm, 2
    )));
    let said = mig_ok(&vm, &["owner", "reclaim", "--host", "h1"]);
    assert!(
        said.contains("h1 is reclaimed (mig owner reclaim)"),
        "{said}"
    );
    assert!(
        wait_until(Duration::from_secs(10), || hosts_of(&vm)
            .iter()
            .all(|(h, s, _)| h == "h0" && s == "running")),
        "{:?}",
        hosts_of(&vm)
    );
    // No host left: both VPs wait where they are, stopped, none lost.
    mig_ok(&vm, &["owner", "reclaim", "--host", "h0"]);
    let vps = hosts_of(&vm);
    assert!(
        vps.iter()
            .all(|(h, s, _)| h == "h0" && s == "stopped (owner back)"),
        "{vps:?}"
    );
    // A SIGSTOP shows in /proc once the process is next scheduled.
    assert!(
        wait_until(Duration::from_secs(2), || vps.iter().all(|v| stopped(v.2))),
        "{vps:?}"
    );
    // It stays taken back (an explicit reclaim waits for release).
    std::thread::sleep(Duration::from_millis(300));
    assert!(hosts_of(&vm).iter().all(|(_, _, pid)| stopped(*pid)));
    let status = vm.json(&["owner", "status", "--host", "h0"]);
    assert_eq!(status["h0"]["state"], "reclaimed", "{status}");
    assert_eq!(status["h0"]["decided_by"], "mig owner reclaim", "{status}");
    mig_ok(&vm, &["owner", "release", "--host", "h0"]);
    let vps = hosts_of(&vm);
    assert!(
        vps.iter()
            .all(|(_, s, pid)| s == "running" && !stopped(*pid)),
        "{vps:?}"
    );
    let out = vm.mig(&["owner", "reclaim", "--host", "h9"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no live host \"h9\""));
    both_spun(&finish(&vm, job));
}

#[test]
fn typing_at_a_watched_terminal_is_owner_input() {
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let tty = std::fs::read_link(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&pty.slave)
    ))
    .expect("tty path");
    // An access long ago: the kernel updates it on the next read (it skips
    // updates less than 8 s apart).
    let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .read(true)
        .open(&tty)
        .expect("open tty")
        .set_times(std::fs::FileTimes::new().set_accessed(hour_ago))
        .expect("set atime");
    let dir = tempfile::tempdir().expect("tmp");
    let conf = policy(
        dir.path(),
        &format!(
            "[owner]\npoll_ms = 20\nterminals = [{:?}]\n",
            tty.display().to_string()
        ),
    );
    let vm = Vm::start_with(1, &["--config", &conf]);
    assert_eq!(owner(&vm, "h0")["state"], "offered");
    let t = Instant::now();
    // The owner types; the program on the terminal reads it.
    nix::unistd::write(&pty.master, b"ls\n").expect("type");
    let mut buf = [0u8; 16];
    let n = nix::unistd::read(std::os::fd::AsRawFd::as_raw_fd(&pty.slave), &mut buf)
        .expect("read the terminal");
    assert_eq!(&buf[..n], b"ls\n");
    assert!(
        wait_until(Duration::from_secs(5), || owner(&vm, "h0")["state"]
            == "reclaimed"),
        "{}",
        owner(&vm, "h0")
    );
    let o = owner(&vm, "h0");
    assert_eq!(
        o["decided_by"],
        format!("input: tty {}", tty.display()),
        "{o}"
    );
    eprintln!("terminal input seen in {:?}", t.elapsed());
}

#[test]
fn a_vps_own_load_is_never_the_owners() {
    // The daemon inside the watched tree: its VPs are in it too.
    let dir = tempfile::tempdir().expect("tmp");
    let state = dir.path().join("h0");
    let conf = policy(
        dir.path(),
        "[owner]\npoll_ms = 20\nreclaim_load = 0.2\noffer_max_load = 0.1\n",
    );
    let mut shell = Command::new("sh")
        .arg("-c")
        .arg("\"$0\" --owner-scope tree:$$ \"$@\"; exit $?")
        .arg(bin("migd"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--processors",
            "1",
            "--capacity",
            "1",
        ])
        .args(["--name", "h0", "--config", &conf, "--state-dir"])
        .arg(&state)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("sh");
    let group = nix::unistd::Pid::from_raw(shell.id() as i32);
    let _cleanup = KillGroup(group);
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(shell.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("address");
    assert!(!line.trim().is_empty(), "migd did not start");
    let sock = state.join("control.sock");
    let mig = |args: &[&str]| {
        mig_tests::command("mig")
            .env("MIG_DAEMON", &sock)
            .args(args)
            .output()
            .expect("mig")
    };
    let stop = dir.path().join("stop");
    let out = mig(&[
        "spawn",
        "-n",
        "1",
        "--",
        &bin("testvp").display().to_string(),
        "spin",
        &stop.display().to_string(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A full core of VP work for a second, measured every 20 ms.
    std::thread::sleep(Duration::from_secs(1));
    let out = mig(&["owner", "status", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let h0 = &status["h0"];
    // Still offered: the VP's full core is not the owner's. (Counted as
    // the owner's, it would be a load of about 1 and the host taken back;
    // a crowded machine's sampling leaves up to half a core not ours.)
    assert_eq!(h0["state"], "offered", "{h0}");
    assert!(h0["load"].as_f64().is_some_and(|l| l < 0.8), "{h0}");
    let ps = mig(&["ps", "--json"]);
    let ps: serde_json::Value = serde_json::from_slice(&ps.stdout).expect("json");
    assert_eq!(ps[0]["state"], "running", "{ps}");
    std::fs::write(&stop, "").expect("stop");
    let _ = mig(&["halt"]);
    let _ = shell.wait();
}

struct KillGroup(nix::unistd::Pid);

impl Drop for KillGroup {
    fn drop(&mut self) {
        let _ = nix::sys::signal::killpg(self.0, nix::sys::signal::Signal::SIGKILL);
    }
}

#[test]
fn bad_owner_settings_are_clear_errors_at_start() {
    let dir = tempfile::tempdir().expect("tmp");
    for (text, flag, says) in [
        ("[owner]\nreclaim_load = -2.0\n", None, "owner.reclaim_load"),
        ("[owner]\npoll_ms = 0\n", None, "owner.poll_ms"),
        (
            "[owner]\nterminals = \"everyone\"\n",
            None,
            "owner.terminals",
        ),
        ("", Some("tree:abc"), "machine, none or tree:PID"),
    ] {
        let conf = policy(dir.path(), text);
        let mut cmd = mig_tests::command("migd");
        cmd.args(["--listen", "127.0.0.1:0", "--config", &conf, "--state-dir"])
            .arg(dir.path().join("state"));
        if let Some(f) = flag {
            cmd.args(["--owner-scope", f]);
        }
        let out = cmd.output().expect("migd");
        assert_eq!(out.status.code(), Some(1), "{text:?} {flag:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{text:?} {flag:?}: {err}");
    }
}

#[test]
fn a_vp_taken_back_again_as_it_restarts_is_never_lost() {
    // Reclaim h1 the moment its VP is back: the VP is stopped and asked to
    // move while it is still starting (found by the owner benchmark: a
    // checkpoint nudge before libmig's handler killed it).
    let vm = Vm::start(2);
    let stop = vm.dir.path().join("stop");
    let job = vm.start_job(2, &bin("testvp"), &[Path::new("spin"), &stop]);
    let on_h1 = |vm: &Vm| {
        hosts_of(vm)
            .iter()
            .any(|(h, s, _)| h == "h1" && s == "running")
    };
    assert!(wait_until(Duration::from_secs(10), || on_h1(&vm)));
    for round in 0..20 {
        mig_ok(&vm, &["owner", "reclaim", "--host", "h1"]);
        mig_ok(&vm, &["owner", "release", "--host", "h1"]);
        // A move back waits for the VP's safe point, and a missed one is
        // tried again later: slow on a loaded machine, never lost.
        assert!(
            wait_until(Duration::from_secs(30), || on_h1(&vm)),
            "round {round}: {:?}\n{}",
            hosts_of(&vm),
            vm.log(1)
        );
    }
    both_spun(&finish(&vm, job));
}

#[test]
fn vps_with_nowhere_to_go_are_parked_on_disk_and_come_back_from_it() {
    let dir = tempfile::tempdir().expect("tmp");
    let conf = policy(
        dir.path(),
        "[daemon]\nsafe_point_timeout_ms = 5000\n[owner]\npark_after_s = 0.2\n",
    );
    let vm = Vm::start_with(2, &["--config", &conf]);
    let stop = vm.dir.path().join("stop");
    let job = vm.start_job(2, &bin("testvp"), &[Path::new("spin"), &stop]);
    let all_on = |vm: &Vm, host: &str, state: &str| {
        let v = hosts_of(vm);
        v.len() == 2 && v.iter().all(|(h, s, _)| h == host && s == state)
    };
    assert!(wait_until(Duration::from_secs(60), || running_movable(
        &vm, 2
    )));
    for host in ["h1", "h0"] {
        mig_ok(&vm, &["owner", "reclaim", "--host", host]);
    }
    let h0_dir = vm.dir.path().join("h0");
    let parked_files = || {
        std::fs::read_dir(&h0_dir)
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".parked"))
                    .count()
            })
            .unwrap_or(0)
    };
    // Both wait on h0, then go to its disk: no process left.
    assert!(
        wait_until(Duration::from_secs(60), || all_on(
            &vm,
            "h0",
            "parked on disk (owner back)"
        ) && parked_files() == 2),
        "{:?}\n{}",
        hosts_of(&vm),
        vm.log(0)
    );
    assert!(hosts_of(&vm).iter().all(|(_, _, pid)| *pid == 0));
    // h0's owner leaves: they start again there from their images.
    mig_ok(&vm, &["owner", "release", "--host", "h0"]);
    assert!(
        wait_until(Duration::from_secs(60), || all_on(&vm, "h0", "running")),
        "{:?}\n{}",
        hosts_of(&vm),
        vm.log(0)
    );
    assert_eq!(parked_files(), 0);
    // Parked again, then h1 is free: the images go there.
    mig_ok(&vm, &["owner", "reclaim", "--host", "h0"]);
    assert!(wait_until(Duration::from_secs(60), || all_on(
        &vm,
        "h0",
        "parked on disk (owner back)"
    )));
    mig_ok(&vm, &["owner", "release", "--host", "h1"]);
    assert!(
        wait_until(Duration::from_secs(60), || all_on(&vm, "h1", "running")),
        "{:?}\n{}",
        hosts_of(&vm),
        vm.log(0)
    );
    both_spun(&finish(&vm, job));
}

#[test]
fn a_parked_image_damaged_on_disk_is_a_clear_failure_when_it_starts_again() {
    let dir = tempfile::tempdir().expect("tmp");
    let conf = policy(
        dir.path(),
        "[daemon]\nsafe_point_timeout_ms = 5000\n[owner]\npark_after_s = 0.2\n",
    );
    let vm = Vm::start_with(1, &["--config", &conf]);
    let job = vm.start_job(1, &bin("testvp"), &["hold", "8"]);
    assert!(wait_until(Duration::from_secs(10), || running_movable(
        &vm, 1
    )));
    mig_ok(&vm, &["owner", "reclaim", "--host", "h0"]);
    let h0_dir = vm.dir.path().join("h0");
    let parked = || {
        std::fs::read_dir(&h0_dir).ok().and_then(|d| {
            d.flatten()
                .map(|e| e.path())
                .find(|p| p.to_string_lossy().ends_with(".parked"))
        })
    };
    // (On a machine busy with other work the VP, resumed in the idle
    // class, may take its whole 5 s and be saved from outside instead.)
    assert!(
        wait_until(Duration::from_secs(60), || parked().is_some()
            && hosts_of(&vm)
                .iter()
                .all(|(_, s, _)| s == "parked on disk (owner back)")),
        "{:?}\n{}",
        hosts_of(&vm),
        vm.log(0)
    );
    // One byte of its state changed while it waits on disk.
    let path = parked().expect("parked image");
    let mut bytes = std::fs::read(&path).expect("read");
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    std::fs::write(&path, &bytes).expect("spoil");
    mig_ok(&vm, &["owner", "release", "--host", "h0"]);
    let out = job.wait_with_output().expect("job");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("checkpoint is corrupted"), "{said}");
    // The daemon goes on serving.
    assert!(vm.mig(&["ps"]).status.success());
}

/// (host, state, pid) of a VP running on a host other than the master,
/// once there is one.
fn running_off_master(vm: &Vm) -> (String, String, u32) {
    let find = || {
        hosts_of(vm)
            .into_iter()
            .find(|(h, s, _)| h != "h0" && s == "running")
    };
    assert!(
        wait_until(Duration::from_secs(10), || find().is_some()),
        "no VP runs off the master: {:?}",
        hosts_of(vm)
    );
    find().expect("a VP off the master")
}

/// CPU time (user + system, in clock ticks) a process has used.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<u64> = after
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // Fields 14 and 15 of stat; after the command's ')' they are 12th and 13th.
    f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0)
}

/// A CPU-bound VP that knows nothing of libmig and leaves a busy
/// grandchild behind in a session of its own (double fork and `setsid`).
const ESCAPING: &str = "(setsid sh -c 'while :; do :; done' &); while :; do :; done";

#[test]
fn programs_that_cannot_move_stay_stopped_on_a_reclaimed_host_through_retries() {
    // Six CPU-bound VPs that know nothing of libmig, each with a grandchild
    // that left its tree: they cannot be saved whole from outside, so
    // every try to move them off a reclaimed host fails before touching
    // them, and every process of them, the grandchildren that left their
    // process group too, stays stopped.
    let mut vm = Vm::start(3);
    vm.mig_ok(&["spawn", "-n", "6", "--", "/bin/sh", "-c", ESCAPING]);
    let all = |vm: &Vm| -> usize {
        (0..3)
            .map(|i| vm.job_processes("j1", &format!("h{i}")).len())
            .sum()
    };
    assert!(
        wait_until(Duration::from_secs(10), || all(&vm) == 12),
        "not 12 processes for 6 VPs: {}",
        all(&vm)
    );
    let host = (0..3)
        .map(|i| format!("h{i}"))
        .max_by_key(|h| vm.job_processes("j1", h).len())
        .expect("hosts");
    let pids = vm.job_processes("j1", &host);
    assert!(
        pids.len() >= 2,
        "no VP with its grandchild on {host}: {pids:?}"
    );
    mig_ok(&vm, &["owner", "reclaim", "--host", &host]);
    assert!(
        wait_until(Duration::from_secs(5), || pids.iter().all(|&p| stopped(p))),
        "not every process of the VPs on {host} stopped: {:?}",
        pids.iter().map(|&p| (p, stopped(p))).collect::<Vec<_>>()
    );
    // For the next 7 s (the scheduler tries to move them again, and each
    // try fails before they would run), nothing of them runs: at most a
    // tick each for what was under way at the stop.
    let before: Vec<u64> = pids.iter().map(|&p| cpu_ticks(p)).collect();
    std::thread::sleep(Duration::from_secs(7));
    for (&p, b) in pids.iter().zip(before) {
        assert!(stopped(p), "VP process {p} runs on {host}");
        let used = cpu_ticks(p) - b;
        assert!(used <= 1, "VP process {p} used {used} ticks on {host}");
    }
    // `mig ps` says why they wait, and why they could not move.
    let ps = vm.json(&["ps"]);
    let here: Vec<&serde_json::Value> = ps
        .as_array()
        .map(|a| a.iter().filter(|v| v["host"] == host.as_str()).collect())
        .unwrap_or_default();
    let why: Vec<&str> = here.iter().filter_map(|v| v["state"].as_str()).collect();
    assert!(
        !why.is_empty() && why.iter().all(|s| s.starts_with("stopped (owner back")),
        "{why:?}"
    );
    assert!(
        here.iter().all(|v| v["move_failed"]
            .as_str()
            .is_some_and(|m| m.contains("left its process tree"))),
        "{ps}"
    );
    // `mig hosts` says the same of the host.
    let hosts = vm.json(&["hosts"]);
    let held: Vec<serde_json::Value> = hosts
        .as_array()
        .and_then(|a| a.iter().find(|h| h["name"] == host.as_str()))
        .and_then(|h| h["waiting"].as_array().cloned())
        .unwrap_or_default();
    assert_eq!(held.len(), why.len(), "{hosts}");
    assert!(
        held.iter().all(|w| w["why"]
            .as_str()
            .is_some_and(|s| s.starts_with("stopped (owner back"))),
        "{hosts}"
    );
    let text = String::from_utf8_lossy(&vm.mig_ok(&["hosts"]).stdout).to_string();
    assert!(text.contains("waits here: stopped (owner back"), "{text}");
    // The owner leaves: they run again where they are, in the map again.
    mig_ok(&vm, &["owner", "release", "--host", &host]);
    let on_host = |vm: &Vm| -> Vec<String> {
        hosts_of(vm)
            .into_iter()
            .filter(|(h, _, _)| *h == host)
            .map(|(_, s, _)| s)
            .collect()
    };
    assert!(
        wait_until(Duration::from_secs(10), || {
            let s = on_host(&vm);
            s.len() == why.len() && s.iter().all(|s| s == "running")
        }),
        "{:?}\n{}",
        hosts_of(&vm),
        vm.log(0)
    );
    let map = vm.json(&["map"]);
    let cells = map["slots"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|slot| slot.as_array().cloned().unwrap_or_default())
        .filter(|c| c["processor"] == format!("{host}/0").as_str() && c["job"] == "j1")
        .count();
    assert!(cells > 0, "j1 not on {host} in the map: {map}");
    mig_ok(&vm, &["owner", "reclaim", "--host", &host]);
    // `mig kill` ends every process of the job, stopped or not.
    vm.mig_ok(&["kill", "j1"]);
    assert!(
        wait_until(Duration::from_secs(5), || all(&vm) == 0),
        "processes of the killed job left: {}",
        all(&vm)
    );
    // And `mig halt` those of a job still running.
    mig_ok(&vm, &["owner", "release", "--host", &host]);
    vm.mig_ok(&["spawn", "-n", "3", "--", "/bin/sh", "-c", ESCAPING]);
    let all2 = |vm: &Vm| -> usize {
        (0..3)
            .map(|i| vm.job_processes("j2", &format!("h{i}")).len())
            .sum()
    };
    assert!(wait_until(Duration::from_secs(10), || all2(&vm) == 6));
    vm.mig_ok(&["halt"]);
    for i in 0..3 {
        assert!(
            vm.wait(i, Duration::from_secs(10)).is_some(),
            "h{i} still up"
        );
    }
    assert_eq!(all2(&vm), 0, "processes left after mig halt");
}

#[test]
fn a_movable_vp_that_misses_its_safe_point_leaves_the_owner_saved_from_outside() {
    // A VP that says it can be moved but never reaches a safe point, alone
    // on a host whose owner comes back while a free host waits for it: it
    // is resumed in the idle class for at most safe_point_timeout_ms (300
    // here), then saved from outside, as a plain program is, and it runs
    // on the free host.
    let vm = Vm::start_config(3, "[daemon]\nsafe_point_timeout_ms = 300\n");
    vm.mig_ok(&[
        "spawn",
        "-n",
        "2",
        "--",
        &bin("testvp").display().to_string(),
        "spinner",
        "600000",
    ]);
    let (host, _, pid) = running_off_master(&vm);
    let logs = |vm: &Vm| (0..3).map(|i| vm.log(i)).collect::<Vec<_>>().join("\n");
    mig_ok(&vm, &["owner", "reclaim", "--host", &host]);
    assert!(
        wait_until(Duration::from_secs(60), || {
            let at = hosts_of(&vm);
            at.len() == 2
                && at
                    .iter()
                    .all(|(h, s, p)| *h != host && s == "running" && *p != pid)
        }),
        "it did not leave {host}: {:?}\n{}",
        hosts_of(&vm),
        logs(&vm)
    );
    let log = logs(&vm);
    assert!(
        log.contains("no safe point within 300 ms: it is saved from outside instead"),
        "{log}"
    );
    assert!(
        wait_until(Duration::from_secs(10), || !std::path::Path::new(&format!(
            "/proc/{pid}"
        ))
        .exists()),
        "its process is still on {host}"
    );
    // `mig owner status` counts what our VPs used since the owner came
    // back: each try to reach a safe point at most its deadline (and a
    // little for the loop's turn), nothing while it was saved.
    let tries = log.matches("no safe point within 300 ms").count() as u64;
    let status = vm.mig_ok(&["owner", "status", "--host", &host]);
    let text = String::from_utf8_lossy(&status.stdout).into_owned();
    let reported: u64 = text
        .split("VPs used ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no CPU figure in:\n{text}"));
    assert!(
        reported <= tries * (300 + 150) + 40,
        "reported {reported} ms over {tries} tries"
    );
    let _ = vm.mig(&["kill", "j1"]);
}

#[test]
fn a_job_killed_while_a_vp_moves_leaves_no_process_and_a_second_kill_says_it_ended() {
    let vm = Vm::start(3);
    vm.mig_ok(&[
        "spawn",
        "-n",
        "2",
        "--",
        &bin("testvp").display().to_string(),
        "hold",
        "192",
    ]);
    assert!(wait_until(Duration::from_secs(10), || hosts_of(&vm)
        .iter()
        .filter(|(_, s, _)| s == "running")
        .count()
        == 2));
    let (tid, at) = vm
        .json(&["ps"])
        .as_array()
        .and_then(|a| {
            a.iter()
                .map(|v| {
                    (
                        v["tid"].as_str().unwrap_or("").to_string(),
                        v["host"].as_str().unwrap_or("").to_string(),
                    )
                })
                .next()
        })
        .expect("a VP");
    let to = ["h0", "h1", "h2"]
        .into_iter()
        .find(|h| *h != at && !hosts_of(&vm).iter().any(|(x, _, _)| x == h))
        .unwrap_or(if at == "h1" { "h2" } else { "h1" });
    let out = vm.migrate(&tid, to);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Killed mid-move: the answer comes once every VP has ended, and
    // nothing comes back later (a restored copy would start late).
    kill_ends_it(&vm, 2, 3);
    let unknown = vm.mig(&["kill", "j7"]);
    assert!(!unknown.status.success(), "a kill of no job succeeded");
}

#[test]
fn a_restartable_vp_that_cannot_move_is_vacated_when_the_owner_stays_and_the_job_finishes() {
    // HTCondor's vacate of a vanilla job: a program that knows nothing of
    // libmig, on a host whose owner stays past vacate_after_s, is ended
    // there and started again from the beginning on a free host.
    let vm = Vm::start_config(3, "[owner]\nvacate_after_s = 1\n");
    vm.mig_ok(&[
        "spawn",
        "--restartable",
        "-n",
        "2",
        "--",
        "/bin/sh",
        "-c",
        "sleep 3; echo finished",
    ]);
    let (host, _, _) = running_off_master(&vm);
    mig_ok(&vm, &["owner", "reclaim", "--host", &host]);
    assert!(
        wait_until(Duration::from_secs(20), || vm
            .log(0)
            .contains("job j1 finished with status 0")),
        "{:?}\n{}",
        hosts_of(&vm),
        vm.log(0)
    );
    let log = vm.log(0);
    assert!(log.contains("vacating VP"), "{log}");
    let output = vm.output("j1");
    assert_eq!(output.matches("] finished").count(), 2, "{output}");
    assert!(vm.job_processes("j1", &host).is_empty());
}

/// Every process of job `j1` on hosts h0..h(n-1) of this machine.
fn every_process(vm: &Vm, n: usize) -> usize {
    (0..n)
        .map(|i| vm.job_processes("j1", &format!("h{i}")).len())
        .sum()
}

fn kill_ends_it(vm: &Vm, vps: usize, n: usize) {
    let out = vm.mig(&["kill", "j1"]);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        vm.log(0)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("killed: its {vps} VPs ended")),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        wait_until(Duration::from_secs(5), || every_process(vm, n) == 0),
        "{} processes of the killed job left\n{}",
        every_process(vm, n),
        vm.log(0)
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        every_process(vm, n),
        0,
        "a process of the killed job came back"
    );
    assert!(hosts_of(vm).is_empty(), "{:?}", hosts_of(vm));
    let again = vm.mig(&["kill", "j1"]);
    assert!(!again.status.success(), "a second kill succeeded");
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("has already ended"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
}

#[test]
fn a_job_killed_while_its_vps_are_parked_on_disk_leaves_no_image_and_no_process() {
    let vm = Vm::start_config(2, "[owner]\npark_after_s = 0.2\n");
    let stop = vm.dir.path().join("stop");
    let job = vm.start_job(2, &bin("testvp"), &[Path::new("spin"), &stop]);
    assert!(wait_until(Duration::from_secs(10), || running_movable(
        &vm, 2
    )));
    for host in ["h1", "h0"] {
        vm.mig_ok(&["owner", "reclaim", "--host", host]);
    }
    let parked_files = || {
        ["h0", "h1"]
            .iter()
            .flat_map(|h| {
                std::fs::read_dir(vm.dir.path().join(h))
                    .into_iter()
                    .flatten()
            })
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".parked"))
            .count()
    };
    // (A move to h0, a safe point missed, a save from outside: on a
    // crowded machine each step takes seconds.)
    assert!(
        wait_until(Duration::from_secs(60), || hosts_of(&vm)
            .iter()
            .all(|(_, s, _)| s == "parked on disk (owner back)")
            && parked_files() == 2),
        "{:?}\n{}",
        hosts_of(&vm),
        vm.log(0)
    );
    kill_ends_it(&vm, 2, 2);
    assert!(
        wait_until(Duration::from_secs(5), || parked_files() == 0),
        "{} parked images of the killed job left",
        parked_files()
    );
    let out = job.wait_with_output().expect("spawn --wait");
    assert!(
        !out.status.success(),
        "a killed job's spawn --wait succeeded"
    );
}

#[test]
fn a_job_killed_while_it_restarts_from_its_checkpoint_leaves_no_process() {
    // One voter: with three, stopping two hosts would leave the master
    // without a majority, and it would answer nothing until they resume.
    let mut vm = Vm::start_config(3, "[daemon]\nvoters = 1\n");
    vm.mig_ok(&[
        "spawn",
        "-n",
        "3",
        "--",
        &bin("testvp").display().to_string(),
        "hold",
        "1",
    ]);
    assert!(wait_until(Duration::from_secs(10), || running_movable(
        &vm, 3
    )));
    vm.mig_ok(&["checkpoint", "j1"]);
    // The hosts stopped (a paging machine): the restart cannot get past
    // looking for its images (they keep them) until they answer again, a
    // second later, by when the kill has been asked for.
    let nix_pid = |p: u32| nix::unistd::Pid::from_raw(p as i32);
    let (p1, p2) = (nix_pid(vm.pid(1)), nix_pid(vm.pid(2)));
    vm.signal(1, nix::sys::signal::Signal::SIGSTOP);
    vm.signal(2, nix::sys::signal::Signal::SIGSTOP);
    let go_on = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(1));
        for p in [p1, p2] {
            let _ = nix::sys::signal::kill(p, nix::sys::signal::Signal::SIGCONT);
        }
    });
    let restart = mig_tests::command("mig")
        .env("MIG_DAEMON", vm.sock())
        .args(["restart", "j1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("mig restart");
    assert!(wait_until(Duration::from_secs(10), || vm
        .log(0)
        .contains("looking for its checkpoint's images")));
    kill_ends_it(&vm, 3, 3);
    go_on.join().expect("SIGCONT");
    let out = restart.wait_with_output().expect("mig restart");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("was killed before it could restart"),
        "{said}"
    );
    vm.mig_ok(&["hosts"]);
}

/// The log lines of VPs stopped after a pause notice: (ms, why).
fn quiesced(log: &str) -> Vec<(u64, String)> {
    log.lines()
        .filter_map(|l| {
            let rest = l.split(" stopped ").nth(1)?;
            let (ms, why) = rest.split_once(" ms after its pause notice (")?;
            Some((ms.parse().ok()?, why.trim_end_matches(')').to_string()))
        })
        .collect()
}

#[test]
fn vps_that_ask_for_a_pause_notice_get_it_before_the_stop_and_no_longer_than_quiesce_ms() {
    // Three VPs on one host of three processors, each in its own job: a
    // libmig VP that says it is ready, one that ignores the notice, and a
    // shell loop that named SIGTERM (mig spawn --pause-signal).
    let dir = tempfile::tempdir().expect("tmp");
    let conf = policy(dir.path(), "[owner]\nquiesce_ms = 3000\n");
    let vm = Vm::start_procs(1, 3, &["--config", &conf]);
    let note = |name: &str| vm.dir.path().join(name);
    let testvp = bin("testvp").display().to_string();
    for (file, how) in [("ready", "ready"), ("ignore", "ignore")] {
        let f = note(file).display().to_string();
        vm.mig_ok(&["spawn", "--", &testvp, "pause", &f, how]);
    }
    let trap = format!(
        "trap 'echo notice > {}' TERM; while :; do :; done",
        note("shell").display()
    );
    vm.mig_ok(&[
        "spawn",
        "--pause-signal",
        "term",
        "--",
        "/bin/sh",
        "-c",
        &trap,
    ]);
    assert!(
        wait_until(Duration::from_secs(10), || {
            let h = hosts_of(&vm);
            h.len() == 3 && h.iter().all(|(_, s, _)| s == "running")
        }),
        "{:?}",
        hosts_of(&vm)
    );
    // (The libmig VPs have asked once they said "listening".)
    assert!(wait_until(Duration::from_secs(10), || ["j1", "j2"]
        .iter()
        .all(|j| vm.output(j).contains("] listening"))));
    mig_ok(&vm, &["owner", "reclaim", "--host", "h0"]);
    let pids: Vec<u32> = hosts_of(&vm).iter().map(|(_, _, p)| *p).collect();
    assert!(
        wait_until(Duration::from_secs(10), || pids.iter().all(|&p| stopped(p))),
        "not all stopped\n{}",
        vm.log(0)
    );
    // Each heard of it before it was stopped (it cannot write once stopped).
    for f in ["ready", "ignore", "shell"] {
        assert!(note(f).exists(), "{f} had no notice\n{}", vm.log(0));
    }
    let log = vm.log(0);
    let mut q = quiesced(&log);
    q.sort();
    assert_eq!(q.len(), 3, "{log}");
    // The ready one was stopped when it said so, before the deadline; the
    // others at the deadline, not before it and not long after.
    assert_eq!(q[0].1, "it said it was ready", "{log}");
    assert!(q[0].0 < 3000, "{log}");
    for (ms, why) in &q[1..] {
        assert_eq!(why, "at the quiesce_ms deadline", "{log}");
        assert!((3000..6000).contains(ms), "{log}");
    }
    // Stopped they stay.
    std::thread::sleep(Duration::from_millis(300));
    assert!(pids.iter().all(|&p| stopped(p)));
    assert!(log.contains("3 VPs told of the pause"), "{log}");
}

/// Kills a daemon that `mig add` started detached (not this test's child)
/// if the test ends before `mig delete` stops it.
struct Detached(Option<u32>);

impl Drop for Detached {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

#[test]
fn mig_add_starts_a_daemon_through_the_remote_shell_and_mig_delete_drains_it_and_stops_it() {
    let vm = Vm::start(2);
    // The remote shell: ssh's contract (HOST, then one command line for a
    // shell there), run here.
    let rsh = vm.dir.path().join("rsh-here");
    std::fs::write(&rsh, "#!/bin/sh\nshift\nexec sh -c \"$*\"\n").expect("rsh");
    std::fs::set_permissions(&rsh, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let state = vm.dir.path().join("added h7");
    let migd = bin("migd");
    let add = |name: &str, migd: &Path| {
        vm.mig(&[
            "add",
            "127.0.0.1",
            "--rsh",
            rsh.to_str().expect("utf-8"),
            "--migd",
            migd.to_str().expect("utf-8"),
            "--name",
            name,
            "--state-dir",
            state.to_str().expect("utf-8"),
            "--json",
            "--",
            "--processors",
            "1",
            "--capacity",
            "1",
            "--owner-scope",
            "none",
            "--vp-nice",
            "0",
            "--config",
            "none",
            "--safe-point-timeout-ms",
            "5000",
        ])
    };
    // A daemon that cannot start: the reason, and the token withdrawn.
    let out = add("h8", &vm.dir.path().join("no-migd-here"));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("starting a daemon on 127.0.0.1"), "{err}");
    let tokens = vm.json(&["token", "list"]);
    assert!(
        tokens
            .as_array()
            .is_some_and(|t| t.len() == 1 && t[0]["state"] == "revoked"),
        "{tokens}"
    );

    let out = add("h7", &migd);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(state.join("migd.log")).unwrap_or_default()
    );
    let said: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(said["host"], "h7", "{said}");
    let hosts = vm.json(&["hosts"]);
    let h7 = hosts
        .as_array()
        .and_then(|a| a.iter().find(|h| h["name"] == "h7").cloned())
        .expect("h7 listed");
    assert_eq!(h7["alive"], true, "{h7}");
    assert!(
        h7["address"]
            .as_str()
            .is_some_and(|a| a.starts_with("127.0.0.1:")),
        "{h7}"
    );
    let pid = h7["pid"].as_u64().expect("pid") as u32;
    let _guard = Detached(Some(pid));
    // It joined with the token alone: the key it was given, kept 0600.
    let key = std::fs::metadata(state.join("cluster.key")).expect("key kept");
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&key.permissions()) & 0o777,
        0o600
    );
    assert!(!vm
        .mig(&["add", "127.0.0.1", "--name", "h7"])
        .status
        .success());

    // Work on it moves off when it is deleted, and nothing is lost.
    let stop = vm.dir.path().join("stop");
    let job = vm.start_job(2, &bin("testvp"), &[Path::new("spin"), &stop]);
    assert!(wait_until(Duration::from_secs(10), || running_movable(
        &vm, 2
    )));
    let ps = vm.json(&["ps"]);
    let tid = ps[0]["tid"].as_str().expect("tid").to_string();
    if ps[0]["host"] != "h7" && ps[1]["host"] != "h7" {
        vm.migrate(&tid, "h7");
    }
    assert!(wait_until(Duration::from_secs(10), || hosts_of(&vm)
        .iter()
        .any(|(h, s, _)| h == "h7" && s == "running")));
    for (who, why) in [("h0", "is the master's host"), ("h5", "no host \"h5\"")] {
        let out = vm.mig(&["delete", who]);
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains(why));
    }
    let said = mig_ok(&vm, &["delete", "h7"]);
    assert!(said.contains("h7 leaves the virtual machine"), "{said}");
    assert!(vm
        .json(&["hosts"])
        .as_array()
        .is_some_and(|a| a.iter().all(|h| h["name"] != "h7")));
    assert!(
        wait_until(Duration::from_secs(10), || !mig_tests::alive(pid)),
        "the deleted host's daemon still runs"
    );
    let vps = hosts_of(&vm);
    assert!(
        vps.iter().all(|(h, s, _)| h != "h7" && s == "running"),
        "{vps:?}"
    );
    both_spun(&finish(&vm, job));
}

#[test]
fn a_host_killed_while_mig_delete_drains_it_ends_the_delete_and_says_what_became_of_its_vp() {
    let mut vm = Vm::start_procs(3, 1, &[]);
    // 256 MiB each: a move writes and sends its image for a while.
    let mut job = vm.start_job(3, &bin("testvp"), &["hold", "256"]);
    assert!(
        wait_until(Duration::from_secs(20), || running_movable(&vm, 3)),
        "{}",
        vm.log(0)
    );
    let tid = vm
        .json(&["ps"])
        .as_array()
        .and_then(|a| a.iter().find(|v| v["host"] == "h2").cloned())
        .and_then(|v| v["tid"].as_str().map(str::to_string))
        .expect("a VP on h2");
    let mut delete = mig_tests::command("mig")
        .env("MIG_DAEMON", vm.sock())
        .args(["delete", "h2", "--timeout", "20"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mig delete");
    assert!(
        wait_until(Duration::from_secs(10), || vm
            .where_is(&tid)
            .is_some_and(|(_, s)| s.starts_with("moving"))),
        "its VP never began to move: {:?}\n{}",
        vm.where_is(&tid),
        vm.log(0)
    );
    vm.signal(2, nix::sys::signal::Signal::SIGKILL);
    vm.wait(2, Duration::from_secs(10)).expect("h2 dies");
    // The delete ends, whatever became of the VP, and h2 is gone.
    assert!(
        wait_until(Duration::from_secs(40), || delete
            .try_wait()
            .is_ok_and(|s| s.is_some())),
        "mig delete hangs"
    );
    let said = delete.wait_with_output().expect("delete output");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&said.stdout),
        String::from_utf8_lossy(&said.stderr)
    );
    assert!(said.contains("h2"), "{said}");
    assert!(
        wait_until(Duration::from_secs(10), || !vm
            .json(&["hosts"])
            .as_array()
            .is_some_and(|a| a
                .iter()
                .any(|h| h["name"] == "h2" && h["alive"] == true))),
        "h2 still listed alive"
    );
    // Either its image reached h0 or h1 whole and it runs there, or it was
    // lost on its way and the job ends saying so: never neither.
    let mut seen = (false, false);
    assert!(
        wait_until(Duration::from_secs(20), || {
            let runs_elsewhere = vm
                .where_is(&tid)
                .is_some_and(|(h, s)| h != "h2" && s == "running");
            let ended = job.try_wait().is_ok_and(|s| s.is_some());
            seen = (runs_elsewhere, ended);
            runs_elsewhere || ended
        }),
        "its VP neither runs elsewhere nor ended the job: {:?}\n{}",
        vm.where_is(&tid),
        vm.log(0)
    );
    if seen.1 {
        let log = vm.log(0);
        assert!(
            log.contains("was lost on its way between two hosts"),
            "{log}"
        );
        assert!(
            said.contains(&format!("1 VP did not move off and ended ({tid} of j1)")),
            "{said}"
        );
        let status = job.wait().expect("job status");
        assert!(!status.success());
    } else {
        assert!(vm.mig(&["kill", "j1"]).status.success());
        let _ = job.wait();
    }
}
