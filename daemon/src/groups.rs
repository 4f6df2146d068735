//! Named groups of VPs, kept by the master: membership with instance
//! numbers (the lowest free one, as PVM gives them) and barriers. What lives
//! here: the tables and their rules. What does not: the data collectives
//! (libmig builds them on messages) and delivery of the answers (`master`).

use std::collections::BTreeMap;

use libmig::msg::Tid;

/// Someone waiting at a barrier: the VP and its call id.
pub type Waiter = (Tid, u64);

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Group {
    members: BTreeMap<u32, Tid>,
    waiting: Vec<Waiter>,
    count: u32,
}

/// Every group.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Groups {
    groups: BTreeMap<String, Group>,
}

impl Groups {
    /// `tid` joins `name`: its instance number (the same if already in).
    pub fn join(&mut self, name: &str, tid: Tid) -> u32 {
        let g = self.groups.entry(name.to_string()).or_default();
        if let Some((&i, _)) = g.members.iter().find(|(_, &t)| t == tid) {
            return i;
        }
        let i = (0..).find(|i| !g.members.contains_key(i)).unwrap_or(0);
        g.members.insert(i, tid);
        i
    }

    /// `tid` leaves `name`. Returns whether it was a member, and the
    /// barrier waiters released because the group shrank.
    pub fn leave(&mut self, name: &str, tid: Tid) -> (bool, Vec<Waiter>) {
        let Some(g) = self.groups.get_mut(name) else {
            return (false, Vec::new());
        };
        let before = g.members.len();
        g.members.retain(|_, &mut t| t != tid);
        g.waiting.retain(|&(t, _)| t != tid);
        let was = g.members.len() < before;
        let released = Self::release(g);
        if g.members.is_empty() && g.waiting.is_empty() {
            self.groups.remove(name);
        }
        (was, released)
    }

    /// `tid` exited: it leaves every group. The waiters released.
    pub fn exited(&mut self, tid: Tid) -> Vec<Waiter> {
        let names: Vec<String> = self.groups.keys().cloned().collect();
        names.iter().flat_map(|n| self.leave(n, tid).1).collect()
    }

    /// `tids` went back to a checkpoint: the barrier calls their old
    /// processes made are void (the restored ones call again). Membership
    /// stays: joining again keeps the instance.
    pub fn restarted(&mut self, tids: &[Tid]) {
        for g in self.groups.values_mut() {
            g.waiting.retain(|(t, _)| !tids.contains(t));
        }
    }

    /// Members by instance.
    pub fn members(&self, name: &str) -> Vec<(u32, Tid)> {
        self.groups
            .get(name)
            .map(|g| g.members.iter().map(|(&i, &t)| (i, t)).collect())
            .unwrap_or_default()
    }

    /// `tid` reaches the barrier of `name` expecting `count` (0: the group's
    /// size). Returns the waiters to release now (empty while some are
    /// missing), or an error if it is not a member.
    pub fn barrier(
        &mut self,
        name: &str,
        tid: Tid,
        call: u64,
        count: u32,
    ) -> Result<Vec<Waiter>, String> {
        let g = self
            .groups
            .get_mut(name)
            .filter(|g| g.members.values().any(|&t| t == tid))
            .ok_or_else(|| format!("not a member of group {name:?}: join it first"))?;
        if g.waiting.is_empty() {
            g.count = count;
        } else if count != g.count {
            return Err(format!(
                "barrier of {name:?} called with count {count} while others wait for {}",
                g.count
            ));
        }
        g.waiting.push((tid, call));
        Ok(Self::release(g))
    }

    fn release(g: &mut Group) -> Vec<Waiter> {
        let need = if g.count == 0 {
            g.members.len()
        } else {
            g.count as usize
        };
        if !g.waiting.is_empty() && g.waiting.len() >= need {
            std::mem::take(&mut g.waiting)
        } else {
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restart_voids_the_barrier_calls_of_the_old_processes() {
        let mut g = Groups::default();
        for t in [1, 2, 3] {
            g.join("w", t);
        }
        // 1 and 2 wait; the job of 1 and 2 goes back to a checkpoint.
        assert!(g.barrier("w", 1, 100, 0).unwrap().is_empty());
        assert!(g.barrier("w", 2, 101, 0).unwrap().is_empty());
        g.restarted(&[1, 2]);
        // 3 arriving alone does not release anyone: the old calls are void.
        assert!(g.barrier("w", 3, 102, 0).unwrap().is_empty());
        assert!(g.barrier("w", 1, 200, 0).unwrap().is_empty());
        let all = g.barrier("w", 2, 201, 0).unwrap();
        assert_eq!(all, vec![(3, 102), (1, 200), (2, 201)]);
        assert_eq!(g.join("w", 2), 1, "membership stays");
    }

    #[test]
    fn instances_are_the_lowest_free_and_barriers_release_together() {
        let mut g = Groups::default();
        assert_eq!(g.join("w", 10), 0);
        assert_eq!(g.join("w", 11), 1);
        assert_eq!(g.join("w", 12), 2);
        assert_eq!(g.join("w", 11), 1, "joining twice keeps the instance");
        assert!(g.leave("w", 11).0);
        assert_eq!(g.join("w", 13), 1, "the freed instance is reused");
        assert_eq!(g.members("w"), vec![(0, 10), (1, 13), (2, 12)]);
        assert!(g.barrier("w", 99, 1, 0).is_err(), "non-members refused");
        assert!(g.barrier("w", 10, 1, 0).unwrap().is_empty());
        assert!(g.barrier("w", 13, 2, 5).is_err(), "counts must agree");
        assert!(g.barrier("w", 13, 2, 0).unwrap().is_empty());
        // The last member exits: the other two are released.
        assert_eq!(g.exited(12), vec![(10, 1), (13, 2)]);
        assert_eq!(g.barrier("w", 10, 3, 2).unwrap(), Vec::<Waiter>::new());
        assert_eq!(g.barrier("w", 13, 4, 2).unwrap(), vec![(10, 3), (13, 4)]);
        g.leave("w", 10);
        g.leave("w", 13);
        assert!(g.members("w").is_empty());
    }
}
