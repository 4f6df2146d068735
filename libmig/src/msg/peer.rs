//! Daemon to daemon over TCP: `PeerMsg`, one enum per conversation, each
//! with the links it travels on; and what hosts report (slot tables,
//! switches, owners).
//!
//! | conversation | who to whom | on which link |
//! |---|---|---|
//! | [`Handshake`] | both ways | any, before anything else on it |
//! | [`ToMaster`] | a host to its master | the host's link to the master |
//! | [`ToHost`] | the master to a host | the same link (its own host: in place) |
//! | [`DataLink`] | host to host | their data link |
//! | [`Quorum`] | voters, a new master | data links |
//!
//! `PeerMsg::Part` carries pieces of a message too large for one frame on
//! any authenticated link; the pieces make a `PeerMsg` again.

use serde::{Deserialize, Serialize};

use super::control::{JobClass, JobInfo, LoopTurns, Request, Response};
use super::vp::{SnapStep, VpCall, VpRet};
use super::{Envelope, ExitInfo, HostFacts, Loc, StartVp, Stream, Tid};
use crate::auth::Block;

/// Daemon to daemon: what one frame on a TCP link between daemons says,
/// by the conversation it belongs to. Each side handles a conversation in
/// one place, and refuses one that has no business on the link it came on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum PeerMsg {
    /// Setting up a link: authentication, joining, saying what the link
    /// is. Nothing else is legal before `Welcome`.
    Handshake(Handshake),
    /// A host to its master, on its link to it.
    ToMaster(ToMaster),
    /// The master to a host, on the host's link to it.
    ToHost(ToHost),
    /// Host to host, on their data link.
    Data(DataLink),
    /// The voters that keep copies of the master's state, and a newly
    /// elected master, on data links.
    Quorum(Quorum),
    /// A piece of a message too large for one frame, on any authenticated
    /// link: its postcard bytes follow as the payload, in order; the last
    /// piece completes it.
    Part {
        /// This piece completes the message.
        last: bool,
    },
    /// Seed 002's negotiation between daemons, on data links.
    Bidding(Bidding),
    /// Seed 003's requests for work between daemons, on data links.
    Rate(Rate),
}

/// Setting up a link between two daemons: the dialler is the side that
/// connected, the acceptor the side that accepted. See `handshake` for
/// the order; `Refused` may also come on an established link, which then
/// closes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Handshake {
    /// Dialler, step 1: its nonce, and the first message of the Noise
    /// handshake that seals the link (`seal`), in cipher suite `suite`.
    Hello {
        /// Client nonce.
        nonce: Block,
        /// `seal::Suite` number.
        suite: u8,
        /// Noise message 1.
        noise: Vec<u8>,
    },
    /// Acceptor, step 2: its nonce and proof of the key, and the second
    /// Noise message. Every byte after `Proof` is sealed, both ways.
    Challenge {
        /// Server nonce.
        nonce: Block,
        /// `ClusterKey::server_proof`.
        proof: Block,
        /// Noise message 2.
        noise: Vec<u8>,
    },
    /// Dialler, step 3: proof of the key.
    Proof {
        /// `ClusterKey::client_proof`.
        proof: Block,
    },
    /// Acceptor, step 4: accepted.
    Welcome,
    /// Either side: it refuses; the connection closes.
    Refused {
        /// Why.
        reason: String,
    },
    /// Dialler, a daemon that holds a join token and not yet the key: the
    /// token's id, and the first Noise message of an exchange sealed with
    /// the token's key (`auth::JoinToken::psk`). Before authentication, in
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
    /// The master, sealed, after `JoinAnswer`: the cluster key; the link
    /// then closes.
    ClusterKeyIs {
        /// The key.
        key: crate::auth::Block,
    },
    /// A worker to its master, after `Welcome`: it joins afresh (or again,
    /// on its link, once it was fenced).
    Register {
        /// The worker's facts.
        facts: HostFacts,
    },
    /// A worker to a new master, after `Welcome`: I am host `facts.name`,
    /// still running the VPs you know of (unlike `Register`, which joins
    /// afresh).
    Attach {
        /// Its facts.
        facts: HostFacts,
    },
    /// The master to a worker, answering `Register` or `Attach`: the name
    /// it is known by.
    Registered {
        /// Host name (may differ from the one asked for if taken).
        name: String,
    },
    /// A worker to a daemon that tried to join it (`Register`,
    /// `JoinWithToken`): the master is at `addr`.
    Redirect {
        /// The master's address.
        addr: String,
    },
    /// A data link's dialler, after `Welcome`: who it is.
    Hi {
        /// Its host name.
        name: String,
    },
}

/// A host to its master, on its link to it (the master's own host hands
/// these to its master part in place).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToMaster {
    /// Periodically: the link is alive (the master answers with its own).
    Heartbeat,
    /// With every heartbeat: may I keep my VPs? The worker's lease runs
    /// from when it sent ask `n` (its own clock).
    LeaseAsk {
        /// The ask's number.
        n: u64,
    },
    /// A VP is running.
    Started {
        /// Which.
        tid: Tid,
        /// Its process id.
        pid: u32,
    },
    /// A VP ended.
    Exited {
        /// Which.
        tid: Tid,
        /// How.
        status: ExitInfo,
    },
    /// One line of a VP's output.
    Output {
        /// Which VP.
        tid: Tid,
        /// Which stream.
        stream: Stream,
        /// The line, without its newline.
        line: String,
        /// Its number among the lines this daemon sent (from 1): a worker
        /// keeps each line until the master says it took it, and sends it
        /// again on its next link; the master takes each number once.
        n: u64,
    },
    /// A control request of a local `mig`.
    Control {
        /// Worker-chosen id for the replies.
        id: u64,
        /// The request.
        req: Request,
        /// The local user who made it (from the socket's credentials).
        uid: u32,
    },
    /// A request of one of its VPs.
    VpCall {
        /// The VP.
        tid: Tid,
        /// Its id.
        id: u64,
        /// What.
        call: VpCall,
    },
    /// Where is this VP?
    Locate {
        /// Which.
        tid: Tid,
    },
    /// Its owner monitor's state (on every change and with each
    /// heartbeat).
    Owner(OwnerReport),
    /// `OwnerCommand` was carried out (VPs stopped or resumed).
    OwnerDone {
        /// The request's id.
        id: u64,
        /// What happened.
        message: String,
    },
    /// What its slicer did (with the heartbeat).
    Slicing(SliceReport),
    /// Every couple of seconds: the CPU time each of its running VPs has
    /// used, and what the host has free.
    Usage(HostUsage),
    /// A VP waiting on a taken-back host had its image written to its disk and
    /// its process ended (the owner gets the memory back).
    Parked {
        /// Which.
        tid: Tid,
    },
    /// One of its VPs can be moved (see `VpMsg::Movable`).
    Movable {
        /// The VP.
        tid: Tid,
    },
    /// Rate-of-Change (`migd --placement roc`): this host gives its VP
    /// `tid` to host `to`, which asked it for work: move it there.
    GiveAway {
        /// The VP.
        tid: Tid,
        /// The host that asked.
        to: String,
    },
    /// A move's source: the VP did not move.
    MigrateFailed {
        /// Which.
        tid: Tid,
        /// Why.
        reason: String,
    },
    /// Answering `Recall` (nothing of VP `tid` is left here: it is lost
    /// with the other host), or as a move's target whose image could not
    /// be taken in (the VP goes back to its source).
    Missing {
        /// The VP.
        tid: Tid,
        /// Why.
        reason: String,
    },
    /// A step of a job checkpoint from VP `tid`, relayed by its host.
    Snap {
        /// The VP.
        tid: Tid,
        /// The step.
        step: SnapReport,
    },
    /// It keeps a checked, durable copy of a job checkpoint's image (the
    /// VP's own host once the VP wrote it, or a host a copy was sent to).
    /// The master keeps only this: where each image is, its size and its
    /// sum; images never pass through it.
    ImageKept {
        /// Which image.
        image: ImageId,
        /// Its size in bytes.
        size: u64,
        /// Its checksum (CRC-32C of its body, as its preamble says).
        crc: u32,
    },
    /// `host` has no usable copy of `image` (it could not be written there,
    /// or read there to be sent, or sent there).
    ImageFailed {
        /// Which image.
        image: ImageId,
        /// The host without a copy.
        host: String,
        /// Why.
        reason: String,
    },
    /// Answering `CheckImage`: its copy of `image` is intact, or why not.
    ImageChecked {
        /// Which image.
        image: ImageId,
        /// Intact, or what is wrong.
        result: Result<(), String>,
    },
    /// The answer to call `id` of VP `tid` came back: the VP is not here
    /// to take it (it left, or its words were taken for its move). The
    /// master keeps it until the VP runs again, and sends it there.
    ReturnBack {
        /// The VP.
        tid: Tid,
        /// The call.
        id: u64,
        /// The answer.
        ret: VpRet,
    },
    /// After `Started`, for a VP rebuilt here from an image saved from
    /// outside: the calls to the master it still waits for (the image says
    /// so). Answers the master sent while it moved, which its old host
    /// may not have given it nor sent back (that host died), go to it.
    Waits {
        /// The VP.
        tid: Tid,
        /// Its calls.
        calls: Vec<u64>,
    },
}

/// The master to a host (a worker, on its link to the master; or the
/// master's own host, in place).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToHost {
    /// Answering a heartbeat, or telling a worker whose news it has not
    /// all read that the link is alive.
    Heartbeat {
        /// The number of the last line of output the master took from
        /// this worker (`ToMaster::Output::n`).
        lines: u64,
    },
    /// A worker it holds alive: ask `n` is granted for `ms` from when it
    /// was sent; after that the worker's VPs are frozen unless a later ask
    /// is granted.
    LeaseGrant {
        /// The ask's number.
        n: u64,
        /// The lease's length.
        ms: u64,
    },
    /// A reply to `ToMaster::Control` (several for streams).
    Reply {
        /// The id of the request.
        id: u64,
        /// The reply.
        resp: Response,
    },
    /// The answer for one of its VPs (to `ToMaster::VpCall`).
    VpReturn {
        /// The VP.
        tid: Tid,
        /// The call's id.
        id: u64,
        /// The answer.
        ret: VpRet,
    },
    /// Every host: the hosts and their addresses.
    Peers(Vec<(String, String)>),
    /// Every host: where VPs are now.
    Directory(Vec<(Tid, Loc)>),
    /// Every host: the voters, by id, and their hosts.
    Voters(Vec<(u64, String)>),
    /// Every host: these VPs' job went back to a checkpoint; drop their
    /// messages of an earlier incarnation than this.
    Fence {
        /// The job's VPs.
        tids: Vec<Tid>,
        /// Its incarnation from now on.
        incarnation: u32,
    },
    /// Start a VP.
    Start(StartVp),
    /// Kill a VP.
    Kill {
        /// Which.
        tid: Tid,
    },
    /// Bytes for a VP's standard input (see `Request::Input`).
    Input {
        /// The VP.
        tid: Tid,
        /// The bytes.
        data: Vec<u8>,
        /// Close its standard input after them.
        eof: bool,
    },
    /// Signal a VP's process (`VpCall::Signal`).
    Signal {
        /// The VP.
        tid: Tid,
        /// The signal number (checked with `signal_ok`).
        signal: i32,
    },
    /// Keep these VPs stopped whatever the slot table says (`hold`, their
    /// job is suspended), or let them run again.
    Hold {
        /// The VPs.
        tids: Vec<Tid>,
        /// Stop and hold them (`false`: release them).
        hold: bool,
    },
    /// Its slot table (takes effect at `from_ns`).
    SlotTable(SlotTable),
    /// The VP's host: move it out (its image written and sent to `start`'s
    /// target host `to`; `to` this host: parked on its disk).
    MoveOut {
        /// The target host.
        to: String,
        /// How the target starts it (the image is added).
        start: StartVp,
    },
    /// Start a parked VP again here from its image.
    Unpark {
        /// Which.
        tid: Tid,
    },
    /// The live end of a move whose other end died (the target it was
    /// going to, or the source it came from): run VP `tid` here from what
    /// this host still has of it (its process, if it had not yet written
    /// its image; the image it sent, kept until the VP ran there; the
    /// image that arrived whole), or answer `Missing`.
    Recall {
        /// The VP.
        tid: Tid,
    },
    /// `mig owner reclaim` (true) or `release` (false).
    OwnerCommand {
        /// The master's id for the request.
        id: u64,
        /// Reclaim or release.
        reclaim: bool,
    },
    /// A step of a job checkpoint for VP `tid`, which its host relays.
    Snap {
        /// The VP.
        tid: Tid,
        /// The step.
        step: SnapOrder,
    },
    /// A host keeping a copy of `image`: send it to `to` over your data
    /// link (`ImagePart`s) to keep there; or, with `start`, to start the
    /// VP from on `to` (`RestorePart`s; `to` may be this host).
    CopyImage {
        /// Which image.
        image: ImageId,
        /// The host that is to have it.
        to: String,
        /// Start the VP from it there (a restart), rather than keep it.
        start: Option<StartVp>,
    },
    /// A host keeping a copy of `image`: read it through and check it
    /// (before a restart relies on it); answer `ImageChecked`.
    CheckImage {
        /// Which image.
        image: ImageId,
    },
    /// Every host: of job `job`'s checkpoint images, keep only these
    /// generations (none: the job is gone).
    PruneImages {
        /// The job.
        job: String,
        /// Generations to keep.
        keep: Vec<u64>,
    },
    /// A worker it declared dead (its VPs are being started elsewhere):
    /// end every VP you hold, now, and leave. Also the answer to an
    /// `Attach` of such a worker.
    Fenced {
        /// Why, for the worker's log.
        why: String,
    },
    /// Kill every VP and exit.
    Halt,
}

/// Host to host, on their data link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum DataLink {
    /// A message between VPs (payload follows).
    Deliver(Envelope),
    /// Back to the sender's host: a message could not be delivered.
    Undeliverable {
        /// The message.
        env: Envelope,
        /// Why.
        reason: String,
    },
    /// A VP's image on its way to the host that starts it from it (a
    /// move's source, or a host keeping a copy of a job checkpoint's image
    /// when the job restarts): part of the image (the bytes follow raw);
    /// the first part says how to start it, the part that completes
    /// `total` bytes starts it.
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
    /// A move's source to its target: the image of VP `tid` being sent
    /// will not come whole (the VP could not write it, or the move was
    /// called off): drop what arrived.
    RestoreOff {
        /// The VP.
        tid: Tid,
    },
    /// Part of a job checkpoint's image being copied (the bytes follow
    /// raw), to keep; the part that completes `total` bytes completes it.
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
    /// Back to the one sending a copy of `image`: it is written here up to
    /// `upto` (the sender keeps at most a few parts ahead of what is
    /// written).
    ImageAck {
        /// Which image.
        image: ImageId,
        /// Bytes written from its start.
        upto: u64,
    },
}

/// The quorum: the voters that keep copies of the master's state and
/// elect a master when it is lost, and the master they elect, on data
/// links.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Quorum {
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
    /// The master to a host: you are voter `id` now (start an empty log
    /// and learn it from the master).
    Voter {
        /// Its voter id.
        id: u64,
    },
    /// The master to each other voter: what it keeps on disk about jobs
    /// for their users, copied as it keeps it (the changes of one batch of
    /// its decisions together), so that the voter elected next has the
    /// jobs' output and history too.
    JobFile(Vec<JobFileCopy>),
    /// A newly elected master to every host: attach to me (at `addr`). A
    /// host follows the announcement of the highest term.
    NewMaster {
        /// The term it was elected in.
        term: u64,
        /// Its host name.
        name: String,
        /// Its address.
        addr: String,
    },
}

/// A step of a job checkpoint, the master to VP `tid` through its host
/// (`ToHost::Snap`), which hands it on as a `SnapStep`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SnapOrder {
    /// Stop at the next safe point (the host adds where to write the
    /// image: `SnapStep::Begin`).
    Begin {
        /// The checkpoint's generation.
        id: u64,
    },
    /// Take in, from each peer, up to this sequence number, then write
    /// the image.
    Now {
        /// Generation.
        id: u64,
        /// (peer, last sequence number it sent here).
        expect: Vec<(Tid, u64)>,
    },
    /// Every image is taken; go on.
    Resume {
        /// Generation.
        id: u64,
    },
    /// The checkpoint was given up; go on.
    Abort {
        /// Generation.
        id: u64,
    },
}

/// A step of a job checkpoint, VP `tid` to the master through its host
/// (`ToMaster::Snap`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SnapReport {
    /// Stopped; the last sequence number sent to each peer.
    Paused {
        /// Generation.
        id: u64,
        /// (peer, last sequence number sent to it).
        sent: Vec<(Tid, u64)>,
    },
    /// Its image is written (the host keeps it: `ImageKept` follows).
    Taken {
        /// Generation.
        id: u64,
    },
    /// The image could not be written (its partial file is removed); the
    /// VP waits for `Abort` like the others.
    Failed {
        /// Generation.
        id: u64,
        /// Why (the host says when its state directory is full).
        reason: String,
    },
}

impl SnapOrder {
    /// The step as the VP takes it, `path` where to write its image.
    pub fn to_vp(self, path: impl FnOnce() -> String) -> SnapStep {
        match self {
            SnapOrder::Begin { id } => SnapStep::Begin { id, path: path() },
            SnapOrder::Now { id, expect } => SnapStep::Now { id, expect },
            SnapOrder::Resume { id } => SnapStep::Resume { id },
            SnapOrder::Abort { id } => SnapStep::Abort { id },
        }
    }
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

impl From<Handshake> for PeerMsg {
    fn from(m: Handshake) -> PeerMsg {
        PeerMsg::Handshake(m)
    }
}

impl From<ToMaster> for PeerMsg {
    fn from(m: ToMaster) -> PeerMsg {
        PeerMsg::ToMaster(m)
    }
}

impl From<ToHost> for PeerMsg {
    fn from(m: ToHost) -> PeerMsg {
        PeerMsg::ToHost(m)
    }
}

impl From<DataLink> for PeerMsg {
    fn from(m: DataLink) -> PeerMsg {
        PeerMsg::Data(m)
    }
}

impl From<Quorum> for PeerMsg {
    fn from(m: Quorum) -> PeerMsg {
        PeerMsg::Quorum(m)
    }
}

impl From<Bidding> for PeerMsg {
    fn from(m: Bidding) -> PeerMsg {
        PeerMsg::Bidding(m)
    }
}

/// A new job's placement asked of the daemons: seed 002's negotiation
/// (`migd --placement bidding`: the daemon where a job arrives asks every
/// other host for a bid and chooses among the bids by the paper's rules)
/// and seed 004's search for room (`nres`: it asks its neighbours, and they
/// theirs, for their free capacity, and maps the job by procedure Balance).
/// Each host answers from its own state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Bidding {
    /// Bid for this job (or say your room for it).
    Ask {
        /// The asker's number for this request (the bid quotes it).
        id: u64,
        /// The host where the job arrived (the bid goes there).
        origin: String,
        /// How many more times it is passed on to the neighbours of the
        /// host it reaches (0 under bidding, which asks every host).
        hops: u32,
        /// What the job needs.
        work: Work,
    },
    /// A host's answer to `Ask`, to its origin, from what it runs now.
    Bid {
        /// The request's number.
        id: u64,
        /// The bid.
        bid: Bid,
        /// The hosts it passed the request on to (their bids will come).
        forwarded: Vec<String>,
    },
}

/// What a job asking for bids needs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Work {
    /// Its VPs.
    pub vps: u32,
    /// Its class.
    pub class: JobClass,
    /// Memory each VP needs (MB).
    pub memory_mb: Option<u64>,
    /// The share of a host's I/O each VP needs (0..1).
    pub io: f64,
}

/// A host's bid: its state as it sees it, and the completion time it
/// estimates for one unit of the work under processor sharing (seed 002's
/// ETC), with the work's VPs added to those it runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bid {
    /// Processors it offers now (0 while its owner is back).
    pub processors: u32,
    /// One processor's relative speed.
    pub capacity: f64,
    /// The VPs it runs or is taking in.
    pub vps: u32,
    /// Memory a new VP may still have there (MB), if known.
    pub free_memory_mb: Option<u64>,
    /// The share of its I/O still free (0..1).
    pub free_io: f64,
    /// Its estimate of the completion time of one unit of the work.
    pub etc: f64,
}

impl From<Rate> for PeerMsg {
    fn from(m: Rate) -> PeerMsg {
        PeerMsg::Rate(m)
    }
}

/// Seed 003's Rate-of-Change between daemons (`migd --placement roc`): a
/// host about to run dry asks a source for work; a source gives its oldest
/// tasks, any other host passes the request on to the source it knows of.
/// Every message says its sender's load, which is how each host keeps its
/// own tables of sources and sinks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Rate {
    /// Send `amount` tasks to `asker`.
    Ask {
        /// The asker's number for the request (the answer quotes it).
        id: u64,
        /// The host that asked (a sink, whatever its load).
        asker: String,
        /// Tasks asked for.
        amount: u32,
        /// How many more hosts may pass it on.
        ttl: u32,
        /// The sender's load (tasks a processor).
        load: f64,
    },
    /// To the asker: `sent` tasks are on their way (0: nobody could help).
    Answer {
        /// The request's number.
        id: u64,
        /// Tasks given.
        sent: u32,
        /// The sender's load (tasks a processor).
        load: f64,
    },
}

impl Rate {
    /// The message's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Rate::Ask { .. } => "Ask",
            Rate::Answer { .. } => "Answer",
        }
    }
}

impl Bidding {
    /// The message's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Bidding::Ask { .. } => "Ask",
            Bidding::Bid { .. } => "Bid",
        }
    }
}

impl PeerMsg {
    /// The message's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            PeerMsg::Handshake(m) => m.name(),
            PeerMsg::Bidding(m) => m.name(),
            PeerMsg::Rate(m) => m.name(),
            PeerMsg::ToMaster(m) => m.name(),
            PeerMsg::ToHost(m) => m.name(),
            PeerMsg::Data(m) => m.name(),
            PeerMsg::Quorum(m) => m.name(),
            PeerMsg::Part { .. } => "Part",
        }
    }

    /// A message of the handshake, or (`Err`) the name of one of another
    /// conversation, which has no business on a link being set up.
    pub fn into_handshake(self) -> Result<Handshake, &'static str> {
        match self {
            PeerMsg::Handshake(m) => Ok(m),
            other @ (PeerMsg::ToMaster(_)
            | PeerMsg::ToHost(_)
            | PeerMsg::Data(_)
            | PeerMsg::Quorum(_)
            | PeerMsg::Bidding(_)
            | PeerMsg::Rate(_)
            | PeerMsg::Part { .. }) => Err(other.name()),
        }
    }
}

impl Handshake {
    /// The message's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Handshake::Hello { .. } => "Hello",
            Handshake::Challenge { .. } => "Challenge",
            Handshake::Proof { .. } => "Proof",
            Handshake::Welcome => "Welcome",
            Handshake::Refused { .. } => "Refused",
            Handshake::JoinWithToken { .. } => "JoinWithToken",
            Handshake::JoinAnswer { .. } => "JoinAnswer",
            Handshake::ClusterKeyIs { .. } => "ClusterKeyIs",
            Handshake::Register { .. } => "Register",
            Handshake::Attach { .. } => "Attach",
            Handshake::Registered { .. } => "Registered",
            Handshake::Redirect { .. } => "Redirect",
            Handshake::Hi { .. } => "Hi",
        }
    }
}

impl ToMaster {
    /// The message's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            ToMaster::Heartbeat => "Heartbeat",
            ToMaster::LeaseAsk { .. } => "LeaseAsk",
            ToMaster::Started { .. } => "Started",
            ToMaster::Exited { .. } => "Exited",
            ToMaster::Output { .. } => "Output",
            ToMaster::Control { .. } => "Control",
            ToMaster::VpCall { .. } => "VpCall",
            ToMaster::Locate { .. } => "Locate",
            ToMaster::Owner(_) => "Owner",
            ToMaster::OwnerDone { .. } => "OwnerDone",
            ToMaster::Slicing(_) => "Slicing",
            ToMaster::Usage(_) => "Usage",
            ToMaster::Parked { .. } => "Parked",
            ToMaster::Movable { .. } => "Movable",
            ToMaster::GiveAway { .. } => "GiveAway",
            ToMaster::MigrateFailed { .. } => "MigrateFailed",
            ToMaster::Missing { .. } => "Missing",
            ToMaster::Snap { .. } => "Snap",
            ToMaster::ImageKept { .. } => "ImageKept",
            ToMaster::ImageFailed { .. } => "ImageFailed",
            ToMaster::ImageChecked { .. } => "ImageChecked",
            ToMaster::ReturnBack { .. } => "ReturnBack",
            ToMaster::Waits { .. } => "Waits",
        }
    }

    /// Is it said again soon whatever happens (a heartbeat, a periodic
    /// report), so that one not sent may be dropped?
    pub fn is_periodic(&self) -> bool {
        match self {
            ToMaster::Heartbeat
            | ToMaster::LeaseAsk { .. }
            | ToMaster::Owner(_)
            | ToMaster::Slicing(_)
            | ToMaster::Usage(_) => true,
            ToMaster::Started { .. }
            | ToMaster::GiveAway { .. }
            | ToMaster::Exited { .. }
            | ToMaster::Output { .. }
            | ToMaster::Control { .. }
            | ToMaster::VpCall { .. }
            | ToMaster::Locate { .. }
            | ToMaster::OwnerDone { .. }
            | ToMaster::Parked { .. }
            | ToMaster::Movable { .. }
            | ToMaster::MigrateFailed { .. }
            | ToMaster::Missing { .. }
            | ToMaster::Snap { .. }
            | ToMaster::ImageKept { .. }
            | ToMaster::ImageFailed { .. }
            | ToMaster::ImageChecked { .. }
            | ToMaster::ReturnBack { .. }
            | ToMaster::Waits { .. } => false,
        }
    }
}

impl ToHost {
    /// The message's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            ToHost::Heartbeat { .. } => "Heartbeat",
            ToHost::LeaseGrant { .. } => "LeaseGrant",
            ToHost::Reply { .. } => "Reply",
            ToHost::VpReturn { .. } => "VpReturn",
            ToHost::Peers(_) => "Peers",
            ToHost::Directory(_) => "Directory",
            ToHost::Voters(_) => "Voters",
            ToHost::Fence { .. } => "Fence",
            ToHost::Start(_) => "Start",
            ToHost::Kill { .. } => "Kill",
            ToHost::Input { .. } => "Input",
            ToHost::Signal { .. } => "Signal",
            ToHost::Hold { .. } => "Hold",
            ToHost::SlotTable(_) => "SlotTable",
            ToHost::MoveOut { .. } => "MoveOut",
            ToHost::Unpark { .. } => "Unpark",
            ToHost::Recall { .. } => "Recall",
            ToHost::OwnerCommand { .. } => "OwnerCommand",
            ToHost::Snap { .. } => "Snap",
            ToHost::CopyImage { .. } => "CopyImage",
            ToHost::CheckImage { .. } => "CheckImage",
            ToHost::PruneImages { .. } => "PruneImages",
            ToHost::Fenced { .. } => "Fenced",
            ToHost::Halt => "Halt",
        }
    }
}

impl DataLink {
    /// The message's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            DataLink::Deliver(_) => "Deliver",
            DataLink::Undeliverable { .. } => "Undeliverable",
            DataLink::RestorePart { .. } => "RestorePart",
            DataLink::RestoreOff { .. } => "RestoreOff",
            DataLink::ImagePart { .. } => "ImagePart",
            DataLink::ImageAck { .. } => "ImageAck",
        }
    }
}

impl Quorum {
    /// The message's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Quorum::Consensus { .. } => "Consensus",
            Quorum::Voter { .. } => "Voter",
            Quorum::JobFile(_) => "JobFile",
            Quorum::NewMaster { .. } => "NewMaster",
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
