//! The owner of this workstation: carrying out what the owner monitor says
//! (stop or resume every VP), and parking VPs on disk while the owner stays.

use std::time::Instant;

use libmig::msg::{ExitInfo, StartVp, Tid, ToMaster};
use nix::sys::signal::Signal;

use super::local::Local;
use super::Daemon;
use crate::migrate::Parked;
use crate::owner::Change;
use crate::{host, log, warn};

impl Local {
    /// When the next VP told of a pause must be stopped, if any is.
    pub(super) fn next_quiesce_due(&self) -> Option<Instant> {
        self.vps
            .by_tid
            .values()
            .filter_map(|v| v.quiescing.map(|q| q.1))
            .min()
    }

    /// Send `sig` to the process group of every live local VP that `which`
    /// picks; how many.
    pub(super) fn signal_vps(
        &self,
        sig: Signal,
        which: impl Fn(Tid, &host::LocalVp) -> bool,
    ) -> usize {
        let mut n = 0;
        for (&tid, v) in &self.vps.by_tid {
            if v.exit.is_none() && which(tid, v) {
                v.signal(sig);
                n += 1;
            }
        }
        n
    }
}

impl Daemon {
    /// Read the owner's activity sources and carry out what the policy
    /// says: stop or resume every VP here at once, tell the master (whose
    /// scheduler then moves them off, or uses this host again). `command`
    /// is the master's id of a `mig owner reclaim|release` being answered.
    pub(super) fn owner_poll(&mut self, command: Option<u64>) {
        let now = Instant::now();
        // (Every 50 ms, so only when the load counts: reading each VP's
        // processes costs a few file reads a VP.)
        let counts = self.owner.counts_load();
        let mut pids: Vec<u32> = self
            .local
            .vps
            .by_tid
            .values()
            .filter(|v| counts && v.exit.is_none())
            .flat_map(|v| {
                let mut pids = v.cell.as_ref().map(|c| c.pids()).unwrap_or_default();
                pids.push(v.pid);
                pids
            })
            .filter_map(|p| u32::try_from(p).ok())
            .collect();
        // The lease guardian is this daemon's too (a child of it, in the
        // owner's tree when the daemon is): its CPU is never the owner's.
        // Its start, on a crowded machine, once read as most of a core.
        pids.extend(self.local.lease.guardian_pid().filter(|_| counts));
        let changes = self.owner.poll(now, &pids);
        self.end_probation(|_| false);
        self.end_quiescing(|_| false);
        let mut done = Vec::new();
        for c in &changes {
            match c {
                Change::StopVps => {
                    // A switch not yet carried out never continues anyone now.
                    self.slicing.disarm_switch();
                    // VPs checkpointing for a move go on to their safe point.
                    // A VP that started a moment ago and has not yet said
                    // whether it can be moved runs on in the idle class
                    // until it says so, for at most safe_point_timeout.
                    // A VP that asked for a pause notice hears of it first
                    // (its grace covers saying that too).
                    let noticed = self.give_pause_notices(now);
                    let by = now + self.cfg.safe_point_timeout.min(host::PROBATION);
                    for v in self.local.vps.by_tid.values_mut() {
                        if v.exit.is_none()
                            && !v.movable
                            && v.quiescing.is_none()
                            && v.started.elapsed() < host::YOUNG
                        {
                            v.probation = Some(by);
                            host::idle_class(&v.pids());
                        }
                    }
                    let n = self.local.signal_vps(Signal::SIGSTOP, |t, v| {
                        !self.moves.let_run(t) && v.probation.is_none() && v.quiescing.is_none()
                    });
                    if noticed > 0 {
                        done.push(format!(
                            "{} told of the pause (stopped within {} ms)",
                            libmig::words::count(noticed as u64, "VP", "VPs"),
                            self.owner.quiesce().as_millis()
                        ));
                    }
                    if let Some(c) = &mut self.local.contain {
                        c.mark(true);
                    }
                    done.push(format!(
                        "{} stopped",
                        libmig::words::count(n as u64, "VP", "VPs")
                    ));
                }
                Change::ResumeVps => {
                    // Those whose slot is not running stay stopped.
                    // Any resumed for a move in the idle class runs as VPs do.
                    let how = self.treatment();
                    for v in self.local.vps.by_tid.values().filter(|v| v.exit.is_none()) {
                        host::vp_class(&v.pids(), &how);
                    }
                    for v in self.local.vps.by_tid.values_mut() {
                        v.probation = None;
                        v.quiescing = None;
                    }
                    let n = self
                        .local
                        .signal_vps(Signal::SIGCONT, |t, _| self.slicing.slicer.may_run(t));
                    self.moves.owner_left();
                    if let Some(c) = &mut self.local.contain {
                        c.mark(false);
                    }
                    done.push(format!(
                        "{} resumed",
                        libmig::words::count(n as u64, "VP", "VPs")
                    ));
                }
                Change::LeavePool => done.push("leaving the pool".into()),
                Change::JoinPool => done.push("joining the pool".into()),
            }
        }
        let report = self.owner_report(now);
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
            self.report(ToMaster::Owner(report));
        }
        if let Some(id) = command {
            self.report(ToMaster::OwnerDone { id, message: said });
        }
        if self.owner.park_due(now) {
            self.park_waiting();
        }
    }

    /// VPs on probation (see `LocalVp::probation`) that `said` picks, or
    /// whose time is up, are stopped and back in their class (unless a
    /// move of them is under way).
    pub(super) fn end_probation(&mut self, said: impl Fn(Tid) -> bool) {
        let now = Instant::now();
        let how = self.treatment();
        for (&tid, v) in self.local.vps.by_tid.iter_mut() {
            let Some(by) = v.probation else { continue };
            if !said(tid) && now < by {
                continue;
            }
            v.probation = None;
            if self.owner.offered() || self.moves.let_run(tid) {
                continue;
            }
            v.signal(Signal::SIGSTOP);
            host::vp_class(&v.pids(), &how);
        }
    }

    /// The owner is back: each VP here in its slot that asked for a pause
    /// notice gets its signal and runs on until it says it is ready or
    /// until `quiesce_ms` (when that is not 0). How many.
    fn give_pause_notices(&mut self, now: Instant) -> usize {
        let grace = self.owner.quiesce();
        if grace.is_zero() {
            return 0;
        }
        let mut n = 0;
        for (&tid, v) in self.local.vps.by_tid.iter_mut() {
            let Some(sig) = v.pause_signal else { continue };
            if v.exit.is_some() || self.moves.let_run(tid) || !self.slicing.slicer.may_run(tid) {
                continue;
            }
            host::signal_number(v.pid, sig);
            v.quiescing = Some((now, now + grace));
            n += 1;
        }
        n
    }

    /// VPs told of a pause that `ready` picks (they said they are ready),
    /// or whose grace is up, are stopped.
    pub(super) fn end_quiescing(&mut self, ready: impl Fn(Tid) -> bool) {
        let now = Instant::now();
        for (&tid, v) in self.local.vps.by_tid.iter_mut() {
            let Some((since, by)) = v.quiescing else {
                continue;
            };
            let said = ready(tid);
            if !said && now < by {
                continue;
            }
            v.quiescing = None;
            if self.owner.offered() || self.moves.let_run(tid) {
                continue;
            }
            v.signal(Signal::SIGSTOP);
            log!(
                "VP t{tid:x} stopped {} ms after its pause notice ({})",
                now.duration_since(since).as_millis(),
                if said {
                    "it said it was ready"
                } else {
                    "at the quiesce_ms deadline"
                }
            );
        }
    }

    /// The owner monitor's report, with the CPU VPs used since the owner
    /// came back.
    pub(super) fn owner_report(&self, now: Instant) -> libmig::msg::OwnerReport {
        let mut r = self.owner.report(now);
        r.vp_cpu_ms = self
            .local
            .contain
            .as_ref()
            .and_then(|c| c.used_since_mark())
            .map(|d| d.as_millis() as u64);
        r
    }

    /// The owner has had the host back for `park_after_s` and VPs still
    /// wait here: checkpoint each to disk and let its process end, so the
    /// owner gets the memory back. The image stays here until the VP is
    /// placed again (`Unpark`, or a move that ships it).
    pub(super) fn park_waiting(&mut self) {
        let waiting: Vec<(Tid, StartVp)> = self
            .local
            .vps
            .by_tid
            .iter()
            // One that cannot be moved cannot be parked either: it stays
            // stopped.
            .filter(|(_, v)| v.exit.is_none() && v.movable)
            .filter_map(|(&t, v)| Some((t, v.start.clone()?)))
            .collect();
        let me = self.facts.name.clone();
        for (tid, start) in waiting {
            if self.moves.try_park(tid, Instant::now()) {
                self.move_out(me.clone(), start);
            }
        }
    }

    /// Start a parked VP again here from its image.
    pub(super) fn unpark(&mut self, tid: Tid) {
        let Some(Parked { start, path }) = self.moves.unpark(tid) else {
            return warn!("asked to start VP t{tid:x} again, but it is not parked here");
        };
        // Renamed, not read and written again (hundreds of MiB on the
        // loop): the VP checks its sum as it restores.
        let restore = self.state.restore(tid);
        match std::fs::rename(&path, &restore) {
            Ok(()) => self.start_restored(start, &restore, false),
            Err(e) => {
                crate::discard::remove_later(&path);
                let status = ExitInfo {
                    code: None,
                    signal: None,
                    error: Some(format!("its parked image {}: {e}", path.display())),
                    cpu_ms: None,
                };
                self.report(ToMaster::Exited { tid, status });
            }
        }
    }
}
