//! The trace-driven simulator: replays a workload through scheduling
//! policies with a virtual clock and compares them.
//!
//! * `swf` — reading SWF traces and the pyss test vectors;
//! * `batch` — FCFS and EASY backfilling (space sharing, no time slicing);
//! * `matrix` — `gang-firstfit` and `gang-buddy` on an Ousterhout matrix;
//! * `gang` — `mig`, `mtat` and `mtat+repack`: the embedded scheduler itself;
//! * `metrics` — response time, bounded slowdown, utilisation, η;
//! * `owners` — owners taking processors back and leaving them;
//! * `roc` — seed 003's load-balancing experiments, Tables 2-4 (no trace:
//!   tasks that spawn tasks on 16 PEs), Rate-of-Change with each PE's own
//!   tables and interval and messages that take the network's delay,
//!   against sender-initiated diffusion;
//! * `rommel` — seed 002's experiment: five processor-sharing sites,
//!   simple programs, clusters and distributed groups, bidding against no
//!   balancing and shortest-queue-first;
//! * `nres` — seed 004's experiments: N-resource nodes, bursts of jobs,
//!   status requests that take the links' latency, fewest-choices-first
//!   mapping at `Time_IQ`, eta against capacity and latency;
//! * `tasks` — `roc`, `nres` and `bidding` on a trace: jobs as bags of
//!   tasks on processors, placed and moved by seeds 002-004;
//! * `rng` — the seeded generator they share.
//!
//! Pure: no files, no clock; the CLI reads traces and prints results.

pub mod batch;
pub mod gang;
pub mod matrix;
pub mod metrics;
pub mod nres;
pub mod owners;
pub mod rng;
pub mod roc;
pub mod rommel;
pub mod swf;
pub mod tasks;

use std::sync::atomic::AtomicUsize;

use serde::Serialize;

/// The machine at one instant of a replay (taken after every event).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Sample {
    /// Virtual time.
    pub t: f64,
    /// Fraction of the machine's capacity doing work.
    pub utilization: f64,
    /// Slots per round.
    pub slots: usize,
}

/// What one policy's replay produced.
#[derive(Debug, Clone)]
pub struct Replay {
    /// Per job.
    pub outcomes: Vec<Outcome>,
    /// The summary.
    pub metrics: metrics::Metrics,
    /// Utilisation and slots over time.
    pub timeline: Vec<Sample>,
}

/// One job's fate in a replay.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    /// Job id as in the trace.
    pub id: String,
    /// Submit time.
    pub submit: f64,
    /// First time it ran.
    pub start: f64,
    /// Completion time.
    pub end: f64,
    /// Processors (VPs).
    pub procs: u32,
    /// Times one of its VPs moved.
    pub migrations: u32,
}

/// The next instant of an event-driven replay: the earlier of the next
/// completion and the next arrival, or `None` when neither is left.
pub(crate) fn next_instant(finish: Option<f64>, arrival: Option<f64>) -> Option<f64> {
    match (finish, arrival) {
        (None, None) => None,
        (Some(f), None) => Some(f),
        (None, Some(a)) => Some(a),
        (Some(f), Some(a)) => Some(f.min(a)),
    }
}

/// Slots per round over a replay: their time-weighted mean while jobs ran,
/// and the most seen.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SlotTime {
    /// Slots times seconds while jobs ran.
    weighted: f64,
    /// Those seconds.
    span: f64,
    /// The most slots seen.
    max: usize,
}

impl SlotTime {
    /// `dt` seconds passed with `slots` slots per round (`busy`: jobs ran).
    pub(crate) fn passed(&mut self, slots: usize, dt: f64, busy: bool) {
        if busy {
            self.weighted += slots as f64 * dt;
            self.span += dt;
        }
    }

    /// `slots` slots per round now.
    pub(crate) fn seen(&mut self, slots: usize) {
        self.max = self.max.max(slots);
    }

    /// (time-weighted mean, most).
    pub(crate) fn summary(&self) -> (f64, usize) {
        let mean = if self.span > 0.0 {
            self.weighted / self.span
        } else {
            0.0
        };
        (mean, self.max)
    }
}

/// The next instant a replay stops at: the next completion or arrival, or
/// the next owner change (`owner`: none once owners no longer matter).
pub(crate) fn step_to(
    finish: Option<f64>,
    arrival: Option<f64>,
    owner: Option<f64>,
) -> Option<f64> {
    next_instant(finish, arrival)
        .map(|t| owner.map_or(t, |o| t.min(o)))
        .or(owner)
}

/// Is a job with `remaining` work of `run` done at `now`, when what is
/// left would take `time_left` more? Done when no work is left, or when
/// what is left can no longer move the clock (`now + rest == now` in
/// floating point).
pub(crate) fn finished(remaining: f64, run: f64, now: f64, time_left: f64) -> bool {
    remaining <= 1e-9 * run.max(1.0) || now + time_left <= now
}

/// When the last job is submitted: owners act until then (see
/// `owners::Model::changes`).
pub(crate) fn last_submit(jobs: &[swf::Job]) -> f64 {
    jobs.iter()
        .map(|j| j.submit)
        .fold(f64::NEG_INFINITY, f64::max)
}

/// The offered load of `jobs` on `procs` processors: their work
/// (run time times processors) over the machine's capacity between the
/// first and the last submission, as the Parallel Workloads Archive
/// computes it. `None` when there is no such span (fewer than two distinct
/// submit times) or no processor.
pub fn offered_load(jobs: &[swf::Job], procs: u32) -> Option<f64> {
    let first = jobs.iter().map(|j| j.submit).fold(f64::INFINITY, f64::min);
    let span = last_submit(jobs) - first;
    let work: f64 = jobs.iter().map(|j| j.run * f64::from(j.procs)).sum();
    (span > 0.0 && procs > 0).then(|| work / (f64::from(procs) * span))
}

/// Multiply every time between arrivals by `factor` (below 1: a busier
/// machine), the first arrival kept where it is.
pub fn spread_arrivals(jobs: &mut [swf::Job], factor: f64) {
    if let Some(first) = jobs.first().map(|j| j.submit) {
        for j in jobs {
            j.submit = first + (j.submit - first) * factor;
        }
    }
}

/// The policies `replay` knows.
pub const POLICIES: &[&str] = &[
    "fcfs",
    "easy",
    "gang-firstfit",
    "gang-buddy",
    "mtat",
    "mtat+repack",
    "mig",
    "roc",
    "nres",
    "bidding",
];

/// Slots per round the time-sharing policies allow by default (the
/// multiprogramming level; Slurm's gang scheduler is capped the same way).
pub const DEFAULT_MAX_SLOTS: usize = 8;

/// The machine beyond its capacities, and what happens to it besides
/// running jobs.
#[derive(Debug, Clone)]
pub struct Conditions {
    /// Architecture of each processor (an index into `arch_names`); empty
    /// when all share one. A job runs only on its own (`Job::arch`).
    pub arches: Vec<u32>,
    /// Architecture names (`any` when empty).
    pub arch_names: Vec<String>,
    /// Owners taking processors back. `mtat` and `mtat+repack` move work
    /// off the processor; the others stop the jobs on it until it is left.
    pub owners: owners::Model,
    /// Seconds a job stalls each time one of its VPs moves.
    pub migration_cost: f64,
    /// Seconds more per MB of the moving VP's state (its job's memory per
    /// processor in the trace).
    pub migration_cost_per_mb: f64,
    /// The gang quantum, seconds: the length of a slot.
    pub quantum: f64,
    /// Seconds every slot switch costs (stopping one slot, starting the next).
    pub switch_cost: f64,
    /// Memory of each processor's node (MB): the VPs resident on a node,
    /// in every slot, need at most this together, each its job's
    /// `Job::need_kb`. `None`: memory is no limit.
    pub node_memory_mb: Option<u64>,
}

impl Default for Conditions {
    fn default() -> Self {
        Conditions {
            arches: Vec::new(),
            arch_names: Vec::new(),
            owners: owners::Model::None,
            migration_cost: 0.0,
            migration_cost_per_mb: 0.0,
            quantum: DEFAULT_QUANTUM,
            switch_cost: 0.0,
            node_memory_mb: None,
        }
    }
}

impl Conditions {
    /// The architecture of processor `p`.
    pub fn arch_of(&self, p: usize) -> u32 {
        self.arches.get(p).copied().unwrap_or(0)
    }

    /// The name of architecture `a`.
    pub fn arch_name(&self, a: u32) -> &str {
        self.arch_names
            .get(a as usize)
            .map_or("any", String::as_str)
    }

    /// Processors of architecture `a` among `n`.
    pub fn pool_size(&self, n: usize, a: u32) -> usize {
        (0..n).filter(|&p| self.arch_of(p) == a).count()
    }

    /// The share of a round that does work with `slots` slots: a round of
    /// `slots` quanta spends `slots` switches, none with one slot.
    pub fn sharing_efficiency(&self, slots: usize) -> f64 {
        if slots > 1 && self.quantum > 0.0 {
            self.quantum / (self.quantum + self.switch_cost)
        } else {
            1.0
        }
    }

    /// The memory (MB) each VP of `job` holds on its node, where nodes
    /// have a limit and the job states its memory.
    pub fn need_mb(&self, job: &swf::Job) -> Option<u64> {
        self.node_memory_mb?;
        (job.need_kb > 0.0).then(|| (job.need_kb / 1024.0).ceil() as u64)
    }

    /// Can a VP of `job` fit on a node at all?
    pub fn fits_a_node(&self, job: &swf::Job) -> bool {
        match (self.need_mb(job), self.node_memory_mb) {
            (Some(need), Some(node)) => need <= node,
            _ => true,
        }
    }

    /// Seconds a job of `job` stalls when one of its VPs moves.
    pub fn move_cost(&self, job: &swf::Job) -> f64 {
        self.migration_cost + self.migration_cost_per_mb * job.memory_kb / 1024.0
    }
}

/// The gang quantum the simulator assumes unless told (migd's default).
pub const DEFAULT_QUANTUM: f64 = 0.1;

/// Seconds a slot switch costs, as `mig stats` measured it on the
/// development machine (2 cores; `mig up -n 4`, two jobs of 4 CPU-bound
/// VPs in 2 slots, quantum 100 ms, 20 s: 876 switches, 0.012% of the time
/// lost to switching, 12 µs a switch). `mig sim`'s default.
pub const MEASURED_SWITCH_COST: f64 = 12e-6;

/// Seconds a VP's move stalls its job whatever its state, as the migrate
/// benchmark measured it there (`mig migrate` of a 0 MiB state, restored
/// on the target: 1.7 ms, median of 11). `mig sim`'s default.
pub const MEASURED_MIGRATION_COST: f64 = 1.7e-3;

/// Seconds more per MB of a moving VP's state, from the same benchmark
/// (256 MiB moved in 185.1 ms, median of 11: (185.1 - 1.7) / 256 ms a
/// MB, 0.7 ms). `mig sim`'s default.
pub const MEASURED_MIGRATION_COST_PER_MB: f64 = 0.7e-3;

/// Replay `jobs` under `policy` on processors of `capacities`, time sharing
/// with at most `max_slots` slots per round; `None` for an unknown policy.
/// `done` counts completed jobs as the replay goes (for a progress display).
pub fn replay(
    jobs: &[swf::Job],
    capacities: &[f64],
    policy: &str,
    max_slots: usize,
    done: &AtomicUsize,
) -> Option<Replay> {
    replay_with(
        jobs,
        capacities,
        policy,
        max_slots,
        &Conditions::default(),
        done,
    )
}

/// `replay` under `cond`.
pub fn replay_with(
    jobs: &[swf::Job],
    capacities: &[f64],
    policy: &str,
    max_slots: usize,
    cond: &Conditions,
    done: &AtomicUsize,
) -> Option<Replay> {
    let runs = |o: &[Outcome]| -> Vec<f64> {
        let by_id: std::collections::HashMap<&str, f64> =
            jobs.iter().map(|j| (j.id.as_str(), j.run)).collect();
        o.iter()
            .map(|x| by_id.get(x.id.as_str()).copied().unwrap_or(0.0))
            .collect()
    };
    let capacity: f64 = capacities.iter().sum();
    let procs = capacities.len() as u32;
    let (outcomes, migrations, slots, timeline) = match policy {
        "fcfs" | "easy" => {
            let (o, timeline) = batch::run(jobs, procs, policy == "easy", cond, done);
            (o, 0, (1.0, 1), timeline)
        }
        "gang-firstfit" | "gang-buddy" => {
            let g = matrix::run(jobs, procs, policy == "gang-buddy", max_slots, cond, done);
            (g.outcomes, g.migrations, g.slots, g.timeline)
        }
        "roc" | "nres" | "bidding" => {
            let rule = match policy {
                "roc" => tasks::Rule::Roc,
                "nres" => tasks::Rule::Nres,
                _ => tasks::Rule::Bidding,
            };
            let (o, moves, timeline) = tasks::run_with(jobs, capacities, cond, done, rule);
            (o, moves, (1.0, 1), timeline)
        }
        name => {
            let placement = crate::sched::Placement::by_name(name)?;
            let g = gang::run(jobs, capacities, placement, max_slots, cond, done);
            (g.outcomes, g.migrations, g.slots, g.timeline)
        }
    };
    let metrics = metrics::summarise(&outcomes, &runs(&outcomes), capacity, migrations, slots);
    Some(Replay {
        outcomes,
        metrics,
        timeline,
    })
}

#[cfg(test)]
mod tests;
