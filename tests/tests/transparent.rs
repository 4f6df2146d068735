//! Moves of programs that do not help, on real daemons: plain shell
//! loops, nothing of mig in them, saved from outside by their daemon and
//! rebuilt on another host; an owner coming back moves them off; their
//! output goes on with nothing lost or said twice; a job of them is
//! checkpointed; one that cannot be saved says why and stays.

use std::time::Duration;

use mig_tests::{alive, job_lines, wait_until, Vm};

/// `mig ps --json`: (tid, host, state, pid) of each VP.
fn vps(vm: &Vm) -> Vec<(String, String, String, u32)> {
    vm.json(&["ps"])
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| {
                    Some((
                        v["tid"].as_str()?.to_string(),
                        v["host"].as_str().unwrap_or("").to_string(),
                        v["state"].as_str()?.to_string(),
                        v["pid"].as_u64().unwrap_or(0) as u32,
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Wait for a `mig spawn --wait` job: it must succeed (else the panic
/// shows its lines, what `mig spawn` said and the daemons' logs, read once
/// it ended); the lines it printed.
fn ends_well(vm: &Vm, job: std::process::Child) -> Vec<String> {
    let out = job.wait_with_output().expect("the job ends");
    let lines = job_lines(&out);
    assert!(
        out.status.success(),
        "{lines:?}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        vm.all_logs()
    );
    lines
}

/// The echo stream's tally (its JSON line): every message it sent was
/// echoed and received, and it sent some.
fn every_message_once(lines: &[String]) {
    let tally: serde_json::Value = lines
        .iter()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no tally: {lines:?}"));
    let sent = tally["sent"].as_u64().expect("sent");
    assert!(sent > 0, "{tally}");
    assert_eq!(tally["echoed"], sent, "{tally}");
    assert_eq!(tally["received"], sent, "{tally}");
}

fn all_running(vm: &Vm, n: usize) -> bool {
    let v = vps(vm);
    v.len() == n && v.iter().all(|(_, _, s, _)| s == "running")
}

/// Said movable by its host (it never spoke to its daemon).
fn movable(vm: &Vm, tid: &str) -> bool {
    vm.json(&["ps"]).as_array().is_some_and(|a| {
        a.iter()
            .any(|v| v["tid"] == tid && v["movable"].as_bool() == Some(true))
    })
}

#[test]
fn shell_loops_leave_a_desk_whose_owner_comes_back_and_run_on_elsewhere() {
    let vm = Vm::start(3);
    let job = vm.start_job(
        3,
        std::path::Path::new("/bin/sh"),
        &["-c", "i=0; while :; do i=$((i+1)); done"],
    );
    assert!(
        wait_until(Duration::from_secs(20), || all_running(&vm, 3)),
        "{:?}",
        vps(&vm)
    );
    let (tid, _, _, old_pid) = vps(&vm)
        .into_iter()
        .find(|v| v.1 == "h1")
        .expect("a VP on h1");
    assert!(
        wait_until(Duration::from_secs(20), || movable(&vm, &tid)),
        "{}",
        vm.all_logs()
    );
    let out = vm.mig(&["owner", "reclaim", "--host", "h1"]);
    assert!(out.status.success(), "{out:?}");
    // It leaves h1 (its process there ends) and runs on another host.
    assert!(
        wait_until(Duration::from_secs(30), || {
            vps(&vm)
                .iter()
                .any(|(t, h, s, _)| *t == tid && h != "h1" && s == "running")
        }),
        "{:?}\n{}",
        vps(&vm),
        vm.all_logs()
    );
    assert!(
        wait_until(Duration::from_secs(10), || !alive(old_pid)),
        "its process on h1 still runs"
    );
    let (_, host, _, pid) = vps(&vm)
        .into_iter()
        .find(|v| v.0 == tid)
        .expect("still listed");
    assert!(alive(pid), "its new process on {host} runs");
    assert!(vps(&vm).iter().all(|(_, h, _, _)| h != "h1"));
    // It keeps running there: it uses CPU.
    let t0 = mig_tests::ticks(pid).unwrap_or(0);
    assert!(
        wait_until(Duration::from_secs(10), || mig_tests::ticks(pid)
            .is_some_and(|t| t > t0 + 5)),
        "the moved loop does not run: {:?} stat {:?}\n{}",
        vps(&vm),
        std::fs::read_to_string(format!("/proc/{pid}/stat")),
        vm.all_logs()
    );
    let out = vm.mig(&["kill", "j1"]);
    assert!(out.status.success(), "{out:?}");
    let _ = job.wait_with_output();
}

#[test]
fn a_counting_shell_moved_five_times_prints_every_line_once() {
    let vm = Vm::start(3);
    let job = vm.start_job(
        1,
        std::path::Path::new("/bin/sh"),
        &[
            "-c",
            "i=0; while [ $i -lt 1500 ]; do i=$((i+1)); echo line $i; sleep 0.004; done; exit 3",
        ],
    );
    assert!(wait_until(Duration::from_secs(20), || all_running(&vm, 1)));
    let tid = vps(&vm)[0].0.clone();
    assert!(
        wait_until(Duration::from_secs(20), || movable(&vm, &tid)),
        "{}",
        vm.all_logs()
    );
    let mut moved = 0;
    for round in 0..5 {
        let (_, from, _, _) = vps(&vm).into_iter().find(|v| v.0 == tid).expect("listed");
        let to = ["h0", "h1", "h2"]
            .into_iter()
            .find(|h| *h != from)
            .expect("another host");
        let out = vm.migrate(&tid, to);
        if !out.status.success() {
            // It ended (the count is done) before every move was made.
            assert!(
                String::from_utf8_lossy(&out.stderr).contains("exited")
                    || vps(&vm).iter().all(|v| v.2 == "exited"),
                "round {round}: {out:?}"
            );
            break;
        }
        let landed = wait_until(Duration::from_secs(30), || {
            vps(&vm)
                .iter()
                .any(|(t, h, s, _)| *t == tid && (h == to && s == "running" || s == "exited"))
        });
        assert!(landed, "round {round}: {:?}\n{}", vps(&vm), vm.all_logs());
        moved += 1;
    }
    assert!(
        moved >= 2,
        "only {moved} moves were made:\n{}",
        vm.all_logs()
    );
    let out = job.wait_with_output().expect("the job ends");
    let lines = job_lines(&out);
    let want: Vec<String> = (1..=1500).map(|i| format!("line {i}")).collect();
    let got: Vec<&String> = lines.iter().filter(|l| l.starts_with("line ")).collect();
    assert_eq!(
        got.len(),
        want.len(),
        "{:?}",
        &lines[lines.len().saturating_sub(5)..]
    );
    assert!(
        got.iter().zip(&want).all(|(a, b)| *a == b),
        "lines out of order or changed"
    );
    // Its own exit status, through every move.
    assert_eq!(out.status.code(), Some(3), "{}", vm.all_logs());
    // No host keeps an image of it behind.
    let left: Vec<String> = (0..3)
        .flat_map(|i| {
            std::fs::read_dir(vm.dir.path().join(format!("h{i}")))
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with('t') && (n.contains(".restore") || n.contains(".ckpt")))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn a_program_with_a_socket_to_outside_says_why_it_stays() {
    let vm = Vm::start(2);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = listener.local_addr().expect("addr").port();
    let script = format!(
        "import socket,time\ns=socket.create_connection(('127.0.0.1',{port}))\n\
         while True: time.sleep(0.05)"
    );
    let job = vm.start_job(
        1,
        std::path::Path::new("/usr/bin/python3"),
        &["-c", &script],
    );
    let _peer = listener.accept().expect("the VP connects");
    assert!(wait_until(Duration::from_secs(20), || all_running(&vm, 1)));
    let (tid, from, _, pid) = vps(&vm)[0].clone();
    assert!(wait_until(Duration::from_secs(20), || movable(&vm, &tid)));
    let to = if from == "h0" { "h1" } else { "h0" };
    let out = vm.migrate(&tid, to);
    assert!(out.status.success(), "{out:?}");
    // The move fails with the reason, and the VP runs on where it was.
    let said = wait_until(Duration::from_secs(30), || {
        vm.json(&["ps"]).as_array().is_some_and(|a| {
            a.iter().any(|v| {
                v["tid"] == tid.as_str()
                    && v["move_failed"]
                        .as_str()
                        .is_some_and(|m| m.contains("socket"))
            })
        })
    });
    assert!(said, "{}\n{}", vm.json(&["ps"]), vm.all_logs());
    assert!(
        wait_until(Duration::from_secs(10), || vps(&vm).iter().any(
            |(t, h, s, p)| *t == tid && *h == from && s == "running" && *p == pid
        )),
        "{:?}",
        vps(&vm)
    );
    assert!(alive(pid) && !mig_tests::stopped(pid));
    let out = vm.mig(&["kill", "j1"]);
    assert!(out.status.success(), "{out:?}");
    let _ = job.wait_with_output();
}

#[test]
fn a_job_of_shell_loops_is_checkpointed_and_goes_on_from_it_when_a_host_dies() {
    let mut vm = Vm::start_config(3, "[daemon]\ncheckpoint_interval_s = 0.5\n");
    let job = vm.start_job(
        2,
        std::path::Path::new("/bin/sh"),
        &[
            "-c",
            "i=0; while [ $i -lt 2500 ]; do i=$((i+1)); sleep 0.002; done; echo done $i",
        ],
    );
    assert!(wait_until(Duration::from_secs(20), || all_running(&vm, 2)));
    let tids: Vec<String> = vps(&vm).into_iter().map(|v| v.0).collect();
    assert!(
        wait_until(Duration::from_secs(20), || tids
            .iter()
            .all(|t| movable(&vm, t))),
        "{}",
        vm.all_logs()
    );
    // Saved from outside, each VP with the `sleep` it is waiting for.
    assert!(
        wait_until(Duration::from_secs(30), || vm
            .log(0)
            .contains("checkpointed (generation")),
        "{}",
        vm.all_logs()
    );
    let victim = vps(&vm)
        .into_iter()
        .map(|v| v.1)
        .find(|h| h != "h0")
        .expect("a VP off the master's host");
    let i: usize = victim[1..].parse().expect("host index");
    vm.signal(i, nix::sys::signal::Signal::SIGKILL);
    let lines = ends_well(&vm, job);
    // (A VP that ended after the checkpoint the job goes back to runs
    // its end again: its line may come twice.)
    assert!(
        lines.iter().filter(|l| l.ends_with("done 2500")).count() >= 2,
        "{lines:?}"
    );
    assert!(
        vm.log(0).contains("from its checkpoint"),
        "not restarted from its checkpoint:\n{}",
        vm.log(0)
    );
}

/// Move VP `tid` to another host `n` times, each once it runs where it
/// went; fewer if its job ends first. How many were made.
fn move_around(vm: &Vm, tid: &str, n: usize) -> usize {
    let mut moved = 0;
    for _ in 0..n {
        let Some((_, from, state, _)) = vps(vm).into_iter().find(|v| v.0 == tid) else {
            break;
        };
        if state == "exited" {
            break;
        }
        let to = ["h0", "h1", "h2"]
            .into_iter()
            .find(|h| *h != from)
            .expect("another host");
        // (A move may be called off on a busy machine, when the source's
        // link to the master breaks meanwhile: the VP runs on where it
        // was, and is asked again, as a user would.)
        let mut landed = false;
        for _ in 0..3 {
            if !vm.migrate(tid, to).status.success() {
                return moved;
            }
            landed = wait_until(Duration::from_secs(30), || {
                vps(vm)
                    .iter()
                    .any(|(t, h, s, _)| t == tid && (h == to && s == "running" || s == "exited"))
            });
            let back = vps(vm)
                .iter()
                .any(|(t, h, s, _)| t == tid && *h == from && s == "running");
            if landed || !back {
                break;
            }
        }
        assert!(landed, "{:?}\n{}", vps(vm), vm.all_logs());
        moved += 1;
        std::thread::sleep(Duration::from_millis(300));
    }
    moved
}

/// Start a one-VP job of `/bin/sh -c script` (or another program) and
/// wait until its host says it can be moved.
fn one_vp(vm: &Vm, program: &str, args: &[&str]) -> (std::process::Child, String) {
    let job = vm.start_job(1, std::path::Path::new(program), args);
    assert!(wait_until(Duration::from_secs(20), || all_running(vm, 1)));
    let tid = vps(vm)[0].0.clone();
    assert!(
        wait_until(Duration::from_secs(20), || movable(vm, &tid)),
        "{}",
        vm.all_logs()
    );
    (job, tid)
}

/// Two VPs of a libmig program that never says it can be moved, so each is
/// moved from outside, stopped wherever it is in its conversation with its
/// daemon (messages it has not read in its socket, one it was writing cut
/// short): VP 0 streams numbered messages of 16 B to 100 KiB, a window
/// ahead, and VP 1 sends each back. Each VP is moved three times while the
/// stream runs; every message arrives once, in order, with its bytes, both
/// ways.
#[test]
fn a_libmig_stream_moved_from_outside_loses_and_doubles_nothing() {
    let vm = Vm::start(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let stop = dir.path().join("stop");
    let job = vm.start_job(
        2,
        &mig_tests::bin("testvp"),
        &["echo".as_ref(), stop.as_os_str()],
    );
    assert!(wait_until(Duration::from_secs(20), || all_running(&vm, 2)));
    let tids: Vec<String> = vps(&vm).into_iter().map(|v| v.0).collect();
    assert!(
        wait_until(Duration::from_secs(20), || tids
            .iter()
            .all(|t| movable(&vm, t))),
        "{}",
        vm.all_logs()
    );
    for round in 0..3 {
        for tid in &tids {
            assert_eq!(
                move_around(&vm, tid, 1),
                1,
                "round {round}: t{tid} not moved: {:?}\n{}",
                vps(&vm),
                vm.all_logs()
            );
        }
    }
    std::fs::write(&stop, "").expect("stop");
    let lines = ends_well(&vm, job);
    every_message_once(&lines);
}

/// A message cut in two by a move: VP 0 of a libmig program writes half
/// of a frame on its socket (as a write cut short leaves it), is moved
/// from outside twice, then writes the rest from its new host. Its new
/// daemon takes the first half from the image as read, and VP 1 gets the
/// message whole.
#[test]
fn a_frame_half_written_when_its_sender_moves_arrives_whole() {
    let vm = Vm::start(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let stop = dir.path().join("stop");
    let job = vm.start_job(
        2,
        &mig_tests::bin("testvp"),
        &["halfway".as_ref(), stop.as_os_str()],
    );
    let half = dir.path().join("stop.half");
    assert!(
        wait_until(Duration::from_secs(20), || half.exists()),
        "{}",
        vm.all_logs()
    );
    let first = vm
        .json(&["ps"])
        .as_array()
        .and_then(|a| a.iter().find(|v| v["vp"] == 0))
        .and_then(|v| v["tid"].as_str())
        .expect("VP 0")
        .to_string();
    assert!(
        wait_until(Duration::from_secs(20), || movable(&vm, &first)),
        "{}",
        vm.all_logs()
    );
    assert_eq!(move_around(&vm, &first, 2), 2, "{}", vm.all_logs());
    std::fs::write(&stop, "").expect("stop");
    let lines = ends_well(&vm, job);
    assert!(
        lines
            .iter()
            .any(|l| l == "got: a message cut in two by a move"),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l == "answered: thanks"), "{lines:?}");
}

/// Job checkpoints of VPs saved from outside that talk: the stream of
/// `a_libmig_stream_moved_from_outside_loses_and_doubles_nothing`, whose
/// VPs never say they can move, is checkpointed every half second, each
/// VP with what is on its way through its socket and what it sent, as its
/// daemon counted it. A host of one of them is killed: the job goes back to
/// its checkpoint and the stream goes on, every message once, in order,
/// with its bytes.
#[test]
fn a_libmig_stream_checkpointed_from_outside_goes_on_from_it_when_a_host_dies() {
    let mut vm = Vm::start_config(3, "[daemon]\ncheckpoint_interval_s = 0.5\n");
    let dir = tempfile::tempdir().expect("tempdir");
    let stop = dir.path().join("stop");
    let job = vm.start_job(
        2,
        &mig_tests::bin("testvp"),
        &["echo".as_ref(), stop.as_os_str(), "64".as_ref()],
    );
    assert!(wait_until(Duration::from_secs(20), || all_running(&vm, 2)));
    let generations = |vm: &Vm| vm.log(0).matches("checkpointed (generation").count();
    assert!(
        wait_until(Duration::from_secs(60), || generations(&vm) >= 2),
        "{}",
        vm.all_logs()
    );
    let victim = vps(&vm)
        .into_iter()
        .map(|v| v.1)
        .find(|h| h != "h0")
        .expect("a VP off the master's host");
    let i: usize = victim[1..].parse().expect("host index");
    vm.signal(i, nix::sys::signal::Signal::SIGKILL);
    assert!(
        wait_until(Duration::from_secs(60), || vm
            .log(0)
            .contains("from its checkpoint")
            && all_running(&vm, 2)),
        "{}",
        vm.all_logs()
    );
    std::thread::sleep(Duration::from_secs(1));
    std::fs::write(&stop, "").expect("stop");
    let lines = ends_well(&vm, job);
    every_message_once(&lines);
}

/// A VP waiting for the answer to a call to the master (a group's barrier
/// that its peer has not reached) is moved from outside, twice, and the
/// answer finds it. The second time the answer comes while it is on its
/// way (its target daemon stopped, SIGSTOP): the master keeps it until
/// the VP runs on the target, then sends it there.
#[test]
fn a_vp_waiting_for_the_master_is_moved_and_the_answer_follows_it() {
    // (The target is stopped for as long as the barrier takes: it is not
    // given up for dead meanwhile, nor the move for late.)
    let mut vm = Vm::start_config(
        3,
        "[daemon]\ndead_after_ms = 60000\nmove_timeout_ms = 120000\n",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("go");
    let job = vm.start_job(
        2,
        &mig_tests::bin("testvp"),
        &["barrier".as_ref(), file.as_os_str()],
    );
    assert!(wait_until(Duration::from_secs(20), || all_running(&vm, 2)));
    let ps = vm.json(&["ps"]);
    let tid = ps
        .as_array()
        .and_then(|a| a.iter().find(|v| v["vp"] == 0))
        .and_then(|v| v["tid"].as_str())
        .expect("VP 0")
        .to_string();
    assert!(
        wait_until(Duration::from_secs(20), || movable(&vm, &tid)
            && vm.output("j1").contains("at the barrier")),
        "{}",
        vm.all_logs()
    );
    // (Its call goes out just after the line.)
    std::thread::sleep(Duration::from_millis(500));
    let host_of = |vm: &Vm| vm.where_is(&tid).map(|(h, _)| h).expect("listed");
    // Moved once: the master answers where it runs, after the move.
    let from = host_of(&vm);
    let to = ["h1", "h2", "h0"]
        .into_iter()
        .find(|h| *h != from)
        .expect("another host");
    let out = vm.mig(&["migrate", &tid, "--to", to]);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        vm.all_logs()
    );
    assert_eq!(host_of(&vm), to);
    // Moved again, to a worker stopped meanwhile: its old host keeps the
    // answer, which comes while it is on its way.
    let from = to.to_string();
    let to = ["h1", "h2"]
        .into_iter()
        .find(|h| *h != from)
        .expect("another worker");
    let i: usize = to[1..].parse().expect("index");
    let f: usize = from[1..].parse().expect("index");
    vm.signal(i, nix::sys::signal::Signal::SIGSTOP);
    let mut moving = mig_tests::command("mig")
        .env("MIG_DAEMON", vm.sock())
        .args(["migrate", &tid, "--to", to])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("mig migrate");
    let saved = |vm: &Vm| {
        vm.log(f).contains(&format!(
            "VP {tid} waits for the master's answer to its call"
        ))
    };
    let waited = wait_until(Duration::from_secs(30), || saved(&vm));
    std::fs::write(&file, "").expect("go");
    let passed = |vm: &Vm, n: usize| vm.output("j1").matches("through the barrier").count() >= n;
    let peer_passed = wait_until(Duration::from_secs(30), || passed(&vm, 1));
    vm.signal(i, nix::sys::signal::Signal::SIGCONT);
    assert!(waited && peer_passed, "{}", vm.all_logs());
    let status = moving.wait().expect("mig migrate ends");
    assert!(status.success(), "{}", vm.all_logs());
    assert!(
        wait_until(Duration::from_secs(30), || passed(&vm, 2)),
        "{}",
        vm.all_logs()
    );
    assert_eq!(host_of(&vm), to, "{}", vm.all_logs());
    assert!(
        vm.log(0)
            .contains(&format!("VP {tid} is moving: the answer to its call")),
        "{}",
        vm.all_logs()
    );
    std::fs::write(dir.path().join("go.end"), "").expect("end");
    let lines = ends_well(&vm, job);
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.ends_with("through the barrier"))
            .count(),
        2,
        "{lines:?}"
    );
}

#[test]
fn a_python_program_with_two_threads_moved_mid_run_gets_its_sum_right() {
    let vm = Vm::start(3);
    let script = "import threading,time\nc=[0,0]\n\
                  def w(k):\n    for i in range(1500):\n        c[k]+=1\n        time.sleep(0.002)\n\
                  ts=[threading.Thread(target=w,args=(k,)) for k in (0,1)]\n\
                  [t.start() for t in ts]\n[t.join() for t in ts]\nprint('sum', c[0]+c[1])\n";
    let (job, tid) = one_vp(&vm, "/usr/bin/python3", &["-c", script]);
    let moved = move_around(&vm, &tid, 3);
    assert!(moved >= 1, "not moved:\n{}", vm.all_logs());
    let lines = ends_well(&vm, job);
    assert!(lines.iter().any(|l| l.ends_with("sum 3000")), "{lines:?}");
}

#[test]
fn a_shell_pipeline_moved_mid_run_sums_right() {
    let vm = Vm::start(3);
    let (job, tid) = one_vp(
        &vm,
        "/bin/sh",
        &[
            "-c",
            "i=0; while [ $i -lt 2000 ]; do i=$((i+1)); echo $i; sleep 0.002; done \
             | awk '{s+=$1} END {print \"total\", s}'",
        ],
    );
    let moved = move_around(&vm, &tid, 3);
    assert!(moved >= 1, "not moved:\n{}", vm.all_logs());
    let lines = ends_well(&vm, job);
    assert!(
        lines.iter().any(|l| l.ends_with("total 2001000")),
        "{lines:?}"
    );
}

#[test]
fn with_default_settings_a_job_of_plain_programs_survives_its_masters_host_and_a_worker_dying() {
    // Six hosts, each with one VP of the job; h5 never votes (five voters
    // at most), so it is never the master and the job is waited for
    // through it. No settings: the first checkpoint comes by itself.
    let mut vm = Vm::start(6);
    let steady = 5;
    let mut job = mig_tests::command("mig")
        .env("MIG_DAEMON", vm.sock_of(steady))
        .args(["spawn", "-n", "6", "--wait", "--", "/bin/sh", "-c"])
        .arg("i=0; while [ $i -lt 300 ]; do i=$((i+1)); sleep 0.05; done; echo done $i")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("mig spawn");
    let checkpointed = |vm: &Vm, m: usize| vm.log(m).contains("checkpointed (generation");
    assert!(
        wait_until(Duration::from_secs(30), || checkpointed(&vm, 0)),
        "{}",
        vm.all_logs()
    );
    assert!(
        job.try_wait().ok().flatten().is_none(),
        "the job ended early"
    );
    vm.signal(0, nix::sys::signal::Signal::SIGKILL);
    let mut master = None;
    assert!(
        wait_until(Duration::from_secs(30), || {
            master = vm.master_seen_by(steady).filter(|&m| m != 0);
            master.is_some()
        }),
        "no new master:\n{}",
        vm.all_logs()
    );
    let m = master.expect("a master");
    // A checkpoint under the new master, then a worker with a VP dies too.
    assert!(
        wait_until(Duration::from_secs(30), || vm
            .log(m)
            .matches("checkpointed (generation")
            .count()
            >= 1),
        "{}",
        vm.all_logs()
    );
    let worker = (1..5).find(|&i| i != m).expect("a worker");
    vm.signal(worker, nix::sys::signal::Signal::SIGKILL);
    let lines = ends_well(&vm, job);
    // (A VP that ended after the checkpoint the job goes back to runs
    // its end again: its line may come twice.)
    assert!(
        lines.iter().filter(|l| l.ends_with("done 300")).count() >= 6,
        "{lines:?}\n{}",
        vm.all_logs()
    );
    assert!(
        vm.all_logs().contains("from its checkpoint"),
        "{}",
        vm.all_logs()
    );
}

#[test]
fn a_target_with_another_program_at_the_same_path_is_refused_and_the_vp_runs_on() {
    // The VP's program is a copy of dash; on h2 (a mount namespace of its
    // own) another program sits at that path: h2 cannot take the VP.
    let progs = tempfile::tempdir().expect("tmp");
    let prog = progs.path().join("prog");
    let other = progs.path().join("other");
    std::fs::copy("/bin/dash", &prog).expect("copy dash");
    std::fs::copy("/bin/bash", &other).expect("copy bash");
    let mut vm = Vm::start(2);
    let job = vm.start_job(1, &prog, &["-c", "i=0; while :; do i=$((i+1)); done"]);
    assert!(wait_until(Duration::from_secs(20), || all_running(&vm, 1)));
    let (tid, src, _, _) = vps(&vm)[0].clone();
    let addr = vm.addr.clone();
    let (c, _) = vm.daemon_seeing(2, Some(&addr), &[], &[(&other, &prog)]);
    vm.daemons.push(Some(c));
    assert!(wait_until(Duration::from_secs(20), || vm
        .json(&["hosts"])
        .as_array()
        .is_some_and(|h| h.len() == 3)));
    assert!(
        wait_until(Duration::from_secs(20), || movable(&vm, &tid)),
        "{}",
        vm.all_logs()
    );
    // (Waiting for the move's end.)
    let out = vm.mig(&["migrate", &tid, "--to", "h2"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "moved to h2: {err}\n{}",
        vm.all_logs()
    );
    assert!(
        err.contains("prog has other content") && err.contains("h2"),
        "{err}\n{}",
        vm.all_logs()
    );
    // It runs on where it was; nothing of it is left on h2.
    assert!(
        wait_until(Duration::from_secs(20), || vm.where_is(&tid)
            == Some((src.clone(), "running".into()))),
        "{:?}\n{}",
        vps(&vm),
        vm.all_logs()
    );
    let (_, _, _, pid) = vps(&vm).into_iter().find(|v| v.0 == tid).expect("listed");
    assert!(alive(pid), "its process on {src} runs");
    assert!(vm.job_processes("j1", "h2").is_empty());
    // To a host with the same program it moves.
    let third = if src == "h0" { "h1" } else { "h0" };
    let out = vm.mig(&["migrate", &tid, "--to", third]);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        vm.all_logs()
    );
    let out = vm.mig(&["kill", "j1"]);
    assert!(out.status.success(), "{out:?}");
    let _ = job.wait_with_output();
}

/// Bytes waiting unread in the stdin pipe of `pid`.
fn unread_stdin(pid: u32) -> usize {
    use std::os::fd::AsRawFd;
    let Ok(f) = std::fs::File::open(format!("/proc/{pid}/fd/0")) else {
        return 0;
    };
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int, ours, about a descriptor we own.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), libc::FIONREAD, &mut n) };
    if r < 0 {
        0
    } else {
        n as usize
    }
}

#[test]
fn input_typed_ahead_of_a_moved_program_reaches_it_after_the_move() {
    use std::io::Write;
    let vm = Vm::start(2);
    // It waits for a child, then reads its stdin: what was typed meanwhile
    // sits unread in its pipe when it moves.
    let mut job = mig_tests::command("mig")
        .env("MIG_DAEMON", vm.sock())
        .args([
            "spawn",
            "-n",
            "1",
            "--wait",
            "--",
            "/bin/sh",
            "-c",
            "sleep 8; cat",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("mig spawn");
    let mut stdin = job.stdin.take().expect("stdin");
    stdin
        .write_all(b"typed ahead 1\ntyped ahead 2\n")
        .expect("type ahead");
    stdin.flush().expect("flush");
    assert!(wait_until(Duration::from_secs(20), || all_running(&vm, 1)));
    let (tid, src, _, pid) = vps(&vm)[0].clone();
    assert!(
        wait_until(Duration::from_secs(20), || unread_stdin(pid) == 28),
        "the typed bytes never reached its pipe: {}",
        unread_stdin(pid)
    );
    assert!(
        wait_until(Duration::from_secs(20), || movable(&vm, &tid)),
        "{}",
        vm.all_logs()
    );
    let to = if src == "h0" { "h1" } else { "h0" };
    let out = vm.mig(&["migrate", &tid, "--to", to]);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        vm.all_logs()
    );
    // Typed after the move, then the end.
    stdin.write_all(b"after the move\n").expect("type");
    drop(stdin);
    let lines = mig_tests::job_succeeds(job, &vm.all_logs());
    assert_eq!(
        lines,
        ["typed ahead 1", "typed ahead 2", "after the move"],
        "{}",
        vm.all_logs()
    );
}

#[test]
fn restarts_asked_back_to_back_leave_each_vp_one_process_and_the_job_right() {
    // Eight `mig restart`s a few ms apart: a host is asked to rebuild a
    // VP again while it still rebuilds it from the last request. The later
    // one wins; the earlier process goes, and its end is nobody's exit
    // (each restore was adopted once, or the VP ended with 1 or 137).
    let vm = Vm::start(2);
    let job = vm.start_job(
        2,
        std::path::Path::new("/bin/sh"),
        &[
            "-c",
            "i=0; while [ $i -lt 200 ]; do i=$((i+1)); sleep 0.05; done; echo done $i",
        ],
    );
    assert!(wait_until(Duration::from_secs(20), || all_running(&vm, 2)));
    assert!(
        wait_until(Duration::from_secs(30), || vm
            .log(0)
            .contains("checkpointed (generation")),
        "{}",
        vm.all_logs()
    );
    let restarted: Vec<bool> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..8u64)
            .map(|k| {
                let vm = &vm;
                sc.spawn(move || {
                    std::thread::sleep(Duration::from_millis(k * 12));
                    vm.mig(&["restart", "j1"]).status.success()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or(false)).collect()
    });
    assert!(restarted.iter().any(|&r| r), "no restart was made");
    let lines = ends_well(&vm, job);
    assert!(
        lines.iter().filter(|l| l.ends_with("done 200")).count() >= 2,
        "{lines:?}"
    );
}

#[test]
fn a_worker_dying_under_a_job_of_independent_programs_restores_its_vp_alone_and_the_others_run_on()
{
    let mut vm = Vm::start_config(4, "[daemon]\ncheckpoint_interval_s = 1\n");
    let mut job = mig_tests::command("mig")
        .env("MIG_DAEMON", vm.sock())
        .args(["spawn", "-n", "4", "--independent", "--wait", "--"])
        .args(["/bin/sh", "-c"])
        .arg("i=0; while [ $i -lt 200 ]; do i=$((i+1)); sleep 0.05; done; echo done $i")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("mig spawn");
    assert!(
        wait_until(Duration::from_secs(30), || all_running(&vm, 4)
            && vm.log(0).contains("checkpointed (generation")),
        "{}",
        vm.all_logs()
    );
    assert!(job.try_wait().ok().flatten().is_none(), "ended early");
    let before = vps(&vm);
    let worker = (1..4)
        .find(|i| before.iter().any(|(_, h, _, _)| *h == format!("h{i}")))
        .expect("a worker with a VP");
    let on_it = |h: &str| h == format!("h{worker}");
    vm.signal(worker, nix::sys::signal::Signal::SIGKILL);
    let alone = "alone from generation";
    assert!(
        wait_until(Duration::from_secs(30), || vm.log(0).contains(alone)),
        "{}",
        vm.all_logs()
    );
    // The others were never stopped for it: each still the process it was.
    let after = vps(&vm);
    for (tid, host, _, pid) in before.iter().filter(|(_, h, _, _)| !on_it(h)) {
        assert!(
            after
                .iter()
                .any(|(t, h, _, p)| t == tid && h == host && p == pid),
            "{tid} on {host} was replaced: {after:?}\n{}",
            vm.log(0)
        );
    }
    let lines = ends_well(&vm, job);
    assert_eq!(
        lines.iter().filter(|l| l.ends_with("done 200")).count(),
        4,
        "{lines:?}\n{}",
        vm.all_logs()
    );
    assert!(!vm.log(0).contains("restarting job j1"), "{}", vm.log(0));
}

/// The daemons' settings for the streamed moves below: no periodic
/// checkpoints, and the line that says an image goes while it is written.
const STREAMED: &str = "[daemon]\ncheckpoint_interval_s = 0\n\
    log = \"info,server::move_out=debug\"\n";

/// `ballast` (a plain program holding `mib` MiB it wrote) as a job of `n`
/// VPs, stopped by `stop`; each has said it holds its memory.
fn ballast_job(vm: &Vm, n: u32, mib: u32, stop: &std::path::Path) -> std::process::Child {
    let mib = mib.to_string();
    let args = [
        "--mib".as_ref(),
        mib.as_ref(),
        "--until".as_ref(),
        stop.as_os_str(),
    ];
    let job = vm.start_job(n, &mig_tests::bin("ballast"), &args);
    let touched = format!("ballast: {mib} MiB touched");
    assert!(
        wait_until(Duration::from_secs(60), || all_running(vm, n as usize)
            && vm.output("j1").matches(&touched).count() == n as usize),
        "{}",
        vm.all_logs()
    );
    job
}

/// The job ends well and each of its VPs found every byte it wrote, through
/// everything that was done to it.
fn every_byte_kept(vm: &Vm, job: std::process::Child, n: usize) {
    let lines = ends_well(vm, job);
    let ok = lines
        .iter()
        .filter(|l| l.contains("MiB checked") && l.ends_with(": ok"))
        .count();
    assert_eq!(ok, n, "{lines:?}");
}

/// The VP's files (images, parts of them) in host `h`'s state directory.
fn vp_files(vm: &Vm, h: usize) -> Vec<String> {
    std::fs::read_dir(vm.dir.path().join(format!("h{h}")))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| migd::state_dir::is_vp_file(n) || n.ends_with(".dumping"))
        .collect()
}

/// A plain program saved from outside for a move, its image sent on as it
/// is written, whose save fails half way (its host's state directory, a
/// 10 MB tmpfs, fills up under its 48 MiB): the move fails saying why, the
/// target drops what arrived, nothing of the image is left on either host,
/// and the VP runs on where it was with every byte it wrote. The same when
/// the target cannot take in the image streamed to it.
#[test]
fn a_vp_whose_save_fails_while_its_image_streams_runs_on_where_it_was() {
    let vm = Vm::start_small_disks(2, STREAMED, &[(1, "10m")]);
    let stop = vm.dir.path().join("stop");
    let job = ballast_job(&vm, 2, 48, &stop);
    let on_h1 = vps(&vm)
        .into_iter()
        .find(|v| v.1 == "h1")
        .map(|v| v.0)
        .unwrap_or_else(|| panic!("no VP on h1: {:?}", vps(&vm)));
    assert!(
        wait_until(Duration::from_secs(20), || movable(&vm, &on_h1)),
        "{}",
        vm.all_logs()
    );
    // The disk fills within a few parts: most times one part has gone on
    // before it does, and the target drops it. (On a fast turn the failure
    // comes before the first part went: the move is tried again, each try
    // failing the same way and leaving the VP running on h1.)
    let streamed = format!("sending on the image of VP {on_h1} while it is written");
    for _ in 0..5 {
        let out = vm.mig(&["migrate", &on_h1, "--to", "h0"]);
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !out.status.success()
                && said.contains("could not write its image on h1")
                && said.contains("No space left on device"),
            "{said}\n{}",
            vm.all_logs()
        );
        assert!(
            wait_until(Duration::from_secs(20), || vp_files(&vm, 0).is_empty()
                && vp_files(&vm, 1).is_empty()),
            "left: h0 {:?}, h1 {:?}\n{}",
            vp_files(&vm, 0),
            vp_files(&vm, 1),
            vm.all_logs()
        );
        assert!(
            wait_until(Duration::from_secs(20), || vm.where_is(&on_h1)
                == Some(("h1".into(), "running".into()))),
            "{:?}\n{}",
            vps(&vm),
            vm.all_logs()
        );
        if vm.log(1).contains(&streamed) {
            break;
        }
    }
    assert!(
        vm.log(1).contains(&streamed),
        "no part went while it was written, in five tries:\n{}",
        vm.log(1)
    );
    // Onto h1: it cannot take the image in.
    let on_h0 = vps(&vm)
        .into_iter()
        .find(|v| v.1 == "h0")
        .map(|v| v.0)
        .unwrap_or_else(|| panic!("no VP on h0: {:?}", vps(&vm)));
    let out = vm.mig(&["migrate", &on_h0, "--to", "h1"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("No space left on device"),
        "{said}\n{}",
        vm.all_logs()
    );
    assert!(
        wait_until(Duration::from_secs(20), || vm.where_is(&on_h0)
            == Some(("h0".into(), "running".into()))
            && vp_files(&vm, 1).is_empty()),
        "{:?} {:?}\n{}",
        vps(&vm),
        vp_files(&vm, 1),
        vm.all_logs()
    );
    std::fs::write(&stop, "").expect("stop");
    every_byte_kept(&vm, job, 2);
}

/// A plain program saved from outside for a move whose target dies while
/// the image streams to it: the VP runs on where it was, with every byte
/// it wrote.
#[test]
fn a_vp_whose_target_dies_while_its_image_streams_runs_on_where_it_was() {
    let mut vm = Vm::start_config(3, STREAMED);
    let stop = vm.dir.path().join("stop");
    let job = ballast_job(&vm, 1, 160, &stop);
    let (tid, from, _, _) = vps(&vm)[0].clone();
    assert!(
        wait_until(Duration::from_secs(20), || movable(&vm, &tid)),
        "{}",
        vm.all_logs()
    );
    // Not the master's host (h0): its death would be another story.
    let to = if from == "h1" { "h2" } else { "h1" };
    let (src, dst) = (host_index(&from), host_index(to));
    let out = vm.migrate(&tid, to);
    assert!(out.status.success(), "{out:?}");
    let streaming = format!("sending on the image of VP {tid} while it is written");
    assert!(
        wait_until(Duration::from_secs(30), || vm.log(src).contains(&streaming)),
        "{}",
        vm.all_logs()
    );
    vm.signal(dst, nix::sys::signal::Signal::SIGKILL);
    let _ = vm.wait(dst, Duration::from_secs(10));
    assert!(
        wait_until(Duration::from_secs(60), || vm.where_is(&tid)
            == Some((from.clone(), "running".into()))),
        "{:?}\n{}",
        vps(&vm),
        vm.all_logs()
    );
    std::fs::write(&stop, "").expect("stop");
    every_byte_kept(&vm, job, 1);
}

/// `hK` -> K.
fn host_index(name: &str) -> usize {
    name.trim_start_matches('h')
        .parse()
        .expect("a host name hK")
}

/// Move VP `tid` to host `to` from outside, asking again (up to ten times)
/// when a move is refused for the moment or called off; whether it runs
/// there.
fn move_to(vm: &Vm, tid: &str, to: &str) -> bool {
    for _ in 0..10 {
        let out = vm.migrate(tid, to);
        if !out.status.success() {
            std::thread::sleep(Duration::from_millis(300));
            continue;
        }
        let settled = wait_until(Duration::from_secs(30), || {
            vps(vm).iter().any(|(t, h, s, _)| {
                t == tid && (s == "running" || s == "exited") && (h == to || s == "exited")
            }) || vps(vm)
                .iter()
                .any(|(t, h, s, _)| t == tid && h != to && s == "running")
        });
        assert!(settled, "{:?}\n{}", vps(vm), vm.all_logs());
        if vps(vm)
            .iter()
            .any(|(t, h, s, _)| t == tid && h == to && s == "running")
        {
            return true;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    false
}

/// Two VPs of a libmig program that never says it can be moved, on one
/// host, talking over a direct link (a ring each way in shared memory) and
/// sending messages of 200 KiB (shared buffers, passed as descriptors):
/// moved from outside at any moment of their stream, again and again. The
/// first move cuts their link (what the rings and its socket held arrives,
/// later messages go through the daemons), the shared buffers go with each
/// move; every message arrives once, in order, with its bytes, both ways.
#[test]
fn vps_talking_through_shared_memory_are_moved_from_outside_and_lose_nothing() {
    let vm = Vm::start_procs(2, 2, &[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let stop = dir.path().join("stop");
    let job = vm.start_job(
        2,
        &mig_tests::bin("testvp"),
        &[
            "echo".as_ref(),
            stop.as_os_str(),
            "200".as_ref(),
            "direct".as_ref(),
            "big".as_ref(),
        ],
    );
    assert!(wait_until(Duration::from_secs(20), || all_running(&vm, 2)));
    let v = vps(&vm);
    let tids: Vec<String> = v.iter().map(|v| v.0.clone()).collect();
    assert!(
        wait_until(Duration::from_secs(20), || tids
            .iter()
            .all(|t| movable(&vm, t))),
        "{}",
        vm.all_logs()
    );
    // On one host, where they link.
    if v[0].1 != v[1].1 {
        assert!(move_to(&vm, &tids[1], &v[0].1), "{}", vm.all_logs());
    }
    std::thread::sleep(Duration::from_secs(1));
    let mut moves = 0;
    for round in 0..3 {
        for tid in &tids {
            let from = vps(&vm)
                .into_iter()
                .find(|v| v.0 == *tid && v.2 == "running")
                .map(|v| v.1)
                .unwrap_or_else(|| panic!("t{tid} not running: {:?}\n{}", vps(&vm), vm.all_logs()));
            let to = if from == "h0" { "h1" } else { "h0" };
            assert!(
                move_to(&vm, tid, to),
                "round {round}: t{tid} not moved: {:?}\n{}",
                vps(&vm),
                vm.all_logs()
            );
            moves += 1;
            std::thread::sleep(Duration::from_millis(300));
        }
    }
    assert_eq!(moves, 6);
    std::fs::write(&stop, "").expect("stop");
    let lines = ends_well(&vm, job);
    every_message_once(&lines);
    assert!(
        vm.all_logs().contains("are cut for its move"),
        "no direct link was cut:\n{}",
        vm.all_logs()
    );
}
