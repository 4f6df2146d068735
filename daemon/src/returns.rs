//! Answers to a moving VP's calls to the master: they follow it.
//!
//! A VP moved from outside may be waiting for the answer to a call it made
//! to the master (a barrier, a spawn, a mailbox read that waits). Its image
//! carries the call's number (`ledger::Ledger::calls`), and the master
//! answers where it thinks the VP is: the host it called from, or the host
//! it runs on. An answer that comes to the old host after the VP's words
//! were taken for its image would be lost there; it is kept here instead,
//! and goes where the VP runs once the master says so (or to the VP again,
//! should it stay). What lives here: who is owed which answers, and where
//! they go. Pure: the server sends them (`server/routing.rs`).

use std::collections::{BTreeMap, BTreeSet};

use libmig::msg::{Tid, VpRet};

/// The answers owed to VPs that left (or are leaving) this host, by VP.
#[derive(Debug, Default)]
pub struct Returns {
    owed: BTreeMap<Tid, Owed>,
}

#[derive(Debug, Default)]
struct Owed {
    /// Its calls whose answers have not come here yet.
    open: BTreeSet<u64>,
    /// Answers that came while nobody knew where it runs.
    held: Vec<(u64, VpRet)>,
    /// The host it runs on now, once the master said (not this one).
    at: Option<String>,
}

/// What to do with an answer to VP `tid`'s call.
#[derive(Debug, PartialEq)]
pub enum Answer {
    /// Not one owed here: to the VP, if it is here, as usual.
    Here(VpRet),
    /// Kept until it is known where the VP runs.
    Kept,
    /// To the daemon of that host, where the VP runs.
    Forward(String, VpRet),
}

impl Returns {
    /// VP `tid` is being saved with `calls` unanswered: their answers,
    /// from now on, wait here for it.
    pub fn carry(&mut self, tid: Tid, calls: &BTreeSet<u64>) {
        if calls.is_empty() {
            return;
        }
        let o = self.owed.entry(tid).or_default();
        o.open.extend(calls);
        o.at = None;
    }

    /// Are answers of VP `tid` kept here (it has no say in them now)?
    pub fn owes(&self, tid: Tid) -> bool {
        self.owed.contains_key(&tid)
    }

    /// The answer `ret` to call `id` of VP `tid` came here.
    pub fn answer(&mut self, tid: Tid, id: u64, ret: VpRet) -> Answer {
        let Some(o) = self.owed.get_mut(&tid) else {
            return Answer::Here(ret);
        };
        if !o.open.remove(&id) {
            return Answer::Here(ret);
        }
        match o.at.clone() {
            Some(host) => {
                if o.open.is_empty() {
                    self.owed.remove(&tid);
                }
                Answer::Forward(host, ret)
            }
            None => {
                o.held.push((id, ret));
                Answer::Kept
            }
        }
    }

    /// VP `tid` runs on `host` (another one): the answers kept for it go
    /// there, and so will those still to come.
    pub fn runs_at(&mut self, tid: Tid, host: &str) -> Vec<(u64, VpRet)> {
        let Some(o) = self.owed.get_mut(&tid) else {
            return Vec::new();
        };
        o.at = Some(host.to_string());
        let held = std::mem::take(&mut o.held);
        if o.open.is_empty() {
            self.owed.remove(&tid);
        }
        held
    }

    /// VP `tid` runs on this host again, connected (its move was called
    /// off, or it came back): the answers kept for it go to it, and those
    /// still to come reach it as any VP's here.
    pub fn runs_here(&mut self, tid: Tid) -> Vec<(u64, VpRet)> {
        self.owed.remove(&tid).map(|o| o.held).unwrap_or_default()
    }

    /// VP `tid` has ended: nothing is owed to it.
    pub fn forget(&mut self, tid: Tid) {
        self.owed.remove(&tid);
    }

    /// The VPs owed answers here.
    pub fn len(&self) -> usize {
        self.owed.len()
    }

    /// Nobody is owed an answer here.
    pub fn is_empty(&self) -> bool {
        self.owed.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(ids: &[u64]) -> BTreeSet<u64> {
        ids.iter().copied().collect()
    }

    #[test]
    fn answers_kept_while_it_moves_go_where_it_runs_and_later_ones_follow() {
        let mut r = Returns::default();
        r.carry(7, &calls(&[1, 2, 3]));
        assert!(r.owes(7));
        assert_eq!(r.answer(7, 2, VpRet::Done), Answer::Kept);
        assert_eq!(r.answer(9, 2, VpRet::Done), Answer::Here(VpRet::Done));
        assert_eq!(
            r.answer(7, 4, VpRet::Instance(1)),
            Answer::Here(VpRet::Instance(1)),
            "a call it did not carry"
        );
        assert_eq!(r.runs_at(7, "h2"), vec![(2, VpRet::Done)]);
        assert_eq!(
            r.answer(7, 1, VpRet::Instance(5)),
            Answer::Forward("h2".into(), VpRet::Instance(5))
        );
        assert_eq!(
            r.answer(7, 1, VpRet::Done),
            Answer::Here(VpRet::Done),
            "each call is answered once"
        );
        assert_eq!(
            r.answer(7, 3, VpRet::Done),
            Answer::Forward("h2".into(), VpRet::Done)
        );
        assert!(r.is_empty(), "nothing left owed");
    }

    #[test]
    fn a_vp_that_stays_gets_what_was_kept_and_nothing_more_is_kept() {
        let mut r = Returns::default();
        r.carry(7, &calls(&[]));
        assert!(!r.owes(7), "no call: nothing to keep");
        r.carry(7, &calls(&[1, 2]));
        assert_eq!(r.answer(7, 1, VpRet::Done), Answer::Kept);
        assert_eq!(r.runs_here(7), vec![(1, VpRet::Done)]);
        assert_eq!(r.answer(7, 2, VpRet::Done), Answer::Here(VpRet::Done));
        r.carry(8, &calls(&[1]));
        r.forget(8);
        assert_eq!(r.len(), 0);
    }

    #[test]
    fn a_vp_moved_again_before_it_was_placed_keeps_its_answers_here() {
        let mut r = Returns::default();
        r.carry(7, &calls(&[1, 2]));
        assert!(r.runs_at(7, "h2").is_empty());
        // It left h2 again: saved there, its answers follow it from there;
        // here, it is moving back (carried anew).
        r.carry(7, &calls(&[2]));
        assert_eq!(r.answer(7, 2, VpRet::Done), Answer::Kept);
        assert_eq!(r.answer(7, 1, VpRet::Done), Answer::Kept);
        assert_eq!(r.runs_here(7).len(), 2);
    }
}
