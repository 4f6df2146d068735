//! Job checkpoints on a VP's host: relaying the master's steps to a local
//! VP, and the VP's answers to the master (its image kept here: see
//! `images`).

use std::time::Instant;

use libmig::msg::{SnapOrder, SnapReport, Tid, ToMaster, VpMsg};

use super::Daemon;
use crate::warn;

impl Daemon {
    /// A job checkpoint's step from the master for local VP `tid`.
    pub(super) fn snap_step(&mut self, tid: Tid, step: SnapOrder) {
        if self
            .local
            .vps
            .by_tid
            .get(&tid)
            .is_some_and(|v| v.outside && !v.movable)
        {
            return self.snap_from_outside(tid, step);
        }
        let Some(&t) = self.local.vp_conns.get(&tid) else {
            return;
        };
        let begins = matches!(step, SnapOrder::Begin { .. });
        let step = step.to_vp(|| self.state.snap_image(tid).display().to_string());
        self.send_vp(t, &VpMsg::Snap(step));
        if begins {
            self.flush_now(t);
            // Looked at by the VP at its next safe point. The step goes
            // first: a VP that looked on the signal before the step was in
            // its socket would never look again.
            if let Some(v) = self.local.vps.by_tid.get_mut(&tid) {
                v.snapping_since = Some(Instant::now());
                v.nudge();
            }
        }
    }

    /// VP `tid` could not write its image of job checkpoint `id`: the
    /// master hears why (the checkpoint fails; the VP goes on when told).
    pub(super) fn snap_failed(&mut self, tid: Tid, id: u64, reason: String, no_space: bool) {
        if let Some(v) = self.local.vps.by_tid.get_mut(&tid) {
            v.snapping_since = None;
        }
        let reason = if no_space {
            self.no_space();
            format!(
                "{reason} (the state directory {} is full)",
                self.state.root().display()
            )
        } else {
            reason
        };
        warn!("VP t{tid:x}: its image of checkpoint {id}: {reason}");
        self.report(ToMaster::Snap {
            tid,
            step: SnapReport::Failed { id, reason },
        });
    }
}
