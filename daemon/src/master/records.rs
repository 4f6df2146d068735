//! What the master keeps per host and job, and per checkpoint of a job (per
//! VP: `vp`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use libmig::msg::{HostFacts, JobInfo, OwnerReport, SpawnSpec, Tid};
use serde::{Deserialize, Serialize};

use super::vp::VpRec;
use super::Requester;

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
    /// Space free in its state directory at its last report (MiB).
    #[serde(default)]
    pub(super) state_free_mb: Option<u64>,
    /// Its state directory is full (an image could not be written there).
    #[serde(default)]
    pub(super) state_full: bool,
    /// When it was last granted a lease on its VPs (see `ToMaster::LeaseAsk`).
    #[serde(skip)]
    pub(super) granted: Option<Instant>,
    /// Its connection was lost: it is taken for dead once its lease has
    /// surely lapsed (then, and why).
    #[serde(skip)]
    pub(super) lost: Option<(Instant, String)>,
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
    /// Hosts that could not take in a VP of it moved there (its program
    /// would not start there, say), with why: its VPs are moved there
    /// again only by hand (`mig migrate`). Not replicated (a new master
    /// may try such a host once more, and hear it refuse again).
    #[serde(skip)]
    pub(super) refused_by: BTreeMap<String, String>,
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
                    .filter(|v| !v.state().ended())
                    .filter_map(|v| v.cpu_ms)
                    .sum::<u64>(),
        }
    }
}

/// A job's consistent checkpoints.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct Ckpt {
    /// The one being taken: its VPs stopped and writing their images, then
    /// (they go on) its images copied until each has two copies.
    pub(super) round: Option<Round>,
    /// Complete generations, oldest first (the last two are kept); where
    /// each image's copies are is kept up to date as hosts die (and new
    /// copies are made).
    pub(super) good: Vec<Generation>,
    /// When the last one began.
    #[serde(skip)]
    pub(super) last: Option<Instant>,
    /// How long the last one held its job (its VPs stopped from its start
    /// until they went on; a round given up while they waited counts
    /// the wait).
    pub(super) took: Option<Duration>,
    /// A restart waits for its images to be checked (see `Hunt`).
    pub(super) restart: Option<PendingRestart>,
    /// The VPs being restored, each from which generation's copy on which
    /// host (not replicated: a new master restores them again).
    #[serde(skip)]
    pub(super) restoring_from: BTreeMap<Tid, (u64, String)>,
    /// Restores of it in a row whose image did not reach its host.
    #[serde(skip)]
    pub(super) restore_failures: u32,
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
    /// The search for its images (not replicated: a new master begins it
    /// again).
    #[serde(skip)]
    pub(super) hunt: Option<Hunt>,
}

/// Looking for an intact copy of every image of one of a job's
/// generations, newest first: each image's holders are asked in turn to
/// read their copy through (`ToHost::CheckImage`).
#[derive(Debug)]
pub(super) struct Hunt {
    /// Generations still to try, the one being tried first: its id, and
    /// per image the live hosts that hold a copy.
    pub(super) gens: std::collections::VecDeque<(u64, BTreeMap<Tid, Vec<String>>)>,
    /// Images of the generation tried found intact, and where.
    pub(super) have: BTreeMap<Tid, String>,
    /// Images of it asked of a holder, and which.
    pub(super) asked: BTreeMap<Tid, String>,
    /// When the holders asked must have answered.
    pub(super) deadline: Instant,
    /// What was missing, for the answer.
    pub(super) missing: Vec<String>,
    /// Only these VPs are restored (lost with their host, in a job whose
    /// VPs are independent: the others go on); none: the whole job.
    pub(super) only: Option<BTreeSet<u32>>,
}

/// Where a job checkpoint's image is kept, and what it is.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct ImageRec {
    /// Its size and checksum, as its first holder said.
    pub(super) size: u64,
    pub(super) crc: u32,
    /// The hosts that keep a checked, durable copy.
    pub(super) holders: BTreeSet<String>,
    /// A copy on its way: from, to, since when (not replicated: a new
    /// master orders copies again).
    #[serde(skip)]
    pub(super) copying: Option<(String, String, Instant)>,
    /// Hosts that could not keep a copy, and why: not asked again.
    #[serde(skip)]
    pub(super) refused: BTreeMap<String, String>,
    /// It was said once in the log that no host can keep another copy.
    #[serde(skip)]
    pub(super) short_said: bool,
}

/// A complete consistent checkpoint of a job.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Generation {
    pub(super) id: u64,
    /// The VPs (indices in the job) it holds: those that existed when it
    /// was taken. VPs spawned after it are not in it.
    pub(super) vps: BTreeSet<u32>,
    /// Each VP's image, and where its copies are.
    pub(super) images: BTreeMap<Tid, ImageRec>,
}

/// A checkpoint being taken.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Round {
    pub(super) id: u64,
    /// The VPs it covers (all the job had when it began).
    pub(super) members: BTreeSet<Tid>,
    #[serde(skip, default = "not_replicated")]
    pub(super) started: Instant,
    /// When an image last got a copy (the copies are given up if none
    /// comes for long).
    #[serde(skip, default = "not_replicated")]
    pub(super) progress: Instant,
    /// VPs stopped, with the last sequence number each sent to each peer.
    pub(super) paused: HashMap<Tid, Vec<(Tid, u64)>>,
    /// VPs that wrote their image.
    pub(super) taken: BTreeSet<Tid>,
    /// The VPs were told to go on (every image written): only copies are
    /// still being made.
    pub(super) resumed: bool,
    /// Each image kept so far, and where its copies are.
    pub(super) images: BTreeMap<Tid, ImageRec>,
    pub(super) waiters: Vec<Requester>,
    /// Moves asked by hand (`mig migrate`: who asked, the VP, where to)
    /// while the VPs pause for it: made once they go on.
    #[serde(skip)]
    pub(super) moves: Vec<(Requester, Tid, String)>,
}
