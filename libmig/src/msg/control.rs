//! `mig` and its daemon, over the control socket (or a worker forwarding
//! for its local `mig` inside `ToMaster::Control`): `Request` in, `Response`
//! out, and what responses carry.

use serde::{Deserialize, Serialize};

use super::peer::OwnerReport;
use super::{ExitInfo, HostFacts, Stream, Tid};

/// What `mig spawn` asks for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpawnSpec {
    /// Program path (absolute, or relative to `cwd`, or a name on `PATH`).
    pub program: String,
    /// Arguments.
    pub args: Vec<String>,
    /// Number of VPs.
    pub n: u32,
    /// Working directory.
    pub cwd: String,
    /// Environment passed to every VP.
    pub env: Vec<(String, String)>,
    /// Stream output and statuses back until the job ends.
    pub wait: bool,
    /// The VP that asked (a VP's `spawn_job`), if one did.
    pub parent: Option<Tid>,
    /// Its VPs need no coordination: besides their own slot they run in
    /// any slot whose cell on their processor is empty (Concurrent Gang).
    pub independent: bool,
    /// A VP that cannot be moved, stopped on a host whose owner stays
    /// longer than that host's `vacate_after_s`, is ended and started again
    /// elsewhere from the beginning.
    pub restartable: bool,
    /// Memory each VP needs (MB): never placed on a host offering less.
    pub memory_mb: Option<u64>,
    /// How its VPs want to be placed (`mig spawn --class`), for the
    /// bidding placement; none: simple for one VP, a group for more.
    pub class: Option<JobClass>,
    /// How much I/O each VP does (`mig spawn --io`), for the N-resource
    /// placement; none: little.
    pub io: Option<IoClass>,
    /// The hosts the bids chose, and how many of each one's processors
    /// the job may use, under the bidding placement: set by the daemon the
    /// job arrived at, from the bids it asked for (`Bidding`); empty, the
    /// master chooses.
    pub bid_hosts: Vec<(String, u32)>,
}

/// A program's class (seed 002): how its VPs gain from where they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobClass {
    /// One task on its own.
    Simple,
    /// Tasks that talk much: best together on one host.
    Cluster,
    /// Tasks that gain from running apart: one to a host while hosts last.
    Group,
}

impl JobClass {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            JobClass::Simple => "simple",
            JobClass::Cluster => "cluster",
            JobClass::Group => "group",
        }
    }
}

/// How much of a host's I/O bandwidth each VP wants (seed 004's third
/// resource).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum IoClass {
    /// A quarter of a host's I/O.
    Light,
    /// Three quarters: two never share a host while hosts with room remain.
    Heavy,
}

impl IoClass {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            IoClass::Light => "light",
            IoClass::Heavy => "heavy",
        }
    }

    /// The share of a host's I/O (0..1) it needs.
    pub fn share(self) -> f64 {
        match self {
            IoClass::Light => 0.25,
            IoClass::Heavy => 0.75,
        }
    }
}

/// A control request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// The hosts of the virtual machine.
    Hosts,
    /// Every VP.
    Ps,
    /// The allocation map.
    Map,
    /// Start a job.
    Spawn(SpawnSpec),
    /// Kill a job (by id) or one VP (by Tid).
    Kill {
        /// Job id or Tid.
        target: String,
    },
    /// Move a VP to another host (its image written, started again there).
    Migrate {
        /// Its Tid (`t40001` or hex).
        tid: String,
        /// The target host.
        to: String,
    },
    /// Gang slicing figures: switch lateness, skew, time lost.
    Stats,
    /// Write a consistent checkpoint of a job now.
    Checkpoint {
        /// The job.
        job: String,
    },
    /// Restart a job from its last good checkpoint.
    Restart {
        /// The job.
        job: String,
    },
    /// `mig owner reclaim|release|status`.
    Owner {
        /// What to do.
        action: OwnerAction,
        /// Which host (default: the daemon asked).
        host: Option<String>,
    },
    /// Stop every daemon and VP.
    Halt,
    /// A join token valid for `ttl_s` seconds.
    TokenCreate {
        /// How long it may be used.
        ttl_s: u64,
    },
    /// The join tokens.
    TokenList,
    /// Withdraw a join token.
    TokenRevoke {
        /// Its id.
        id: String,
    },
    /// Bytes for the standard input of VP 0 of a job started with `wait`
    /// (`mig spawn --wait` forwards its own); `eof` closes it.
    Input {
        /// The job.
        job: String,
        /// The bytes (at most `INPUT_CHUNK`).
        data: Vec<u8>,
        /// Nothing follows.
        eof: bool,
    },
    /// Running jobs and those in the master's history (`mig jobs`).
    Jobs,
    /// Answer when `job` ends (at once if it has): `JobDone` (output lines
    /// and VP ends come first, as to a `spawn --wait`).
    Wait {
        /// The job.
        job: String,
    },
    /// The job's output kept by the master, from byte `offset` on.
    Logs {
        /// The job.
        job: String,
        /// Where to start.
        offset: u64,
    },
    /// Stop a job's VPs where they are and give its processors to others
    /// until `Resume` (`mig suspend`).
    Suspend {
        /// The job.
        job: String,
    },
    /// Let a suspended job run again (`mig resume`).
    Resume {
        /// The job.
        job: String,
    },
    /// The hosts' recent slot switches with the jobs each slot ran (`mig
    /// stats --plot`).
    Timeline,
    /// Take a drained host out of the virtual machine: its daemon stops and
    /// the master forgets it (`mig delete`). Refused while VPs are on it.
    Delete {
        /// The host.
        host: String,
    },
}

/// A job as `mig jobs` lists it: running, or ended and kept in the
/// master's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobInfo {
    /// Its id.
    pub job: String,
    /// Program and arguments (VP 0's).
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// The local user who started it (`None`: the virtual machine's own).
    pub uid: Option<u32>,
    /// VPs it had (or has).
    pub vps: u32,
    /// Hosts its VPs ran on.
    pub hosts: Vec<String>,
    /// `running`, `suspended`, `exited`, `killed` or `halted` (it ran
    /// when the virtual machine was halted).
    pub state: String,
    /// When it was submitted (ms since the Unix epoch).
    pub submitted_ms: u64,
    /// When it ended, if it has.
    pub ended_ms: Option<u64>,
    /// Its status once ended: 0 if every VP exited 0, else the first failing
    /// VP's status.
    pub status: Option<i32>,
    /// CPU time its VPs' processes used, of those that have ended (a VP
    /// that moved counts its last process).
    #[serde(default)]
    pub cpu_ms: u64,
}

/// Most bytes one `Request::Input` carries.
pub const INPUT_CHUNK: usize = 64 * 1024;

/// How the answer to `Request::Input` ends when the VP cannot take input
/// this moment (not yet placed, moving): send the same bytes again later.
pub const INPUT_LATER: &str = "try again";

/// A join token as `mig token list` shows it (never its secret).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenInfo {
    /// Its id.
    pub id: String,
    /// Seconds until it expires (0: expired).
    pub expires_in_s: u64,
    /// `valid`, `expired`, `used by ADDR` or `revoked`.
    pub state: String,
}

/// What `mig owner` asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OwnerAction {
    /// The owner wants the host now.
    Reclaim,
    /// The owner lends it again.
    Release,
    /// Show what the monitor sees.
    Status,
}

/// One host as `mig hosts` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostInfo {
    /// Facts it reported.
    pub facts: HostFacts,
    /// Is it answering heartbeats?
    pub alive: bool,
    /// Is it the master?
    pub master: bool,
    /// VPs running there.
    pub vps: u32,
    /// Its owner monitor's last report.
    pub owner: Option<OwnerReport>,
    /// VPs held there that do not run, each with why (as `mig ps` says).
    pub waiting: Vec<(Tid, String)>,
    /// Does it keep the master's replicated state and vote for the master?
    pub voter: bool,
    /// Memory available there at its last report (MiB), if known.
    pub free_memory_mb: Option<u64>,
    /// Memory the VPs placed there asked for (`mig spawn --mem`), MiB.
    pub reserved_memory_mb: u64,
    /// How busy its disks were at its last report (0..1), if known.
    pub io_busy: Option<f64>,
    /// Space free in its state directory at its last report (MiB), if known.
    pub state_free_mb: Option<u64>,
    /// Its state directory is full: an image could not be written there
    /// for lack of space, and no room was made since.
    pub state_full: bool,
}

impl HostInfo {
    /// The memory a new VP may still have there (MiB), if known.
    pub fn memory_for_new_vp(&self) -> Option<u64> {
        memory_for_new_vp(
            self.facts.memory_mb,
            self.free_memory_mb,
            self.reserved_memory_mb,
        )
    }
}

/// The memory a new VP may still have on a host (MiB): what it offers (0:
/// unknown), or has available if less, less what the VPs placed there
/// asked for; `None` when neither is known.
pub fn memory_for_new_vp(offered: u64, available: Option<u64>, reserved: u64) -> Option<u64> {
    let offered = (offered > 0).then_some(offered);
    match (offered, available) {
        (Some(o), Some(a)) => Some(o.min(a)),
        (o, a) => o.or(a),
    }
    .map(|m| m.saturating_sub(reserved))
}

/// Gang slicing as `mig stats` shows it, per host and overall.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SliceStats {
    /// Host name, or `all`.
    pub host: String,
    /// Switches counted.
    pub switches: u64,
    /// Switch lateness p50, p99, max (ms).
    pub late_ms: [f64; 3],
    /// Time lost to switching, as a fraction of the time covered.
    pub lost: f64,
    /// Tables that took effect: (generation, boundary, applied) in ns.
    pub installed: Vec<(u64, u64, u64)>,
}

/// To `Stats`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatsInfo {
    /// Slot length (ms); 0 when slicing is off.
    pub quantum_ms: f64,
    /// Slots per round now.
    pub slots: u32,
    /// Per host, then `all`.
    pub hosts: Vec<SliceStats>,
    /// Cross-host skew for the same boundary: p50, p99, max (ms), and how
    /// many boundaries were seen by more than one host.
    pub skew_ms: [f64; 3],
    /// Boundaries compared for the skew.
    pub boundaries: u64,
    /// How long each host's daemon loop takes a turn, the master first.
    pub loop_turns: Vec<HostTurns>,
}

/// How long a daemon's loop turns take: its work between two waits on the
/// poll, during which it answers no one (heartbeats, leases, the voters'
/// consensus wait). Durations in microseconds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoopTurns {
    /// The longest turn since the daemon started.
    pub longest_us: u64,
    /// Turns since the daemon started.
    pub turns: u64,
    /// The recent window the next three cover (seconds; the figures cover
    /// between half of it and all of it).
    pub window_s: u32,
    /// The longest turn in the window.
    pub window_longest_us: u64,
    /// The turn 99% of the window's turns took no longer than (within a
    /// quarter of itself).
    pub window_p99_us: u64,
    /// Turns in the window.
    pub window_turns: u64,
}

/// One host's loop turns, as its daemon last reported them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostTurns {
    /// The host.
    pub host: String,
    /// Is it the master?
    pub master: bool,
    /// Its figures.
    pub turns: LoopTurns,
}

/// One host's recent slot switches (`Request::Timeline`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostTimeline {
    /// The host.
    pub host: String,
    /// Oldest first: when each switch should have happened and how late it
    /// was (ns), the slot it switched to, and the jobs of that slot there.
    pub switches: Vec<TimelineSwitch>,
}

/// One slot switch of a host, with what ran after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimelineSwitch {
    /// Its ideal instant (ns since the Unix epoch).
    pub ideal_ns: u64,
    /// How late it began (ns).
    pub late_ns: u64,
    /// The slot it switched to.
    pub slot: u32,
    /// The jobs with cells on the host in that slot (empty: none, or the
    /// table is no longer known).
    pub jobs: Vec<String>,
}

/// One VP as `mig ps` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VpInfo {
    /// Its Tid.
    pub tid: Tid,
    /// Its job.
    pub job: String,
    /// Index in the job.
    pub vp: u32,
    /// Host it is on, if placed.
    pub host: Option<String>,
    /// Process id there, once started.
    pub pid: Option<u32>,
    /// `starting`, `running`, `waiting`, `suspended`, `exited`, ...
    pub state: String,
    /// Whether its program has said it can be moved (libmig's
    /// `init_or_restore`); a VP that has not is never moved.
    pub movable: bool,
    /// Its program and arguments.
    pub command: String,
    /// When its process first started (ms since the Unix epoch; a move
    /// keeps it).
    pub started_ms: Option<u64>,
    /// CPU time its process (and the processes it started) has used, as
    /// its host last said (every couple of seconds).
    pub cpu_ms: Option<u64>,
    /// Why its last move failed, if it did (cleared by one that succeeds).
    pub move_failed: Option<String>,
}

/// One cell of the allocation map.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MapCell {
    /// Processor id.
    pub processor: String,
    /// Job holding it.
    pub job: String,
    /// The job's VP indices there.
    pub vps: Vec<u32>,
    /// The job was spawned `--independent`: its VPs there also run in any
    /// slot whose cell on this processor is free (Concurrent Gang).
    pub independent: bool,
}

/// A control reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Response {
    /// To `Hosts`.
    Hosts(Vec<HostInfo>),
    /// To `Ps`.
    Ps(Vec<VpInfo>),
    /// To `Stats`.
    Stats(StatsInfo),
    /// To `Owner { action: Status }`: each host's owner monitor.
    Owner(Vec<(String, OwnerReport)>),
    /// To `Map`: processors in row order and each slot's cells.
    Map {
        /// Processor ids.
        processors: Vec<String>,
        /// Per slot, its occupied cells.
        slots: Vec<Vec<MapCell>>,
        /// The slot running now, when the hosts slice.
        now: Option<u32>,
    },
    /// To `Spawn`: the job started.
    Spawned {
        /// Job id.
        job: String,
        /// Tids in VP order.
        tids: Vec<Tid>,
    },
    /// While waiting: one line of output.
    Output {
        /// Which VP.
        tid: Tid,
        /// Index in its job.
        vp: u32,
        /// Host it ran on.
        host: String,
        /// Which stream.
        stream: Stream,
        /// The line.
        line: String,
    },
    /// While waiting: `lines` lines of output were not sent to this
    /// waiter, which stopped reading (a stopped `mig spawn --wait`); the
    /// job's output (`mig logs`, its first 16 MiB) has them.
    Skipped {
        /// How many.
        lines: u64,
    },
    /// While waiting: a VP ended.
    VpDone {
        /// Which VP.
        tid: Tid,
        /// Index in its job.
        vp: u32,
        /// Host it ran on.
        host: String,
        /// How it ended.
        status: ExitInfo,
    },
    /// While waiting: the whole job ended (the last message of a wait).
    JobDone {
        /// Job id.
        job: String,
        /// 0 if every VP exited 0, else the first failing VP's status.
        status: i32,
    },
    /// Done.
    Ok {
        /// What happened.
        message: String,
    },
    /// The request failed.
    Error {
        /// One sentence: what is wrong and what to do.
        message: String,
    },
    /// To `TokenCreate`: the token, shown once.
    Token {
        /// `mig-ID-SECRET`.
        token: String,
        /// Its id.
        id: String,
        /// Seconds it is valid for.
        ttl_s: u64,
    },
    /// To `TokenList`.
    Tokens(Vec<TokenInfo>),
    /// To `Jobs`.
    Jobs(Vec<JobInfo>),
    /// To `Logs`: up to 1 MiB of the job's output.
    Log {
        /// The bytes.
        data: Vec<u8>,
        /// The offset after them.
        next: u64,
        /// The job has ended: nothing will follow what is there.
        ended: bool,
    },
    /// To `Timeline`: the slot length (ns; 0 when slicing is off) and each
    /// host's recent switches.
    Timeline {
        /// Slot length, ns.
        quantum_ns: u64,
        /// Per host.
        hosts: Vec<HostTimeline>,
    },
}

/// What a wait on a job hears (`mig spawn --wait`, `mig wait`): the replies
/// that come on one, by kind, and any other reply as it is (none comes on
/// a wait).
#[derive(Debug, Clone, PartialEq)]
pub enum JobEvent {
    /// A line a VP wrote (see `Response::Output`).
    Output {
        /// The VP.
        tid: Tid,
        /// Its number in the job.
        vp: u32,
        /// Its host.
        host: String,
        /// Which stream.
        stream: Stream,
        /// The line.
        line: String,
    },
    /// Lines left out (see `Response::Skipped`).
    Skipped {
        /// How many.
        lines: u64,
    },
    /// A VP ended (see `Response::VpDone`).
    VpDone {
        /// The VP.
        tid: Tid,
        /// Its number in the job.
        vp: u32,
        /// Its host.
        host: String,
        /// How it ended.
        status: ExitInfo,
    },
    /// The job ended (see `Response::JobDone`).
    JobDone {
        /// The job.
        job: String,
        /// Its status.
        status: i32,
    },
    /// The wait failed.
    Error {
        /// Why.
        message: String,
    },
    /// A reply to another request.
    Other(Response),
}

impl Response {
    /// This reply as a wait on a job hears it.
    pub fn on_a_wait(self) -> JobEvent {
        match self {
            Response::Output {
                tid,
                vp,
                host,
                stream,
                line,
            } => JobEvent::Output {
                tid,
                vp,
                host,
                stream,
                line,
            },
            Response::Skipped { lines } => JobEvent::Skipped { lines },
            Response::VpDone {
                tid,
                vp,
                host,
                status,
            } => JobEvent::VpDone {
                tid,
                vp,
                host,
                status,
            },
            Response::JobDone { job, status } => JobEvent::JobDone { job, status },
            Response::Error { message } => JobEvent::Error { message },
            other @ (Response::Hosts(_)
            | Response::Ps(_)
            | Response::Stats(_)
            | Response::Owner(_)
            | Response::Map { .. }
            | Response::Spawned { .. }
            | Response::Ok { .. }
            | Response::Token { .. }
            | Response::Tokens(_)
            | Response::Jobs(_)
            | Response::Log { .. }
            | Response::Timeline { .. }) => JobEvent::Other(other),
        }
    }

    /// The reply's name, for errors and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Response::Hosts(_) => "Hosts",
            Response::Ps(_) => "Ps",
            Response::Stats(_) => "Stats",
            Response::Owner(_) => "Owner",
            Response::Map { .. } => "Map",
            Response::Spawned { .. } => "Spawned",
            Response::Output { .. } => "Output",
            Response::Skipped { .. } => "Skipped",
            Response::VpDone { .. } => "VpDone",
            Response::JobDone { .. } => "JobDone",
            Response::Ok { .. } => "Ok",
            Response::Error { .. } => "Error",
            Response::Token { .. } => "Token",
            Response::Tokens(_) => "Tokens",
            Response::Jobs(_) => "Jobs",
            Response::Log { .. } => "Log",
            Response::Timeline { .. } => "Timeline",
        }
    }
}
