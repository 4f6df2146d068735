//! Gang slicing on this host: timing the master's slot tables, and arming
//! each slot switch for the switch threads.
//!
//! Their state is the daemon's `Slicing` part, defined here (the slicer,
//! the switcher and the switch armed); handlers elsewhere reach it as
//! `self.slicing`.

use std::time::Duration;

use libmig::msg::{Tid, ToHost};
use nix::sys::signal::Signal;

use super::{Daemon, ARM_AHEAD};
use crate::host;
use crate::master::Out;
use crate::slicer::{Plan, Slicer};
use crate::switcher::{wall_ns, Armed, Switcher};

/// Gang slicing on this host: which local VPs run in the slot in force,
/// the threads that carry out each switch, and the switch armed for them.
/// Owned by the `Daemon`; its handlers reach it as `self.slicing`.
pub(super) struct Slicing {
    /// Which local VPs run in the slot in force.
    pub(super) slicer: Slicer,
    /// Carries out slot switches at their instants, and the switch armed.
    pub(super) switcher: Switcher,
    pub(super) armed: Option<Plan>,
    /// What was last armed for it.
    pub(super) armed_as: Option<Armed>,
}

impl Slicing {
    /// No slot table yet, nothing armed.
    pub(super) fn new(switcher: Switcher) -> Slicing {
        Slicing {
            slicer: Slicer::default(),
            switcher,
            armed: None,
            armed_as: None,
        }
    }

    /// How long until the slicer's next switch, if one is coming.
    pub(super) fn slice_due_in(&self) -> Option<Duration> {
        let due = self.slicer.next_due()?;
        Some(Duration::from_nanos(due.saturating_sub(wall_ns())))
    }

    /// Take back the slot switch armed and not yet carried out, if any.
    pub(super) fn disarm_switch(&mut self) {
        if self.armed.take().is_some() {
            self.switcher.disarm();
        }
        self.armed_as = None;
    }
}

impl Daemon {
    /// On the master: time new slot tables. They take effect at the first
    /// slot boundary at least `TABLE_LEAD` away (on every host at the same
    /// boundary); a new round length starts a new epoch there.
    pub(super) fn send_tables(
        &mut self,
        generation: u64,
        slots: usize,
        all: bool,
        tables: Vec<(String, Vec<Vec<libmig::msg::SlotCell>>)>,
    ) {
        const TABLE_LEAD: u64 = 50_000_000;
        let Some(m) = self.role.master() else { return };
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
                    ToHost::SlotTable(libmig::msg::SlotTable {
                        generation,
                        epoch_ns: epoch,
                        from_ns: from,
                        quantum_ns: q,
                        slots: cells,
                    }),
                )
            })
            .collect();
        self.carry_out_when_committed(outs);
    }

    /// Keep the slicer going: arm the next slot switch for the switcher
    /// when it is `ARM_AHEAD` away, and re-arm it with the VPs' processes as
    /// they are now (one that ended or is moving is not signalled). While
    /// the owner has the host the slicer keeps time but signals nobody.
    pub(super) fn drive_slicer(&mut self) {
        if !self.owner.offered() {
            self.slicing.disarm_switch();
            let now = wall_ns();
            while self.slicing.slicer.next_due().is_some_and(|d| d <= now) {
                if self.slicing.slicer.at(now).is_none() {
                    break;
                }
            }
            return;
        }
        if self.slicing.armed.is_some() && self.slicing.switcher.armed().is_none() {
            // Carried out.
            self.slicing.armed = None;
            self.slicing.armed_as = None;
        }
        if self.slicing.armed.is_none() {
            let horizon = wall_ns() + ARM_AHEAD.as_nanos() as u64;
            let Some(due) = self.slicing.slicer.next_due().filter(|&d| d <= horizon) else {
                return;
            };
            self.slicing.armed = self.slicing.slicer.at(due.max(wall_ns()));
        }
        if let Some(plan) = &self.slicing.armed {
            let pids = |tids: &[Tid]| -> Vec<i32> {
                tids.iter()
                    // A VP on its way to a safe point is not held up.
                    .filter(|&&t| !self.moves.let_run(t))
                    .filter_map(|t| self.local.vps.by_tid.get(t))
                    .filter(|v| v.exit.is_none())
                    .map(|v| v.pid)
                    .collect()
            };
            // A VP held since the switch was planned is not continued.
            let cont: Vec<Tid> = plan
                .cont
                .iter()
                .copied()
                .filter(|&t| !self.slicing.slicer.held(t))
                .collect();
            let a = Armed {
                ideal_ns: plan.ideal_ns,
                slot: plan.slot,
                generation: plan.generation,
                stop: pids(&plan.stop),
                cont: pids(&cont),
                ..Armed::default()
            };
            // (The loop comes here on every event: the lock, and the look
            // into the VPs' cgroups, only when the switch changed.)
            if self.slicing.armed_as.as_ref() != Some(&a) {
                self.slicing.armed_as = Some(a.clone());
                let escaped = |groups: &[i32]| -> Vec<i32> {
                    groups
                        .iter()
                        .filter_map(|p| self.local.vps.by_pid.get(p))
                        .filter_map(|t| self.local.vps.by_tid.get(t))
                        .flat_map(|v| {
                            v.pids().into_iter().filter(move |&p| {
                                p != v.pid && host::process_group(p).is_none_or(|g| g != v.pid)
                            })
                        })
                        .collect()
                };
                let full = Armed {
                    stop_one: escaped(&a.stop),
                    cont_one: escaped(&a.cont),
                    ..a
                };
                self.slicing.switcher.arm(full);
            }
        } else {
            self.slicing.armed_as = None;
        }
    }

    /// The master holds `tids` stopped (their job is suspended) or lets
    /// them run again: stopped at once; released, continued at once if
    /// their slot runs (and the owner has not the host), else at their slot.
    pub(super) fn hold_vps(&mut self, tids: &[Tid], hold: bool) {
        if hold {
            self.slicing.slicer.hold(tids);
            self.signal_tids(tids, Signal::SIGSTOP);
        } else {
            let cont = self.slicing.slicer.release(tids);
            // While the owner has the host nobody runs: its release
            // continues whoever may run then.
            if self.owner.offered() {
                self.signal_tids(&cont, Signal::SIGCONT);
            }
        }
        self.drive_slicer();
    }

    fn signal_tids(&self, tids: &[Tid], sig: Signal) {
        for t in tids {
            // (A VP on its way to a safe point is left to reach it.)
            if let Some(v) = self.local.vps.by_tid.get(t).filter(|v| v.exit.is_none()) {
                if !self.moves.let_run(*t) {
                    v.signal(sig);
                }
            }
        }
    }
}
