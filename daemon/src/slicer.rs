//! The gang slicer of one host: which local VPs run now, by the slot table
//! the master sent, on this host's real-time clock.
//!
//! What lives here: the table in force and the one waiting for its boundary,
//! the slot at an instant (`epoch + k * quantum`), the VPs to stop and to
//! continue at each switch (only those that need it), the record of every
//! switch's lateness. Pure: instants are passed in (ns since the Unix
//! epoch), so it is tested without clocks or processes. What does not:
//! sending signals at the instants (the switcher), building tables (the
//! master, from the scheduler's map).
//!
//! Rules: a VP runs in its own slot; a VP of an independent job also runs
//! in any slot whose cell on its processor is empty (Concurrent Gang); a VP
//! the table does not name is left alone; with one slot nobody is stopped;
//! a VP held (its job suspended) is never continued until released.

use std::collections::{BTreeSet, HashSet, VecDeque};

use libmig::msg::{SliceReport, SlotTable, Switch, Tid};

/// What to do at a switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The boundary it carries out (ns since the Unix epoch).
    pub ideal_ns: u64,
    /// VPs to stop first.
    pub stop: Vec<Tid>,
    /// Then VPs to continue.
    pub cont: Vec<Tid>,
    /// The slot it switches to, and its table's generation.
    pub slot: u32,
    /// (See `slot`.)
    pub generation: u64,
}

/// The slicer's state.
#[derive(Debug, Default)]
pub struct Slicer {
    table: Option<SlotTable>,
    pending: Option<SlotTable>,
    /// The last boundary carried out.
    applied: Option<u64>,
    /// VPs this slicer stopped and has not continued.
    stopped: HashSet<Tid>,
    /// VPs held stopped whatever the table says (`hold`), until released.
    held: HashSet<Tid>,
    switches: VecDeque<Switch>,
    installed: Vec<(u64, u64, u64)>,
}

/// Switches kept for the next report.
const KEEP: usize = 512;

/// The latest slot boundary at or before `t`.
fn boundary(t: &SlotTable, at: u64) -> u64 {
    let q = t.quantum_ns.max(1);
    if at <= t.epoch_ns {
        return t.epoch_ns;
    }
    t.epoch_ns + (at - t.epoch_ns) / q * q
}

/// The slot index running at boundary `b`.
fn slot_at(t: &SlotTable, b: u64) -> usize {
    let n = t.slots.len().max(1) as u64;
    ((b.saturating_sub(t.epoch_ns) / t.quantum_ns.max(1)) % n) as usize
}

/// Every VP the table names.
fn known(t: &SlotTable) -> BTreeSet<Tid> {
    t.slots
        .iter()
        .flatten()
        .flat_map(|c| c.tids.iter().copied())
        .collect()
}

/// The VPs that run in slot `s`: its cells, and on processors with no cell
/// in `s`, the independent VPs of that processor.
fn runnable(t: &SlotTable, s: usize) -> BTreeSet<Tid> {
    if t.slots.len() <= 1 {
        return known(t);
    }
    let cells = &t.slots[s];
    let busy: HashSet<u32> = cells.iter().map(|c| c.processor).collect();
    let mut run: BTreeSet<Tid> = cells.iter().flat_map(|c| c.tids.iter().copied()).collect();
    for c in t.slots.iter().flatten() {
        if c.independent && !busy.contains(&c.processor) {
            run.extend(c.tids.iter().copied());
        }
    }
    run
}

impl Slicer {
    /// A table from the master: it takes effect at its boundary, replacing
    /// any table still waiting. Older generations are ignored.
    pub fn install(&mut self, t: SlotTable) {
        let newest = self
            .pending
            .as_ref()
            .or(self.table.as_ref())
            .map_or(0, |x| x.generation);
        if t.generation > newest || (self.table.is_none() && self.pending.is_none()) {
            self.pending = Some(t);
        }
    }

    /// When something may next change (ns), if ever.
    pub fn next_due(&self) -> Option<u64> {
        let pending = self.pending.as_ref().map(|p| p.from_ns);
        let next = self
            .table
            .as_ref()
            .filter(|t| t.slots.len() > 1)
            .map(|t| match self.applied {
                Some(a) => a + t.quantum_ns.max(1),
                None => t.from_ns,
            });
        match (pending, next) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// At `now`: the switch to carry out, if one is due.
    pub fn at(&mut self, now: u64) -> Option<Plan> {
        let mut changed = false;
        if self.pending.as_ref().is_some_and(|p| p.from_ns <= now) {
            let t = self.pending.take()?;
            self.installed.push((t.generation, t.from_ns, now));
            if self.installed.len() > 64 {
                self.installed.remove(0);
            }
            // VPs the new table no longer names are not ours to hold.
            let names = known(&t);
            let freed: Vec<Tid> = self
                .stopped
                .iter()
                .filter(|v| !names.contains(v))
                .copied()
                .collect();
            self.table = Some(t);
            self.applied = None;
            changed = true;
            if !freed.is_empty() {
                for v in &freed {
                    self.stopped.remove(v);
                }
                let mut plan = self.plan(now)?;
                plan.cont
                    .extend(freed.into_iter().filter(|v| !self.held.contains(v)));
                return Some(plan);
            }
        }
        let t = self.table.as_ref()?;
        let b = boundary(t, now);
        if !changed && (t.slots.len() <= 1 || self.applied.is_some_and(|a| a >= b)) {
            return None;
        }
        self.plan(now)
    }

    fn plan(&mut self, now: u64) -> Option<Plan> {
        let t = self.table.as_ref()?;
        let b = boundary(t, now);
        self.applied = Some(b);
        let run = runnable(t, slot_at(t, b));
        let stop: Vec<Tid> = known(t)
            .into_iter()
            .filter(|v| !run.contains(v) && !self.stopped.contains(v))
            .collect();
        let cont: Vec<Tid> = run
            .iter()
            .filter(|v| self.stopped.contains(v) && !self.held.contains(v))
            .copied()
            .collect();
        for v in &stop {
            self.stopped.insert(*v);
        }
        for v in &cont {
            self.stopped.remove(v);
        }
        Some(Plan {
            ideal_ns: b,
            stop,
            cont,
            slot: slot_at(t, b) as u32,
            generation: t.generation,
        })
    }

    /// May `tid` run now (not held, and not named by the table or in the
    /// slot in force)?
    pub fn may_run(&self, tid: Tid) -> bool {
        !self.stopped.contains(&tid) && !self.held.contains(&tid)
    }

    /// Is `tid` held (`hold`)?
    pub fn held(&self, tid: Tid) -> bool {
        self.held.contains(&tid)
    }

    /// Hold `tids` stopped from now on whatever the table says (their job
    /// is suspended): the caller stops them now.
    pub fn hold(&mut self, tids: &[Tid]) {
        self.held.extend(tids.iter().copied());
    }

    /// Release held `tids`: those that may run now (not named by the table,
    /// one slot, or theirs is the slot in force), which the caller
    /// continues; the others wait, stopped, for their slot.
    pub fn release(&mut self, tids: &[Tid]) -> Vec<Tid> {
        let mut cont = Vec::new();
        for &tid in tids {
            if !self.held.remove(&tid) {
                continue;
            }
            let waits = match (&self.table, self.applied) {
                (Some(t), Some(b)) if t.slots.len() > 1 && known(t).contains(&tid) => {
                    !runnable(t, slot_at(t, b)).contains(&tid)
                }
                _ => false,
            };
            if waits {
                self.stopped.insert(tid);
            } else {
                self.stopped.remove(&tid);
                cont.push(tid);
            }
        }
        cont
    }

    /// A VP started here: should it be stopped at once (named by the table
    /// but not running in the slot in force)?
    pub fn started(&mut self, tid: Tid) -> bool {
        if self.held.contains(&tid) {
            return true;
        }
        let Some(t) = &self.table else { return false };
        let Some(b) = self.applied else { return false };
        if t.slots.len() <= 1 || !known(t).contains(&tid) {
            return false;
        }
        let stop = !runnable(t, slot_at(t, b)).contains(&tid);
        if stop {
            self.stopped.insert(tid);
        }
        stop
    }

    /// A VP ended here.
    pub fn gone(&mut self, tid: Tid) {
        self.stopped.remove(&tid);
        self.held.remove(&tid);
    }

    /// The slot in force, when slicing.
    pub fn slot_now(&self) -> Option<usize> {
        let t = self.table.as_ref()?;
        let b = self.applied?;
        (t.slots.len() > 1).then(|| slot_at(t, b))
    }

    /// Record a switch carried out.
    pub fn record(&mut self, s: Switch) {
        if self.switches.len() == KEEP {
            self.switches.pop_front();
        }
        self.switches.push_back(s);
    }

    /// What happened since the last report, if anything.
    pub fn report(&mut self) -> Option<SliceReport> {
        if self.switches.is_empty() && self.installed.is_empty() {
            return None;
        }
        Some(SliceReport {
            generation: self.table.as_ref().map_or(0, |t| t.generation),
            switches: self.switches.drain(..).collect(),
            installed: std::mem::take(&mut self.installed),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libmig::msg::SlotCell;

    const Q: u64 = 100;

    fn cell(p: u32, tids: &[Tid], independent: bool) -> SlotCell {
        SlotCell {
            processor: p,
            tids: tids.to_vec(),
            independent,
        }
    }

    fn table(generation: u64, from: u64, slots: Vec<Vec<SlotCell>>) -> SlotTable {
        SlotTable {
            generation,
            epoch_ns: 1000,
            from_ns: from,
            quantum_ns: Q,
            slots,
        }
    }

    #[test]
    fn two_slots_alternate_at_each_boundary_and_stop_before_they_continue() {
        let mut s = Slicer::default();
        s.install(table(
            1,
            1000,
            vec![vec![cell(0, &[1], false)], vec![cell(0, &[2], false)]],
        ));
        assert_eq!(s.next_due(), Some(1000));
        assert_eq!(s.at(999), None);
        let p = s.at(1003).unwrap();
        assert_eq!(
            (p.ideal_ns, p.stop.clone(), p.cont.clone()),
            (1000, vec![2], vec![])
        );
        assert_eq!(s.next_due(), Some(1100));
        assert_eq!(s.at(1050), None);
        let p = s.at(1101).unwrap();
        assert_eq!((p.ideal_ns, p.stop, p.cont), (1100, vec![1], vec![2]));
        assert_eq!(s.slot_now(), Some(1));
        // Late by more than a slot: the slot in force now, nothing in between.
        let p = s.at(1420).unwrap();
        assert_eq!((p.ideal_ns, p.stop, p.cont), (1400, vec![2], vec![1]));
    }

    #[test]
    fn one_slot_never_stops_anyone_and_a_job_leaving_frees_the_other() {
        let mut s = Slicer::default();
        s.install(table(
            1,
            1000,
            vec![vec![cell(0, &[1], false)], vec![cell(0, &[2], false)]],
        ));
        s.at(1100).unwrap();
        assert!(!s.may_run(1));
        // Job 1 ends: one slot left, taking effect at 1300.
        s.install(table(2, 1300, vec![vec![cell(0, &[2], false)]]));
        s.at(1200).unwrap();
        // At 1200 slot 0 ran VP 1 and stopped VP 2: the one-slot table
        // continues VP 2 and stops nobody.
        let p = s.at(1300).unwrap();
        assert_eq!(p.stop, Vec::<Tid>::new());
        assert_eq!(p.cont, vec![2]);
        assert!(s.may_run(1) && s.may_run(2));
        assert_eq!(s.next_due(), None);
        assert_eq!(s.at(5000), None);
        let r = s.report().unwrap();
        assert_eq!(
            r.installed.iter().map(|i| i.0).collect::<Vec<_>>(),
            vec![1, 2]
        );
        assert!(s.report().is_none());
    }

    #[test]
    fn an_independent_vp_fills_its_processors_empty_cells() {
        let mut s = Slicer::default();
        // Slot 0: gang job on processors 0 and 1. Slot 1: an independent VP
        // on processor 1, processor 0 empty. Slot 2: a gang VP on 0 only.
        s.install(table(
            1,
            1000,
            vec![
                vec![cell(0, &[1], false), cell(1, &[2], false)],
                vec![cell(1, &[3], true)],
                vec![cell(0, &[4], false)],
            ],
        ));
        let p = s.at(1000).unwrap();
        assert_eq!(p.stop, vec![3, 4]);
        let p = s.at(1100).unwrap();
        assert_eq!((p.stop, p.cont), (vec![1, 2], vec![3]));
        // Slot 2: processor 1 has no cell, so its independent VP runs on.
        let p = s.at(1200).unwrap();
        assert_eq!((p.stop, p.cont), (vec![], vec![4]));
        assert!(s.may_run(3));
    }

    #[test]
    fn a_new_table_waits_for_its_boundary_and_vps_it_drops_are_freed() {
        let mut s = Slicer::default();
        s.install(table(
            1,
            1000,
            vec![vec![cell(0, &[1], false)], vec![cell(0, &[2], false)]],
        ));
        s.at(1000).unwrap();
        s.install(table(
            3,
            1200,
            vec![vec![cell(0, &[1], false)], vec![cell(0, &[5], false)]],
        ));
        // An older table arriving late changes nothing.
        s.install(table(2, 1100, vec![vec![cell(0, &[9], false)]]));
        let p = s.at(1100).unwrap();
        assert_eq!((p.stop, p.cont), (vec![1], vec![2]));
        let p = s.at(1200).unwrap();
        assert_eq!(p.ideal_ns, 1200);
        assert_eq!(p.stop, vec![5]);
        assert_eq!(p.cont, vec![1]);
        // VP 2 is no longer named: it was running, it stays so.
        assert!(s.may_run(2));
        assert!(!s.may_run(5));
    }

    #[test]
    fn a_vp_started_outside_its_slot_is_stopped() {
        let mut s = Slicer::default();
        s.install(table(
            1,
            1000,
            vec![vec![cell(0, &[1], false)], vec![cell(0, &[2], false)]],
        ));
        s.at(1000).unwrap();
        // VP 2's slot is not running: stopped as it starts.
        assert!(s.started(2));
        assert!(!s.started(1));
        assert!(!s.started(77), "a VP the table does not name runs");
    }

    #[test]
    fn a_held_vp_is_never_continued_until_released_and_then_waits_for_its_slot() {
        let mut s = Slicer::default();
        s.install(table(
            1,
            1000,
            vec![vec![cell(0, &[1], false)], vec![cell(0, &[2], false)]],
        ));
        s.at(1003).unwrap();
        // 1 runs in slot 0; held, it is not continued at its next turn.
        s.hold(&[1]);
        assert!(!s.may_run(1));
        let p = s.at(1101).unwrap();
        assert_eq!((p.stop, p.cont), (vec![1], vec![2]));
        let p = s.at(1201).unwrap();
        assert_eq!((p.stop.clone(), p.cont.clone()), (vec![2], vec![]), "{p:?}");
        // A table that no longer names it does not free it either.
        s.install(table(2, 1300, vec![vec![cell(0, &[2], false)]]));
        let p = s.at(1301).unwrap();
        assert!(!p.cont.contains(&1), "{p:?}");
        assert!(s.started(1), "a held VP started here is stopped at once");
        // Released while the table names it not: it may run at once.
        assert_eq!(s.release(&[1]), vec![1]);
        assert!(s.may_run(1));
        assert!(s.release(&[1]).is_empty(), "released once");
        // Released outside its slot: it waits for its turn.
        s.install(table(
            3,
            1400,
            vec![vec![cell(0, &[1], false)], vec![cell(0, &[3], false)]],
        ));
        s.at(1401).unwrap();
        s.hold(&[1]);
        let p = s.at(1501).unwrap();
        assert!(p.cont.contains(&3));
        assert!(s.release(&[1]).is_empty(), "slot 1 runs now");
        let p = s.at(1601).unwrap();
        assert_eq!((p.stop, p.cont), (vec![3], vec![1]));
    }
}
