//! The daemon's event loop: one mio `Poll` owns every socket, pipe and
//! signal, and one `Daemon` struct owns all state (no locks).
//!
//! What lives here: accepting and authenticating connections, decoding
//! frames and dispatching them, the worker's link to its master, data links
//! between daemons (opened on the first message for a host), each VP's
//! socket, moving messages between VPs with flow control (a receiver that
//! falls behind pauses its senders: no unbounded buffering), heartbeats,
//! signals (SIGCHLD reaps, SIGTERM/SIGINT stop), and delivering the master's
//! `Out`s. What does not: the master's decisions (`master`), where a message
//! goes (`route`), process handling details (`host`), the scheduler
//! (`sched`).

use std::collections::HashMap;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use libmig::auth::{self, ClusterKey};
use libmig::frame::{self, FrameError};
use libmig::msg::{
    Envelope, ExitInfo, HostFacts, Loc, PeerMsg, Request, Response, StartVp, Stream, Tid, VpMsg,
    SYSTEM,
};
use mio::net::{TcpListener, TcpStream, UnixListener};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM};
use signal_hook_mio::v1_0::Signals;
use thiserror::Error;

use crate::config::Config;
use crate::conn::{Conn, Kind, Sock};
use crate::host::{self, LocalVp, Pipe, Vps};
use crate::log;
use crate::master::{Master, Out, Requester};
use crate::owner::{Change, Monitor};
use crate::route::{Body, Router, Way};
use crate::slicer::{Plan, Slicer};
use crate::store::Store;
use crate::switcher::{wall_ns, Armed, Switcher};
use libmig::msg::SnapStep;
use libmig::payload::FD_PAYLOAD;
use libmig::Payload;
use nix::sys::signal::Signal;

/// How far ahead of a slot switch the loop arms it for the switcher's
/// threads (so a loop held up for a few milliseconds does not make it late).
const ARM_AHEAD: Duration = Duration::from_millis(10);

/// Shared buffers and mappings of them unused this long are let go: a
/// stream that ended leaves nothing behind in the daemon.
const POOL_IDLE: Duration = Duration::from_secs(5);

/// Threads that race to carry out each slot switch, on as many processors.
const SWITCH_THREADS: usize = 4;

const TCP: Token = Token(0);
const UNIX: Token = Token(1);
const SIGNALS: Token = Token(2);
const FIRST: usize = 16;
/// A connection that has not finished the handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection with this much queued for it pauses those who send to it...
const HIGH_WATER: usize = 8 << 20;
/// ...until it is down to this.
const LOW_WATER: usize = 2 << 20;
/// A VP with this much in memfd payloads passed and not yet taken in
/// pauses those who send to it...
const FD_HIGH_WATER: usize = 64 << 20;
/// ...until it is down to this.
const FD_LOW_WATER: usize = 16 << 20;

/// Why the daemon could not start or stopped on an error.
#[derive(Debug, Error)]
pub enum DaemonError {
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: io::Error,
    },
    /// The cluster key file.
    #[error(transparent)]
    Key(#[from] auth::KeyError),
    /// The master refused or could not be reached.
    #[error("cannot join the master at {addr}: {why}")]
    Join {
        /// Its address.
        addr: SocketAddr,
        /// Why.
        why: String,
    },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> DaemonError {
    let what = what.into();
    move |source| DaemonError::Io { what, source }
}

/// The daemon: everything the loop owns.
pub struct Daemon {
    poll: Poll,
    cfg: Config,
    key: ClusterKey,
    facts: HostFacts,
    tcp: TcpListener,
    unix: UnixListener,
    socket_path: PathBuf,
    signals: Signals,
    conns: HashMap<Token, Conn>,
    pipes: HashMap<Token, Pipe>,
    next_token: usize,
    master: Option<Master>,
    link: Option<Token>,
    proxied: HashMap<u64, Token>,
    next_proxy: u64,
    vps: Vps,
    last_beat: Instant,
    halting: Option<Instant>,
    uid: u32,
    router: Router,
    peers: HashMap<String, SocketAddr>,
    links: HashMap<String, Token>,
    dialling: HashMap<Token, Vec<Pending>>,
    /// Senders paused because too much is held for a VP not reachable yet.
    held_blocked: HashMap<Tid, Vec<Token>>,
    /// Checkpoint images arriving in parts: how to start each, and the file
    /// they go into.
    incoming: HashMap<Tid, Incoming>,
    /// Images of moving VPs being sent on while the VP writes them.
    outgoing: HashMap<Tid, Outgoing>,
    /// Each local VP's socket, for answers to it (also while it moves, when
    /// the router no longer delivers messages to it).
    vp_conns: HashMap<Tid, Token>,
    fd_inflight: HashMap<Token, usize>,
    blocked: HashMap<Token, Vec<Token>>,
    /// Is this workstation its owner's right now?
    owner: Monitor,
    /// VPs checkpointed to disk while the owner has the host: how to start
    /// each again, and its image.
    parked: HashMap<Tid, (StartVp, PathBuf)>,
    /// VPs asked to park during this taking back (asked once).
    park_tried: std::collections::HashSet<Tid>,
    /// Buffers for large messages from other hosts to local VPs, and
    /// mappings of local VPs' buffers whose bytes go to other hosts.
    outbox: libmig::pool::Outbox,
    inbox: libmig::pool::Inbox,
    /// When buffers and mappings unused for a while were last let go.
    pools_trimmed: Instant,
    /// Which local VPs run in the slot in force.
    slicer: Slicer,
    /// Carries out slot switches at their instants, and the switch armed.
    switcher: Switcher,
    armed: Option<Plan>,
    /// What was last armed for it.
    armed_as: Option<Armed>,
    /// By pid: processes of VPs that moved away and have come back here
    /// before the old process was gone.
    leaving: HashMap<i32, LocalVp>,
    /// Job checkpoints (on the master), and copies kept for it.
    store: Store,
    replicas: Store,
}

/// Start a daemon with `cfg` and run it until halted or signalled.
/// When ready it prints its bound address on one line of stdout and writes
/// it to `STATE_DIR/addr`.
pub fn run(cfg: Config) -> Result<(), DaemonError> {
    let mut d = Daemon::start(cfg)?;
    d.serve()
}

impl Daemon {
    fn start(cfg: Config) -> Result<Daemon, DaemonError> {
        std::fs::create_dir_all(&cfg.state_dir)
            .map_err(io_err(format!("creating {}", cfg.state_dir.display())))?;
        let key = ClusterKey::load_or_create(&cfg.key_file)?;
        let poll = Poll::new().map_err(io_err("creating the poll"))?;
        let mut tcp = TcpListener::bind(cfg.listen)
            .map_err(io_err(format!("listening on {}", cfg.listen)))?;
        let addr = tcp
            .local_addr()
            .map_err(io_err("reading the bound address"))?;
        let socket_path = cfg.state_dir.join("control.sock");
        let _ = std::fs::remove_file(&socket_path);
        let mut unix = UnixListener::bind(&socket_path)
            .map_err(io_err(format!("binding {}", socket_path.display())))?;
        std::fs::set_permissions(&socket_path, std::fs::Permissions::from_mode(0o600))
            .map_err(io_err("making the control socket private"))?;
        let mut signals = Signals::new([SIGCHLD, SIGTERM, SIGINT, SIGHUP])
            .map_err(io_err("installing signal handlers"))?;
        poll.registry()
            .register(&mut tcp, TCP, Interest::READABLE)
            .map_err(io_err("registering"))?;
        poll.registry()
            .register(&mut unix, UNIX, Interest::READABLE)
            .map_err(io_err("registering"))?;
        poll.registry()
            .register(&mut signals, SIGNALS, Interest::READABLE)
            .map_err(io_err("registering"))?;
        let capacity = cfg
            .capacity
            .unwrap_or_else(|| crate::facts::benchmark(Duration::from_millis(50)));
        let facts = HostFacts {
            name: cfg.name.clone(),
            arch: cfg.arch.clone(),
            processors: cfg.processors,
            capacity,
            memory_mb: crate::facts::memory_mb(),
            addr: addr.to_string(),
            pid: std::process::id(),
            offered: false,
        };
        let owner = Monitor::new(cfg.owner.clone(), Instant::now());
        let mut facts = facts;
        facts.offered = owner.offered();
        let (switcher, realtime) =
            Switcher::start(SWITCH_THREADS).map_err(|e| DaemonError::Io {
                what: "starting the slot switch threads".into(),
                source: e,
            })?;
        if !realtime {
            log!("slot switches run in the normal scheduling class (no permission for SCHED_FIFO): they may be late by milliseconds on a busy host");
        }
        let mut d = Daemon {
            poll,
            key,
            facts,
            tcp,
            unix,
            socket_path,
            signals,
            conns: HashMap::new(),
            pipes: HashMap::new(),
            next_token: FIRST,
            master: None,
            link: None,
            proxied: HashMap::new(),
            next_proxy: 1,
            vps: Vps::default(),
            last_beat: Instant::now(),
            halting: None,
            uid: nix::unistd::geteuid().as_raw(),
            router: Router::new(&cfg.name, cfg.join.is_none()),
            peers: HashMap::new(),
            links: HashMap::new(),
            dialling: HashMap::new(),
            incoming: HashMap::new(),
            outgoing: HashMap::new(),
            held_blocked: HashMap::new(),
            vp_conns: HashMap::new(),
            fd_inflight: HashMap::new(),
            blocked: HashMap::new(),
            owner,
            parked: HashMap::new(),
            park_tried: Default::default(),
            outbox: Default::default(),
            inbox: Default::default(),
            pools_trimmed: Instant::now(),
            slicer: Slicer::default(),
            switcher,
            armed: None,
            armed_as: None,
            leaving: HashMap::new(),
            store: Store::new(cfg.state_dir.join("ckpt")),
            replicas: Store::new(cfg.state_dir.join("replicas")),
            cfg,
        };
        match d.cfg.join {
            None => {
                let (mut m, out) = Master::new(d.facts.clone(), Instant::now(), d.cfg.quantum);
                m.set_checkpointing(d.cfg.checkpoint_interval, d.cfg.safe_point_timeout);
                d.master = Some(m);
                d.deliver(out);
                log!("master {} listening on {addr}", d.facts.name);
            }
            Some(master) => {
                d.join(master)?;
                log!(
                    "worker {} listening on {addr}, joined {master}",
                    d.facts.name
                );
            }
        }
        // The master knows from the start whose this host is.
        let report = d.owner.report(Instant::now());
        d.report(PeerMsg::Owner(report));
        std::fs::write(d.cfg.state_dir.join("addr"), format!("{addr}\n"))
            .map_err(io_err("writing the address file"))?;
        let mut stdout = io::stdout();
        let _ = writeln!(stdout, "{addr}");
        let _ = stdout.flush();
        Ok(d)
    }

    fn token(&mut self) -> Token {
        let t = Token(self.next_token);
        self.next_token += 1;
        t
    }

    /// Connect to the master and authenticate (blocking, with timeouts),
    /// then hand the socket to the loop.
    fn join(&mut self, addr: SocketAddr) -> Result<(), DaemonError> {
        let jerr = |why: String| DaemonError::Join { addr, why };
        let mut s = connect(&self.key, addr).map_err(jerr)?;
        let fe = |e: FrameError| jerr(e.to_string());
        frame::write_frame(
            &mut s,
            &PeerMsg::Register {
                facts: self.facts.clone(),
            },
        )
        .map_err(fe)?;
        match frame::read_frame::<PeerMsg, _>(&mut s).map_err(fe)? {
            Some(PeerMsg::Registered { name }) => {
                if name != self.facts.name {
                    log!(
                        "registered as {name} (the name {} was taken)",
                        self.facts.name
                    );
                }
                self.router.rename(&name);
                self.facts.name = name;
            }
            other => return Err(jerr(format!("unexpected answer {other:?}"))),
        }
        let t = self
            .adopt(s, Kind::Master)
            .map_err(|e| jerr(e.to_string()))?;
        self.link = Some(t);
        Ok(())
    }

    /// Register an authenticated blocking stream with the loop.
    fn adopt(&mut self, s: std::net::TcpStream, kind: Kind) -> io::Result<Token> {
        s.set_nonblocking(true)?;
        let mut sock = Sock::Tcp(TcpStream::from_std(s));
        let t = self.token();
        self.poll
            .registry()
            .register(&mut sock, t, Interest::READABLE)?;
        self.conns.insert(t, Conn::new(sock, kind));
        Ok(t)
    }

    /// The data link to `host`; dialled if there is none. Dialling does not
    /// block the loop: the handshake runs as messages arrive (`Dial`,
    /// `DialWelcome`), and messages wait in `dialling` until `Welcome`.
    fn link_to(&mut self, host: &str) -> Option<Token> {
        if let Some(&t) = self.links.get(host) {
            if self.conns.contains_key(&t) {
                return Some(t);
            }
        }
        let addr = *self.peers.get(host)?;
        let dialled = auth::nonce().map_err(|e| e.to_string()).and_then(|ours| {
            let mut s = TcpStream::connect(addr).map_err(|e| e.to_string())?;
            let _ = s.set_nodelay(true);
            let t = self.token();
            self.poll
                .registry()
                .register(&mut s, t, Interest::READABLE)
                .map_err(|e| e.to_string())?;
            let kind = Kind::Dial {
                host: host.to_string(),
                ours,
            };
            self.conns.insert(t, Conn::new(Sock::Tcp(s), kind));
            Ok((t, ours))
        });
        match dialled {
            Ok((t, ours)) => {
                self.links.insert(host.to_string(), t);
                self.send_peer(t, &PeerMsg::Hello { nonce: ours });
                Some(t)
            }
            Err(e) => {
                log!("cannot open a data link to {host} at {addr}: {e}");
                None
            }
        }
    }

    fn serve(&mut self) -> Result<(), DaemonError> {
        let mut events = Events::with_capacity(256);
        loop {
            if let Some(since) = self.halting {
                let flushed = self.conns.values().all(Conn::flushed);
                if (flushed && self.vps.by_tid.is_empty())
                    || since.elapsed() > Duration::from_secs(2)
                {
                    self.stop_all();
                    log!("{} stopped", self.facts.name);
                    let _ = std::fs::remove_file(&self.socket_path);
                    return Ok(());
                }
            }
            let timeout = self
                .cfg
                .heartbeat
                .saturating_sub(self.last_beat.elapsed())
                .min(self.owner.due().saturating_duration_since(Instant::now()))
                // Wake to arm the next slot switch.
                .min(
                    self.slice_due_in()
                        .map_or(Duration::MAX, |d| d.saturating_sub(ARM_AHEAD)),
                )
                .max(Duration::from_millis(1));
            let timeout = if self.halting.is_some() {
                timeout.min(Duration::from_millis(20))
            } else {
                timeout
            };
            match self.poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(DaemonError::Io {
                        what: "polling".into(),
                        source: e,
                    })
                }
            }
            for ev in events.iter() {
                match ev.token() {
                    TCP => self.accept_tcp(),
                    UNIX => self.accept_unix(),
                    SIGNALS => self.signals(),
                    t if self.pipes.contains_key(&t) => self.pipe_ready(t),
                    t => {
                        if ev.is_writable() {
                            if let Some(c) = self.conns.get_mut(&t) {
                                if let Err(e) = c.flush(self.poll.registry(), t) {
                                    self.write_failed(t, &e);
                                }
                            }
                            self.maybe_resume(t);
                        }
                        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                            self.conn_ready(t);
                        }
                    }
                }
            }
            self.drive_slicer();
            if Instant::now() >= self.owner.due() {
                self.owner_poll(None);
            }
            if self.last_beat.elapsed() >= self.cfg.heartbeat {
                self.last_beat = Instant::now();
                self.tick();
            }
            let closing: Vec<Token> = self
                .conns
                .iter()
                .filter(|(_, c)| c.closing && c.flushed())
                .map(|(t, _)| *t)
                .collect();
            for t in closing {
                self.close(t, "refused");
            }
        }
    }

    fn tick(&mut self) {
        self.call_off_slow_moves();
        if self.pools_trimmed.elapsed() >= POOL_IDLE {
            self.pools_trimmed = Instant::now();
            self.outbox.trim_idle();
            self.inbox.trim_idle();
        }
        // The owner's state rides with the heartbeat, for `mig owner status`,
        // and so do the slicer's switches, for `mig stats`.
        let report = self.owner.report(Instant::now());
        self.report(PeerMsg::Owner(report));
        for s in self.switcher.done() {
            self.slicer.record(s);
        }
        if let Some(r) = self.slicer.report() {
            self.report(PeerMsg::Slicing(r));
        }
        if let Some(link) = self.link {
            self.send_peer(link, &PeerMsg::Heartbeat);
        }
        if let Some(m) = &mut self.master {
            let out = m.tick(Instant::now(), self.cfg.dead_after);
            self.deliver(out);
        }
        let stale: Vec<Token> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                matches!(
                    c.kind,
                    Kind::AwaitHello
                        | Kind::AwaitProof { .. }
                        | Kind::Dial { .. }
                        | Kind::DialWelcome { .. }
                ) && c.since.elapsed() > HANDSHAKE_TIMEOUT
            })
            .map(|(t, _)| *t)
            .collect();
        for t in stale {
            self.close(t, "handshake timed out");
        }
    }

    fn accept_tcp(&mut self) {
        loop {
            match self.tcp.accept() {
                Ok((mut s, peer)) => {
                    let _ = s.set_nodelay(true);
                    let t = self.token();
                    if self
                        .poll
                        .registry()
                        .register(&mut s, t, Interest::READABLE)
                        .is_ok()
                    {
                        log!("connection from {peer}");
                        self.conns
                            .insert(t, Conn::new(Sock::Tcp(s), Kind::AwaitHello));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    log!("accept failed: {e}");
                    return;
                }
            }
        }
    }

    fn accept_unix(&mut self) {
        loop {
            match self.unix.accept() {
                Ok((mut s, _)) => {
                    let uid = nix::sys::socket::getsockopt(
                        &s,
                        nix::sys::socket::sockopt::PeerCredentials,
                    )
                    .map(|c| c.uid())
                    .unwrap_or(u32::MAX);
                    if uid != self.uid && uid != 0 {
                        log!("control connection from uid {uid} refused: only uid {} may control this daemon", self.uid);
                        continue;
                    }
                    let t = self.token();
                    if self
                        .poll
                        .registry()
                        .register(&mut s, t, Interest::READABLE)
                        .is_ok()
                    {
                        self.conns
                            .insert(t, Conn::new(Sock::Unix(s), Kind::Control));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    log!("accept failed: {e}");
                    return;
                }
            }
        }
    }

    fn signals(&mut self) {
        let pending: Vec<i32> = self.signals.pending().collect();
        for sig in pending {
            match sig {
                SIGCHLD => self.reap(),
                _ => {
                    log!("signal {sig}: stopping");
                    self.begin_halt();
                }
            }
        }
    }

    fn begin_halt(&mut self) {
        if self.halting.is_none() {
            self.halting = Some(Instant::now());
            for vp in self.vps.by_tid.values() {
                host::kill(vp.pid);
            }
        }
    }

    /// Kill every VP left and reap them.
    fn stop_all(&mut self) {
        for vp in self.vps.by_tid.values() {
            host::kill(vp.pid);
        }
        let deadline = Instant::now() + Duration::from_millis(500);
        while !self.vps.by_pid.is_empty() && Instant::now() < deadline {
            for (pid, _) in host::reap() {
                self.vps.by_pid.remove(&pid);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn close(&mut self, t: Token, why: &str) {
        let Some(mut c) = self.conns.remove(&t) else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut c.sock);
        // Images that were arriving on it never will: their VPs cannot
        // start here (the master hears so), and their files go.
        let cut: Vec<Tid> = self
            .incoming
            .iter()
            .filter(|(_, inc)| inc.from == t)
            .map(|(&tid, _)| tid)
            .collect();
        for tid in cut {
            if let Some(inc) = self.incoming.remove(&tid) {
                let _ = std::fs::remove_file(&inc.tmp);
                let got = inc.check.seen();
                self.restore_failed(
                    tid,
                    &format!("its image stopped coming after {got} bytes ({why})"),
                );
            }
        }
        match c.kind {
            Kind::Peer { host: Some(h) } => {
                log!("lost connection to {h}: {why}");
                if let Some(m) = &mut self.master {
                    let out = m.host_gone(&h, why);
                    self.deliver(out);
                }
            }
            Kind::Master => {
                log!("lost the master: {why}; stopping");
                self.link = None;
                self.begin_halt();
            }
            Kind::AwaitHello | Kind::AwaitProof { .. } => {
                log!("dropped unauthenticated connection: {why}")
            }
            Kind::Vp { tid } => {
                if why != "closed by peer" {
                    log!("disconnected VP t{tid:x}: {why}");
                }
                self.router.closed(tid, t);
                if self.vp_conns.get(&tid) == Some(&t) {
                    self.vp_conns.remove(&tid);
                }
            }
            Kind::Data { host } | Kind::Dial { host, .. } | Kind::DialWelcome { host }
                if self.links.get(&host) == Some(&t) =>
            {
                self.links.remove(&host);
                for p in self.dialling.remove(&t).unwrap_or_default() {
                    match p {
                        Pending::Msg(env, _) => self
                            .undeliverable(env, &format!("host {host} cannot be reached: {why}")),
                        // Through the master instead.
                        Pending::Image(start, image) => self.relay_image(&host, start, image),
                    }
                }
            }
            _ => {}
        }
        self.proxied.retain(|_, tok| *tok != t);
        self.fd_inflight.remove(&t);
        // Whoever waited for this connection to drain goes on.
        for src in self.blocked.remove(&t).unwrap_or_default() {
            self.resume(src);
        }
    }

    /// Read and handle what a connection has, frame by frame, until it is
    /// drained, paused (flow control) or closed. Reads are bounded (one
    /// chunk, or one large payload, at a time), so a fast sender cannot make
    /// the daemon buffer more than a frame ahead.
    fn conn_ready(&mut self, t: Token) {
        loop {
            self.drain_buffered(t);
            let Some(c) = self.conns.get_mut(&t) else {
                return;
            };
            if c.paused || c.closing {
                return;
            }
            if c.fds.len() > 64 {
                return self.refuse(t, "descriptors passed without their messages");
            }
            match c.read_some() {
                Some(true) => {}
                Some(false) => {
                    self.drain_buffered(t);
                    return;
                }
                None => {
                    self.drain_buffered(t);
                    self.close(t, "closed by peer");
                    return;
                }
            }
        }
    }

    /// Handle the frames a connection has buffered, without reading.
    fn drain_buffered(&mut self, t: Token) {
        loop {
            let Some(c) = self.conns.get_mut(&t) else {
                return;
            };
            if c.paused || c.closing {
                return;
            }
            let kind = c.kind.clone();
            let res = match kind {
                Kind::Control => c
                    .dec
                    .next_frame::<Request>()
                    .map(|f| f.map(|req| self.control(t, req))),
                Kind::Vp { tid } => c
                    .dec
                    .next_frame_with::<VpMsg>()
                    .map(|f| f.map(|(msg, payload)| self.vp_msg(t, tid, msg, payload))),
                _ => c
                    .dec
                    .next_frame_with::<PeerMsg>()
                    .map(|f| f.map(|(msg, payload)| self.peer_msg(t, kind, msg, payload))),
            };
            match res {
                Ok(Some(())) => {}
                Ok(None) => return,
                Err(e) => {
                    self.refuse(t, &e.to_string());
                    return;
                }
            }
        }
    }

    /// `src` sent to `dest`, which has too much queued: stop reading `src`
    /// until `dest` drains.
    fn pause(&mut self, src: Token, dest: Token) {
        if src == dest {
            return;
        }
        if let Some(c) = self.conns.get_mut(&src) {
            if !c.paused {
                c.paused = true;
                self.blocked.entry(dest).or_default().push(src);
            }
        }
    }

    fn resume(&mut self, src: Token) {
        if let Some(c) = self.conns.get_mut(&src) {
            if c.paused {
                c.paused = false;
                self.conn_ready(src);
            }
        }
    }

    /// After `t` wrote: if it is down to the low mark, its senders go on.
    fn maybe_resume(&mut self, t: Token) {
        let low = self.conns.get(&t).is_none_or(|c| c.queued() <= LOW_WATER)
            && self.fd_inflight.get(&t).is_none_or(|&n| n <= FD_LOW_WATER);
        if low {
            for src in self.blocked.remove(&t).unwrap_or_default() {
                self.resume(src);
            }
        }
    }

    /// Writing to `t` failed: its output is dropped (the connection is
    /// `broken`), but it is read to its end, so nothing its peer sent before
    /// closing is lost; whoever waited for it to drain goes on.
    fn write_failed(&mut self, t: Token, e: &io::Error) {
        let kind = self.conns.get(&t).map(|c| c.kind.clone());
        if !matches!(kind, Some(Kind::Vp { .. })) {
            log!("cannot write to {kind:?}: {e}");
        }
        for src in self.blocked.remove(&t).unwrap_or_default() {
            self.resume(src);
        }
        if let Some(c) = self.conns.get(&t) {
            if c.closing {
                self.close(t, "write failed");
            }
        }
    }

    /// Tell the peer why (best effort) and close.
    fn refuse(&mut self, t: Token, reason: &str) {
        log!("refusing connection: {reason}");
        let kind = self.conns.get(&t).map(|c| c.kind.clone());
        if let Some(Kind::Vp { .. }) = kind {
            return self.close(t, reason);
        }
        if kind != Some(Kind::Control) {
            self.send_peer(
                t,
                &PeerMsg::Refused {
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
        if let Some(c) = self.conns.get_mut(&t) {
            c.closing = true;
        }
        if self.conns.get(&t).is_some_and(Conn::flushed) {
            self.close(t, reason);
        }
    }

    fn send_bytes(&mut self, t: Token, bytes: &[u8]) {
        let failed = match self.conns.get_mut(&t) {
            Some(c) => c.send(bytes, self.poll.registry(), t).err(),
            None => None,
        };
        if let Some(e) = failed {
            self.write_failed(t, &e);
        }
    }

    fn send_peer(&mut self, t: Token, msg: &PeerMsg) {
        match frame::encode(msg) {
            Ok(b) => self.send_bytes(t, &b),
            Err(e) => log!("cannot encode a message: {e}"),
        }
    }

    fn send_resp(&mut self, t: Token, resp: &Response) {
        match frame::encode(resp) {
            Ok(b) => self.send_bytes(t, &b),
            Err(e) => log!("cannot encode a reply: {e}"),
        }
    }

    fn peer_msg(&mut self, t: Token, kind: Kind, msg: PeerMsg, payload: Vec<u8>) {
        match (kind, msg) {
            (Kind::AwaitHello, PeerMsg::Hello { nonce }) => {
                let ours = match auth::nonce() {
                    Ok(n) => n,
                    Err(e) => return self.refuse(t, &e.to_string()),
                };
                let proof = self.key.server_proof(&nonce, &ours);
                if let Some(c) = self.conns.get_mut(&t) {
                    c.kind = Kind::AwaitProof {
                        theirs: nonce,
                        ours,
                    };
                }
                self.send_peer(t, &PeerMsg::Challenge { nonce: ours, proof });
            }
            (Kind::AwaitProof { theirs, ours }, PeerMsg::Proof { proof }) => {
                if self.key.check_client(&ours, &theirs, &proof) {
                    if let Some(c) = self.conns.get_mut(&t) {
                        c.kind = Kind::Peer { host: None };
                    }
                    self.send_peer(t, &PeerMsg::Welcome);
                } else {
                    self.refuse(
                        t,
                        "authentication failed: the peer does not hold this cluster's key",
                    );
                }
            }
            (Kind::AwaitHello | Kind::AwaitProof { .. }, other) => {
                self.refuse(t, &format!("{} before authentication", variant(&other)));
            }
            (Kind::Peer { host: None }, PeerMsg::Register { facts }) => {
                let Some(m) = &mut self.master else {
                    return self.refuse(
                        t,
                        "this daemon is a worker, not a master: join the master instead",
                    );
                };
                let (name, out) = m.register(facts, Instant::now());
                let dir = m.directory();
                if let Some(c) = self.conns.get_mut(&t) {
                    c.kind = Kind::Peer {
                        host: Some(name.clone()),
                    };
                }
                self.send_peer(t, &PeerMsg::Registered { name });
                self.send_peer(t, &dir);
                self.deliver(out);
            }
            (Kind::Dial { host, ours }, PeerMsg::Challenge { nonce, proof }) => {
                if !self.key.check_server(&ours, &nonce, &proof) {
                    return self.refuse(
                        t,
                        &format!("{host} does not hold this cluster's key (wrong --key-file?)"),
                    );
                }
                if let Some(c) = self.conns.get_mut(&t) {
                    c.kind = Kind::DialWelcome { host };
                }
                let proof = self.key.client_proof(&nonce, &ours);
                self.send_peer(t, &PeerMsg::Proof { proof });
            }
            (Kind::DialWelcome { host }, PeerMsg::Welcome) => {
                if let Some(c) = self.conns.get_mut(&t) {
                    c.kind = Kind::Data { host: host.clone() };
                }
                log!("data link to {host}");
                let name = self.facts.name.clone();
                self.send_peer(t, &PeerMsg::Hi { name });
                for p in self.dialling.remove(&t).unwrap_or_default() {
                    match p {
                        Pending::Msg(env, body) => self.route(env, body, None),
                        Pending::Image(start, image) => self.send_image(&host, start, image),
                    }
                }
            }
            (Kind::Dial { host, .. } | Kind::DialWelcome { host }, PeerMsg::Refused { reason }) => {
                log!("{host} refused a data link: {reason}");
                self.close(t, &reason);
            }
            (Kind::Peer { host: None }, PeerMsg::Hi { name }) => {
                if let Some(c) = self.conns.get_mut(&t) {
                    c.kind = Kind::Data { host: name };
                }
            }
            (Kind::Data { .. }, PeerMsg::Deliver(env)) => {
                self.route(env, Body::Bytes(payload), Some(t))
            }
            (
                Kind::Data { .. },
                PeerMsg::RestorePart {
                    tid,
                    at,
                    total,
                    last,
                    start,
                },
            ) => {
                let part = ImagePart {
                    tid,
                    at,
                    total,
                    last,
                };
                self.image_part(t, part, start, &payload);
                if let Some(c) = self.conns.get_mut(&t) {
                    c.dec.recycle(payload);
                }
            }
            (Kind::Data { .. }, PeerMsg::Undeliverable { env, reason }) => {
                self.undeliverable(env, &reason)
            }
            (Kind::Peer { host: Some(h) }, msg) => self.on_worker_msg(&h, t, msg),
            (Kind::Master, msg) => self.on_master_msg(msg),
            (_, other) => self.refuse(t, &format!("unexpected {}", variant(&other))),
        }
    }

    /// On the master: a message from worker `h`.
    fn on_worker_msg(&mut self, h: &str, t: Token, msg: PeerMsg) {
        let Some(m) = &mut self.master else { return };
        let mut out = m.heard_from(h, Instant::now());
        out.extend(match msg {
            PeerMsg::Control { id, req } => m.with_wall(wall_ns()).control(
                Requester::Remote {
                    host: h.to_string(),
                    id,
                },
                h,
                req,
            ),
            msg => {
                let what = variant(&msg);
                match m.from_host(h, msg) {
                    Some(out) => out,
                    None => {
                        return self.refuse(t, &format!("unexpected {what} from a worker"));
                    }
                }
            }
        });
        self.deliver(out);
    }

    /// On a worker: a message from the master.
    fn on_master_msg(&mut self, msg: PeerMsg) {
        match msg {
            PeerMsg::Reply { id, resp } => {
                if let Some(&t) = self.proxied.get(&id) {
                    self.send_resp(t, &resp);
                }
                // Spawned, Output and VpDone may be followed by more replies.
                if !matches!(
                    resp,
                    Response::Spawned { .. } | Response::Output { .. } | Response::VpDone { .. }
                ) {
                    self.proxied.remove(&id);
                }
            }
            other => self.host_msg(other),
        }
    }

    /// A message for this host (from the master, possibly itself).
    fn host_msg(&mut self, msg: PeerMsg) {
        match msg {
            PeerMsg::Start(s) => self.start_vp(s),
            PeerMsg::Kill { tid } => {
                if let Some(vp) = self.vps.by_tid.get(&tid) {
                    host::kill(vp.pid);
                }
                if let Some((_, path)) = self.parked.remove(&tid) {
                    let _ = std::fs::remove_file(path);
                    let status = ExitInfo {
                        code: None,
                        signal: Some(9),
                        error: None,
                    };
                    self.report(PeerMsg::Exited { tid, status });
                }
            }
            PeerMsg::Unpark { tid } => self.unpark(tid),
            PeerMsg::Snap { tid, step } => self.snap_step(tid, step),
            PeerMsg::Replica {
                job,
                id,
                tid,
                image,
            } => {
                if let Err(e) = self.replicas.save(&job, id, tid, &image) {
                    log!("cannot keep a copy of job {job}'s checkpoint: {e}");
                }
                self.replicas.prune(&job, &[id.saturating_sub(1), id]);
            }
            PeerMsg::SlotTable(t) => {
                self.slicer.install(t);
                self.drive_slicer();
            }
            PeerMsg::Halt => {
                log!("halt requested");
                self.begin_halt();
            }
            PeerMsg::Checkpoint { to, start } => self.checkpoint(to, start),
            PeerMsg::OwnerCommand { id, reclaim } => {
                self.owner.request(reclaim, Instant::now());
                self.owner_poll(Some(id));
            }
            PeerMsg::Restore { start, image, .. } => self.restore(start, &image),
            PeerMsg::Peers(list) => {
                self.peers = list
                    .into_iter()
                    .filter_map(|(n, a)| a.parse().ok().map(|a| (n, a)))
                    .collect();
            }
            PeerMsg::Directory(entries) => self.directory(entries),
            PeerMsg::Fence { tids, incarnation } => self.router.fence(&tids, incarnation),
            PeerMsg::VpReturn { tid, id, ret } => {
                if let Some(&t) = self.vp_conns.get(&tid) {
                    self.send_vp(t, &VpMsg::Return { id, ret });
                }
            }
            PeerMsg::Registered { .. } | PeerMsg::Heartbeat => {}
            other => log!("ignoring unexpected {} from the master", variant(&other)),
        }
    }

    /// Report to the master (handled in place when this is the master).
    fn report(&mut self, msg: PeerMsg) {
        if let Some(m) = &mut self.master {
            let out = m.from_host(&self.facts.name, msg).unwrap_or_default();
            self.deliver(out);
        } else if let Some(link) = self.link {
            self.send_peer(link, &msg);
        }
    }

    fn deliver(&mut self, outs: Vec<Out>) {
        for o in outs {
            match o {
                Out::Log(l) => log!("{l}"),
                Out::Reply(Requester::Local(t), resp) => self.send_resp(Token(t), &resp),
                Out::Reply(Requester::Remote { host, id }, resp) => {
                    if let Some(t) = self.host_token(&host) {
                        self.send_peer(t, &PeerMsg::Reply { id, resp });
                    }
                }
                Out::Reply(Requester::Vp { tid, id }, _) => {
                    log!("dropping a control reply meant for VP t{tid:x} call {id}")
                }
                Out::Broadcast(msg) => {
                    let workers: Vec<Token> = self
                        .conns
                        .iter()
                        .filter(|(_, c)| matches!(c.kind, Kind::Peer { host: Some(_) }))
                        .map(|(t, _)| *t)
                        .collect();
                    for t in workers {
                        self.send_peer(t, &msg);
                    }
                    self.host_msg(msg);
                }
                Out::Deliver(env, payload) => self.route(env, Body::Bytes(payload), None),
                Out::SlotTables {
                    generation,
                    slots,
                    all,
                    tables,
                } => self.send_tables(generation, slots, all, tables),
                Out::StoreImage {
                    job,
                    id,
                    tid,
                    image,
                } => {
                    if let Err(e) = self.store.save(&job, id, tid, &image) {
                        log!("cannot keep job {job}'s checkpoint: {e}");
                    }
                }
                Out::PruneCheckpoints { job, keep } => self.store.prune(&job, &keep),
                Out::RestoreJob {
                    job,
                    ids,
                    placements,
                } => self.restore_job(&job, &ids, placements),
                Out::ToHost(host, msg) => {
                    if host == self.facts.name {
                        self.host_msg(msg);
                    } else if let Some(t) = self.host_token(&host) {
                        self.send_peer(t, &msg);
                    } else {
                        log!("no connection to {host}; dropping {}", variant(&msg));
                    }
                }
            }
        }
    }

    fn host_token(&self, host: &str) -> Option<Token> {
        self.conns
            .iter()
            .find(|(_, c)| {
                c.kind
                    == Kind::Peer {
                        host: Some(host.to_string()),
                    }
            })
            .map(|(t, _)| *t)
    }

    fn control(&mut self, t: Token, req: Request) {
        let me = self.facts.name.clone();
        if let Some(m) = &mut self.master {
            m.set_wall(wall_ns());
            let out = m.control(Requester::Local(t.0), &me, req);
            self.deliver(out);
        } else if let Some(link) = self.link {
            let id = self.next_proxy;
            self.next_proxy += 1;
            self.proxied.insert(id, t);
            self.send_peer(link, &PeerMsg::Control { id, req });
        } else {
            self.send_resp(
                t,
                &Response::Error {
                    message: "this daemon has lost its master".into(),
                },
            );
        }
    }

    // ----- messages between VPs -----------------------------------------------

    /// A frame from local VP `tid` on connection `t`.
    fn vp_msg(&mut self, t: Token, tid: Tid, msg: VpMsg, payload: Vec<u8>) {
        match msg {
            VpMsg::Send { env, confirm } => {
                if env.from != tid {
                    return self.refuse(t, &format!("VP t{tid:x} sent as t{:x}", env.from));
                }
                if confirm {
                    match self.router.way(env.to) {
                        Way::Gone => {
                            return self.undeliverable(env, &gone(env.to));
                        }
                        Way::Locate => self.router.wait_confirm(env.to, tid),
                        _ => self.send_vp(t, &VpMsg::Confirmed { to: env.to }),
                    }
                }
                self.route(env, Body::Bytes(payload), Some(t));
            }
            VpMsg::SendFd { env, confirm, len } => {
                let fd = self.conns.get_mut(&t).and_then(|c| c.fds.pop_front());
                let checked = fd
                    .ok_or_else(|| "a message without its descriptor".to_string())
                    .and_then(|fd| {
                        libmig::pool::check_fd(&fd, len as usize)
                            .map(|_| fd)
                            .map_err(|e| e.to_string())
                    });
                let fd = match checked {
                    Ok(fd) if env.from == tid && len as usize <= libmig::MAX_MESSAGE => fd,
                    Ok(_) => {
                        return self
                            .refuse(t, &format!("VP t{tid:x}: a forged or oversized message"))
                    }
                    Err(e) => return self.refuse(t, &format!("VP t{tid:x}: {e}")),
                };
                if confirm {
                    match self.router.way(env.to) {
                        Way::Gone => {
                            self.credit(&env, &Body::Fd(fd, len as usize));
                            return self.undeliverable(env, &gone(env.to));
                        }
                        Way::Locate => self.router.wait_confirm(env.to, tid),
                        _ => self.send_vp(t, &VpMsg::Confirmed { to: env.to }),
                    }
                }
                self.route(env, Body::Fd(fd, len as usize), Some(t));
            }
            VpMsg::Consumed { bytes } => {
                if let Some(n) = self.fd_inflight.get_mut(&t) {
                    *n = n.saturating_sub(bytes as usize);
                }
                self.maybe_resume(t);
            }
            VpMsg::Written { path, upto } => self.written(tid, &path, upto),
            VpMsg::Checkpointed { path } => self.checkpointed(tid, &path),
            VpMsg::Snap(SnapStep::Paused { id, sent }) => self.report(PeerMsg::Snap {
                tid,
                step: SnapStep::Paused { id, sent },
            }),
            VpMsg::Snap(SnapStep::Taken { id, path }) => self.snap_taken(tid, id, &path),
            VpMsg::Call { id, call } => self.report(PeerMsg::VpCall { tid, id, call }),
            VpMsg::Direct { peer } => self.direct_link(t, tid, peer),
            other => self.refuse(t, &format!("a VP may not send {other:?}")),
        }
    }

    /// Move a message one step on: to a local VP, to another host, or into
    /// the hold. `src` (the connection it came on) is paused if the next
    /// connection is full.
    fn route(&mut self, env: Envelope, body: Body, src: Option<Token>) {
        if self.router.is_stale(&env) {
            // From a run its job has gone back on: never delivered.
            return self.credit(&env, &body);
        }
        let dest = match self.router.way(env.to) {
            // A VP whose socket broke is ending: its exit decides.
            Way::Local(d) if self.conns.get(&d).is_none_or(|c| c.broken) => {
                return self.hold(env, body, src)
            }
            Way::Local(d) => d,
            Way::Remote(h) => match self.link_to(&h) {
                Some(d)
                    if self
                        .conns
                        .get(&d)
                        .is_some_and(|c| matches!(c.kind, Kind::Data { .. })) =>
                {
                    d
                }
                Some(d) => {
                    return self
                        .dialling
                        .entry(d)
                        .or_default()
                        .push(Pending::Msg(env, body))
                }
                None => {
                    self.credit(&env, &body);
                    return self.undeliverable(env, &format!("host {h} cannot be reached"));
                }
            },
            Way::Hold => return self.hold(env, body, src),
            Way::Locate => {
                let to = env.to;
                self.hold(env, body, src);
                if self.router.ask(to) {
                    self.report(PeerMsg::Locate { tid: to });
                }
                return;
            }
            Way::Gone => {
                self.credit(&env, &body);
                return self.undeliverable(env, &gone(env.to));
            }
        };
        let local = self
            .conns
            .get(&dest)
            .is_some_and(|c| matches!(c.kind, Kind::Vp { .. }));
        let (body, lent) = match body {
            // A large payload from another host reaches its VP in one of
            // this daemon's pooled buffers: one copy here instead of one
            // into the socket and one out of it.
            Body::Bytes(b) if local && b.len() >= FD_PAYLOAD => match self.outbox.stage(env.to, &b)
            {
                Ok(fd) => {
                    let len = b.len();
                    // Its buffer takes in the next large message of that link.
                    if let Some(c) = src.and_then(|s| self.conns.get_mut(&s)) {
                        c.dec.recycle(b);
                    }
                    (Body::Fd(fd, len), true)
                }
                Err(_) => (Body::Bytes(b), false),
            },
            other => (other, false),
        };
        self.credit(&env, &body);
        let (head, payload, fd) = match (local, body) {
            (true, Body::Fd(fd, len)) => {
                *self.fd_inflight.entry(dest).or_default() += len;
                let msg = VpMsg::DeliverFd {
                    env,
                    len: len as u64,
                    lent,
                };
                (
                    frame::encode_head(&msg, 0),
                    Payload::from(Vec::new()),
                    Some(fd),
                )
            }
            (true, Body::Bytes(b)) => {
                let head = frame::encode_head(&VpMsg::Deliver(env), b.len());
                (head, b.into(), None)
            }
            (false, body) => {
                // Another host: the bytes go over TCP, written straight
                // from the memfd's mapping if they came as one.
                let p = match body {
                    Body::Bytes(b) => Payload::from(b),
                    Body::Fd(fd, len) => match self.inbox.pass_on(fd, len) {
                        Ok(p) => p,
                        Err(e) => {
                            return self.undeliverable(env, &format!("reading its payload: {e}"))
                        }
                    },
                };
                (frame::encode_head(&PeerMsg::Deliver(env), p.len()), p, None)
            }
        };
        let head = match head {
            Ok(h) => h,
            Err(e) => return log!("cannot encode a message: {e}"),
        };
        let failed = match self.conns.get_mut(&dest) {
            Some(c) => c
                .send_parts(head, payload, fd, self.poll.registry(), dest)
                .err(),
            None => return,
        };
        if let Some(e) = failed {
            return self.write_failed(dest, &e);
        }
        if let Some(src) = src {
            if self.full(dest) {
                self.pause(src, dest);
            }
        }
    }

    /// A memfd payload of a local sender leaves this daemon (passed on or
    /// dropped): the sender may send that much more.
    fn credit(&mut self, env: &Envelope, body: &Body) {
        if let (Body::Fd(_, len), Some(&t)) = (body, self.vp_conns.get(&env.from)) {
            let bytes = *len as u64;
            self.send_vp(t, &VpMsg::Credit { bytes });
        }
    }

    /// Keep a message for a VP not reachable yet; past the high mark, its
    /// sender waits until the VP can be reached (flow control for held
    /// messages too).
    fn hold(&mut self, env: Envelope, body: Body, src: Option<Token>) {
        let to = env.to;
        self.router.hold(env, body);
        if let Some(src) = src {
            if self.router.held_bytes(to) > HIGH_WATER {
                if let Some(c) = self.conns.get_mut(&src).filter(|c| !c.paused) {
                    c.paused = true;
                    self.held_blocked.entry(to).or_default().push(src);
                }
            }
        }
    }

    /// Messages held for `tid` went on: the senders paused for them go on.
    fn released(&mut self, tid: Tid) {
        for src in self.held_blocked.remove(&tid).unwrap_or_default() {
            self.resume(src);
        }
    }

    /// Has `t` so much waiting for it that its senders must wait?
    fn full(&self, t: Token) -> bool {
        self.conns.get(&t).is_some_and(|c| c.queued() > HIGH_WATER)
            || self.fd_inflight.get(&t).is_some_and(|&n| n > FD_HIGH_WATER)
    }

    /// Tell a message's sender it could not be delivered.
    fn undeliverable(&mut self, env: Envelope, reason: &str) {
        if env.from == SYSTEM {
            return;
        }
        let way = match self.vp_conns.get(&env.from) {
            Some(&t) => Way::Local(t),
            None => self.router.way(env.from),
        };
        match way {
            Way::Local(t) => self.send_vp(
                t,
                &VpMsg::Undeliverable {
                    to: env.to,
                    tag: env.tag,
                    reason: reason.to_string(),
                },
            ),
            Way::Remote(h) => {
                let ready = self.link_to(&h).filter(|d| {
                    self.conns
                        .get(d)
                        .is_some_and(|c| matches!(c.kind, Kind::Data { .. }))
                });
                match ready {
                    Some(t) => self.send_peer(
                        t,
                        &PeerMsg::Undeliverable {
                            env,
                            reason: reason.to_string(),
                        },
                    ),
                    None => log!(
                        "cannot tell t{:x} that a message was not delivered: {reason}",
                        env.from
                    ),
                }
            }
            _ => {}
        }
    }

    /// The master says where VPs are: held messages and confirmations go on.
    fn directory(&mut self, entries: Vec<(Tid, Loc)>) {
        let tids: Vec<Tid> = entries.iter().map(|(t, _)| *t).collect();
        let (freed, confirms) = self.router.update(entries);
        for (from, to) in confirms {
            if self.router.way(to) != Way::Gone {
                if let Some(&t) = self.vp_conns.get(&from) {
                    self.send_vp(t, &VpMsg::Confirmed { to });
                }
            }
        }
        for (env, payload) in freed {
            self.route(env, payload, None);
        }
        for tid in tids {
            self.released(tid);
        }
    }

    /// VP `tid` (on `t`) asks for a direct link to `peer`: a socket pair,
    /// one end to each, when both are on this host.
    fn direct_link(&mut self, t: Token, tid: Tid, peer: Tid) {
        let refused = match self.router.way(peer) {
            Way::Local(p) if p != t => {
                match nix::sys::socket::socketpair(
                    nix::sys::socket::AddressFamily::Unix,
                    nix::sys::socket::SockType::Stream,
                    None,
                    nix::sys::socket::SockFlag::SOCK_CLOEXEC,
                ) {
                    Ok((a, b)) => {
                        self.send_vp_fd(
                            t,
                            &VpMsg::DirectLink {
                                peer,
                                refused: None,
                            },
                            a,
                        );
                        self.send_vp_fd(
                            p,
                            &VpMsg::DirectLink {
                                peer: tid,
                                refused: None,
                            },
                            b,
                        );
                        return;
                    }
                    Err(e) => format!("no socket pair: {e}"),
                }
            }
            Way::Local(_) => "a VP needs no link to itself".to_string(),
            _ => format!("t{peer:x} is not on this host: messages go through the daemons"),
        };
        self.send_vp(
            t,
            &VpMsg::DirectLink {
                peer,
                refused: Some(refused),
            },
        );
    }

    fn send_vp(&mut self, t: Token, msg: &VpMsg) {
        match frame::encode(msg) {
            Ok(b) => self.send_bytes(t, &b),
            Err(e) => log!("cannot encode a message: {e}"),
        }
    }

    fn send_vp_fd(&mut self, t: Token, msg: &VpMsg, fd: std::os::fd::OwnedFd) {
        let failed = match (frame::encode(msg), self.conns.get_mut(&t)) {
            (Ok(b), Some(c)) => c
                .send_parts(
                    b,
                    Payload::from(Vec::new()),
                    Some(fd),
                    self.poll.registry(),
                    t,
                )
                .err(),
            _ => None,
        };
        if let Some(e) = failed {
            self.write_failed(t, &e);
        }
    }

    // ----- migration ---------------------------------------------------------

    /// The master moves local VP `start.tid` to `to`: from now on messages
    /// for it are held here (the master has told every host to hold them
    /// too); it is asked to checkpoint at its next safe point (woken if
    /// stopped, signalled so that its safe point looks).
    /// Read the owner's activity sources and carry out what the policy
    /// says: stop or resume every VP here at once, tell the master (whose
    /// scheduler then moves them off, or uses this host again). `command`
    /// is the master's id of a `mig owner reclaim|release` being answered.
    fn owner_poll(&mut self, command: Option<u64>) {
        let now = Instant::now();
        let pids: Vec<u32> = self
            .vps
            .by_tid
            .values()
            .filter(|v| v.exit.is_none())
            .filter_map(|v| u32::try_from(v.pid).ok())
            .collect();
        let changes = self.owner.poll(now, &pids);
        let mut done = Vec::new();
        for c in &changes {
            match c {
                Change::StopVps => {
                    // A switch not yet carried out never continues anyone now.
                    self.disarm_switch();
                    // VPs checkpointing for a move go on to their safe point.
                    let n = self.signal_vps(Signal::SIGSTOP, |_, v| v.moving.is_none());
                    done.push(format!("{n} VPs stopped"));
                }
                Change::ResumeVps => {
                    // Those whose slot is not running stay stopped.
                    let n = self.signal_vps(Signal::SIGCONT, |t, _| self.slicer.may_run(t));
                    self.park_tried.clear();
                    done.push(format!("{n} VPs resumed"));
                }
                Change::LeavePool => done.push("leaving the pool".into()),
                Change::JoinPool => done.push("joining the pool".into()),
            }
        }
        let report = self.owner.report(now);
        let name = self.facts.name.clone();
        let said = format!(
            "{name} is {} ({}){}{}",
            report.state,
            report.decided_by,
            if done.is_empty() { "" } else { ": " },
            done.join(", ")
        );
        if !changes.is_empty() {
            log!("owner: {said}");
            self.report(PeerMsg::Owner(report));
        }
        if let Some(id) = command {
            self.report(PeerMsg::OwnerDone { id, message: said });
        }
        if self.owner.park_due(now) {
            self.park_waiting();
        }
    }

    /// The owner has had the host back for `park_after_s` and VPs still
    /// wait here: checkpoint each to disk and let its process end, so the
    /// owner gets the memory back. The image stays here until the VP is
    /// placed again (`Unpark`, or a move that ships it).
    fn park_waiting(&mut self) {
        let due: Vec<(Tid, StartVp)> = self
            .vps
            .by_tid
            .iter()
            .filter(|(t, v)| v.exit.is_none() && v.moving.is_none() && !self.park_tried.contains(t))
            .filter_map(|(&t, v)| Some((t, v.start.clone()?)))
            .collect();
        let me = self.facts.name.clone();
        for (tid, start) in due {
            self.park_tried.insert(tid);
            self.checkpoint(me.clone(), start);
        }
    }

    /// Start a parked VP again here from its image.
    fn unpark(&mut self, tid: Tid) {
        let Some((start, path)) = self.parked.remove(&tid) else {
            return log!("asked to start VP t{tid:x} again, but it is not parked here");
        };
        match std::fs::read(&path) {
            Ok(image) => {
                let _ = std::fs::remove_file(&path);
                self.restore(start, &image);
            }
            Err(e) => {
                let status = ExitInfo {
                    code: None,
                    signal: None,
                    error: Some(format!("its parked image {}: {e}", path.display())),
                };
                self.report(PeerMsg::Exited { tid, status });
            }
        }
    }

    /// Send `sig` to the process group of every live local VP that `which`
    /// picks; how many.
    fn signal_vps(&self, sig: Signal, which: impl Fn(Tid, &host::LocalVp) -> bool) -> usize {
        let mut n = 0;
        for (&tid, v) in &self.vps.by_tid {
            if v.exit.is_none() && which(tid, v) {
                host::signal(v.pid, sig);
                n += 1;
            }
        }
        n
    }

    /// On the master: time new slot tables. They take effect at the first
    /// slot boundary at least `TABLE_LEAD` away (on every host at the same
    /// boundary); a new round length starts a new epoch there.
    fn send_tables(
        &mut self,
        generation: u64,
        slots: usize,
        all: bool,
        tables: Vec<(String, Vec<Vec<libmig::msg::SlotCell>>)>,
    ) {
        const TABLE_LEAD: u64 = 50_000_000;
        let Some(m) = &mut self.master else { return };
        let q = m.quantum_ns().max(1);
        let now = wall_ns();
        let (epoch, n) = m.round().unwrap_or((now, slots as u64));
        let t = now + TABLE_LEAD;
        let from = if t <= epoch {
            epoch
        } else {
            epoch + (t - epoch).div_ceil(q) * q
        };
        let epoch = if all || n != slots as u64 {
            from
        } else {
            epoch
        };
        m.set_round(epoch, slots as u64);
        let outs = tables
            .into_iter()
            .map(|(host, cells)| {
                Out::ToHost(
                    host,
                    PeerMsg::SlotTable(libmig::msg::SlotTable {
                        generation,
                        epoch_ns: epoch,
                        from_ns: from,
                        quantum_ns: q,
                        slots: cells,
                    }),
                )
            })
            .collect();
        self.deliver(outs);
    }

    /// A job checkpoint's step from the master for local VP `tid`.
    fn snap_step(&mut self, tid: Tid, step: SnapStep) {
        let Some(&t) = self.vp_conns.get(&tid) else {
            return;
        };
        let step = match step {
            SnapStep::Begin { id, .. } => {
                let path = self.cfg.state_dir.join(format!("t{tid:x}.snap"));
                if let Some(v) = self.vps.by_tid.get(&tid) {
                    // Looked at by the VP at its next safe point.
                    host::signal(v.pid, Signal::SIGUSR2);
                }
                SnapStep::Begin {
                    id,
                    path: path.display().to_string(),
                }
            }
            other => other,
        };
        self.send_vp(t, &VpMsg::Snap(step));
    }

    /// VP `tid` wrote its image of job checkpoint `id`: check it, keep a
    /// copy here, send it to the master.
    fn snap_taken(&mut self, tid: Tid, id: u64, path: &str) {
        let expected = self.cfg.state_dir.join(format!("t{tid:x}.snap"));
        if std::path::Path::new(path) != expected {
            return log!(
                "VP t{tid:x} wrote its checkpoint to {path}, not {}",
                expected.display()
            );
        }
        let image = std::fs::read(&expected)
            .map_err(|e| e.to_string())
            .and_then(|b| {
                libmig::checkpoint::Image::check(&b)
                    .map(|()| b)
                    .map_err(|e| e.to_string())
            });
        let _ = std::fs::remove_file(&expected);
        match image {
            Ok(image) => {
                let job = self
                    .vps
                    .by_tid
                    .get(&tid)
                    .and_then(|v| v.start.as_ref())
                    .map(|s| s.job.clone())
                    .unwrap_or_default();
                if self.master.is_none() {
                    // Kept here too: the master holds the other copy.
                    if let Err(e) = self.replicas.save(&job, id, tid, &image) {
                        log!("cannot keep a copy of job {job}'s checkpoint: {e}");
                    }
                    self.replicas.prune(&job, &[id.saturating_sub(1), id]);
                }
                self.report(PeerMsg::SnapImage { tid, id, image });
            }
            Err(e) => log!("VP t{tid:x}: its checkpoint image is unusable: {e}"),
        }
    }

    /// On the master: restart a job's VPs from the newest generation whose
    /// images are all intact; a bad image is named in the log and the
    /// generation before it used.
    fn restore_job(&mut self, job: &str, ids: &[u64], placements: Vec<(Tid, String, StartVp)>) {
        let tids: Vec<Tid> = placements.iter().map(|p| p.0).collect();
        let mut images = None;
        for &id in ids {
            match self.store.load(job, id, &tids) {
                Ok(i) => {
                    log!("job {job}: restoring from generation {id}");
                    images = Some(i);
                    break;
                }
                Err(e) => log!("job {job}: checkpoint generation {id} refused: {e}"),
            }
        }
        let Some(images) = images else {
            return log!("job {job}: no intact checkpoint to restart from");
        };
        let mut images: HashMap<Tid, Vec<u8>> = images.into_iter().collect();
        let outs = placements
            .into_iter()
            .filter_map(|(tid, host, start)| {
                let image = images.remove(&tid)?;
                Some(Out::ToHost(
                    host.clone(),
                    PeerMsg::Restore {
                        to: host,
                        start,
                        image,
                    },
                ))
            })
            .collect();
        self.deliver(outs);
    }

    /// How long until the slicer's next switch, if one is coming.
    fn slice_due_in(&self) -> Option<Duration> {
        let due = self.slicer.next_due()?;
        Some(Duration::from_nanos(due.saturating_sub(wall_ns())))
    }

    /// Take back the slot switch armed and not yet carried out, if any.
    fn disarm_switch(&mut self) {
        if self.armed.take().is_some() {
            self.switcher.disarm();
        }
        self.armed_as = None;
    }

    /// Keep the slicer going: arm the next slot switch for the switcher
    /// when it is `ARM_AHEAD` away, and re-arm it with the VPs' processes as
    /// they are now (one that ended or is moving is not signalled). While
    /// the owner has the host the slicer keeps time but signals nobody.
    fn drive_slicer(&mut self) {
        if !self.owner.offered() {
            self.disarm_switch();
            let now = wall_ns();
            while self.slicer.next_due().is_some_and(|d| d <= now) {
                if self.slicer.at(now).is_none() {
                    break;
                }
            }
            return;
        }
        if self.armed.is_some() && self.switcher.armed().is_none() {
            // Carried out.
            self.armed = None;
            self.armed_as = None;
        }
        if self.armed.is_none() {
            let horizon = wall_ns() + ARM_AHEAD.as_nanos() as u64;
            let Some(due) = self.slicer.next_due().filter(|&d| d <= horizon) else {
                return;
            };
            self.armed = self.slicer.at(due.max(wall_ns()));
        }
        if let Some(plan) = &self.armed {
            let pids = |tids: &[Tid]| -> Vec<i32> {
                tids.iter()
                    .filter_map(|t| self.vps.by_tid.get(t))
                    // A VP on its way to a safe point is not held up.
                    .filter(|v| v.exit.is_none() && v.moving.is_none())
                    .map(|v| v.pid)
                    .collect()
            };
            let a = Armed {
                ideal_ns: plan.ideal_ns,
                stop: pids(&plan.stop),
                cont: pids(&plan.cont),
            };
            // (The loop comes here on every event: the lock only when the
            // switch changed.)
            if self.armed_as.as_ref() != Some(&a) {
                self.armed_as = Some(a.clone());
                self.switcher.arm(a);
            }
        } else {
            self.armed_as = None;
        }
    }

    fn checkpoint(&mut self, to: String, start: StartVp) {
        let tid = start.tid;
        if let Some((_, path)) = self.parked.remove(&tid) {
            // Parked on disk: its image goes as it is.
            let image = map_image(&path);
            let _ = std::fs::remove_file(&path);
            return match image {
                Ok(image) => {
                    log!("sending parked VP t{tid:x} to {to}");
                    self.send_image(&to, start, image)
                }
                Err(e) => self.report(PeerMsg::MigrateFailed {
                    tid,
                    reason: format!("its parked image {}: {e}", path.display()),
                }),
            };
        }
        let (Some(&t), Some(vp)) = (self.vp_conns.get(&tid), self.vps.by_tid.get_mut(&tid)) else {
            return self.report(PeerMsg::MigrateFailed {
                tid,
                reason: format!("it is not running on {}", self.facts.name),
            });
        };
        let pid = vp.pid;
        if to == self.facts.name {
            log!("asking VP t{tid:x} to checkpoint to disk (parking it while the owner has the host)");
        } else {
            log!("asking VP t{tid:x} to checkpoint for {to}");
        }
        vp.moving = Some((to, start, Instant::now()));
        self.router.detach(tid);
        let path = self.cfg.state_dir.join(format!("t{tid:x}.ckpt"));
        self.send_vp(
            t,
            &VpMsg::Checkpoint {
                path: path.display().to_string(),
            },
        );
        let p = nix::unistd::Pid::from_raw(pid);
        let _ = nix::sys::signal::kill(p, nix::sys::signal::Signal::SIGCONT);
        let _ = nix::sys::signal::kill(p, nix::sys::signal::Signal::SIGUSR2);
    }

    /// A VP asked to move that has not reached a safe point in time stays
    /// where it is and runs on: it is told so, its messages flow again, and
    /// the master hears why (`mig ps` shows it running here again).
    fn call_off_slow_moves(&mut self) {
        let limit = self.cfg.safe_point_timeout;
        let late: Vec<Tid> = self
            .vps
            .by_tid
            .iter()
            // One writing its image (sent on as it goes) is past its safe point.
            .filter(|(t, v)| {
                !v.moved
                    && !self.outgoing.contains_key(t)
                    && v.moving.as_ref().is_some_and(|m| m.2.elapsed() > limit)
            })
            .map(|(&t, _)| t)
            .collect();
        for tid in late {
            if let Some(v) = self.vps.by_tid.get_mut(&tid) {
                v.moving = None;
            }
            if let Some(&t) = self.vp_conns.get(&tid) {
                self.send_vp(t, &VpMsg::StayPut);
                for (env, body) in self.router.attach(tid, t) {
                    self.route(env, body, None);
                }
                self.released(tid);
            }
            let reason = if self.owner.offered() {
                format!(
                    "no safe point within {} ms: it stays on {} and runs on",
                    limit.as_millis(),
                    self.facts.name
                )
            } else {
                if let Some(v) = self.vps.by_tid.get(&tid) {
                    host::signal(v.pid, Signal::SIGSTOP);
                }
                format!(
                    "no safe point within {} ms: it stays stopped on {}, whose owner is back",
                    limit.as_millis(),
                    self.facts.name
                )
            };
            log!("VP t{tid:x}: {reason}");
            self.report(PeerMsg::MigrateFailed { tid, reason });
        }
    }

    /// VP `tid` wrote its image (with the messages it had taken in but not
    /// yet read): check it and send it on to the target host through the
    /// master.
    fn checkpointed(&mut self, tid: Tid, path: &str) {
        let expected = self.cfg.state_dir.join(format!("t{tid:x}.ckpt"));
        let Some((to, start, _)) = self.vps.by_tid.get(&tid).and_then(|v| v.moving.clone()) else {
            // Its move was called off while it was writing: it goes on here.
            let late = std::fs::read(&expected)
                .ok()
                .filter(|b| libmig::checkpoint::Image::check(b).is_ok());
            if let (Some(v), Some(image)) = (self.vps.by_tid.get_mut(&tid), late) {
                log!("VP t{tid:x} checkpointed after its move was called off: it restarts here");
                v.moved = true;
                v.restart_here = Some(image);
                let _ = std::fs::remove_file(&expected);
            }
            return;
        };
        // Mapped, not read, and sent from the page cache. Its writer summed
        // it as it wrote it, and the target sums it again as it arrives (a
        // VP parked here sums it when it restores): here only its shape is
        // checked, without a pass over the body.
        let read = if std::path::Path::new(path) == expected {
            map_image(&expected)
        } else {
            Err(format!("it wrote {path}, not {}", expected.display()))
        };
        // (The preamble is copied, not read from the mapping: a VP that
        // cut its file short meanwhile must not crash this daemon.)
        let checked = read.and_then(|b| {
            let start = b
                .copy_checked(0..libmig::checkpoint::PREAMBLE.min(b.len()))
                .map_err(|e| e.to_string())?;
            libmig::checkpoint::Image::check_shape_of(&start, b.len() as u64)
                .map(|()| b)
                .map_err(|e| e.to_string())
        });
        match checked {
            Ok(image) if to == self.facts.name => {
                let parked = self.cfg.state_dir.join(format!("t{tid:x}.parked"));
                match std::fs::rename(&expected, &parked) {
                    Ok(()) => {
                        log!("VP t{tid:x} parked on disk ({} bytes)", image.len());
                        if let Some(v) = self.vps.by_tid.get_mut(&tid) {
                            v.moved = true;
                        }
                        self.parked.insert(tid, (start, parked));
                        self.report(PeerMsg::Parked { tid });
                    }
                    Err(e) => log!("VP t{tid:x}: keeping its image: {e}"),
                }
            }
            Ok(image) => {
                log!("VP t{tid:x} checkpointed ({} bytes) for {to}", image.len());
                if let Some(v) = self.vps.by_tid.get_mut(&tid) {
                    v.moved = true;
                }
                let _ = std::fs::remove_file(&expected);
                self.send_image(&to, start, image);
            }
            Err(e) => {
                log!("VP t{tid:x}: its checkpoint is unusable: {e}");
                self.report(PeerMsg::MigrateFailed {
                    tid,
                    reason: format!("its checkpoint is unusable: {e}"),
                });
            }
        }
    }

    /// VP `tid`, moving to another host, has written its image up to
    /// `upto`: the whole parts of it not sent yet go now, while it writes
    /// the rest (see `send_image` for the end). Only with a data link up;
    /// otherwise the image goes whole once written.
    fn written(&mut self, tid: Tid, path: &str, upto: u64) {
        let Some((to, start, _)) = self.vps.by_tid.get(&tid).and_then(|v| v.moving.clone()) else {
            return;
        };
        // Its own temporary file in the state directory, nothing else.
        let path = std::path::Path::new(path);
        let ours = path.parent() == Some(self.cfg.state_dir.as_path())
            && path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("t{tid:x}.tmp.")));
        if to == self.facts.name || !ours {
            return;
        }
        let Some(d) = self.link_to(&to).filter(|d| {
            self.conns
                .get(d)
                .is_some_and(|c| matches!(c.kind, Kind::Data { .. }))
        }) else {
            return;
        };
        if self.outgoing.get(&tid).is_none_or(|o| o.path != path) {
            match std::fs::File::open(path) {
                Ok(file) => {
                    log!("sending on the image of VP t{tid:x} while it writes it");
                    let out = Outgoing {
                        file,
                        path: path.to_path_buf(),
                        sent: 0,
                        link: d,
                    };
                    self.outgoing.insert(tid, out);
                }
                Err(_) => return,
            }
        }
        let Some(out) = self.outgoing.get_mut(&tid).filter(|o| o.link == d) else {
            return;
        };
        // Never past what the file holds (a mapping past its end would
        // fault when read): the VP's word is checked against the file.
        let size = out.file.metadata().map_or(0, |m| m.len());
        let end = upto.min(size) / IMAGE_PART as u64 * IMAGE_PART as u64;
        let mut parts = Vec::new();
        while out.sent < end {
            match Payload::map_file_at(&out.file, out.sent, IMAGE_PART) {
                Ok(p) => parts.push((out.sent, p)),
                Err(e) => {
                    log!("VP t{tid:x}: cannot map its image as it is written: {e}");
                    break;
                }
            }
            out.sent += IMAGE_PART as u64;
        }
        for (at, part) in parts {
            let msg = PeerMsg::RestorePart {
                tid,
                at,
                total: 0,
                last: false,
                start: (at == 0).then(|| start.clone()),
            };
            if !self.send_image_part(d, &msg, part) {
                self.outgoing.remove(&tid);
                return;
            }
        }
    }

    /// One part of an image on data link `d`; false if the link failed.
    fn send_image_part(&mut self, d: Token, msg: &PeerMsg, part: Payload) -> bool {
        let head = match frame::encode_head(msg, part.len()) {
            Ok(h) => h,
            Err(e) => {
                log!("cannot encode an image part: {e}");
                return false;
            }
        };
        let failed = match self.conns.get_mut(&d) {
            Some(c) => c
                .send_parts(head, part, None, self.poll.registry(), d)
                .err(),
            None => return false,
        };
        if let Some(e) = failed {
            self.write_failed(d, &e);
            return false;
        }
        true
    }

    /// Send a checkpoint image to `to` through the master (no data link).
    /// Copied through the kernel: a VP that cut its image file short makes
    /// the move fail, not this daemon crash.
    fn relay_image(&mut self, to: &str, start: StartVp, image: Payload) {
        match image.copy_checked(0..image.len()) {
            Ok(image) => self.report(PeerMsg::Restore {
                to: to.to_string(),
                start,
                image,
            }),
            Err(e) => self.report(PeerMsg::MigrateFailed {
                tid: start.tid,
                reason: format!("reading its image: {e}"),
            }),
        }
    }

    /// Send a checkpoint image to `to` over the data link, in parts (raw
    /// frame payloads, read on arrival straight into their buffers) that
    /// share the mapped image; through the master if there is no link.
    /// The parts already sent while the VP wrote it are not sent again;
    /// then the preamble, written last, goes last.
    fn send_image(&mut self, to: &str, start: StartVp, image: Payload) {
        let streamed = self.outgoing.remove(&start.tid);
        let Some(d) = self.link_to(to) else {
            return self.relay_image(to, start, image);
        };
        if !self
            .conns
            .get(&d)
            .is_some_and(|c| matches!(c.kind, Kind::Data { .. }))
        {
            return self
                .dialling
                .entry(d)
                .or_default()
                .push(Pending::Image(start, image));
        }
        let (tid, len) = (start.tid, image.len());
        let from = streamed
            .filter(|s| s.link == d)
            .map_or(0, |s| s.sent as usize)
            .min(len);
        let mut ranges: Vec<std::ops::Range<usize>> = (from..len)
            .step_by(IMAGE_PART)
            .map(|at| at..(at + IMAGE_PART).min(len))
            .collect();
        if from > 0 {
            ranges.push(0..libmig::checkpoint::PREAMBLE);
        }
        let n = ranges.len();
        let mut start = (from == 0).then_some(start);
        // Pieces of the image itself, not copies of them.
        for (i, (part, r)) in image.pieces(&ranges).into_iter().zip(ranges).enumerate() {
            let msg = PeerMsg::RestorePart {
                tid,
                at: r.start as u64,
                total: len as u64,
                last: i + 1 == n,
                start: start.take(),
            };
            if !self.send_image_part(d, &msg, part) {
                return log!("lost the link to {to} while sending VP t{tid:x}");
            }
        }
    }

    /// Part of a checkpoint image from the VP's previous host: written
    /// to a file as it arrives and checked on the way, never held whole.
    fn image_part(
        &mut self,
        from: Token,
        ImagePart {
            tid,
            at,
            total,
            last,
        }: ImagePart,
        start: Option<StartVp>,
        part: &[u8],
    ) {
        let limit = libmig::checkpoint::MAX_IMAGE + libmig::checkpoint::PREAMBLE as u64;
        let end = at.saturating_add(part.len() as u64);
        if total > limit || end > limit {
            return log!("refusing an image of more than {limit} bytes for t{tid:x}");
        }
        if let Some(start) = start {
            let tmp = self.cfg.state_dir.join(format!("t{tid:x}.restore.part"));
            match std::fs::File::create(&tmp) {
                Ok(file) => {
                    self.incoming.insert(
                        tid,
                        Incoming {
                            from,
                            start,
                            file,
                            tmp,
                            check: libmig::checkpoint::Checker::default(),
                        },
                    );
                }
                Err(e) => return log!("cannot take in VP t{tid:x}: {}: {e}", tmp.display()),
            }
        }
        let Some(inc) = self.incoming.get_mut(&tid) else {
            return log!("an image part for t{tid:x} without its start");
        };
        let failed = if total > 0 && end > total {
            Some("image parts overflow its size".to_string())
        } else {
            use std::os::unix::fs::FileExt;
            match inc.check.update_at(at, part) {
                Ok(()) => inc.file.write_all_at(part, at).err().map(|e| e.to_string()),
                Err(e) => Some(e.to_string()),
            }
        };
        if let Some(why) = failed {
            if let Some(inc) = self.incoming.remove(&tid) {
                let _ = std::fs::remove_file(&inc.tmp);
            }
            return log!("cannot take in VP t{tid:x}: {why}");
        }
        if last {
            if let Some(inc) = self.incoming.remove(&tid) {
                if inc.check.seen() == total {
                    self.restore_received(inc);
                } else {
                    let _ = std::fs::remove_file(&inc.tmp);
                    let why = format!("{} bytes of an image of {total} arrived", inc.check.seen());
                    self.restore_failed(tid, &why);
                }
            }
        }
    }

    /// A whole image arrived in parts: checked, it becomes the VP's restore
    /// file and the VP starts from it.
    fn restore_received(&mut self, inc: Incoming) {
        let tid = inc.start.tid;
        let path = self.cfg.state_dir.join(format!("t{tid:x}.restore"));
        drop(inc.file);
        let ready = inc
            .check
            .finish()
            .map_err(|e| e.to_string())
            .and_then(|()| std::fs::rename(&inc.tmp, &path).map_err(|e| e.to_string()));
        match ready {
            Ok(()) => self.start_restored(inc.start, &path),
            Err(e) => {
                let _ = std::fs::remove_file(&inc.tmp);
                self.restore_failed(tid, &e);
            }
        }
    }

    /// Start a VP from a checkpoint image sent by its previous host.
    fn restore(&mut self, start: StartVp, image: &[u8]) {
        let tid = start.tid;
        let path = self.cfg.state_dir.join(format!("t{tid:x}.restore"));
        // Checked, then written as received: the VP decodes it itself.
        let written = libmig::checkpoint::Image::check(image)
            .and_then(|()| libmig::checkpoint::write_bytes(&path, image, false))
            .map_err(|e| e.to_string());
        match written {
            Ok(()) => self.start_restored(start, &path),
            Err(e) => self.restore_failed(tid, &e),
        }
    }

    fn restore_failed(&mut self, tid: Tid, e: &str) {
        log!("cannot restore VP t{tid:x}: {e}");
        let status = ExitInfo {
            code: None,
            signal: None,
            error: Some(format!("restoring it failed: {e}")),
        };
        self.report(PeerMsg::Exited { tid, status });
    }

    /// Start VP `start` from the image at `path`.
    fn start_restored(&mut self, mut start: StartVp, path: &std::path::Path) {
        let tid = start.tid;
        start
            .env
            .retain(|(k, _)| k != libmig::vp::env::RESTORE && k != libmig::vp::env::RESTORE_SUMMED);
        // Every caller checked the image's checksum on its way here.
        start
            .env
            .push((libmig::vp::env::RESTORE_SUMMED.to_string(), "1".into()));
        start.env.push((
            libmig::vp::env::RESTORE.to_string(),
            path.display().to_string(),
        ));
        log!("restoring VP t{tid:x} from its checkpoint");
        self.start_vp(start);
    }

    // ----- VPs on this host --------------------------------------------------

    fn start_vp(&mut self, s: StartVp) {
        let tid = s.tid;
        match host::spawn(
            &s,
            &self.facts.name,
            &self.socket_path.display().to_string(),
            &host::Treatment {
                nice: self.cfg.vp_nice,
                idle: self.cfg.vp_idle_class,
                huge_pages: self.cfg.vp_huge_pages,
            },
        ) {
            Ok(host::Started {
                pid,
                stdout: out,
                stderr: err,
                sock,
            }) => {
                let std_sock = std::os::unix::net::UnixStream::from(sock);
                let mut vp_sock = Sock::Unix(mio::net::UnixStream::from_std(std_sock));
                let vt = self.token();
                if self
                    .poll
                    .registry()
                    .register(&mut vp_sock, vt, Interest::READABLE)
                    .is_ok()
                {
                    self.conns.insert(vt, Conn::new(vp_sock, Kind::Vp { tid }));
                    self.vp_conns.insert(tid, vt);
                    for (env, payload) in self.router.attach(tid, vt) {
                        self.route(env, payload, None);
                    }
                    self.released(tid);
                }
                if let Some(old) = self.vps.by_tid.remove(&tid) {
                    // Back before its old process here was gone: that one's
                    // end must not count as this one's.
                    if old.moved && (old.exit.is_none() || old.open_pipes > 0) {
                        self.leaving.insert(old.pid, old);
                    }
                }
                self.vps.by_tid.insert(
                    tid,
                    LocalVp {
                        pid,
                        open_pipes: 0,
                        exit: None,
                        moving: None,
                        moved: false,
                        start: Some(s.clone()),
                        restart_here: None,
                    },
                );
                self.vps.by_pid.insert(pid, tid);
                let off_slot = self.slicer.started(tid);
                if !self.owner.offered() || off_slot {
                    // Started as the owner came back (it waits, stopped, for
                    // the scheduler to move it or the owner to leave), or
                    // outside its slot (it waits for its turn).
                    host::signal(pid, Signal::SIGSTOP);
                }
                for (fd, stream) in [(out, Stream::Stdout), (err, Stream::Stderr)] {
                    let t = self.token();
                    let file = std::fs::File::from(fd);
                    if self
                        .poll
                        .registry()
                        .register(&mut SourceFd(&file.as_raw_fd()), t, Interest::READABLE)
                        .is_ok()
                    {
                        self.pipes.insert(
                            t,
                            Pipe {
                                file,
                                tid,
                                pid,
                                stream,
                                partial: Vec::new(),
                            },
                        );
                        if let Some(vp) = self.vps.by_tid.get_mut(&tid) {
                            vp.open_pipes += 1;
                        }
                    }
                }
                self.report(PeerMsg::Started {
                    tid,
                    pid: pid as u32,
                });
            }
            Err(e) => {
                log!("cannot start {} for VP t{tid:x}: {e}", s.program);
                let status = ExitInfo {
                    code: None,
                    signal: None,
                    error: Some(format!("{}: {e}", s.program)),
                };
                self.report(PeerMsg::Exited { tid, status });
            }
        }
    }

    fn pipe_ready(&mut self, t: Token) {
        let Some(p) = self.pipes.get_mut(&t) else {
            return;
        };
        let (lines, eof) = host::read_lines(p);
        let (tid, pid, stream) = (p.tid, p.pid, p.stream);
        for line in lines {
            self.report(PeerMsg::Output { tid, stream, line });
        }
        if eof {
            if let Some(p) = self.pipes.remove(&t) {
                let _ = self
                    .poll
                    .registry()
                    .deregister(&mut SourceFd(&p.file.as_raw_fd()));
            }
            match self.vps.by_tid.get_mut(&tid).filter(|v| v.pid == pid) {
                Some(vp) => {
                    vp.open_pipes = vp.open_pipes.saturating_sub(1);
                    self.report_if_done(tid);
                }
                None => self.old_process_done(pid, None),
            }
        }
    }

    fn reap(&mut self) {
        for (pid, status) in host::reap() {
            let Some(tid) = self.vps.by_pid.remove(&pid) else {
                continue;
            };
            match self.vps.by_tid.get_mut(&tid).filter(|v| v.pid == pid) {
                Some(vp) => {
                    vp.exit = Some(status);
                    self.report_if_done(tid);
                }
                None => self.old_process_done(pid, Some(status)),
            }
        }
    }

    /// A process of a VP that has since come back to this host ended (or
    /// closed a pipe): it went on elsewhere, so its end is nobody's exit.
    fn old_process_done(&mut self, pid: i32, exit: Option<ExitInfo>) {
        let Some(old) = self.leaving.get_mut(&pid) else {
            return;
        };
        match exit {
            Some(e) => old.exit = Some(e),
            None => old.open_pipes = old.open_pipes.saturating_sub(1),
        }
        if old.exit.is_some() && old.open_pipes == 0 {
            self.leaving.remove(&pid);
        }
    }

    /// Report an exit once the process is reaped and its output drained.
    fn report_if_done(&mut self, tid: Tid) {
        let done = self
            .vps
            .by_tid
            .get(&tid)
            .is_some_and(|v| v.exit.is_some() && v.open_pipes == 0);
        if done {
            if let Some(vp) = self.vps.by_tid.remove(&tid) {
                self.slicer.gone(tid);
                match (vp.moved, vp.exit) {
                    (true, _) => {
                        // It went on elsewhere, or goes on here from its image.
                        if let (Some(start), Some(image)) = (vp.start, vp.restart_here) {
                            self.restore(start, &image);
                        }
                    }
                    (false, Some(status)) => {
                        if vp.moving.is_some() {
                            self.report(PeerMsg::MigrateFailed {
                                tid,
                                reason: format!("it ended before its checkpoint ({status})"),
                            });
                        }
                        self.report(PeerMsg::Exited { tid, status });
                    }
                    (false, None) => {}
                }
            }
        }
    }
}

/// Something waiting for a data link to finish its handshake.
enum Pending {
    /// A message between VPs.
    Msg(Envelope, Body),
    /// A checkpoint image on its way to the host restoring it.
    Image(StartVp, Payload),
}

fn gone(tid: Tid) -> String {
    format!("VP t{tid:x} has exited or never existed")
}

/// Connect to a daemon and authenticate both ways (blocking, with
/// timeouts); the stream is ready for the first message after `Welcome`.
fn connect(key: &ClusterKey, addr: SocketAddr) -> Result<std::net::TcpStream, String> {
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3))
        .map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(HANDSHAKE_TIMEOUT))
        .map_err(|e| e.to_string())?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    let ours = auth::nonce().map_err(|e| e.to_string())?;
    let fe = |e: FrameError| e.to_string();
    frame::write_frame(&mut s, &PeerMsg::Hello { nonce: ours }).map_err(fe)?;
    let theirs = match frame::read_frame::<PeerMsg, _>(&mut s).map_err(fe)? {
        Some(PeerMsg::Challenge { nonce, proof }) if key.check_server(&ours, &nonce, &proof) => {
            nonce
        }
        Some(PeerMsg::Challenge { .. }) => {
            return Err("the other daemon does not hold our cluster key (wrong --key-file?)".into())
        }
        Some(PeerMsg::Refused { reason }) => return Err(format!("refused: {reason}")),
        other => return Err(format!("unexpected answer {other:?}")),
    };
    frame::write_frame(
        &mut s,
        &PeerMsg::Proof {
            proof: key.client_proof(&theirs, &ours),
        },
    )
    .map_err(fe)?;
    match frame::read_frame::<PeerMsg, _>(&mut s).map_err(fe)? {
        Some(PeerMsg::Welcome) => Ok(s),
        Some(PeerMsg::Refused { reason }) => Err(format!("refused: {reason}")),
        other => Err(format!("unexpected answer {other:?}")),
    }
}

fn variant(m: &PeerMsg) -> &'static str {
    match m {
        PeerMsg::Hello { .. } => "Hello",
        PeerMsg::Challenge { .. } => "Challenge",
        PeerMsg::Proof { .. } => "Proof",
        PeerMsg::Welcome => "Welcome",
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
        PeerMsg::Checkpoint { .. } => "Checkpoint",
        PeerMsg::Restore { .. } => "Restore",
        PeerMsg::MigrateFailed { .. } => "MigrateFailed",
        PeerMsg::RestorePart { .. } => "RestorePart",
        PeerMsg::Owner(_) => "Owner",
        PeerMsg::OwnerCommand { .. } => "OwnerCommand",
        PeerMsg::OwnerDone { .. } => "OwnerDone",
        PeerMsg::Parked { .. } => "Parked",
        PeerMsg::SlotTable(_) => "SlotTable",
        PeerMsg::Snap { .. } => "Snap",
        PeerMsg::SnapImage { .. } => "SnapImage",
        PeerMsg::Replica { .. } => "Replica",
        PeerMsg::Slicing(_) => "Slicing",
        PeerMsg::Unpark { .. } => "Unpark",
    }
}

/// An image sent on while its VP writes it (see `Daemon::written`).
struct Outgoing {
    /// The file being written, and its name (a VP's process writes its own).
    file: std::fs::File,
    path: PathBuf,
    /// Bytes of it sent so far (whole parts).
    sent: u64,
    /// The data link they went on.
    link: Token,
}

/// The size of the parts images travel in between hosts.
const IMAGE_PART: usize = 4 << 20;

/// Where a part of an image goes: whose, at which offset, of how many
/// bytes in all, and whether it is the last.
struct ImagePart {
    tid: Tid,
    at: u64,
    total: u64,
    last: bool,
}

/// A checkpoint image arriving in parts (see `Daemon::image_part`).
struct Incoming {
    /// The link it arrives on.
    from: Token,
    start: StartVp,
    file: std::fs::File,
    tmp: std::path::PathBuf,
    check: libmig::checkpoint::Checker,
}

/// A checkpoint image file, mapped read-only (no copy) after checking its
/// size against the largest image there can be.
fn map_image(path: &std::path::Path) -> Result<Payload, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let len = f
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?
        .len();
    let limit = libmig::checkpoint::MAX_IMAGE + libmig::checkpoint::PREAMBLE as u64;
    if len > limit {
        return Err(format!(
            "{}: {len} bytes, larger than any image",
            path.display()
        ));
    }
    Payload::map_file(&f, len as usize, false).map_err(|e| format!("{}: {e}", path.display()))
}
