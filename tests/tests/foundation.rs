//! The foundation on real daemons: jobs run to completion with their exit
//! statuses and output, a killed worker leaves the pool, bad peers are
//! refused while others are served, and nothing is left behind.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Output, Stdio};
use std::time::Duration;

use libmig::auth::ClusterKey;
use libmig::frame;
use libmig::msg::{Handshake, PeerMsg, Request, Response, ToHost, ToMaster};
use libmig::seal::Sealer;
use mig_tests::{alive, authenticated, command, job_lines, wait_until, Vm};
use nix::sys::signal::Signal;

const T: Duration = Duration::from_secs(10);

fn json_lines(out: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect()
}

#[test]
fn a_job_of_8_vps_runs_to_completion_with_every_status_and_its_output() {
    let vm = Vm::start(4);
    let out = vm.mig(&[
        "spawn",
        "-n",
        "8",
        "--wait",
        "--json",
        "--",
        "/bin/sh",
        "-c",
        "echo out $MIG_VP $MIG_HOST; exit $MIG_VP",
    ]);
    let events = json_lines(&out.stdout);
    let outputs: Vec<&serde_json::Value> =
        events.iter().filter(|e| e["event"] == "output").collect();
    assert_eq!(outputs.len(), 8, "{events:?}");
    for o in &outputs {
        let vp = o["vp"].as_u64().unwrap();
        assert_eq!(
            o["line"],
            format!("out {vp} {}", o["host"].as_str().unwrap())
        );
    }
    let hosts: std::collections::BTreeSet<&str> = outputs
        .iter()
        .map(|o| o["host"].as_str().unwrap())
        .collect();
    assert_eq!(hosts.len(), 4, "the job spreads over every host");
    let done: Vec<&serde_json::Value> = events.iter().filter(|e| e["event"] == "vp_done").collect();
    assert_eq!(done.len(), 8);
    for d in &done {
        assert_eq!(d["status"], d["vp"], "VP {} exit status", d["vp"]);
    }
    let last = events.last().unwrap();
    assert_eq!(last["event"], "job_done");
    assert_eq!(last["status"], 1, "the first failing VP's status");
    assert_eq!(out.status.code(), Some(1));
    // Finished jobs leave no VP behind.
    assert_eq!(vm.json(&["ps"]).as_array().unwrap().len(), 0);
}

#[test]
fn a_vp_gets_its_stdio_and_its_socket_and_none_of_the_daemons_descriptors() {
    // A descriptor the daemon was started with, open across exec (as a
    // shell or a service manager may leave one), at a number of its own.
    let mut fds = [0; 2];
    // SAFETY: pipe writes the two descriptors it makes into `fds`.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: dup2 onto a number this test owns; the originals are closed.
    unsafe {
        assert_eq!(libc::dup2(fds[0], 213), 213);
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
    let vm = Vm::start(1);
    // SAFETY: the test's own descriptor, the daemon has its copy.
    unsafe { libc::close(213) };
    assert!(alive(vm.daemons[0].as_ref().expect("h0").id()));
    let out = vm.mig_ok(&["spawn", "--wait", "--", "/bin/sh", "-c", "ls /proc/$$/fd"]);
    let mut lines = job_lines(&out);
    lines.sort();
    assert_eq!(lines, ["0", "1", "2", "3"], "{}", vm.log(0));
}

#[test]
fn spawning_a_missing_program_is_one_clear_sentence() {
    let vm = Vm::start(2);
    // Looked for where it is asked for: on the master's host, or a
    // worker's (which refuses it before asking the master).
    for i in [0, 1] {
        let out = vm.mig_at(
            i,
            &["spawn", "-n", "2", "--wait", "--", "./no-such-program"],
        );
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("not found") && err.contains("no-such-program"),
            "h{i}: {err}"
        );
    }
    assert_eq!(vm.json(&["jobs"]).as_array().map(Vec::len), Some(0));
    let out = mig_tests::command("mig")
        .env("MIG_DAEMON", "/nonexistent/sock")
        .arg("hosts")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("no mig daemon at /nonexistent/sock"));
}

#[test]
fn a_worker_killed_with_sigkill_leaves_the_map_and_its_vp_is_restarted() {
    let mut vm = Vm::start(4);
    let out = vm.mig(&["spawn", "-n", "4", "--", "/bin/sleep", "30"]);
    assert!(out.status.success());
    assert!(wait_until(T, || vm
        .json(&["ps"])
        .as_array()
        .unwrap()
        .iter()
        .all(|v| v["state"] == "running")));
    let ps = vm.json(&["ps"]);
    let on_h2 = ps
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["host"] == "h2")
        .expect("a VP on h2")
        .clone();
    let victim = on_h2["pid"].as_u64().unwrap() as u32;
    vm.signal(2, Signal::SIGKILL);
    vm.wait(2, T).expect("h2 dies");
    assert!(wait_until(T, || {
        let hosts = vm.json(&["hosts"]);
        hosts
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["name"] == "h2" && h["alive"] == false)
    }));
    let map = vm.json(&["map"]);
    let procs: Vec<&str> = map["processors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(procs, vec!["h0/0", "h1/0", "h3/0"]);
    // Its VP died with it (parent-death signal) and runs again elsewhere.
    assert!(wait_until(T, || !alive(victim)));
    assert!(wait_until(T, || {
        let ps = vm.json(&["ps"]);
        let v = ps
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["tid"] == on_h2["tid"])
            .cloned()
            .unwrap_or_default();
        v["state"] == "running" && v["host"] != "h2"
    }));
    assert!(vm.log(0).contains("host h2 left the pool"));
    assert_eq!(vm.mig(&["kill", "j1"]).status.code(), Some(0));
}

/// A normal control request still gets its answer.
fn master_serves(vm: &Vm) -> bool {
    let mut c = libmig::control::Client::connect(&vm.sock()).expect("connect");
    matches!(c.call(&Request::Hosts), Ok(Response::Hosts(h)) if !h.is_empty())
}

/// Send bytes on a fresh TCP connection; true if the daemon then closes it.
fn closed_after(addr: &str, bytes: &[u8]) -> bool {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(T)).expect("a read timeout");
    let _ = s.write_all(bytes);
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[test]
fn frames_announcing_large_bodies_before_authentication_cost_the_daemon_nothing() {
    // Thirteen bytes each: a header announcing the largest legal body, and
    // one byte of it. Refused from the header, nothing allocated for it.
    let vm = Vm::start(1);
    let head = frame::encode_head(&hello(3), frame::MAX_BODY - 64).expect("header");
    let mut bytes = head[..frame::HEADER].to_vec();
    bytes.push(0);
    let before = mig_tests::peak_rss_mib(vm.pid(0)).unwrap_or(0);
    // Twelve at once: each refused at once, none held.
    let mut socks: Vec<TcpStream> = (0..12)
        .map(|_| {
            let mut s = TcpStream::connect(&vm.addr).expect("connect");
            s.write_all(&bytes).expect("send");
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let after = mig_tests::peak_rss_mib(vm.pid(0)).unwrap_or(0);
    for s in &mut socks {
        s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        let mut buf = [0u8; 256];
        let closed = loop {
            match s.read(&mut buf) {
                Ok(0) => break true,
                Ok(_) => {}
                Err(e) => break e.kind() == std::io::ErrorKind::ConnectionReset,
            }
        };
        assert!(closed, "a connection announcing a huge frame was held");
    }
    // And they fill no disk: a few lines a minute about strangers.
    std::thread::sleep(Duration::from_millis(200));
    let strangers = vm
        .log(0)
        .lines()
        .filter(|l| l.contains("connection from") || l.contains("refusing connection"))
        .count();
    assert!(strangers <= 20, "{strangers} lines\n{}", vm.log(0));
    assert!(
        after < before + 64,
        "the daemon grew from {before} MiB to {after} MiB"
    );
    assert!(master_serves(&vm));
}

#[test]
fn bad_peers_are_refused_while_others_are_served() {
    let vm = Vm::start(2);
    // Random bytes.
    let noise: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    assert!(closed_after(&vm.addr, &noise));
    assert!(master_serves(&vm));
    // A 4 GiB length prefix: refused from the header alone.
    let mut huge = frame::encode(&hello(0)).unwrap();
    huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(closed_after(&vm.addr, &huge[..frame::HEADER]));
    assert!(master_serves(&vm));
    // Another major version.
    let mut v2 = frame::encode(&hello(0)).unwrap();
    v2[2] = frame::MAJOR + 1;
    assert!(closed_after(&vm.addr, &v2));
    // A message before authentication.
    assert!(closed_after(
        &vm.addr,
        &frame::encode(&PeerMsg::from(ToMaster::Heartbeat)).unwrap()
    ));
    // A handshake under another key: refused at its first message.
    {
        let other = libmig::auth::ClusterKey::from_bytes([5; 32]);
        let (_, hello) = libmig::handshake::Client::start(&other).unwrap();
        let mut s = TcpStream::connect(&vm.addr).unwrap();
        frame::write_frame(&mut s, &PeerMsg::from(hello)).unwrap();
        let m: Option<PeerMsg> = frame::read_frame(&mut s).unwrap();
        assert!(
            matches!(m, Some(PeerMsg::Handshake(Handshake::Refused { reason })) if reason.contains("authentication failed"))
        );
    }
    // A truncated frame, then the peer hangs up.
    let full = frame::encode(&hello(2)).unwrap();
    {
        let mut s = TcpStream::connect(&vm.addr).unwrap();
        s.write_all(&full[..20]).unwrap();
    }
    // Garbage on the control socket.
    {
        let mut s = std::os::unix::net::UnixStream::connect(vm.sock()).unwrap();
        s.write_all(b"\x00\x01garbage, not a frame at all").unwrap();
        s.set_read_timeout(Some(T)).expect("a read timeout");
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf);
    }
    assert!(master_serves(&vm));
    // A daemon with another key cannot join.
    let other = tempfile::tempdir().unwrap();
    let out = mig_tests::command("migd")
        .args([
            "--listen",
            "127.0.0.1:0",
            "--processors",
            "1",
            "--capacity",
            "1",
            "--name",
            "intruder",
            "--join",
            &vm.addr,
        ])
        .arg("--state-dir")
        .arg(other.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("do not hold the same cluster key"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(master_serves(&vm));
    let hosts = vm.json(&["hosts"]);
    assert_eq!(
        hosts.as_array().unwrap().len(),
        2,
        "the intruder never joined"
    );
    let log = vm.log(0);
    for reason in [
        "bad magic",
        "exceeds the maximum",
        "not compatible",
        "before authentication",
        "authentication failed",
    ] {
        assert!(log.contains(reason), "log lacks {reason:?}:\n{log}");
    }
}

/// Why the daemon refused what was said on `s`.
fn refusal(s: &mut TcpStream, seal: &mut Sealer) -> String {
    match seal.read_frame::<PeerMsg, _>(s) {
        Ok(Some(PeerMsg::Handshake(Handshake::Refused { reason }))) => reason,
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn a_message_on_a_link_that_does_not_carry_it_is_refused_and_does_nothing() {
    let vm = Vm::start(2);
    let key = ClusterKey::load(&vm.key()).expect("the cluster key");
    // The master's order to a host, from a daemon that has not said what
    // it is.
    let (mut s, mut seal) = authenticated(&vm.addr, &key);
    seal.write_frame(&mut s, &PeerMsg::from(ToHost::Halt))
        .unwrap();
    let why = refusal(&mut s, &mut seal);
    assert!(
        why.contains("unexpected Halt") && why.contains("the master's link to a host"),
        "{why}"
    );
    // A worker's news (a request in root's name) on a data link.
    let (mut s, mut seal) = authenticated(&vm.addr, &key);
    let hi = Handshake::Hi { name: "h9".into() };
    seal.write_frame(&mut s, &PeerMsg::from(hi)).unwrap();
    let halt = ToMaster::Control {
        id: 1,
        req: Request::Halt,
        uid: 0,
    };
    seal.write_frame(&mut s, &PeerMsg::from(halt)).unwrap();
    let why = refusal(&mut s, &mut seal);
    assert!(
        why.contains("unexpected Control on the data link to h9")
            && why.contains("a host's link to its master"),
        "{why}"
    );
    // Neither halted anything: both hosts serve on.
    assert!(master_serves(&vm));
    let hosts = vm.json(&["hosts"]);
    assert_eq!(hosts.as_array().map(Vec::len), Some(2), "{hosts}");
    assert!(vm.log(0).contains("unexpected Halt"));
}

fn vp_pids(vm: &Vm) -> Vec<u32> {
    vm.json(&["ps"])
        .as_array()
        .expect("mig ps --json: an array")
        .iter()
        .filter_map(|v| v["pid"].as_u64())
        .map(|p| p as u32)
        .collect()
}

#[test]
fn halt_leaves_no_process_behind() {
    let mut vm = Vm::start(3);
    assert!(vm
        .mig(&["spawn", "-n", "3", "--", "/bin/sleep", "30"])
        .status
        .success());
    assert!(wait_until(T, || vp_pids(&vm).len() == 3));
    let pids = vp_pids(&vm);
    assert!(vm.mig(&["halt"]).status.success());
    for i in 0..3 {
        assert!(
            vm.wait(i, T).is_some_and(|s| s.success()),
            "daemon {i} exits cleanly"
        );
    }
    assert!(
        wait_until(T, || pids.iter().all(|&p| !alive(p))),
        "VPs survived the halt"
    );
}

#[test]
fn halt_with_nothing_running_says_so_and_succeeds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("h0/control.sock");
    let out = command("mig")
        .arg("halt")
        .env("MIG_DAEMON", &sock)
        .output()
        .expect("mig halt");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("nothing to halt"), "{said}");
    // The same after a machine halted: its sockets gone.
    let mut vm = Vm::start(2);
    vm.mig_ok(&["halt"]);
    for i in 0..2 {
        assert!(vm.wait(i, T).is_some(), "daemon {i} stops");
    }
    let again = vm.mig(&["halt", "--json"]);
    assert!(again.status.success());
    let v: serde_json::Value = serde_json::from_slice(&again.stdout).expect("JSON");
    assert_eq!(v["ok"], true);
    assert!(
        v["message"]
            .as_str()
            .is_some_and(|m| m.contains("nothing to halt")),
        "{v}"
    );
}

/// Three voters, their change made (`mig hosts` says so only then).
fn three_voters(vm: &Vm) -> bool {
    wait_until(T, || {
        vm.json(&["hosts"])
            .as_array()
            .is_some_and(|a| a.iter().filter(|h| h["voter"] == true).count() == 3)
    })
}

#[test]
fn a_daemon_left_without_a_majority_of_voters_says_so_instead_of_keeping_mig_waiting() {
    // Two of the three voters die: no master can be elected. The third
    // keeps a request for a while, then says why it cannot be answered.
    let mut vm = Vm::start(3);
    assert!(three_voters(&vm), "{}", vm.all_logs());
    vm.signal(0, Signal::SIGKILL);
    vm.signal(2, Signal::SIGKILL);
    let out = command("mig")
        .env("MIG_DAEMON", vm.sock_of(1))
        .args(["hosts"])
        .output()
        .expect("mig hosts");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("h1 has had no master for") && err.contains("ask again"),
        "{err}\n{}",
        vm.log(1)
    );
    // Asked again, it says so at once; and it still serves.
    let out = command("mig")
        .env("MIG_DAEMON", vm.sock_of(1))
        .args(["ps"])
        .output()
        .expect("mig ps");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no master for"));
}

#[test]
fn with_the_daemon_it_aims_at_gone_mig_asks_another_of_the_same_machine_and_says_so() {
    // The master's host dies (once three voters keep its state);
    // MIG_DAEMON still names its socket.
    let mut vm = Vm::start(3);
    assert!(three_voters(&vm), "{}", vm.all_logs());
    vm.signal(0, Signal::SIGKILL);
    assert!(vm.wait(0, T).is_some());
    let mut said = String::new();
    assert!(
        wait_until(Duration::from_secs(30), || {
            let out = vm.mig(&["hosts", "--json"]);
            said = String::from_utf8_lossy(&out.stderr).into_owned();
            out.status.success()
                && serde_json::from_slice::<serde_json::Value>(&out.stdout).is_ok_and(|h| {
                    h.as_array()
                        .is_some_and(|a| a.iter().any(|h| h["master"] == true))
                })
        }),
        "{said}\n{}",
        vm.all_logs()
    );
    assert!(
        said.contains("no daemon listens at") && said.contains("asking h1"),
        "{said}"
    );
    // Halting goes through the same daemon: the whole machine stops.
    let out = vm.mig(&["halt"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for i in 1..3 {
        assert!(vm.wait(i, T).is_some(), "daemon {i} stops");
    }
    let out = vm.mig(&["halt"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to halt"));
}

#[test]
fn a_daemon_whose_state_directory_is_removed_stops_and_leaves_nothing() {
    // As a script that ran `mig up --detach` and cleaned up its directory
    // would leave them: nothing could reach them any more.
    let mut vm = Vm::start(2);
    assert!(vm
        .mig(&["spawn", "-n", "2", "--", "/bin/sleep", "30"])
        .status
        .success());
    assert!(wait_until(T, || vp_pids(&vm).len() == 2));
    let pids = vp_pids(&vm);
    let h1 = vm.dir.path().join("h1");
    let log = std::fs::read_to_string(h1.join("migd.log")).unwrap_or_default();
    std::fs::remove_dir_all(&h1).expect("remove h1's state directory");
    assert!(vm.wait(1, T).is_some(), "h1 still runs: {log}");
    // The other daemon goes on serving.
    assert!(vm.mig(&["ps"]).status.success());
    // h0's is replaced by another of the same name, where another daemon
    // listens already: h0 stops and leaves that daemon's socket alone.
    let h0 = vm.dir.path().join("h0");
    std::fs::remove_dir_all(&h0).expect("remove h0's state directory");
    std::fs::create_dir(&h0).expect("a new h0");
    let next = std::os::unix::net::UnixListener::bind(h0.join("control.sock")).expect("bind");
    assert!(vm.wait(0, T).is_some(), "h0 still runs");
    assert!(
        h0.join("control.sock").exists(),
        "the stopping daemon removed the next one's socket"
    );
    drop(next);
    assert!(
        wait_until(T, || pids.iter().all(|&p| !alive(p))),
        "VPs outlived their daemon"
    );
}

#[test]
fn sigkill_of_every_daemon_leaves_no_process_behind() {
    let mut vm = Vm::start(2);
    assert!(vm
        .mig(&["spawn", "-n", "2", "--", "/bin/sleep", "30"])
        .status
        .success());
    assert!(wait_until(T, || vp_pids(&vm).len() == 2));
    let pids = vp_pids(&vm);
    for i in 0..2 {
        vm.signal(i, Signal::SIGKILL);
        vm.wait(i, T).expect("daemon dies");
    }
    assert!(
        wait_until(T, || pids.iter().all(|&p| !alive(p))),
        "VPs outlived their daemon"
    );
}

/// The lease guardian started by daemon `daemon`, if any.
fn guardian_of(daemon: u32) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let ppid: u32 = stat
            .rsplit(')')
            .next()?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        (ppid == daemon && cmd.split(|&b| b == 0).any(|a| a == b"--lease-guardian")).then_some(pid)
    })
}

#[test]
fn a_daemon_killed_while_another_process_holds_its_guardians_pipe_leaves_no_vp() {
    // A child of the daemon caught between its clone and its exec (frozen
    // there, say) holds the pipe to the guardian as well: here this test
    // holds it, opened through /proc. The guardian watches the daemon's
    // process too, so the daemon's end is still its VPs' end.
    let mut vm = Vm::start(2);
    // Each VP has a child of its own, which no parent-death signal reaches.
    assert!(vm
        .mig(&[
            "spawn",
            "-n",
            "4",
            "--",
            "/bin/sh",
            "-c",
            "sleep 37.25 & exec sleep 30"
        ])
        .status
        .success());
    assert!(wait_until(T, || vp_pids(&vm).len() == 4));
    let on_h1: Vec<u32> = vm
        .json(&["ps"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["host"] == "h1")
        .filter_map(|v| v["pid"].as_u64())
        .map(|p| p as u32)
        .collect();
    assert!(!on_h1.is_empty(), "no VP on h1");
    let children_of = |parents: &[u32]| -> Vec<u32> {
        std::fs::read_dir("/proc")
            .map(|d| {
                d.flatten()
                    .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                    .filter(|p| {
                        std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|st| {
                            st.rsplit(')')
                                .next()
                                .and_then(|r| r.split_whitespace().nth(1))
                                .and_then(|pp| pp.parse::<u32>().ok())
                                .is_some_and(|pp| parents.contains(&pp))
                        })
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    assert!(
        wait_until(T, || children_of(&on_h1).len() == on_h1.len()),
        "the VPs' children did not start"
    );
    let kids = children_of(&on_h1);
    let h1 = vm.pid(1);
    let guardian = guardian_of(h1).expect("h1 has a lease guardian");
    let pipe = std::fs::read_link(format!("/proc/{guardian}/fd/0")).expect("its stdin");
    let held = std::fs::read_dir(format!("/proc/{h1}/fd"))
        .expect("h1's descriptors")
        .flatten()
        .find(|e| std::fs::read_link(e.path()).is_ok_and(|l| l == pipe))
        .map(|e| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(e.path())
                .expect("open the pipe")
        })
        .expect("h1 holds the guardian's pipe");
    vm.signal(1, Signal::SIGKILL);
    vm.wait(1, T).expect("h1 dies");
    assert!(
        wait_until(T, || on_h1.iter().chain(&kids).all(|&p| !alive(p))),
        "h1's VPs or their children outlived it while its guardian's pipe was held"
    );
    assert!(wait_until(T, || !alive(guardian)), "the guardian stays");
    drop(held);
}

#[test]
fn a_silent_worker_leaves_the_pool_and_rejoins_fenced_when_it_answers_again() {
    let mut vm = Vm::start_config(2, "[daemon]\nheartbeat_ms = 50\ndead_after_ms = 400\n");
    let h1_alive = |vm: &Vm| {
        vm.json(&["hosts"])
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["name"] == "h1" && h["alive"] == true)
    };
    assert!(h1_alive(&vm));
    vm.signal(1, Signal::SIGSTOP);
    assert!(
        wait_until(T, || !h1_alive(&vm)),
        "a stopped worker is taken out"
    );
    assert_eq!(vm.json(&["map"])["processors"], serde_json::json!(["h0/0"]));
    vm.signal(1, Signal::SIGCONT);
    assert!(
        wait_until(T, || h1_alive(&vm)),
        "it rejoins when it answers:\n{}\n{}",
        vm.log(0),
        vm.log(1)
    );
    assert_eq!(
        vm.json(&["map"])["processors"],
        serde_json::json!(["h0/0", "h1/0"])
    );
    // (Its VPs, had it had any, were ended first: they ran elsewhere.)
    assert!(vm.log(1).contains("fenced by the master"), "{}", vm.log(1));
}

#[test]
fn a_worker_forwards_its_local_users_requests_to_the_master() {
    let vm = Vm::start(2);
    let worker_sock = vm.dir.path().join("h1").join("control.sock");
    let out = mig_tests::command("mig")
        .env("MIG_DAEMON", &worker_sock)
        .args([
            "spawn",
            "-n",
            "2",
            "--wait",
            "--",
            "/bin/sh",
            "-c",
            "echo via $MIG_HOST",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.lines().filter(|l| l.contains("via h")).count(),
        2,
        "{text}"
    );
    let hosts = mig_tests::command("mig")
        .env("MIG_DAEMON", &worker_sock)
        .args(["hosts", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&hosts.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 2);
}

#[test]
fn a_test_past_its_deadline_fails_instead_of_hanging_and_leaves_nothing() {
    // A job that would wait for ever, under a machine given 3 s: the
    // fixture's watchdog kills the daemons, the waiting client returns
    // with an error, and the VPs die with their daemons.
    let vm = Vm::start_until(2, 1, &[], Duration::from_secs(3));
    let job = vm.start_job(2, std::path::Path::new("/bin/sleep"), &["1000"]);
    assert!(wait_until(T, || vp_pids(&vm).len() == 2));
    let pids = vp_pids(&vm);
    let daemons = [vm.pid(0), vm.pid(1)];
    let out = job.wait_with_output().expect("mig spawn --wait");
    assert!(!out.status.success(), "the job cannot have finished");
    assert!(
        wait_until(T, || pids.iter().chain(&daemons).all(|&p| !alive(p))),
        "daemons or VPs survived the deadline"
    );
}

#[test]
fn mig_up_refuses_a_state_directory_another_user_could_have_planted() {
    let tmp = tempfile::tempdir().expect("tmp");
    let real = tmp.path().join("real");
    std::fs::create_dir(&real).expect("dir");
    let link = tmp.path().join("vm");
    std::os::unix::fs::symlink(&real, &link).expect("symlink");
    let out = mig_tests::command("mig")
        .args(["up", "-n", "1", "--detach", "--state-dir"])
        .arg(&link)
        .output()
        .expect("mig up");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("symbolic link"), "{err}");
    assert!(
        std::fs::read_dir(&real).expect("dir").next().is_none(),
        "something was written through the link"
    );
}

#[test]
fn another_users_planted_state_directory_and_key_are_refused_and_nothing_is_overwritten() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root to act as another user (nobody, uid 65534)");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path();
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();
    // A shared directory as /tmp is: anyone may create in it.
    let shared = root.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let victim = root.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    // The other user gets there first: the VM's directory, a log that is
    // a link to the victim, and a key of their choosing.
    let planted = shared.join("mig");
    let plant = format!(
        "mkdir -p {dir}/h0 && ln -s {victim} {dir}/h0/migd.log && \
         printf '%064x\\n' 7 > {dir}/cluster.key && chmod 600 {dir}/cluster.key",
        dir = planted.display(),
        victim = victim.display()
    );
    let st = std::process::Command::new("sh")
        .args(["-c", &plant])
        .uid(65534)
        .gid(65534)
        .status()
        .expect("sh as nobody");
    assert!(st.success(), "planting as nobody failed");
    let out = mig_tests::command("mig")
        .args(["up", "-n", "2", "--detach", "--state-dir"])
        .arg(&planted)
        .output()
        .expect("mig up");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("belongs to user 65534"), "{err}");
    // A directory of ours that others may write into is refused too.
    let open = shared.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = mig_tests::command("mig")
        .args(["up", "-n", "1", "--detach", "--state-dir"])
        .arg(&open)
        .output()
        .expect("mig up");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("may be written by other users"), "{err}");
    // A daemon pointed at the planted key refuses it, before it listens.
    let mine = root.join("mine");
    let out = mig_tests::command("migd")
        .arg("--state-dir")
        .arg(&mine)
        .arg("--key-file")
        .arg(planted.join("cluster.key"))
        .args(["--processors", "1", "--capacity", "1"])
        .output()
        .expect("migd");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("belongs to user 65534"), "{err}");
    assert!(!mine.join("addr").exists(), "it listened");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
}

/// A `Hello` as a stranger might send it (its Noise message empty).
fn hello(n: u8) -> PeerMsg {
    PeerMsg::from(Handshake::Hello {
        nonce: [n; 32],
        suite: 0,
        noise: Vec::new(),
    })
}

#[test]
fn a_flood_of_connections_that_never_authenticate_is_held_to_a_few_and_costs_nothing() {
    let vm = Vm::start(2);
    let before = mig_tests::peak_rss_mib(vm.pid(0)).unwrap_or(0);
    // A thousand connections, each announcing a 64 MiB frame and sending
    // nothing more, then a thousand that say nothing at all.
    let head = frame::encode_head(&hello(4), 64 << 20).expect("header");
    let mut socks = Vec::new();
    for i in 0..2000 {
        let Ok(mut s) = TcpStream::connect(&vm.addr) else {
            continue;
        };
        if i < 1000 {
            let _ = s.write_all(&head[..frame::HEADER]);
        }
        socks.push(s);
    }
    std::thread::sleep(Duration::from_millis(500));
    // Most were closed at once; a few are held until their handshake times
    // out.
    let mut held = 0;
    for s in &mut socks {
        s.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 64];
        match s.read(&mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => held += 1,
            _ => {}
        }
    }
    assert!(held <= 64, "{held} unauthenticated connections held");
    assert!(master_serves(&vm), "the daemon stopped serving");
    let after = mig_tests::peak_rss_mib(vm.pid(0)).unwrap_or(0);
    assert!(
        after <= before + 8,
        "the daemon grew from {before} MiB to {after} MiB"
    );
    // The machine works on: a job runs across both hosts.
    let out = vm.mig(&["spawn", "-n", "2", "--wait", "--", "/bin/true"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // And the log says so in a few lines.
    let refused = vm
        .log(0)
        .lines()
        .filter(|l| l.contains("refusing connection"))
        .count();
    assert!(
        (1..=20).contains(&refused),
        "{refused} lines\n{}",
        vm.log(0)
    );
}

#[test]
fn a_log_grown_past_its_bound_is_rotated_and_the_disk_holds_two_at_most() {
    let vm = Vm::start_config(1, "[daemon]\nlog_max_mb = 1\nlog = \"warn,server=debug\"\n");
    let log = vm.dir.path().join("h0").join("migd.log");
    // Lines the daemon would take months to write, added at once.
    {
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        let line = [b'x'; 1023];
        for _ in 0..(1 << 10) + 10 {
            f.write_all(&line).unwrap();
            f.write_all(b"\n").unwrap();
        }
    }
    let old = vm.dir.path().join("h0").join("migd.log.1");
    assert!(
        mig_tests::wait_until(Duration::from_secs(5), || old.is_file()
            && vm.log(0).contains("log rotated")),
        "not rotated"
    );
    assert!(std::fs::metadata(&log).unwrap().len() < 1 << 20);
    // It goes on logging in the fresh file, and serving; the filter
    // lets the server's detail through, and the master's news not.
    assert!(master_serves(&vm));
    vm.mig_ok(&["spawn", "-n", "1", "--wait", "--", "/bin/true"]);
    drop(TcpStream::connect(&vm.addr).unwrap());
    assert!(
        mig_tests::wait_until(T, || vm.log(0).contains(" DEBUG migd[")),
        "{}",
        vm.log(0)
    );
    assert!(!vm.log(0).contains("job j1 finished"), "{}", vm.log(0));
}

#[test]
fn another_local_user_is_told_permission_denied_by_the_socket_and_by_the_daemon() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root to run mig as another user (nobody)");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let vm = Vm::start(1);
    let as_nobody = |vm: &Vm| {
        mig_tests::command("mig")
            .env("MIG_DAEMON", vm.sock())
            .arg("hosts")
            .uid(65534)
            .gid(65534)
            .output()
            .expect("mig as nobody")
    };
    // The socket's directory keeps them out: said as such.
    let out = as_nobody(&vm);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("permission denied"), "{err}");
    // Opened up by mistake: the daemon itself refuses the uid, and says why.
    let dir = vm.dir.path().join("h0");
    let mode = |p: &std::path::Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m))
    };
    mode(vm.dir.path(), 0o711).unwrap();
    mode(&dir, 0o711).unwrap();
    mode(&vm.sock(), 0o666).unwrap();
    let out = as_nobody(&vm);
    mode(&vm.sock(), 0o600).unwrap();
    mode(&dir, 0o700).unwrap();
    mode(vm.dir.path(), 0o700).unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("uid 65534 may not control this daemon"),
        "{err}"
    );
    assert!(master_serves(&vm));
}

/// `mig spawn --wait ARGS` through daemon `at`, with `input` on its stdin.
fn spawn_with_input(vm: &Vm, at: usize, args: &[&str], input: &[u8]) -> Output {
    let mut child = command("mig")
        .env("MIG_DAEMON", vm.sock_of(at))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run mig spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_vec();
    // Written beside the reading of its output (more than a pipe holds).
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().expect("wait for mig spawn");
    writer.join().expect("writer");
    out
}

#[test]
fn spawn_wait_forwards_its_input_to_vp_0_only_and_no_input_ends_it_at_once() {
    let vm = Vm::start(2);
    // VP 0 counts its input and echoes its last line; VP 1 reads
    // /dev/null. 300 KiB is more than a pipe holds: the daemon feeds it as
    // the VP reads. Asked through the worker (h1) as well as the master.
    let mut input: Vec<u8> = (0..30_000)
        .flat_map(|i| format!("{i:09}\n").into_bytes())
        .collect();
    input.extend_from_slice(b"the last line\n");
    let script = "if [ \"$MIG_VP\" = 0 ]; then \
                  wc -c; \
                  else echo \"vp1 read $(wc -c) bytes\"; fi";
    for at in [0, 1] {
        let out = spawn_with_input(
            &vm,
            at,
            &["spawn", "-n", "2", "--wait", "--", "/bin/sh", "-c", script],
            &input,
        );
        let lines = job_lines(&out);
        assert!(
            out.status.success(),
            "{lines:?} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            lines.contains(&input.len().to_string()),
            "VP 0 read all {} bytes: {lines:?}",
            input.len()
        );
        assert!(lines.contains(&"vp1 read 0 bytes".to_string()), "{lines:?}");
    }
    // Lines reach a program that reads them one by one and answers.
    let out = spawn_with_input(
        &vm,
        0,
        &[
            "spawn",
            "--wait",
            "--",
            "/bin/sh",
            "-c",
            "while read x; do echo \"got $x\"; done; echo end",
        ],
        b"one\ntwo\n",
    );
    assert_eq!(job_lines(&out), ["got one", "got two", "end"]);
    // --no-input: VP 0's input ends at once (cat would otherwise wait).
    let out = spawn_with_input(
        &vm,
        0,
        &["spawn", "--wait", "--no-input", "--", "/bin/cat"],
        b"never read\n",
    );
    assert!(out.status.success());
    assert!(job_lines(&out).is_empty(), "{:?}", job_lines(&out));
    // A program that never reads its input ends, and so does mig spawn.
    let out = spawn_with_input(
        &vm,
        0,
        &["spawn", "--wait", "--", "/bin/echo", "done"],
        &vec![b'x'; 1 << 20],
    );
    assert_eq!(job_lines(&out), ["done"]);
    // Input for a job not started with --wait, or unknown, is refused.
    let job = String::from_utf8_lossy(&vm.mig(&["spawn", "--", "/bin/sleep", "5"]).stdout)
        .trim()
        .to_string();
    let mut c = libmig::control::Client::connect(&vm.sock()).expect("connect");
    for j in [job.as_str(), "j999"] {
        let r = c
            .call(&Request::Input {
                job: j.to_string(),
                data: b"x".to_vec(),
                eof: true,
            })
            .expect("an answer");
        assert!(
            matches!(&r, Response::Error { message } if message.contains(j)),
            "{r:?}"
        );
    }
}

#[test]
fn a_waiter_that_stops_reading_costs_the_master_no_more_than_its_backlog() {
    let vm = Vm::start(1);
    let master = vm.pid(0);
    let before = mig_tests::peak_rss_mib(master).expect("rss");
    // About 15 MB of text, some 60 MB as answers queued for the waiter.
    let n = 2_000_000;
    let mut waiter = command("mig")
        .env("MIG_DAEMON", vm.sock())
        .args([
            "spawn",
            "-n",
            "1",
            "--wait",
            "--",
            "/usr/bin/seq",
            "1",
            &n.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mig spawn");
    let pid = nix::unistd::Pid::from_raw(waiter.id() as i32);
    assert!(wait_until(T, || vm
        .json(&["ps"])
        .as_array()
        .is_some_and(|a| !a.is_empty())));
    nix::sys::signal::kill(pid, Signal::SIGSTOP).expect("stop the waiter");
    let ended = || {
        vm.json(&["jobs"])
            .as_array()
            .and_then(|a| a.first().cloned())
            .is_some_and(|j| j["state"] != "running")
    };
    assert!(wait_until(Duration::from_secs(120), ended), "{}", vm.log(0));
    // The job's kept output and the allocator's pools come to 35-40 MiB on
    // a quiet machine and up to 70 on a crowded one; answers queued without
    // a bound would add some 60 MiB to that.
    let grew = mig_tests::peak_rss_mib(master).expect("rss") - before;
    assert!(grew < 85, "the master grew {grew} MiB for a stopped waiter");
    nix::sys::signal::kill(pid, Signal::SIGCONT).expect("wake the waiter");
    let mut out = String::new();
    let mut err = String::new();
    waiter
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut out)
        .expect("read");
    waiter
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err)
        .expect("read");
    assert!(waiter.wait().expect("waiter").success(), "{err}");
    // Every line is shown or counted as not shown.
    let skipped: usize = err
        .lines()
        .filter_map(|l| {
            l.strip_prefix("mig: ")?
                .split_once(" lines of output not shown here")
        })
        .filter_map(|(k, _)| k.parse::<usize>().ok())
        .sum();
    let shown = out.lines().filter(|l| l.starts_with("[t")).count();
    assert!(skipped > 0, "{err}");
    assert_eq!(shown + skipped, n, "{err}");
}
