//! Answers to the calls of VPs on their way between hosts.
//!
//! A VP moved from outside may be waiting for the answer to a call to the
//! master (a barrier, a blocking mailbox read, a spawn): the call went out
//! from its old host before it was stopped. An answer sent there once the
//! move has begun would find no VP (its image is taken with what its socket
//! held at the time), so the master keeps the answers of a VP that is
//! moving, parked or starting again and sends them where it runs once it
//! does (the host it stays on if the move fails); those of a VP that ends,
//! or goes back to its job's checkpoint (where it has not made the call
//! yet), are dropped. Answers sent before the move began travel in the
//! VP's socket, and so in its image.
//!
//! What lives here: the held answers and when they go. What does not:
//! making the answers (`calls`), the VP's states (`vp`).

use libmig::msg::{Tid, ToHost};

use super::vp::VpState;
use super::{Master, Out};

impl Master {
    /// `out` with the answers to calls of VPs between hosts taken out and
    /// kept, and kept answers whose VP now runs somewhere put in (for the
    /// host it runs on). Every entry point that may answer a call or end
    /// a move passes its outputs through here.
    pub(super) fn hold_answers(&mut self, out: Vec<Out>) -> Vec<Out> {
        let mut kept = Vec::with_capacity(out.len());
        for o in out {
            match o {
                Out::ToHost(_, ToHost::VpReturn { tid, id, ret }) if self.between_hosts(tid) => {
                    self.held_answers.entry(tid).or_default().push((id, ret));
                }
                o => kept.push(o),
            }
        }
        if self.held_answers.is_empty() {
            return kept;
        }
        let tids: Vec<Tid> = self.held_answers.keys().copied().collect();
        for tid in tids {
            match self.state_of(tid) {
                Some(VpState::Running { host, .. }) => {
                    let host = host.clone();
                    for (id, ret) in self.held_answers.remove(&tid).unwrap_or_default() {
                        kept.push(Out::ToHost(host.clone(), ToHost::VpReturn { tid, id, ret }));
                    }
                }
                Some(
                    VpState::Moving { .. } | VpState::Parked { .. } | VpState::Starting { .. },
                ) => {}
                Some(VpState::Waiting | VpState::Restoring { .. } | VpState::Exited { .. })
                | None => {
                    self.held_answers.remove(&tid);
                }
            }
        }
        kept
    }

    /// Is `tid` on its way between hosts (moving, parked, or starting again
    /// from where it was parked), so that an answer to one of its calls
    /// must wait?
    fn between_hosts(&self, tid: Tid) -> bool {
        matches!(
            self.state_of(tid),
            Some(VpState::Moving { .. } | VpState::Parked { .. } | VpState::Starting { .. })
        )
    }

    /// VP `tid`'s state, if it is known.
    fn state_of(&self, tid: Tid) -> Option<&VpState> {
        let (job, vp) = self.tids.get(&tid)?;
        Some(self.jobs.get(job)?.vps.get(vp)?.state())
    }
}
