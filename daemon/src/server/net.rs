//! Connections: accepting them (TCP from daemons, the Unix control socket), the
//! handshake, dialling data links, reading and decoding frames, sending,
//! refusing and closing; joining the master at start, tried again with
//! back-off while it cannot answer. What does not live here: what a frame
//! means once decoded (`peer`, `vp`, `control`), attaching to a new master
//! (`attach`).
//!
//! The state all this works on is the daemon's `Net` part, defined here:
//! the poll, the listening sockets and signals, every connection by token,
//! the data links and what waits for them, each turn's read and write
//! shares, and the pools of large messages' buffers. Handlers elsewhere
//! reach it as `self.net`; what touches nothing else is a method of `Net`.

use std::collections::{HashMap, HashSet};
use std::io::{self, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use libmig::auth::ClusterKey;
use libmig::frame::FrameError;
use libmig::handshake::{Answer, Client};
use libmig::msg::{Envelope, Handshake, PeerMsg, Request, Response, ToMaster, VpMsg};
use libmig::seal::Sealer;
use libmig::{frame, Payload};
use mio::net::TcpStream;
use mio::{Interest, Poll, Token};
use signal_hook::consts::SIGINT;

use super::{
    Daemon, DaemonError, Listeners, FIRST, HANDSHAKE_TIMEOUT, READ_BUDGET, READ_TIME,
    WAITER_BACKLOG, WAITER_MAX, WAITER_STALL,
};
use crate::conn::{Conn, Kind, ReadOutcome, Sock};
use crate::route::Body;
use crate::{debug, log, warn};

/// A share of a turn never used up: frames handled to the end.
const NO_LIMIT: Duration = Duration::from_secs(3600);

/// Connections not yet authenticated held at once, and from one address,
/// besides `PER_MEMBER` for each host of the virtual machine (at that
/// address): beyond, a new one is closed at once (a flood costs the daemon
/// nothing). At a failover every host dials the new master at once, and on
/// one machine (`mig up`) they all come from one address.
const MAX_STRANGERS: usize = 64;
const MAX_STRANGERS_PER_ADDR: usize = 16;
const PER_MEMBER: usize = 2;
/// How long after a data link closed before it opened its host is not
/// dialled again (messages for it are said to be undeliverable meanwhile).
pub(super) const DIAL_AGAIN_AFTER: Duration = Duration::from_millis(200);

/// Size of the pieces of a message too large for one frame.
const PART: usize = 32 << 20;

/// The largest message taken in pieces (a checkpoint image and its
/// message): more is refused and the connection closed.
const MAX_PARTS: usize = 16 << 30;

/// What a worker without a master says to a daemon that would join it, and
/// a worker to one that would attach to it: both may be tried again (a
/// master is being elected).
pub(crate) const NO_MASTER_NOW: &str = "this daemon is a worker and has no master right now";
pub(crate) const NOT_THE_MASTER: &str = "this daemon is not the master";

/// Why a dial failed.
#[derive(Debug)]
pub(super) enum DialError {
    /// Nothing answered, or the connection broke: worth trying again.
    Unreachable(String),
    /// The other daemon answered and refused (another key, another
    /// version...): trying again changes nothing.
    Refused(String),
}

impl std::fmt::Display for DialError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DialError::Unreachable(why) | DialError::Refused(why) => f.write_str(why),
        }
    }
}

impl DialError {
    /// A frame error: broken (try again) or refused.
    fn of(e: FrameError) -> DialError {
        match e {
            FrameError::Io(_) | FrameError::Truncated => DialError::Unreachable(e.to_string()),
            e => DialError::Refused(e.to_string()),
        }
    }
}

/// Back-off before try `tries` (from 1) of something that failed: 100 ms
/// doubling up to `most`, less up to half at random, so that hosts that
/// failed together do not try again together.
pub(crate) fn back_off(tries: u32, most: Duration) -> Duration {
    let d = Duration::from_millis(100)
        .saturating_mul(1 << tries.saturating_sub(1).min(16))
        .min(most);
    d - jitter(d / 2)
}

/// A random duration below `d` (zero for zero).
pub(super) fn jitter(d: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let nanos = d.as_nanos().min(u64::MAX as u128) as u64;
    if nanos == 0 {
        return Duration::ZERO;
    }
    // A hasher's keys are random per process and per call.
    let r = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    Duration::from_nanos(r % nanos)
}

/// A TCP connection to `addr`, from the address this daemon listens on
/// (`local`) when that is a definite one of the same kind (loopback to
/// loopback): other daemons, and firewalls, then see one address for it.
/// Blocking up to `within`, or (`None`) begun without blocking.
pub(super) fn dial(
    local: Option<SocketAddr>,
    addr: SocketAddr,
    within: Option<Duration>,
) -> io::Result<std::net::TcpStream> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if let Some(ip) = local.map(|l| l.ip()).filter(|ip| {
        !ip.is_unspecified()
            && ip.is_loopback() == addr.ip().is_loopback()
            && ip.is_ipv4() == addr.is_ipv4()
    }) {
        s.bind(&SocketAddr::new(ip, 0).into())?;
    }
    s.set_tcp_nodelay(true)?;
    match within {
        Some(t) => s.connect_timeout(&addr.into(), t)?,
        None => {
            s.set_nonblocking(true)?;
            match s.connect(&addr.into()) {
                Err(e) if e.raw_os_error() != Some(libc::EINPROGRESS) => return Err(e),
                _ => {}
            }
        }
    }
    Ok(s.into())
}

/// The network: the poll and everything registered with it for daemons
/// and users (the listening sockets, the signals, every connection), the
/// data links to other hosts and what waits for them, and each turn's
/// shares of reading and writing. Owned by the `Daemon`; its handlers
/// reach it as `self.net`.
pub(super) struct Net {
    /// The poll every socket, pipe and signal is registered with.
    pub(super) poll: Poll,
    /// The cluster key both ends of a link between daemons prove.
    pub(super) key: ClusterKey,
    /// The TCP port, the control socket and the signals.
    pub(super) listeners: Listeners,
    /// Every connection by its token; its `Kind` says what is at the
    /// other end.
    pub(super) conns: HashMap<Token, Conn>,
    /// The next token to give (`token`).
    pub(super) next_token: usize,
    /// Each host's address, as the master last said.
    pub(super) peers: HashMap<String, SocketAddr>,
    /// The data link to each host.
    pub(super) links: HashMap<String, Token>,
    /// Hosts whose last data link closed before it was opened, and when:
    /// VPs' messages do not dial it again before `DIAL_AGAIN_AFTER` (a sender whose host
    /// just died would otherwise dial it once a message).
    pub(super) dial_failed: HashMap<String, Instant>,
    pub(super) dialling: HashMap<Token, Vec<Pending>>,
    /// Connections that had their share of a turn with more to read.
    pub(super) read_again: HashSet<Token>,
    /// Until when this turn reads connections (`READS_TURN`).
    pub(super) reads_until: Instant,
    /// Connections that wrote their share this turn with more to write.
    pub(super) write_again: HashSet<Token>,
    /// Buffers for large messages from other hosts to local VPs, and
    /// mappings of local VPs' buffers whose bytes go to other hosts.
    pub(super) outbox: libmig::pool::Outbox,
    pub(super) inbox: libmig::pool::Inbox,
    /// When buffers and mappings unused for a while were last let go.
    pub(super) pools_trimmed: Instant,
    /// Large messages arriving in pieces, by connection.
    pub(super) parts: HashMap<Token, Vec<u8>>,
    /// Log lines about connections from unknown peers.
    pub(super) strangers: crate::log::Budget,
    /// While the master's decisions are carried out: the connections
    /// written to, whose bytes are queued and written once at the end
    /// (`Daemon::cork`), not a system call per message.
    pub(super) corked: Option<HashSet<Token>>,
}

impl Net {
    /// On the master: its workers' links to it.
    pub(super) fn worker_links(&self) -> Vec<Token> {
        self.conns
            .iter()
            .filter(|(_, c)| matches!(c.kind, Kind::Peer { host: Some(_) }))
            .map(|(t, _)| *t)
            .collect()
    }

    /// The network around the poll and the listening sockets, with no
    /// connection yet.
    pub(super) fn new(poll: Poll, key: ClusterKey, listeners: Listeners) -> Net {
        Net {
            poll,
            key,
            listeners,
            conns: HashMap::new(),
            next_token: FIRST,
            peers: HashMap::new(),
            links: HashMap::new(),
            dial_failed: HashMap::new(),
            dialling: HashMap::new(),
            read_again: HashSet::new(),
            reads_until: Instant::now(),
            write_again: HashSet::new(),
            outbox: Default::default(),
            inbox: Default::default(),
            pools_trimmed: Instant::now(),
            parts: HashMap::new(),
            strangers: crate::log::Budget::default(),
            corked: None,
        }
    }

    /// A token no connection, pipe or stdin has had.
    pub(super) fn token(&mut self) -> Token {
        let t = Token(self.next_token);
        self.next_token += 1;
        t
    }

    /// Wait `d`, unless SIGTERM or SIGINT comes first (true then).
    fn stop_asked_within(&mut self, d: Duration) -> bool {
        let until = Instant::now() + d;
        loop {
            if self
                .listeners
                .signals
                .pending()
                .any(|s| s == signal_hook::consts::SIGTERM || s == SIGINT)
            {
                return true;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            std::thread::sleep(left.min(Duration::from_millis(20)));
        }
    }

    /// Register an authenticated blocking stream, sealed by `seal`, with
    /// the loop.
    pub(super) fn adopt(
        &mut self,
        s: std::net::TcpStream,
        kind: Kind,
        seal: Box<Sealer>,
    ) -> io::Result<Token> {
        s.set_nonblocking(true)?;
        let mut sock = Sock::Tcp(TcpStream::from_std(s));
        let t = self.token();
        self.poll
            .registry()
            .register(&mut sock, t, Interest::READABLE)?;
        let mut c = Conn::new(sock, kind);
        c.seal_with(seal);
        // Frames already opened (they came in one record with the answer
        // read above) are taken on the next turn, without waiting for the
        // socket.
        if c.has_plain() {
            self.read_again.insert(t);
        }
        self.conns.insert(t, c);
        Ok(t)
    }

    /// The data link to `host`; dialled if there is none. Dialling does not
    /// block the loop: the handshake runs as messages arrive (`dialling`),
    /// and messages wait in `dialling` until it is done.
    /// Did a data link to `host` close before it opened, lately (VPs'
    /// messages to it are then undeliverable without a dial each)?
    pub(super) fn dial_failed_lately(&self, host: &str) -> bool {
        !self.links.contains_key(host)
            && self
                .dial_failed
                .get(host)
                .is_some_and(|at| at.elapsed() < DIAL_AGAIN_AFTER)
    }

    /// Is `t` a data link whose handshake is done?
    pub(super) fn is_data_link(&self, t: Token) -> bool {
        self.conns
            .get(&t)
            .is_some_and(|c| matches!(c.kind, Kind::Data { .. }))
    }

    /// On the master: worker `host`'s link to it, if it has one.
    pub(super) fn host_token(&self, host: &str) -> Option<Token> {
        self.conns
            .iter()
            .find(|(_, c)| matches!(&c.kind, Kind::Peer { host: Some(h) } if h == host))
            .map(|(t, _)| *t)
    }
}

impl Daemon {
    /// Connect to the master and authenticate (blocking, with timeouts),
    /// then hand the socket to the loop. A master that cannot answer now
    /// (none listening yet, too busy, being elected: the daemon reached a
    /// worker meanwhile) is tried again with back-off until it answers,
    /// refuses for good, or this daemon is told to stop.
    pub(super) fn join(&mut self, addr: SocketAddr) -> Result<(), DaemonError> {
        let mut tries = 0u32;
        loop {
            let why = match self.join_at(addr, 3) {
                Ok(()) if tries > 0 => {
                    log!("joined the master at {addr} after {} tries", tries + 1);
                    return Ok(());
                }
                Ok(()) => return Ok(()),
                Err(DialError::Refused(why)) => return Err(DaemonError::Join { addr, why }),
                Err(DialError::Unreachable(why)) => why,
            };
            tries += 1;
            let wait = back_off(tries, Duration::from_secs(2));
            if tries == 1 || tries.is_power_of_two() {
                warn!(
                    "cannot join the master at {addr} yet ({why}): trying again (try {tries}, \
                     next in {} ms)",
                    wait.as_millis()
                );
            }
            if self.net.stop_asked_within(wait) {
                return Err(DaemonError::Join {
                    addr,
                    why: format!("stopped while trying again ({why})"),
                });
            }
        }
    }

    /// `join` at `addr`, following up to `redirects` workers' word of where
    /// the master is.
    fn join_at(&mut self, addr: SocketAddr, redirects: u32) -> Result<(), DialError> {
        let local = self.net.listeners.tcp.local_addr().ok();
        let (mut s, mut seal) = connect(&self.net.key, local, addr, HANDSHAKE_TIMEOUT)?;
        seal.write_frame(
            &mut s,
            &PeerMsg::from(Handshake::Register {
                facts: self.facts.clone(),
            }),
        )
        .map_err(DialError::of)?;
        match seal
            .read_frame::<PeerMsg, _>(&mut s)
            .map_err(DialError::of)?
        {
            Some(PeerMsg::Handshake(Handshake::Registered { name })) => {
                if name != self.facts.name {
                    log!(
                        "registered as {name} (the name {} was taken)",
                        self.facts.name
                    );
                }
                self.router.rename(&name);
                self.facts.name = name;
            }
            Some(PeerMsg::Handshake(Handshake::Redirect { addr: to })) if redirects > 0 => {
                let to: SocketAddr = to.parse().map_err(|_| {
                    DialError::Refused(format!("{addr} named a bad master address {to:?}"))
                })?;
                log!("{addr} is a worker: joining its master at {to}");
                return self.join_at(to, redirects - 1);
            }
            Some(PeerMsg::Handshake(Handshake::Refused { reason }))
                if reason == NO_MASTER_NOW || reason == NOT_THE_MASTER =>
            {
                return Err(DialError::Unreachable(format!("{addr}: {reason}")))
            }
            None => {
                return Err(DialError::Unreachable(format!(
                    "{addr} closed the connection"
                )))
            }
            // Any other answer, of any conversation.
            other @ Some(
                PeerMsg::Handshake(_)
                | PeerMsg::ToHost(_)
                | PeerMsg::ToMaster(_)
                | PeerMsg::Data(_)
                | PeerMsg::Quorum(_)
                | PeerMsg::Bidding(_)
                | PeerMsg::Rate(_)
                | PeerMsg::Part { .. },
            ) => {
                return Err(DialError::Refused(format!(
                    "{addr} gave an unexpected answer {other:?}"
                )))
            }
        }
        let t = self
            .net
            .adopt(s, Kind::Master, seal)
            .map_err(|e| DialError::Unreachable(e.to_string()))?;
        self.role.joined(t);
        self.attach.heard = Instant::now();
        self.failover.master_addr = Some(addr);
        Ok(())
    }

    pub(super) fn link_to(&mut self, host: &str) -> Option<Token> {
        if let Some(&t) = self.net.links.get(host) {
            if self.net.conns.contains_key(&t) {
                return Some(t);
            }
        }
        let addr = *self.net.peers.get(host)?;
        let dialled = Client::start(&self.net.key)
            .map_err(|e| e.to_string())
            .and_then(|(client, hello)| {
                let local = self.net.listeners.tcp.local_addr().ok();
                let mut s = dial(local, addr, None)
                    .map(TcpStream::from_std)
                    .map_err(|e| e.to_string())?;
                let t = self.net.token();
                self.net
                    .poll
                    .registry()
                    .register(&mut s, t, Interest::READABLE)
                    .map_err(|e| e.to_string())?;
                let kind = Kind::Dialling {
                    host: host.to_string(),
                };
                let mut c = Conn::new(Sock::Tcp(s), kind);
                c.hs = Some(crate::conn::Handshake::Dial(client));
                self.net.conns.insert(t, c);
                Ok((t, hello))
            });
        match dialled {
            Ok((t, hello)) => {
                self.net.links.insert(host.to_string(), t);
                self.send_peer(t, hello);
                Some(t)
            }
            Err(e) => {
                warn!("cannot open a data link to {host} at {addr}: {e}");
                None
            }
        }
    }

    /// Take every connection waiting on a listener: daemons on TCP (they
    /// must authenticate first), `mig` and VPs on the control socket (only
    /// this daemon's user and root).
    pub(super) fn accept(&mut self, tcp: bool) {
        loop {
            let accepted = if tcp {
                self.net.listeners.tcp.accept().map(|(s, peer)| {
                    let _ = s.set_nodelay(true);
                    (Sock::Tcp(s), Kind::Accepting, Some(peer))
                })
            } else {
                self.net
                    .listeners
                    .unix
                    .accept()
                    .map(|(s, _)| (Sock::Unix(s), Kind::Control, None))
            };
            match accepted {
                Ok((sock, kind, peer)) => self.admit(sock, kind, peer),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    warn!("accept failed: {e}");
                    return;
                }
            }
        }
    }

    /// Register an accepted connection with the loop.
    fn admit(&mut self, mut sock: Sock, kind: Kind, peer: Option<SocketAddr>) {
        let mut local_uid = None;
        if let Sock::Unix(s) = &sock {
            let uid = nix::sys::socket::getsockopt(s, nix::sys::socket::sockopt::PeerCredentials)
                .map(|c| c.uid())
                .unwrap_or(u32::MAX);
            local_uid = Some(uid);
            if uid != self.uid && uid != 0 && !(self.cfg.shared && uid != u32::MAX) {
                let why = format!(
                    "permission denied: uid {uid} may not control this daemon (only uid {} and \
                     root may; a daemon with `shared = true` serves every local user)",
                    self.uid
                );
                // Told why, best effort (the socket is fresh: one small
                // frame fits), then closed.
                if let (Sock::Unix(s), Ok(b)) = (
                    &mut sock,
                    frame::encode(&Response::Error {
                        message: why.clone(),
                    }),
                ) {
                    let _ = s.write(&b);
                }
                if self.net.strangers.allow(Instant::now()) {
                    warn!("control connection refused: {why}");
                }
                return;
            }
        }
        if let Some(peer) = peer {
            let strangers: Vec<Option<std::net::IpAddr>> = self
                .net
                .conns
                .values()
                .filter(|c| c.kind == Kind::Accepting)
                .map(|c| match &c.sock {
                    Sock::Tcp(s) => s.peer_addr().ok().map(|a| a.ip()),
                    Sock::Unix(_) => None,
                })
                .collect();
            let same = strangers.iter().filter(|a| **a == Some(peer.ip())).count();
            let members = self.net.peers.len();
            let members_there = self
                .net
                .peers
                .values()
                .filter(|a| a.ip() == peer.ip())
                .count();
            if strangers.len() >= MAX_STRANGERS + PER_MEMBER * members
                || same >= MAX_STRANGERS_PER_ADDR + PER_MEMBER * members_there
            {
                if self.net.strangers.allow(Instant::now()) {
                    warn!(
                        "refusing connection from {peer}: {} connections not yet authenticated \
                         ({same} from that address)",
                        strangers.len()
                    );
                }
                return;
            }
        }
        let t = self.net.token();
        if self
            .net
            .poll
            .registry()
            .register(&mut sock, t, Interest::READABLE)
            .is_ok()
        {
            // (The budget of lines about strangers is spent only on lines
            // written.)
            let noted = crate::log::enabled(log::Level::Debug, module_path!());
            if let Some(peer) = peer.filter(|_| noted && self.net.strangers.allow(Instant::now())) {
                debug!("connection from {peer}");
            }
            let mut c = Conn::new(sock, kind);
            c.uid = local_uid;
            self.net.conns.insert(t, c);
        }
    }

    pub(super) fn close(&mut self, t: Token, why: &str) {
        self.net.parts.remove(&t);
        let Some(mut c) = self.net.conns.remove(&t) else {
            return;
        };
        let _ = self.net.poll.registry().deregister(&mut c.sock);
        // Images that were arriving on it never will: their files go, and
        // the master hears that nothing of those VPs is here (their source
        // may still have them: it starts them again from what it kept).
        for inc in self.moves.cut_off(t) {
            let got = inc.seen();
            let tid = inc.what().tid;
            inc.discard();
            let reason = format!("its image stopped coming after {got} bytes ({why})");
            warn!("cannot restore VP t{tid:x}: {reason}");
            self.report(ToMaster::Missing { tid, reason });
        }
        self.images.copies_cut_off(t);
        let dialling = matches!(c.kind, Kind::Dialling { .. });
        match c.kind {
            Kind::Peer { host: Some(h) } => match self.role.master() {
                // A host deleted from the virtual machine (`mig delete`).
                Some(m) if !m.knows(&h) => debug!("connection of {h}, a host no more, closed"),
                Some(m) => {
                    log!("lost connection to {h}: {why}");
                    let out = m.host_lost(&h, why, Instant::now());
                    self.carry_out_when_committed(out);
                }
                None => log!("lost connection to {h}: {why}"),
            },
            Kind::Master => self.master_lost(why),
            Kind::Attaching { .. } => self.attach_closed(t, why),
            Kind::Accepting if self.net.strangers.allow(Instant::now()) => {
                warn!("dropped unauthenticated connection: {why}")
            }
            Kind::Accepting => {}
            Kind::Vp { tid } => {
                if why != "closed by peer" {
                    log!("disconnected VP t{tid:x}: {why}");
                }
                self.router.closed(tid, t);
                if self.local.vp_conns.get(&tid) == Some(&t) {
                    self.local.vp_conns.remove(&tid);
                }
            }
            Kind::Data { host } | Kind::Dialling { host, .. }
                if self.net.links.get(&host) == Some(&t) =>
            {
                self.net.links.remove(&host);
                if dialling {
                    self.net.dial_failed.insert(host.clone(), Instant::now());
                } else {
                    self.net.dial_failed.remove(&host);
                }
                self.failover.cut_off(&host);
                for p in self.net.dialling.remove(&t).unwrap_or_default() {
                    match p {
                        Pending::Msg(env, _) => self
                            .undeliverable(env, &format!("host {host} cannot be reached: {why}")),
                        // The consensus sends again; an announcement is
                        // made again by whoever leads; an asker for bids
                        // decides without this one's.
                        Pending::Peer(_) => {}
                    }
                }
            }
            _ => {}
        }
        self.proxied.closed(t);
        // Whoever waited for this connection to drain goes on.
        let senders = self.flow.closed(t);
        self.resume_all(senders);
    }

    /// Read and handle what a connection has, frame by frame, until it is
    /// drained, paused (flow control) or closed, or has had its share of
    /// this turn of the loop (`READ_BUDGET` bytes or `READ_TIME`: it is
    /// read again next turn, so a fast sender cannot keep the loop from
    /// heartbeats and other connections). Reads are bounded (one chunk, or
    /// one large payload, at a time), so a fast sender cannot make the
    /// daemon buffer more than a frame ahead. `hup`: the peer may have closed (the poll said so, or
    /// the connection was not read for a while): read on to the end.
    pub(super) fn conn_ready(&mut self, t: Token, hup: bool) {
        // A worker's news waits while the master has many committed
        // decisions still to carry out (see `backlogged`).
        if !hup
            && self.backlogged()
            && self
                .net
                .conns
                .get(&t)
                .is_some_and(|c| matches!(c.kind, Kind::Peer { host: Some(_) }))
        {
            self.net.read_again.insert(t);
            return;
        }
        let mut budget = READ_BUDGET;
        // Its share of the turn, within what the turn has left for all.
        let until = (Instant::now() + READ_TIME).min(self.net.reads_until);
        loop {
            if !self.drain_buffered(t, until) {
                return;
            }
            let Some(c) = self.net.conns.get_mut(&t) else {
                return;
            };
            if c.paused || c.closing {
                return;
            }
            if c.fds.len() > 64 {
                return self.refuse(t, "descriptors passed without their messages");
            }
            if budget == 0 || Instant::now() >= until {
                self.net.read_again.insert(t);
                return;
            }
            match c.read_some() {
                ReadOutcome::Full(n) => budget = budget.saturating_sub(n.max(1)),
                ReadOutcome::Short(n) if hup => budget = budget.saturating_sub(n.max(1)),
                ReadOutcome::Short(_) | ReadOutcome::Empty => {
                    self.drain_buffered(t, until);
                    return;
                }
                ReadOutcome::Closed => return self.closed_by_peer(t),
            }
        }
    }

    /// The peer of `t` closed it: what it said before is handled, to the
    /// end (nothing is lost), and it is closed.
    fn closed_by_peer(&mut self, t: Token) {
        self.drain_buffered(t, Instant::now() + NO_LIMIT);
        let why = self
            .net
            .conns
            .get_mut(&t)
            .and_then(|c| c.failed.take())
            .unwrap_or_else(|| "closed by peer".into());
        self.close(t, &why);
    }

    /// Read and handle all that `t` has to say now (up to `READ_BUDGET`
    /// bytes), whatever this turn's share: a VP whose process has ended
    /// said its last words before its end (that its image is written,
    /// say), and they count first.
    pub(super) fn read_out(&mut self, t: Token) {
        let mut budget = READ_BUDGET;
        loop {
            if !self.drain_buffered(t, Instant::now() + NO_LIMIT) {
                return;
            }
            let Some(c) = self.net.conns.get_mut(&t) else {
                return;
            };
            if c.paused || c.closing {
                return;
            }
            if budget == 0 {
                self.net.read_again.insert(t);
                return;
            }
            match c.read_some() {
                ReadOutcome::Full(n) | ReadOutcome::Short(n) => {
                    budget = budget.saturating_sub(n.max(1))
                }
                ReadOutcome::Empty => return,
                ReadOutcome::Closed => return self.closed_by_peer(t),
            }
        }
    }

    /// Read and handle everything a stopped VP wrote on `t`, whatever its
    /// share of the turn and even while it is paused (it writes nothing
    /// more, so this ends): before it is saved from outside, its messages
    /// go on from here and what is left in the decoder is the start of a
    /// frame it had not finished writing. A connection paused before, or
    /// by what it said, stays paused.
    pub(super) fn drain_stopped(&mut self, t: Token) {
        let mut paused = false;
        loop {
            let Some(c) = self.net.conns.get_mut(&t) else {
                return;
            };
            paused |= c.paused;
            c.paused = false;
            if !self.drain_buffered(t, Instant::now() + NO_LIMIT) {
                match self.net.conns.get(&t) {
                    // Paused by a receiver that is full: read on.
                    Some(c) if c.paused && !c.closing => continue,
                    Some(_) => break,
                    None => return,
                }
            }
            let Some(c) = self.net.conns.get_mut(&t) else {
                return;
            };
            match c.read_some() {
                ReadOutcome::Full(_) | ReadOutcome::Short(_) => {}
                ReadOutcome::Empty => break,
                ReadOutcome::Closed => return self.closed_by_peer(t),
            }
        }
        if let Some(c) = self.net.conns.get_mut(&t) {
            c.paused |= paused;
        }
    }

    /// Handle the frames a connection has buffered, without reading, until
    /// `until`: those left then wait for the next turn (a burst of a
    /// thousand VPs' starts is not all carried out in one). Were they all
    /// handled?
    pub(super) fn drain_buffered(&mut self, t: Token, until: Instant) -> bool {
        loop {
            let Some(c) = self.net.conns.get_mut(&t) else {
                return false;
            };
            if c.paused || c.closing {
                return false;
            }
            let kind = c.kind.clone();
            let res = match kind {
                Kind::Control => c
                    .dec
                    .next_frame::<Request>()
                    .map(|f| f.map(|req| self.control(t, req))),
                Kind::Vp { tid } => {
                    let frame = c.dec.next_frame_with::<VpMsg>();
                    if matches!(frame, Ok(Some(_))) {
                        c.heard_from = true;
                    }
                    frame.map(|f| f.map(|(msg, payload)| self.vp_msg(t, tid, msg, payload)))
                }
                _ => c
                    .dec
                    .next_frame_with::<PeerMsg>()
                    .map(|f| f.map(|(msg, payload)| self.peer_msg(t, kind, msg, payload))),
            };
            match res {
                Ok(Some(())) if Instant::now() >= until => {
                    self.net.read_again.insert(t);
                    return false;
                }
                Ok(Some(())) => {}
                Ok(None) => return true,
                Err(e) => {
                    self.refuse(t, &e.to_string());
                    return false;
                }
            }
        }
    }

    /// Writing to `t` failed: its output is dropped (the connection is
    /// `broken`), but it is read to its end, so nothing its peer sent before
    /// closing is lost; whoever waited for it to drain goes on.
    pub(super) fn write_failed(&mut self, t: Token, e: &io::Error) {
        let kind = self.net.conns.get(&t).map(|c| c.kind.clone());
        if !matches!(kind, Some(Kind::Vp { .. })) {
            let who = kind.map_or_else(|| "a closed connection".to_string(), |k| k.to_string());
            warn!("cannot write to {who}: {e}");
        }
        let senders = self.flow.gave_up(t);
        self.resume_all(senders);
        if let Some(c) = self.net.conns.get(&t) {
            if c.closing {
                self.close(t, "write failed");
            }
        }
    }

    /// Tell the peer why (best effort) and close.
    pub(super) fn refuse(&mut self, t: Token, reason: &str) {
        let kind = self.net.conns.get(&t).map(|c| c.kind.clone());
        let stranger = matches!(kind, Some(Kind::Accepting));
        if !stranger || self.net.strangers.allow(Instant::now()) {
            warn!("refusing connection: {reason}");
        }
        if let Some(Kind::Vp { .. }) = kind {
            return self.close(t, reason);
        }
        if kind != Some(Kind::Control) {
            self.send_peer(
                t,
                Handshake::Refused {
                    reason: reason.to_string(),
                },
            );
        } else {
            self.send_resp(
                t,
                &Response::Error {
                    message: reason.to_string(),
                },
            );
        }
        if let Some(c) = self.net.conns.get_mut(&t) {
            c.closing = true;
        }
        if self.net.conns.get(&t).is_some_and(Conn::flushed) {
            self.close(t, reason);
        }
    }

    /// The data link to `host` if it is ready now (dialled if there is none).
    pub(super) fn data_link(&mut self, host: &str) -> Option<Token> {
        self.link_to(host).filter(|&d| self.net.is_data_link(d))
    }

    /// Write to `t` again, if its output was held (a VP whose save from
    /// outside ended without a move): what was queued meanwhile first.
    pub(super) fn release_output(&mut self, t: Token) {
        let failed = match self.net.conns.get_mut(&t) {
            Some(c) if c.output_held() => c.release_output(self.net.poll.registry(), t).err(),
            _ => return,
        };
        if let Some(e) = failed {
            self.write_failed(t, &e);
        }
        self.maybe_resume(t);
    }

    pub(super) fn send_bytes(&mut self, t: Token, bytes: &[u8]) {
        if let Some(corked) = &mut self.net.corked {
            if let Some(c) = self.net.conns.get_mut(&t) {
                c.queue(bytes);
                corked.insert(t);
            }
            return;
        }
        let failed = match self.net.conns.get_mut(&t) {
            Some(c) => c.send(bytes, self.net.poll.registry(), t).err(),
            None => None,
        };
        if let Some(e) = failed {
            self.write_failed(t, &e);
        }
    }

    pub(super) fn send_peer(&mut self, t: Token, msg: impl Into<PeerMsg>) {
        let msg = msg.into();
        match frame::encode(&msg) {
            Ok(b) => self.send_bytes(t, &b),
            Err(FrameError::TooLarge(_)) => self.send_in_parts(t, &msg),
            Err(e) => warn!("cannot encode a message: {e}"),
        }
    }

    /// A message too large for one frame (a checkpoint image over 64 MiB),
    /// in pieces the other side puts together (`PeerMsg::Part`).
    fn send_in_parts(&mut self, t: Token, msg: &PeerMsg) {
        let body = match postcard::to_allocvec(msg) {
            Ok(b) => b,
            Err(e) => return warn!("cannot encode a message: {e}"),
        };
        let mut pieces = body.chunks(PART).peekable();
        while let Some(piece) = pieces.next() {
            let last = pieces.peek().is_none();
            match frame::encode_with(&PeerMsg::Part { last }, piece) {
                Ok(b) => self.send_bytes(t, &b),
                Err(e) => return warn!("cannot encode a piece of a message: {e}"),
            }
        }
    }

    /// A piece of a large message arrived on `t`; the last one completes
    /// it, and it is taken as if it had come whole.
    pub(super) fn part(&mut self, t: Token, kind: Kind, last: bool, piece: Vec<u8>) {
        let buf = self.net.parts.entry(t).or_default();
        if buf.len() + piece.len() > MAX_PARTS {
            self.net.parts.remove(&t);
            return self.refuse(
                t,
                "a message in pieces larger than any checkpoint image may be",
            );
        }
        buf.extend_from_slice(&piece);
        if !last {
            return;
        }
        let Some(whole) = self.net.parts.remove(&t) else {
            return;
        };
        match postcard::from_bytes::<PeerMsg>(&whole) {
            Ok(PeerMsg::Part { .. }) => self.refuse(t, "a piece inside a piece"),
            Ok(msg) => self.peer_msg(t, kind, msg, Vec::new()),
            Err(e) => self.refuse(t, &format!("a message in pieces does not decode: {e}")),
        }
    }

    /// An answer to a control client. Lines of job output are skipped for
    /// one that has stopped reading (`WAITER_BACKLOG` bytes waiting and
    /// none taken for `WAITER_STALL`; or `WAITER_MAX` waiting however it
    /// reads): the daemon would hold the job's whole output for it. It is
    /// told how many before the next answer that goes. A waiter that reads,
    /// however slowly, misses nothing below `WAITER_MAX`.
    pub(super) fn send_resp(&mut self, t: Token, resp: &Response) {
        let output = matches!(resp, Response::Output { .. });
        if let Some(c) = self.net.conns.get_mut(&t) {
            let full = (c.queued() >= WAITER_BACKLOG && c.stalled_for() >= WAITER_STALL)
                || c.queued() >= WAITER_MAX;
            if output && full {
                c.skipped += 1;
                return;
            }
            if c.skipped > 0 {
                let lines = std::mem::take(&mut c.skipped);
                self.send_encoded(t, &Response::Skipped { lines });
            }
        }
        self.send_encoded(t, resp);
    }

    fn send_encoded(&mut self, t: Token, resp: &Response) {
        match frame::encode(resp) {
            Ok(b) => self.send_bytes(t, &b),
            Err(e) => warn!("cannot encode a reply: {e}"),
        }
    }

    pub(super) fn send_vp(&mut self, t: Token, msg: &VpMsg) {
        match frame::encode(msg) {
            Ok(b) => self.send_bytes(t, &b),
            Err(e) => warn!("cannot encode a message: {e}"),
        }
    }

    pub(super) fn send_vp_fd(&mut self, t: Token, msg: &VpMsg, fd: std::os::fd::OwnedFd) {
        match frame::encode(msg) {
            Ok(b) => self.send_bytes_with_fd(t, b, fd),
            Err(e) => warn!("cannot encode a message: {e}"),
        }
    }

    /// Send `bytes` on `t` with `fd` passed with their first.
    pub(super) fn send_bytes_with_fd(
        &mut self,
        t: Token,
        bytes: Vec<u8>,
        fd: std::os::fd::OwnedFd,
    ) {
        let registry = self.net.poll.registry();
        let failed = self.net.conns.get_mut(&t).and_then(|c| {
            c.send_parts(bytes, Payload::from(Vec::new()), Some(fd), registry, t)
                .err()
        });
        if let Some(e) = failed {
            self.write_failed(t, &e);
        }
    }
}

/// Something waiting for a data link to finish its handshake.
pub(super) enum Pending {
    /// A message between VPs.
    Msg(Envelope, Body),
    /// A message of the quorum (consensus, a new master's announcement),
    /// or a request for bids or a bid.
    Peer(PeerMsg),
}

/// Connect to a daemon (from `local`'s address, see `dial`) and
/// authenticate both ways (blocking, each step within `within`); the stream
/// is ready for the first message after `Welcome`.
pub(super) fn connect(
    key: &ClusterKey,
    local: Option<SocketAddr>,
    addr: SocketAddr,
    within: Duration,
) -> Result<(std::net::TcpStream, Box<Sealer>), DialError> {
    let unreachable = |e: io::Error| DialError::Unreachable(format!("{addr}: {e}"));
    let mut s = dial(local, addr, Some(within)).map_err(unreachable)?;
    s.set_read_timeout(Some(within)).map_err(unreachable)?;
    let (mut client, hello) = Client::start(key).map_err(|e| DialError::Refused(e.to_string()))?;
    frame::write_frame(&mut s, &PeerMsg::from(hello)).map_err(DialError::of)?;
    let mut sealer: Option<Box<Sealer>> = None;
    loop {
        let got = match &mut sealer {
            Some(seal) => seal.read_frame::<PeerMsg, _>(&mut s),
            None => frame::read_frame::<PeerMsg, _>(&mut s),
        };
        let Some(msg) = got.map_err(DialError::of)? else {
            return Err(DialError::Unreachable(format!(
                "{addr} closed the connection in the handshake"
            )));
        };
        let msg = msg.into_handshake().map_err(|what| {
            DialError::Refused(format!("{addr}: unexpected {what} in the handshake"))
        })?;
        match client.on(key, &msg) {
            Answer::Send(reply) => {
                frame::write_frame(&mut s, &PeerMsg::from(reply)).map_err(DialError::of)?
            }
            Answer::SendThenSeal(proof, seal) => {
                frame::write_frame(&mut s, &PeerMsg::from(proof)).map_err(DialError::of)?;
                sealer = Some(seal);
            }
            Answer::Done(..) => {
                return sealer
                    .map(|seal| (s, seal))
                    .ok_or_else(|| DialError::Refused("the link was not sealed".into()))
            }
            Answer::Refuse(reason) => return Err(DialError::Refused(reason)),
        }
    }
}
