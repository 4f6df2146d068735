//! Moves of VPs whose programs do not move themselves, as the loop carries
//! them out: the VP stopped and handed to the checkpointer thread
//! (`transparent`), its image then sent or parked as a VP's own image is
//! (`move_out`), and on the target its processes rebuilt from the image
//! and adopted as a VP started here is (`local`).
//!
//! Such a VP never said it can move itself (`VpMsg::Movable`): a program
//! without libmig, which never speaks to its daemon, or one that speaks
//! without keeping its state through libmig (a PVM program on libpvm3, a
//! libmig program that uses `Vm::init` only). An aware VP keeps its
//! safe-point path (`move_out`), and comes here only when it misses its
//! safe point (`call_off_slow_moves`). Its host says it can be moved 2 s
//! after it starts (`announce_outside_vps`).
//!
//! What keeps its messages whole. Outside its memory (restored exactly,
//! libmig's buffers and per-pair sequence numbers with it), a VP's
//! conversation with its daemon is only what is on its way through its
//! socket (`MIG_FD`), so a move carries that:
//!
//! 1. `move_from_outside`: messages for it are held by the router from now
//!    on (every host holds them once the master has said it is moving;
//!    they follow it when the master says where it runs, as for a VP that
//!    moves itself); what is queued for it on its socket stays queued
//!    (`Conn::hold_output`); it is sent SIGSTOP, and the checkpointer
//!    waits until every process of it has stopped (`Task::Stop`).
//! 2. `stopped_from_outside`: everything it wrote is read and handled as
//!    usual (`drain_stopped`: its messages go on from here, before it
//!    moves); what is left in the decoder is the start of a frame whose
//!    write the stop cut short. Then `in_the_way` says whether an answer
//!    this daemon would give it is still due: it stays (the reason goes
//!    to the master, shown by `mig ps`/`mig show`) if it waits for its
//!    daemon to confirm a receiver. The calls to the master it waits for
//!    go with it (`Ledger::calls`); an answer that comes here from then
//!    on goes back to the master (`LocalVp::carried`,
//!    `routing.rs::vp_return`), which keeps it until the VP runs again and
//!    sends it there (`master::calls::settle_returns`). Rebuilt, it says
//!    which calls it still waits for (`ToMaster::Waits`): the answers the
//!    master sent while it moved go to it again, for an old host that died
//!    with one; its daemon gives each once (`Ledger::calls`).
//! 3. The checkpointer saves it (`Task::Dump` with a `SocketState`): the
//!    image keeps the bytes its socket holds for it (looked at through a
//!    duplicate of its descriptor, not taken), then those queued here,
//!    then the start of the frame it was writing, and its daemon's record
//!    of what it said and was given (`ledger`). A failed save leaves it
//!    as it was: its output is let go (`stay_put`) and it runs on. For a
//!    move to another host with a data link up, the image's whole parts
//!    go on as the checkpointer writes them (`saved_so_far`), as a VP's
//!    own image does; a save that fails or a move called off meanwhile
//!    drops what went at the target (`cancel_outbound`).
//! 4. The target (`restored_from_outside` → `local::connect_vp`) gives it
//!    a new socket on the same number, writes the bytes it had not read
//!    into it first, ahead of anything held for it, and feeds the start
//!    of the unfinished frame to the new connection's decoder, so the
//!    rest, which the restored VP writes next, completes it.
//!
//! Shared memory. A direct link to a VP of the same host is cut by a move
//! (`Task::Dump::links`): the checkpointer marks both rings closed in the
//! memory the peer shares (atomically: libmig's `CLOSED` flag, as the
//! receiver's own close), so the peer's next push fails and goes by the
//! daemons, and shuts the link's socket for reading, so its next write
//! fails likewise; what the rings and the socket held goes with the image,
//! and libmig takes it in before it drops the link. The memfds (rings,
//! pooled buffers of messages of 128 KiB or more, such a message on its
//! way through a socket or queued here) are carried with their bytes and
//! made anew on the target. A job checkpoint cuts its links in the image
//! only. Large messages of it that this daemon still holds are credited in
//! its image (`LocalVp::uncredited`): their credit from here would not
//! find it, and is not given again should it come back (`Flow::prepay`).
//!
//! Refused for now, with the reason, the VP staying where it is: a
//! descriptor on its way from it (a large message whose frame it had not
//! finished writing), and what the checkpointer refuses. Not carried: a
//! notice its old daemon would give it after its image was taken (that a
//! message it sent could not be delivered), as for a VP that moves
//! itself.
//!
//! A job checkpoint takes such a VP the same way (`snap_from_outside`):
//! stopped, its output held and what it wrote handled, it says what it
//! sent as its daemon counted it (`ledger`: the last number to each peer),
//! and once everything the master expects has been handed to it (queued on
//! its socket) it is saved with what is on its way through its socket and
//! its record; it runs on when told. The record goes with it when it
//! moves (`SocketState::notes`), so it is whole wherever it is. A VP
//! rebuilt when its job goes back to a checkpoint has its old incarnation
//! in its memory: its daemon stamps its messages with the one it started
//! it in (`vp::sent_by`).

use std::time::{Duration, Instant};

use libmig::msg::{SnapOrder, SnapReport, StartVp, Tid, ToMaster, VpMsg};
use mig_ckpt::SocketState;
use nix::sys::signal::Signal;

use super::local::Local;
use super::Daemon;
use crate::migrate::{Dest, Move};
use crate::transparent::{Done, Restored, Task};
use crate::{debug, host, log, warn};

impl Local {
    /// The checkpointer's work to save local VP `tid` to `to` (for job
    /// checkpoint `snap`, or a move): its processes and the input its
    /// daemon holds for it. `None`: it is not here.
    fn dump_task(&self, tid: Tid, to: std::path::PathBuf, snap: Option<u64>) -> Option<Task> {
        let v = self.vps.by_tid.get(&tid)?;
        Some(Task::Dump {
            tid,
            pid: v.pid,
            to,
            snap,
            all: v.pids(),
            input: v.held_input(),
            socket: None,
            links: v.direct.values().flatten().copied().collect(),
        })
    }
}

impl Daemon {
    /// Has VP `tid` never said a word to its daemon (here, or on the host
    /// it was moved from)? Then a job checkpoint of it from outside has no
    /// message it sent to account for.
    pub(super) fn silent(&self, tid: Tid) -> bool {
        self.local
            .vp_conns
            .get(&tid)
            .and_then(|t| self.net.conns.get(t))
            .is_none_or(|c| !c.heard_from)
    }

    /// Why VP `tid` cannot be moved from outside, whatever the moment
    /// (`None`: it can be, once nothing it waits for is in the way: see
    /// `in_the_way`).
    pub(super) fn cannot_move_from_outside(&self, tid: Tid) -> Option<String> {
        let Some(v) = self.local.vps.by_tid.get(&tid) else {
            return Some(format!("it is not on {}", self.facts.name));
        };
        v.exit.is_some().then(|| "it has ended".into())
    }

    /// May VP `tid` be moved from outside (see `cannot_move_from_outside`)?
    pub(super) fn movable_from_outside(&self, tid: Tid) -> bool {
        self.cannot_move_from_outside(tid).is_none()
    }

    /// Move local VP `tid` to `to` (this host: park it) from outside: its
    /// messages are held, its socket's output too, and it is stopped; once
    /// the checkpointer says it is (`stopped_from_outside`) it is saved off
    /// the loop, and `saved_from_outside` goes on.
    pub(super) fn move_from_outside(&mut self, to: String, start: StartVp) {
        let tid = start.tid;
        let Some(pid) = self.local.vps.by_tid.get(&tid).map(|v| v.pid) else {
            return;
        };
        let dest = if to == self.facts.name {
            log!(
                "saving VP t{tid:x} from outside to disk (parking it while the owner has the host)"
            );
            Dest::Disk
        } else {
            debug!("saving VP t{tid:x} from outside for {to}");
            Dest::Host(to)
        };
        self.moves.ask_outside(tid, dest, start, Instant::now());
        self.router.detach(tid);
        if let Some(v) = self.local.vps.by_tid.get(&tid) {
            v.signal(Signal::SIGSTOP);
        }
        // What is queued for it (and anything said to it from now on)
        // waits: what it has not read goes into its image.
        if let Some(c) = self
            .local
            .vp_conns
            .get(&tid)
            .and_then(|t| self.net.conns.get_mut(t))
        {
            c.hold_output();
        }
        self.local.checkpointer.submit(Task::Stop {
            tid,
            pid,
            snap: None,
        });
    }

    /// Every process of VP `tid` (process `pid`), being moved from outside,
    /// is stopped (or did not stop): what it wrote to its socket is read
    /// and handled as usual, then, unless something it waits for is in the
    /// way, it is saved with what is on its way through its socket.
    fn stopped_from_outside(&mut self, tid: Tid, pid: i32, result: Result<(), String>) {
        let still = self
            .local
            .vps
            .by_tid
            .get(&tid)
            .is_some_and(|v| v.pid == pid && v.exit.is_none());
        if !still || !self.moves.saving_outside(tid) {
            // Ended, or its move was called off meanwhile (which let its
            // output go again): stopped for nothing, it runs on if it may.
            if still && !matches!(self.moves.get(tid), Some(Move::Left)) {
                self.run_if_it_may(tid);
            }
            return;
        }
        let socket = result.and_then(|()| self.conversation(tid));
        if self.reached_its_safe_point(tid) {
            return;
        }
        let task = self.local.dump_task(tid, self.state.move_image(tid), None);
        let linked = self.local.vps.by_tid.get(&tid).map(|v| {
            v.direct
                .keys()
                .map(|p| format!("t{p:x}"))
                .collect::<Vec<_>>()
                .join(", ")
        });
        if let (Ok(_), Some(peers)) = (&socket, linked.filter(|l| !l.is_empty())) {
            log!(
                "VP t{tid:x}: its direct links (to {peers}), where still open, are cut for its \
                 move: their messages go through the daemons"
            );
        }
        match (socket, task) {
            (Ok(socket), Some(mut task)) => {
                if let Some(s) = &socket {
                    debug!(
                        "VP t{tid:x} stopped: {} bytes queued here for it (beside those its \
                         socket holds) and {} of a frame it was writing go with it",
                        s.unread.len(),
                        s.unfinished.len()
                    );
                }
                if let Task::Dump { socket: s, .. } = &mut task {
                    *s = socket;
                }
                // What it waits for from the master goes with it: the
                // answers that come here now go back to the master, which
                // keeps them until it runs.
                if let Some(v) = self.local.vps.by_tid.get_mut(&tid) {
                    // (Its image credits it for its shared buffers held
                    // here: not again when they are taken in.)
                    let credit = std::mem::take(&mut v.uncredited);
                    v.carried = Some(credit);
                    self.flow.prepay(tid, credit);
                    if !v.ledger.calls.is_empty() {
                        let calls: Vec<String> =
                            v.ledger.calls.iter().map(u64::to_string).collect();
                        log!(
                            "VP t{tid:x} waits for the master's answer to its call {}: the \
                             answer follows it",
                            calls.join(", ")
                        );
                    }
                }
                self.local.checkpointer.submit(task);
            }
            (Err(why), _) => {
                self.image_not_written(tid, &format!("saved from outside: {why}"), false);
                self.run_if_it_may(tid);
            }
            (Ok(_), None) => {}
        }
    }

    /// VP `tid`, saved from outside instead of at the safe
    /// point it missed, may have reached that safe point just before it
    /// was stopped. Then its own image goes as it was asked to: it went
    /// already (what it wrote was just read), or it has begun to write it
    /// (its file is there) and the move waits for it again; either way it
    /// runs on, to end or to finish the image. True if so.
    fn reached_its_safe_point(&mut self, tid: Tid) -> bool {
        if self.moves.missed(tid) == 0 {
            return false;
        }
        let resume = |d: &Daemon| {
            if let Some(v) = d.local.vps.by_tid.get(&tid) {
                v.signal(Signal::SIGCONT);
            }
        };
        match self.moves.get(tid) {
            Some(Move::Left) => {
                resume(self);
                return true;
            }
            Some(Move::Asked { outside: true, .. }) => {}
            // Called off meanwhile (it could not write its image): as any
            // VP whose move was called off.
            _ => {
                self.run_if_it_may(tid);
                return true;
            }
        }
        let own = self.state.move_image(tid);
        // (Its file is named by its pid as it sees it, which in a pid
        // namespace is not `pid`.)
        let begun = own.exists()
            || std::fs::read_dir(self.state.root())
                .into_iter()
                .flatten()
                .flatten()
                .any(|e| libmig::checkpoint::is_temp_of(&e.path(), &own));
        if !begun {
            return false;
        }
        log!("VP t{tid:x} reached its safe point as it was stopped: its own image goes");
        self.moves.back_to_safe_point(tid, Instant::now());
        if let Some(&t) = self.local.vp_conns.get(&tid) {
            self.release_output(t);
            // Asked again, behind the withdrawal it may not have read yet.
            self.send_vp(
                t,
                &VpMsg::WriteImage {
                    path: own.display().to_string(),
                },
            );
        }
        resume(self);
        true
    }

    /// The conversation of stopped VP `tid` with its daemon, to carry in
    /// its image: first everything it wrote is read and handled (its
    /// messages go on from here, before it moves); then, unless something
    /// it waits for is in the way (`in_the_way`), what `socket_state` says.
    fn conversation(&mut self, tid: Tid) -> Result<Option<SocketState>, String> {
        if let Some(&t) = self.local.vp_conns.get(&tid) {
            self.drain_stopped(t);
        }
        if let Some(why) = self.in_the_way(tid, self.moves.missed(tid) > 0) {
            return Err(format!("it cannot be moved from outside now: {why}"));
        }
        self.socket_state(tid)
            .map_err(|why| format!("it cannot be moved from outside now: {why}"))
    }

    /// What is on its way through the socket of stopped VP `tid`, its
    /// words read: what is queued for it here (the image keeps what the
    /// socket holds before that), the start of a frame it had not finished
    /// writing, and its record of messages (whether it ever spoke, what it
    /// sent and was given). `None`: it has no socket (nothing to carry).
    fn socket_state(&self, tid: Tid) -> Result<Option<SocketState>, String> {
        let Some(c) = self
            .local
            .vp_conns
            .get(&tid)
            .and_then(|t| self.net.conns.get(t))
        else {
            return Ok(None);
        };
        if !c.fds.is_empty() {
            return Err(
                "it passed a descriptor (a large message) its daemon has not taken yet".into(),
            );
        }
        let (mut unread, fds) = c.unwritten().map_err(|e| e.to_string())?;
        // Its large messages still held here are credited in its image,
        // after what it has not read (whole frames): restored elsewhere,
        // their credit from here would never find it.
        let owed = self.local.vps.by_tid.get(&tid).map_or(0, |v| v.uncredited);
        if owed > 0 {
            let credit =
                libmig::frame::encode(&VpMsg::Credit { bytes: owed }).map_err(|e| e.to_string())?;
            unread.extend_from_slice(&credit);
        }
        // Large messages queued for it here go with it, made anew.
        let passed = fds
            .into_iter()
            .map(mig_ckpt::memfd::read)
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|e| format!("a descriptor queued for it here cannot be carried: {e}"))?;
        let (mut ledger, movable) = self
            .local
            .vps
            .by_tid
            .get(&tid)
            .map(|v| (v.ledger.clone(), v.movable))
            .unwrap_or_default();
        ledger.spoke = c.heard_from;
        ledger.movable = movable;
        Ok(Some(SocketState {
            fd: host::VP_FD,
            unread,
            unfinished: c.dec.pending_bytes(),
            notes: ledger.encode(),
            passed,
        }))
    }

    /// What VP `tid`, stopped and its words read, waits for that a move
    /// from outside would lose: the confirmation of a receiver its daemon
    /// would give on this host. A VP that said meanwhile it can be moved moves
    /// itself, at its safe point, unless it is moved from outside
    /// `instead`, having missed one.
    fn in_the_way(&self, tid: Tid, instead: bool) -> Option<String> {
        if let Some(why) = self.cannot_move_from_outside(tid) {
            return Some(why);
        }
        let v = self.local.vps.by_tid.get(&tid)?;
        if v.movable && !instead {
            return Some("it says it can be moved: it moves itself, at its safe point".into());
        }
        self.router
            .confirm_awaited_by(tid)
            .map(|to| format!("it waits for its daemon to confirm that VP t{to:x} exists"))
    }

    /// The checkpointer thread has results.
    pub(super) fn checkpointer_done(&mut self) {
        for done in self.local.checkpointer.results() {
            match done {
                Done::Progress { tid, pid, upto } => self.saved_so_far(tid, pid, upto),
                Done::Stopped {
                    tid,
                    pid,
                    snap: None,
                    result,
                } => self.stopped_from_outside(tid, pid, result),
                Done::Stopped {
                    tid,
                    pid,
                    snap: Some(id),
                    result,
                } => self.paused_from_outside(tid, pid, id, result),
                Done::Dumped {
                    tid,
                    pid,
                    snap: Some(id),
                    result,
                    took,
                } => self.snapped_from_outside(tid, pid, id, result, took),
                Done::Dumped {
                    tid,
                    pid,
                    snap: None,
                    result,
                    took,
                } => self.saved_from_outside(tid, pid, result, took),
                Done::Restored { tid, result, took } => {
                    self.restored_from_outside(tid, result, took)
                }
            }
        }
        // A process that ended while it was being saved was not reaped
        // then (its wait was the saver's): it is now.
        self.reap();
    }

    /// VP `tid` (process `pid`), being saved from outside, is written up
    /// to `upto`: for a move to another host, the whole parts of its image
    /// not sent yet go now, while the rest is written (`stream_written`).
    fn saved_so_far(&mut self, tid: Tid, pid: i32, upto: u64) {
        let still = self
            .local
            .vps
            .by_tid
            .get(&tid)
            .is_some_and(|v| v.pid == pid);
        if still && self.moves.saving_outside(tid) {
            let path = crate::transparent::dumping_path(&self.state.move_image(tid));
            self.stream_written(tid, &path, upto);
        }
    }

    fn saved_from_outside(
        &mut self,
        tid: Tid,
        pid: i32,
        result: Result<mig_ckpt::DumpStats, String>,
        took: Duration,
    ) {
        let path = self.state.move_image(tid);
        let still = self
            .local
            .vps
            .by_tid
            .get(&tid)
            .is_some_and(|v| v.pid == pid);
        let asked = !matches!(self.moves.written(tid), crate::migrate::Written::Unasked);
        match result {
            Ok(s) if still && asked => {
                debug!(
                    "VP t{tid:x} saved from outside in {} ms: {} bytes, {} process(es), {} thread(s)",
                    took.as_millis(),
                    s.bytes,
                    s.processes,
                    s.threads
                );
                self.image_written(tid, &path.display().to_string());
            }
            Ok(_) => {
                // Called off meanwhile (or ended): the image is no use,
                // nor what went of it.
                if !asked {
                    self.cancel_outbound(tid);
                }
                crate::discard::remove_later(&path);
            }
            Err(why) if asked => {
                let no_space = why.contains("No space left");
                self.image_not_written(tid, &format!("saved from outside: {why}"), no_space);
                // Stopped to be saved: it runs on if it may.
                self.run_if_it_may(tid);
            }
            Err(why) => {
                self.cancel_outbound(tid);
                debug!(
                    "VP t{tid:x}: saving it from outside failed after its move was called off: \
                     {why}"
                )
            }
        }
    }

    /// VP `start.tid` arrived here as an image saved from outside (at
    /// `path`, its checksums `summed` on the way or not): its processes
    /// are rebuilt off the loop, stopped, and adopted when they are.
    pub(super) fn restore_from_outside(
        &mut self,
        start: StartVp,
        path: &std::path::Path,
        summed: bool,
    ) {
        let tid = start.tid;
        if !self.local.lease.may_start() {
            log!("VP t{tid:x} starts once this host's lease runs again");
            return self.local.lease.defer(start);
        }
        let limits = crate::contain::Limits::of(&start);
        let cell = self.local.contain.as_mut().and_then(|c| {
            c.cell(&format!("t{tid:x}"), limits)
                .map_err(|e| warn!("VP t{tid:x} held by its process group only: {e}"))
                .ok()
        });
        let owned = |fds: &[std::os::fd::RawFd]| -> Vec<std::os::fd::OwnedFd> {
            fds.iter()
                .filter_map(|&fd| {
                    // SAFETY: the cell's descriptors are open while it
                    // lives, and it lives until the restore is done (kept
                    // below).
                    let b = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
                    b.try_clone_to_owned().ok()
                })
                .collect()
        };
        let fds = cell.as_ref().map(|c| {
            let (all, twins, into) = (c.join_fds(), c.twin_fds(), c.into_fd());
            let into = into.and_then(|d| owned(&[d]).pop());
            match into {
                // Born in its cell: only the twins of its limits are
                // written (and its cell's own file where it cannot be).
                Some(_) => crate::transparent::CellFds {
                    into,
                    instead: owned(&all[..all.len() - twins.len()]),
                    join: owned(&twins),
                },
                None => crate::transparent::CellFds {
                    join: owned(&all),
                    ..Default::default()
                },
            }
        });
        let given = match host::Given::make(start.stdin) {
            Ok(g) => g,
            Err(e) => {
                return self.not_restored(tid, format!("making its descriptors: {e}"));
            }
        };
        // (A restore asked while an earlier one of the same VP is still
        // being rebuilt supersedes it: the checkpointer answers in order,
        // each result is paired with its own request, and only the last
        // is adopted.)
        self.local.restoring.entry(tid).or_default().push_back((
            start,
            given.ours,
            cell,
            path.to_path_buf(),
        ));
        self.local.checkpointer.submit(Task::Restore {
            tid,
            image: path.to_path_buf(),
            verify: !summed,
            fds: host::Given::by_number(given.theirs),
            cell: fds.unwrap_or_default(),
            stopped: true,
        });
    }

    fn restored_from_outside(
        &mut self,
        tid: Tid,
        result: Result<Restored, String>,
        took: Duration,
    ) {
        let Some(queue) = self.local.restoring.get_mut(&tid) else {
            return;
        };
        let Some((start, ours, cell, image)) = queue.pop_front() else {
            return;
        };
        let superseded = !queue.is_empty();
        if queue.is_empty() {
            self.local.restoring.remove(&tid);
        }
        if superseded {
            // A later restore of it is under way: this one goes, its
            // processes and its cell with it (its file is the later's now).
            debug!("VP t{tid:x}: an earlier restore, superseded, is ended");
            drop(ours);
            if let Ok(r) = &result {
                host::kill(r.pid);
            }
            if let (Some(cell), Some(c)) = (cell, &mut self.local.contain) {
                c.retire(cell);
            }
            if let Ok(r) = result {
                // Reaped as any process that left (see `reap`).
                let pid = r.pid;
                let gone = host::LocalVp::superseded(pid, r);
                self.local.vps.by_pid.insert(pid, tid);
                self.local.leaving.insert(pid, gone);
            }
            return;
        }
        match result {
            Ok(mut r) => {
                debug!(
                    "VP t{tid:x} rebuilt from outside in {} ms (pid {})",
                    took.as_millis(),
                    r.pid
                );
                let inputs = std::mem::take(&mut r.inputs);
                // Its pages are mapped from the image: its name can go now
                // (its disk space goes with the process), and a VP that
                // comes back later does not replace a file still in use.
                if image == self.state.restore(tid) {
                    let _ = std::fs::remove_file(&image);
                }
                let started = host::Started::of(r.pid, ours);
                self.take_in_vp(start, started, cell, Some(r));
                // What it had not read of its stdin comes first.
                for p in inputs.into_iter().filter(|p| p.fd == 0) {
                    self.local.feed_input(tid, &p.data, p.closed);
                }
            }
            Err(why) => {
                if let (Some(cell), Some(c)) = (cell, &mut self.local.contain) {
                    c.retire(cell);
                }
                self.not_restored(tid, format!("rebuilding it from its image: {why}"));
            }
        }
    }

    /// VP `tid` could not be rebuilt here: the master hears it as an
    /// image that did not arrive (it recalls the VP to where it came from,
    /// which kept its image).
    fn not_restored(&mut self, tid: Tid, reason: String) {
        warn!("cannot take in VP t{tid:x}: {reason}");
        crate::discard::remove_later(&self.state.restore(tid));
        self.report(ToMaster::Missing { tid, reason });
    }

    /// VPs that have run a while without saying they can move themselves
    /// (a program without libmig, a PVM program on libpvm3, a libmig
    /// program that does not keep its state through it) are moved from
    /// outside: the master hears they can be moved, unless something
    /// stands in the way for good (`cannot_move_from_outside`).
    pub(super) fn announce_outside_vps(&mut self) {
        let now = Instant::now();
        let due: Vec<Tid> = self
            .local
            .vps
            .by_tid
            .iter()
            .filter(|(_, v)| !v.movable && !v.outside && v.exit.is_none())
            .filter(|(_, v)| now.duration_since(v.started) >= host::YOUNG)
            .map(|(&tid, _)| tid)
            .filter(|&tid| self.movable_from_outside(tid))
            .collect();
        for tid in due {
            if let Some(v) = self.local.vps.by_tid.get_mut(&tid) {
                v.outside = true;
            }
            if self.silent(tid) {
                debug!("VP t{tid:x} never spoke to its daemon: it can be moved from outside");
            } else {
                debug!("VP t{tid:x} did not say it can move itself: it can be moved from outside");
            }
            // Stopped at the end of its probation, not run in the idle
            // class: it is moved as it is.
            self.end_probation(|t| t == tid);
            self.report(ToMaster::Movable { tid });
        }
    }

    /// A job checkpoint's step for local VP `tid`, saved from outside:
    /// `Begin` stops it and holds its socket's output; once it has stopped
    /// and what it wrote is handled (`paused_from_outside`) it says what
    /// it sent, as its daemon counted it (`ledger`); `Now` says what must
    /// have been handed to it, and once it has (`snap_when_given`) it is
    /// saved with what is on its way through its socket; it runs on when
    /// told.
    pub(super) fn snap_from_outside(&mut self, tid: Tid, step: SnapOrder) {
        match step {
            SnapOrder::Begin { id } => {
                if let Some(why) = self.cannot_move_from_outside(tid) {
                    return self.snap_failed(
                        tid,
                        id,
                        format!("it cannot be saved from outside: {why}"),
                        false,
                    );
                }
                let Some(v) = self.local.vps.by_tid.get_mut(&tid) else {
                    return;
                };
                v.signal(Signal::SIGSTOP);
                v.snapping_since = Some(Instant::now());
                v.snap = Some(host::SnapWait { id, expect: None });
                let pid = v.pid;
                if let Some(c) = self
                    .local
                    .vp_conns
                    .get(&tid)
                    .and_then(|t| self.net.conns.get_mut(t))
                {
                    c.hold_output();
                }
                self.local.checkpointer.submit(Task::Stop {
                    tid,
                    pid,
                    snap: Some(id),
                });
            }
            SnapOrder::Now { id, expect } => {
                if let Some(s) = self
                    .local
                    .vps
                    .by_tid
                    .get_mut(&tid)
                    .and_then(|v| v.snap.as_mut())
                    .filter(|s| s.id == id)
                {
                    s.expect = Some(expect);
                }
                self.snap_when_given(tid);
            }
            SnapOrder::Resume { .. } | SnapOrder::Abort { .. } => {
                if let Some(v) = self.local.vps.by_tid.get_mut(&tid) {
                    v.snapping_since = None;
                    v.snap = None;
                }
                if let Some(&t) = self.local.vp_conns.get(&tid) {
                    self.release_output(t);
                }
                self.run_if_it_may(tid);
            }
        }
    }

    /// VP `tid` (process `pid`), paused for job checkpoint `id`, has
    /// stopped (or did not): what it wrote is handled, and it says what it
    /// sent, unless an answer due to it here is in the way.
    fn paused_from_outside(&mut self, tid: Tid, pid: i32, id: u64, result: Result<(), String>) {
        let current = self.local.vps.by_tid.get(&tid).is_some_and(|v| {
            v.pid == pid && v.exit.is_none() && v.snap.as_ref().is_some_and(|s| s.id == id)
        });
        if !current {
            // Given up meanwhile (which let its output go), or ended.
            return self.stopped_for_nothing(tid, pid);
        }
        if let Err(why) = result {
            return self.snap_failed(tid, id, why, false);
        }
        if let Some(&t) = self.local.vp_conns.get(&tid) {
            self.drain_stopped(t);
        }
        // (A call's answer would not be in its image: the job, restarted
        // from it, would wait for it for ever.)
        let unanswered = |d: &Daemon| {
            let v = d.local.vps.by_tid.get(&tid)?;
            let id = v.ledger.calls.first()?;
            Some(format!(
                "it waits for the answer to a call to the master (call {id})"
            ))
        };
        if let Some(why) = self.in_the_way(tid, false).or_else(|| unanswered(self)) {
            return self.snap_failed(
                tid,
                id,
                format!("it cannot be saved from outside now: {why}"),
                false,
            );
        }
        let sent = self
            .local
            .vps
            .by_tid
            .get(&tid)
            .map(|v| v.ledger.sent_to())
            .unwrap_or_default();
        self.report(ToMaster::Snap {
            tid,
            step: SnapReport::Paused { id, sent },
        });
    }

    /// VP `tid`, paused for a job checkpoint: saved once everything the
    /// master expects has been handed to it (what is still on its way
    /// through its socket goes into its image).
    pub(super) fn snap_when_given(&mut self, tid: Tid) {
        let Some(v) = self.local.vps.by_tid.get(&tid) else {
            return;
        };
        let ready = v
            .snap
            .as_ref()
            .and_then(|s| s.expect.as_ref())
            .is_some_and(|e| v.ledger.has(e));
        let Some(id) = v.snap.as_ref().filter(|_| ready).map(|s| s.id) else {
            return;
        };
        if let Some(s) = self
            .local
            .vps
            .by_tid
            .get_mut(&tid)
            .and_then(|v| v.snap.as_mut())
        {
            s.expect = None;
        }
        let socket = match self.socket_state(tid) {
            Ok(s) => s,
            Err(why) => {
                return self.snap_failed(
                    tid,
                    id,
                    format!("it cannot be saved from outside now: {why}"),
                    false,
                )
            }
        };
        if let Some(mut task) = self
            .local
            .dump_task(tid, self.state.snap_image(tid), Some(id))
        {
            if let Task::Dump { socket: s, .. } = &mut task {
                *s = socket;
            }
            self.local.checkpointer.submit(task);
        }
    }

    fn snapped_from_outside(
        &mut self,
        tid: Tid,
        pid: i32,
        id: u64,
        result: Result<mig_ckpt::DumpStats, String>,
        took: Duration,
    ) {
        let current = self.local.vps.by_tid.get(&tid).is_some_and(|v| {
            v.pid == pid && v.exit.is_none() && v.snap.as_ref().is_some_and(|s| s.id == id)
        });
        if !current {
            // Given up while it was saved (its file, of no checkpoint, is
            // written over by the next).
            return self.stopped_for_nothing(tid, pid);
        }
        match result {
            Ok(s) => {
                debug!(
                    "VP t{tid:x} saved from outside for checkpoint {id} in {} ms ({} bytes)",
                    took.as_millis(),
                    s.bytes
                );
                let path = self.state.snap_image(tid);
                self.snap_taken(tid, id, &path.display().to_string());
            }
            Err(why) => {
                let no_space = why.contains("No space left");
                self.snap_failed(tid, id, format!("saved from outside: {why}"), no_space);
            }
        }
    }

    /// VP `tid` (process `pid`) was stopped by the checkpointer for a job
    /// checkpoint given up meanwhile: the continue that came with the
    /// giving up may have come before the checkpointer's stop, so it runs
    /// on now if it may (unless another checkpoint has stopped it since).
    fn stopped_for_nothing(&mut self, tid: Tid, pid: i32) {
        let Some(v) = self
            .local
            .vps
            .by_tid
            .get(&tid)
            .filter(|v| v.pid == pid && v.exit.is_none() && v.snap.is_none())
        else {
            return;
        };
        // Asked meanwhile to reach its safe point for a move (one it is
        // not saved from outside for), it must run to get there.
        let to_its_safe_point = matches!(
            self.moves.get(tid),
            Some(Move::Asked { outside: false, .. } | Move::Streaming { outside: false, .. })
        );
        if to_its_safe_point {
            return v.signal(Signal::SIGCONT);
        }
        self.run_if_it_may(tid);
    }

    /// Continue VP `tid` if it may run now: the owner away, its slot, its
    /// job not suspended.
    pub(super) fn run_if_it_may(&mut self, tid: Tid) {
        if !self.owner.offered() || !self.slicing.slicer.may_run(tid) || self.moves.let_run(tid) {
            return;
        }
        if let Some(v) = self.local.vps.by_tid.get(&tid).filter(|v| v.exit.is_none()) {
            v.signal(Signal::SIGCONT);
        }
    }
}
