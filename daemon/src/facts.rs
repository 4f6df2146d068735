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

/// Memory available for new work now (MiB; `MemAvailable`), if known.
pub fn free_memory_mb() -> Option<u64> {
    let t = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb = t
        .lines()
        .find(|l| l.starts_with("MemAvailable:"))?
        .split_whitespace()
        .nth(1)?
        .parse::<u64>()
        .ok()?;
    Some(kb / 1024)
}

/// How busy this host's disks are: the busiest disk's share of wall time
/// with I/O in flight (`io_ticks` in `/proc/diskstats`) between readings.
#[derive(Debug, Default)]
pub struct IoMeter {
    last: Option<(Instant, std::collections::HashMap<String, u64>)>,
}

impl IoMeter {
    /// The share (0..1) since the last reading; `None` the first time or
    /// where `/proc/diskstats` cannot be read.
    pub fn read(&mut self) -> Option<f64> {
        let now = Instant::now();
        let ticks = std::fs::read_to_string("/proc/diskstats")
            .ok()
            .map(|t| io_ticks(&t))?;
        let (then, before) = self.last.replace((now, ticks.clone()))?;
        let ms = now.duration_since(then).as_secs_f64() * 1000.0;
        if ms <= 0.0 {
            return None;
        }
        let busiest = ticks
            .iter()
            .filter_map(|(d, &t)| Some(t.saturating_sub(*before.get(d)?)))
            .max()
            .unwrap_or(0);
        Some((busiest as f64 / ms).clamp(0.0, 1.0))
    }
}

/// Each device's `io_ticks` (ms with I/O in flight) from `/proc/diskstats`.
fn io_ticks(text: &str) -> std::collections::HashMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((f.get(2)?.to_string(), f.get(12)?.parse().ok()?))
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_ticks_are_the_tenth_figure_after_the_name_and_bad_lines_are_skipped() {
        let text = "   8       0 sda 10 0 80 5 20 0 160 9 0 1234 14 0 0 0 0 0 0\n\
                    garbage\n\
                    7 0 loop0 0 0 0 0 0 0 0 0 0 x 0\n";
        let t = io_ticks(text);
        assert_eq!(t.get("sda"), Some(&1234));
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn the_meter_answers_a_share_from_its_second_reading_on() {
        let mut m = IoMeter::default();
        let first = m.read();
        std::thread::sleep(Duration::from_millis(20));
        if std::path::Path::new("/proc/diskstats").exists() {
            assert_eq!(first, None);
            let share = m.read().expect("a second reading");
            assert!((0.0..=1.0).contains(&share));
        }
    }

    #[test]
    fn free_memory_is_at_most_all_of_it() {
        if let (Some(free), total) = (free_memory_mb(), memory_mb()) {
            assert!(total > 0 && free <= total, "{free} of {total}");
        }
    }
}
