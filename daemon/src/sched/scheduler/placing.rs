//! Carrying a plan out on the map: which VPs stay, which move and where
//! (Start, Migrate, Hold), placing new and held VPs, Expansion into free
//! cells, and removing a job.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use super::{Ctx, PoolInput, Scheduler};
use crate::sched::compress::compress_pools;
use crate::sched::event::Action;
use crate::sched::expand::Demand;
use crate::sched::map::{BitSet, JobKey, Row};
use crate::sched::mtat::finish_time;

/// What decides a slot of its own's plan for a job with no VP placed:
/// its VPs per architecture, the rows it may use, and the turnaround
/// (bits) it is compressed to.
pub(super) type FreshKey = (Vec<(u32, u32)>, BitSet, u64);

/// A slot of its own's plan (`Scheduler::fresh_plan`): the rows it may
/// use, the MTAT input there, and Compression's VPs per row.
pub(super) struct FreshPlan {
    all: Vec<Row>,
    inp: Option<PoolInput>,
    counts: Option<Vec<u32>>,
}

#[cfg(test)]
impl FreshPlan {
    /// Its rows, MTAT input and Compression's VPs per row.
    pub(super) fn parts(&self) -> (&[Row], Option<&PoolInput>, Option<&Vec<u32>>) {
        (&self.all, self.inp.as_ref(), self.counts.as_ref())
    }
}

impl Scheduler {
    /// MTAT's input for job `k` on `demand`'s rows and Compression there
    /// to `t_new`, its turnaround in a slot of its own. For a job with no
    /// VP placed these depend only on its VPs per architecture, those rows
    /// and `t_new` (and the processors' capacities): kept per those until
    /// a processor joins or leaves, and shared by the waiting jobs alike
    /// in them.
    pub(super) fn fresh_plan(&self, k: JobKey, demand: &Demand, t_new: f64) -> Arc<FreshPlan> {
        let compute = || {
            let all = demand.rows.to_vec();
            let inp = self.pool_input(k, &all);
            let counts = inp.as_ref().and_then(|inp| {
                compress_pools(&inp.counts, &inp.pool_of, &inp.caps, t_new, &inp.current)
            });
            Arc::new(FreshPlan { all, inp, counts })
        };
        let j = self.job(k);
        if !j.rows.is_empty() || !j.row_set.is_empty() {
            return compute();
        }
        let key: FreshKey = (j.arches.clone(), demand.rows.clone(), t_new.to_bits());
        if let Some(plan) = self.fresh_plans.borrow().get(&key) {
            return plan.clone();
        }
        let plan = compute();
        let mut plans = self.fresh_plans.borrow_mut();
        // (Bounded: sizes of job seldom run to many.)
        if plans.len() >= 64 {
            plans.clear();
        }
        plans.insert(key, plan.clone());
        plan
    }

    /// Put the job in `columns` with `counts[i]` VPs on `rows[i]`: frees its
    /// old cells, moves as few VPs as it can, and emits Start/Migrate/Hold.
    pub(super) fn apply(
        &mut self,
        k: JobKey,
        columns: Vec<u64>,
        rows: &[Row],
        counts: &[u32],
        ctx: &mut Ctx,
    ) {
        if self.still_held_whole(k, counts, ctx) {
            return;
        }
        let (old_cols, old_rows): (Vec<u64>, Vec<Row>) = {
            let j = self.job(k);
            (j.columns.clone(), j.rows.keys().copied().collect())
        };
        for &c in &old_cols {
            self.map.set_rows(c, &old_rows, None);
        }
        let same_columns = {
            let mut a = old_cols.clone();
            let mut b = columns.clone();
            a.sort_unstable();
            b.sort_unstable();
            a == b
        };
        let (mut assignments, mut unplaced) = self.assign(k, &columns, rows, counts);
        if self.job(k).memory_mb.is_some() {
            let moving: BTreeSet<u32> = assignments
                .iter()
                .map(|&(i, _)| i)
                .chain(unplaced.iter().copied())
                .collect();
            let mut kept: BTreeMap<Row, u32> = BTreeMap::new();
            for (i, v) in &self.job(k).vps {
                if let Some(r) = v.row.filter(|_| !moving.contains(i)) {
                    *kept.entry(r).or_default() += 1;
                }
            }
            let kept: Vec<(Row, u32)> = kept.into_iter().collect();
            unplaced.extend(self.within_memory(k, &kept, &mut assignments));
        }
        self.place_assigned(k, assignments, ctx);
        self.hold_all(k, unplaced, ctx);
        self.settle(k, columns, &old_cols, &old_rows, same_columns, ctx);
    }

    /// A job already held whole that gets nowhere again: nothing changes
    /// (the common case of a job waiting at the slot cap). True if so.
    fn still_held_whole(&mut self, k: JobKey, counts: &[u32], ctx: &mut Ctx) -> bool {
        let j = self.job(k);
        // (With no rows, no VP has one.)
        let nowhere = j.rows.is_empty()
            && j.columns.is_empty()
            && counts.iter().all(|&n| n == 0)
            && j.held as usize == j.vps.len();
        if !nowhere {
            return false;
        }
        if j.vps.is_empty() {
            self.waiting.remove(&k);
        } else {
            self.waiting.insert(k);
        }
        self.drop_empty_columns(ctx);
        true
    }

    /// Which VPs stay on their rows, and where the others go to fill
    /// `counts[i]` on `rows[i]`: (VP, row) for each that moves or starts,
    /// and the VPs left without a row. Dense by row: jobs can span
    /// thousands of rows. A pinned VP that has started goes nowhere but its
    /// own processor, whatever the counts say, where that is in the pool
    /// and free in `columns`; else it is left without a row (held). So
    /// does a started VP of a job whose processors a placement policy
    /// chose (that policy moves it, or its processor leaves and the choice
    /// with it).
    fn assign(
        &self,
        k: JobKey,
        columns: &[u64],
        rows: &[Row],
        counts: &[u32],
    ) -> (Vec<(u32, Row)>, Vec<u32>) {
        let width = self.map.row_capacity();
        let mut want = vec![0u32; width];
        let mut target_rows: Vec<Row> = Vec::with_capacity(rows.len());
        for (&r, &n) in rows.iter().zip(counts) {
            if r < width && n > 0 {
                want[r] = n;
                target_rows.push(r);
            }
        }
        target_rows.sort_unstable();
        target_rows.dedup();
        let mut kept = vec![0u32; width];
        // VPs that must find a row: (index, architecture, placed before).
        let mut movers: Vec<(u32, u32, bool)> = Vec::new();
        let mut assignments: Vec<(u32, Row)> = Vec::new();
        let mut stuck: Vec<u32> = Vec::new();
        // (The job's own cells were emptied by `apply`.)
        let free_in_columns = |r: Row| {
            !columns.is_empty()
                && columns
                    .iter()
                    .all(|&c| self.map.column(c).is_some_and(|col| col.cell(r).is_none()))
        };
        let chosen = self.job(k).only.is_some();
        for (&i, v) in &self.job(k).vps {
            if let (true, Some(at)) = (v.pinned || chosen, &v.at) {
                let own = self
                    .map
                    .row_of(&at.0)
                    .filter(|&r| r < width && free_in_columns(r));
                match own {
                    Some(r) => {
                        kept[r] += 1;
                        if v.row != Some(r) {
                            assignments.push((i, r));
                        }
                    }
                    None => stuck.push(i),
                }
                continue;
            }
            match v.row {
                Some(r) if r < width && kept[r] < want[r] => kept[r] += 1,
                _ => movers.push((i, v.arch, v.row.is_some() || v.at.is_some())),
            }
        }
        // Place movers in row order, each on a row of its architecture;
        // placed movers first so that new or held VPs fill what is left.
        let mut queues: BTreeMap<u32, VecDeque<u32>> = BTreeMap::new();
        for placed in [true, false] {
            for &(i, arch, was) in &movers {
                if was == placed {
                    queues.entry(arch).or_default().push_back(i);
                }
            }
        }
        for &r in &target_rows {
            let Some(q) = self.arch_of(r).and_then(|a| queues.get_mut(&a)) else {
                continue;
            };
            for _ in kept[r]..want[r] {
                if let Some(i) = q.pop_front() {
                    assignments.push((i, r));
                }
            }
        }
        stuck.extend(queues.into_values().flatten());
        (assignments, stuck)
    }

    /// Each assigned VP to its row: started there, resumed where it is
    /// (held on that processor), or migrated from where its process is.
    pub(super) fn place_assigned(
        &mut self,
        k: JobKey,
        assignments: Vec<(u32, Row)>,
        ctx: &mut Ctx,
    ) {
        let job_id = self.job(k).id.clone();
        for (i, r) in assignments {
            let Some(p) = self.map.processor(r) else {
                continue;
            };
            ctx.dirty_rows.push(r);
            let Some(v) = self.jobs[k as usize]
                .as_mut()
                .and_then(|j| j.vps.get_mut(&i))
            else {
                continue;
            };
            let start = |job: &Arc<str>| Action::Start {
                job: job.clone(),
                vp: i,
                arch: self.map.arch_shared(v.arch),
                processor: p.id.clone(),
                host: p.host.clone(),
                restore: false,
            };
            let action = match v.at.take() {
                // A held VP back on the processor it is on: just resume it.
                Some(at) if at.0 == p.id => {
                    let action = start(&job_id);
                    v.at = if at.1 == p.host {
                        Some(at)
                    } else {
                        Some((at.0, p.host.clone()))
                    };
                    action
                }
                Some((from, from_host)) => {
                    self.migrations += 1;
                    ctx.budget = ctx.budget.saturating_sub(1);
                    v.at = Some((p.id.clone(), p.host.clone()));
                    Action::Migrate {
                        job: job_id.clone(),
                        vp: i,
                        from,
                        from_host,
                        to: p.id.clone(),
                        to_host: p.host.clone(),
                    }
                }
                None => {
                    let action = start(&job_id);
                    v.at = Some((p.id.clone(), p.host.clone()));
                    action
                }
            };
            ctx.actions.push(action);
            v.row = Some(r);
            let was_held = std::mem::replace(&mut v.held, false);
            if was_held {
                self.job_mut(k).held -= 1;
            }
        }
    }

    /// VPs left without a row are held (said once, until placed again).
    fn hold_all(&mut self, k: JobKey, unplaced: Vec<u32>, ctx: &mut Ctx) {
        let job_id = self.job(k).id.clone();
        for i in unplaced {
            let j = self.job_mut(k);
            let v = j.vps.get_mut(&i).expect("vp exists");
            v.row = None;
            if !v.held {
                v.held = true;
                j.held += 1;
                let at = v.at.clone();
                ctx.actions.push(Action::Hold {
                    job: job_id.clone(),
                    vp: i,
                    processor: at.as_ref().map(|a| a.0.clone()),
                    host: at.map(|a| a.1),
                });
            }
        }
    }

    /// Rebuild the job's rows and cells in `columns` from where its VPs
    /// now are; rows and columns that changed are marked.
    fn settle(
        &mut self,
        k: JobKey,
        columns: Vec<u64>,
        old_cols: &[u64],
        old_rows: &[Row],
        same_columns: bool,
        ctx: &mut Ctx,
    ) {
        let mut new_rows: BTreeMap<Row, u32> = BTreeMap::new();
        for v in self.job(k).vps.values() {
            if let Some(r) = v.row {
                *new_rows.entry(r).or_default() += 1;
            }
        }
        // `self.job(k).rows` still holds the old counts here.
        for &r in old_rows.iter().chain(new_rows.keys()) {
            if !same_columns || self.job(k).rows.get(&r) != new_rows.get(&r) {
                self.dirty_row(r, ctx);
            }
        }
        let lost_a_row = old_rows.iter().any(|r| !new_rows.contains_key(r));
        for &c in old_cols {
            if lost_a_row || !columns.contains(&c) {
                ctx.freed.push(c);
            }
        }
        let placed: u32 = new_rows.values().sum();
        if placed as usize == self.job(k).vps.len() {
            self.waiting.remove(&k);
        } else {
            self.waiting.insert(k);
        }
        let columns = if new_rows.is_empty() {
            Vec::new()
        } else {
            columns
        };
        let rows: Vec<Row> = new_rows.keys().copied().collect();
        for &c in &columns {
            self.map.set_rows(c, &rows, Some(k));
        }
        self.resident_moved(self.job(k).memory_mb, &self.job(k).rows, &new_rows);
        let j = self.job_mut(k);
        j.row_set = BitSet::default();
        for &r in new_rows.keys() {
            j.row_set.insert(r);
        }
        j.placed = placed;
        j.rows = new_rows;
        j.t_cur.set(None);
        j.columns = columns;
        self.drop_empty_columns(ctx);
    }

    /// Emit Hold for VPs without a row that were not held before.
    pub(super) fn hold_unplaced(&mut self, k: JobKey, ctx: &mut Ctx) {
        self.waiting.insert(k);
        let j = self.jobs[k as usize]
            .as_mut()
            .expect("job key refers to a live job");
        for (&i, v) in j.vps.iter_mut() {
            if v.row.is_none() && !v.held {
                v.held = true;
                j.held += 1;
                ctx.actions.push(Action::Hold {
                    job: j.id.clone(),
                    vp: i,
                    processor: v.at.as_ref().map(|a| a.0.clone()),
                    host: v.at.as_ref().map(|a| a.1.clone()),
                });
            }
        }
    }

    /// Place a job as if submitted now (seed 000 section 4.4.1): MTAT on a new
    /// slot vs. the Expansion pattern, then Compression. Section 4.3 compares
    /// the turnaround in a new slot, "T_min / τ" of the round, with the
    /// pattern's; we compare wall-clock turnarounds: `T_new · (τ + 1)` in a new
    /// slot (the round grows by one) against `T_free · τ / w` in a pattern of
    /// `w` of the `τ` existing slots. Its own cells count
    /// as free; its VPs prefer the processors they are on.
    pub(super) fn place_fresh(&mut self, k: JobKey, ctx: &mut Ctx) {
        // Release its cells first.
        self.release_cells(k, ctx);
        self.job_mut(k).columns.clear();
        // The turnaround in a slot of its own: on the whole pool (the rows
        // with the memory it needs), from its capacity classes.
        let (demand, t_new) = self.demand_of(k);
        if demand.counts.is_empty() {
            self.apply(k, Vec::new(), &[], &[], ctx);
            self.drop_empty_columns(ctx);
            return;
        }
        if !t_new.is_finite() {
            self.apply(k, Vec::new(), &[], &[], ctx);
            return;
        }
        // Where the hosts' memory holds its VPs on no rows, no slot and no
        // plan below places it: it waits, as it would once all were tried.
        if self.memory_holds_job_nowhere(k, &demand.counts) {
            self.apply(k, Vec::new(), &[], &[], ctx);
            return;
        }
        // A slot more would slow every job, those in the way of the job
        // promised a start by a time too: not while one is. (A promise of
        // no time, the jobs in its way having no estimate, is not made
        // later by that.)
        let at_cap = self.map.columns().len() >= self.cfg.max_slots
            || self
                .reserved
                .as_ref()
                .is_some_and(|r| r.job != k && r.at.is_finite());
        // With backfilling a job gets one slot here and runs in more by
        // `fill`: a pattern over several slots would hold cells it only
        // borrows.
        let pattern = if self.cfg.backfill {
            None
        } else {
            self.cfg.expansion.find(&self.map, &demand)
        };
        let choice = pattern.and_then(|p| {
            let covers = demand
                .counts
                .iter()
                .all(|&(a, _)| p.rows.iter().any(|&r| self.arch_of(r) == Some(a)));
            if !covers {
                return None;
            }
            // Wall-clock turnaround: a job in w of tau slots runs w/tau of the
            // time; a new slot makes the round tau + 1 long for everyone.
            // At the slot cap there is no new slot: the pattern must then be
            // as fast per slot as a slot of its own (the paper's T_free <= T_min).
            let tau = self.map.columns().len() as f64;
            let w = p.columns.len() as f64;
            // A pattern that cannot even finish by a bound a little above the
            // one it must meet is out without running MTAT on it.
            let bound = if at_cap {
                t_new * w
            } else {
                t_new * (tau + 1.0) / tau * w
            };
            if !self.can_finish_by(&demand, &p.rows, bound * (1.0 + 1e-6)) {
                return None;
            }
            let (t_p, counts) = self.plan(k, &p.rows, true, 0.0)?;
            let fits = if at_cap {
                t_p / w <= t_new * (1.0 + 1e-9)
            } else {
                t_p * tau / w <= t_new * (tau + 1.0) * (1.0 + 1e-9)
            };
            fits.then_some((p.columns, p.rows, counts))
        });
        let choice = match choice {
            None if self.cfg.backfill => {
                // The paper's test for one slot of the round's `tau`
                // against a new one: `T * tau <= T_new * (tau + 1)`; at
                // the cap, as fast as a slot of its own.
                let tau = self.map.columns().len() as f64;
                let bound = if at_cap || tau == 0.0 {
                    t_new
                } else {
                    t_new * (tau + 1.0) / tau
                };
                self.best_fit(k, &demand, bound)
            }
            c => c,
        };
        let (columns, rows, counts) = match choice {
            Some(c) => c,
            None if at_cap => {
                self.apply(k, Vec::new(), &[], &[], ctx);
                return;
            }
            None => {
                // MTAT on `all` gave `t_new` (cached or just now): compress to
                // it, within what the hosts' memory holds.
                let fresh = self.fresh_plan(k, &demand, t_new);
                let all = &fresh.all;
                let counts = match (fresh.counts.clone(), self.memory_caps(k), &fresh.inp) {
                    (Some(c), Some(caps), Some(inp)) if !self.within(&caps, all, &c) => {
                        let [plan] = self.capped_plan(inp, all, &caps, [(true, 0.0)]);
                        plan.map(|(_, c)| c)
                    }
                    (c, _, _) => c,
                };
                // (Nor may it take memory a promised job waits for.)
                let counts = counts.filter(|c| {
                    let t = all
                        .iter()
                        .zip(c)
                        .filter(|(_, &n)| n > 0)
                        .map(|(&r, &n)| finish_time(n, self.cap(r)))
                        .fold(0.0, f64::max);
                    self.admissible(k, u64::MAX, all, c, t)
                });
                let Some(counts) = counts else {
                    // The hosts' memory holds it nowhere now: it waits.
                    self.apply(k, Vec::new(), &[], &[], ctx);
                    return;
                };
                let id = self.map.push_column();
                ctx.all_dirty = true;
                (vec![id], fresh.all.clone(), counts)
            }
        };
        self.apply(k, columns, &rows, &counts, ctx);
        self.drop_empty_columns(ctx);
    }

    /// A job lost a processor (or gained a VP that does not fit): MTAT and
    /// Compression within its columns (section 4.4.3), or a fresh placement if
    /// an architecture it needs has no room there but exists elsewhere.
    pub(super) fn reposition(&mut self, k: JobKey, ctx: &mut Ctx) {
        let cand = self.useful_candidates(k);
        let needs_elsewhere = {
            let j = self.job(k);
            j.arches.iter().any(|&(a, _)| {
                !cand.iter().any(|&r| self.arch_of(r) == Some(a)) && self.usable(k, a)
            })
        };
        if needs_elsewhere || self.job(k).columns.is_empty() {
            self.place_fresh(k, ctx);
            return;
        }
        let cols = self.job(k).columns.clone();
        match self.plan_both(k, &cand, self.current_t(k)) {
            Some((_, compressed, minimal)) => {
                let extra = self.optional_moves(k, &cand, &compressed);
                let counts = if extra <= ctx.budget {
                    compressed
                } else {
                    minimal
                };
                self.apply(k, cols, &cand, &counts, ctx);
            }
            None => self.apply(k, cols, &[], &[], ctx),
        }
    }

    /// After an event freed cells, the paper's way: held jobs, Expansion,
    /// then re-packing (with backfilling, `rebalance` does it all).
    pub(super) fn room_freed(&mut self, ctx: &mut Ctx) {
        if !self.cfg.backfill {
            self.place_held(ctx);
            self.expand_jobs(ctx);
            self.repack(ctx);
        }
    }

    /// Held VPs whose architecture is back: place them (fairness order).
    pub(super) fn place_held(&mut self, ctx: &mut Ctx) {
        // With backfilling, `rebalance` admits waiting jobs.
        if self.waiting.is_empty() || self.cfg.backfill {
            return;
        }
        // A job waiting at the slot cap can only start where cells were freed.
        let room =
            !ctx.freed.is_empty() || ctx.all_freed || self.map.columns().len() < self.cfg.max_slots;
        for k in self.fair_order() {
            if !self.waiting.contains(&k) || (!room && self.job(k).columns.is_empty()) {
                continue;
            }
            let j = self.job(k);
            if j.vps
                .values()
                .any(|v| v.row.is_none() && self.usable(k, v.arch))
            {
                self.reposition(k, ctx);
                // At the slot cap, jobs wait in queue order: stop at the first
                // that still finds no room.
                if self.job(k).columns.is_empty() && self.map.columns().len() >= self.cfg.max_slots
                {
                    break;
                }
            }
        }
    }

    /// Offer free cells to jobs that get faster with them (section 4.4.2),
    /// starting from the head of the fairness queue.
    pub(super) fn expand_jobs(&mut self, ctx: &mut Ctx) {
        ctx.freed.sort_unstable();
        ctx.freed.dedup();
        for k in self.fair_order() {
            if ctx.budget == 0 || !self.map.has_free_cells() {
                break;
            }
            let j = self.job(k);
            if j.columns.is_empty() {
                continue;
            }
            // A job in the column held for a waiting one does not grow there.
            if self.avoided_by(k).is_some_and(|c| j.columns.contains(&c)) {
                continue;
            }
            // Only free cells that are new (or a job the budget cut off last
            // time) can change a job's answer.
            let retry = self.retry.contains(&k);
            let freed_here = j.columns.iter().any(|c| ctx.freed.binary_search(c).is_ok());
            if !(ctx.all_freed || retry || freed_here) {
                continue;
            }
            // A joining processor helps only if a VP finishes there sooner
            // than the job does now (and it has the job's architecture).
            let t_cur = self.current_t(k);
            if let (Some(r), false, false) = (ctx.new_row, retry, freed_here) {
                let arch = self.arch_of(r);
                let fits = j.arches.iter().any(|&(a, _)| Some(a) == arch);
                if !fits || finish_time(1, self.cap(r)) >= t_cur * (1.0 - 1e-9) {
                    continue;
                }
            }
            self.retry.remove(&k);
            let free = self.free_candidates(k);
            if free.is_empty() || !self.could_beat(k, &free, t_cur) {
                continue;
            }
            let cand = self.useful_of(k, &free);
            let Some((t_new, counts)) = self.plan(k, &cand, true, 0.0) else {
                continue;
            };
            if t_new < t_cur * (1.0 - 1e-9) && self.keeps_promise(k, &cand, &counts) {
                let moves = self.optional_moves(k, &cand, &counts);
                if moves <= ctx.budget {
                    let cols = self.job(k).columns.clone();
                    self.apply(k, cols, &cand, &counts, ctx);
                } else if moves <= self.cfg.max_migrations_per_event {
                    // Cut off by what this event already spent: next time.
                    self.retry.insert(k);
                }
            }
        }
    }

    /// Empty every cell of job `k` (its rows in its columns), marking the
    /// rows and columns changed; its records stay as they are (and so
    /// does what its hosts hold: its VPs keep their rows).
    fn release_cells(&mut self, k: JobKey, ctx: &mut Ctx) {
        let (cols, rows): (Vec<u64>, Vec<Row>) = {
            let j = self.job(k);
            (j.columns.clone(), j.rows.keys().copied().collect())
        };
        for &c in &cols {
            for &r in &rows {
                self.map.set(c, r, None);
                self.dirty_row(r, ctx);
            }
            ctx.freed.push(c);
        }
    }

    /// Job `k` is gone: its cells are freed and it is forgotten.
    pub(super) fn remove_job(&mut self, k: JobKey, ctx: &mut Ctx) {
        self.release_cells(k, ctx);
        if let Some(j) = self.jobs[k as usize].take() {
            self.resident_moved(j.memory_mb, &j.rows, &BTreeMap::new());
            self.job_of.remove(&*j.id);
        }
        self.queue.retain(|&x| x != k);
        self.retry.remove(&k);
        self.waiting.remove(&k);
        if self.reserved.as_ref().is_some_and(|r| r.job == k) {
            self.reserved = None;
        }
    }
}
