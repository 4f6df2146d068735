//! Owners: a host's owner monitor reports taken back or offered (its
//! processors leave or join the pool), `mig owner`, and VPs parked on disk.

use libmig::msg::{OwnerAction, OwnerReport, OwnerState, Response, Tid, ToHost};

use super::vp::VpState;
use super::{Master, Out, Requester};

impl Master {
    /// A host's owner monitor reports: its processors leave the pool when
    /// the owner has taken it back and join it when it is offered again.
    pub fn owner_report(&mut self, host: &str, report: OwnerReport) -> Vec<Out> {
        let Some(h) = self.hosts.get_mut(host) else {
            return Vec::new();
        };
        let before = h.owner.as_ref().map(|r| r.state);
        let state = report.state;
        let mut out = Vec::new();
        if before != Some(state) {
            out.push(Out::Log(format!(
                "host {host} is {state} ({})",
                report.decided_by
            )));
        }
        h.facts.offered = state == OwnerState::Offered;
        h.owner = Some(report);
        match state {
            OwnerState::Reclaimed => out.extend(self.leave_pool(host)),
            OwnerState::Offered => out.extend(self.join_pool(host)),
            OwnerState::Suspended => {}
        }
        out
    }

    /// A VP waiting on a taken-back host was parked: its image written to
    /// that host's disk.
    pub(super) fn parked(&mut self, host: &str, tid: Tid) -> Vec<Out> {
        let Some((job, vp)) = self.tids.get(&tid).cloned() else {
            return Vec::new();
        };
        let Some(v) = self.jobs.get_mut(&job).and_then(|j| j.vps.get_mut(&vp)) else {
            return Vec::new();
        };
        let VpState::Running { host: at, plan, .. } = v.state() else {
            return Vec::new();
        };
        if at != host {
            return Vec::new();
        }
        let parked = VpState::Parked {
            host: at.clone(),
            plan: plan.clone(),
        };
        if let Err(refused) = v.go(parked) {
            return vec![refused.into()];
        }
        vec![Out::Log(format!(
            "VP t{tid:x} parked on {host}'s disk until a processor is free"
        ))]
    }

    /// The host carried out `mig owner reclaim|release`.
    pub fn owner_done(&mut self, id: u64, message: String) -> Vec<Out> {
        match self.owner_waiting.remove(&id) {
            Some(r) => vec![Out::Reply(r, Response::Ok { message })],
            None => Vec::new(),
        }
    }

    pub(super) fn owner(
        &mut self,
        from: Requester,
        from_host: &str,
        action: OwnerAction,
        host: Option<String>,
    ) -> Vec<Out> {
        let err = |m: String| vec![Out::Reply(from.clone(), Response::Error { message: m })];
        if let Some(h) = &host {
            if !self.is_alive(h) {
                return err(format!("no live host {h:?}; `mig hosts` lists them"));
            }
        }
        match action {
            OwnerAction::Status => {
                let list = self
                    .hosts
                    .iter()
                    .filter(|(n, h)| h.alive && host.as_ref().is_none_or(|x| x == *n))
                    .filter_map(|(n, h)| Some((n.clone(), h.owner.clone()?)))
                    .collect();
                vec![Out::Reply(from, Response::Owner(list))]
            }
            OwnerAction::Reclaim | OwnerAction::Release => {
                let target = host.unwrap_or_else(|| from_host.to_string());
                let id = self.next_owner_id;
                self.next_owner_id += 1;
                self.owner_waiting.insert(id, from);
                vec![Out::ToHost(
                    target,
                    ToHost::OwnerCommand {
                        id,
                        reclaim: action == OwnerAction::Reclaim,
                    },
                )]
            }
        }
    }
}
