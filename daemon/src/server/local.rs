//! VPs on this host: starting their processes, their output, reaping them,
//! and reporting each exit once its output is drained.
//!
//! The state of the VPs here is the daemon's `Local` part, defined here:
//! the VPs by Tid and pid, their sockets, output and stdin pipes, processes
//! still leaving, exits lately reported, the cells and the lease they run
//! under, and the checkpointer with the VPs it is rebuilding. Handlers
//! elsewhere reach it as `self.local`; what touches nothing else is a
//! method of `Local` (in this file, or beside its handlers: `lease`,
//! `owner`, `vp`, `outside`).

use std::collections::{HashMap, HashSet, VecDeque};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use libmig::msg::{ExitInfo, StartVp, Stream, Tid, ToMaster};
use mig_ckpt::SocketState;
use mio::unix::SourceFd;
use mio::{Interest, Token};
use nix::sys::signal::Signal;

use super::lease::Lease;
use super::{Daemon, PIPES_TURN, PIPE_TURN};
use crate::conn::{Conn, Kind, Sock};
use crate::contain::Containment;
use crate::host::{LocalVp, Pipe, Vps};
use crate::migrate::Move;
use crate::transparent::Checkpointer;
use crate::{host, log, warn};

/// A VP being rebuilt from outside: how it starts, the daemon's ends of
/// its descriptors, its cell, its image.
pub(super) type Rebuilding = (StartVp, host::Ours, Option<crate::contain::Cell>, PathBuf);

/// The VPs on this host: their processes, sockets, output and stdin pipes,
/// the cells that hold them, the lease they run under, and the
/// checkpointer that saves and rebuilds those that do not move
/// themselves. Owned by the `Daemon`; its handlers reach it as
/// `self.local`.
pub(super) struct Local {
    /// Each local VP by Tid and by pid.
    pub(super) vps: Vps,
    /// Each local VP's socket, for answers to it (also while it moves, when
    /// the router no longer delivers messages to it).
    pub(super) vp_conns: HashMap<Tid, Token>,
    /// Local VPs' output pipes, by token.
    pub(super) pipes: HashMap<Token, Pipe>,
    /// VP output pipes that had their share of a turn with more to read.
    pub(super) pipes_again: HashSet<Token>,
    /// What is left this turn of `PIPES_TURN`.
    pub(super) pipe_budget: usize,
    /// Local VPs' stdin pipes, by the token that says one has room.
    pub(super) inputs: HashMap<Token, Tid>,
    /// By pid: processes of VPs that moved away and have come back here
    /// before the old process was gone.
    pub(super) leaving: HashMap<i32, LocalVp>,
    /// VPs' exits reported lately (the last `RECENT_EXITS`): said again to
    /// a master this host attaches to, which may not have heard them.
    pub(super) recent_exits: VecDeque<(Tid, ExitInfo)>,
    /// The cgroups holding each VP's process tree (none: process groups).
    pub(super) contain: Option<Containment>,
    /// A worker's lease on its VPs.
    pub(super) lease: Lease,
    /// Saves and rebuilds VPs whose programs do not help, off the loop.
    pub(super) checkpointer: Checkpointer,
    /// VPs being rebuilt from outside: how each starts, the daemon's ends
    /// of its descriptors, its cell, its image.
    pub(super) restoring: HashMap<Tid, VecDeque<Rebuilding>>,
}

impl Local {
    /// No VP yet, in `contain`'s cells (if any).
    pub(super) fn new(contain: Option<Containment>, checkpointer: Checkpointer) -> Local {
        Local {
            vps: Vps::default(),
            vp_conns: HashMap::new(),
            pipes: HashMap::new(),
            pipes_again: HashSet::new(),
            pipe_budget: PIPES_TURN,
            inputs: HashMap::new(),
            leaving: HashMap::new(),
            recent_exits: VecDeque::new(),
            contain,
            lease: Lease::default(),
            checkpointer,
            restoring: HashMap::new(),
        }
    }

    /// VP `s.tid`'s record, process `pid`, in place of any earlier one of
    /// the same VP (whose process is ended if it still runs).
    fn record_vp(
        &mut self,
        s: StartVp,
        pid: i32,
        stdin: Option<OwnedFd>,
        mut cell: Option<crate::contain::Cell>,
        restored: Option<crate::transparent::Restored>,
    ) {
        let tid = s.tid;
        if let Some(old) = self.vps.by_tid.remove(&tid) {
            // Back before its old process here was gone (it moved
            // away, or its job restarts and it was just killed):
            // that one's end must not count as this one's, and it
            // does not run on beside it.
            if old.exit.is_none() || old.open_pipes > 0 {
                old.kill();
                self.leaving.insert(old.pid, old);
            }
        }
        self.vps.by_tid.insert(
            tid,
            LocalVp {
                pid,
                open_pipes: 0,
                exit: None,
                start: Some(s.clone()),
                movable: false,
                started: Instant::now(),
                probation: None,
                pause_signal: pause_signal_of(&s.env),
                quiescing: None,
                snapping_since: None,
                outside: restored.is_some(),
                carried: None,
                restored,
                direct: Default::default(),
                ledger: Default::default(),
                uncredited: 0,
                snap: None,
                input: stdin.and_then(|fd| {
                    crate::stdin_feed::Input::new(fd)
                        .map_err(|e| warn!("VP t{tid:x}: its stdin cannot be fed: {e}"))
                        .ok()
                }),
                cell: cell.take().map(|mut c| {
                    c.joined();
                    c
                }),
            },
        );
        self.vps.by_pid.insert(pid, tid);
    }

    /// `PeerMsg::Input`: bytes (and perhaps the end) for a local VP's stdin.
    pub(super) fn feed_input(&mut self, tid: Tid, data: &[u8], eof: bool) {
        let Some(input) = self.vps.by_tid.get_mut(&tid).and_then(|v| v.input.as_mut()) else {
            warn!(
                "{} bytes of input for VP t{tid:x} dropped: it is not here or reads no input",
                data.len()
            );
            return;
        };
        if let crate::stdin_feed::Pushed::Dropped(n) = input.push(data, eof) {
            warn!("{n} bytes of input for VP t{tid:x} dropped: it does not read them");
        }
        if input.closed() {
            self.inputs.retain(|_, t| *t != tid);
        }
    }

    /// A VP's stdin pipe has room again (or its reader went away).
    pub(super) fn input_room(&mut self, t: Token) {
        let Some(&tid) = self.inputs.get(&t) else {
            return;
        };
        match self.vps.by_tid.get_mut(&tid).and_then(|v| v.input.as_mut()) {
            Some(input) if !input.closed() => input.flush(),
            // Its process is gone, or the pipe closed (which took it out
            // of the poll set).
            _ => {
                self.inputs.remove(&t);
            }
        }
    }

    /// A process of a VP that has since come back to this host ended (or
    /// closed a pipe): it went on elsewhere, so its end is nobody's exit.
    pub(super) fn old_process_done(&mut self, pid: i32, exit: Option<ExitInfo>) {
        let Some(old) = self.leaving.get_mut(&pid) else {
            return;
        };
        match exit {
            Some(e) => {
                old.exit = Some(e);
                if let (Some(cell), Some(c)) = (old.cell.take(), &mut self.contain) {
                    c.retire(cell);
                }
            }
            None => old.open_pipes = old.open_pipes.saturating_sub(1),
        }
        if old.exit.is_some() && old.open_pipes == 0 {
            self.leaving.remove(&pid);
        }
    }

    /// Kill every VP left and reap them.
    pub(super) fn stop_all(&mut self) {
        for vp in self.vps.by_tid.values().chain(self.leaving.values()) {
            vp.kill();
        }
        let deadline = Instant::now() + Duration::from_millis(500);
        while !self.vps.by_pid.is_empty() && Instant::now() < deadline {
            let pids: Vec<i32> = self.vps.by_pid.keys().copied().collect();
            for (pid, ..) in host::reap(pids) {
                self.vps.by_pid.remove(&pid);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if let Some(c) = &mut self.contain {
            c.close();
        }
    }
}

impl Daemon {
    /// How VPs run here.
    pub(super) fn treatment(&self) -> host::Treatment {
        host::Treatment {
            nice: self.cfg.vp_nice,
            idle: self.cfg.vp_idle_class,
            huge_pages: self.cfg.vp_huge_pages,
        }
    }

    pub(super) fn start_vp(&mut self, s: StartVp) {
        let tid = s.tid;
        // With the lease lapsed the guardian freezes the cells: a VP
        // started now would be frozen before its exec, with the daemon
        // waiting for it. It starts once the lease runs again.
        if !self.local.lease.may_start() {
            log!("VP t{tid:x} starts once this host's lease runs again");
            return self.local.lease.defer(s);
        }
        let limits = crate::contain::Limits::of(&s);
        let cell = self.local.contain.as_mut().and_then(|c| {
            c.cell(&format!("t{tid:x}"), limits)
                .map_err(|e| warn!("VP t{tid:x} held by its process group only: {e}"))
                .ok()
        });
        let fds = cell.as_ref().map(|c| c.join_fds()).unwrap_or_default();
        let twins = cell.as_ref().map(|c| c.twin_fds()).unwrap_or_default();
        let join = host::Join {
            into: cell.as_ref().and_then(|c| c.into_fd()),
            fds: &fds,
            twins: &twins,
        };
        match host::spawn(
            &s,
            &self.facts.name,
            &self.net.listeners.socket_path.display().to_string(),
            &self.treatment(),
            join,
        ) {
            Ok(started) => self.take_in_vp(s, started, cell, None),
            Err(e) if s.env.iter().any(|(k, _)| k == libmig::vp::env::RESTORE) => {
                // Its image came here (a move, a restart): its program not
                // starting here is this host's lack, not the VP's end. The
                // master recalls it to where its image is kept.
                if let (Some(cell), Some(c)) = (cell, &mut self.local.contain) {
                    c.retire(cell);
                }
                warn!(
                    "cannot start {} for VP t{tid:x} from its image: {e}",
                    s.program
                );
                let restore = self.state.restore(tid);
                crate::discard::remove_later(&restore);
                self.report(ToMaster::Missing {
                    tid,
                    reason: format!("starting {}: {e}", s.program),
                });
            }
            Err(e) => {
                warn!("cannot start {} for VP t{tid:x}: {e}", s.program);
                let status = ExitInfo {
                    code: None,
                    signal: None,
                    error: Some(format!("{}: {e}", s.program)),
                    cpu_ms: None,
                };
                self.report(ToMaster::Exited { tid, status });
            }
        }
    }

    /// Take in VP `s.tid`'s process, `started` here (or `restored` from
    /// outside, stopped): its socket, pipes and input, its cell, its
    /// record; stopped if it may not run now; the master told.
    pub(super) fn take_in_vp(
        &mut self,
        s: StartVp,
        started: host::Started,
        cell: Option<crate::contain::Cell>,
        mut restored: Option<crate::transparent::Restored>,
    ) {
        let tid = s.tid;
        let host::Started {
            pid,
            stdout,
            stderr,
            sock,
            stdin,
        } = started;
        let carried = restored.as_mut().and_then(|r| {
            let i = r.sockets.iter().position(|s| s.fd == host::VP_FD)?;
            Some(r.sockets.swap_remove(i))
        });
        // (Its record first: what is delivered to it from now on counts.)
        self.local.record_vp(s, pid, stdin, cell, restored);
        self.connect_vp(tid, sock, carried);
        self.moves.ended(tid);
        self.hold_if_it_may_not_run(tid, pid);
        self.watch_output(tid, pid, stdout, stderr);
        self.watch_input(tid);
        // (`mig ps` shows a rebuilt VP's program, not the init above it.)
        let shown = self
            .local
            .vps
            .by_tid
            .get(&tid)
            .and_then(|v| v.restored.as_ref())
            .map_or(pid, crate::transparent::Restored::program);
        self.report(ToMaster::Started {
            tid,
            pid: shown as u32,
        });
        // Rebuilt from outside waiting for the master: what it waits for.
        let calls: Vec<u64> = self
            .local
            .vps
            .by_tid
            .get(&tid)
            .filter(|v| v.restored.is_some())
            .map(|v| v.ledger.calls.iter().copied().collect())
            .unwrap_or_default();
        if !calls.is_empty() {
            self.report(ToMaster::Waits { tid, calls });
        }
    }

    /// VP `tid`'s socket into the poll: what was held for it is delivered
    /// and those it held up go on. A VP rebuilt from outside `carried`
    /// what was on its way through its old socket: what it had not read
    /// comes first, and what it had begun to write is taken as read first.
    fn connect_vp(&mut self, tid: Tid, sock: OwnedFd, carried: Option<SocketState>) {
        let std_sock = std::os::unix::net::UnixStream::from(sock);
        let mut vp_sock = Sock::Unix(mio::net::UnixStream::from_std(std_sock));
        let vt = self.net.token();
        if self
            .net
            .poll
            .registry()
            .register(&mut vp_sock, vt, Interest::READABLE)
            .is_ok()
        {
            let mut c = Conn::new(vp_sock, Kind::Vp { tid });
            let mut unread = Vec::new();
            let mut passed = Vec::new();
            if let Some(s) = carried {
                c.dec.feed(&s.unfinished);
                let ledger = crate::ledger::Ledger::decode(&s.notes)
                    .map_err(|e| warn!("VP t{tid:x}: {e}"))
                    .unwrap_or_default();
                c.heard_from = ledger.spoke;
                if let Some(v) = self.local.vps.by_tid.get_mut(&tid) {
                    v.movable = ledger.movable;
                    v.ledger = ledger;
                }
                unread = s.unread;
                passed = s.passed;
            }
            self.net.conns.insert(vt, c);
            self.local.vp_conns.insert(tid, vt);
            // The large messages that were on their way to it, made anew,
            // each passed with a byte of what it had not read (in order:
            // it takes them in order, a frame's before the frame's end).
            // One that cannot be made again would leave its frame without
            // it (and the next frames with the wrong ones): the VP ends
            // instead, as lost, rather than reading a wrong message.
            let made = passed
                .iter()
                .map(mig_ckpt::memfd::make)
                .collect::<std::io::Result<Vec<_>>>()
                .and_then(|fds| match fds.len() <= unread.len() {
                    true => Ok(fds),
                    false => Err(std::io::Error::other("more descriptors than bytes")),
                });
            let fds = made.unwrap_or_else(|e| {
                warn!(
                    "VP t{tid:x}: the large messages on their way to it could not be made \
                     again ({e}): it ends"
                );
                if let Some(v) = self.local.vps.by_tid.get(&tid) {
                    v.signal(nix::sys::signal::Signal::SIGKILL);
                }
                Vec::new()
            });
            let mut at = 0;
            for fd in fds {
                self.send_bytes_with_fd(vt, vec![unread[at]], fd);
                at += 1;
            }
            if unread.len() > at {
                self.send_bytes(vt, &unread[at..]);
            }
            for (env, payload) in self.router.attach(tid, vt) {
                self.route(env, payload, None);
            }
            self.released(tid);
        }
    }

    /// VP `tid` (process `pid`) runs now only if the owner offers this host
    /// and its slot is in force: one rebuilt stopped is let go if so; one
    /// started as the owner came back waits on probation, one outside its
    /// slot stopped.
    fn hold_if_it_may_not_run(&mut self, tid: Tid, pid: i32) {
        let off_slot = self.slicing.slicer.started(tid);
        let rebuilt = self
            .local
            .vps
            .by_tid
            .get(&tid)
            .is_some_and(|v| v.restored.is_some());
        if rebuilt {
            // Rebuilt stopped: it runs if it may now; else it waits, as
            // one started now would (it is moved from outside again).
            if self.owner.offered() && !off_slot {
                if let Some(v) = self.local.vps.by_tid.get(&tid) {
                    v.signal(Signal::SIGCONT);
                }
            }
        } else if !self.owner.offered() || off_slot {
            // Started as the owner came back (it waits, stopped, for
            // the scheduler to move it or the owner to leave), or
            // outside its slot (it waits for its turn).
            let owner_back = !self.owner.offered();
            let limit = self.cfg.safe_point_timeout.min(host::PROBATION);
            if let Some(v) = self.local.vps.by_tid.get_mut(&tid) {
                if owner_back && !off_slot {
                    // Until it says whether it can be moved.
                    v.probation = Some(Instant::now() + limit);
                    host::idle_class(&[pid]);
                } else {
                    v.signal(Signal::SIGSTOP);
                }
            }
        }
    }

    /// VP `tid`'s stdout and stderr pipes into the poll.
    fn watch_output(&mut self, tid: Tid, pid: i32, stdout: OwnedFd, stderr: OwnedFd) {
        for (fd, stream) in [(stdout, Stream::Stdout), (stderr, Stream::Stderr)] {
            let t = self.net.token();
            let file = std::fs::File::from(fd);
            if self
                .net
                .poll
                .registry()
                .register(&mut SourceFd(&file.as_raw_fd()), t, Interest::READABLE)
                .is_ok()
            {
                self.local.pipes.insert(
                    t,
                    Pipe {
                        file,
                        tid,
                        pid,
                        stream,
                        partial: Vec::new(),
                    },
                );
                if let Some(vp) = self.local.vps.by_tid.get_mut(&tid) {
                    vp.open_pipes += 1;
                }
            }
        }
    }

    /// VP `tid`'s stdin pipe, if it has one, into the poll (to hear when it
    /// has room).
    fn watch_input(&mut self, tid: Tid) {
        let input_fd = self
            .local
            .vps
            .by_tid
            .get(&tid)
            .and_then(|v| v.input.as_ref())
            .and_then(|i| i.fd());
        if let Some(fd) = input_fd {
            let t = self.net.token();
            if self
                .net
                .poll
                .registry()
                .register(&mut SourceFd(&fd), t, Interest::WRITABLE)
                .is_ok()
            {
                self.local.inputs.insert(t, tid);
            }
        }
    }

    pub(super) fn pipe_ready(&mut self, t: Token) {
        // Its share of what this turn reads of all pipes; none while the
        // master has committed decisions still to carry out (its lines
        // would pile up in memory faster than they go).
        let limit = PIPE_TURN.min(self.local.pipe_budget);
        if self.local.pipes.contains_key(&t) && (limit == 0 || self.releasable()) {
            self.local.pipes_again.insert(t);
            return;
        }
        let Some(p) = self.local.pipes.get_mut(&t) else {
            return;
        };
        let (lines, drained, taken) = host::read_lines(p, limit);
        self.local.pipe_budget -= taken.min(self.local.pipe_budget);
        let (tid, pid, stream) = (p.tid, p.pid, p.stream);
        for line in lines {
            let n = self.lines_sent.number();
            self.report(ToMaster::Output {
                tid,
                stream,
                line,
                n,
            });
        }
        if drained == host::Drained::More {
            self.local.pipes_again.insert(t);
        }
        if drained == host::Drained::Eof {
            if let Some(p) = self.local.pipes.remove(&t) {
                let _ = self
                    .net
                    .poll
                    .registry()
                    .deregister(&mut SourceFd(&p.file.as_raw_fd()));
            }
            match self.local.vps.by_tid.get_mut(&tid).filter(|v| v.pid == pid) {
                Some(vp) => {
                    vp.open_pipes = vp.open_pipes.saturating_sub(1);
                    self.report_if_done(tid);
                }
                None => self.local.old_process_done(pid, None),
            }
        }
    }

    /// The processes of VPs here that ended (not those being saved).
    pub(super) fn reap(&mut self) {
        let pids: Vec<i32> = self
            .local
            .vps
            .by_pid
            .keys()
            .chain(self.local.leaving.keys())
            .copied()
            .filter(|&p| !self.local.checkpointer.busy(p))
            .collect();
        for (pid, raw, cpu_ms) in host::reap(pids) {
            let Some(tid) = self.local.vps.by_pid.remove(&pid) else {
                continue;
            };
            match self.local.vps.by_tid.get_mut(&tid).filter(|v| v.pid == pid) {
                Some(vp) => {
                    let mut exit = vp.exit_from(raw, cpu_ms);
                    if exit.signal == Some(libc::SIGKILL)
                        && vp
                            .cell
                            .as_ref()
                            .is_some_and(crate::contain::Cell::out_of_memory)
                    {
                        let mb = vp.start.as_ref().and_then(|s| s.memory_mb).unwrap_or(0);
                        exit.error = Some(format!(
                            "it used more than the {mb} MB of memory its job asked for \
                             (mig spawn --mem)"
                        ));
                    }
                    vp.exit = Some(exit);
                    // What it started goes with it (and its pipes close).
                    if let (Some(cell), Some(c)) = (vp.cell.take(), &mut self.local.contain) {
                        c.retire(cell);
                    }
                    // What it said before it ended counts first (its image
                    // written: its end is then no exit), even when its
                    // socket had had its share of the turn.
                    if let Some(&t) = self.local.vp_conns.get(&tid) {
                        self.read_out(t);
                    }
                    self.report_if_done(tid);
                }
                None => {
                    let status = self
                        .local
                        .leaving
                        .get(&pid)
                        .map(|o| o.exit_from(raw, cpu_ms));
                    self.local.old_process_done(
                        pid,
                        Some(status.unwrap_or_else(|| host::exit_info(raw, cpu_ms))),
                    )
                }
            }
        }
    }

    /// Report an exit once the process is reaped and its output drained.
    pub(super) fn report_if_done(&mut self, tid: Tid) {
        let done = self
            .local
            .vps
            .by_tid
            .get(&tid)
            .is_some_and(|v| v.exit.is_some() && v.open_pipes == 0);
        if done {
            if let Some(vp) = self.local.vps.by_tid.remove(&tid) {
                self.slicing.slicer.gone(tid);
                match (self.moves.ended(tid), vp.exit) {
                    // It went on elsewhere, or goes on here from its image.
                    (Some(Move::Left), _) => {}
                    (Some(Move::RestartHere { start, path }), _) => {
                        self.start_restored(start, &path, false)
                    }
                    (moving, Some(status)) => {
                        if moving.is_some_and(|m| m.under_way()) {
                            self.report(ToMaster::MigrateFailed {
                                tid,
                                reason: format!("it ended before its image was written ({status})"),
                            });
                        }
                        self.local.recent_exits.retain(|(t, _)| *t != tid);
                        if self.local.recent_exits.len() >= RECENT_EXITS {
                            self.local.recent_exits.pop_front();
                        }
                        self.local.recent_exits.push_back((tid, status.clone()));
                        self.report(ToMaster::Exited { tid, status });
                    }
                    (_, None) => {}
                }
            }
        }
    }
}

/// How many of its VPs' latest exits a host says again to a master it
/// attaches to.
pub(super) const RECENT_EXITS: usize = 256;

/// The pause notice a VP's environment asks for (`MIG_PAUSE_SIGNAL`, set
/// by `mig spawn --pause-signal`), if a valid one.
fn pause_signal_of(env: &[(String, String)]) -> Option<i32> {
    let (_, v) = env
        .iter()
        .find(|(k, _)| k == libmig::vp::env::PAUSE_SIGNAL)?;
    let sig = v.parse().ok().filter(|&s| libmig::msg::pause_signal_ok(s));
    if sig.is_none() {
        warn!(
            "ignoring {}={v:?}: not a signal a pause notice may be",
            libmig::vp::env::PAUSE_SIGNAL
        );
    }
    sig
}
