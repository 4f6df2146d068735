//! Migration speed: time from the `Migrate` request until the moved VP has
//! restored its state on the target and said so (a line of output), for
//! states of 0, 1, 64 and 256 MiB, beside copying the same bytes over a plain
//! loopback TCP socket in the same run, and beside the same bytes over a
//! link sealed as daemons seal theirs, opened into memory not touched
//! before (as the restored VP must hold its state): what a move cannot do
//! without, paid by one writer and one reader. 1 warm-up, then REPS moves
//! back and forth between two daemons; medians.
//!
//! Needs release binaries: `cargo build --release --workspace --bins`, then
//! `cargo bench -p mig-tests --bench migrate -- --bench`.

use std::time::Instant;

use libmig::control::Client;
use libmig::msg::{Request, Response, SpawnSpec};
use mig_tests::floor::{copy_ms, Copy};
use mig_tests::{bin, Vm};

fn wait_line(c: &mut Client, want: &str) {
    loop {
        match c.recv(None).expect("reply") {
            Response::Output { line, .. } if line.starts_with(want) => return,
            Response::JobDone { status, .. } => panic!("the job ended ({status})"),
            Response::Error { message } => panic!("{message}"),
            _ => {}
        }
    }
}

fn main() {
    if !mig_tests::bench_requested() {
        return; // `cargo test` runs benches without --bench: nothing to do.
    }
    let reps: usize = mig_tests::env_num("REPS", 11);
    // SIZES=64,256 measures only those (MiB).
    let sizes: Vec<usize> = std::env::var("SIZES")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![0, 1, 64, 256]);
    let vm = Vm::start(2);
    for mib in sizes {
        let mut job = Client::connect(&vm.sock()).expect("connect");
        let args = vec!["hold".into(), mib.to_string()];
        let spec = SpawnSpec::new(bin("testvp").display().to_string(), args).wait(true);
        let Response::Spawned { tids, .. } = job.call(&Request::Spawn(spec)).expect("spawn") else {
            panic!("no job")
        };
        let tid = format!("t{:x}", tids[0]);
        wait_line(&mut job, "ready");
        let mut c = Client::connect(&vm.sock()).expect("connect");
        let Response::Ps(ps) = c.call(&Request::Ps).expect("ps") else {
            panic!("no ps")
        };
        let mut at = ps
            .iter()
            .find(|v| v.tid == tids[0])
            .and_then(|v| v.host.clone())
            .expect("placed");
        // Moves and raw copies alternate, so both see the same machine.
        let (mut times, mut tcp, mut floor) = (Vec::new(), Vec::new(), Vec::new());
        for rep in 0..=reps {
            let to = if at == "h0" { "h1" } else { "h0" }.to_string();
            let t = Instant::now();
            match c
                .call(&Request::Migrate {
                    tid: tid.clone(),
                    to: to.clone(),
                })
                .expect("migrate")
            {
                Response::Ok { .. } => {}
                other => panic!("{other:?}"),
            }
            wait_line(&mut job, "restored");
            if rep > 0 {
                times.push(t.elapsed().as_secs_f64() * 1e3);
                if std::env::var_os("MIG_BENCH_SAMPLES").is_some() {
                    eprintln!("{at} -> {to}: {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
                }
                tcp.push(copy_ms(mib << 20, Copy::Raw));
                floor.push(copy_ms(mib << 20, Copy::SealedFresh));
            }
            at = to;
        }
        if std::env::var_os("MIG_BENCH_SAMPLES").is_some() {
            eprintln!("{mib} MiB moves (ms): {times:.1?}\n{mib} MiB copies (ms): {tcp:.1?}");
        }
        times.sort_by(f64::total_cmp);
        tcp.sort_by(f64::total_cmp);
        floor.sort_by(f64::total_cmp);
        let (m, r, f) = (times[reps / 2], tcp[reps / 2], floor[reps / 2]);
        println!(
            "mig_migrate_{mib}MiB_ms {m:.2} ms (min {:.2}, max {:.2}); tcp_copy_{mib}MiB_ms {r:.2} ms; {}",
            times[0],
            times[reps - 1],
            if mib > 0 {
                format!(
                    "throughput {:.0} MB/s = {:.2} x raw TCP; sealed and opened into fresh \
                     memory: sealed_fresh_{mib}MiB_ms {f:.2} ms = {:.2} x raw TCP, mig {:.2} x it",
                    (mib << 20) as f64 / m / 1e3,
                    r / m,
                    r / f,
                    f / m
                )
            } else {
                "no state to copy".into()
            }
        );
        let _ = c.call(&Request::Kill { target: tid });
    }
}
