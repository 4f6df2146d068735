//! Daemon to daemon over TCP: `PeerMsg`, on the handshake (see `handshake`),
//! a worker's link to its master, and data links between hosts; and what
//! hosts report (slot tables, switches, owners).

use serde::{Deserialize, Serialize};

use super::*;

/// Daemon to daemon.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum PeerMsg {
    /// Handshake 1 (client): its nonce, and the first message of the
    /// Noise handshake that seals the link (`seal`), in cipher suite
    /// `suite`.
    Hello {
        /// Client nonce.
        nonce: Block,
        /// `seal::Suite` number.
        suite: u8,
        /// Noise message 1.
        noise: Vec<u8>,
    },
    /// Handshake 2 (server): its nonce and proof of the key, and the second
    /// Noise message. Every byte after `Proof` is sealed, both ways.
    Challenge {
        /// Server nonce.
        nonce: Block,
        /// `ClusterKey::server_proof`.
        proof: Block,
        /// Noise message 2.
        noise: Vec<u8>,
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
        /// The local user who made it (from the socket's credentials).
        uid: u32,
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
    /// A VP's image on its way to the host that starts it from it (a
    /// move's source, or a host keeping a copy of a job checkpoint's image
    /// when the job restarts), on their data link: part of the image (the
    /// bytes follow raw); the first part says how to start it, the part
    /// that completes `total` bytes starts it.
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
    /// Worker to the master: one of its VPs can be moved (see
    /// `VpMsg::Movable`).
    Movable {
        /// The VP.
        tid: Tid,
    },
    /// Worker to the master, with every heartbeat: may I keep my VPs? The
    /// worker's lease runs from when it sent ask `n` (its own clock).
    LeaseAsk {
        /// The ask's number.
        n: u64,
    },
    /// Master to a worker it holds alive: ask `n` is granted for `ms`
    /// from when it was sent; after that the worker's VPs are frozen
    /// unless a later ask is granted.
    LeaseGrant {
        /// The ask's number.
        n: u64,
        /// The lease's length.
        ms: u64,
    },
    /// A piece of a message too large for one frame: its postcard bytes
    /// follow as the payload, in order; the last piece completes it.
    Part {
        /// This piece completes the message.
        last: bool,
    },
    /// A host to the master: it keeps a checked, durable copy of a job
    /// checkpoint's image (the VP's own host once the VP wrote it, or a
    /// host a copy was sent to). The master keeps only this: where each
    /// image is, its size and its sum; images never pass through it.
    ImageKept {
        /// Which image.
        image: ImageId,
        /// Its size in bytes.
        size: u64,
        /// Its checksum (CRC-32C of its body, as its preamble says).
        crc: u32,
    },
    /// A host to the master: `host` has no usable copy of `image` (it could
    /// not be written there, or read there to be sent, or sent there).
    ImageFailed {
        /// Which image.
        image: ImageId,
        /// The host without a copy.
        host: String,
        /// Why.
        reason: String,
    },
    /// Master to a host keeping a copy of `image`: send it to `to` over
    /// your data link (`ImagePart`s) to keep there; or, with `start`, to
    /// start the VP from on `to` (`RestorePart`s; `to` may be this host).
    CopyImage {
        /// Which image.
        image: ImageId,
        /// The host that is to have it.
        to: String,
        /// Start the VP from it there (a restart), rather than keep it.
        start: Option<StartVp>,
    },
    /// Host to host on their data link: part of a job checkpoint's image
    /// being copied (the bytes follow raw), to keep; the part that
    /// completes `total` bytes completes it.
    ImagePart {
        /// Which image.
        image: ImageId,
        /// Where in the image this part goes.
        at: u64,
        /// The whole image's size.
        total: u64,
        /// The last part.
        last: bool,
    },
    /// Host to host on their data link, back to the one sending a copy of
    /// `image`: it is written here up to `upto` (the sender keeps at most a
    /// few parts ahead of what is written).
    ImageAck {
        /// Which image.
        image: ImageId,
        /// Bytes written from its start.
        upto: u64,
    },
    /// Master to a host keeping a copy of `image`: read it through and
    /// check it (before a restart relies on it); answer `ImageChecked`.
    CheckImage {
        /// Which image.
        image: ImageId,
    },
    /// A host to the master: its copy of `image` is intact, or why not.
    ImageChecked {
        /// Which image.
        image: ImageId,
        /// Intact, or what is wrong.
        result: Result<(), String>,
    },
    /// Master to every host: of job `job`'s checkpoint images, keep only
    /// these generations (none: the job is gone).
    PruneImages {
        /// The job.
        job: String,
        /// Generations to keep.
        keep: Vec<u64>,
    },
    /// Source host to target host on their data link: the image of VP
    /// `tid` being sent will not come whole (the VP could not write it, or
    /// the move was called off): drop what arrived.
    RestoreOff {
        /// The VP.
        tid: Tid,
    },
    /// Master to a worker it declared dead (its VPs are being started
    /// elsewhere): end every VP you hold, now, and leave.
    Fenced {
        /// Why, for the worker's log.
        why: String,
    },
    /// Between voters: a message of the consensus that replicates the
    /// master's state (raft's own bytes), from voter `from`.
    Consensus {
        /// The sender's voter id.
        from: u64,
        /// The raft message (bytes: read whole, not one at a time, for it
        /// carries the master's state).
        #[serde(with = "serde_bytes")]
        msg: Vec<u8>,
    },
    /// Master to a host: you are voter `id` now (start an empty log and
    /// learn it from the master).
    Voter {
        /// Its voter id.
        id: u64,
    },
    /// Master to every host: the voters, by id, and their hosts.
    Voters(Vec<(u64, String)>),
    /// A newly elected master to every host: attach to me (at `addr`).
    /// A host follows the announcement of the highest term.
    NewMaster {
        /// The term it was elected in.
        term: u64,
        /// Its host name.
        name: String,
        /// Its address.
        addr: String,
    },
    /// A worker to a new master: I am host `facts.name`, still running the
    /// VPs you know of (unlike `Register`, which joins afresh).
    Attach {
        /// Its facts.
        facts: HostFacts,
    },
    /// A worker to a daemon that tried to join it: the master is at `addr`.
    Redirect {
        /// The master's address.
        addr: String,
    },
    /// A daemon that holds a join token and not yet the key: the token's
    /// id, and the first Noise message of an exchange sealed with the
    /// token's key (`auth::JoinToken::psk`). Before authentication, in
    /// place of `Hello`.
    JoinWithToken {
        /// The token's id.
        id: String,
        /// Cipher suite (as in `Hello`).
        suite: u8,
        /// The Noise message.
        noise: Vec<u8>,
    },
    /// The master's answer to `JoinWithToken`: the Noise answer; what
    /// follows is sealed.
    JoinAnswer {
        /// The Noise message.
        noise: Vec<u8>,
    },
    /// Sealed, after `JoinAnswer`: the cluster key; the link then closes.
    ClusterKeyIs {
        /// The key.
        key: crate::auth::Block,
    },
    /// Master to a VP's host: bytes for the VP's standard input (see
    /// `Request::Input`).
    Input {
        /// The VP.
        tid: Tid,
        /// The bytes.
        data: Vec<u8>,
        /// Close its standard input after them.
        eof: bool,
    },
    /// Master to a VP's host: signal the VP's process (`VpCall::Signal`).
    Signal {
        /// The VP.
        tid: Tid,
        /// The signal number (checked with `signal_ok`).
        signal: i32,
    },
    /// Master to a host: keep these VPs stopped whatever the slot table
    /// says (`hold`, their job is suspended), or let them run again.
    Hold {
        /// The VPs.
        tids: Vec<Tid>,
        /// Stop and hold them (`false`: release them).
        hold: bool,
    },
    /// Host to master, every couple of seconds: the CPU time each of its
    /// running VPs has used, and what the host has free.
    Usage(HostUsage),
    /// Master to the live end of a move whose other end died (the target
    /// it was going to, or the source it came from): run VP `tid` here
    /// from what this host still has of it (its process, if it had not yet
    /// written its image; the image it sent, kept until the VP ran there;
    /// the image that arrived whole), or answer `Missing`.
    Recall {
        /// The VP.
        tid: Tid,
    },
    /// Host to master, answering `Recall` (nothing of VP `tid` is left
    /// here: it is lost with the other host), or as a move's target whose
    /// image could not be taken in (the VP goes back to its source).
    Missing {
        /// The VP.
        tid: Tid,
        /// Why.
        reason: String,
    },
    /// Master to each other voter: what it keeps on disk about jobs for
    /// their users, copied as it keeps it (the changes of one batch of its
    /// decisions together), so that the voter elected next has the jobs'
    /// output and history too.
    JobFile(Vec<JobFileCopy>),
}

/// A job checkpoint's image: of VP `tid`, in generation `gen` of `job`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ImageId {
    /// The job.
    pub job: String,
    /// The checkpoint generation.
    pub gen: u64,
    /// The VP.
    pub tid: Tid,
}

impl std::fmt::Display for ImageId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "VP t{:x}'s image of generation {} of job {}",
            self.tid, self.gen, self.job
        )
    }
}

/// A change to the master's job files (`mig logs`, `mig jobs`' history).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum JobFileCopy {
    /// A line of `job`'s output.
    Output {
        /// The job.
        job: String,
        /// The line, as `mig logs` shows it.
        line: String,
    },
    /// A job ended: its record.
    History(JobInfo),
    /// `job`'s output is let go.
    Forget {
        /// The job.
        job: String,
    },
}

impl PeerMsg {
    /// The message's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            PeerMsg::Hold { .. } => "Hold",
            PeerMsg::Recall { .. } => "Recall",
            PeerMsg::Missing { .. } => "Missing",
            PeerMsg::Usage(_) => "Usage",
            PeerMsg::Hello { .. } => "Hello",
            PeerMsg::Challenge { .. } => "Challenge",
            PeerMsg::Proof { .. } => "Proof",
            PeerMsg::Welcome => "Welcome",
            PeerMsg::JoinWithToken { .. } => "JoinWithToken",
            PeerMsg::JoinAnswer { .. } => "JoinAnswer",
            PeerMsg::ClusterKeyIs { .. } => "ClusterKeyIs",
            PeerMsg::Input { .. } => "Input",
            PeerMsg::Signal { .. } => "Signal",
            PeerMsg::Refused { .. } => "Refused",
            PeerMsg::Register { .. } => "Register",
            PeerMsg::Registered { .. } => "Registered",
            PeerMsg::Heartbeat => "Heartbeat",
            PeerMsg::Start(_) => "Start",
            PeerMsg::Kill { .. } => "Kill",
            PeerMsg::Started { .. } => "Started",
            PeerMsg::Exited { .. } => "Exited",
            PeerMsg::Output { .. } => "Output",
            PeerMsg::Control { .. } => "Control",
            PeerMsg::Reply { .. } => "Reply",
            PeerMsg::Halt => "Halt",
            PeerMsg::Hi { .. } => "Hi",
            PeerMsg::Peers(_) => "Peers",
            PeerMsg::Directory(_) => "Directory",
            PeerMsg::Fence { .. } => "Fence",
            PeerMsg::Locate { .. } => "Locate",
            PeerMsg::Deliver(_) => "Deliver",
            PeerMsg::Undeliverable { .. } => "Undeliverable",
            PeerMsg::VpCall { .. } => "VpCall",
            PeerMsg::VpReturn { .. } => "VpReturn",
            PeerMsg::Movable { .. } => "Movable",
            PeerMsg::LeaseAsk { .. } => "LeaseAsk",
            PeerMsg::LeaseGrant { .. } => "LeaseGrant",
            PeerMsg::Fenced { .. } => "Fenced",
            PeerMsg::Consensus { .. } => "Consensus",
            PeerMsg::Voter { .. } => "Voter",
            PeerMsg::Voters(_) => "Voters",
            PeerMsg::NewMaster { .. } => "NewMaster",
            PeerMsg::Attach { .. } => "Attach",
            PeerMsg::Redirect { .. } => "Redirect",
            PeerMsg::Part { .. } => "Part",
            PeerMsg::ImageKept { .. } => "ImageKept",
            PeerMsg::ImageFailed { .. } => "ImageFailed",
            PeerMsg::CopyImage { .. } => "CopyImage",
            PeerMsg::ImagePart { .. } => "ImagePart",
            PeerMsg::ImageAck { .. } => "ImageAck",
            PeerMsg::CheckImage { .. } => "CheckImage",
            PeerMsg::ImageChecked { .. } => "ImageChecked",
            PeerMsg::PruneImages { .. } => "PruneImages",
            PeerMsg::RestoreOff { .. } => "RestoreOff",
            PeerMsg::Checkpoint { .. } => "Checkpoint",
            PeerMsg::MigrateFailed { .. } => "MigrateFailed",
            PeerMsg::RestorePart { .. } => "RestorePart",
            PeerMsg::Owner(_) => "Owner",
            PeerMsg::OwnerCommand { .. } => "OwnerCommand",
            PeerMsg::OwnerDone { .. } => "OwnerDone",
            PeerMsg::Parked { .. } => "Parked",
            PeerMsg::SlotTable(_) => "SlotTable",
            PeerMsg::Snap { .. } => "Snap",
            PeerMsg::Slicing(_) => "Slicing",
            PeerMsg::Unpark { .. } => "Unpark",
            PeerMsg::JobFile(_) => "JobFile",
        }
    }
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
    /// The slot it switched to.
    pub slot: u32,
    /// The generation of the table that slot is of.
    pub generation: u64,
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

/// What a host has used and has free, every couple of seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostUsage {
    /// CPU time (ms) each running VP has used.
    pub vps: Vec<(Tid, u64)>,
    /// Memory available on the host now (MiB), if known.
    pub free_memory_mb: Option<u64>,
    /// How busy its disks were since the last report (0..1: the busiest
    /// disk's share of time with I/O in flight), if known.
    pub io_busy: Option<f64>,
    /// Space free in its state directory (MiB), if known.
    pub state_free_mb: Option<u64>,
    /// Its state directory is full: an image could not be written there
    /// for lack of space (ENOSPC, EDQUOT), and no room was made since.
    pub state_full: bool,
    /// How long its daemon's loop turns take (`mig stats`).
    pub turns: LoopTurns,
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
    /// CPU (ms) every process of this host's VPs used since the owner came
    /// back (while they have the host, where it can be counted).
    pub vp_cpu_ms: Option<u64>,
    /// Seconds after which VPs of restartable jobs that cannot be moved
    /// are ended here and started again elsewhere (`[owner]
    /// vacate_after_s`; none: they stay stopped).
    pub vacate_after_s: Option<f64>,
}
