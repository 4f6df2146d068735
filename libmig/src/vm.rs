//! Message passing for a VP: `Vm`, what a program gets from `Vm::init`.
//!
//! Every VP is started by its daemon with one end of a socket pair (its
//! number in `MIG_FD`); everything goes through it: messages (routed by the
//! daemons to wherever the receiver is), calls the master answers (spawn,
//! tasks, groups, notify), and direct links to VPs on the same host (the
//! daemon passes a socket pair's ends to both VPs).
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
//! What does not live here: the collectives (`group`), the socket plumbing
//! (`link`).
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

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::io;
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::{de::DeserializeOwned, Serialize};
use thiserror::Error;

use crate::checkpoint::{Header, LibState, Unread};
use crate::frame::{self, FrameError, MAX_BODY};
use crate::link::{self, Link};
use crate::msg::{Envelope, Notice, NotifyOn, SnapStep, Tid, VpCall, VpMsg, VpRet, SYSTEM};
use crate::payload::{Payload, FD_PAYLOAD};
use crate::pool::{Inbox, Outbox};
use crate::vp::{env, Identity, NotAVp};

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

#[derive(Debug, Default)]
struct Order {
    next: u64,
    early: BTreeMap<u64, Message>,
}

/// This VP's view of the virtual machine.
#[derive(Debug)]
pub struct Vm {
    me: Identity,
    parent: Option<Tid>,
    daemon: Link,
    direct: HashMap<Tid, Link>,
    route: Route,
    asked_direct: HashSet<Tid>,
    mailbox: VecDeque<Message>,
    order: HashMap<Tid, Order>,
    seq_out: HashMap<Tid, u64>,
    confirmed: HashSet<Tid>,
    confirm: HashMap<Tid, Result<(), String>>,
    confirm_pending: HashSet<Tid>,
    failures: VecDeque<MigError>,
    returns: HashMap<u64, VpRet>,
    next_call: u64,
    spin: Duration,
    arrivals: u64,
    checkpoint_to: Option<String>,
    /// A job checkpoint in progress: its generation, where to write, and
    /// (once every VP has stopped) how much to take in from each peer.
    snap: Option<SnapState>,
    restored: bool,
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

/// Set by SIGUSR2, which the daemon sends with a checkpoint request so that
/// `safe_point` only looks at the socket when there is something to see.
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
            direct: HashMap::new(),
            route: Route::Daemon,
            asked_direct: HashSet::new(),
            mailbox: VecDeque::new(),
            order: HashMap::new(),
            seq_out: HashMap::new(),
            confirmed: HashSet::new(),
            confirm: HashMap::new(),
            confirm_pending: HashSet::new(),
            failures: VecDeque::new(),
            returns: HashMap::new(),
            next_call: 1,
            spin: spin_from_env(),
            arrivals: 0,
            checkpoint_to: None,
            snap: None,
            restored: false,
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

    /// Join the virtual machine, fresh or resumed: a VP restarted from a
    /// checkpoint (after a migration) gets the state it saved and its
    /// unread messages back; otherwise `fresh()` makes the state.
    pub fn init_or_restore<S: DeserializeOwned>(
        fresh: impl FnOnce() -> S,
    ) -> Result<(Vm, S), MigError> {
        let mut vm = Vm::init()?;
        let Some(path) = std::env::var_os(env::RESTORE) else {
            return Ok((vm, fresh()));
        };
        let path = std::path::PathBuf::from(path);
        let mapped = crate::checkpoint::map(&path).map_err(|e| MigError::Restore(e.to_string()))?;
        let summed = std::env::var_os(env::RESTORE_SUMMED).is_some_and(|v| v == "1");
        let image = if summed {
            crate::checkpoint::ImageRef::decode_summed(&mapped)
        } else {
            crate::checkpoint::ImageRef::decode(&mapped)
        }
        .map_err(|e| MigError::Restore(e.to_string()))?;
        if image.header.tid != vm.me.tid {
            return Err(MigError::Restore(format!(
                "the image at {} is of t{:x}, not t{:x}",
                path.display(),
                image.header.tid,
                vm.me.tid
            )));
        }
        let state = postcard::from_bytes(image.state)?;
        let lib = image.lib;
        vm.mailbox = lib
            .mailbox
            .into_iter()
            .map(|u| Message {
                from: u.from,
                tag: u.tag,
                data: u.data.into(),
            })
            .collect();
        vm.seq_out = lib.seq_out.into_iter().collect();
        for (from, next) in lib.seq_in {
            vm.order.insert(
                from,
                Order {
                    next,
                    early: BTreeMap::new(),
                },
            );
        }
        for u in lib.early {
            let o = vm.order.entry(u.from).or_insert(Order {
                next: 1,
                early: BTreeMap::new(),
            });
            o.early.insert(
                u.seq,
                Message {
                    from: u.from,
                    tag: u.tag,
                    data: u.data.into(),
                },
            );
        }
        // Unmapping and deleting a large image takes milliseconds the
        // program need not wait for.
        let file = path.clone();
        let release = move || {
            drop(mapped);
            let _ = std::fs::remove_file(&file);
        };
        if std::thread::Builder::new()
            .name("mig-release".into())
            .spawn(release)
            .is_err()
        {
            // No thread (the mapping went with the closure): here, then.
            let _ = std::fs::remove_file(&path);
        }
        std::env::remove_var(env::RESTORE);
        std::env::remove_var(env::RESTORE_SUMMED);
        vm.restored = true;
        Ok((vm, state))
    }

    /// Was this VP restarted from a checkpoint?
    pub fn restored(&self) -> bool {
        self.restored
    }

    /// A safe point: cheap unless the daemon has asked this VP to move, in
    /// which case it writes `state` and its unread messages to a checkpoint
    /// image and ends; the VP goes on elsewhere from `init_or_restore`.
    pub fn safe_point<S: Serialize>(&mut self, state: &S) -> Result<(), MigError> {
        if ASKED.swap(false, Ordering::Relaxed) {
            self.pump(LinkId::Daemon, false)?;
        }
        while self.snap.as_ref().is_some_and(|s| !s.paused) {
            self.join_snapshot(state)?;
        }
        if self.checkpoint_to.is_some() {
            self.checkpoint_and_end(state)?;
        }
        Ok(())
    }

    /// Take part in a job checkpoint: stop here, say what was sent, take
    /// in what the peers sent, write the image, wait until every VP has.
    /// The program's code does not run meanwhile, so it sends nothing.
    fn join_snapshot<S: Serialize>(&mut self, state: &S) -> Result<(), MigError> {
        let Some(id) = self.snap.as_ref().map(|s| s.id) else {
            return Ok(());
        };
        let sent: Vec<(Tid, u64)> = self.seq_out.iter().map(|(&t, &n)| (t, n)).collect();
        self.tell(VpMsg::Snap(SnapStep::Paused { id, sent }))?;
        if let Some(s) = &mut self.snap {
            s.paused = true;
        }
        loop {
            // Resumed or given up, and perhaps already asked for the next
            // one (both read at once): that one starts at the next safe point.
            let Some(snap) = self.snap.as_ref().filter(|s| s.id == id) else {
                return Ok(());
            };
            if !snap.taken {
                let all_in = snap.expect.as_ref().is_some_and(|e| {
                    e.iter()
                        .all(|&(p, n)| n == 0 || self.order.get(&p).is_some_and(|o| o.next > n))
                });
                if all_in {
                    let path = snap.path.clone();
                    self.write_image(state, &path, false)?;
                    if let Some(s) = &mut self.snap {
                        s.taken = true;
                    }
                    self.tell(VpMsg::Snap(SnapStep::Taken { id, path }))?;
                    continue;
                }
            }
            self.wait_io(None, None)?;
        }
    }

    /// Say something to the daemon.
    fn tell(&mut self, msg: VpMsg) -> Result<(), MigError> {
        let head = frame::encode_head(&msg, 0)?;
        self.write(LinkId::Daemon, &[&head], None)
    }

    /// `recv` that is also a safe point: while it waits, a request to move
    /// is carried out with `state` (so a VP blocked in a receive never holds
    /// a migration up).
    pub fn recv_safe<S: Serialize>(
        &mut self,
        state: &S,
        from: Option<Tid>,
        tag: Option<i32>,
    ) -> Result<Message, MigError> {
        loop {
            while self.snap.as_ref().is_some_and(|s| !s.paused) {
                self.join_snapshot(state)?;
            }
            if self.checkpoint_to.is_some() {
                self.checkpoint_and_end(state)?;
            }
            if let Some(m) = self.take(from, tag)? {
                return Ok(m);
            }
            self.wait_io(None, None)?;
        }
    }

    /// Write this VP's checkpoint image of `state` to `path` (not durably:
    /// it carries the VP to its next host or is copied on by its daemon):
    /// who it is and how to start it, `state`, unread messages and the
    /// sequence numbers. The state is encoded straight into the file; with
    /// `tell`, the daemon hears how far the write has come every few
    /// megabytes (`VpMsg::Written`) and sends the image on meanwhile.
    fn write_image<S: Serialize>(
        &mut self,
        state: &S,
        path: &str,
        tell: bool,
    ) -> Result<(), MigError> {
        let mut args = std::env::args();
        let program = args.next().unwrap_or_default();
        let unread = |from: Tid, tag: i32, seq: u64, data: &Payload| Unread {
            from,
            tag,
            seq,
            data: data.to_vec(),
        };
        let header = Header {
            tid: self.me.tid,
            job: self.me.job.clone(),
            vp: self.me.vp,
            program,
            args: args.collect(),
            cwd: std::env::current_dir()
                .map(|d| d.display().to_string())
                .unwrap_or_default(),
            env: Vec::new(),
        };
        let lib = LibState {
            mailbox: self
                .mailbox
                .iter()
                .map(|m| unread(m.from, m.tag, 0, &m.data))
                .collect(),
            early: self
                .order
                .values()
                .flat_map(|o| o.early.iter())
                .map(|(&seq, m)| unread(m.from, m.tag, seq, &m.data))
                .collect(),
            seq_out: self.seq_out.iter().map(|(&t, &n)| (t, n)).collect(),
            seq_in: self.order.iter().map(|(&t, o)| (t, o.next)).collect(),
        };
        let daemon = &mut self.daemon;
        let mut written = |file: &std::path::Path, upto: u64| {
            let msg = VpMsg::Written {
                path: file.display().to_string(),
                upto,
            };
            let Ok(head) = frame::encode_head(&msg, 0) else {
                return;
            };
            // A progress report only: if the daemon is gone, the end of the
            // checkpoint says so.
            let mut done = 0;
            while let Ok(false) = daemon.write_parts(&[&head], None, &mut done) {
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
        };
        let progress: Option<crate::checkpoint::OnProgress<'_>> =
            if tell { Some(&mut written) } else { None };
        crate::checkpoint::write_state(
            std::path::Path::new(path),
            &header,
            state,
            &lib,
            false,
            progress,
        )
        .map_err(|e| MigError::Restore(e.to_string()))
    }

    /// Write the checkpoint image and end the process (it only returns an
    /// error).
    fn checkpoint_and_end<S: Serialize>(&mut self, state: &S) -> Result<(), MigError> {
        let Some(path) = self.checkpoint_to.clone() else {
            return Ok(());
        };
        // Direct links: stop peers writing (they fall back to the daemons,
        // which hold messages for a moving VP), then take in what is queued.
        let peers: Vec<Tid> = self.direct.keys().copied().collect();
        for t in &peers {
            if let Some(l) = self.direct.get(t) {
                let _ = l.sock.shutdown(std::net::Shutdown::Read);
            }
            self.pump(LinkId::Direct(*t), false)?;
        }
        self.direct.clear();
        self.pump(LinkId::Daemon, false)?;
        // The daemon sends the image on as it is written.
        self.write_image(state, &path, true)?;
        let head = frame::encode_head(&VpMsg::Checkpointed { path }, 0)?;
        self.write(LinkId::Daemon, &[&head], None)?;
        // The process ends here without unwinding: what it printed goes out.
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        std::process::exit(0)
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
        let mut v: Vec<Tid> = self.direct.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// How messages to other VPs travel from now on.
    pub fn set_route(&mut self, route: Route) {
        self.route = route;
    }

    // ----- sending ------------------------------------------------------

    /// Send a typed value (postcard-encoded) to `to` with `tag`.
    pub fn send<T: Serialize + ?Sized>(
        &mut self,
        to: Tid,
        tag: i32,
        value: &T,
    ) -> Result<(), MigError> {
        let bytes = postcard::to_allocvec(value)?;
        self.send_bytes(to, tag, &bytes)
    }

    /// Send raw bytes to `to` with `tag` (written straight from `data`).
    pub fn send_bytes(&mut self, to: Tid, tag: i32, data: &[u8]) -> Result<(), MigError> {
        if data.len() > MAX_MESSAGE {
            return Err(MigError::TooLarge { size: data.len() });
        }
        if let Some(e) = self.failures.pop_front() {
            return Err(e);
        }
        let first = !self.confirmed.contains(&to);
        let seq = {
            let s = self.seq_out.entry(to).or_insert(0);
            *s += 1;
            *s
        };
        let env = Envelope {
            from: self.me.tid,
            to,
            tag,
            seq,
            incarnation: self.me.incarnation,
        };
        let via = if self.direct.contains_key(&to) && !first {
            LinkId::Direct(to)
        } else {
            LinkId::Daemon
        };
        if first {
            self.confirm_pending.insert(to);
        }
        // Large payloads go as a descriptor of a shared buffer (the daemon
        // passes it on instead of copying): through the daemon, within the
        // window of bytes it has not yet passed on; over a direct link,
        // while the pool has a buffer for it (else as bytes, which the
        // link's socket holds back).
        let payload_len = data.len();
        let memfd = match via {
            _ if payload_len < FD_PAYLOAD => None,
            LinkId::Daemon => {
                while self.fd_unacked > 0 && self.fd_unacked + data.len() > FD_WINDOW {
                    self.wait_io(None, None)?;
                }
                Some(self.outbox.stage(to, data))
            }
            LinkId::Direct(_) => self.outbox.try_stage(to, data),
        }
        .transpose()
        .map_err(|e| MigError::DaemonGone(format!("memfd: {e}")))?;
        let (head, data) = match &memfd {
            Some(_) => {
                let len = data.len() as u64;
                let head = frame::encode_head(
                    &VpMsg::SendFd {
                        env,
                        confirm: first,
                        len,
                    },
                    0,
                )?;
                (head, &[][..])
            }
            None => {
                let msg = VpMsg::Send {
                    env,
                    confirm: first,
                };
                (frame::encode_head(&msg, data.len())?, data)
            }
        };
        if memfd.is_some() && via == LinkId::Daemon {
            self.fd_unacked += payload_len;
        }
        if let Err(e) = self.write(via, &[&head, data], memfd.as_ref()) {
            if via == LinkId::Daemon {
                return Err(e);
            }
            // The direct link broke (the peer ended?): the daemons decide.
            self.direct.remove(&to);
            let head = match &memfd {
                Some(_) => {
                    let len = payload_len as u64;
                    frame::encode_head(
                        &VpMsg::SendFd {
                            env,
                            confirm: true,
                            len,
                        },
                        0,
                    )?
                }
                None => frame::encode_head(&VpMsg::Send { env, confirm: true }, data.len())?,
            };
            self.confirmed.remove(&to);
            self.confirm_pending.insert(to);
            if memfd.is_some() {
                self.fd_unacked += payload_len;
            }
            self.write(LinkId::Daemon, &[&head, data], memfd.as_ref())?;
            return self.await_confirm(to, tag, seq);
        }
        if first {
            self.await_confirm(to, tag, seq)?;
        }
        if self.route == Route::Direct
            && !self.direct.contains_key(&to)
            && self.asked_direct.insert(to)
        {
            let head = frame::encode_head(&VpMsg::Direct { peer: to }, 0)?;
            self.write(LinkId::Daemon, &[&head], None)?;
        }
        Ok(())
    }

    fn await_confirm(&mut self, to: Tid, tag: i32, seq: u64) -> Result<(), MigError> {
        loop {
            if let Some(r) = self.confirm.remove(&to) {
                return match r {
                    Ok(()) => {
                        self.confirmed.insert(to);
                        Ok(())
                    }
                    Err(reason) => {
                        // The message was not sent: its number is free again.
                        if let Some(s) = self.seq_out.get_mut(&to) {
                            if *s == seq {
                                *s -= 1;
                            }
                        }
                        Err(MigError::NoSuchVp { to, tag, reason })
                    }
                };
            }
            self.wait_daemon()?;
        }
    }

    /// Send the same typed value to every VP in `to`.
    pub fn mcast<T: Serialize + ?Sized>(
        &mut self,
        to: &[Tid],
        tag: i32,
        value: &T,
    ) -> Result<(), MigError> {
        let bytes = postcard::to_allocvec(value)?;
        self.mcast_bytes(to, tag, &bytes)
    }

    /// Send the same bytes to every VP in `to`.
    pub fn mcast_bytes(&mut self, to: &[Tid], tag: i32, data: &[u8]) -> Result<(), MigError> {
        for &t in to {
            self.send_bytes(t, tag, data)?;
        }
        Ok(())
    }

    fn write(
        &mut self,
        via: LinkId,
        parts: &[&[u8]],
        fd: Option<&std::os::fd::OwnedFd>,
    ) -> Result<(), MigError> {
        let mut done = 0;
        loop {
            let link = match via {
                LinkId::Daemon => &mut self.daemon,
                LinkId::Direct(t) => match self.direct.get_mut(&t) {
                    Some(l) => l,
                    None => return Err(MigError::DaemonGone("direct link closed".into())),
                },
            };
            match link.write_parts(parts, fd, &mut done) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => return Err(MigError::DaemonGone(e.to_string())),
            }
            // The socket is full: take in what arrives meanwhile, so two VPs
            // sending to each other never block each other.
            self.wait_io(Some(via), None)?;
        }
    }

    // ----- receiving ----------------------------------------------------

    /// Wait for a message from `from` (any if `None`) with `tag` (any if
    /// `None`).
    pub fn recv(&mut self, from: Option<Tid>, tag: Option<i32>) -> Result<Message, MigError> {
        loop {
            if let Some(m) = self.take(from, tag)? {
                return Ok(m);
            }
            self.wait_io(None, None)?;
        }
    }

    /// A matching message if one has arrived; never waits.
    pub fn try_recv(
        &mut self,
        from: Option<Tid>,
        tag: Option<i32>,
    ) -> Result<Option<Message>, MigError> {
        if let Some(m) = self.take(from, tag)? {
            return Ok(Some(m));
        }
        self.wait_io(None, Some(Duration::ZERO))?;
        self.take(from, tag)
    }

    /// Wait at most `timeout` for a matching message.
    pub fn recv_timeout(
        &mut self,
        from: Option<Tid>,
        tag: Option<i32>,
        timeout: Duration,
    ) -> Result<Option<Message>, MigError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(m) = self.take(from, tag)? {
                return Ok(Some(m));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            self.wait_io(None, Some(left))?;
        }
    }

    /// Has a matching message arrived? Its sender, tag and size, without
    /// taking it.
    pub fn probe(
        &mut self,
        from: Option<Tid>,
        tag: Option<i32>,
    ) -> Result<Option<(Tid, i32, usize)>, MigError> {
        self.wait_io(None, Some(Duration::ZERO))?;
        Ok(self
            .mailbox
            .iter()
            .find(|m| matches(m, from, tag))
            .map(|m| (m.from, m.tag, m.data.len())))
    }

    fn take(&mut self, from: Option<Tid>, tag: Option<i32>) -> Result<Option<Message>, MigError> {
        if let Some(e) = self.failures.pop_front() {
            return Err(e);
        }
        Ok(self
            .mailbox
            .iter()
            .position(|m| matches(m, from, tag))
            .and_then(|i| self.mailbox.remove(i)))
    }

    /// Wait until a socket is readable (and `writable` writable), up to
    /// `timeout` (`None`: forever), and take in everything that arrived.
    fn wait_io(
        &mut self,
        writable: Option<LinkId>,
        timeout: Option<Duration>,
    ) -> Result<(), MigError> {
        if writable.is_none() && !self.spin.is_zero() && timeout != Some(Duration::ZERO) {
            // Gang scheduling runs a job's VPs together, so the answer is
            // often microseconds away: look for it a while before sleeping
            // (yielding the processor to anyone else who wants it).
            let until = Instant::now() + timeout.map_or(self.spin, |t| t.min(self.spin));
            let before = self.arrivals;
            loop {
                self.pump(LinkId::Daemon, false)?;
                let peers: Vec<Tid> = self.direct.keys().copied().collect();
                for t in peers {
                    self.pump(LinkId::Direct(t), false)?;
                }
                if self.arrivals != before {
                    return Ok(());
                }
                if Instant::now() >= until {
                    break;
                }
                std::thread::yield_now();
            }
            if let Some(t) = timeout {
                if t <= self.spin {
                    return Ok(());
                }
            }
        }
        if self.direct.is_empty() && writable.is_none() && timeout.is_none() {
            // Nothing else to watch: wait in the read itself (one system
            // call instead of poll + read).
            return self.pump(LinkId::Daemon, true);
        }
        let mut ids = vec![LinkId::Daemon];
        ids.extend(self.direct.keys().map(|&t| LinkId::Direct(t)));
        let fds: Vec<(RawFd, bool)> = ids
            .iter()
            .map(|&id| {
                let fd = match id {
                    LinkId::Daemon => self.daemon.fd(),
                    LinkId::Direct(t) => self.direct.get(&t).map_or(-1, Link::fd),
                };
                (fd, Some(id) == writable)
            })
            .collect();
        let ms = match timeout {
            None => -1,
            Some(d) => {
                d.as_millis().min(i32::MAX as u128) as i32
                    + i32::from(d.subsec_nanos() % 1_000_000 != 0)
            }
        };
        let ready = link::poll(&fds, ms).map_err(|e| MigError::DaemonGone(e.to_string()))?;
        for (id, (r, _)) in ids.into_iter().zip(ready) {
            if r {
                self.pump(id, false)?;
            }
        }
        Ok(())
    }

    fn wait_daemon(&mut self) -> Result<(), MigError> {
        self.wait_io(None, None)
    }

    /// Read what a socket has and file every frame; with `wait`, the first
    /// read waits for data.
    fn pump(&mut self, id: LinkId, mut wait: bool) -> Result<(), MigError> {
        loop {
            let link = match id {
                LinkId::Daemon => &mut self.daemon,
                LinkId::Direct(t) => match self.direct.get_mut(&t) {
                    Some(l) => l,
                    None => return Ok(()),
                },
            };
            let (n, more) = match link.read_once(std::mem::take(&mut wait)) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return self.link_lost(id, e.to_string()),
            };
            let mut frames = Vec::new();
            loop {
                match link.dec.next_frame_with::<VpMsg>() {
                    Ok(Some(f)) => frames.push(f),
                    Ok(None) => break,
                    Err(e) => return self.link_lost(id, e.to_string()),
                }
            }
            for (msg, payload) in frames {
                self.file(id, msg, payload)?;
            }
            if n == 0 {
                return self.link_lost(id, "closed".into());
            }
            if !more {
                return Ok(());
            }
        }
    }

    fn link_lost(&mut self, id: LinkId, why: String) -> Result<(), MigError> {
        match id {
            LinkId::Daemon => Err(MigError::DaemonGone(why)),
            LinkId::Direct(t) => {
                // The peer ended or moved: later messages go by the daemons.
                self.direct.remove(&t);
                Ok(())
            }
        }
    }

    fn file(&mut self, id: LinkId, msg: VpMsg, data: Vec<u8>) -> Result<(), MigError> {
        self.arrivals += 1;
        match msg {
            VpMsg::Deliver(env) | VpMsg::Send { env, .. } => {
                let forged = matches!(id, LinkId::Direct(p) if p != env.from);
                if env.to != self.me.tid || forged {
                    return Err(MigError::Protocol(format!(
                        "got a message for t{:x}",
                        env.to
                    )));
                }
                self.deliver(env, data.into());
            }
            VpMsg::DeliverFd { env, len, .. } | VpMsg::SendFd { env, len, .. } => {
                let lent =
                    matches!(msg, VpMsg::DeliverFd { lent: true, .. }) && id == LinkId::Daemon;
                let forged = matches!(id, LinkId::Direct(p) if p != env.from);
                if env.to != self.me.tid || forged || len as usize > MAX_MESSAGE {
                    return Err(MigError::Protocol(format!(
                        "a bad message descriptor for t{:x}",
                        env.to
                    )));
                }
                let link = match id {
                    LinkId::Daemon => &mut self.daemon,
                    LinkId::Direct(t) => match self.direct.get_mut(&t) {
                        Some(l) => l,
                        None => return Ok(()),
                    },
                };
                let fd = link
                    .fds
                    .pop_front()
                    .ok_or_else(|| MigError::Protocol("a message without its descriptor".into()))?;
                // Only the daemon's own buffers are read in place: it
                // never writes one before it is released; a VP might.
                let payload = if lent {
                    self.inbox.pass_on(fd, len as usize)
                } else {
                    self.inbox.take(fd, len as usize)
                };
                let payload =
                    payload.map_err(|e| MigError::Protocol(format!("message descriptor: {e}")))?;
                if id == LinkId::Daemon {
                    // The daemon counts what it passed us: let it go on.
                    let head = frame::encode_head(&VpMsg::Consumed { bytes: len }, 0)?;
                    self.write(LinkId::Daemon, &[&head], None)?;
                }
                self.deliver(env, payload);
            }
            VpMsg::Confirmed { to } => {
                self.confirm_pending.remove(&to);
                self.confirm.insert(to, Ok(()));
            }
            VpMsg::Undeliverable { to, tag, reason } => {
                self.confirmed.remove(&to);
                self.direct.remove(&to);
                if self.confirm_pending.remove(&to) {
                    // The answer to this send's confirmation: reported there.
                    self.confirm.insert(to, Err(reason));
                } else {
                    self.failures
                        .push_back(MigError::NoSuchVp { to, tag, reason });
                }
            }
            VpMsg::Return { id: call, ret } => {
                self.returns.insert(call, ret);
            }
            VpMsg::DirectLink { peer, refused } => {
                if id != LinkId::Daemon {
                    return Err(MigError::Protocol("a direct link offered by a VP".into()));
                }
                if refused.is_none() {
                    let fd = self.daemon.fds.pop_front().ok_or_else(|| {
                        MigError::Protocol("a direct link without its socket".into())
                    })?;
                    let sock = UnixStream::from(fd);
                    if let Ok(l) = Link::new(sock) {
                        self.direct.insert(peer, l);
                        self.asked_direct.insert(peer);
                    }
                }
            }
            VpMsg::Checkpoint { path } if id == LinkId::Daemon => {
                self.checkpoint_to = Some(path);
            }
            VpMsg::StayPut if id == LinkId::Daemon => {
                self.checkpoint_to = None;
            }
            VpMsg::Snap(step) if id == LinkId::Daemon => match step {
                SnapStep::Begin { id, path } => {
                    self.snap = Some(SnapState {
                        id,
                        path,
                        expect: None,
                        paused: false,
                        taken: false,
                    });
                }
                SnapStep::Now { id, expect } => {
                    if let Some(s) = self.snap.as_mut().filter(|s| s.id == id) {
                        s.expect = Some(expect);
                    }
                }
                SnapStep::Resume { id } | SnapStep::Abort { id } => {
                    if self.snap.as_ref().is_some_and(|s| s.id == id) {
                        self.snap = None;
                    }
                }
                SnapStep::Paused { .. } | SnapStep::Taken { .. } => {
                    return Err(MigError::Protocol(
                        "a VP's checkpoint step from the daemon".into(),
                    ));
                }
            },
            VpMsg::Credit { bytes } if id == LinkId::Daemon => {
                self.fd_unacked = self.fd_unacked.saturating_sub(bytes as usize);
            }
            VpMsg::Call { .. }
            | VpMsg::Direct { .. }
            | VpMsg::Consumed { .. }
            | VpMsg::Checkpoint { .. }
            | VpMsg::StayPut
            | VpMsg::Snap(_)
            | VpMsg::Credit { .. }
            | VpMsg::Written { .. }
            | VpMsg::Checkpointed { .. } => {
                return Err(MigError::Protocol("a request from the daemon".into()));
            }
        }
        Ok(())
    }

    fn deliver(&mut self, env: Envelope, data: Payload) {
        let m = Message {
            from: env.from,
            tag: env.tag,
            data,
        };
        if env.seq == 0 {
            self.mailbox.push_back(m);
            return;
        }
        let o = self.order.entry(env.from).or_insert(Order {
            next: 1,
            early: BTreeMap::new(),
        });
        if env.seq < o.next {
            return; // a duplicate
        }
        if env.seq > o.next {
            o.early.insert(env.seq, m);
            return;
        }
        self.mailbox.push_back(m);
        o.next += 1;
        while let Some(m) = o.early.remove(&o.next) {
            self.mailbox.push_back(m);
            o.next += 1;
        }
    }

    // ----- calls the master answers ---------------------------------------

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
        match self.call(VpCall::Spawn {
            program: program.to_string(),
            args: args.iter().map(|a| a.to_string()).collect(),
            n,
            new_job,
        })? {
            VpRet::Tids(t) => Ok(t),
            other => Err(unexpected(other)),
        }
    }

    /// Kill a VP.
    pub fn kill(&mut self, tid: Tid) -> Result<(), MigError> {
        self.call(VpCall::Kill { tid }).map(|_| ())
    }

    /// The VPs of this job, by index (exited ones included).
    pub fn tasks(&mut self) -> Result<Vec<Tid>, MigError> {
        match self.call(VpCall::Tasks)? {
            VpRet::Tids(t) => Ok(t),
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
