//! `pi`: Monte Carlo π, master/worker. VP 0 is the master: it hands out
//! chunks of samples (chunk `i` always uses seed `i`, so the answer does not
//! depend on which VP computed what) to workers as they ask, adds up the
//! hits, and checks the estimate against π (within 6 standard errors).
//! Run by hand (not as a VP) it computes every chunk itself.
//!
//! Usage: pi [--samples N] [--chunk N]   (defaults 200,000,000 and 1,000,000)
//! Prints: `pi = 3.14… error … samples N chunks C vps V: ok`

use libmig::Tid;
use mig_examples::{in_vm, init_or_exit, num_flag, or_die, Rng};

const WORK: i32 = 1;
const RESULT: i32 = 2;
const PROG: &str = "pi";

fn hits(chunk: u64, size: u64) -> u64 {
    let mut rng = Rng::new(chunk.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0x5eed);
    let mut h = 0;
    for _ in 0..size {
        let (x, y) = (rng.unit(), rng.unit());
        h += u64::from(x * x + y * y < 1.0);
    }
    h
}

fn report(total_hits: u64, samples: u64, chunks: u64, vps: usize) {
    let est = 4.0 * total_hits as f64 / samples as f64;
    let err = (est - std::f64::consts::PI).abs();
    let p = std::f64::consts::PI / 4.0;
    let sigma = 4.0 * (p * (1.0 - p) / samples as f64).sqrt();
    let ok = err < 6.0 * sigma;
    println!(
        "pi = {est:.10} error {err:.2e} samples {samples} chunks {chunks} vps {vps}: {}",
        if ok { "ok" } else { "WRONG" }
    );
    if !ok {
        std::process::exit(1);
    }
}

fn main() {
    let samples: u64 = num_flag(PROG, "samples", 200_000_000);
    let chunk: u64 = num_flag(PROG, "chunk", 1_000_000);
    if samples == 0 || chunk == 0 {
        eprintln!("{PROG}: --samples and --chunk must be positive");
        std::process::exit(2);
    }
    let chunks = samples.div_ceil(chunk);
    let size = |i: u64| chunk.min(samples - i * chunk);
    if !in_vm() {
        let h = (0..chunks).map(|i| hits(i, size(i))).sum();
        return report(h, samples, chunks, 1);
    }
    let mut vm = init_or_exit(PROG);
    let tasks = or_die(PROG, vm.tasks());
    let me = vm.tid();
    if tasks.first() != Some(&me) {
        // A worker: ask for work (an empty result), compute, repeat.
        let master = tasks[0];
        or_die(PROG, vm.send(master, RESULT, &(u64::MAX, 0u64)));
        loop {
            let m = or_die(PROG, vm.recv(Some(master), Some(WORK)));
            let i: u64 = or_die(PROG, m.decode());
            if i == u64::MAX {
                return;
            }
            let h = hits(i, size(i));
            or_die(PROG, vm.send(master, RESULT, &(i, h)));
        }
    }
    let workers: Vec<Tid> = tasks[1..].to_vec();
    if workers.is_empty() {
        let h = (0..chunks).map(|i| hits(i, size(i))).sum();
        return report(h, samples, chunks, 1);
    }
    let (mut next, mut done, mut total) = (0u64, 0u64, 0u64);
    let mut stopped = std::collections::HashSet::new();
    // Until every chunk is in and every worker has been told to stop.
    while done < chunks || stopped.len() < workers.len() {
        let m = or_die(PROG, vm.recv(None, Some(RESULT)));
        let (i, h): (u64, u64) = or_die(PROG, m.decode());
        if i != u64::MAX {
            total += h;
            done += 1;
        }
        let work = if next < chunks { next } else { u64::MAX };
        next += 1;
        if work == u64::MAX {
            stopped.insert(m.from);
        }
        or_die(PROG, vm.send(m.from, WORK, &work));
    }
    report(total, samples, chunks, tasks.len());
}
