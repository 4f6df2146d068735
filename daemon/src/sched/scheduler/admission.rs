//! Admission with backfilling (`SchedConfig::backfill`): which waiting job
//! starts, where, and what every event leaves the map as.
//!
//! What lives here: the pass every event ends with in this mode
//! (`rebalance`): jobs give up the slots beyond their first (`contract`),
//! slots are emptied by moving jobs (`compact`, in `columns`), waiting jobs
//! are admitted oldest first wherever they fit, with a slot held for the
//! oldest one that has been passed too often, and every job then runs in
//! each further slot where its processors are free (`fill`). What does not:
//! the paper's own order (held jobs in fairness order, Expansion, then
//! re-packing: `placing`), or the searches themselves (`expand`, `mtat`).

use super::*;

impl Scheduler {
    /// The end of every event in backfill mode. A job's slots beyond its
    /// first are only lent: they are taken back before anything is placed,
    /// so that a slot holding nothing else can go and a waiting job can
    /// start there, and lent again at the end.
    pub(super) fn rebalance(&mut self, ctx: &mut Ctx) {
        // Only an event that freed cells can let a slot go, and only one
        // that did or left a job waiting needs the lent cells back.
        let freed = !ctx.freed.is_empty() || ctx.all_freed;
        let mut changed: Vec<(JobKey, Vec<u64>)> = Vec::new();
        if freed || !self.waiting.is_empty() {
            changed = self.contract(ctx);
            self.drop_empty_columns(ctx);
            if freed {
                // Compaction first (it prefers shifts that move no VP);
                // seed 001's global re-packing where it deleted nothing.
                let slots = self.map.columns().len();
                self.compact(ctx);
                if self.map.columns().len() == slots {
                    self.repack(ctx);
                }
            }
            self.admit(ctx, freed);
            self.expand_jobs(ctx);
        }
        if self.cfg.align && self.may_align() {
            if changed.is_empty() {
                changed = self.contract(ctx);
                self.drop_empty_columns(ctx);
            }
            self.align(ctx);
        }
        changed.extend(self.fill());
        // Jobs whose set of slots changed have new cells on their rows (a
        // job lent back what it had changes nothing).
        changed.sort_by_key(|(k, _)| *k);
        changed.dedup_by_key(|(k, _)| *k);
        for (k, mut old) in changed {
            let Some(j) = self.jobs.get(k as usize).and_then(Option::as_ref) else {
                continue;
            };
            let mut now = j.columns.clone();
            old.sort_unstable();
            now.sort_unstable();
            if old != now {
                let rows: Vec<Row> = j.rows.keys().copied().collect();
                for r in rows {
                    self.dirty_row(r, ctx);
                }
            }
        }
    }

    /// Every job keeps only its first slot; the cells of the others are
    /// free again (no VP moves: the job simply runs in fewer slots).
    /// Returns the jobs that gave slots back, with the slots they had.
    fn contract(&mut self, ctx: &mut Ctx) -> Vec<(JobKey, Vec<u64>)> {
        let mut had = Vec::new();
        for k in self.fair_order() {
            let j = self.job(k);
            if j.columns.len() < 2 {
                continue;
            }
            had.push((k, j.columns.clone()));
            let extra: Vec<u64> = j.columns[1..].to_vec();
            let rows: Vec<Row> = j.rows.keys().copied().collect();
            for &c in &extra {
                self.map.set_rows(c, &rows, None);
                ctx.freed.push(c);
            }
            self.job_mut(k).columns.truncate(1);
        }
        had
    }

    /// Every placed job also runs in each slot where all its processors
    /// are free (fairness order): free cells then do work, and a job in `w`
    /// of the round's `τ` slots runs `w / τ` of the time. The slot held for
    /// a waiting job too: what is lent is taken back before jobs are
    /// admitted, so the waiting job still finds it free.
    /// Returns the jobs lent slots, with the slots they had before.
    fn fill(&mut self) -> Vec<(JobKey, Vec<u64>)> {
        let mut lent = Vec::new();
        for k in self.fair_order() {
            let j = self.job(k);
            if j.columns.is_empty() || j.row_set.is_empty() {
                continue;
            }
            let extra: Vec<u64> = self
                .map
                .columns()
                .iter()
                .filter(|c| {
                    !j.columns.contains(&c.id)
                        && c.free_count() >= j.rows.len()
                        && j.row_set.is_subset(c.free())
                })
                .map(|c| c.id)
                .collect();
            if extra.is_empty() {
                continue;
            }
            lent.push((k, j.columns.clone()));
            let rows: Vec<Row> = j.rows.keys().copied().collect();
            for &c in &extra {
                self.map.set_rows(c, &rows, Some(k));
            }
            self.job_mut(k).columns.extend(extra);
        }
        lent
    }

    /// The slot with the fewest free cells (of the job's architectures)
    /// where the job finishes by `bound`, with its plan there: best fit
    /// keeps the roomiest slots whole for wide jobs.
    pub(super) fn best_fit(
        &self,
        k: JobKey,
        demand: &Demand,
        bound: f64,
    ) -> Option<(Vec<u64>, Vec<Row>, Vec<u32>)> {
        let bound = bound * (1.0 + 1e-9);
        // Counted per capacity class first: most slots are refused without
        // a look at their rows.
        let room = self.class_room(&demand.counts, bound);
        let mut columns: Vec<(usize, usize)> = self
            .map
            .columns()
            .iter()
            .enumerate()
            .filter(|(_, c)| Some(c.id) != demand.avoid && self.column_fits(&room, c))
            .map(|(pos, c)| (c.free().intersection_len(&demand.rows), pos))
            .collect();
        columns.sort_unstable();
        columns.into_iter().find_map(|(_, pos)| {
            let c = self.map.columns().get(pos)?;
            let mut free = c.free().clone();
            if demand.rows.len() < self.map.live().len() {
                // Rows it may not use (memory, a placement's choice): the
                // count on those it may use says no as MTAT would, for
                // less than MTAT costs. (As MTAT does, an architecture
                // with no row here is left out: its VPs are held.)
                free.intersect_with(&demand.rows);
                let present: Vec<(u32, u32)> = demand
                    .counts
                    .iter()
                    .copied()
                    .filter(|&(a, _)| {
                        self.map
                            .arch_rows(a)
                            .is_some_and(|r| r.intersection_len(&free) > 0)
                    })
                    .collect();
                if present.is_empty() || !self.counts_fit_by(&present, &free, bound) {
                    return None;
                }
            }
            let rows = free.to_vec();
            let (t, counts) = self.plan(k, &rows, true, 0.0)?;
            (t <= bound).then_some((vec![c.id], rows, counts))
        })
    }

    /// The column job `k` may not use: the one held for an older job.
    pub(super) fn avoided_by(&self, k: JobKey) -> Option<u64> {
        self.reserved
            .filter(|&(holder, _)| holder != k)
            .map(|(_, c)| c)
    }

    /// Job `k` was just placed if it has columns: every older job still
    /// waiting for its first place has been passed once more.
    fn note_passed(&mut self, k: JobKey) {
        if self.job(k).columns.is_empty() {
            return;
        }
        let seq = self.job(k).seq;
        let older: Vec<JobKey> = self
            .waiting
            .iter()
            .copied()
            .filter(|&w| {
                let j = self.job(w);
                j.seq < seq && j.columns.is_empty()
            })
            .collect();
        for w in older {
            let j = self.job_mut(w);
            j.passed = j.passed.saturating_add(1);
        }
    }

    /// Waiting jobs oldest first, each placed where it fits; the oldest
    /// that fits nowhere once `patience` younger jobs have passed it gets
    /// a column held for it (the one with most free cells of its
    /// architectures) until it starts.
    pub(super) fn admit(&mut self, ctx: &mut Ctx, freed: bool) {
        if let Some((holder, c)) = self.reserved {
            if !self.waiting.contains(&holder) || self.map.column(c).is_none() {
                self.reserved = None;
            }
        }
        if self.waiting.is_empty() {
            return;
        }
        // With no cell freed, a job that found no room last time finds none
        // now: only jobs submitted since are tried.
        let since = if freed { 0 } else { self.admitted_upto };
        self.admitted_upto = self.submitted;
        let mut order: Vec<JobKey> = self
            .waiting
            .iter()
            .copied()
            .filter(|&k| self.job(k).seq >= since)
            .collect();
        order.sort_by_key(|&k| self.job(k).seq);
        for k in order {
            let j = self.job(k);
            let placeable = j
                .vps
                .values()
                .any(|v| v.row.is_none() && self.usable(k, v.arch));
            if !placeable {
                continue;
            }
            if !j.columns.is_empty() {
                self.reposition(k, ctx);
                continue;
            }
            self.place_fresh(k, ctx);
            self.note_passed(k);
            if self.job(k).columns.is_empty()
                && self.reserved.is_none()
                && self.job(k).passed >= self.cfg.patience
            {
                self.reserved = self.roomiest_column(k).map(|c| (k, c));
            }
        }
        if let Some((holder, _)) = self.reserved {
            if !self.job(holder).columns.is_empty() {
                self.reserved = None;
            }
        }
    }

    /// The column with the most free cells of job `k`'s architectures (the
    /// earliest on a tie).
    fn roomiest_column(&self, k: JobKey) -> Option<u64> {
        let (demand, _) = self.demand_of(k);
        self.map
            .columns()
            .iter()
            .map(|c| (c.free().intersection_len(&demand.rows), c.id))
            .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)))
            .map(|(_, c)| c)
    }
}
