//! Many hosts on one machine: for each size (32, 64, 128 daemons; `HOSTS`
//! to choose, e.g. HOSTS=32,64), the time `mig up -n N --detach` takes,
//! the master's resident memory and its CPU at rest (and all the daemons'
//! together), and after a SIGKILL of the master the time until every
//! other host has attached to the new one (the last "following the new
//! master" line in their logs).
//!
//! Needs release binaries: `cargo build --release --workspace --bins`, then
//! `cargo bench -p mig-tests --bench scale -- --bench` (IDLE_S=N: seconds
//! the rest is measured over, 10 by default).

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mig_tests::{command, ticks, wait_until};

/// `mig ARGS` through the daemon whose state directory is `dir/hI`.
fn mig(dir: &Path, i: usize, args: &[&str]) -> std::process::Output {
    command("mig")
        .env("MIG_DAEMON", dir.join(format!("h{i}/control.sock")))
        .args(args)
        .output()
        .expect("mig")
}

/// `mig hosts --json` through daemon `i`.
fn hosts(dir: &Path, i: usize) -> Vec<serde_json::Value> {
    let out = mig(dir, i, &["hosts", "--json"]);
    serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

/// Resident memory of a process, MiB.
fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))?
                .split_whitespace()
                .nth(1)?
                .parse::<f64>()
                .ok()
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Milliseconds since midnight (UTC) of a log line's stamp
/// (`YYYY-MM-DD HH:MM:SS.mmm ...`).
fn stamp_ms(line: &str) -> Option<u64> {
    let t = line.split_whitespace().nth(1)?;
    let (hms, ms) = t.split_once('.')?;
    let mut p = hms.split(':').map(|x| x.parse::<u64>().ok());
    let (h, m, s) = (p.next()??, p.next()??, p.next()??);
    Some(((h * 60 + m) * 60 + s) * 1000 + ms.parse::<u64>().ok()?)
}

fn one(n: usize, idle: Duration) {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let t = Instant::now();
    let out = mig_tests::up(d, n);
    let up_s = t.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "mig up -n {n}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let steady = n - 1;
    assert!(wait_until(Duration::from_secs(30), || {
        let h = hosts(d, steady);
        h.len() == n && h.iter().filter(|h| h["voter"] == true).count() == 5.min(n)
    }));
    std::thread::sleep(Duration::from_secs(2));
    let pids: Vec<(u32, bool)> = hosts(d, steady)
        .iter()
        .filter_map(|h| Some((h["pid"].as_u64()? as u32, h["master"] == true)))
        .collect();
    let master = pids
        .iter()
        .find(|(_, m)| *m)
        .map(|(p, _)| *p)
        .expect("master");
    let before: Vec<u64> = pids.iter().map(|(p, _)| ticks(*p).unwrap_or(0)).collect();
    let t = Instant::now();
    std::thread::sleep(idle);
    let secs = t.elapsed().as_secs_f64();
    let hz = 100.0; // USER_HZ
    let cpu: Vec<f64> = pids
        .iter()
        .zip(&before)
        .map(|((p, _), b)| (ticks(*p).unwrap_or(*b) - b) as f64 / hz / secs * 100.0)
        .collect();
    let master_cpu = pids
        .iter()
        .zip(&cpu)
        .find(|((_, m), _)| *m)
        .map_or(0.0, |(_, c)| *c);
    let all_cpu: f64 = cpu.iter().sum();
    let rss = rss_mib(master);
    // The failover.
    let killed_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
        % 86_400_000;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(master as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill");
    let logs =
        |i: usize| std::fs::read_to_string(d.join(format!("h{i}/migd.log"))).unwrap_or_default();
    let mut last = 0u64;
    let back = wait_until(Duration::from_secs(120), || {
        let new = (0..n).find(|&i| logs(i).contains("elected master"));
        let Some(new) = new else { return false };
        last = 0;
        for i in (1..n).filter(|&i| i != new) {
            let log = logs(i);
            let Some(line) = log
                .lines()
                .rev()
                .find(|l| l.contains("following the new master"))
            else {
                return false;
            };
            last = last.max(stamp_ms(line).unwrap_or(u64::MAX));
        }
        true
    });
    let failover = if back {
        format!("{:.2}", last.saturating_sub(killed_at) as f64 / 1e3)
    } else {
        "not all back in 120 s".into()
    };
    let stopped = (1..n)
        .filter(|&i| {
            let l = logs(i);
            l.contains("no master answered") || l.contains("fenced by the master")
        })
        .count();
    println!(
        "| {n:>5} | {up_s:>10.2} | {rss:>16.1} | {master_cpu:>22.1} | {all_cpu:>24.1} | {failover:>24} | {stopped:>7} |"
    );
    let _ = mig(d, steady, &["halt"]);
    wait_until(Duration::from_secs(20), || {
        !d.join(format!("h{steady}/control.sock")).exists()
    });
}

fn main() {
    if !mig_tests::bench_requested() {
        return; // `cargo test` runs benches without --bench: nothing to do.
    }
    let sizes: Vec<usize> = std::env::var("HOSTS")
        .unwrap_or_else(|_| "32,64,128".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let idle = Duration::from_secs(mig_tests::env_num("IDLE_S", 10));
    println!(
        "| hosts | mig up (s) | master RSS (MiB) | master CPU at rest (%) | all daemons at rest (%) | all re-attached after kill (s) | lost |"
    );
    println!("|---|---|---|---|---|---|---|");
    for n in sizes {
        one(n, idle);
    }
}
