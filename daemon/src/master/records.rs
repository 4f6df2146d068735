//! What the master keeps per host, job and VP, and per checkpoint of a job.

use super::*;
use serde::{Deserialize, Serialize};

/// Stands for an instant that is not replicated (it means nothing on
/// another machine): `Master::import` sets every such field to its own `now`.
pub(super) fn not_replicated() -> Instant {
    Instant::now()
}

/// A host as the master knows it.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct HostRec {
    pub(super) facts: HostFacts,
    #[serde(skip, default = "not_replicated")]
    pub(super) last_seen: Instant,
    pub(super) alive: bool,
    pub(super) master: bool,
    /// Are its processors in the scheduler's pool (alive and offered)?
    pub(super) in_pool: bool,
    /// Its owner monitor's last report.
    pub(super) owner: Option<OwnerReport>,
    /// Memory available there at its last usage report (MiB).
    #[serde(default)]
    pub(super) free_memory_mb: Option<u64>,
    /// How busy its disks were at its last usage report (0..1).
    #[serde(default)]
    pub(super) io_busy: Option<f64>,
    /// When it was last granted a lease on its VPs (see `PeerMsg::LeaseAsk`).
    #[serde(skip)]
    pub(super) granted: Option<Instant>,
    /// Its connection was lost: it is taken for dead once its lease has
    /// surely lapsed (then, and why).
    #[serde(skip)]
    pub(super) lost: Option<(Instant, String)>,
}

/// Where a VP is in its life, as the master sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) enum VpState {
    /// Not placed: waiting for a processor.
    Waiting,
    /// Its host was told to start it.
    Starting,
    /// Its process runs (or is stopped by its host's owner or slicer).
    Running,
    /// Being checkpointed on its host and restarted on this one.
    Moving(String),
    /// Being started again from the job's checkpoint.
    Restoring,
    /// Checkpointed to its host's disk while the owner has it; no process.
    Parked,
    /// Ended for good.
    Exited,
}

impl VpState {
    /// May it be moved now by hand (`mig migrate`) or be part of a
    /// job checkpoint? Only with a process that runs where the master
    /// thinks it does.
    pub(super) fn can_migrate(&self) -> bool {
        *self == VpState::Running
    }

    /// May a move the scheduler wants begin now (a parked VP ships its
    /// image from disk)?
    pub(super) fn can_begin_move(&self) -> bool {
        matches!(self, VpState::Running | VpState::Parked)
    }

    /// Does it hold a processor of its host (for `mig hosts`)?
    pub(super) fn on_a_processor(&self) -> bool {
        matches!(self, VpState::Running | VpState::Starting)
    }

    /// Has it ended for good?
    pub(super) fn ended(&self) -> bool {
        *self == VpState::Exited
    }
}

/// A VP as the master knows it.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct VpRec {
    pub(super) tid: Tid,
    pub(super) program: String,
    pub(super) args: Vec<String>,
    pub(super) parent: Option<Tid>,
    pub(super) host: Option<String>,
    pub(super) pid: Option<u32>,
    pub(super) state: VpState,
    pub(super) exit: Option<ExitInfo>,
    /// Where the scheduler wants it, when a move there is still to be made:
    /// after the move under way, or after one that failed (with the number
    /// of failed attempts and when to try again).
    pub(super) wants: Option<Wanted>,
    /// Its program said it can be moved (see `VpMsg::Movable`).
    pub(super) movable: bool,
    /// It cannot be moved, but the scheduler was told it may be started
    /// again elsewhere (vacated: see `Master::release_vacated`).
    pub(super) released: bool,
    /// When its process first started (ms since the Unix epoch).
    pub(super) started_ms: Option<u64>,
    /// Its host holds it stopped (its job was suspended) until the
    /// scheduler places it again.
    pub(super) held: bool,
    /// CPU time (ms) its process has used, as its host last said (final
    /// once it has ended).
    pub(super) cpu_ms: Option<u64>,
}

impl VpRec {
    /// A new VP `tid` of `spec`'s program, spawned by `parent`, waiting for
    /// a processor.
    pub(super) fn waiting(tid: Tid, spec: &SpawnSpec, parent: Option<Tid>) -> VpRec {
        VpRec {
            tid,
            program: spec.program.clone(),
            args: spec.args.clone(),
            parent,
            host: None,
            pid: None,
            state: VpState::Waiting,
            exit: None,
            wants: None,
            movable: false,
            released: false,
            started_ms: None,
            held: false,
            cpu_ms: None,
        }
    }
}

/// A move the scheduler asked for that has not happened yet.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Wanted {
    pub(super) to: String,
    pub(super) failures: u32,
    #[serde(skip)]
    pub(super) retry_at: Option<Instant>,
}

/// A job as the master knows it.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct JobRec {
    pub(super) spec: SpawnSpec,
    pub(super) vps: BTreeMap<u32, VpRec>,
    pub(super) waiters: Vec<Requester>,
    pub(super) killed: bool,
    /// `mig kill` of the job waiting for every VP to end, with deadlines.
    #[serde(skip)]
    pub(super) kill_waiters: Vec<(Requester, Instant)>,
    pub(super) ckpt: Ckpt,
    /// Restarts from a checkpoint so far (see `Envelope::incarnation`).
    pub(super) incarnation: u32,
    /// The index the next VP spawned into the job gets (as the scheduler
    /// counts: never reused, even after a restart drops VPs).
    pub(super) next_vp: u32,
    /// The local user who started it (`None`: the virtual machine's own).
    pub(super) uid: Option<u32>,
    /// When it was submitted (ms since the Unix epoch).
    pub(super) submitted_ms: u64,
    /// Hosts its VPs have run on.
    pub(super) hosts: BTreeSet<String>,
    /// CPU time of its VPs' processes that have ended (each VP's last).
    pub(super) cpu_ms: u64,
    /// Suspended (`mig suspend`) and not resumed since.
    pub(super) suspended: bool,
}

impl JobRec {
    /// The job as `mig jobs` lists it: running, or ended at `ended` (ms
    /// since the Unix epoch) with a status.
    pub(super) fn info(&self, id: &str, ended: Option<(u64, i32)>) -> JobInfo {
        let state = match ended {
            None if self.suspended => "suspended",
            None => "running",
            Some(_) if self.killed => "killed",
            Some(_) => "exited",
        };
        JobInfo {
            job: id.to_string(),
            program: self.spec.program.clone(),
            args: self.spec.args.clone(),
            uid: self.uid,
            vps: self.vps.len() as u32,
            hosts: self.hosts.iter().cloned().collect(),
            state: state.into(),
            submitted_ms: self.submitted_ms,
            ended_ms: ended.map(|(t, _)| t),
            status: ended.map(|(_, s)| s),
            // Ended processes, and those running as their hosts last said.
            cpu_ms: self.cpu_ms
                + self
                    .vps
                    .values()
                    .filter(|v| !v.state.ended())
                    .filter_map(|v| v.cpu_ms)
                    .sum::<u64>(),
        }
    }
}

/// A job's consistent checkpoints.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct Ckpt {
    /// The one being taken.
    pub(super) round: Option<Round>,
    /// Complete generations, oldest first (the last two are kept).
    pub(super) good: Vec<Generation>,
    /// When the last one began.
    #[serde(skip)]
    pub(super) last: Option<Instant>,
    /// How long the last complete one took.
    pub(super) took: Option<Duration>,
    /// A restart waits for its images to be checked (see `Out::CheckImages`).
    pub(super) restart: Option<PendingRestart>,
}

/// A restart asked for whose images are being checked: nothing is stopped
/// until an intact copy of every image of one generation is found.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct PendingRestart {
    /// Who asked (`mig restart`); none when a host died under the job.
    pub(super) from: Vec<Requester>,
    /// A host died under the job: if no generation is intact, the job
    /// cannot go on consistently and ends.
    pub(super) lost: bool,
}

/// A complete consistent checkpoint of a job.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Generation {
    pub(super) id: u64,
    /// The VPs (indices in the job) it holds: those that existed when it
    /// was taken. VPs spawned after it are not in it.
    pub(super) vps: BTreeSet<u32>,
    /// Where the other copy of each image is (the master keeps one).
    pub(super) replicas: BTreeMap<Tid, String>,
    /// The master that kept the first copies (another host, once a new
    /// master has taken over).
    pub(super) kept_by: String,
}

/// A checkpoint being taken.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Round {
    pub(super) id: u64,
    /// The VPs it covers (all the job had when it began).
    pub(super) members: BTreeSet<Tid>,
    #[serde(skip, default = "not_replicated")]
    pub(super) started: Instant,
    /// VPs stopped, with the last sequence number each sent to each peer.
    pub(super) paused: HashMap<Tid, Vec<(Tid, u64)>>,
    /// VPs whose image arrived, and its size.
    pub(super) taken: HashMap<Tid, usize>,
    /// Where the other copy of each image went.
    pub(super) replicas: BTreeMap<Tid, String>,
    pub(super) waiters: Vec<Requester>,
}
