//! Receiving: waiting on the daemon's socket and direct links, filing what
//! arrives (messages in order per sender, answers, notices, the daemon's
//! requests), and taking a message that matches.

use std::io;
use std::os::fd::RawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{matches, LinkId, Message, MigError, SnapState, Vm, MAX_MESSAGE};
use crate::frame;
use crate::link::{self, Link};
use crate::msg::{Envelope, SnapStep, Tid, VpMsg};
use crate::payload::Payload;

/// While it spins with rings, a VP looks at them every round, at the clock
/// one round in `CLOCK_EVERY`, at its sockets (a system call each) first
/// after `FIRST_SOCKET_LOOK` then every `SOCKET_EVERY`, and yields the
/// processor every `YIELD_EVERY`. Without rings it looks at its sockets
/// and yields every round.
const CLOCK_EVERY: u32 = 16;
const SOCKET_EVERY: Duration = Duration::from_micros(10);
const FIRST_SOCKET_LOOK: Duration = Duration::from_micros(2);
const YIELD_EVERY: Duration = Duration::from_micros(100);

impl Vm {
    /// Wait for a message from `from` (any if `None`) with `tag` (any if
    /// `None`).
    pub fn recv(&mut self, from: Option<Tid>, tag: Option<i32>) -> Result<Message, MigError> {
        let m = self.recv_where(&|m: &Message| matches(m, from, tag), None)?;
        m.ok_or_else(|| MigError::Protocol("a receive without a deadline ended".into()))
    }

    /// A matching message if one has arrived; never waits.
    pub fn try_recv(
        &mut self,
        from: Option<Tid>,
        tag: Option<i32>,
    ) -> Result<Option<Message>, MigError> {
        self.recv_where(&|m: &Message| matches(m, from, tag), Some(Duration::ZERO))
    }

    /// Wait at most `timeout` for a matching message.
    pub fn recv_timeout(
        &mut self,
        from: Option<Tid>,
        tag: Option<i32>,
        timeout: Duration,
    ) -> Result<Option<Message>, MigError> {
        self.recv_where(&|m: &Message| matches(m, from, tag), Some(timeout))
    }

    /// The first message, in arrival order, that `wanted` accepts: waiting
    /// at most `timeout` (`None`: until one comes; zero: never waits). For
    /// matching of one's own (a library's contexts, say); messages of one
    /// sender still arrive in the order sent.
    pub fn recv_where(
        &mut self,
        wanted: &dyn Fn(&Message) -> bool,
        timeout: Option<Duration>,
    ) -> Result<Option<Message>, MigError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if let Some(m) = self.take(wanted)? {
                return Ok(Some(m));
            }
            match deadline {
                None => self.wait_io(None, None)?,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        // One look at what has arrived meanwhile.
                        self.wait_io(None, Some(Duration::ZERO))?;
                        return self.take(wanted);
                    }
                    self.wait_io(None, Some(left))?;
                }
            }
        }
    }

    /// Has a matching message arrived? Its sender, tag and size, without
    /// taking it.
    pub fn probe(
        &mut self,
        from: Option<Tid>,
        tag: Option<i32>,
    ) -> Result<Option<(Tid, i32, usize)>, MigError> {
        Ok(self
            .peek_where(&|m: &Message| matches(m, from, tag))?
            .map(|m| (m.from, m.tag, m.data.len())))
    }

    /// The sender, tag and size of every message that has arrived and not
    /// been taken, in the order they would be received (for a library that
    /// chooses among them itself; `take_arrived` takes one).
    pub fn arrived(&mut self) -> Result<Vec<(Tid, i32, usize)>, MigError> {
        self.wait_io(None, Some(Duration::ZERO))?;
        Ok(self
            .mailbox
            .iter()
            .map(|m| (m.from, m.tag, m.data.len()))
            .collect())
    }

    /// Take the `i`th message `arrived` listed (`None` if there is no such
    /// message now).
    pub fn take_arrived(&mut self, i: usize) -> Result<Option<Message>, MigError> {
        let seen = std::cell::Cell::new(0usize);
        self.take(&|_| {
            let k = seen.get();
            seen.set(k + 1);
            k == i
        })
    }

    /// Wait until something arrives, at most `timeout` (`None`: until it
    /// does).
    pub fn wait_arrival(&mut self, timeout: Option<Duration>) -> Result<(), MigError> {
        self.wait_io(None, timeout)
    }

    /// The first message that has arrived and `wanted` accepts, left where
    /// it is.
    pub fn peek_where(
        &mut self,
        wanted: &dyn Fn(&Message) -> bool,
    ) -> Result<Option<&Message>, MigError> {
        self.wait_io(None, Some(Duration::ZERO))?;
        Ok(self.mailbox.iter().find(|m| wanted(m)))
    }

    pub(super) fn take(
        &mut self,
        wanted: &dyn Fn(&Message) -> bool,
    ) -> Result<Option<Message>, MigError> {
        if let Some(e) = self.failures.pop_front() {
            return Err(e);
        }
        let m = self
            .mailbox
            .iter()
            .position(wanted)
            .and_then(|i| self.mailbox.remove(i));
        if let Some(m) = m.as_ref().filter(|_| self.backlog > 0) {
            // Told in steps, and when it is all read.
            const STEP: u64 = 1 << 20;
            let before = self.backlog;
            self.backlog = before.saturating_sub(m.data.len() as u64);
            if self.backlog == 0 || before / STEP != self.backlog / STEP {
                // (Best effort: a daemon gone is noticed where it matters.)
                let bytes = self.backlog;
                let _ = self.tell(VpMsg::Backlog { bytes });
            }
        }
        Ok(m)
    }

    /// Wait until a socket is readable (and `writable` writable), up to
    /// `timeout` (`None`: forever), and take in everything that arrived.
    pub(super) fn wait_io(
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
            let (mut peers, mut rings) = std::mem::take(&mut self.spin_links);
            peers.clear();
            rings.clear();
            for (t, l) in self.peers.links() {
                peers.push(t);
                if l.rx.is_some() {
                    rings.push(t);
                }
            }
            let spun = self.spin_on(&peers, &rings, until, before);
            self.spin_links = (peers, rings);
            if spun? {
                return Ok(());
            }
            if let Some(t) = timeout {
                if t <= self.spin {
                    return Ok(());
                }
            }
        }
        self.wait_blocking(writable, timeout)
    }

    /// Spin until something arrives (true) or `until` (false), looking at
    /// the rings of `rings` every round and at the sockets now and then.
    fn spin_on(
        &mut self,
        peers: &[Tid],
        rings: &[Tid],
        until: Instant,
        before: u64,
    ) -> Result<bool, MigError> {
        let mut round = 0u32;
        // (An answer over a ring comes within a couple of
        // microseconds: the sockets' first look waits that long.)
        let start = Instant::now();
        let mut sockets_at = start + FIRST_SOCKET_LOOK;
        let mut yield_at = start + YIELD_EVERY;
        loop {
            // (See `CLOCK_EVERY` for how often each is looked at.)
            let mut now = None;
            if rings.is_empty() || round.is_multiple_of(CLOCK_EVERY) {
                now = Some(Instant::now());
            }
            // (Without a ring, only sockets bring anything.)
            let sockets = rings.is_empty() || now.is_some_and(|n| n >= sockets_at);
            if sockets {
                self.pump(LinkId::Daemon, false)?;
                for &t in peers {
                    self.pump(LinkId::Direct(t), false)?;
                }
            } else {
                for &t in rings {
                    self.pump(LinkId::Direct(t), false)?;
                }
            }
            if self.arrivals != before {
                return Ok(true);
            }
            if let Some(n) = now {
                if n >= until {
                    return Ok(false);
                }
            }
            if sockets {
                let n = Instant::now();
                sockets_at = n + SOCKET_EVERY;
                if rings.is_empty() || n >= yield_at {
                    std::thread::yield_now();
                    yield_at = n + YIELD_EVERY;
                }
            } else {
                std::hint::spin_loop();
            }
            round = round.wrapping_add(1);
        }
    }

    /// Wait in the kernel for a socket (or, with `writable`, to write).
    fn wait_blocking(
        &mut self,
        writable: Option<LinkId>,
        timeout: Option<Duration>,
    ) -> Result<(), MigError> {
        if self.peers.linked().is_empty() && writable.is_none() && timeout.is_none() {
            // Nothing else to watch: wait in the read itself (one system
            // call instead of poll + read).
            return self.pump(LinkId::Daemon, true);
        }
        // Peers put frames in rings without a word: say this side sleeps
        // (they then wake it through the socket), unless one already has.
        let rings: Vec<Tid> = self
            .peers
            .links()
            .filter(|(_, l)| l.rx.is_some())
            .map(|(t, _)| t)
            .collect();
        let early = rings.iter().any(|&t| {
            self.peers
                .link(t)
                .and_then(|l| l.rx.as_ref())
                .is_some_and(|rx| rx.sleep())
        });
        if early {
            for t in rings {
                self.pump(LinkId::Direct(t), false)?;
            }
            return Ok(());
        }
        let mut ids = vec![LinkId::Daemon];
        ids.extend(self.peers.linked().iter().map(|&t| LinkId::Direct(t)));
        let fds: Vec<(RawFd, bool)> = ids
            .iter()
            .map(|&id| {
                let fd = match id {
                    LinkId::Daemon => self.daemon.fd(),
                    LinkId::Direct(t) => self.peers.link(t).map_or(-1, Link::fd),
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
        if !self.waits_outside.load(Ordering::Relaxed) {
            for (_, l) in self.peers.links() {
                if let Some(rx) = &l.rx {
                    rx.awake();
                }
            }
        }
        for (id, (r, _)) in ids.into_iter().zip(ready) {
            let ring = matches!(id, LinkId::Direct(t) if self.peers.link(t).is_some_and(|l| l.rx.is_some()));
            if r || ring {
                self.pump(id, false)?;
            }
        }
        Ok(())
    }

    pub(super) fn wait_daemon(&mut self) -> Result<(), MigError> {
        self.wait_io(None, None)
    }

    /// Read what a socket has and file every frame; with `wait`, the first
    /// read waits for data.
    pub(super) fn pump(&mut self, id: LinkId, wait: bool) -> Result<(), MigError> {
        if let LinkId::Direct(t) = id {
            match self.ring_pump(t) {
                // Nothing on the socket: no system call.
                Ok(Some(false)) if !wait => return Ok(()),
                Ok(_) => {}
                Err(e) => return self.link_lost(id, e.to_string()),
            }
        }
        self.pump_socket(id, wait)
    }

    /// Take in everything direct link `to` holds, its ring and its socket
    /// (whatever the peer said of its socket), without waiting: before the
    /// link is dropped.
    pub(super) fn drain_direct(&mut self, to: Tid) -> Result<(), MigError> {
        let id = LinkId::Direct(to);
        if let Err(e) = self.ring_pump(to) {
            return self.link_lost(id, e.to_string());
        }
        self.pump_socket(id, false)
    }

    /// `pump`'s reading of the socket itself.
    fn pump_socket(&mut self, id: LinkId, mut wait: bool) -> Result<(), MigError> {
        loop {
            let link = match id {
                LinkId::Daemon => &mut self.daemon,
                LinkId::Direct(t) => match self.peers.link_mut(t) {
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
                // What the peer put in its ring before it went is still
                // delivered.
                if let LinkId::Direct(t) = id {
                    let _ = self.ring_pump(t);
                }
                return self.link_lost(id, "closed".into());
            }
            if !more {
                return Ok(());
            }
        }
    }

    /// File what the peer's ring on direct link `t` holds. `Some(true)`
    /// if the peer wrote to the socket too, `None` without a ring.
    fn ring_pump(&mut self, t: Tid) -> io::Result<Option<bool>> {
        let Some(link) = self.peers.link_mut(t) else {
            return Ok(None);
        };
        let got = link.ring_frames::<VpMsg>()?;
        if self.waits_outside.load(Ordering::Relaxed) {
            // The program may wait on the socket itself: every frame put
            // in the ring must wake it.
            if let Some(rx) = &link.rx {
                rx.sleep();
            }
        }
        let Some((frames, socket)) = got else {
            return Ok(None);
        };
        for (msg, payload) in frames {
            self.file(LinkId::Direct(t), msg, payload)
                .map_err(|e| io::Error::other(e.to_string()))?;
        }
        Ok(Some(socket))
    }

    /// Offer direct link `peer` a ring for what this side sends (frames
    /// that fit go through it from now on). Without one (no memfd here),
    /// everything goes by the socket as before.
    pub(super) fn offer_ring(&mut self, peer: Tid) -> Result<(), MigError> {
        let Ok((ring, fd)) = crate::ring::Ring::create(crate::ring::RING_BYTES) else {
            return Ok(());
        };
        let head = frame::encode_head(
            &VpMsg::Ring {
                bytes: crate::ring::RING_BYTES as u64,
            },
            0,
        )?;
        if self
            .write(LinkId::Direct(peer), &[&head], Some(&fd))
            .is_ok()
        {
            if let Some(l) = self.peers.link_mut(peer) {
                l.tx = Some(ring);
            }
        }
        Ok(())
    }

    pub(super) fn link_lost(&mut self, id: LinkId, why: String) -> Result<(), MigError> {
        match id {
            LinkId::Daemon => Err(MigError::DaemonGone(why)),
            LinkId::Direct(t) => {
                // The peer ended or moved: later messages go by the daemons.
                self.peers.close_direct(t);
                Ok(())
            }
        }
    }

    pub(super) fn file(&mut self, id: LinkId, msg: VpMsg, data: Vec<u8>) -> Result<(), MigError> {
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
                if id == LinkId::Daemon {
                    self.ask_direct(env.from)?;
                }
            }
            VpMsg::DeliverFd { env, len, .. } => self.file_shared(id, env, len)?,
            VpMsg::SendFd { env, len, .. } => self.file_shared(id, env, len)?,
            VpMsg::Confirmed { to } => {
                self.peers.exists(to);
            }
            VpMsg::Undeliverable { to, tag, reason } => {
                self.peers.close_direct(to);
                // The answer to a send's confirmation is reported there.
                if let Err(reason) = self.peers.not_delivered(to, reason) {
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
                let sock = match refused {
                    Some(_) => None,
                    None => Some(self.daemon.fds.pop_front().ok_or_else(|| {
                        MigError::Protocol("a direct link without its socket".into())
                    })?),
                };
                // Both ends may have asked at once: the daemon then makes
                // two links, in the same order to both, and both keep the
                // first (a second would replace the one the peer writes
                // to, breaking it).
                let link = sock
                    .filter(|_| self.peers.link(peer).is_none())
                    .and_then(|fd| Link::new(UnixStream::from(fd)).ok());
                let opened = link.is_some_and(|l| self.peers.open_direct(peer, l));
                if opened {
                    self.offer_ring(peer)?;
                } else {
                    self.peers.direct_refused(peer);
                }
            }
            VpMsg::Ring { bytes } => {
                let LinkId::Direct(peer) = id else {
                    return Err(MigError::Protocol("a ring offered by the daemon".into()));
                };
                let Some(link) = self.peers.link_mut(peer) else {
                    return Ok(());
                };
                let opened = match link.fds.pop_front() {
                    Some(fd) if link.rx.is_none() => crate::ring::Ring::open(&fd, bytes),
                    Some(_) => Err(io::Error::other("a second ring")),
                    None => Err(io::Error::other("a ring without its descriptor")),
                };
                match opened {
                    Ok(ring) => link.rx = Some(ring),
                    // A peer that offers nonsense loses its direct link.
                    Err(e) => return self.link_lost(id, e.to_string()),
                }
            }
            VpMsg::Wake if id != LinkId::Daemon => {}
            VpMsg::WriteImage { path } if id == LinkId::Daemon => {
                self.move_image_to = Some(path);
            }
            VpMsg::StayPut if id == LinkId::Daemon => {
                self.move_image_to = None;
            }
            VpMsg::Snap(step) if id == LinkId::Daemon => self.snap_step(step)?,
            VpMsg::Credit { bytes } if id == LinkId::Daemon => {
                self.fd_unacked = self.fd_unacked.saturating_sub(bytes as usize);
            }
            VpMsg::Call { .. }
            | VpMsg::Direct { .. }
            | VpMsg::Consumed { .. }
            | VpMsg::Backlog { .. }
            | VpMsg::WriteImage { .. }
            | VpMsg::StayPut
            | VpMsg::Snap(_)
            | VpMsg::Credit { .. }
            | VpMsg::Written { .. }
            | VpMsg::ImageWritten { .. }
            | VpMsg::ImageNotWritten { .. }
            | VpMsg::Movable
            | VpMsg::PauseNotice { .. }
            | VpMsg::Wake
            | VpMsg::Quiesced => {
                return Err(MigError::Protocol("a request from the daemon".into()));
            }
        }
        Ok(())
    }

    pub(super) fn deliver(&mut self, env: Envelope, data: Payload) {
        let m = Message {
            from: env.from,
            tag: env.tag,
            data,
        };
        self.peers.deliver(env.seq, m, &mut self.mailbox);
    }

    /// A message whose bytes are in a shared buffer passed with it on link
    /// `id`.
    fn file_shared(&mut self, id: LinkId, env: Envelope, len: u64) -> Result<(), MigError> {
        // Read in place, whoever filled the buffer (no copy; it goes back
        // to its sender when the payload is dropped): the daemon (bytes from
        // another host), or a VP of this host, directly or through the
        // daemon. libmig never writes a buffer before it is released; a VP
        // that did could change a message after sending it, but every VP
        // here runs as the daemon's user and could as well write to this
        // process.
        let forged = matches!(id, LinkId::Direct(p) if p != env.from);
        if env.to != self.me.tid || forged || len as usize > MAX_MESSAGE {
            return Err(MigError::Protocol(format!(
                "a bad message descriptor for t{:x}",
                env.to
            )));
        }
        let link = match id {
            LinkId::Daemon => &mut self.daemon,
            LinkId::Direct(t) => match self.peers.link_mut(t) {
                Some(l) => l,
                None => return Ok(()),
            },
        };
        let fd = link
            .fds
            .pop_front()
            .ok_or_else(|| MigError::Protocol("a message without its descriptor".into()))?;
        let mut payload = self
            .inbox
            .read_in_place(fd, len as usize)
            .map_err(|e| MigError::Protocol(format!("message descriptor: {e}")))?;
        if id == LinkId::Daemon {
            // The daemon counts what it passed us: let it go on.
            let head = frame::encode_head(&VpMsg::Consumed { bytes: len }, 0)?;
            self.write(LinkId::Daemon, &[&head], None)?;
        }
        // Senders' buffers held unread past half a pool are copied out and
        // given back: a VP that lets messages pile up must not leave its
        // senders without buffers.
        let held: usize = self
            .mailbox
            .iter()
            .filter(|m| m.data.is_lent())
            .map(|m| m.data.len())
            .sum();
        if payload.is_lent() && held + payload.len() > crate::pool::POOL_BYTES / 2 {
            payload = payload.into_vec().into();
        }
        self.deliver(env, payload);
        if id == LinkId::Daemon {
            self.ask_direct(env.from)?;
        }
        Ok(())
    }

    /// A step of a job checkpoint from the daemon.
    fn snap_step(&mut self, step: SnapStep) -> Result<(), MigError> {
        match step {
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
            SnapStep::Paused { .. } | SnapStep::Taken { .. } | SnapStep::Failed { .. } => {
                return Err(MigError::Protocol(
                    "a VP's checkpoint step from the daemon".into(),
                ));
            }
        }
        Ok(())
    }
}
