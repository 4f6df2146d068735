//! The messages, one documented enum per connection kind.
//!
//! * `PeerMsg` — daemon to daemon over TCP. The first four variants are the
//!   handshake (see `auth`); nothing else is legal before `Welcome`.
//! * `VpMsg` — a VP and its daemon, over the socket the daemon hands the VP
//!   when it starts it (and `Envelope`, `VpCall`, `VpRet`, `Notice`, what
//!   travels inside);
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

/// What a VP can ask to be told about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum NotifyOn {
    /// This VP exits.
    VpExit(Tid),
    /// Any host leaves the virtual machine.
    HostLeave,
    /// Any host joins.
    HostJoin,
}

/// A notice, delivered as the payload of a message from `SYSTEM` with the
/// tag the VP chose.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Notice {
    /// A VP exited.
    VpExited {
        /// Which.
        tid: Tid,
        /// How.
        status: ExitInfo,
    },
    /// A host left.
    HostLeft {
        /// Its name.
        host: String,
    },
    /// A host joined.
    HostJoined {
        /// Its name.
        host: String,
    },
}

/// A request of a VP that the master answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum VpCall {
    /// Start `n` VPs of `program` (in the caller's job, or a new one).
    Spawn {
        /// Program path or name.
        program: String,
        /// Arguments.
        args: Vec<String>,
        /// How many.
        n: u32,
        /// Start a job of their own instead of joining the caller's.
        new_job: bool,
    },
    /// Kill a VP.
    Kill {
        /// Which.
        tid: Tid,
    },
    /// The caller's job's VPs, in index order.
    Tasks,
    /// Ask for a notice.
    Notify {
        /// On what.
        on: NotifyOn,
        /// The tag the notice comes with.
        tag: i32,
    },
    /// Join a group; returns the instance number.
    Join {
        /// Group name.
        group: String,
    },
    /// Leave a group.
    Leave {
        /// Group name.
        group: String,
    },
    /// A group's members by instance.
    Members {
        /// Group name.
        group: String,
    },
    /// Wait until `count` members have reached the barrier.
    Barrier {
        /// Group name.
        group: String,
        /// How many must arrive (0: the group's size when the last arrives).
        count: u32,
    },
}

/// The master's answer to a `VpCall`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum VpRet {
    /// VPs (spawned, or the job's).
    Tids(Vec<Tid>),
    /// An instance number in a group.
    Instance(u32),
    /// Members of a group: (instance, Tid), by instance.
    Members(Vec<(u32, Tid)>),
    /// Done.
    Done,
    /// It failed: one sentence.
    Error(String),
}

/// A VP and its daemon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum VpMsg {
    /// VP → daemon: a message (payload follows). With `confirm`, the daemon
    /// answers `Confirmed` or `Undeliverable` at once.
    Send {
        /// Where and what.
        env: Envelope,
        /// Answer whether `to` exists.
        confirm: bool,
    },
    /// VP → daemon, or VP → VP on a direct link: a message whose payload is
    /// a sealed memfd of `len` bytes passed with this frame (SCM_RIGHTS).
    SendFd {
        /// Where and what.
        env: Envelope,
        /// Answer whether `to` exists.
        confirm: bool,
        /// Payload length.
        len: u64,
    },
    /// VP → daemon: it has taken in `bytes` of memfd payloads, so senders
    /// held back for them may go on (flow control).
    Consumed {
        /// How many bytes.
        bytes: u64,
    },
    /// VP → daemon: a request the master answers with `Return`.
    Call {
        /// The VP's id for the answer.
        id: u64,
        /// What.
        call: VpCall,
    },
    /// VP → daemon: a direct link to a VP, please.
    Direct {
        /// The other VP.
        peer: Tid,
    },
    /// Daemon → VP: a message (payload follows).
    Deliver(Envelope),
    /// Daemon → VP: a message whose payload of `len` bytes is in the
    /// memfd passed with this frame (a sender's sealed memfd or pooled
    /// buffer, see `pool`).
    DeliverFd {
        /// Where and what.
        env: Envelope,
        /// Payload length.
        len: u64,
        /// The buffer is the daemon's own, lent until the payload is
        /// dropped: the VP reads it in place instead of copying it out.
        lent: bool,
    },
    /// Daemon → VP: `to` exists; messages to it will be delivered.
    Confirmed {
        /// The receiver.
        to: Tid,
    },
    /// Daemon → VP: a message could not be delivered.
    Undeliverable {
        /// The receiver.
        to: Tid,
        /// Its tag.
        tag: i32,
        /// Why.
        reason: String,
    },
    /// Daemon → VP: the answer to `Call`.
    Return {
        /// The call's id.
        id: u64,
        /// The answer.
        ret: VpRet,
    },
    /// Daemon → VP: `bytes` of memfd payloads you sent have left the daemon
    /// (delivered, or sent on to another host): you may send that much more.
    Credit {
        /// How many bytes.
        bytes: u64,
    },
    /// Daemon → VP: at your next safe point, write your checkpoint image
    /// to `path`, answer `Checkpointed` and end (you are moving).
    Checkpoint {
        /// Where to write the image.
        path: String,
    },
    /// Daemon → VP: the move is called off (no safe point in time); go on.
    StayPut,
    /// A step of a job-wide checkpoint, daemon ↔ VP (see `SnapStep`).
    Snap(SnapStep),
    /// VP → daemon, while it writes the image it moves with: `path` (the
    /// file being written) holds its final bytes up to `upto`, but for the
    /// preamble (written last).
    Written {
        /// The file being written.
        path: String,
        /// How far.
        upto: u64,
    },
    /// VP → daemon: the image is written.
    Checkpointed {
        /// Where.
        path: String,
    },
    /// Daemon → VP: a direct link to `peer` (the socket travels with this
    /// frame as SCM_RIGHTS), or why there is none.
    DirectLink {
        /// The other VP.
        peer: Tid,
        /// `None`: the socket is attached; `Some(reason)`: no link.
        refused: Option<String>,
    },
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
    /// The VP that spawned it, if one did.
    pub parent: Option<Tid>,
    /// Its job's incarnation (restarts from a checkpoint so far).
    pub incarnation: u32,
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
    /// A data link's opener, after the handshake: who it is.
    Hi {
        /// Its host name.
        name: String,
    },
    /// Master to every host: the hosts and their addresses.
    Peers(Vec<(String, String)>),
    /// Master to every host: where VPs are now.
    Directory(Vec<(Tid, Loc)>),
    /// Master to every host: these VPs' job went back to a checkpoint;
    /// drop their messages of an earlier incarnation than this.
    Fence {
        /// The job's VPs.
        tids: Vec<Tid>,
        /// Its incarnation from now on.
        incarnation: u32,
    },
    /// Worker to master: where is this VP?
    Locate {
        /// Which.
        tid: Tid,
    },
    /// A message between VPs (payload follows), on a data link.
    Deliver(Envelope),
    /// Back to the sender's host: a message could not be delivered.
    Undeliverable {
        /// The message.
        env: Envelope,
        /// Why.
        reason: String,
    },
    /// Master to the VP's host: checkpoint it and send it to `start`'s
    /// target host (`to`).
    Checkpoint {
        /// The target host.
        to: String,
        /// How the target starts it (the image is added).
        start: StartVp,
    },
    /// Source host to the master, master to the target host: start this VP
    /// from its checkpoint image.
    Restore {
        /// The target host.
        to: String,
        /// How to start it.
        start: StartVp,
        /// The image (see `checkpoint`).
        #[serde(with = "serde_bytes")]
        image: Vec<u8>,
    },
    /// Source host to target host, on their data link: part of a VP's
    /// checkpoint image (the bytes follow raw); the first part says how to
    /// start it, the part that completes `total` bytes starts it.
    RestorePart {
        /// The VP.
        tid: Tid,
        /// Where in the image this part goes.
        at: u64,
        /// The whole image's size (0 while it is still being written).
        total: u64,
        /// The last part: the image is whole.
        last: bool,
        /// How to start it (first part only).
        start: Option<StartVp>,
    },
    /// Worker to master: its owner monitor's state (on every change and
    /// with each heartbeat).
    Owner(OwnerReport),
    /// Master to a host: `mig owner reclaim` (true) or `release` (false).
    OwnerCommand {
        /// The master's id for the request.
        id: u64,
        /// Reclaim or release.
        reclaim: bool,
    },
    /// Host to master: the command was carried out (VPs stopped or resumed).
    OwnerDone {
        /// The request's id.
        id: u64,
        /// What happened.
        message: String,
    },
    /// A step of a job checkpoint for VP `tid`, between the master and the
    /// VP's host (which relays it to or from the VP).
    Snap {
        /// The VP.
        tid: Tid,
        /// The step.
        step: SnapStep,
    },
    /// Host to master: VP `tid`'s image for checkpoint `id`.
    SnapImage {
        /// The VP.
        tid: Tid,
        /// Generation.
        id: u64,
        /// The image (checked by the host).
        image: Vec<u8>,
    },
    /// Master to a host: keep this copy of a job checkpoint's image.
    Replica {
        /// The job.
        job: String,
        /// Generation.
        id: u64,
        /// The VP.
        tid: Tid,
        /// The image.
        image: Vec<u8>,
    },
    /// Master to host: its slot table (takes effect at `from_ns`).
    SlotTable(SlotTable),
    /// Host to master: what its slicer did (with the heartbeat).
    Slicing(SliceReport),
    /// Host to master: a VP waiting on a taken-back host was checkpointed to
    /// its disk and its process ended (the owner gets the memory back).
    Parked {
        /// Which.
        tid: Tid,
    },
    /// Master to host: start a parked VP again here from its image.
    Unpark {
        /// Which.
        tid: Tid,
    },
    /// Source host to the master: the VP did not move.
    MigrateFailed {
        /// Which.
        tid: Tid,
        /// Why.
        reason: String,
    },
    /// Worker to master: a request of one of its VPs.
    VpCall {
        /// The VP.
        tid: Tid,
        /// Its id.
        id: u64,
        /// What.
        call: VpCall,
    },
    /// Master to worker: the answer for one of its VPs.
    VpReturn {
        /// The VP.
        tid: Tid,
        /// The call's id.
        id: u64,
        /// The answer.
        ret: VpRet,
    },
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
    /// The VP that asked (a VP's `spawn_job`), if one did.
    pub parent: Option<Tid>,
    /// Its VPs need no coordination: besides their own slot they run in
    /// any slot whose cell on their processor is empty (Concurrent Gang).
    pub independent: bool,
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
    /// Move a VP to another host (checkpoint, restart there).
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
}

/// One cell of a host's slot table: the VPs on one of its processors in
/// one slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotCell {
    /// The processor's index on its host.
    pub processor: u32,
    /// The VPs there.
    pub tids: Vec<Tid>,
    /// They need no coordination (they may fill empty cells).
    pub independent: bool,
}

/// A host's slot table: which of its VPs run in which slot of the round,
/// and when the round's slots begin (on the real-time clock).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotTable {
    /// Orders tables.
    pub generation: u64,
    /// Slot 0 of some round began at this instant (ns since the Unix
    /// epoch); slot `k` of the round runs from `epoch + k * quantum`.
    pub epoch_ns: u64,
    /// The table takes effect at this slot boundary (ns since the epoch).
    pub from_ns: u64,
    /// Length of a slot.
    pub quantum_ns: u64,
    /// Per slot, the cells of this host's processors that hold a job.
    pub slots: Vec<Vec<SlotCell>>,
}

/// One switch between slots on a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Switch {
    /// The ideal instant (ns since the Unix epoch).
    pub ideal_ns: u64,
    /// How late it began (ns).
    pub late_ns: u64,
    /// How long stopping and continuing took (ns).
    pub took_ns: u64,
}

/// What a host's slicer did since its last report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SliceReport {
    /// The table in force.
    pub generation: u64,
    /// Switches since the last report (at most the last 512).
    pub switches: Vec<Switch>,
    /// Tables that took effect since: (generation, boundary, when applied), ns.
    pub installed: Vec<(u64, u64, u64)>,
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
}

/// The steps of a consistent checkpoint of a whole job. Every VP stops at
/// a safe point and says how many messages it has sent to each peer
/// (`Paused`); once all have, each takes in everything its peers sent it
/// (`Now` says how much that is), writes its image and says so (`Taken`);
/// then all go on (`Resume`). Nothing is in flight between the images, so
/// rolling back to them loses and duplicates nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SnapStep {
    /// Master → VP (through its host, which adds the path): stop at the
    /// next safe point.
    Begin {
        /// The checkpoint's generation.
        id: u64,
        /// Where to write the image (set by the VP's host).
        path: String,
    },
    /// VP → master: stopped; the last sequence number sent to each peer.
    Paused {
        /// Generation.
        id: u64,
        /// (peer, last sequence number sent to it).
        sent: Vec<(Tid, u64)>,
    },
    /// Master → VP: take in, from each peer, up to this sequence number,
    /// then write the image.
    Now {
        /// Generation.
        id: u64,
        /// (peer, last sequence number it sent here).
        expect: Vec<(Tid, u64)>,
    },
    /// VP → its host: the image is at `path`.
    Taken {
        /// Generation.
        id: u64,
        /// Where.
        path: String,
    },
    /// Master → VP: every image is taken; go on.
    Resume {
        /// Generation.
        id: u64,
    },
    /// Master → VP: the checkpoint was given up; go on.
    Abort {
        /// Generation.
        id: u64,
    },
}

/// Whose a host is now, as its owner monitor decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OwnerState {
    /// The owner is away: the host is in the pool and its VPs run.
    Offered,
    /// The owner is back: its VPs are stopped, not yet moved off.
    Suspended,
    /// The owner is back: the host has left the pool.
    Reclaimed,
}

impl std::fmt::Display for OwnerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OwnerState::Offered => "offered",
            OwnerState::Suspended => "suspended",
            OwnerState::Reclaimed => "reclaimed",
        })
    }
}

/// One owner-activity source as `mig owner status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceReport {
    /// `load`, `terminals`, `input devices`, `interrupts`, `explicit`.
    pub name: String,
    /// Is it watching anything on this host?
    pub active: bool,
    /// What it sees now.
    pub sees: String,
    /// Seconds since it last saw owner activity.
    pub last_activity_s: Option<f64>,
}

/// A host's owner monitor: its state and every source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OwnerReport {
    /// The state.
    pub state: OwnerState,
    /// Seconds in it.
    pub for_s: f64,
    /// The source that decided it, and what it saw.
    pub decided_by: String,
    /// Seconds since the owner's last activity, if any was seen.
    pub idle_s: Option<f64>,
    /// Non-VP CPU load in cores, when measured.
    pub load: Option<f64>,
    /// Each source.
    pub sources: Vec<SourceReport>,
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
