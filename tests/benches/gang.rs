//! Gang slicing, measured:
//! * skew and overhead: 4 hosts, 2 jobs of 4 CPU-bound VPs, quantum 50 ms,
//!   for SECS seconds: switch lateness and cross-host skew p50/p99, and the
//!   time lost to switching, from `mig stats`;
//! * why gang: the heat stencil (2 VPs exchanging halos every iteration)
//!   sharing 2 hosts with a CPU-bound competitor job, gang-scheduled
//!   (quantum 50 ms) versus left to the kernel's time sharing (quantum 0),
//!   alternated REPS times: iterations per second of each, and medians.
//!
//! Needs release binaries: `cargo build --release --workspace --bins`, then
//! `cargo bench -p mig-tests --bench gang -- --bench` (SECS=N, ITERS=N,
//! REPS=N heat runs of each kind, SIZE=N rows and columns, EXTRA_CONFIG=
//! "more [daemon] lines").

use std::path::Path;
use std::time::Duration;

use mig_tests::{bin, job_lines, wait_until, Vm};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn vm_with_quantum(n: usize, quantum_ms: u64) -> (Vm, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tmp");
    let conf = dir.path().join("gang.toml");
    // EXTRA_CONFIG: more `[daemon]` lines, to compare settings.
    let extra = std::env::var("EXTRA_CONFIG").unwrap_or_default();
    std::fs::write(
        &conf,
        format!("[daemon]\nquantum_ms = {quantum_ms}\n{extra}\n"),
    )
    .expect("config");
    let vm = Vm::start_with(n, &["--config", conf.to_str().expect("utf-8")]);
    (vm, dir)
}

fn running(vm: &Vm) -> usize {
    vm.json(&["ps"])
        .as_array()
        .map(|a| a.iter().filter(|v| v["state"] == "running").count())
        .unwrap_or(0)
}

/// Iterations per second of a heat run beside a spinning competitor.
fn heat_beside_competitor(quantum_ms: u64, iters: u64, size: u64) -> f64 {
    let (vm, _conf) = vm_with_quantum(2, quantum_ms);
    let stop = vm.dir.path().join("stop");
    let competitor = vm.start_job(2, &bin("testvp"), &[Path::new("spin"), &stop]);
    assert!(wait_until(Duration::from_secs(10), || running(&vm) == 2));
    let out = mig_tests::command("mig")
        .env("MIG_DAEMON", vm.sock())
        .args(["spawn", "-n", "2", "--wait", "--"])
        .arg(bin("heat"))
        .args([
            "--rows",
            &size.to_string(),
            "--cols",
            &size.to_string(),
            "--iters",
            &iters.to_string(),
        ])
        .output()
        .expect("heat");
    std::fs::write(&stop, "").expect("stop");
    let _ = competitor.wait_with_output();
    let lines = job_lines(&out);
    assert!(out.status.success(), "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("identical to the serial run: ok")),
        "{lines:?}"
    );
    lines
        .iter()
        .find_map(|l| {
            l.split(": ")
                .last()?
                .strip_suffix(" iterations/s")?
                .parse()
                .ok()
        })
        .expect("heat's rate")
}

fn main() {
    if !mig_tests::bench_requested() {
        return; // `cargo test` runs benches without --bench: nothing to do.
    }
    let secs = env("SECS", 10);
    {
        let (vm, _conf) = vm_with_quantum(4, 50);
        let stop = vm.dir.path().join("stop");
        let a = vm.start_job(4, &bin("testvp"), &[Path::new("spin"), &stop]);
        let b = vm.start_job(4, &bin("testvp"), &[Path::new("spin"), &stop]);
        assert!(wait_until(Duration::from_secs(10), || running(&vm) == 8));
        // Beside it, under the same load: how late a bare 1 ms sleep ends,
        // the floor for any timer-driven switch on this machine.
        let mut over: Vec<f64> = Vec::new();
        let t = std::time::Instant::now();
        while t.elapsed() < Duration::from_secs(secs) {
            let s = std::time::Instant::now();
            std::thread::sleep(Duration::from_millis(1));
            over.push((s.elapsed().as_secs_f64() - 1e-3) * 1e3);
        }
        over.sort_by(f64::total_cmp);
        let at = |p: f64| over[((over.len() - 1) as f64 * p) as usize];
        let s = vm.json(&["stats"]);
        std::fs::write(&stop, "").expect("stop");
        let _ = (a.wait_with_output(), b.wait_with_output());
        let all = s["hosts"]
            .as_array()
            .and_then(|h| h.iter().find(|h| h["host"] == "all").cloned())
            .unwrap_or_default();
        let ms = |v: &serde_json::Value, i: usize| v[i].as_f64().unwrap_or(f64::NAN);
        println!(
            "4 hosts, 2 jobs of 4 CPU-bound VPs, quantum 50 ms, {secs} s: {} switches",
            all["switches"]
        );
        println!(
            "switch lateness      p50 {:.3} ms  p99 {:.3} ms  max {:.3} ms  (target p99 < 2 ms: {})",
            ms(&all["late_ms"], 0),
            ms(&all["late_ms"], 1),
            ms(&all["late_ms"], 2),
            if ms(&all["late_ms"], 1) < 2.0 { "met" } else { "missed" }
        );
        println!(
            "cross-host skew      p50 {:.3} ms  p99 {:.3} ms  max {:.3} ms  over {} boundaries  (target p99 < 2 ms: {})",
            ms(&s["skew_ms"], 0),
            ms(&s["skew_ms"], 1),
            ms(&s["skew_ms"], 2),
            s["boundaries"],
            if ms(&s["skew_ms"], 1) < 2.0 { "met" } else { "missed" }
        );
        println!(
            "a bare 1 ms sleep here, same load: ends late by p50 {:.3} ms  p99 {:.3} ms  max {:.3} ms",
            at(0.5),
            at(0.99),
            at(1.0)
        );
        let lost = all["lost"].as_f64().unwrap_or(f64::NAN) * 100.0;
        println!(
            "time lost switching  {lost:.3}%  (target < 1%: {})",
            if lost < 1.0 { "met" } else { "missed" }
        );
    }
    // Alternated, REPS times each, medians: the two see the same machine.
    let iters = env("ITERS", 5_000);
    let reps = env("REPS", 3).max(1);
    let size = env("SIZE", 256);
    let (mut gang, mut kernel) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        gang.push(heat_beside_competitor(50, iters, size));
        kernel.push(heat_beside_competitor(0, iters, size));
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let all = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.0}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!(
        "heat ({size}x{size}, 2 VPs, {iters} iterations) beside a CPU-bound job on 2 hosts, {reps} runs each: gang {} iterations/s, kernel time sharing {} iterations/s",
        all(&gang),
        all(&kernel)
    );
    let (g, k) = (median(&mut gang), median(&mut kernel));
    println!(
        "medians: gang {g:.0}, kernel {k:.0} iterations/s: gang {:.2}x",
        g / k
    );
}
