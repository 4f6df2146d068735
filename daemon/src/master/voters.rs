//! Which hosts vote: the few daemons that keep the master's replicated state
//! and elect the master among themselves. Three where there are three hosts
//! or more, five from five; one (the master alone) below three, where no
//! majority could survive the loss of a host anyway. The voters change one
//! at a time: a change takes out at most one voter whose host is gone, and
//! puts a spare host in its place in the same change (the consensus makes
//! it through a joint configuration); however many hosts went at once, the
//! next goes in the next change, once this one is made. New voters are
//! added to reach three or five in one change, so the voters never pass
//! through an even number on the way from one to three or five, where the
//! loss of one host would leave no majority.
//!
//! What does not live here: the consensus itself (`crate::consensus`).

use std::collections::BTreeMap;

use libmig::msg::ToHost;

use super::Master;

/// A change to the voters that the consensus must make, all at once.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VoterChange {
    /// Hosts that become voters, with their ids.
    pub add: Vec<(u64, String)>,
    /// Voters (their hosts gone) that vote no more.
    pub remove: Vec<(u64, String)>,
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

    /// The consensus made these voters so (its configuration now).
    pub fn voting(&mut self, ids: impl IntoIterator<Item = u64>) {
        self.voting = Some(ids.into_iter().collect());
    }

    /// Does `host` vote, its change made?
    pub(super) fn votes(&self, host: &str) -> bool {
        self.voters
            .iter()
            .any(|(id, h)| h == host && self.voting.as_ref().is_none_or(|v| v.contains(id)))
    }

    /// The next change to the voters, if one is due (recorded as made: call
    /// only when the consensus can take it).
    pub fn voter_change(&mut self) -> Option<VoterChange> {
        let mut change = VoterChange::default();
        let gone = self
            .voters
            .iter()
            .find(|(_, h)| !self.is_alive(h) && **h != self.name)
            .map(|(id, h)| (*id, h.clone()));
        if let Some((id, host)) = gone {
            self.voters.remove(&id);
            change.remove.push((id, host));
        }
        // Hosts whose connection is lost but not yet given up do not count.
        let alive = self
            .hosts
            .values()
            .filter(|h| h.alive && h.lost.is_none())
            .count();
        let wanted = voters_wanted(alive, self.max_voters);
        let spare: Vec<String> = self
            .hosts
            .iter()
            .filter(|(n, h)| h.alive && h.lost.is_none() && !self.voters.values().any(|v| v == *n))
            .map(|(n, _)| n.clone())
            .collect();
        // In place of one that went, one; from one voter, only to three
        // (or five) at once.
        let can = if !change.remove.is_empty() {
            wanted.saturating_sub(self.voters.len()).min(1)
        } else if self.voters.len() + spare.len() >= wanted {
            wanted.saturating_sub(self.voters.len())
        } else {
            0
        };
        for host in spare.into_iter().take(can) {
            let id = self.next_voter;
            self.next_voter += 1;
            self.voters.insert(id, host.clone());
            change.add.push((id, host));
        }
        (!change.add.is_empty() || !change.remove.is_empty()).then_some(change)
    }

    /// Every host's word of who votes (`ToHost::Voters`).
    pub fn voters_msg(&self) -> ToHost {
        ToHost::Voters(self.voters.iter().map(|(i, h)| (*i, h.clone())).collect())
    }

    /// This master's voter id.
    pub fn voter_id(&self) -> Option<u64> {
        self.voters
            .iter()
            .find(|(_, h)| **h == self.name)
            .map(|(id, _)| *id)
    }
}
