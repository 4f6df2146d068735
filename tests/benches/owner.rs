//! Owner activity to VPs out of the way: how long from the owner's return
//! (a CPU-bound program starting on their desk; `mig owner reclaim`) until
//! every VP on that host is stopped, and until the host is empty of VPs
//! (moved to another host); p50/p99 over TRIALS trials each. Then the owner
//! monitor's own cost on an idle desk: migd's CPU time while nothing runs,
//! with the monitor watching the whole machine (the default) and with it off.
//!
//! Also the CPU the VPs used on the host between the owner's return and
//! the host being empty (from the daemon's cgroup counters).
//!
//! Needs release binaries: `cargo build --release --workspace --bins`, then
//! `cargo bench -p mig-tests --bench owner -- --bench` (TRIALS=N to change;
//! BUSY=4 runs four busy processes beside it, not the owner's).

use std::path::Path;
use std::time::{Duration, Instant};

use libmig::control::Client;
use libmig::msg::{OwnerAction, Request, Response};
use mig_tests::{bin, stopped, wait_until, Desk, Vm};

/// (host, state, pid) of every VP.
fn vps(c: &mut Client) -> Vec<(String, String, u32)> {
    match c.call(&Request::Ps).expect("ps") {
        Response::Ps(v) => v
            .into_iter()
            .map(|v| (v.host.unwrap_or_default(), v.state, v.pid.unwrap_or(0)))
            .collect(),
        other => panic!("unexpected {other:?}"),
    }
}

fn owner(c: &mut Client, action: OwnerAction, host: &str) {
    let req = Request::Owner {
        action,
        host: Some(host.into()),
    };
    match c.call(&req).expect("owner") {
        Response::Ok { .. } => {}
        other => panic!("unexpected {other:?}"),
    }
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn report(what: &str, v: &mut [f64], target: Option<f64>) {
    let (p50, p99, max) = (pct(v, 0.5), pct(v, 0.99), pct(v, 1.0));
    let t = target.map_or(String::new(), |t| {
        format!(
            "  target p99 < {t} ms: {}",
            if p99 < t { "met" } else { "missed" }
        )
    });
    println!(
        "{what:<52} p50 {p50:7.1} ms  p99 {p99:7.1} ms  max {max:7.1} ms  (n={}){t}",
        v.len()
    );
}

/// What h1's daemon last reported of the CPU its VPs used since the owner
/// came back (ms), after a heartbeat for the report to be fresh.
fn vp_cpu_since_back(c: &mut Client) -> Option<f64> {
    std::thread::sleep(Duration::from_millis(700));
    let req = Request::Owner {
        action: OwnerAction::Status,
        host: Some("h1".into()),
    };
    match c.call(&req).ok()? {
        Response::Owner(list) => list
            .into_iter()
            .find(|(h, _)| h == "h1")
            .and_then(|(_, r)| r.vp_cpu_ms)
            .map(|ms| ms as f64),
        _ => None,
    }
}

/// Trigger the owner's return on h1, time until its VPs are stopped (or
/// gone from it, when `until_empty`, with the CPU they used meanwhile),
/// then let the owner go and wait until h1 runs `expect_back` VPs again.
fn trial(
    vm: &Vm,
    c: &mut Client,
    desk: &mut Desk,
    hog: bool,
    until_empty: bool,
    expect_back: usize,
) -> (f64, Option<f64>) {
    let on_h1: Vec<u32> = vps(c)
        .into_iter()
        .filter(|(h, s, _)| h == "h1" && s == "running")
        .map(|(_, _, p)| p)
        .collect();
    assert!(!on_h1.is_empty(), "no VP on h1");
    let t = Instant::now();
    if hog {
        desk.type_line("while :; do :; done &");
    } else {
        owner(c, OwnerAction::Reclaim, "h1");
    }
    let took = loop {
        let done = if until_empty {
            !vps(c).iter().any(|(h, _, _)| h == "h1")
        } else {
            on_h1.iter().all(|&p| stopped(p))
        };
        if done {
            break t.elapsed().as_secs_f64() * 1e3;
        }
        assert!(
            // A move off a reclaimed host on a machine busy with other work
            // may miss its first tries (the VP gets only idle CPU).
            t.elapsed() < Duration::from_secs(if until_empty { 90 } else { 10 }),
            "timed out: {:?}, stopped {:?}\n{}\n{}",
            vps(c),
            on_h1.iter().map(|&p| stopped(p)).collect::<Vec<_>>(),
            vm.log(0),
            vm.log(1)
        );
        // Asking the master without a pause would keep a core busy: a VP
        // resumed in the idle class for its safe point would wait for it.
        std::thread::sleep(if until_empty {
            Duration::from_millis(2)
        } else {
            Duration::from_micros(100)
        });
    };
    let cpu = if until_empty {
        vp_cpu_since_back(c)
    } else {
        None
    };
    if hog {
        desk.type_line("kill $!");
    } else {
        owner(c, OwnerAction::Release, "h1");
    }
    assert!(
        wait_until(Duration::from_secs(10), || vps(c)
            .iter()
            .filter(|(h, s, p)| h == "h1" && s == "running" && !stopped(*p))
            .count()
            == expect_back),
        "h1 did not get its VPs back: {:?}",
        vps(c)
    );
    (took, cpu)
}

/// A busy loop beside the benchmark, ended with it.
struct Busy(std::process::Child);

impl Busy {
    fn start() -> Busy {
        Busy(
            std::process::Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .spawn()
                .expect("sh"),
        )
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Percent of one core migd used over `secs` seconds of an idle desk.
fn idle_cost(scope: &str, secs: u64) -> f64 {
    let vm = Vm::start_with(1, &["--owner-scope", scope]);
    std::thread::sleep(Duration::from_millis(500));
    let ticks = |pid: u32| -> f64 {
        let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
        let f: Vec<&str> = s[s.rfind(')').expect(")") + 1..]
            .split_whitespace()
            .collect();
        f[11].parse::<f64>().expect("utime") + f[12].parse::<f64>().expect("stime")
    };
    let pid = vm.pid(0);
    let (t0, c0) = (Instant::now(), ticks(pid));
    std::thread::sleep(Duration::from_secs(secs));
    let used = (ticks(pid) - c0) / 100.0;
    used / t0.elapsed().as_secs_f64() * 100.0
}

fn main() {
    if !mig_tests::bench_requested() {
        return; // `cargo test` runs benches without --bench: nothing to do.
    }
    let trials: usize = mig_tests::env_num("TRIALS", 30);
    // Other work beside the test (not the owner's, not VPs).
    let busy: usize = mig_tests::env_num("BUSY", 0);
    let _busy: Vec<Busy> = (0..busy).map(|_| Busy::start()).collect();
    let mut desk = Desk::open();
    let mut vm = Vm::start(1);
    let conf = vm.dir.path().join("owner.toml");
    std::fs::write(
        &conf,
        "[owner]\nreclaim_load = 0.2\noffer_max_load = 0.1\noffer_after_idle_s = 0.2\n",
    )
    .expect("config");
    let scope = format!("tree:{}", desk.pid());
    let addr = vm.addr.clone();
    let conf = conf.display().to_string();
    let (ch, _) = vm.daemon(
        1,
        Some(&addr),
        &["--owner-scope", &scope, "--config", &conf],
    );
    vm.daemons.push(Some(ch));
    let stop = vm.dir.path().join("stop");
    let mut job = vm.start_job(2, &bin("testvp"), &[Path::new("spin"), &stop]);
    let mut c = Client::connect(&vm.sock()).expect("connect");
    assert!(wait_until(Duration::from_secs(10), || {
        let v = vps(&mut c);
        v.len() == 2 && v.iter().all(|(_, s, _)| s == "running")
    }));
    println!("owner activity on h1 (poll 50 ms, load window 100 ms): 2 hosts, a job of 2 CPU-bound VPs, {trials} trials each, {busy} other busy processes on the machine");

    // Host empty: h0 is free, so h1's VP moves there; back when released.
    let (mut hog_empty, mut cmd_empty, mut cpu) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..trials {
        let (t, u) = trial(&vm, &mut c, &mut desk, true, true, 1);
        hog_empty.push(t);
        cpu.extend(u);
        let (t, u) = trial(&vm, &mut c, &mut desk, false, true, 1);
        cmd_empty.push(t);
        cpu.extend(u);
    }
    // VPs stopped: h0 taken back too, so both VPs wait on h1, stopped.
    owner(&mut c, OwnerAction::Reclaim, "h0");
    assert!(wait_until(Duration::from_secs(10), || vps(&mut c)
        .iter()
        .all(|(h, s, _)| h == "h1" && s == "running")));
    let (mut hog_stop, mut cmd_stop) = (Vec::new(), Vec::new());
    for _ in 0..trials {
        hog_stop.push(trial(&vm, &mut c, &mut desk, true, false, 2).0);
        cmd_stop.push(trial(&vm, &mut c, &mut desk, false, false, 2).0);
    }
    report(
        "CPU hog starts -> every VP on h1 stopped",
        &mut hog_stop,
        Some(150.0),
    );
    report(
        "mig owner reclaim -> every VP on h1 stopped",
        &mut cmd_stop,
        Some(20.0),
    );
    report(
        "CPU hog starts -> h1 empty (VPs moved to h0)",
        &mut hog_empty,
        None,
    );
    report(
        "mig owner reclaim -> h1 empty (VPs moved to h0)",
        &mut cmd_empty,
        None,
    );
    if cpu.is_empty() {
        println!("CPU VPs used on h1 until it was empty: not counted (no cgroups here)");
    } else {
        // In ms of CPU, not of time: the same percentiles.
        report(
            "CPU (ms) VPs used on h1, owner back -> h1 empty",
            &mut cpu,
            Some(50.0),
        );
    }
    std::fs::write(&stop, "").expect("stop");
    owner(&mut c, OwnerAction::Release, "h0");
    let _ = job.wait();
    drop(vm);

    let secs = 10;
    let on = idle_cost("machine", secs);
    let off = idle_cost("none", secs);
    println!(
        "idle desk, {secs} s, no VPs: migd uses {on:.2}% of one core watching the whole machine, {off:.2}% with the load source off (target < 0.5%: {})",
        if on < 0.5 { "met" } else { "missed" }
    );
}
