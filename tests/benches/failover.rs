//! Failover: how long from SIGKILL of the master until `mig ps` through a
//! surviving daemon is answered by a new master (p50/p99 over TRIALS kills
//! on one machine of four daemons, three or more of them voters; each killed daemon
//! comes back as a new host), and what replicating the master's state costs
//! a spawn of 32 VPs: the same spawn on two machines of three daemons side
//! by side, one with a single voter (nothing replicated) and one with three.
//!
//! Needs release binaries: `cargo build --release --workspace --bins`, then
//! `cargo bench -p mig-tests --bench failover -- --bench` (TRIALS=N, REPS=N).

use std::time::{Duration, Instant};

use libmig::control::Client;
use libmig::msg::{HostInfo, Request, Response};
use mig_tests::{wait_until, Vm};
use nix::sys::signal::Signal;

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn hosts(vm: &Vm, i: usize) -> Option<Vec<HostInfo>> {
    let mut c = Client::connect(&vm.sock_of(i)).ok()?;
    match c.call(&Request::Hosts).ok()? {
        Response::Hosts(h) => Some(h),
        _ => None,
    }
}

/// The daemon index of the master as daemon `i` sees it.
fn master(vm: &Vm, i: usize) -> Option<usize> {
    let h = hosts(vm, i)?;
    let name = h.iter().find(|h| h.master)?.facts.name.clone();
    name.trim_start_matches('h').split('-').next()?.parse().ok()
}

fn failover(trials: usize) {
    let mut vm = Vm::start(4);
    assert!(wait_until(Duration::from_secs(20), || hosts(&vm, 1)
        .is_some_and(|h| h.iter().filter(|h| h.voter).count() == 3)));
    let mut took = Vec::new();
    for _ in 0..trials {
        let m = master(&vm, 1).or_else(|| master(&vm, 2)).expect("a master");
        // Asked through another daemon (the first one up).
        let steady = (0..vm.daemons.len())
            .find(|&i| i != m && vm.daemons[i].is_some())
            .expect("another daemon");
        let old_pid = vm.pid(m);
        vm.signal(m, Signal::SIGKILL);
        let t = Instant::now();
        // Asked while there is no master, the request waits for the next.
        while master(&vm, steady).is_none_or(|n| n == m) {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "no new master:\n{}",
                (0..vm.daemons.len())
                    .map(|i| vm.log(i))
                    .collect::<Vec<_>>()
                    .join("\n-----\n")
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        let mut c = Client::connect(&vm.sock_of(steady)).expect("connect");
        assert!(matches!(c.call(&Request::Ps), Ok(Response::Ps(_))));
        took.push(t.elapsed().as_secs_f64() * 1e3);
        vm.wait(m, Duration::from_secs(5));
        let join = std::fs::read_to_string(vm.dir.path().join(format!("h{steady}/addr")))
            .expect("address");
        let (c, _) = vm.daemon(m, Some(join.trim()), &[]);
        vm.daemons[m] = Some(c);
        // Three live voters again, the killed one replaced, before the
        // next kill (two of three lost at once leave no majority).
        let killed = old_pid;
        assert!(
            wait_until(Duration::from_secs(20), || hosts(&vm, steady)
                .is_some_and(|h| h.iter().filter(|h| h.voter && h.alive).count()
                    >= 3
                    && !h.iter().any(|h| h.facts.pid == killed && h.alive))),
            "{:?}\n{}",
            hosts(&vm, steady).map(|h| h
                .iter()
                .map(|h| (h.facts.name.clone(), h.alive, h.voter, h.master))
                .collect::<Vec<_>>()),
            (0..vm.daemons.len())
                .map(|i| vm.log(i))
                .collect::<Vec<_>>()
                .join("\n-----\n")
        );
    }
    let (p50, p99, max) = (
        pct(&mut took, 0.5),
        pct(&mut took, 0.99),
        pct(&mut took, 1.0),
    );
    println!(
        "SIGKILL of the master to `mig ps` answered by a new one: p50 {p50:.0} ms  p99 {p99:.0} ms  \
         max {max:.0} ms  (n={})  target p50 < 1000 ms: {}",
        took.len(),
        if p50 < 1000.0 { "met" } else { "missed" }
    );
}

fn spawn(vm: &Vm, n: u32) -> f64 {
    vm.spawn_true_ms(n)
}

fn replication(reps: usize) {
    let one = Vm::start_config(3, "[daemon]\nvoters = 1\n");
    let three = Vm::start_config(3, "[daemon]\nvoters = 3\n");
    assert!(wait_until(Duration::from_secs(20), || hosts(&three, 0)
        .is_some_and(|h| h.iter().filter(|h| h.voter).count() == 3)));
    spawn(&one, 32);
    spawn(&three, 32);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        a.push(spawn(&one, 32));
        b.push(spawn(&three, 32));
    }
    let (ma, mb) = (pct(&mut a, 0.5), pct(&mut b, 0.5));
    println!(
        "spawn 32 VPs on 3 hosts until all reported: one voter {ma:.1} ms, three voters {mb:.1} ms \
         (median of {reps}): {:.2}x  target at most 1.2x: {}",
        mb / ma,
        if mb / ma <= 1.2 { "met" } else { "missed" }
    );
}

fn main() {
    if !mig_tests::bench_requested() {
        return; // `cargo test` runs benches without --bench: nothing to do.
    }
    replication(mig_tests::env_num("REPS", 21));
    failover(mig_tests::env_num("TRIALS", 20));
}
