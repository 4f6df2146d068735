//! What a replay measured: per-job outcomes summed up per policy.

use serde::Serialize;

use super::Outcome;

/// Bounded slowdown threshold, seconds.
pub const BSLD_TAU: f64 = 10.0;

/// The summary of one policy's replay.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Metrics {
    /// Jobs completed.
    pub jobs: usize,
    /// Mean of end − submit.
    pub mean_response_time: f64,
    /// Median of end − submit.
    pub median_response_time: f64,
    /// Mean of max(1, response / max(run, 10 s)).
    pub mean_bounded_slowdown: f64,
    /// Median of the same.
    pub median_bounded_slowdown: f64,
    /// Its 95th percentile (nearest rank).
    pub p95_bounded_slowdown: f64,
    /// Work done / (total capacity × makespan).
    pub utilization: f64,
    /// Last end − first submit.
    pub makespan: f64,
    /// VP migrations.
    pub migrations: u64,
    /// Time-weighted mean slots per round (1 without time sharing).
    pub mean_slots: f64,
    /// Most slots in a round.
    pub max_slots: usize,
    /// Normalized performance η (seeds 003/004): mean over jobs of the
    /// dedicated run time over the response time, in (0, 1].
    pub eta: f64,
}

/// Sum up `outcomes` of jobs whose dedicated run times are `runs`.
pub fn summarise(
    outcomes: &[Outcome],
    runs: &[f64],
    capacity: f64,
    migrations: u64,
    slots: (f64, usize),
) -> Metrics {
    let n = outcomes.len();
    if n == 0 {
        return Metrics {
            jobs: 0,
            mean_response_time: 0.0,
            median_response_time: 0.0,
            mean_bounded_slowdown: 0.0,
            median_bounded_slowdown: 0.0,
            p95_bounded_slowdown: 0.0,
            utilization: 0.0,
            makespan: 0.0,
            migrations,
            mean_slots: slots.0,
            max_slots: slots.1,
            eta: 0.0,
        };
    }
    let mut resp: Vec<f64> = outcomes.iter().map(|o| o.end - o.submit).collect();
    let mut slowdowns: Vec<f64> = outcomes
        .iter()
        .zip(runs)
        .map(|(o, &run)| ((o.end - o.submit) / run.max(BSLD_TAU)).max(1.0))
        .collect();
    let bsld = slowdowns.iter().sum::<f64>() / n as f64;
    slowdowns.sort_by(f64::total_cmp);
    let eta: f64 = outcomes
        .iter()
        .zip(runs)
        .map(|(o, &run)| {
            let r = o.end - o.submit;
            if r > 0.0 {
                (run / r).min(1.0)
            } else {
                1.0
            }
        })
        .sum::<f64>()
        / n as f64;
    let first = outcomes
        .iter()
        .map(|o| o.submit)
        .fold(f64::INFINITY, f64::min);
    let last = outcomes.iter().map(|o| o.end).fold(0.0, f64::max);
    let makespan = (last - first).max(0.0);
    let work: f64 = outcomes
        .iter()
        .zip(runs)
        .map(|(o, &run)| run * f64::from(o.procs))
        .sum();
    let mean = resp.iter().sum::<f64>() / n as f64;
    resp.sort_by(f64::total_cmp);
    Metrics {
        jobs: n,
        mean_response_time: mean,
        median_response_time: median(&resp),
        mean_bounded_slowdown: bsld,
        median_bounded_slowdown: median(&slowdowns),
        p95_bounded_slowdown: slowdowns[(n * 95).div_ceil(100).clamp(1, n) - 1],
        utilization: if makespan > 0.0 {
            work / (capacity * makespan)
        } else {
            0.0
        },
        makespan,
        migrations,
        mean_slots: slots.0,
        max_slots: slots.1,
        eta,
    }
}

/// The median of sorted, non-empty `v`.
fn median(v: &[f64]) -> f64 {
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A digest of a replay's outcomes (FNV-1a, 64 bits, in hex): every job's
/// id, submit, start and end time (their exact bits), processors and
/// moves, in the order the replay gave them. Two replays agree on it only
/// when they agree on every job.
pub fn digest(outcomes: &[Outcome]) -> String {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(PRIME);
        }
    };
    for o in outcomes {
        eat(o.id.as_bytes());
        eat(&[0]);
        for t in [o.submit, o.start, o.end] {
            eat(&t.to_bits().to_le_bytes());
        }
        eat(&o.procs.to_le_bytes());
        eat(&o.migrations.to_le_bytes());
    }
    format!("{h:016x}")
}
