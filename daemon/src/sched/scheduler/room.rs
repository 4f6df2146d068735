//! Making room by migration (Zhang, Franke, Moreira and Sivasubramaniam's
//! MBGS): the oldest waiting job, which fits in no slot, starts now where
//! moving a few jobs out of one slot into the free cells of others frees
//! enough of that slot for it.
//!
//! What lives here: choosing the slot and the jobs that leave it, and
//! carrying the moves out. What does not: where a moved job goes (the
//! fullest slot that takes it whole or as fast as now: `columns::best_target`,
//! compaction's choice), the promise made when no such moves exist
//! (`admission::reserve`), or placing the job itself (`place_fresh`).

use std::collections::HashMap;

use super::{Ctx, Scheduler};
use crate::sched::expand::Demand;
use crate::sched::map::{BitSet, JobKey, Row};

impl Scheduler {
    /// Move jobs out of one slot so that job `k` fits there by the
    /// turnaround of a slot of its own: in the slot with most free cells
    /// of its rows first, the jobs holding the fewest VPs first, each to
    /// the fullest other slot that takes it no slower (shifted whole
    /// where its processors are free there, else migrated), at most
    /// `compact_moves` VP moves in all. Nothing moves unless `k` then
    /// fits. True if it was done.
    pub(super) fn make_room(&mut self, k: JobKey, ctx: &mut Ctx) -> bool {
        if !self.cfg.compact || self.map.columns().len() < 2 {
            return false;
        }
        let (demand, t_new) = self.demand_of(k);
        if demand.counts.is_empty() || !t_new.is_finite() {
            return false;
        }
        let bound = t_new * (1.0 + 1e-9);
        let mut order: Vec<(usize, u64)> = self
            .map
            .columns()
            .iter()
            .map(|c| (c.free().intersection_len(&demand.rows), c.id))
            .collect();
        order.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        for (_, c) in order {
            if let Some(plan) = self.room_plan(k, c, &demand, bound) {
                for (job, column, rows, counts) in plan {
                    self.apply(job, vec![column], &rows, &counts, ctx);
                }
                return true;
            }
        }
        false
    }

    /// The jobs that would leave column `c` for job `k` (with `demand`) to
    /// fit there by `bound`, each with its new column and plan; `None`
    /// where no such moves within the budget make it fit.
    #[allow(clippy::type_complexity)]
    fn room_plan(
        &self,
        k: JobKey,
        c: u64,
        demand: &Demand,
        bound: f64,
    ) -> Option<Vec<(JobKey, u64, Vec<Row>, Vec<u32>)>> {
        let col = self.map.column(c)?;
        let mut room = col.free().clone();
        room.intersect_with(&demand.rows);
        // Only jobs on rows `k` could use, running in this slot alone with
        // every VP placed, can make room by leaving.
        let mut jobs: Vec<JobKey> = col.jobs().map(|(_, j)| j).collect();
        jobs.sort_unstable();
        jobs.dedup();
        jobs.retain(|&j| {
            let job = self.job(j);
            j != k
                && job.columns == [c]
                && job.placed as usize == job.vps.len()
                && job.row_set.intersection_len(&demand.rows) > 0
        });
        // Quick refusal: not even all of them leaving would do.
        let mut most = room.clone();
        for &j in &jobs {
            most.union_with(&self.job(j).row_set);
        }
        most.intersect_with(&demand.rows);
        if !self.counts_fit_by(&demand.counts, &most, bound) {
            return None;
        }
        jobs.sort_by_key(|&j| (self.job(j).placed, j));
        let others: Vec<u64> = self
            .map
            .columns()
            .iter()
            .map(|x| x.id)
            .filter(|&x| x != c)
            .collect();
        let mut free: Vec<BitSet> = others
            .iter()
            .filter_map(|&x| self.map.column(x).map(|col| col.free().clone()))
            .collect();
        let mut left = self.cfg.compact_moves;
        let mut plan = Vec::new();
        // Memory the moves planned so far take on their new hosts.
        let mut taken = HashMap::new();
        for j in jobs {
            let Some(t) = self
                .best_target(j, &free, left)
                .filter(|t| self.take_memory(j, &t.rows, &t.counts, &mut taken))
            else {
                continue;
            };
            left -= t.moves;
            for (&r, &n) in t.rows.iter().zip(&t.counts) {
                if n > 0 {
                    free[t.slot].remove(r);
                }
            }
            let mut gone = self.job(j).row_set.clone();
            gone.intersect_with(&demand.rows);
            room.union_with(&gone);
            plan.push((j, others[t.slot], t.rows, t.counts));
            if self.counts_fit_by(&demand.counts, &room, bound) {
                return Some(plan);
            }
        }
        None
    }
}
