//! The map's columns: empty ones removed, redundant ones (a job whose every
//! VP also runs in another of its slots) dropped, re-packing whole jobs
//! between slots (seed 001), and compaction (a slot emptied by moving its
//! jobs into other slots' free cells, on other processors if need be).

use std::collections::HashMap;

use super::{Ctx, Scheduler};
use crate::sched::map::{BitSet, JobKey, Row};
use crate::sched::repack::{repack, Piece};

/// Slots (the emptiest) compaction tries to empty per round of its loop.
const COMPACT_TRIES: usize = 2;

/// A slot a job could move to: its index among the candidates, the VPs
/// moved to other processors, and `counts[i]` VPs on `rows[i]` there.
pub(super) struct Target {
    pub(super) slot: usize,
    pub(super) moves: usize,
    pub(super) rows: Vec<Row>,
    pub(super) counts: Vec<u32>,
}

/// How a slot is emptied: what becomes of each job in it.
enum Relocation {
    /// The job also runs in other slots: it leaves this one.
    Leave(JobKey),
    /// The job goes to another slot, `counts[i]` VPs on `rows[i]`, moving
    /// `moves` of its VPs to other processors.
    Move {
        job: JobKey,
        column: u64,
        rows: Vec<Row>,
        counts: Vec<u32>,
        moves: usize,
    },
}

impl Scheduler {
    pub(super) fn drop_empty_columns(&mut self, ctx: &mut Ctx) {
        let empty: Vec<u64> = self
            .map
            .columns()
            .iter()
            .filter(|c| c.is_empty())
            .map(|c| c.id)
            .collect();
        if empty.is_empty() {
            return;
        }
        // A job with no rows keeps no columns either.
        for id in &empty {
            self.map.remove_column(*id);
        }
        for j in self.jobs.iter_mut().flatten() {
            j.columns.retain(|c| !empty.contains(c));
        }
        ctx.all_dirty = true;
    }

    /// A slot whose every job also runs in another slot only replicates
    /// them: deleting it shortens the round for everyone (seed 001 weighs
    /// slot unification against slot minimisation; we minimise).
    pub(super) fn drop_redundant_columns(&mut self, ctx: &mut Ctx) {
        loop {
            // Columns some job runs in alone are needed; the first other
            // column goes.
            let mut needed: Vec<u64> = self
                .jobs
                .iter()
                .flatten()
                .filter_map(|j| match j.columns[..] {
                    [only] => Some(only),
                    _ => None,
                })
                .collect();
            needed.sort_unstable();
            let redundant = self
                .map
                .columns()
                .iter()
                .map(|c| c.id)
                .find(|id| needed.binary_search(id).is_err());
            let Some(id) = redundant else { return };
            for j in self.jobs.iter_mut().flatten() {
                j.columns.retain(|&c| c != id);
            }
            // Its cells go with it.
            let rows: Vec<Row> = (0..self.map.row_capacity()).collect();
            for r in rows {
                self.map.set(id, r, None);
            }
            self.map.remove_column(id);
            ctx.all_dirty = true;
        }
    }

    /// Seed 001 re-packing: shift whole jobs between slots to delete slots.
    pub(super) fn repack(&mut self, ctx: &mut Ctx) {
        if !self.cfg.repack || self.map.columns().len() < 2 {
            return;
        }
        self.drop_redundant_columns(ctx);
        if self.map.columns().len() < 2 {
            return;
        }
        // A slot can only go if each of its busy rows is free in some other
        // slot: skip the search when no slot passes that test.
        let mut free_somewhere = BitSet::default();
        for c in self.map.columns() {
            free_somewhere.union_with(c.free());
        }
        let movable = self.map.columns().iter().any(|c| {
            let mut busy = self.map.live().clone();
            busy.remove_all(c.free());
            busy.is_subset(&free_somewhere)
        });
        if !movable {
            return;
        }
        let mut pieces = Vec::new();
        let mut slot_of = Vec::new();
        let mut owner = Vec::new();
        for k in self.fair_order() {
            let j = self.job(k);
            for &c in &j.columns {
                if let Some(pos) = self.map.position(c) {
                    pieces.push(Piece {
                        job: k,
                        rows: j.row_set.clone(),
                    });
                    slot_of.push(pos);
                    owner.push(k);
                }
            }
        }
        let before = self.map.columns().len();
        let (new_slot, count) = repack(&pieces, &slot_of, before, pieces.len() <= 64);
        if count >= before {
            return;
        }
        // Rebuild the columns: clear every job cell, then lay the pieces out.
        let old: Vec<u64> = self.map.columns().iter().map(|c| c.id).collect();
        let fresh: Vec<u64> = (0..count).map(|_| self.map.push_column()).collect();
        for j in self.jobs.iter_mut().flatten() {
            j.columns.clear();
        }
        for (i, &k) in owner.iter().enumerate() {
            let col = fresh[new_slot[i]];
            let rows: Vec<Row> = self.job(k).rows.keys().copied().collect();
            for r in rows {
                self.map.set(col, r, Some(k));
            }
            self.job_mut(k).columns.push(col);
        }
        for id in old {
            self.map.remove_column(id);
        }
        ctx.all_dirty = true;
    }

    /// Compaction: delete slots while some slot's jobs all fit in the free
    /// cells of the others, no job slower than it is, moving at most
    /// `compact_moves` VPs in all. Seed 001's shifts keep every VP on
    /// its processor, so two jobs on the same processors never share a
    /// slot however empty both are; moving VPs to free processors lifts
    /// that. Each slot fewer makes the round shorter for every job.
    pub(super) fn compact(&mut self, ctx: &mut Ctx) {
        if !self.cfg.compact {
            return;
        }
        let mut left = self.cfg.compact_moves;
        while self.map.columns().len() >= 2 {
            let mut order: Vec<(usize, u64)> = self
                .map
                .columns()
                .iter()
                .map(|c| (c.busy(), c.id))
                .collect();
            order.sort_unstable();
            // The emptiest slots are the likeliest to go; trying every
            // slot on every event costs more than it finds.
            let Some((s, plan)) = order
                .iter()
                .take(COMPACT_TRIES)
                .find_map(|&(_, s)| self.empty_column_plan(s, left).map(|plan| (s, plan)))
            else {
                return;
            };
            for step in plan {
                if let Relocation::Move { moves, .. } = step {
                    left -= moves;
                }
                match step {
                    Relocation::Leave(k) => self.leave_column(k, s, ctx),
                    Relocation::Move {
                        job,
                        column,
                        rows,
                        counts,
                        ..
                    } => self.apply(job, vec![column], &rows, &counts, ctx),
                }
            }
            self.drop_empty_columns(ctx);
        }
    }

    /// Where each job of column `s` would go so that `s` empties, moving at
    /// most `budget` VPs; `None` if some job fits nowhere. Jobs are taken
    /// widest first; each goes where it moves fewest VPs, then to the
    /// fullest slot that holds it.
    fn empty_column_plan(&self, s: u64, budget: usize) -> Option<Vec<Relocation>> {
        let col = self.map.column(s)?;
        // The refusals look at the other slots' free cells where they are;
        // only a slot that passes them has its free cells copied.
        let others = || self.map.columns().iter().filter(|c| c.id != s);
        let other_free = || others().map(|c| c.free());
        // Quick refusal: the other slots have too few free cells in all.
        if others().map(|c| c.free_count()).sum::<usize>() < col.busy() {
            return None;
        }
        let mut jobs: Vec<JobKey> = col.jobs().map(|(_, k)| k).collect();
        jobs.sort_unstable();
        jobs.dedup();
        jobs.sort_by_key(|&k| std::cmp::Reverse(self.job(k).placed));
        // Quick refusal: every job that must move needs a slot with room,
        // and has every VP placed (a held VP of a job goes back to its own
        // processor wherever that is free, which no plan here foresees).
        for &k in &jobs {
            let j = self.job(k);
            if j.placed as usize != j.vps.len() {
                return None;
            }
            let t = self.current_t(k) * (1.0 + 1e-9);
            if j.columns.len() == 1 && !other_free().any(|f| self.fits_by(k, f, t)) {
                return None;
            }
        }
        let others: Vec<u64> = others().map(|c| c.id).collect();
        let mut free: Vec<BitSet> = other_free().cloned().collect();
        let mut plan = Vec::with_capacity(jobs.len());
        let mut spent = 0;
        // Memory the moves planned so far take on their new hosts.
        let mut taken = HashMap::new();
        for k in jobs {
            let j = self.job(k);
            if j.columns.len() > 1 {
                plan.push(Relocation::Leave(k));
                continue;
            }
            let t = self.best_target(k, &free, budget - spent)?;
            if !self.take_memory(k, &t.rows, &t.counts, &mut taken) {
                return None;
            }
            spent += t.moves;
            for (&r, &n) in t.rows.iter().zip(&t.counts) {
                if n > 0 {
                    free[t.slot].remove(r);
                }
            }
            plan.push(Relocation::Move {
                job: k,
                column: others[t.slot],
                rows: t.rows,
                counts: t.counts,
                moves: t.moves,
            });
        }
        Some(plan)
    }

    /// Where job `k` (in one slot) could go among the slots whose free
    /// cells are `free`, no slower than now and moving at most `budget`
    /// VPs: the fullest slot it shifts to whole (no VP moves), else the
    /// fullest that holds it on other processors. A job with a VP that
    /// cannot be moved only shifts whole.
    pub(super) fn best_target(&self, k: JobKey, free: &[BitSet], budget: usize) -> Option<Target> {
        let j = self.job(k);
        let pinned = j
            .vps
            .values()
            .any(|v| (v.pinned || j.only.is_some()) && v.at.is_some());
        let t_cur = self.current_t(k);
        let mut wanted = BitSet::default();
        for &(a, _) in &j.arches {
            if let Some(r) = self.map.arch_rows(a) {
                wanted.union_with(r);
            }
        }
        if let Some(m) = self.allowed_rows(k) {
            wanted.intersect_with(&m);
        }
        // A shift (no VP moves) to the fullest slot that takes the job's
        // processors as they are.
        let fullest = |ok: &dyn Fn(&BitSet) -> bool| {
            free.iter()
                .enumerate()
                .filter(|(_, f)| ok(f))
                .min_by_key(|(i, f)| (f.len(), *i))
                .map(|(i, _)| i)
        };
        if let Some(i) = fullest(&|f| j.row_set.is_subset(f)) {
            return Some(Target {
                slot: i,
                moves: 0,
                rows: j.rows.keys().copied().collect(),
                counts: j.rows.values().copied().collect(),
            });
        }
        if pinned {
            return None;
        }
        // Else the fullest slot that holds it as fast as now.
        let t = t_cur * (1.0 + 1e-9);
        let i = fullest(&|f| {
            let mut usable = f.clone();
            usable.intersect_with(&wanted);
            self.fits_by(k, &usable, t)
        })?;
        let mut cand = free[i].clone();
        cand.intersect_with(&wanted);
        let rows = cand.to_vec();
        let (t_new, counts) = self.plan(k, &rows, true, 0.0)?;
        let moves = self.optional_moves(k, &rows, &counts);
        (t_new <= t && moves <= budget).then_some(Target {
            slot: i,
            moves,
            rows,
            counts,
        })
    }

    /// Job `k`, which also runs in other columns, leaves column `s`.
    fn leave_column(&mut self, k: JobKey, s: u64, ctx: &mut Ctx) {
        let rows: Vec<Row> = self.job(k).rows.keys().copied().collect();
        for r in rows {
            self.map.set(s, r, None);
            self.dirty_row(r, ctx);
        }
        self.job_mut(k).columns.retain(|&c| c != s);
        ctx.freed.push(s);
    }
}
