//! A VP and its daemon, over the socket the daemon hands the VP when it
//! starts it: `VpMsg` both ways (each variant says which way), the calls a
//! VP makes of the master and their answers, the notices it gets, and the
//! steps of a job checkpoint.

use serde::{Deserialize, Serialize};

use super::{Envelope, ExitInfo, Tid};

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
    /// The virtual machine's hosts (as `mig hosts` lists them).
    Hosts,
    /// Every VP (as `mig ps` lists them).
    Ps,
    /// Put an entry in the mailbox (PVM's `pvm_putinfo`).
    MboxPut {
        /// Its class.
        name: String,
        /// PVM's `PvmMbox*` flags (an index above them).
        flags: u32,
        /// The message's bytes.
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// Read an entry (`pvm_recvinfo`).
    MboxGet {
        /// Its class.
        name: String,
        /// Its index.
        index: u32,
        /// PVM's flags.
        flags: u32,
    },
    /// Delete an entry (`pvm_delinfo`).
    MboxDel {
        /// Its class.
        name: String,
        /// Its index.
        index: u32,
    },
    /// The classes matching a pattern (`pvm_getmboxinfo`).
    MboxList {
        /// `*` and `?` as in a shell.
        pattern: String,
    },
    /// `Spawn` in the caller's job, on hosts of one architecture only.
    SpawnArch {
        /// Program path or name.
        program: String,
        /// Arguments.
        args: Vec<String>,
        /// How many.
        n: u32,
        /// The architecture (as `mig hosts` names them).
        arch: String,
    },
    /// Send signal `signal` to the process of VP `tid`, wherever it runs
    /// (a VP of the caller's user; not SIGSTOP or SIGCONT, which are the
    /// gang scheduler's).
    Signal {
        /// The VP.
        tid: Tid,
        /// The signal number.
        signal: i32,
    },
    /// `Spawn` in the caller's job, on host `host` when the scheduler may
    /// put them there (one of its processors has room in the job's slots),
    /// else on hosts of its architecture.
    SpawnOn {
        /// Program path or name.
        program: String,
        /// Arguments.
        args: Vec<String>,
        /// How many.
        n: u32,
        /// The host (as `mig hosts` names them).
        host: String,
    },
}

/// May a VP send `signal` to another with `VpCall::Signal`?
pub fn signal_ok(signal: i32) -> bool {
    (1..=64).contains(&signal) && signal != libc::SIGSTOP && signal != libc::SIGCONT
}

/// Why the mailbox refused a call (PVM's codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MboxRefusal {
    /// No such entry (`PvmNotFound`).
    NotFound,
    /// Not the caller's to change (`PvmDenied`).
    Denied,
    /// A bad name or an entry too large (`PvmBadParam`).
    BadParam,
}

/// A mailbox class: its name and entries (index, owner, flags).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MboxClass {
    /// Its name.
    pub name: String,
    /// Its entries.
    pub entries: Vec<(u32, Tid, u32)>,
}

/// The mailbox's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MboxReply {
    /// Put at this index.
    Put(u32),
    /// An entry read: its bytes and owner.
    Entry {
        /// The message's bytes.
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
        /// Who put it.
        owner: Tid,
    },
    /// Deleted.
    Deleted,
    /// The classes asked for.
    Classes(Vec<MboxClass>),
    /// Refused.
    Refused(MboxRefusal),
}

/// The master's answer to a `VpCall`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// The hosts.
    Hosts(Vec<super::control::HostInfo>),
    /// The VPs.
    Ps(Vec<super::control::VpInfo>),
    /// The mailbox's answer.
    Mbox(MboxReply),
}

/// A VP and its daemon.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
        /// The buffer is the daemon's own (informational: a VP reads every
        /// pooled buffer in place, its own sender's too, until the payload
        /// is dropped).
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
    /// Daemon → VP: at your next safe point, write your image to `path`,
    /// answer `ImageWritten` and end (you are moving).
    WriteImage {
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
    /// VP → daemon: the image it moves with is written.
    ImageWritten {
        /// Where.
        path: String,
    },
    /// VP → daemon: the image could not be written (its partial file is
    /// removed); the VP goes on where it is.
    ImageNotWritten {
        /// Why.
        reason: String,
        /// For lack of space (ENOSPC, EDQUOT).
        no_space: bool,
    },
    /// Daemon → VP: a direct link to `peer` (the socket travels with this
    /// frame as SCM_RIGHTS), or why there is none.
    DirectLink {
        /// The other VP.
        peer: Tid,
        /// `None`: the socket is attached; `Some(reason)`: no link.
        refused: Option<String>,
    },
    /// VP → daemon, once at start: it can be moved (its program keeps its
    /// state through libmig's `init_or_restore` and reaches safe points). A
    /// VP that never says so is never resumed to be moved.
    Movable,
    /// VP → daemon: before a long pause (its host's owner is back), send
    /// `signal` to this VP's process and let it run on for up to the host's
    /// `quiesce_ms` (until it says `Quiesced`) before it is stopped.
    PauseNotice {
        /// The signal it wants (1..=64, not SIGKILL, SIGSTOP or SIGCONT).
        signal: i32,
    },
    /// VP → daemon: after a pause notice, it is ready: stop it now.
    Quiesced,
    /// VP → daemon: unread messages it holds from before its last move
    /// (restored with it) come to `bytes` now; past the high mark its
    /// senders wait until it has read them down (flow control counts what
    /// a moved VP carries, not only what waits in sockets).
    Backlog {
        /// How many bytes.
        bytes: u64,
    },
    /// VP → VP over a direct link: the ring in shared memory (`ring`, its
    /// descriptor passed with this frame) that this side's frames take
    /// from now on, when they fit.
    Ring {
        /// Its size in bytes.
        bytes: u64,
    },
    /// VP → VP over a direct link: look in the ring (its receiver was
    /// about to sleep).
    Wake,
}

/// May `signal` be asked for as a pause notice? Not one that kills,
/// stops or continues a process outright, nor an unknown one.
pub fn pause_signal_ok(signal: i32) -> bool {
    (1..=64).contains(&signal) && ![libc::SIGKILL, libc::SIGSTOP, libc::SIGCONT].contains(&signal)
}

impl VpMsg {
    /// The message's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            VpMsg::Send { .. } => "Send",
            VpMsg::SendFd { .. } => "SendFd",
            VpMsg::Consumed { .. } => "Consumed",
            VpMsg::Call { .. } => "Call",
            VpMsg::Direct { .. } => "Direct",
            VpMsg::Deliver(_) => "Deliver",
            VpMsg::DeliverFd { .. } => "DeliverFd",
            VpMsg::Confirmed { .. } => "Confirmed",
            VpMsg::Undeliverable { .. } => "Undeliverable",
            VpMsg::Return { .. } => "Return",
            VpMsg::Credit { .. } => "Credit",
            VpMsg::Backlog { .. } => "Backlog",
            VpMsg::WriteImage { .. } => "WriteImage",
            VpMsg::StayPut => "StayPut",
            VpMsg::Snap(_) => "Snap",
            VpMsg::Written { .. } => "Written",
            VpMsg::ImageWritten { .. } => "ImageWritten",
            VpMsg::ImageNotWritten { .. } => "ImageNotWritten",
            VpMsg::DirectLink { .. } => "DirectLink",
            VpMsg::Movable => "Movable",
            VpMsg::PauseNotice { .. } => "PauseNotice",
            VpMsg::Quiesced => "Quiesced",
            VpMsg::Ring { .. } => "Ring",
            VpMsg::Wake => "Wake",
        }
    }
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
    /// VP → its host → master: the image could not be written (its
    /// partial file is removed); the VP waits for `Abort` like the others.
    Failed {
        /// Generation.
        id: u64,
        /// Why.
        reason: String,
        /// For lack of space (ENOSPC, EDQUOT).
        no_space: bool,
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
