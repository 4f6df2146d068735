//! One non-blocking connection: its socket, its decoder, its output queue,
//! and what kind of peer it is. What lives here: reads that stop at
//! `WouldBlock` and retry on `Interrupted`; an output queue of chunks written
//! with vectored writes (a forwarded payload is queued as the `Vec` it
//! arrived in, never copied) that can carry a descriptor (SCM_RIGHTS, for
//! direct links between VPs). What does not: what the messages mean (the
//! server and the master decide).

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Instant;

use libmig::msg::Tid;
use libmig::Payload;
use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};

use libmig::frame::Decoder;
use libmig::handshake::{Client, Server};
use libmig::seal::Sealer;
use mio::event::Source;
use mio::net::{TcpStream, UnixStream};
use mio::{Interest, Registry, Token};

/// A TCP or Unix stream.
#[derive(Debug)]
pub enum Sock {
    /// Daemon to daemon.
    Tcp(TcpStream),
    /// Local control.
    Unix(UnixStream),
}

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.read(buf),
            Sock::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.write(buf),
            Sock::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl AsRawFd for Sock {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Sock::Tcp(s) => s.as_raw_fd(),
            Sock::Unix(s) => s.as_raw_fd(),
        }
    }
}

impl Source for Sock {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => s.register(r, t, i),
            Sock::Unix(s) => s.register(r, t, i),
        }
    }
    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => s.reregister(r, t, i),
            Sock::Unix(s) => s.reregister(r, t, i),
        }
    }
    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => s.deregister(r),
            Sock::Unix(s) => s.deregister(r),
        }
    }
}

/// Where a connection stands.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// Accepted TCP, in the handshake (its state: `Conn::hs`).
    Accepting,
    /// An authenticated daemon (on the master: a worker, named once registered).
    Peer {
        /// Host name after `Register`.
        host: Option<String>,
    },
    /// A worker's authenticated link to its master.
    Master,
    /// A local control client.
    Control,
    /// A VP of this host (the socket it was started with).
    Vp {
        /// Its Tid.
        tid: Tid,
    },
    /// A data link being opened, in the handshake (its state: `Conn::hs`).
    Dialling {
        /// The other host.
        host: String,
    },
    /// A data link with another daemon (messages between VPs).
    Data {
        /// The other host.
        host: String,
    },
    /// A worker attaching to its master, in the handshake (its state:
    /// `Conn::hs`) or (`sent`) waiting for the answer to `Attach`.
    Attaching {
        /// The master's address.
        addr: std::net::SocketAddr,
        /// `Attach` was sent.
        sent: bool,
    },
}

impl std::fmt::Display for Kind {
    /// Who is at the other end, for logs (no handshake secrets).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Kind::Accepting => write!(f, "a daemon in the handshake"),
            Kind::Peer { host: Some(h) } => write!(f, "host {h}"),
            Kind::Peer { host: None } => write!(f, "a daemon not registered yet"),
            Kind::Master => write!(f, "the master"),
            Kind::Control => write!(f, "a control client"),
            Kind::Vp { tid } => write!(f, "VP t{tid:x}"),
            Kind::Dialling { host } => write!(f, "{host} (data link being opened)"),
            Kind::Data { host } => write!(f, "the data link to {host}"),
            Kind::Attaching { addr, .. } => write!(f, "the master at {addr} (attaching)"),
        }
    }
}

/// Bytes waiting to be written, possibly with a descriptor to pass.
#[derive(Debug)]
struct Chunk {
    bytes: Payload,
    off: usize,
    fd: Option<OwnedFd>,
}

/// Bytes sealed at a time on a sealed link.
const SEAL_BATCH: usize = 256 * 1024;

/// Small frames are appended to the last chunk up to this size.
const COALESCE: usize = 64 * 1024;

/// What one read from a connection got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOutcome {
    /// `n` bytes, all that was asked: more may be waiting.
    Full(usize),
    /// `n` bytes, fewer than asked: the socket was empty for now, unless
    /// the peer closed it right after (the poll is edge-triggered: a close
    /// that came with the data raises no new event, so a caller told of a
    /// hang-up reads on until `Closed`).
    Short(usize),
    /// Nothing to read now.
    Empty,
    /// The peer closed, or the socket failed.
    Closed,
}

/// A connection.
#[derive(Debug)]
pub struct Conn {
    /// The socket.
    pub sock: Sock,
    /// Incoming bytes not yet decoded.
    pub dec: Decoder,
    out: VecDeque<Chunk>,
    out_len: usize,
    /// What it is.
    pub kind: Kind,
    /// When it was accepted.
    pub since: Instant,
    /// Close once the output is flushed.
    pub closing: bool,
    /// On a control connection: the local user at the other end.
    pub uid: Option<u32>,
    /// Not read while a receiver it sends to is full (flow control).
    pub paused: bool,
    /// Descriptors received with the bytes (VPs pass memfd payloads).
    pub fds: VecDeque<OwnedFd>,
    /// Writing failed (the peer closed its end): output is dropped, but
    /// what the peer sent before is still read to the end.
    pub broken: bool,
    writable: bool,
    /// A link between daemons, sealed once its handshake is done: every
    /// byte out is sealed, every byte in opened and checked.
    seal: Option<Box<Sealer>>,
    /// On a sealed link: records sealed from the front of `out`, written
    /// up to `sealed_off` (a batch at a time: a large payload is never
    /// copied whole).
    sealed: Vec<u8>,
    sealed_off: usize,
    /// Lines of job output not sent to this waiter since the last that
    /// was: it had stalled with its queue full (see the server's
    /// `send_resp`).
    pub skipped: u64,
    /// When the peer last took bytes (or had nothing waiting for it).
    progressed: Instant,
    /// Why reading failed (a sealed record that failed its check, say).
    pub failed: Option<String>,
    /// Its peer has sent a frame (a VP that never did can be moved from
    /// outside: see the server's `outside`).
    pub heard_from: bool,
    /// Where the handshake is, until it is done.
    pub hs: Option<Handshake>,
    /// Its output is held: queued, not written (its VP is being saved
    /// from outside, and what it has not read goes into its image).
    held: bool,
    /// Bytes it may still write this turn of the loop (see `WRITE_BUDGET`).
    budget: usize,
}

/// The most a connection writes in one turn of the loop: a large image or
/// message going out to a fast reader would otherwise keep the loop (and
/// its heartbeats and the consensus's) for as long as it takes.
pub const WRITE_BUDGET: usize = 16 << 20;

/// A connection's handshake under way.
#[derive(Debug)]
pub enum Handshake {
    /// We accepted it.
    Accept(Server),
    /// We dialled it.
    Dial(Client),
}

/// The largest frame body taken before the handshake is done (its
/// messages are a few dozen bytes).
pub const PRE_AUTH_BODY: usize = 4096;

impl Conn {
    /// A new connection of `kind`.
    pub fn new(sock: Sock, kind: Kind) -> Conn {
        let mut dec = Decoder::default();
        if matches!(
            kind,
            Kind::Accepting | Kind::Dialling { .. } | Kind::Attaching { .. }
        ) {
            // Nothing large is allocated for a peer not yet authenticated.
            dec.limit(PRE_AUTH_BODY);
        }
        let hs = matches!(kind, Kind::Accepting).then(|| Handshake::Accept(Server::default()));
        Conn {
            sock,
            dec,
            out: VecDeque::new(),
            out_len: 0,
            kind,
            since: Instant::now(),
            closing: false,
            uid: None,
            paused: false,
            broken: false,
            fds: VecDeque::new(),
            writable: false,
            seal: None,
            sealed: Vec::new(),
            sealed_off: 0,
            heard_from: false,
            skipped: 0,
            progressed: Instant::now(),
            failed: None,
            hs,
            budget: WRITE_BUDGET,
            held: false,
        }
    }

    /// Write nothing more until `release_output`: what is sent meanwhile
    /// is queued.
    pub fn hold_output(&mut self) {
        self.held = true;
    }

    /// Is its output held?
    pub fn output_held(&self) -> bool {
        self.held
    }

    /// Write again, starting with what was queued while held.
    pub fn release_output(&mut self, registry: &Registry, token: Token) -> io::Result<()> {
        self.held = false;
        self.flush(registry, token)
    }

    /// A copy of the bytes queued and not yet written, in order, and the
    /// descriptors queued to go with them, in order; or why they are not
    /// plain bytes (the link is sealed).
    pub fn unwritten(&self) -> Result<(Vec<u8>, Vec<std::os::fd::BorrowedFd<'_>>), &'static str> {
        if self.seal.is_some() {
            return Err("a sealed link's output is not plain bytes");
        }
        let mut all = Vec::with_capacity(self.out_len);
        let mut fds = Vec::new();
        for c in &self.out {
            all.extend_from_slice(&c.bytes[c.off..]);
            fds.extend(c.fd.as_ref().map(std::os::fd::AsFd::as_fd));
        }
        Ok((all, fds))
    }

    /// From now on every byte both ways is sealed.
    pub fn seal_with(&mut self, s: Box<Sealer>) {
        self.seal = Some(s);
    }

    /// Opened bytes wait in the sealer (read them without waiting for the
    /// socket).
    pub fn has_plain(&self) -> bool {
        self.seal.as_ref().is_some_and(|s| s.has_plain())
    }

    /// How long the peer has taken none of the bytes waiting for it
    /// (zero when none wait).
    pub fn stalled_for(&self) -> std::time::Duration {
        if self.flushed() {
            std::time::Duration::ZERO
        } else {
            self.progressed.elapsed()
        }
    }

    /// Bytes queued and not yet written.
    pub fn queued(&self) -> usize {
        self.out_len + self.sealed.len() - self.sealed_off
    }

    /// A new turn of the loop: its write budget is whole again.
    pub fn new_turn(&mut self) {
        self.budget = WRITE_BUDGET;
    }

    /// Did it stop writing for this turn with more to write (it goes on
    /// next turn: the socket may stay writable, and no new event says so)?
    pub fn starved(&self) -> bool {
        self.budget == 0 && !self.flushed() && !self.broken
    }

    /// Is everything written?
    pub fn flushed(&self) -> bool {
        self.out.is_empty() && self.sealed_off == self.sealed.len()
    }

    /// Read once into the decoder.
    pub fn read_some(&mut self) -> ReadOutcome {
        loop {
            let fds_before = self.fds.len();
            let got = match (&mut self.sock, &mut self.seal) {
                (Sock::Tcp(s), Some(seal)) => self.dec.fill(|b| seal.read_into(s, b)),
                (Sock::Tcp(s), None) => self.dec.read_from(s),
                (Sock::Unix(s), _) => {
                    let (fd, fds) = (s.as_raw_fd(), &mut self.fds);
                    self.dec
                        .fill(|b| libmig::payload::recv_with_fds(fd, b, fds, false))
                }
            };
            match got {
                Ok((0, _)) => return ReadOutcome::Closed,
                // A read stops after a descriptor, so one that brought one
                // does not mean the socket is empty.
                Ok((n, asked)) if n == asked || self.fds.len() > fds_before => {
                    return ReadOutcome::Full(n)
                }
                Ok((n, _)) => return ReadOutcome::Short(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return ReadOutcome::Empty,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.failed = Some(e.to_string());
                    return ReadOutcome::Closed;
                }
            }
        }
    }

    /// Queue bytes and write what the socket takes now.
    pub fn send(&mut self, bytes: &[u8], registry: &Registry, token: Token) -> io::Result<()> {
        self.queue(bytes);
        self.flush(registry, token)
    }

    /// Queue bytes to write at the next `flush` (small frames are joined,
    /// so a burst of them costs one write and one seal).
    pub fn queue(&mut self, bytes: &[u8]) {
        if self.broken {
            return;
        }
        if self.flushed() {
            self.progressed = Instant::now();
        }
        match self.out.back_mut().and_then(|c| {
            let room = c.fd.is_none() && c.bytes.len() + bytes.len() <= COALESCE;
            c.bytes.heap_mut().filter(|_| room)
        }) {
            Some(last) => last.extend_from_slice(bytes),
            None => self.out.push_back(Chunk {
                bytes: bytes.to_vec().into(),
                off: 0,
                fd: None,
            }),
        }
        self.out_len += bytes.len();
    }

    /// Queue a frame's head and its payload (kept as it is: bytes, or a
    /// mapped memfd), optionally passing `fd` with the head, and write what
    /// the socket takes now.
    pub fn send_parts(
        &mut self,
        head: Vec<u8>,
        payload: Payload,
        fd: Option<OwnedFd>,
        registry: &Registry,
        token: Token,
    ) -> io::Result<()> {
        if self.broken {
            return Ok(());
        }
        self.out_len += head.len() + payload.len();
        if fd.is_none() && payload.len() < COALESCE {
            self.out_len -= head.len() + payload.len();
            let mut b = head;
            b.extend_from_slice(&payload);
            return self.send(&b, registry, token);
        }
        self.out.push_back(Chunk {
            bytes: head.into(),
            off: 0,
            fd,
        });
        if !payload.is_empty() {
            self.out.push_back(Chunk {
                bytes: payload,
                off: 0,
                fd: None,
            });
        }
        self.flush(registry, token)
    }

    /// On a sealed link: when the last batch is written, seal the next
    /// (up to `SEAL_BATCH` bytes from the front of `out`); then write.
    fn write_sealed(&mut self) -> io::Result<usize> {
        if self.sealed_off == self.sealed.len() {
            self.sealed.clear();
            self.sealed_off = 0;
            let Some(seal) = self.seal.as_mut() else {
                return Ok(0);
            };
            let mut taken = 0;
            while taken < SEAL_BATCH {
                let Some(front) = self.out.front_mut() else {
                    break;
                };
                let k = (front.bytes.len() - front.off).min(SEAL_BATCH - taken);
                seal.seal(&front.bytes[front.off..front.off + k], &mut self.sealed)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
                front.off += k;
                taken += k;
                self.out_len -= k;
                if front.off == front.bytes.len() {
                    self.out.pop_front();
                }
            }
        }
        let n = self.sock.write(&self.sealed[self.sealed_off..])?;
        self.sealed_off += n;
        Ok(n)
    }

    fn write_some(&mut self) -> io::Result<usize> {
        let Some(front) = self.out.front_mut() else {
            return Ok(0);
        };
        if let Some(fd) = front.fd.as_ref() {
            let fds = [fd.as_raw_fd()];
            let cmsg = [ControlMessage::ScmRights(&fds)];
            let iov = [IoSlice::new(&front.bytes[front.off..])];
            let n = sendmsg::<()>(self.sock.as_raw_fd(), &iov, &cmsg, MsgFlags::empty(), None)
                .map_err(io::Error::from)?;
            front.fd = None;
            return Ok(n);
        }
        let slices: Vec<IoSlice> = self
            .out
            .iter()
            .take_while(|c| c.fd.is_none())
            .take(64)
            .map(|c| IoSlice::new(&c.bytes[c.off..]))
            .collect();
        self.sock.write_vectored(&slices)
    }

    /// Writing failed: output is dropped from now on.
    fn write_failed(&mut self, registry: &Registry, token: Token, e: io::Error) -> io::Error {
        self.broken = true;
        self.out.clear();
        self.out_len = 0;
        self.sealed.clear();
        self.sealed_off = 0;
        let _ = registry.reregister(&mut self.sock, token, Interest::READABLE);
        self.writable = false;
        e
    }

    /// Write queued bytes until done or `WouldBlock`; ask for writability if
    /// some remain.
    pub fn flush(&mut self, registry: &Registry, token: Token) -> io::Result<()> {
        if self.held {
            return Ok(());
        }
        while self.seal.is_some() && !self.flushed() && self.budget > 0 {
            match self.write_sealed() {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.budget = self.budget.saturating_sub(n);
                    self.progressed = Instant::now();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.write_failed(registry, token, e)),
            }
        }
        while self.seal.is_none() && !self.out.is_empty() && self.budget > 0 {
            match self.write_some() {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(mut n) => {
                    self.budget = self.budget.saturating_sub(n);
                    self.progressed = Instant::now();
                    self.out_len -= n;
                    while n > 0 {
                        let Some(front) = self.out.front_mut() else {
                            break;
                        };
                        let left = front.bytes.len() - front.off;
                        if n >= left {
                            n -= left;
                            self.out.pop_front();
                        } else {
                            front.off += n;
                            n = 0;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.write_failed(registry, token, e)),
            }
        }
        let want = !self.flushed();
        if want != self.writable {
            let interest = if want {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            registry.reregister(&mut self.sock, token, interest)?;
            self.writable = want;
        }
        Ok(())
    }
}
