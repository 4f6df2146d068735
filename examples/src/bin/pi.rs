//! `pi`: Monte Carlo π, master/worker. VP 0 is the master: it hands out
//! chunks of samples (chunk `i` always uses seed `i`, so the answer does not
//! depend on which VP computed what) to workers as they ask, adds up the
//! hits, and checks the estimate against π (within 6 standard errors).
//! Run by hand (not as a VP) it computes every chunk itself.
//!
//! Usage: pi [--samples N] [--chunk N]   (defaults 200,000,000 and 1,000,000)
//! Prints: `pi = 3.14… error … samples N chunks C vps V: ok`

use libmig::Tid;
use mig_examples::{in_vm, init_or_restore_or_exit, num_flag, or_die, Rng};

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
    // Migration-aware: whatever a VP needs to go on is in `Pi`, and every
    // wait for a message is a safe point (`recv_safe`), so any VP can be
    // moved between chunks (`mig migrate`) without changing the answer.
    let (mut vm, mut st) = init_or_restore_or_exit(PROG, Pi::default);
    let tasks = or_die(PROG, vm.tasks());
    let me = vm.tid();
    if tasks.first() != Some(&me) {
        // A worker: ask for work (an empty result), compute, repeat.
        let master = tasks[0];
        if !st.asked {
            or_die(PROG, vm.send(master, RESULT, &(u64::MAX, 0u64)));
            st.asked = true;
        }
        loop {
            let m = or_die(PROG, vm.recv_safe(&st, Some(master), Some(WORK)));
            let i: u64 = or_die(PROG, m.decode());
            if i == u64::MAX {
                return;
            }
            let h = hits(i, size(i));
            or_die(PROG, vm.send(master, RESULT, &(i, h)));
        }
    }
    let workers = tasks.len() - 1;
    if workers == 0 {
        let h = (0..chunks).map(|i| hits(i, size(i))).sum();
        return report(h, samples, chunks, 1);
    }
    // Until every chunk is in and every worker has been told to stop.
    while st.done < chunks || st.stopped.len() < workers {
        let m = or_die(PROG, vm.recv_safe(&st, None, Some(RESULT)));
        let (i, h): (u64, u64) = or_die(PROG, m.decode());
        if i != u64::MAX {
            st.total += h;
            st.done += 1;
        }
        let work = if st.next < chunks { st.next } else { u64::MAX };
        st.next += 1;
        if work == u64::MAX && !st.stopped.contains(&m.from) {
            st.stopped.push(m.from);
        }
        or_die(PROG, vm.send(m.from, WORK, &work));
    }
    report(st.total, samples, chunks, tasks.len());
}

/// What a VP of `pi` keeps across a move.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Pi {
    /// A worker has asked for its first chunk.
    asked: bool,
    /// The master: next chunk to hand out, chunks done, hits so far, and the
    /// workers told to stop.
    next: u64,
    done: u64,
    total: u64,
    stopped: Vec<Tid>,
}
