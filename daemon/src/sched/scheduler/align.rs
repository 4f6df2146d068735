//! Alignment (`SchedConfig::align`): with few slots, a job that runs in one
//! slot is moved onto the processors of a job of another slot, so that the
//! free cells it leaves let more of the other slot's jobs be lent its slot
//! (`admission::fill`): two slots of `P` cells hold `D > P` processors'
//! worth of jobs with only `2D - 2P` at half speed when they line up.
//!
//! What lives here: choosing such a move and making it. What does not:
//! lending the slots (`admission`), deleting slots (`columns::compact`).

use super::{Ctx, Scheduler};
use crate::sched::map::{BitSet, JobKey, Row};

/// Alignment runs on maps of at most this many slots: there a slot lent
/// is a large share of the round, and the search is cheap.
const ALIGN_MAX_SLOTS: usize = 3;

impl Scheduler {
    /// Is the map small enough in slots for alignment?
    pub(super) fn may_align(&self) -> bool {
        (2..=ALIGN_MAX_SLOTS).contains(&self.map.columns().len())
    }

    /// Jobs that run in one slot only, with their slot.
    fn single_slot_jobs(&self) -> Vec<(JobKey, u64)> {
        self.jobs
            .iter()
            .enumerate()
            .filter_map(|(k, j)| {
                let j = j.as_ref()?;
                (j.columns.len() == 1 && !j.row_set.is_empty() && j.held == 0)
                    .then(|| (k as JobKey, j.columns[0]))
            })
            .collect()
    }

    /// Processors' worth of jobs of slots other than `b` that `free` (the
    /// free cells of slot `b`) could lend `b`.
    fn lendable(&self, singles: &[(JobKey, u64)], b: u64, free: &BitSet) -> usize {
        singles
            .iter()
            .filter(|&&(_, c)| c != b)
            .map(|&(k, _)| &self.job(k).row_set)
            .filter(|rows| rows.is_subset(free))
            .map(BitSet::len)
            .sum()
    }

    /// Move single-slot jobs onto the processors of another slot's job
    /// where that lets more be lent, as long as none gets slower and at
    /// most `compact_moves` VPs move.
    pub(super) fn align(&mut self, ctx: &mut Ctx) {
        if !self.may_align() {
            return;
        }
        let mut budget = self.cfg.compact_moves;
        let singles = self.single_slot_jobs();
        // Largest first: they free (or block) the most.
        let mut movers: Vec<(JobKey, u64)> = singles.clone();
        movers.sort_by_key(|&(k, _)| std::cmp::Reverse(self.job(k).row_set.len()));
        for (y, b) in movers {
            if budget == 0 {
                break;
            }
            let j = self.job(y);
            // (Processors a placement policy chose, and VPs that cannot be
            // moved, stay where they are.)
            // (Nor does a job move within the column promised to a
            // waiting one: it could take the cells promised.)
            if j.columns != [b]
                || self.avoided_by(y) == Some(b)
                || j.only.is_some()
                || j.vps.values().any(|v| v.pinned && v.at.is_some())
            {
                continue;
            }
            let Some(col) = self.map.column(b) else {
                continue;
            };
            let own = j.row_set.clone();
            // Where it may go: its own rows, and the free ones of its slot
            // of its architectures with the memory it needs.
            let mut open = self.free_candidates(y);
            open.union_with(&own);
            let free = col.free().clone();
            let now = self.lendable(&singles, b, &free);
            let t_now = self.current_t(y);
            // The best other job to sit on: the most lent afterwards.
            let mut best: Option<(usize, Vec<Row>, Vec<u32>)> = None;
            for &(x, a) in &singles {
                if a == b || x == y {
                    continue;
                }
                let mut rows = self.job(x).row_set.clone();
                rows.intersect_with(&open);
                // (Fewer processors could hold it as fast only if faster
                // ones: not looked for.)
                if rows.len() < own.len() {
                    continue;
                }
                let rows = rows.to_vec();
                let Some((t, counts)) = self.plan(y, &rows, true, 0.0) else {
                    continue;
                };
                if t > t_now * (1.0 + 1e-9)
                    || self.optional_moves(y, &rows, &counts) > budget
                    || !self.keeps_promise(y, &rows, &counts)
                {
                    continue;
                }
                let mut after = free.clone();
                after.union_with(&own);
                for (&r, &n) in rows.iter().zip(&counts) {
                    if n > 0 {
                        after.remove(r);
                    }
                }
                let gain = self.lendable(&singles, b, &after);
                if gain > now && best.as_ref().is_none_or(|(g, _, _)| gain > *g) {
                    best = Some((gain, rows, counts));
                }
            }
            if let Some((_, rows, counts)) = best {
                budget -= self.optional_moves(y, &rows, &counts);
                self.apply(y, vec![b], &rows, &counts, ctx);
            }
        }
    }
}
