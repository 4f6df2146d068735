//! Spawn speed: time from `mig spawn` (the Spawn request) until every VP has
//! reported its exit (the JobDone reply), for 1, 8 and 32 trivial VPs
//! (`/bin/true`) on one daemon. One warm-up, then REPS repetitions; prints
//! `mig_spawn_<n>_exit_ms <median>` lines like the PVM harness.
//!
//! Needs release binaries: `cargo build --release --workspace --bins` first
//! (bench/spawn-vs-pvm.sh does it and runs PVM's harness beside it).

use mig_tests::Vm;

fn once(vm: &Vm, n: u32) -> f64 {
    vm.spawn_true_ms(n)
}

fn main() {
    if !mig_tests::bench_requested() {
        return; // `cargo test` runs benches without --bench: nothing to do.
    }
    let reps: usize = mig_tests::env_num("REPS", 21);
    let vm = Vm::start(1);
    for n in [1u32, 8, 32] {
        once(&vm, n);
        let mut t: Vec<f64> = (0..reps).map(|_| once(&vm, n)).collect();
        t.sort_by(f64::total_cmp);
        println!(
            "mig_spawn_{n}_exit_ms {:.2} ms (min {:.2}, max {:.2}, {reps} reps)",
            t[reps / 2],
            t[0],
            t[reps - 1]
        );
    }
}
