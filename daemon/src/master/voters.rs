//! Which hosts vote: the few daemons that keep the master's replicated state
//! and elect the master among themselves. Three where there are three hosts
//! or more, five from five; one (the master alone) below three, where no
//! majority could survive the loss of a host anyway. A voter whose host is
//! gone is replaced: removed first, then a live host added, one change at a
//! time (the consensus takes one at a time).
//!
//! What does not live here: the consensus itself (`crate::consensus`).

use super::*;

/// A change to the voters that the consensus must make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VoterChange {
    /// `host` becomes voter `id`.
    Add {
        /// Its voter id.
        id: u64,
        /// Its host.
        host: String,
    },
    /// Voter `id` (on `host`, gone) votes no more.
    Remove {
        /// Its voter id.
        id: u64,
        /// Its host.
        host: String,
    },
}

/// Voters wanted among `hosts` live hosts, at most `most`.
pub fn voters_wanted(hosts: usize, most: usize) -> usize {
    let n = match hosts {
        0..=2 => 1,
        3..=4 => 3,
        _ => 5,
    };
    n.min(most)
}

impl Master {
    /// At most `n` voters (1, 3 or 5).
    pub fn set_max_voters(&mut self, n: usize) {
        self.max_voters = n;
    }

    /// The voters, by id, and their hosts.
    pub fn voters(&self) -> &BTreeMap<u64, String> {
        &self.voters
    }

    /// The next change to the voters, if one is due (recorded as made: call
    /// only when the consensus can take it).
    pub fn voter_change(&mut self) -> Option<VoterChange> {
        let gone = self
            .voters
            .iter()
            .find(|(_, h)| !self.is_alive(h) && **h != self.name)
            .map(|(id, h)| (*id, h.clone()));
        if let Some((id, host)) = gone {
            self.voters.remove(&id);
            return Some(VoterChange::Remove { id, host });
        }
        let alive = self.hosts.values().filter(|h| h.alive).count();
        if self.voters.len() >= voters_wanted(alive, self.max_voters) {
            return None;
        }
        let voting: BTreeSet<&String> = self.voters.values().collect();
        let host = self
            .hosts
            .iter()
            .find(|(n, h)| h.alive && !voting.contains(n))
            .map(|(n, _)| n.clone())?;
        let id = self.next_voter;
        self.next_voter += 1;
        self.voters.insert(id, host.clone());
        Some(VoterChange::Add { id, host })
    }

    /// This master's voter id.
    pub fn voter_id(&self) -> Option<u64> {
        self.voters
            .iter()
            .find(|(_, h)| **h == self.name)
            .map(|(id, _)| *id)
    }
}
