//! Many hosts on one machine: for each size (32, 64, 128 daemons; `HOSTS`
//! to choose, e.g. HOSTS=32,64), the time `mig up -n N --detach` takes,
//! the master's resident memory and its CPU at rest (and all the daemons'
//! together), and after a SIGKILL of the master the time until every
//! other host has attached to the new one (the last "following the new
//! master" line in their logs). Before the kill, the master's loop under
//! load, as `mig stats --json` shows its longest turn (polled while the
//! work runs; each reading covers the last 5-10 s): `mig spawn -n 1024
//! --wait -- /bin/true`, then a 256 MiB and a 1 GiB VP (`testvp hold`)
//! checkpointed at once (`mig checkpoint` of both, each image written by
//! its host and copied to another), with the elections each caused.
//!
//! Needs release binaries: `cargo build --release --workspace --bins`, then
//! `cargo bench -p mig-tests --bench scale -- --bench` (IDLE_S=N: seconds
//! the rest is measured over, 10 by default).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mig_tests::{bin, command, ticks, wait_until};

/// `mig ARGS` through the daemon whose state directory is `dir/hI`.
fn mig(dir: &Path, i: usize, args: &[&str]) -> std::process::Output {
    command("mig")
        .env("MIG_DAEMON", dir.join(format!("h{i}/control.sock")))
        .args(args)
        .output()
        .expect("mig")
}

/// `mig ARGS` through daemon `i`, given `limit`: did it succeed (`None`:
/// it had not ended by then, and was killed)?
fn mig_within(dir: &Path, i: usize, args: &[&str], limit: Duration) -> Option<bool> {
    let mut c = command("mig")
        .env("MIG_DAEMON", dir.join(format!("h{i}/control.sock")))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("mig");
    let t = Instant::now();
    while t.elapsed() < limit {
        if let Ok(Some(status)) = c.try_wait() {
            return Some(status.success());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = c.kill();
    let _ = c.wait();
    None
}

/// A table cell: how long, or how it failed.
fn took(done: Option<bool>, secs: f64) -> String {
    match done {
        Some(true) => format!("{secs:.2}"),
        Some(false) => format!("failed after {secs:.2}"),
        None => format!("not done in {secs:.0}"),
    }
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

/// The longest loop turn (ms) of the master and of any host, in `mig
/// stats --json` through daemon `i`.
fn longest_turns(dir: &Path, i: usize) -> (f64, f64) {
    let out = mig(dir, i, &["stats", "--json"]);
    mig_tests::longest_turns(&serde_json::from_slice(&out.stdout).unwrap_or_default())
}

/// `work`'s result, its time (s), and the longest loop turns (ms) of the
/// master and of any host meanwhile: `mig stats` polled every 500 ms, and
/// once more 2.5 s after (hosts report their turns every 2 s).
fn watching_turns<T>(dir: &Path, i: usize, work: impl FnOnce() -> T) -> (T, f64, (f64, f64)) {
    let done = Arc::new(AtomicBool::new(false));
    let poller = {
        let (dir, done) = (dir.to_path_buf(), done.clone());
        std::thread::spawn(move || {
            let mut most = (0.0f64, 0.0f64);
            loop {
                let last = done.load(Ordering::Relaxed);
                let (m, a) = longest_turns(&dir, i);
                most = (most.0.max(m), most.1.max(a));
                if last {
                    return most;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        })
    };
    let t = Instant::now();
    let r = work();
    let took = t.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(2500));
    done.store(true, Ordering::Relaxed);
    let most = poller.join().unwrap_or_default();
    (r, took, most)
}

/// Elections so far in the daemons' logs.
fn elections(dir: &Path, n: usize) -> usize {
    (0..n)
        .map(|i| {
            std::fs::read_to_string(dir.join(format!("h{i}/migd.log")))
                .unwrap_or_default()
                .matches("elected master")
                .count()
        })
        .sum()
}

/// The master's loop under load, through daemon `i` of `n`: a spawn of
/// 1,024 VPs, then a 256 MiB and a 1 GiB VP checkpointed at once. Table
/// cells: time, the master's and any host's longest turn, elections.
fn under_load(d: &Path, i: usize, n: usize) -> String {
    let before = elections(d, n);
    let limit = Duration::from_secs(120);
    let (done, spawn_s, spawn_turns) = watching_turns(d, i, || {
        let spawn = ["spawn", "-n", "1024", "--wait", "--", "/bin/true"];
        mig_within(d, i, &spawn, limit)
    });
    let spawn_elections = elections(d, n) - before;
    let spawn = took(done, spawn_s);
    // The spawn's turns out of the figures' window (10 s) before the next.
    let spawned = Instant::now();
    let testvp = bin("testvp").display().to_string();
    let jobs: Vec<String> = ["256", "1024"]
        .iter()
        .map(|mib| {
            let out = mig(d, i, &["spawn", "--", &testvp, "hold", mib]);
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        })
        .collect();
    let ready = wait_until(Duration::from_secs(120), || {
        jobs.iter()
            .all(|j| String::from_utf8_lossy(&mig(d, i, &["logs", j]).stdout).contains("ready"))
    });
    std::thread::sleep(Duration::from_secs(11).saturating_sub(spawned.elapsed()));
    let before = elections(d, n);
    let (done, ckpt_s, ckpt_turns) = watching_turns(d, i, || {
        // Both at once.
        let both: Vec<_> = jobs
            .iter()
            .map(|j| {
                let dir = d.to_path_buf();
                let j = j.clone();
                std::thread::spawn(move || mig_within(&dir, i, &["checkpoint", &j], limit))
            })
            .collect();
        let all: Vec<Option<bool>> = both.into_iter().map(|t| t.join().ok().flatten()).collect();
        match all.iter().any(Option::is_none) {
            true => None,
            false => Some(ready && all.iter().all(|o| *o == Some(true))),
        }
    });
    let ckpt_elections = elections(d, n) - before;
    for j in &jobs {
        let _ = mig(d, i, &["kill", j]);
    }
    let ckpt = took(done, ckpt_s);
    format!(
        "{spawn:>9} | {:>6.0} / {:>6.0} | {spawn_elections} | {ckpt:>9} | {:>6.0} / {:>6.0} | {ckpt_elections}",
        spawn_turns.0, spawn_turns.1, ckpt_turns.0, ckpt_turns.1
    )
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
    let load = under_load(d, steady, n);
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
        "| {n:>5} | {up_s:>10.2} | {rss:>16.1} | {master_cpu:>22.1} | {all_cpu:>24.1} | {load} | {failover:>24} | {stopped:>7} |"
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
        "| hosts | mig up (s) | master RSS (MiB) | master CPU at rest (%) | all daemons at rest (%) \
         | spawn 1024 (s) | longest turn (ms): master / any | elections \
         | checkpoint 256 MiB + 1 GiB (s) | longest turn (ms): master / any | elections \
         | all re-attached after kill (s) | lost |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for n in sizes {
        one(n, idle);
    }
}
