//! The messages, one documented enum per connection kind.
//!
//! * `PeerMsg` — daemon to daemon over TCP, one enum per conversation:
//!   `Handshake` (see `handshake`; nothing else is legal before `Welcome`),
//!   `ToMaster`, `ToHost`, `DataLink`, `Quorum`;
//! * `VpMsg` — a VP and its daemon, over the socket the daemon hands the VP
//!   when it starts it (and `Envelope`, `VpCall`, `VpRet`, `Notice`, what
//!   travels inside);
//! * `Request` / `Response` — the control socket (`mig` to its daemon, or a
//!   worker forwarding for its local `mig` inside `ToMaster::Control`).
//!
//! Every type here is encoded with postcard inside a `frame`; changing any of
//! them bumps `frame::MAJOR`.

mod control;
mod peer;
mod vp;

pub use control::*;
pub use peer::*;
pub use vp::*;

use serde::{Deserialize, Serialize};

/// A VP's identity. Assigned by the master, never reused while the virtual
/// machine runs, and it never encodes a host (a VP keeps it when it moves).
pub type Tid = u64;

/// The Tid the system's own messages (notices) come from.
pub const SYSTEM: Tid = 0;

/// What travels with every message between VPs; the payload follows raw in
/// the same frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    /// Sender.
    pub from: Tid,
    /// Receiver.
    pub to: Tid,
    /// The sender's tag.
    pub tag: i32,
    /// Per sender→receiver pair, from 1; 0 for notices (no order).
    pub seq: u64,
    /// The sender's incarnation: how many times its job was restarted from
    /// a checkpoint when it sent this. Hosts drop messages of an earlier
    /// incarnation of a restarted job (sent after the checkpoint the job
    /// went back to, so never part of the run that goes on).
    pub incarnation: u32,
}

/// Where a VP is, as the master tells every host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Loc {
    /// Placed on this host (starting or running).
    At(String),
    /// Known but waiting for a processor.
    Waiting,
    /// Exited, or never existed.
    Gone,
}

/// Facts a host reports when it joins.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostFacts {
    /// Host name, unique in the virtual machine.
    pub name: String,
    /// Architecture, e.g. `x86_64-linux`.
    pub arch: String,
    /// Processors offered.
    pub processors: u32,
    /// Relative capacity of one processor.
    pub capacity: f64,
    /// Memory in MiB.
    pub memory_mb: u64,
    /// Address other daemons reach it at.
    pub addr: String,
    /// Its migd process id (for `mig hosts`).
    pub pid: u32,
    /// Is it offered to the pool (its owner away) as it joins?
    pub offered: bool,
}

/// How a VP ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitInfo {
    /// Exit code, if it exited.
    pub code: Option<i32>,
    /// Signal, if killed by one.
    pub signal: Option<i32>,
    /// Why it could not run at all (e.g. program not found), or, beside
    /// `signal`, why its host ended it.
    pub error: Option<String>,
    /// The CPU time its process used (user and system, with the children
    /// it waited for), when its host reaped it.
    pub cpu_ms: Option<u64>,
}

/// The exit status of a job mig ended because it could not go on
/// consistently: a VP was lost (with its host, or on its way between two)
/// and the job had no checkpoint to go back to, or its checkpoint could not
/// be restored. 75 is `EX_TEMPFAIL` of `sysexits.h`: running it again may
/// succeed. (127, the shell's "command not found", stays for a VP whose
/// program could not be started.)
pub const STATUS_LOST: i32 = 75;

impl ExitInfo {
    /// A VP that mig ended itself, with exit status `status`; `why` says
    /// how (shown as the VP's end).
    pub fn ended_by_mig(status: i32, why: String) -> ExitInfo {
        ExitInfo {
            code: Some(status),
            signal: None,
            error: Some(why),
            cpu_ms: None,
        }
    }

    /// A shell-style status: the code, 128 + signal, or 127 when it never
    /// ran. (A VP mig ended has its code: [`ExitInfo::ended_by_mig`].)
    pub fn status(&self) -> i32 {
        match (self.code, self.signal, &self.error) {
            (Some(c), _, _) => c,
            (None, Some(s), _) => 128 + s,
            _ => 127,
        }
    }
}

impl std::fmt::Display for ExitInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.code, self.signal, &self.error) {
            (Some(_), _, Some(e)) => write!(f, "{e}"),
            (None, Some(s), Some(e)) => write!(f, "killed by signal {s}: {e}"),
            (_, _, Some(e)) => write!(f, "failed to start: {e}"),
            (Some(c), _, _) => write!(f, "exit {c}"),
            (None, Some(s), _) => write!(f, "killed by signal {s}"),
            _ => write!(f, "ended"),
        }
    }
}

/// Which output stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// Everything a host needs to start one VP.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartVp {
    /// Its Tid.
    pub tid: Tid,
    /// Its job.
    pub job: String,
    /// Its index in the job.
    pub vp: u32,
    /// VPs in the job when it started.
    pub nvps: u32,
    /// Program path.
    pub program: String,
    /// Arguments.
    pub args: Vec<String>,
    /// Working directory.
    pub cwd: String,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// The VP that spawned it, if one did.
    pub parent: Option<Tid>,
    /// Its job's incarnation (restarts from a checkpoint so far).
    pub incarnation: u32,
    /// Its standard input is a pipe fed by `PeerMsg::Input` (VP 0 of a job
    /// a `mig spawn --wait` started), not `/dev/null`.
    pub stdin: bool,
    /// The most memory (MB) its processes may use together (`mig spawn
    /// --mem`): its host holds it to that (a cgroup's limit, where the
    /// host has the memory controller), and ends it if it takes more.
    pub memory_mb: Option<u64>,
    /// How much I/O it does (`mig spawn --io`): its share of its host's
    /// disks (a cgroup's I/O weight, where the host has the controller).
    pub io: Option<IoClass>,
    /// Its job's VPs need no coordination (`mig spawn --independent`):
    /// under Rate-of-Change its host may give it away.
    pub independent: bool,
}
