//! What the scheduler is told (`Event`), what it answers (`Action`), and
//! the input it refuses (`SchedError`).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Something the scheduler is told. As JSON (`mig sched replay`), an
/// object tagged by `"event"`, unknown fields refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case", deny_unknown_fields)]
pub enum Event {
    /// A processor joins the pool (`new_processor`).
    NewProcessor {
        /// Unique processor id, e.g. `h1/0`.
        id: String,
        /// Owning host (in JSON it may be left out: the id's part before
        /// `/`, or the whole id).
        #[serde(default)]
        host: String,
        /// Architecture.
        arch: String,
        /// Capacity relative to the slowest processor; positive and finite.
        capacity: f64,
        /// Memory its host offers (MB); unknown: as much as any VP asks.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        memory_mb: Option<u64>,
    },
    /// A processor leaves the pool (`processor_exit`): its owner is back or its host died.
    ProcessorExit {
        /// The processor.
        id: String,
    },
    /// A new job with a number of VPs per architecture.
    Submit {
        /// Unique job id.
        job: String,
        /// VPs per architecture.
        vps: BTreeMap<String, u32>,
        /// Memory each VP needs (MB): never placed on a processor whose
        /// host offers less.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        memory_mb: Option<u64>,
        /// The processors a placement policy chose for it (seeds 002-004):
        /// its VPs go only there, and once started are never moved by the
        /// scheduler, while all of them are in the pool (one leaving frees
        /// the job to go anywhere); a VP moved by hand adds its new
        /// processor. Unknown ids are ignored; a choice that leaves an
        /// architecture of the job without a processor is ignored whole.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        only: Option<Vec<String>>,
        /// How long it runs, as batch systems ask users to say: seconds
        /// of work of one VP alone on a processor of capacity 1. With
        /// backfilling, a waiting job passes the oldest waiting one only
        /// where it does not delay the start that job is promised, and the
        /// promise is projected from these estimates (a job without one
        /// may run for ever). Non-negative and finite.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        estimate: Option<f64>,
    },
    /// A running job creates one more VP (`new_VP`); it gets the next index.
    NewVp {
        /// The job.
        job: String,
        /// The new VP's architecture.
        arch: String,
        /// A host it should run on (PVM's `PvmTaskHost`): one of that
        /// host's processors among those the job may take, if any has room
        /// in the job's slots; else it is placed as any new VP.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        host: Option<String>,
    },
    /// A VP that ended comes back under its own index: its job restarts
    /// from a checkpoint taken while it ran. Placed as `new_VP` places one.
    VpBack {
        /// The job.
        job: String,
        /// The VP's index in its job (one it had and no longer has).
        vp: u32,
        /// Its architecture.
        arch: String,
    },
    /// A VP was moved by hand to `host` (`mig migrate`): its place in the
    /// map follows it, to a processor of that host that is free in the
    /// job's slots, else one the job already holds there.
    VpMoved {
        /// The job.
        job: String,
        /// The VP's index in its job.
        vp: u32,
        /// Where it runs now.
        host: String,
    },
    /// A VP's process says it can be moved (it keeps its state through
    /// libmig), or may be started again elsewhere from the beginning (its
    /// job is restartable and its host's owner stayed long enough). Until
    /// then, with `SchedConfig::pin_new_vps`, it is never migrated: it stays
    /// on its processor, or is held while that processor is out of the pool
    /// and goes back to it when it returns.
    VpMovable {
        /// The job.
        job: String,
        /// The VP's index in its job.
        vp: u32,
    },
    /// A VP ended (`VP_exit`).
    VpExit {
        /// The job.
        job: String,
        /// The VP's index in its job.
        vp: u32,
    },
    /// A whole job ended or was killed.
    JobExit {
        /// The job.
        job: String,
    },
    /// A job is suspended (`mig suspend`): it leaves the map, its VPs are
    /// held where they are (their cells free for others) until `Resume`.
    Suspend {
        /// The job.
        job: String,
    },
    /// A suspended job may run again: it is placed as a waiting job is.
    Resume {
        /// The job.
        job: String,
    },
}

/// Something the daemons must do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Start VP `vp` of `job` on `processor` of `host` (from its last
    /// checkpoint when `restore`).
    Start {
        /// Job id.
        job: Arc<str>,
        /// VP index.
        vp: u32,
        /// Architecture of the program to run.
        arch: Arc<str>,
        /// Target processor.
        processor: Arc<str>,
        /// Target host.
        host: Arc<str>,
        /// Start from the VP's checkpoint rather than fresh.
        restore: bool,
    },
    /// Move a VP (checkpoint on `from`, restart on `to`).
    Migrate {
        /// Job id.
        job: Arc<str>,
        /// VP index.
        vp: u32,
        /// Processor it is on.
        from: Arc<str>,
        /// Its host.
        from_host: Arc<str>,
        /// Processor it moves to.
        to: Arc<str>,
        /// That host.
        to_host: Arc<str>,
    },
    /// No processor of the VP's architecture can take it: keep it stopped
    /// (or checkpointed) where it is until one can. `processor` is where its
    /// process is, if it was started.
    Hold {
        /// Job id.
        job: Arc<str>,
        /// VP index.
        vp: u32,
        /// Where its process is, if it was started.
        processor: Option<Arc<str>>,
        /// That host.
        host: Option<Arc<str>>,
    },
    /// Kill a VP (its job was killed).
    Kill {
        /// Job id.
        job: Arc<str>,
        /// VP index.
        vp: u32,
        /// Where its process is.
        processor: Arc<str>,
        /// That host.
        host: Arc<str>,
    },
    /// The slot tables of these hosts changed (of every host when `all`,
    /// as when the round's length changed): fetch each with
    /// `Scheduler::host_table` and install it at the next round boundary.
    /// `slots` is the new round length; `generation` orders tables.
    SlotTables {
        /// Table generation (increases with every change).
        generation: u64,
        /// Slots per round.
        slots: usize,
        /// Every host's table changed.
        all: bool,
        /// Hosts whose table changed (with `all`: hosts that left the pool,
        /// which `host_table` no longer lists).
        hosts: Vec<String>,
    },
}

impl Action {
    /// Its kind, as its `action` tag in JSON.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::Start { .. } => "start",
            Action::Migrate { .. } => "migrate",
            Action::Hold { .. } => "hold",
            Action::Kill { .. } => "kill",
            Action::SlotTables { .. } => "slot_tables",
        }
    }
}

/// Input the scheduler refuses; the state is unchanged.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum SchedError {
    /// A processor id that is already in the pool.
    #[error("processor {0:?} is already in the pool")]
    DuplicateProcessor(String),
    /// A processor id the pool does not have.
    #[error("unknown processor {0:?}")]
    UnknownProcessor(String),
    /// Capacity zero, negative, infinite or NaN.
    #[error("processor {id:?}: capacity must be a positive finite number, got {capacity}")]
    BadCapacity {
        /// Processor id.
        id: String,
        /// The value given.
        capacity: f64,
    },
    /// An empty id or architecture name.
    #[error("{0} must not be empty")]
    Empty(&'static str),
    /// A job id that already exists.
    #[error("job {0:?} already exists")]
    DuplicateJob(String),
    /// A job id the scheduler does not have.
    #[error("unknown job {0:?}")]
    UnknownJob(String),
    /// A VP index the job does not have.
    #[error("job {job:?} has no VP {vp}")]
    UnknownVp {
        /// Job id.
        job: String,
        /// VP index.
        vp: u32,
    },
    /// A VP said to come back that never left, or never was.
    #[error("VP {vp} of job {job:?} cannot come back: it is still there or never was")]
    NotBack {
        /// Job id.
        job: String,
        /// VP index.
        vp: u32,
    },
    /// No processor of a host can take a VP moved there by hand.
    #[error("no processor of {host} of the VP's architecture is free in job {job:?}'s slots")]
    NoRoom {
        /// Job id.
        job: String,
        /// The host.
        host: String,
    },
    /// A submission without any VP.
    #[error("job {0:?} has no VPs")]
    NoVps(String),
    /// `Suspend` of a suspended job, or `Resume` of one that is not.
    #[error("job {job:?} is {}", if *.suspended { "already suspended" } else { "not suspended" })]
    Suspension {
        /// Job id.
        job: String,
        /// Whether it is suspended.
        suspended: bool,
    },
    /// More VPs than one job may have.
    #[error("job {0:?} would have more than {MAX_VPS} VPs")]
    TooManyVps(String),
    /// A run-time estimate that is negative, infinite or NaN.
    #[error(
        "job {job:?}: estimate must be a non-negative finite number of seconds, got {estimate}"
    )]
    BadEstimate {
        /// Job id.
        job: String,
        /// The value given.
        estimate: f64,
    },
}

/// Most VPs one job may have (bounds the scheduler's memory per job).
pub const MAX_VPS: u64 = 1 << 20;
