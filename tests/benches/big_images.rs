//! Big images beside a job that talks: on 4 hosts, the heat stencil (4
//! VPs that exchange their borders every iteration) runs while a 256 MiB
//! and a 1 GiB VP (`testvp hold`, two jobs) are checkpointed periodically
//! (every INTERVAL_S seconds, 10, each image written by its host and
//! copied to another) for RUN_S seconds (120). It reports the checkpoints
//! each job completed, the longest loop turn of the master and of any host
//! (`mig stats --json`, polled every 500 ms), the elections and fences
//! the daemons logged, and whether heat's answer is the serial run's. The
//! promise: no election, no fence, heat's answer right.
//!
//! Needs release binaries: `cargo build --release --workspace --bins`, then
//! `cargo bench -p mig-tests --bench big_images -- --bench` (ITERS=N heat
//! iterations, 1000000; INTERVAL_S, RUN_S; HOLD_MIB=256,1024).

use std::time::{Duration, Instant};

use mig_tests::{bin, wait_until, Vm};

/// The longest loop turn (ms) of the master and of any host now.
fn longest_turns(vm: &Vm) -> (f64, f64) {
    let out = vm.mig(&["stats", "--json"]);
    mig_tests::longest_turns(&serde_json::from_slice(&out.stdout).unwrap_or_default())
}

/// How often `what` is in the daemons' logs.
fn count(vm: &Vm, what: &str) -> usize {
    (0..vm.daemons.len())
        .map(|i| vm.log(i).matches(what).count())
        .sum()
}

/// The job a `mig spawn` without `--wait` started.
fn spawn(vm: &Vm, args: &[&str]) -> String {
    let mut a = vec!["spawn"];
    a.extend_from_slice(args);
    String::from_utf8_lossy(&vm.mig_ok(&a).stdout)
        .trim()
        .to_string()
}

fn main() {
    if !mig_tests::bench_requested() {
        return; // `cargo test` runs benches without --bench: nothing to do.
    }
    let iters = mig_tests::env_num("ITERS", 1_000_000u64).to_string();
    let interval = mig_tests::env_num("INTERVAL_S", 10.0f64);
    let run = Duration::from_secs(mig_tests::env_num("RUN_S", 120));
    let holds = std::env::var("HOLD_MIB").unwrap_or_else(|_| "256,1024".into());
    let conf = tempfile::NamedTempFile::new().expect("a config file");
    std::fs::write(
        conf.path(),
        format!("[daemon]\ncheckpoint_interval_s = {interval}\n"),
    )
    .expect("the config written");
    let conf = conf.path().display().to_string();
    // (The harness's deadline, made for tests, would end it half way.)
    let vm = Vm::start_until(4, 1, &["--config", &conf], run * 20);
    let heat = bin("heat").display().to_string();
    let heat_job = spawn(
        &vm,
        &[
            "-n", "4", "--", &heat, "--rows", "96", "--cols", "96", "--iters", &iters,
        ],
    );
    let testvp = bin("testvp").display().to_string();
    let holds: Vec<(String, String)> = holds
        .split(',')
        .map(|mib| (mib.to_string(), spawn(&vm, &["--", &testvp, "hold", mib])))
        .collect();
    assert!(
        wait_until(Duration::from_secs(300), || holds.iter().all(|(_, j)| {
            String::from_utf8_lossy(&vm.mig(&["logs", j]).stdout).contains("ready")
        })),
        "the big VPs never said they were ready:\n{}",
        vm.all_logs()
    );
    let (elections, fences) = (
        count(&vm, "elected master"),
        count(&vm, "fenced by the master"),
    );
    let began = Instant::now();
    let mut most = (0.0f64, 0.0f64);
    while began.elapsed() < run {
        let (m, a) = longest_turns(&vm);
        most = (most.0.max(m), most.1.max(a));
        std::thread::sleep(Duration::from_millis(500));
    }
    let checkpoints: Vec<String> = holds
        .iter()
        .map(|(mib, job)| {
            let n = vm
                .log(0)
                .lines()
                .filter(|l| l.contains(&format!("job {job} checkpointed (generation")))
                .count();
            format!("{mib} MiB: {n}")
        })
        .collect();
    for (_, j) in &holds {
        let _ = vm.mig(&["kill", j]);
    }
    let heat_done = wait_until(Duration::from_secs(1800), || {
        String::from_utf8_lossy(&vm.mig(&["logs", &heat_job]).stdout)
            .contains("identical to the serial run")
    });
    let answer = String::from_utf8_lossy(&vm.mig(&["logs", &heat_job]).stdout).into_owned();
    let right = heat_done && answer.contains("identical to the serial run: ok");
    let (elections, fences) = (
        count(&vm, "elected master") - elections,
        count(&vm, "fenced by the master") - fences,
    );
    println!(
        "big images: {} s on 4 hosts, checkpoints every {interval} s completed ({}) beside heat; \
         the master's longest turn {:.0} ms, any host's {:.0} ms; {elections} elections, \
         {fences} hosts fenced; heat's answer {}",
        run.as_secs(),
        checkpoints.join(", "),
        most.0,
        most.1,
        if right { "right" } else { "WRONG" }
    );
    assert!(right, "{answer}\n{}", vm.all_logs());
}
