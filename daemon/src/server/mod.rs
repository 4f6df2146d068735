//! The daemon's event loop: one mio `Poll` owns every socket, pipe and
//! signal, and one `Daemon` struct owns all state (no locks).
//!
//! What lives here: accepting and authenticating connections, decoding
//! frames and dispatching them, the worker's link to its master, data links
//! between daemons (opened on the first message for a host), each VP's
//! socket, moving messages between VPs with flow control (a receiver that
//! falls behind pauses its senders: no unbounded buffering), heartbeats,
//! signals (SIGCHLD reaps, SIGTERM/SIGINT stop), carrying out the master's
//! `Out`s, and timing each turn of the loop (`crate::turns`). What does
//! not: the master's decisions (`master`), where a message goes (`route`),
//! process handling details (`host`), the scheduler (`sched`).
//!
//! The `Daemon` is made of parts that own their own state, each defined
//! beside the handlers that use it most: `Net` (`net`: the poll,
//! listeners, connections, data links), `Local` (`local`: the VPs here,
//! their sockets and pipes, cells, lease and checkpointer), `Images`
//! (`images`: images kept here and going out), `Slicing` (`slicing`) and
//! `Pace` (here: heartbeats, usage reports, turns); beside them the types
//! that already owned theirs (`MoveTable`, `Router`, `Flow`, `Monitor`,
//! `Failover`, `Attach`, `Role`). A handler reaches a part through its
//! field (`self.net.conns`); what touches one part only is that part's
//! method. docs/ARCHITECTURE.md draws the picture.

mod attach;
mod bids;
mod control;
mod failover;
mod handshake;
mod images;
mod lease;
mod lines;
mod local;
mod move_in;
mod move_out;
mod net;
mod outside;
mod owner;
mod pausing;
mod peer;
mod rate;
mod role;
mod routing;
mod slicing;
mod snapshot;
pub mod token;
mod vp;

use images::Images;
use local::Local;
use net::Net;
use role::Role;
use slicing::Slicing;

use std::collections::HashSet;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use libmig::auth::{self, ClusterKey};
use libmig::msg::{HostFacts, ToMaster};
use mio::net::{TcpListener, UnixListener};
use mio::{Events, Interest, Poll, Token};
use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM};
use signal_hook_mio::v1_0::Signals;
use thiserror::Error;

use crate::config::Config;
use crate::conn::{Conn, Kind};
use crate::contain::Containment;
use crate::flow::Flow;
use crate::log;
use crate::master::Master;
use crate::migrate::MoveTable;
use crate::owner::Monitor;
use crate::route::Router;
use crate::state_dir::StateDir;
use crate::store::Store;
use crate::switcher::Switcher;
use crate::turns::{self, Turns};
use crate::warn;

/// How far ahead of a slot switch the loop arms it for the switcher's
/// threads (so a loop held up for a few milliseconds does not make it late).
const ARM_AHEAD: Duration = Duration::from_millis(10);

/// Shared buffers and mappings of them unused this long are let go: a
/// stream that ended leaves nothing behind in the daemon.
const POOL_IDLE: Duration = Duration::from_secs(5);
/// How often a host tells the master its VPs' CPU times.
const USAGE_EVERY: Duration = Duration::from_secs(2);

/// migd's niceness where it may raise itself: above the owner's and other
/// users' programs (0), far above VPs (`vp_nice`, 10 by default).
const MIGD_NICE: i32 = -5;

/// Threads that race to carry out each slot switch, on as many processors.
const SWITCH_THREADS: usize = 4;

const TCP: Token = Token(0);
const UNIX: Token = Token(1);
const SIGNALS: Token = Token(2);

/// The keeper thread has results (`keeper`).
const WAKE: Token = Token(3);
const FIRST: usize = 16;
/// Most bytes read from one connection in one turn of the loop.
const READ_BUDGET: usize = 16 << 20;
/// Most time spent on all connections' messages in one turn of the loop
/// (those left wait for the next turn, and are served first then).
const READS_TURN: Duration = Duration::from_millis(20);
/// Most time spent on one connection's messages in one turn of the loop:
/// a stream of small messages (a job printing 100,000 lines a second)
/// is within the byte budget for hundreds of thousands of them, and the
/// loop owes heartbeats to the voters and answers to everyone else (with
/// dozens of connections busy at once, the turn is dozens of these).
const READ_TIME: Duration = Duration::from_millis(2);
/// Most bytes of one VP's output pipe read in one turn of the loop, and of
/// all pipes together: a VP that prints faster than its lines can be
/// carried waits on its full pipe, and the daemon goes on with everything
/// else meanwhile (each line costs the master a copy to its waiter, its
/// file and the voters: 256 KiB is some 20,000 lines a turn).
const PIPE_TURN: usize = 64 * 1024;
const PIPES_TURN: usize = 256 * 1024;
/// A control client with this many bytes waiting for it that has taken
/// none for `WAITER_STALL` is sent no more lines of job output
/// (`send_resp`); nor is one with `WAITER_MAX` waiting. The job's output
/// file keeps them.
const WAITER_BACKLOG: usize = 4 << 20;
const WAITER_STALL: Duration = Duration::from_secs(1);
const WAITER_MAX: usize = 256 << 20;
/// A connection that has not finished the handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// A turn of the loop this long is logged: half the shortest election
/// timeout of the voters, a fifth of the default lease.
const LONG_TURN: Duration = Duration::from_millis(250);

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
    /// The poll, the listening sockets and every connection.
    net: Net,
    /// The VPs on this host, their sockets and pipes.
    local: Local,
    /// Job checkpoints' images kept here, and images going out.
    images: Images,
    /// Which local VPs run in each slot, and the switch threads.
    slicing: Slicing,
    /// The loop's pace: its heartbeats, usage reports and turns.
    pace: Pace,
    cfg: Config,
    facts: HostFacts,
    /// On the master: jobs' kept output and the history of ended jobs.
    job_files: crate::job_files::JobFiles,
    /// The master, or a worker and its link to the master.
    role: Role,
    halting: Option<Instant>,
    uid: u32,
    router: Router,
    /// Where each local VP is in its move, and the images this host holds
    /// for moves: on their way out, parked, arriving.
    moves: MoveTable,
    /// The files this daemon keeps.
    state: StateDir,
    /// Who waits for whom (flow control).
    flow: Flow,
    /// Is this workstation its owner's right now?
    owner: Monitor,
    /// The consensus that keeps the master's state, and following a new
    /// master.
    failover: failover::Failover,
    /// A worker's attaching to its master, and its master's silence.
    attach: attach::Attach,
    /// Control requests of local users forwarded to the master.
    proxied: role::Proxied,
    /// What this daemon counts for `--metrics`.
    metrics: crate::metrics::Counters,
    /// Spawns waiting for the other hosts' bids (the bidding placement).
    bids: bids::Bids,
    /// This host's Rate-of-Change (the roc placement).
    rating: rate::Rating,
    /// On a worker: lines of output sent to the master, kept until it
    /// says it took them.
    lines_sent: lines::Sent,
    /// On the master: the last line taken from each worker.
    lines_taken: lines::Taken,
}

/// The loop's pace and its own figures: when the last heartbeat and the
/// last usage report went, this host's I/O meter, and how long its turns
/// take. Owned by the `Daemon`; its handlers reach it as `self.pace`.
struct Pace {
    /// When the last heartbeat went (`tick`).
    last_beat: Instant,
    /// When the VPs' CPU times were last sent to the master.
    usage_sent: Instant,
    /// How busy this host's disks are, read at each usage report.
    io_meter: crate::facts::IoMeter,
    /// How long the loop's turns take, and when this one began (its poll
    /// returned).
    turns: Turns,
    turn_began: Option<Instant>,
    /// When a long turn was last logged.
    long_turn_logged: Option<Instant>,
}

impl Pace {
    /// A heartbeat and a usage report just went; the I/O meter's first
    /// reading taken.
    fn new() -> Pace {
        Pace {
            last_beat: Instant::now(),
            usage_sent: Instant::now(),
            io_meter: {
                // A first reading now: the first report has a figure.
                let mut m = crate::facts::IoMeter::default();
                let _ = m.read();
                m
            },
            turns: Turns::default(),
            turn_began: None,
            long_turn_logged: None,
        }
    }

    /// The loop is about to wait: the turn since its last wait is counted,
    /// and one long enough to matter is logged (at most every `WINDOW`).
    fn end_turn(&mut self) {
        let Some(began) = self.turn_began.take() else {
            return;
        };
        let now = Instant::now();
        let took = now.saturating_duration_since(began);
        self.turns.record(took, now);
        if took >= LONG_TURN
            && self
                .long_turn_logged
                .is_none_or(|t| now.saturating_duration_since(t) >= turns::WINDOW)
        {
            self.long_turn_logged = Some(now);
            warn!(
                "a turn of the loop took {} ms (the longest since start: {} ms)",
                took.as_millis(),
                self.turns.report(now).longest_us / 1000
            );
        }
    }
}

/// Raise this process's soft limit of open files to its hard limit.
fn raise_open_files() {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct given,
    // and change this process's limit only.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// What the daemon opens before it exists: its sockets, its threads, what
/// is known of its host, and the files an earlier daemon here left cleared.
struct Opened {
    poll: Poll,
    key: ClusterKey,
    listeners: Listeners,
    facts: HostFacts,
    owner: Monitor,
    switcher: Switcher,
    contain: Option<Containment>,
    store: Store,
    keeper: crate::keeper::Keeper,
    checkpointer: crate::transparent::Checkpointer,
}

/// The daemon's listening sockets and its signals, registered with the poll.
pub(super) struct Listeners {
    pub(super) tcp: TcpListener,
    pub(super) unix: UnixListener,
    pub(super) socket_path: PathBuf,
    pub(super) signals: Signals,
}

impl Opened {
    /// Everything `cfg` asks for, in order; the address bound besides.
    fn open(cfg: &Config) -> Result<(Opened, SocketAddr), DaemonError> {
        crate::state_dir::ensure_private_dir(&cfg.state_dir).map_err(|e| DaemonError::Io {
            what: "the state directory".into(),
            source: io::Error::other(e),
        })?;
        // Above other users' work where allowed (root, CAP_SYS_NICE), so the
        // owner monitor samples on time on a busy machine and stops VPs at
        // once; VPs set their own priority as they start.
        // SAFETY: setpriority changes this process's niceness only.
        let raised = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, MIGD_NICE) } == 0;
        // A master holds a few connections for every host (its link, data
        // links both ways): as many descriptors as this process may have.
        raise_open_files();
        let key = ClusterKey::load_or_create(&cfg.key_file)?;
        let poll = Poll::new().map_err(io_err("creating the poll"))?;
        let (listeners, addr) = Listeners::open(cfg, &poll)?;
        let mut facts = host_facts(cfg, addr);
        let owner = Monitor::new(cfg.owner.clone(), Instant::now());
        facts.offered = owner.offered();
        let switcher = start_switcher(raised)?;
        let contain = open_containment(&cfg.name);
        let store = clear_store(cfg);
        let (keeper, checkpointer) = start_helpers(&poll)?;
        let opened = Opened {
            poll,
            key,
            listeners,
            facts,
            owner,
            switcher,
            contain,
            store,
            keeper,
            checkpointer,
        };
        Ok((opened, addr))
    }
}

impl Listeners {
    /// The TCP port for daemons, the control socket (files a daemon that
    /// ran here before left removed), and the signals the loop handles.
    fn open(cfg: &Config, poll: &Poll) -> Result<(Listeners, SocketAddr), DaemonError> {
        let mut tcp = TcpListener::bind(cfg.listen)
            .map_err(io_err(format!("listening on {}", cfg.listen)))?;
        let addr = tcp
            .local_addr()
            .map_err(io_err("reading the bound address"))?;
        let socket_path = StateDir::new(cfg.state_dir.clone()).control_socket();
        let _ = std::fs::remove_file(&socket_path);
        // A daemon that ran here before left its VPs' images behind (a
        // crash, a kill): those VPs were started elsewhere since.
        let swept = StateDir::new(cfg.state_dir.clone()).sweep_vp_files();
        if swept > 0 {
            log!(
                "removed {} a daemon that ran here before left",
                libmig::words::count(swept as u64, "VP file", "VP files")
            );
        }
        let mut unix = UnixListener::bind(&socket_path)
            .map_err(io_err(format!("binding {}", socket_path.display())))?;
        // Private; or, shared, open to every local user (the directory then
        // lets them through to it, and the daemon checks who asks what).
        let (sock_mode, dir_mode) = if cfg.shared {
            (0o666, 0o711)
        } else {
            (0o600, 0o700)
        };
        std::fs::set_permissions(&socket_path, std::fs::Permissions::from_mode(sock_mode))
            .map_err(io_err("setting the control socket's permissions"))?;
        std::fs::set_permissions(&cfg.state_dir, std::fs::Permissions::from_mode(dir_mode))
            .map_err(io_err("setting the state directory's permissions"))?;
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
        let listeners = Listeners {
            tcp,
            unix,
            socket_path,
            signals,
        };
        Ok((listeners, addr))
    }
}

/// What this host offers, as configured or measured (not yet whether the
/// owner offers it: the owner monitor says).
fn host_facts(cfg: &Config, addr: SocketAddr) -> HostFacts {
    let capacity = cfg
        .capacity
        .unwrap_or_else(|| crate::facts::benchmark(Duration::from_millis(50)));
    HostFacts {
        name: cfg.name.clone(),
        arch: cfg.arch.clone(),
        processors: cfg.processors,
        capacity,
        memory_mb: cfg.memory_mb.unwrap_or_else(crate::facts::memory_mb),
        addr: addr.to_string(),
        pid: std::process::id(),
        offered: false,
    }
}

/// The slot switch threads; a warning for each privilege migd lacks
/// (`raised`: its own niceness was raised).
fn start_switcher(raised: bool) -> Result<Switcher, DaemonError> {
    let (switcher, realtime) = Switcher::start(SWITCH_THREADS).map_err(|e| DaemonError::Io {
        what: "starting the slot switch threads".into(),
        source: e,
    })?;
    if !raised {
        warn!("migd runs at the normal priority (no permission for nice {MIGD_NICE}): on a busy machine the owner monitor may notice the owner late");
    }
    if !realtime {
        warn!("slot switches run in the normal scheduling class (no permission for SCHED_FIFO): they may be late by milliseconds on a busy host");
    }
    Ok(switcher)
}

/// The cgroups that will hold VPs' process trees, where this host has them.
fn open_containment(name: &str) -> Option<Containment> {
    match Containment::open(name, std::process::id()) {
        Ok(c) => {
            log!("VPs' process trees held in {}", c.describe());
            Some(c)
        }
        Err(why) => {
            warn!("VPs held by process group only (a child that calls setsid escapes): {why}");
            None
        }
    }
}

/// The store of job checkpoints' images, emptied: what an earlier daemon
/// here kept is no use, the master counts none of it (those copies were
/// made again elsewhere when that daemon went).
fn clear_store(cfg: &Config) -> Store {
    let store = Store::new(StateDir::new(cfg.state_dir.clone()).checkpoints());
    let old_layout = Store::new(cfg.state_dir.join("replicas")).clear();
    if store.clear() || old_layout {
        log!("removed the checkpoint images a daemon that ran here before kept");
    }
    store
}

/// The image keeper and the checkpointer threads, each waking the loop
/// (token `WAKE`) when it has results.
fn start_helpers(
    poll: &Poll,
) -> Result<(crate::keeper::Keeper, crate::transparent::Checkpointer), DaemonError> {
    let waker = std::sync::Arc::new(
        mio::Waker::new(poll.registry(), WAKE).map_err(io_err("creating a waker"))?,
    );
    let keeper = crate::keeper::Keeper::start(std::sync::Arc::new({
        let waker = waker.clone();
        move || {
            let _ = waker.wake();
        }
    }))
    .map_err(io_err("starting the image keeper thread"))?;
    let checkpointer = crate::transparent::Checkpointer::start(std::sync::Arc::new(move || {
        let _ = waker.wake();
    }))
    .map_err(io_err("starting the checkpointer thread"))?;
    Ok((keeper, checkpointer))
}

/// Start a daemon with `cfg` and run it until halted or signalled.
/// When ready it prints its bound address on one line of stdout and writes
/// it to `STATE_DIR/addr`.
pub fn run(cfg: Config) -> Result<(), DaemonError> {
    let mut d = Daemon::start(cfg)?;
    d.serve()
}

impl Daemon {
    pub(super) fn start(cfg: Config) -> Result<Daemon, DaemonError> {
        let (opened, addr) = Opened::open(&cfg)?;
        let mut d = Daemon::new(cfg, opened);
        d.take_role(addr)?;
        d.ready(addr)?;
        Ok(d)
    }

    /// The daemon around what `Opened::open` set up, with nothing else yet:
    /// no role, no connections, no VPs.
    fn new(cfg: Config, o: Opened) -> Daemon {
        Daemon {
            net: Net::new(o.poll, o.key, o.listeners),
            local: Local::new(o.contain, o.checkpointer),
            images: Images::new(o.store, o.keeper, cfg.state_dir.clone()),
            slicing: Slicing::new(o.switcher),
            pace: Pace::new(),
            failover: failover::Failover::new(),
            attach: attach::Attach::new(),
            lines_sent: lines::Sent::default(),
            lines_taken: lines::Taken::default(),
            proxied: role::Proxied::default(),
            facts: o.facts,
            job_files: crate::job_files::JobFiles::new(&cfg.state_dir),
            role: Role::worker(),
            halting: None,
            uid: nix::unistd::geteuid().as_raw(),
            router: Router::new(&cfg.name, cfg.join.is_none()),
            moves: MoveTable::default(),
            state: StateDir::new(cfg.state_dir.clone()),
            flow: Flow::default(),
            owner: o.owner,
            metrics: crate::metrics::Counters::default(),
            bids: bids::Bids::default(),
            rating: rate::Rating::default(),
            cfg,
        }
    }

    /// The first daemon becomes the master (with the history of jobs kept
    /// here); any other joins the master at `--join`.
    fn take_role(&mut self, addr: SocketAddr) -> Result<(), DaemonError> {
        match self.cfg.join {
            None => {
                let (mut m, out) =
                    Master::new(self.facts.clone(), Instant::now(), self.cfg.quantum);
                m.set_checkpointing(self.cfg.checkpoint_interval, self.cfg.move_timeout);
                m.set_placement(self.cfg.placement());
                m.set_balance(self.cfg.balance());
                m.set_lease(self.cfg.lease());
                m.set_max_voters(self.cfg.voters as usize);
                m.set_admin_uid(self.uid);
                // (The founding master is the only voter, its own.)
                m.voting([1]);
                let (jobs, damage) = self.job_files.read_history();
                for what in damage {
                    warn!("{what}");
                }
                m.load_history(jobs);
                m.number_jobs_above(self.job_files.highest_job());
                self.role = Role::master_with(m);
                self.failover.found(&self.facts.name);
                self.local.guard_vps();
                self.carry_out_when_committed(out);
                log!("master {} listening on {addr}", self.facts.name);
            }
            Some(master) => {
                self.join(master)?;
                self.local.guard_vps();
                log!(
                    "worker {} listening on {addr}, joined {master}",
                    self.facts.name
                );
            }
        }
        Ok(())
    }

    /// Ready: the master hears whose this host is, metrics are served, and
    /// the bound address goes to `STATE_DIR/addr` and to stdout.
    fn ready(&mut self, addr: SocketAddr) -> Result<(), DaemonError> {
        // The master knows from the start whose this host is.
        if !self.owner.offered() {
            if let Some(c) = &mut self.local.contain {
                c.mark(true);
            }
        }
        let report = self.owner_report(Instant::now());
        self.report(ToMaster::Owner(report));
        self.serve_metrics()?;
        std::fs::write(self.state.addr_file(), format!("{addr}\n"))
            .map_err(io_err("writing the address file"))?;
        let mut stdout = io::stdout();
        let _ = writeln!(stdout, "{addr}");
        let _ = stdout.flush();
        Ok(())
    }

    /// `--metrics`: figures served on a thread of their own; the address
    /// bound is logged and kept in `STATE_DIR/metrics-addr`.
    fn serve_metrics(&mut self) -> Result<(), DaemonError> {
        let serve = self.cfg.metrics_serve().map_err(|e| DaemonError::Io {
            what: "the metrics token".into(),
            source: io::Error::other(e),
        })?;
        let Some(serve) = serve else { return Ok(()) };
        let source = crate::metrics::Source {
            name: self.facts.name.clone(),
            counters: self.metrics.clone(),
            control: self.net.listeners.socket_path.clone(),
        };
        let bound = crate::metrics::start(&serve, source)
            .map_err(io_err(format!("serving metrics on {}", serve.addr)))?;
        log!("metrics at http://{bound}/metrics");
        std::fs::write(self.state.metrics_addr_file(), format!("{bound}\n"))
            .map_err(io_err("writing the metrics address file"))
    }

    pub(super) fn serve(&mut self) -> Result<(), DaemonError> {
        let mut events = Events::with_capacity(256);
        loop {
            // What the last turn decided goes, once its state is safe.
            self.propose_turn();
            if self.halted() {
                return Ok(());
            }
            let timeout = self.poll_timeout();
            self.pace.end_turn();
            match self.net.poll.poll(&mut events, Some(timeout)) {
                Ok(()) => self.pace.turn_began = Some(Instant::now()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(DaemonError::Io {
                        what: "polling".into(),
                        source: e,
                    })
                }
            }
            // Before anything else: a master that was stopped steps down.
            self.failover_turn();
            self.attach_turn();
            // Pipes with more to read after last turn's share, read once
            // more this turn (after any that are ready anyway).
            let pipes_due = std::mem::take(&mut self.local.pipes_again);
            self.local.pipe_budget = PIPES_TURN;
            // Connections that had their share last turn go on first: a
            // turn with more to read than `READS_TURN` leaves the rest for
            // the next, and none waits for ever behind new ones.
            self.net.reads_until = Instant::now() + READS_TURN;
            for t in std::mem::take(&mut self.net.read_again) {
                self.conn_ready(t, true);
            }
            for ev in events.iter() {
                self.ready_event(ev);
            }
            self.left_over(pipes_due);
            self.due_work();
            self.close_and_rebudget();
        }
    }

    /// Halting, and done: every connection flushed and every VP gone (or
    /// 2 s on), the VPs left are stopped and the control socket removed.
    /// A master waits longer (6 s) for hosts that have not attached to it
    /// yet (following it after a failover) to attach and hear the halt:
    /// with it gone, they would wait for a master for ever.
    fn halted(&mut self) -> bool {
        let Some(since) = self.halting else {
            return false;
        };
        let flushed = self.net.conns.values().all(Conn::flushed);
        let told = self.role.all_sent();
        let limit = Duration::from_secs(if told { 2 } else { 6 });
        if !(flushed && told && self.local.vps.by_tid.is_empty()) && since.elapsed() <= limit {
            return false;
        }
        self.local.stop_all();
        log!("{} stopped", self.facts.name);
        // Not a socket of a daemon started since in another
        // directory of the same name.
        if self.state.still_there() {
            let _ = std::fs::remove_file(&self.net.listeners.socket_path);
        }
        true
    }

    /// How long the poll may wait: until the next heartbeat, owner sample,
    /// overdue safe point, pause notice or slot switch; not at all with
    /// work left over from the last turn.
    fn poll_timeout(&mut self) -> Duration {
        let timeout = self
            .cfg
            .heartbeat
            .saturating_sub(self.pace.last_beat.elapsed())
            .min(self.owner.due().saturating_duration_since(Instant::now()))
            // Wake to stop a VP that missed its safe point on time.
            .min(
                self.moves
                    .next_overdue(self.safe_point_limit())
                    .map_or(Duration::MAX, |t| {
                        t.saturating_duration_since(Instant::now()) + Duration::from_millis(1)
                    }),
            )
            // Wake to stop a VP whose pause notice grace is up.
            .min(self.local.next_quiesce_due().map_or(Duration::MAX, |t| {
                t.saturating_duration_since(Instant::now())
            }))
            // Wake to sample this host's load (the roc placement).
            .min(
                if self.cfg.balance() == Some(crate::balance::choice::Policy::Roc)
                    && self.owner.offered()
                {
                    self.rating.due().saturating_duration_since(Instant::now())
                } else {
                    Duration::MAX
                },
            )
            // Wake to decide on the bids in when their wait is over.
            .min(self.bids.due().map_or(Duration::MAX, |t| {
                t.saturating_duration_since(Instant::now())
            }))
            // Wake to arm the next slot switch.
            .min(
                self.slicing
                    .slice_due_in()
                    .map_or(Duration::MAX, |d| d.saturating_sub(ARM_AHEAD)),
            )
            .max(Duration::from_millis(1));
        let timeout = if !self.net.read_again.is_empty()
            || !self.net.write_again.is_empty()
            || !self.local.pipes_again.is_empty()
            || self.releasable()
            || self.outbound_ready()
            || self.proposable()
        {
            Duration::ZERO
        } else if self.halting.is_some() {
            timeout.min(Duration::from_millis(20))
        } else {
            timeout
        };
        timeout
            .min(self.failover.due_in())
            .min(self.attach.due_in())
    }

    /// One event of the poll: a connection to accept, signals, the helper
    /// threads' results, a VP's output or stdin, a connection to write or
    /// read.
    fn ready_event(&mut self, ev: &mio::event::Event) {
        match ev.token() {
            TCP => self.accept(true),
            UNIX => self.accept(false),
            SIGNALS => self.signals(),
            WAKE => {
                self.keeper_done();
                self.checkpointer_done();
            }
            t if self.local.pipes.contains_key(&t) => self.pipe_ready(t),
            t if self.local.inputs.contains_key(&t) => self.local.input_room(t),
            t => {
                if ev.is_writable() {
                    if let Some(c) = self.net.conns.get_mut(&t) {
                        if let Err(e) = c.flush(self.net.poll.registry(), t) {
                            self.write_failed(t, &e);
                        }
                    }
                    self.maybe_resume(t);
                }
                if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                    self.net.read_again.remove(&t);
                    self.conn_ready(t, ev.is_read_closed() || ev.is_error());
                }
            }
        }
    }

    /// Pipes (`pipes_due`) and writes that had their share last turn go on.
    fn left_over(&mut self, pipes_due: HashSet<Token>) {
        for t in pipes_due {
            if !self.local.pipes_again.contains(&t) {
                self.pipe_ready(t);
            }
        }
        for t in std::mem::take(&mut self.net.write_again) {
            let failed = match self.net.conns.get_mut(&t) {
                Some(c) => c.flush(self.net.poll.registry(), t).err(),
                None => None,
            };
            if let Some(e) = failed {
                self.write_failed(t, &e);
            }
            self.maybe_resume(t);
        }
    }

    /// What is due whether or not anything was ready: slot switches,
    /// images going out, the owner monitor, pause notices and safe points
    /// overdue, and the heartbeat.
    fn due_work(&mut self) {
        self.drive_slicer();
        self.pump_outbound();
        self.bids_due();
        self.rate_due();
        if Instant::now() >= self.owner.due() {
            self.owner_poll(None);
        }
        if self
            .local
            .next_quiesce_due()
            .is_some_and(|t| Instant::now() >= t)
        {
            self.end_quiescing(|_| false);
        }
        if self
            .moves
            .next_overdue(self.safe_point_limit())
            .is_some_and(|t| Instant::now() > t)
        {
            self.call_off_slow_moves();
        }
        if self.pace.last_beat.elapsed() >= self.cfg.heartbeat {
            self.pace.last_beat = Instant::now();
            self.tick();
        }
    }

    /// The end of a turn: refused connections whose last words are out
    /// are closed, and each connection's write budget is whole again
    /// (those that used it up with more to write go on next turn).
    fn close_and_rebudget(&mut self) {
        let closing: Vec<Token> = self
            .net
            .conns
            .iter()
            .filter(|(_, c)| c.closing && c.flushed())
            .map(|(t, _)| *t)
            .collect();
        for t in closing {
            self.close(t, "refused");
        }
        self.net.write_again = self
            .net
            .conns
            .iter()
            .filter(|(_, c)| c.starved())
            .map(|(t, _)| *t)
            .collect();
        for c in self.net.conns.values_mut() {
            c.new_turn();
        }
    }

    pub(super) fn tick(&mut self) {
        if !self.state.still_there() && self.halting.is_none() {
            log!(
                "the state directory {} was removed: nothing can reach this daemon any more \
                 (its control socket went with it), stopping",
                self.state.root().display()
            );
            self.begin_halt();
        }
        self.call_off_slow_moves();
        let path = self.cfg.state_dir.join("migd.log");
        match crate::log::rotate_if_large(&path, self.cfg.log_max) {
            Ok(true) => log!("log rotated: the earlier lines are in migd.log.1"),
            Ok(false) => {}
            Err(e) => warn!("could not rotate the log: {e}"),
        }
        if let Some(c) = &mut self.local.contain {
            c.sweep();
        }
        let vps = &self.local.vps.by_tid;
        self.local.inputs.retain(|_, tid| {
            vps.get(tid)
                .and_then(|v| v.input.as_ref())
                .is_some_and(|i| !i.closed())
        });
        if self.net.pools_trimmed.elapsed() >= POOL_IDLE {
            self.net.pools_trimmed = Instant::now();
            self.net.outbox.trim_idle();
            self.net.inbox.trim_idle();
        }
        // The owner's state rides with the heartbeat, for `mig owner status`,
        // and so do the slicer's switches, for `mig stats`.
        let report = self.owner_report(Instant::now());
        self.report(ToMaster::Owner(report));
        for s in self.slicing.switcher.done() {
            self.slicing.slicer.record(s);
        }
        if let Some(r) = self.slicing.slicer.report() {
            self.report(ToMaster::Slicing(r));
        }
        // So do, every couple of seconds, the CPU time of each VP (`mig
        // ps`) and the memory, I/O and space this host has free (for
        // placement, and where copies of images go).
        if self.pace.usage_sent.elapsed() >= USAGE_EVERY {
            self.send_usage();
        }
        self.announce_outside_vps();
        if let Some(link) = self.role.link() {
            self.send_peer(link, ToMaster::Heartbeat);
        }
        self.ask_lease();
        self.attach_tick();
        self.masterless_too_long();
        self.give_up_kept_requests();
        self.excuse_silence_if_cut_off();
        self.announce_again();
        self.behind_but_alive();
        if let Some(m) = self.role.master() {
            // The master's own turns, as they are now.
            m.note_turns(&self.facts.name, self.pace.turns.report(Instant::now()));
            let out = m.tick(Instant::now(), self.cfg.dead_after);
            self.role.forget_unsent_to_dead();
            self.carry_out_when_committed(out);
        }
        let stale: Vec<Token> = self
            .net
            .conns
            .iter()
            .filter(|(_, c)| {
                matches!(c.kind, Kind::Accepting | Kind::Dialling { .. })
                    && c.since.elapsed() > HANDSHAKE_TIMEOUT
            })
            .map(|(t, _)| *t)
            .collect();
        for t in stale {
            self.close(t, "handshake timed out");
        }
    }

    pub(super) fn signals(&mut self) {
        let pending: Vec<i32> = self.net.listeners.signals.pending().collect();
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

    pub(super) fn begin_halt(&mut self) {
        if self.halting.is_none() {
            self.halting = Some(Instant::now());
            for vp in self.local.vps.by_tid.values() {
                vp.kill();
            }
        }
    }
}
