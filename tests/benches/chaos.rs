//! Chaos: a job on five hosts with default settings while a host is killed
//! with SIGKILL and started again every EVERY_S seconds (20) for CHAOS_S
//! seconds (180), every third time the master: the job must finish with
//! the right answer. Two jobs, one after the other: the heat stencil (VPs
//! that talk, restarted from the job's checkpoints; its answer is the
//! serial run's) and a bag of eight `--independent` shell loops (each
//! prints a sum it computed, checked against the formula). It prints the
//! kills, the job's restarts from its checkpoint and the elections it went
//! through. Too long for the test suite: a bench binary.
//!
//! Needs release binaries: `cargo build --release --workspace --bins`, then
//! `cargo bench -p mig-tests --bench chaos -- --bench` (ITERS=N heat
//! iterations, 600000; BAG_N=N each loop's count, 8000000; EVERY_S,
//! CHAOS_S; ONLY=heat or ONLY=bag for one of the two).

use std::time::{Duration, Instant};

use libmig::control::Client;
use libmig::msg::{Request, Response};
use mig_tests::{bin, wait_until, Vm};
use nix::sys::signal::Signal;

/// The index of the master as daemon `i` sees it.
fn master(vm: &Vm, i: usize) -> Option<usize> {
    let mut c = Client::connect(&vm.sock_of(i)).ok()?;
    let Response::Hosts(h) = c.call(&Request::Hosts).ok()? else {
        return None;
    };
    let name = h.iter().find(|h| h.master && h.alive)?.facts.name.clone();
    name.trim_start_matches('h').split('-').next()?.parse().ok()
}

/// A live daemon's index, and the master as it sees it.
fn live_master(vm: &Vm) -> Option<(usize, usize)> {
    (0..vm.daemons.len())
        .filter(|&i| vm.daemons[i].is_some())
        .find_map(|i| Some((i, master(vm, i)?)))
}

fn all_logs(vm: &Vm) -> String {
    (0..vm.daemons.len())
        .map(|i| format!("--- h{i}\n{}", vm.log(i)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// How often `what` is in the daemons' logs, and in `old` (the logs of
/// daemons killed and started again since).
fn count(vm: &Vm, old: &str, what: &str) -> usize {
    old.matches(what).count()
        + (0..vm.daemons.len())
            .map(|i| vm.log(i).matches(what).count())
            .sum::<usize>()
}

/// What the job under chaos is: its `mig spawn` arguments, and whether
/// its output (`mig logs`) is the right answer.
struct Job {
    name: &'static str,
    spawn: Vec<String>,
    right: Box<dyn Fn(&str) -> bool>,
}

/// The heat stencil on 5 VPs that talk: its answer is the serial run's.
fn heat(iters: u64) -> Job {
    let spawn = ["-n", "5", "--"]
        .iter()
        .map(|s| s.to_string())
        .chain([bin("heat").display().to_string()])
        .chain(
            [
                "--rows",
                "96",
                "--cols",
                "96",
                "--iters",
                &iters.to_string(),
            ]
            .iter()
            .map(|s| s.to_string()),
        )
        .collect();
    Job {
        name: "heat on 5 hosts",
        spawn,
        right: Box::new(|out| out.contains("identical to the serial run: ok")),
    }
}

/// Eight independent shell loops, each summing 1..=n: every VP prints the
/// sum at least once (one that ended after the checkpoint its job went
/// back to prints it again) and no VP prints another.
fn bag(n: u64) -> Job {
    let script =
        format!("i=0; s=0; while [ $i -lt {n} ]; do i=$((i+1)); s=$((s+i)); done; echo sum $s");
    let want = format!("sum {}", n * (n + 1) / 2);
    Job {
        name: "a bag of 8 --independent shell loops on 5 hosts",
        spawn: ["-n", "8", "--independent", "--", "/bin/sh", "-c", &script]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        right: Box::new(move |out| {
            let sums: Vec<(&str, &str)> = out
                .lines()
                .filter_map(|l| {
                    // `[tTID HOST] line` (the host changes as it moves).
                    let (who, rest) = l.split_once("] ")?;
                    let tid = who.split_whitespace().next()?;
                    rest.starts_with("sum ").then_some((tid, rest))
                })
                .collect();
            let mut vps: Vec<&str> = sums.iter().map(|(who, _)| *who).collect();
            vps.sort_unstable();
            vps.dedup();
            vps.len() == 8 && sums.iter().all(|(_, s)| *s == want)
        }),
    }
}

fn chaos(job_kind: Job, every: Duration, length: Duration) {
    // (The harness's deadline, made for tests, would end it half way.)
    let mut vm = Vm::start_until(5, 1, &[], length * 10);
    let mut args = vec!["spawn"];
    args.extend(job_kind.spawn.iter().map(String::as_str));
    let out = vm.mig_ok(&args);
    let job = String::from_utf8_lossy(&out.stdout).trim().to_string();
    // The first periodic checkpoint (a minute in, by default) before the
    // first kill: a job of VPs that talk and lose one without a checkpoint
    // cannot go on.
    assert!(
        wait_until(Duration::from_secs(300), || count(
            &vm,
            "",
            "checkpointed (generation"
        ) > 0),
        "{}",
        all_logs(&vm)
    );
    let began = Instant::now();
    let mut kills = Vec::new();
    let mut old = String::new();
    let mut k = 0usize;
    while began.elapsed() < length {
        std::thread::sleep(every);
        let Some((_, m)) = live_master(&vm) else {
            panic!("no master answers:\n{}", all_logs(&vm));
        };
        let victim = if k % 3 == 2 { m } else { 1 + k % 4 };
        k += 1;
        if vm.daemons[victim].is_none() {
            continue;
        }
        vm.signal(victim, Signal::SIGKILL);
        vm.wait(victim, Duration::from_secs(5));
        kills.push((began.elapsed().as_secs(), victim, victim == m));
        // Started again in its state directory, joining the master (a new
        // one, once elected, when the master was killed).
        let mut next = None;
        assert!(
            wait_until(Duration::from_secs(30), || {
                next = live_master(&vm).map(|(_, m)| m).filter(|&m| m != victim);
                next.is_some()
            }),
            "no new master:\n{}",
            all_logs(&vm)
        );
        let through = next.unwrap_or(0);
        let addr = std::fs::read_to_string(vm.dir.path().join(format!("h{through}/addr")))
            .expect("an address");
        old.push_str(&vm.log(victim));
        let (c, _) = vm.daemon(victim, Some(addr.trim()), &[]);
        vm.daemons[victim] = Some(c);
    }
    // The job goes on to its end.
    let done = |vm: &Vm| {
        (0..5).any(|i| {
            let out = vm.mig_at(i, &["jobs", "--json"]);
            serde_json::from_slice::<serde_json::Value>(&out.stdout)
                .ok()
                .and_then(|v| {
                    v.as_array()?
                        .iter()
                        .find(|j| j["job"] == job.as_str())
                        .map(|j| j["state"] != "running")
                })
                .unwrap_or(false)
        })
    };
    assert!(
        wait_until(Duration::from_secs(1800), || done(&vm)),
        "{}",
        all_logs(&vm)
    );
    let (asked, _) = live_master(&vm).expect("a master");
    let output = String::from_utf8_lossy(&vm.mig_at(asked, &["logs", &job]).stdout).into_owned();
    let right = (job_kind.right)(&output);
    println!(
        "chaos: {}, {} kills in {} s ({} of the master: at {:?}); the job restarted \
         from its checkpoint {} times, VPs started again from the beginning {} times; {} \
         elections; answer {}",
        job_kind.name,
        kills.len(),
        length.as_secs(),
        kills.iter().filter(|k| k.2).count(),
        kills
            .iter()
            .map(|k| (k.0, format!("h{}", k.1)))
            .collect::<Vec<_>>(),
        count(&vm, &old, "restarting job j1 from its checkpoint"),
        count(&vm, &old, "restarting VP "),
        count(&vm, &old, "elected master"),
        if right { "right" } else { "WRONG" }
    );
    assert!(right, "{output}\n{}", all_logs(&vm));
}

fn main() {
    if !mig_tests::bench_requested() {
        return; // `cargo test` runs benches without --bench: nothing to do.
    }
    let every = Duration::from_secs(mig_tests::env_num("EVERY_S", 20));
    let length = Duration::from_secs(mig_tests::env_num("CHAOS_S", 180));
    let only = std::env::var("ONLY").unwrap_or_default();
    if only != "bag" {
        chaos(heat(mig_tests::env_num("ITERS", 600_000)), every, length);
    }
    if only != "heat" {
        chaos(bag(mig_tests::env_num("BAG_N", 8_000_000)), every, length);
    }
}
