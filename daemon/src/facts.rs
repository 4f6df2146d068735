//! Facts about this host: architecture, cores, memory, and a short benchmark
//! of one processor's speed.

use std::time::{Duration, Instant};

/// This machine's architecture, e.g. `x86_64-linux`.
pub fn arch() -> String {
    format!("{}-{}", std::env::consts::ARCH, std::env::consts::OS)
}

/// Cores available to this process.
pub fn cores() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

/// The system host name (`localhost` if unknown).
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .map(|h| h.split('.').next().unwrap_or("localhost").to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// Total memory in MiB (0 if unknown).
pub fn memory_mb() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb / 1024)
}

/// Relative speed of one processor from a ~50 ms integer and floating-point
/// loop: 1.0 is about one core of a 2020s desktop. Unit-free on purpose: the
/// scheduler only uses ratios.
pub fn benchmark(budget: Duration) -> f64 {
    const REFERENCE_ITERS_PER_SEC: f64 = 400e6;
    let start = Instant::now();
    let mut iters: u64 = 0;
    let mut x: u64 = 0x9E37_79B9;
    let mut f = 1.000_001f64;
    while start.elapsed() < budget {
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            f = f * 1.000_000_1 + (x & 1) as f64 * 1e-9;
        }
        iters += 100_000;
    }
    std::hint::black_box((x, f));
    let rate = iters as f64 / start.elapsed().as_secs_f64();
    (rate / REFERENCE_ITERS_PER_SEC).max(0.01)
}
