//! A worker's lease on its VPs: an ask with every heartbeat, the guardian's
//! deadline moved on with every grant (it freezes the VPs when the daemon
//! stops renewing, whatever stopped it), and every VP ended when the
//! master says this host was declared dead.
//!
//! What does not live here: the guardian process (`crate::guardian`), the
//! master's side (it grants while it holds the host alive).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use libmig::msg::{Handshake, StartVp, Tid, ToMaster};

use super::local::Local;
use super::Daemon;
use crate::guardian::Guardian;
use crate::{log, warn};

/// Asks remembered until granted (a grant older than these is of no use:
/// its lease has long lapsed).
const ASKS_KEPT: usize = 64;

/// A VP starts only while the lease runs at least this much longer: a
/// process born into a cell the guardian freezes before it execs would
/// hold the daemon (which waits for that exec) until a renewal the daemon
/// can then no longer ask for.
const START_MARGIN: Duration = Duration::from_millis(100);

/// What a worker keeps of its lease.
#[derive(Debug, Default)]
pub(super) struct Lease {
    /// The process that freezes the VPs when the lease lapses (none on the
    /// master, or without cgroups).
    guardian: Option<Guardian>,
    next: u64,
    /// Asks sent: number and when.
    asked: VecDeque<(u64, Instant)>,
    /// The VPs may run until then.
    until: Option<Instant>,
    /// Fenced, it registered again and waits to hear it is back: fences
    /// said before that answer are of the old life.
    rejoining: bool,
    /// VPs to start once the lease runs again (it lapsed: their cells
    /// would be frozen).
    deferred: Vec<StartVp>,
}

impl Lease {
    /// May a VP start now (no guardian, no lease yet, or one that runs
    /// on past `START_MARGIN`)?
    pub(super) fn may_start(&self) -> bool {
        self.guardian.is_none() || self.until.is_none_or(|u| u > Instant::now() + START_MARGIN)
    }

    /// The guardian's process id, if it runs: the daemon's own, so its
    /// CPU (its start above all) is never the owner's load.
    pub(super) fn guardian_pid(&self) -> Option<u32> {
        self.guardian.as_ref().map(Guardian::pid)
    }

    /// Keep `s` until the lease runs again.
    pub(super) fn defer(&mut self, s: StartVp) {
        self.deferred.push(s);
    }

    /// Forget VP `tid`'s start, if it was kept: true if so.
    pub(super) fn undefer(&mut self, tid: Tid) -> bool {
        let before = self.deferred.len();
        self.deferred.retain(|s| s.tid != tid);
        self.deferred.len() < before
    }
}

impl Local {
    /// On a worker with cgroups: start the guardian of its VPs.
    pub(super) fn guard_vps(&mut self) {
        let Some(c) = &self.contain else {
            return log!(
                "no lease guardian (no cgroups): a VP here may run on for a while if this \
                 daemon stalls and the master starts it elsewhere"
            );
        };
        match Guardian::start(c.flavour(), c.base()) {
            Ok(g) => {
                log!("lease guardian {} watches this host's VPs", g.pid());
                self.lease.guardian = Some(g);
            }
            Err(e) => warn!("could not start the lease guardian: {e}"),
        }
    }

    /// The master took this host back after it was fenced.
    pub(super) fn rejoined(&mut self) {
        if std::mem::replace(&mut self.lease.rejoining, false) {
            log!("back in the virtual machine");
        }
    }
}

impl Daemon {
    /// With each heartbeat: ask the master for a lease.
    pub(super) fn ask_lease(&mut self) {
        if self.role.link().is_none() && !self.role.is_master() {
            return;
        }
        self.local.lease.next += 1;
        let n = self.local.lease.next;
        self.local.lease.asked.push_back((n, Instant::now()));
        while self.local.lease.asked.len() > ASKS_KEPT {
            self.local.lease.asked.pop_front();
        }
        // The master asks itself: its own VPs are frozen too if its daemon
        // stalls (another master may start them elsewhere meanwhile).
        self.report(ToMaster::LeaseAsk { n });
    }

    /// Ask `n` is granted for `ms` from when it was sent.
    pub(super) fn lease_granted(&mut self, n: u64, ms: u64) {
        let Some(&(_, sent)) = self.local.lease.asked.iter().find(|(k, _)| *k == n) else {
            return;
        };
        self.local.lease.asked.retain(|(k, _)| *k > n);
        let until = sent + Duration::from_millis(ms);
        if self.local.lease.until.is_some_and(|u| u >= until) {
            return;
        }
        self.local.lease.until = Some(until);
        if let Some(g) = &mut self.local.lease.guardian {
            g.renew(until);
        }
        if self.local.lease.may_start() && !self.local.lease.deferred.is_empty() {
            let starts = std::mem::take(&mut self.local.lease.deferred);
            log!(
                "the lease runs again: starting {} held meanwhile",
                libmig::words::count(starts.len() as u64, "VP", "VPs")
            );
            for s in starts {
                self.start_vp(s);
            }
        }
    }

    /// The master declared this host dead while it did not answer: its VPs
    /// run elsewhere now. End every one of them (and drop those parked
    /// here) before anything else, then register again, empty.
    pub(super) fn fenced(&mut self, why: &str) {
        if self.halting.is_some() || self.local.lease.rejoining {
            return;
        }
        let n = self
            .local
            .vps
            .by_tid
            .values()
            .filter(|v| v.exit.is_none())
            .count();
        // Their ends are nobody's exits (the VPs go on elsewhere): kept
        // with the processes that left, not reported.
        for (tid, v) in std::mem::take(&mut self.local.vps.by_tid) {
            v.kill();
            self.slicing.slicer.gone(tid);
            if v.exit.is_none() || v.open_pipes > 0 {
                self.local.leaving.insert(v.pid, v);
            }
        }
        for p in self.moves.unpark_all() {
            crate::discard::remove_later(&p.path);
        }
        // (So do those it had not started: they start elsewhere.) Their
        // lines the master did not say it took are not sent again.
        self.local.lease.deferred.clear();
        self.lines_sent.take_kept();
        log!(
            "fenced by the master: {why}; ended its {} here; joining again",
            libmig::words::count(n as u64, "VP", "VPs")
        );
        let Some(link) = self.role.link() else { return };
        self.local.lease.rejoining = true;
        self.local.lease.asked.clear();
        let facts = self.facts.clone();
        self.send_peer(link, Handshake::Register { facts });
    }
}
