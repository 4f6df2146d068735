//! The messages, one documented enum per connection kind.
//!
//! * `PeerMsg` — daemon to daemon over TCP. The first four variants are the
//!   handshake (see `auth`); nothing else is legal before `Welcome`.
//! * `Request` / `Response` — the control socket (`mig` to its daemon, or a
//!   worker forwarding for its local `mig` inside `PeerMsg::Control`).
//!
//! Every type here is encoded with postcard inside a `frame`; changing any of
//! them bumps `frame::MAJOR`.

use serde::{Deserialize, Serialize};

use crate::auth::Block;

/// A VP's identity. Assigned by the master, never reused while the virtual
/// machine runs, and it never encodes a host (a VP keeps it when it moves).
pub type Tid = u64;

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
}

/// How a VP ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitInfo {
    /// Exit code, if it exited.
    pub code: Option<i32>,
    /// Signal, if killed by one.
    pub signal: Option<i32>,
    /// Why it could not run at all (e.g. program not found).
    pub error: Option<String>,
}

impl ExitInfo {
    /// A shell-style status: the code, 128 + signal, or 127 when it never ran.
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
}

/// Daemon to daemon.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum PeerMsg {
    /// Handshake 1 (client): its nonce.
    Hello {
        /// Client nonce.
        nonce: Block,
    },
    /// Handshake 2 (server): its nonce and proof of the key.
    Challenge {
        /// Server nonce.
        nonce: Block,
        /// `ClusterKey::server_proof`.
        proof: Block,
    },
    /// Handshake 3 (client): proof of the key.
    Proof {
        /// `ClusterKey::client_proof`.
        proof: Block,
    },
    /// Handshake 4 (server): accepted.
    Welcome,
    /// The other side refuses; the connection closes.
    Refused {
        /// Why.
        reason: String,
    },
    /// Worker to master, once, after `Welcome`.
    Register {
        /// The worker's facts.
        facts: HostFacts,
    },
    /// Master to worker: the name it is known by.
    Registered {
        /// Host name (may differ from the one asked for if taken).
        name: String,
    },
    /// Worker to master, periodically.
    Heartbeat,
    /// Master to worker: start a VP.
    Start(StartVp),
    /// Master to worker: kill a VP.
    Kill {
        /// Which.
        tid: Tid,
    },
    /// Worker to master: a VP is running.
    Started {
        /// Which.
        tid: Tid,
        /// Its process id.
        pid: u32,
    },
    /// Worker to master: a VP ended.
    Exited {
        /// Which.
        tid: Tid,
        /// How.
        status: ExitInfo,
    },
    /// Worker to master: one line of a VP's output.
    Output {
        /// Which VP.
        tid: Tid,
        /// Which stream.
        stream: Stream,
        /// The line, without its newline.
        line: String,
    },
    /// Worker to master: a control request of a local `mig`.
    Control {
        /// Worker-chosen id for the replies.
        id: u64,
        /// The request.
        req: Request,
    },
    /// Master to worker: a reply to `Control` (several for streams).
    Reply {
        /// The id of the request.
        id: u64,
        /// The reply.
        resp: Response,
    },
    /// Master to worker: kill every VP and exit.
    Halt,
}

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
    /// Stop every daemon and VP.
    Halt,
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
    /// `starting`, `running`, `waiting`, `exited`.
    pub state: String,
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
}

/// A control reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Response {
    /// To `Hosts`.
    Hosts(Vec<HostInfo>),
    /// To `Ps`.
    Ps(Vec<VpInfo>),
    /// To `Map`: processors in row order and each slot's cells.
    Map {
        /// Processor ids.
        processors: Vec<String>,
        /// Per slot, its occupied cells.
        slots: Vec<Vec<MapCell>>,
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
}
