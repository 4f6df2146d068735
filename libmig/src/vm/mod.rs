//! Message passing for a VP: `Vm`, what a program gets from `Vm::init`.
//!
//! Every VP is started by its daemon with one end of a socket pair (its
//! number in `MIG_FD`); everything goes through it: messages (routed by the
//! daemons to wherever the receiver is), calls the master answers (spawn,
//! tasks, groups, notify), and direct links to VPs on the same host (the
//! daemon passes a socket pair's ends to both VPs; each side then adds a
//! ring in shared memory for what it sends, see `ring`).
//!
//! Order: every message carries a sequence number per sender→receiver pair,
//! and the receiver delivers each sender's messages in that order, whatever
//! route each took (daemons, or a direct link set up half-way). Nothing is
//! duplicated: a number already delivered is dropped.
//!
//! Errors: the first message to each receiver is confirmed by the local
//! daemon (which knows every VP's location), so sending to a VP that never
//! existed or has exited is an error at once. A later failure (the receiver
//! exited while messages were in flight) is reported by the next call.
//!
//! What the VP knows of each other VP (sequence numbers, confirmation,
//! direct link) is one `Peer` per Tid, in `peer`. What does not live here:
//! the collectives (`group`), the socket plumbing (`link`).
//!
//! ```no_run
//! use libmig::{MigError, Vm};
//!
//! fn main() -> Result<(), MigError> {
//!     let mut vm = Vm::init()?;
//!     let tasks = vm.tasks()?;
//!     if vm.tid() == tasks[0] {
//!         // VP 0 adds up what the others send.
//!         let mut sum = 0u64;
//!         for _ in 1..tasks.len() {
//!             sum += vm.recv(None, Some(1))?.decode::<u64>()?;
//!         }
//!         println!("sum {sum}");
//!     } else {
//!         let mine = u64::from(vm.identity().vp);
//!         vm.send(tasks[0], 1, &mine)?;
//!     }
//!     Ok(())
//! }
//! ```

mod pause;
mod peer;
mod recv;
mod send;
mod snapshot;

pub use pause::PAUSE_SIGNAL;

use std::collections::{HashMap, VecDeque};
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::de::DeserializeOwned;
use thiserror::Error;

use crate::frame::{self, FrameError, MAX_BODY};
use crate::link::Link;
use crate::msg::{Notice, NotifyOn, Tid, VpCall, VpMsg, VpRet, SYSTEM};
use crate::payload::Payload;
use crate::pool::{Inbox, Outbox};
use crate::vp::{env, Identity, NotAVp};
use peer::Peers;

/// The largest payload of one message: 64 MiB.
pub const MAX_MESSAGE: usize = 64 << 20;

/// What can go wrong in a VP's message passing.
#[derive(Debug, Error)]
pub enum MigError {
    /// Not started by a daemon.
    #[error(transparent)]
    NotAVp(#[from] NotAVp),
    /// The receiver does not exist (any more).
    #[error("message to t{to:x} (tag {tag}) not delivered: {reason}")]
    NoSuchVp {
        /// The receiver.
        to: Tid,
        /// The message's tag.
        tag: i32,
        /// Why.
        reason: String,
    },
    /// A payload above `MAX_MESSAGE`.
    #[error("message of {size} bytes is above the limit of {MAX_MESSAGE} bytes: split it")]
    TooLarge {
        /// Its size.
        size: usize,
    },
    /// The local daemon is gone (or its socket failed).
    #[error("lost the mig daemon: {0}")]
    DaemonGone(String),
    /// The daemon or the master refused a call.
    #[error("{0}")]
    Refused(String),
    /// A checkpoint could not be written or read back.
    #[error("checkpoint: {0}")]
    Restore(String),
    /// A payload did not decode as the type asked for.
    #[error("message payload does not decode as the expected type: {0}")]
    Decode(#[from] postcard::Error),
    /// The daemon sent something this library does not understand.
    #[error("protocol error: {0}")]
    Protocol(String),
}

impl From<FrameError> for MigError {
    fn from(e: FrameError) -> MigError {
        match e {
            FrameError::Io(e) => MigError::DaemonGone(e.to_string()),
            FrameError::Decode(e) => MigError::Decode(e),
            other => MigError::Protocol(other.to_string()),
        }
    }
}

/// A received message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Sender (`SYSTEM` for notices).
    pub from: Tid,
    /// Tag.
    pub tag: i32,
    /// Payload bytes (a large payload is the sender's memory mapped
    /// read-only, not a copy).
    pub data: Payload,
}

impl Message {
    /// Decode the payload of a typed `send`.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, MigError> {
        Ok(postcard::from_bytes(&self.data)?)
    }

    /// The notice this is, if it comes from the system.
    pub fn notice(&self) -> Option<Notice> {
        (self.from == SYSTEM)
            .then(|| postcard::from_bytes(&self.data).ok())
            .flatten()
    }
}

/// How messages to another VP travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Through the daemons (the default): VP → migd → (migd →) VP.
    Daemon,
    /// Straight to VPs on the same host over a socket of their own, set up
    /// on the first message; through the daemons for the others.
    Direct,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum LinkId {
    Daemon,
    Direct(Tid),
}

/// This VP's view of the virtual machine.
#[derive(Debug)]
pub struct Vm {
    me: Identity,
    parent: Option<Tid>,
    daemon: Link,
    /// The VPs this one has exchanged messages with: sequence numbers,
    /// confirmations, direct links.
    peers: Peers,
    route: Route,
    /// The program asked for the sockets to wait on them itself (`fds`):
    /// every frame a peer puts in a ring then wakes it through the socket.
    waits_outside: AtomicBool,
    /// Links a frame is being written to (innermost last), and frames for
    /// them that came up meanwhile (see `write`).
    writing: Vec<LinkId>,
    deferred: Vec<(LinkId, Vec<u8>, Option<std::os::fd::OwnedFd>)>,
    mailbox: VecDeque<Message>,
    failures: VecDeque<MigError>,
    returns: HashMap<u64, VpRet>,
    next_call: u64,
    spin: Duration,
    /// The links a wait spins on (kept: a wait allocates nothing).
    spin_links: (Vec<Tid>, Vec<Tid>),
    arrivals: u64,
    move_image_to: Option<String>,
    /// A job checkpoint in progress: its generation, where to write, and
    /// (once every VP has stopped) how much to take in from each peer.
    snap: Option<SnapState>,
    restored: bool,
    /// Bytes of unread messages restored with this VP and not yet taken
    /// (reported to the daemon as they go down: see `VpMsg::Backlog`).
    backlog: u64,
    /// Bytes of memfd payloads sent to the daemon and not yet passed on.
    fd_unacked: usize,
    /// Shared buffers for large messages sent, and mappings of peers'.
    outbox: Outbox,
    inbox: Inbox,
}

/// How many bytes of memfd payloads a VP may have with its daemon before it
/// waits for them to be passed on (its memory, not the daemon's, but a
/// receiver that cannot keep up must still hold the sender back).
const FD_WINDOW: usize = 64 << 20;

/// How long a sender waits for a pooled buffer of its own to come back
/// before it makes another (see `stage_for_daemon`).
const STAGE_WAIT: Duration = Duration::from_millis(100);

/// How long a send waits for the answer to a direct link it asked for.
const DIRECT_WAIT: Duration = Duration::from_millis(2);

/// A job checkpoint this VP takes part in.
#[derive(Debug)]
struct SnapState {
    id: u64,
    path: String,
    /// Set by `Now`: the last sequence number each peer sent here.
    expect: Option<Vec<(Tid, u64)>>,
    /// Paused has been said.
    paused: bool,
    /// The image is written and said: waiting for `Resume`.
    taken: bool,
}

/// Set by SIGUSR2, which the daemon sends with a move's or a job
/// checkpoint's order so that `safe_point` only looks at the socket when
/// there is something to see.
static ASKED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigusr2(_: libc::c_int) {
    ASKED.store(true, Ordering::Relaxed);
}

fn install_sigusr2() {
    // SAFETY: the handler only stores to an atomic (async-signal-safe);
    // SA_RESTART keeps blocking calls going.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigusr2 as extern "C" fn(libc::c_int) as libc::sighandler_t;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGUSR2, &sa, std::ptr::null_mut());
    }
}

impl Vm {
    /// Join the virtual machine as the VP the daemon started. Outside a VP
    /// (a program run by hand) this is a clear `NotAVp` error.
    pub fn init() -> Result<Vm, MigError> {
        let me = Identity::from_env()?;
        let fd: RawFd = std::env::var(env::FD)
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&fd| fd > 2)
            .ok_or(NotAVp(env::FD))?;
        if !is_unix_socket(fd) {
            return Err(NotAVp(env::FD).into());
        }
        // SAFETY: the daemon passed this descriptor for us alone, and we
        // checked it is an open Unix socket; nothing else in the process
        // owns it (the variable is removed so no second `init` takes it).
        let sock = unsafe { UnixStream::from_raw_fd(fd) };
        std::env::remove_var(env::FD);
        // Programs this VP runs must not inherit the daemon's socket.
        // SAFETY: fcntl on a descriptor we own.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        let parent = std::env::var(env::PARENT).ok().and_then(|v| v.parse().ok());
        Ok(Vm {
            me,
            parent,
            daemon: Link::new(sock).map_err(|e| MigError::DaemonGone(e.to_string()))?,
            peers: Peers::default(),
            route: Route::Daemon,
            waits_outside: AtomicBool::new(false),
            writing: Vec::new(),
            deferred: Vec::new(),
            mailbox: VecDeque::new(),
            failures: VecDeque::new(),
            returns: HashMap::new(),
            next_call: 1,
            spin: spin_from_env(),
            spin_links: (Vec::new(), Vec::new()),
            arrivals: 0,
            move_image_to: None,
            snap: None,
            restored: false,
            backlog: 0,
            fd_unacked: 0,
            outbox: Outbox::default(),
            inbox: Inbox::default(),
        }
        .with_handler())
    }

    fn with_handler(self) -> Vm {
        install_sigusr2();
        // A request to move may have come before the handler was there
        // (a VP asked to move as it starts): the first safe point looks.
        ASKED.store(true, Ordering::Relaxed);
        self
    }

    /// This VP's Tid.
    pub fn tid(&self) -> Tid {
        self.me.tid
    }

    /// The VP that spawned this one, if a VP did.
    pub fn parent(&self) -> Option<Tid> {
        self.parent
    }

    /// Who this VP is (job, index, host).
    pub fn identity(&self) -> &Identity {
        &self.me
    }

    /// The VPs this one has a direct link with.
    pub fn direct_peers(&self) -> Vec<Tid> {
        let mut v: Vec<Tid> = self.peers.linked().to_vec();
        v.sort_unstable();
        v
    }

    /// The sockets messages arrive on: the daemon's first, then each
    /// direct link's (for a program that waits on them itself; what libmig
    /// has already read waits in its mailbox).
    pub fn fds(&self) -> Vec<RawFd> {
        // Frames that peers put in rings do not make a socket readable:
        // from now on each wakes this VP through the socket as well.
        self.waits_outside.store(true, Ordering::Relaxed);
        for (_, l) in self.peers.links() {
            if let Some(rx) = &l.rx {
                rx.sleep();
            }
        }
        let mut v = vec![self.daemon.fd()];
        v.extend(
            self.direct_peers()
                .iter()
                .filter_map(|&t| self.peers.link(t))
                .map(Link::fd),
        );
        v
    }

    /// How messages to other VPs travel from now on.
    pub fn set_route(&mut self, route: Route) {
        self.route = route;
    }

    pub(crate) fn call(&mut self, call: VpCall) -> Result<VpRet, MigError> {
        let id = self.next_call;
        self.next_call += 1;
        let head = frame::encode_head(&VpMsg::Call { id, call }, 0)?;
        self.write(LinkId::Daemon, &[&head], None)?;
        loop {
            if let Some(r) = self.returns.remove(&id) {
                return match r {
                    VpRet::Error(e) => Err(MigError::Refused(e)),
                    r => Ok(r),
                };
            }
            self.wait_daemon()?;
        }
    }

    /// Start `n` more VPs of `program` with `args` in this VP's job (the
    /// scheduler places them: `new_VP`). Their Tids, in order.
    pub fn spawn(&mut self, program: &str, args: &[&str], n: u32) -> Result<Vec<Tid>, MigError> {
        self.spawn_as(program, args, n, false)
    }

    /// `spawn`, on hosts of architecture `arch` only (as `mig hosts`
    /// names them).
    pub fn spawn_on_arch(
        &mut self,
        program: &str,
        args: &[&str],
        n: u32,
        arch: &str,
    ) -> Result<Vec<Tid>, MigError> {
        self.spawn_call(VpCall::SpawnArch {
            program: program.to_string(),
            args: args.iter().map(|a| a.to_string()).collect(),
            n,
            arch: arch.to_string(),
        })
    }

    /// Start `n` VPs of `program` as a job of their own.
    pub fn spawn_job(
        &mut self,
        program: &str,
        args: &[&str],
        n: u32,
    ) -> Result<Vec<Tid>, MigError> {
        self.spawn_as(program, args, n, true)
    }

    fn spawn_as(
        &mut self,
        program: &str,
        args: &[&str],
        n: u32,
        new_job: bool,
    ) -> Result<Vec<Tid>, MigError> {
        self.spawn_call(VpCall::Spawn {
            program: program.to_string(),
            args: args.iter().map(|a| a.to_string()).collect(),
            n,
            new_job,
        })
    }

    /// A spawning call; the Tids it started.
    fn spawn_call(&mut self, call: VpCall) -> Result<Vec<Tid>, MigError> {
        match self.call(call)? {
            VpRet::Tids(t) => Ok(t),
            other => Err(unexpected(other)),
        }
    }

    /// Kill a VP.
    pub fn kill(&mut self, tid: Tid) -> Result<(), MigError> {
        self.call(VpCall::Kill { tid }).map(|_| ())
    }

    /// Spawn `n` VPs of `program` into this job on host `host` when the
    /// scheduler may put them there (one of its processors has room in the
    /// job's slots), else on hosts of its architecture; their Tids.
    pub fn spawn_on_host(
        &mut self,
        program: &str,
        args: &[&str],
        n: u32,
        host: &str,
    ) -> Result<Vec<Tid>, MigError> {
        self.spawn_call(VpCall::SpawnOn {
            program: program.to_string(),
            args: args.iter().map(|a| a.to_string()).collect(),
            n,
            host: host.to_string(),
        })
    }

    /// Send signal `signal` to the process of VP `tid`, on whichever host
    /// it runs (not SIGSTOP or SIGCONT).
    pub fn signal(&mut self, tid: Tid, signal: i32) -> Result<(), MigError> {
        self.call(VpCall::Signal { tid, signal }).map(|_| ())
    }

    /// The VPs of this job, by index (exited ones included).
    pub fn tasks(&mut self) -> Result<Vec<Tid>, MigError> {
        match self.call(VpCall::Tasks)? {
            VpRet::Tids(t) => Ok(t),
            other => Err(unexpected(other)),
        }
    }

    /// The virtual machine's hosts, as `mig hosts` lists them.
    pub fn hosts(&mut self) -> Result<Vec<crate::msg::HostInfo>, MigError> {
        match self.call(VpCall::Hosts)? {
            VpRet::Hosts(h) => Ok(h),
            other => Err(unexpected(other)),
        }
    }

    /// Every VP of the virtual machine, as `mig ps` lists them.
    pub fn ps(&mut self) -> Result<Vec<crate::msg::VpInfo>, MigError> {
        match self.call(VpCall::Ps)? {
            VpRet::Ps(v) => Ok(v),
            other => Err(unexpected(other)),
        }
    }

    /// A call to the mailbox the master keeps for PVM programs (see
    /// `VpCall::MboxPut` and the others); a reader asking to wait for an
    /// entry waits here.
    pub fn mailbox(&mut self, call: VpCall) -> Result<crate::msg::MboxReply, MigError> {
        match self.call(call)? {
            VpRet::Mbox(r) => Ok(r),
            other => Err(unexpected(other)),
        }
    }

    /// Be told, by a message from `SYSTEM` with `tag` (see
    /// `Message::notice`), when `on` happens. A VP that has already exited
    /// is reported at once.
    pub fn notify(&mut self, on: NotifyOn, tag: i32) -> Result<(), MigError> {
        self.call(VpCall::Notify { on, tag }).map(|_| ())
    }

    /// Leave the virtual machine: flush and close the daemon's socket. The
    /// process may go on (but can no longer send or receive).
    pub fn exit(self) {}
}

/// How long a VP looks for a message before it sleeps: `MIG_SPIN_US`
/// microseconds (default 50; 0 never spins).
fn spin_from_env() -> Duration {
    let us = std::env::var(env::SPIN_US)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50u64);
    Duration::from_micros(us.min(1_000_000))
}

fn matches(m: &Message, from: Option<Tid>, tag: Option<i32>) -> bool {
    from.is_none_or(|f| f == m.from) && tag.is_none_or(|t| t == m.tag)
}

pub(crate) fn unexpected(r: VpRet) -> MigError {
    MigError::Protocol(format!("unexpected answer {r:?}"))
}

fn is_unix_socket(fd: RawFd) -> bool {
    // SAFETY: fstat on any integer is safe; it fails on a closed descriptor.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(fd, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFSOCK
    }
}

const _: () = assert!(MAX_MESSAGE < MAX_BODY);
