//! The master's state as bytes for the replicated log, and a master rebuilt
//! from those bytes on another daemon when it takes over.
//!
//! What lives here: which parts of the state travel (hosts, jobs and their
//! VPs, the Tid directory, groups, checkpoint generations and where each
//! copy lies, the scheduler whole, the virtual machine's policy) and what a
//! new master does with what cannot travel (instants, connections of the old
//! master, rounds and searches that were under way there). What does not:
//! the consensus that carries the bytes (`crate::consensus`), and telling
//! the hosts who the master is now (the server).

use std::time::Instant;

use libmig::msg::SnapOrder;

use super::records::PendingRestart;
use super::vp::{VpRec, VpState};
use super::{checkpoints, Master, Out, Requester, LOCAL_ID};
use crate::sched::{Placement, SchedConfig};

/// Why bytes could not be taken for a master's state.
#[derive(Debug, thiserror::Error)]
#[error("the replicated master state cannot be read: {0}")]
pub struct ImportError(#[from] postcard::Error);

impl Master {
    /// The state another daemon needs to take over, as bytes.
    pub fn export(&self) -> Vec<u8> {
        // Every field is plain data with a serde form: this cannot fail.
        postcard::to_allocvec(self).unwrap_or_default()
    }

    /// A master on host `me` rebuilt from `bytes` (another master's
    /// `export`) at `now`, and what it must do first: rounds and searches
    /// that were under way on the old master are given up or begun again;
    /// requests made on the old master's own connections are forgotten.
    /// Every other host must attach again within `dead_after` (a host that
    /// does not is taken for dead once the lease the old master may just
    /// have given it has lapsed).
    pub fn import(bytes: &[u8], me: &str, now: Instant) -> Result<(Master, Vec<Out>), ImportError> {
        let mut m: Master = postcard::from_bytes(bytes)?;
        m.sched = std::mem::take(&mut m.sched).with_config(master_sched_config(m.placement));
        let old = std::mem::replace(&mut m.name, me.to_string());
        m.now = now;
        m.last_tick = Some(now);
        let lease = m.lease;
        let mut out = vec![Out::Log(format!(
            "took over as master from {old}: {} hosts, {} jobs",
            m.hosts.len(),
            m.jobs.len()
        ))];
        for (name, h) in &mut m.hosts {
            h.master = name == me;
            h.last_seen = now;
            h.granted = (name != me && h.alive).then_some(now);
            h.lost = None;
            if *name == old && name != me && h.alive {
                h.lost = Some((
                    now + lease,
                    "it was the master and stopped answering".into(),
                ));
            }
        }
        if let Some(h) = m.hosts.get_mut(me) {
            h.alive = true;
        }
        // Its own host's idea of where every VP is, as the hosts that
        // attach get it.
        out.push(Out::ToHost(me.to_string(), m.directory()));
        // Only requests made through a host that is still there are answered.
        let reachable = |r: &Requester| match r {
            Requester::Local(_) => false,
            Requester::Remote { host, .. } => *host != old,
            Requester::Vp { .. } => true,
        };
        m.owner_waiting.retain(|_, r| reachable(r));
        let mut restart = Vec::new();
        for (job, j) in &mut m.jobs {
            // A job's waiting clients on the old master's own socket go on
            // through it as a worker, if it still runs (it stepped down):
            // it knows them by `LOCAL_ID` and their connection.
            for w in &mut j.waiters {
                if let Requester::Local(t) = *w {
                    *w = Requester::Remote {
                        host: old.clone(),
                        id: LOCAL_ID | t as u64,
                    };
                }
            }
            if let Some(r) = j.ckpt.round.take() {
                out.push(Out::Log(format!(
                    "checkpoint {} of job {job} given up: the master changed while it was taken",
                    r.id
                )));
                out.extend(checkpoints::to_every_vp(j, &r.members, |_| {
                    SnapOrder::Abort { id: r.id }
                }));
            }
            for w in j.vps.values_mut().filter_map(VpRec::wants_mut) {
                w.retry_at = None;
            }
            // The search for its images died with the old master: begin
            // it again.
            if let Some(p) = j.ckpt.restart.take() {
                restart.push((job.clone(), p));
            }
        }
        // A restore the old master set going may not have reached the
        // hosts: it begins again.
        for (job, j) in &m.jobs {
            if j.vps
                .values()
                .any(|v| matches!(v.state(), VpState::Restoring { .. }))
                && !restart.iter().any(|(r, _)| r == job)
            {
                restart.push((job.clone(), PendingRestart::default()));
            }
        }
        for (job, mut p) in restart {
            p.from.retain(reachable);
            let from = p.from.pop();
            out.extend(m.restart_job(&job, from.clone()));
            if let Some(r) = m.jobs.get_mut(&job).and_then(|j| j.ckpt.restart.as_mut()) {
                r.from.extend(p.from);
                r.lost |= p.lost;
            }
        }
        let out = m.settle_returns(out);
        Ok((m, out))
    }
}

/// The scheduler's config on the daemons: `placement`'s, and a VP whose
/// program has not said it can be moved never is.
pub(super) fn master_sched_config(placement: Placement) -> SchedConfig {
    SchedConfig {
        pin_new_vps: true,
        ..placement.config()
    }
}
