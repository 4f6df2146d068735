//! Repair in place (`SchedConfig::repair_in_place`): a job that lost a
//! processor and is still as fast as MTAT could make it on what is left
//! puts the VPs it had there on its own processors or on free ones of its
//! slots, each where it finishes by that best turnaround; no other VP moves
//! and nothing else is planned again.
//!
//! What lives here: that one decision and its bookkeeping. What does not:
//! the full re-planning it falls back to (`placing::reposition`, MTAT and
//! Compression on the job's columns, seed 000 section 4.4.3), or the
//! Expansion that later speeds a job up where cells are freed.

use std::collections::BTreeMap;

use super::{Ctx, Scheduler};
use crate::sched::map::{BitSet, JobKey, Row};
use crate::sched::mtat::{slots_at, t_min_by_classes};

impl Scheduler {
    /// Place job `k`'s VPs that have no row (those of the processor that
    /// left) without moving any other, where each finishes by the best
    /// turnaround MTAT finds for the job on its rows and the free ones of
    /// its columns: its own rows first (fewest processors, as Compression
    /// would), then free rows, the slowest that will do first (the faster
    /// stay free for others). True if so placed; false, with nothing
    /// changed, where the job must be planned again: held or pinned VPs,
    /// processors chosen by a placement policy, VPs left without a
    /// processor of their architecture, VPs already placed that finish
    /// later than that best turnaround (planning again makes the job
    /// faster), or no room by it.
    pub(super) fn repair_in_place(&mut self, k: JobKey, ctx: &mut Ctx) -> bool {
        let j = self.job(k);
        if j.only.is_some() || j.columns.is_empty() || j.held > 0 {
            return false;
        }
        let mut displaced: Vec<(u32, u32)> = Vec::new();
        for (&i, v) in &j.vps {
            if v.row.is_none() {
                if v.pinned && v.at.is_some() {
                    return false;
                }
                displaced.push((i, v.arch));
            }
        }
        if displaced.is_empty() {
            return true;
        }
        // Only a job already as fast as MTAT could make it on what is
        // left: then placing the displaced VPs by that turnaround is what
        // planning it again would reach, without moving the others.
        let free = self.free_candidates(k);
        let mut candidates = free.clone();
        candidates.union_with(&self.job(k).row_set);
        let best = self.best_turnaround(k, &candidates);
        if !best.is_finite() || self.current_t(k) > best * (1.0 + 1e-9) {
            return false;
        }
        let Some(moves) = self.fit_by(k, &displaced, &free, best) else {
            return false;
        };
        // Nor where the hosts' memory would not hold them there.
        let mut after: BTreeMap<Row, u32> = self.job(k).rows.clone();
        for &(_, r) in &moves {
            *after.entry(r).or_default() += 1;
        }
        let (rows, counts): (Vec<Row>, Vec<u32>) = after.into_iter().unzip();
        if let Some(caps) = self.memory_caps(k) {
            if !self.within(&caps, &rows, &counts) {
                return false;
            }
        }
        // And on no more processors than Compression would use by it: a
        // job spread wider holds cells others could have.
        let j = self.job(k);
        let mut rows = j.row_set.clone();
        for &(_, r) in &moves {
            rows.insert(r);
        }
        if rows.len() > self.fewest_rows(k, &candidates, best) {
            return false;
        }
        self.place_repaired(k, moves, ctx);
        true
    }

    /// The fewest of `candidates` that hold job `k`'s VPs by `t`, the
    /// fastest first (what Compression's answer uses).
    fn fewest_rows(&self, k: JobKey, candidates: &BitSet, t: f64) -> usize {
        let bound = t * (1.0 + 1e-9);
        self.job(k)
            .arches
            .iter()
            .map(|&(a, x)| {
                let mut left = x;
                let mut used = 0usize;
                for (c, n) in self.classes_among(a, candidates).into_iter().rev() {
                    let each = slots_at(bound, c);
                    if left == 0 || each == 0 {
                        break;
                    }
                    let take = left.div_ceil(each).min(n);
                    used += take as usize;
                    left = left.saturating_sub(each.saturating_mul(take));
                }
                used
            })
            .sum()
    }

    /// Rows for `displaced` (VP, architecture) where each finishes by `t`:
    /// the job's own rows in row order, then `free` ones slowest first.
    fn fit_by(
        &self,
        k: JobKey,
        displaced: &[(u32, u32)],
        free: &BitSet,
        t: f64,
    ) -> Option<Vec<(u32, Row)>> {
        let bound = t * (1.0 + 1e-9);
        // (row, architecture, VPs it may still take by the bound)
        let mut room: Vec<(Row, u32, u32)> = Vec::new();
        for (&r, &n) in &self.job(k).rows {
            let spare = slots_at(bound, self.cap(r)).saturating_sub(n);
            if let (true, Some(a)) = (spare > 0, self.arch_of(r)) {
                room.push((r, a, spare));
            }
        }
        let mut enough: Vec<Row> = free
            .iter()
            .filter(|&r| slots_at(bound, self.cap(r)) > 0)
            .collect();
        enough.sort_by(|&a, &b| self.cap(a).total_cmp(&self.cap(b)).then(a.cmp(&b)));
        for r in enough {
            if let Some(a) = self.arch_of(r) {
                room.push((r, a, slots_at(bound, self.cap(r))));
            }
        }
        let mut moves = Vec::with_capacity(displaced.len());
        for &(i, arch) in displaced {
            let slot = room.iter_mut().find(|(_, a, n)| *a == arch && *n > 0)?;
            slot.2 -= 1;
            moves.push((i, slot.0));
        }
        Some(moves)
    }

    /// The best turnaround MTAT finds for job `k` on `candidates`,
    /// counted per capacity class.
    fn best_turnaround(&self, k: JobKey, candidates: &BitSet) -> f64 {
        self.job(k)
            .arches
            .iter()
            .map(|&(a, x)| t_min_by_classes(x, &self.classes_among(a, candidates)))
            .fold(0.0, f64::max)
    }

    /// Job `k`'s VPs to the rows `moves` gives them (in every one of its
    /// columns), its records and cells kept.
    fn place_repaired(&mut self, k: JobKey, moves: Vec<(u32, Row)>, ctx: &mut Ctx) {
        let columns = self.job(k).columns.clone();
        let mut new_rows: Vec<Row> = moves
            .iter()
            .map(|&(_, r)| r)
            .filter(|&r| !self.job(k).row_set.contains(r))
            .collect();
        new_rows.sort_unstable();
        new_rows.dedup();
        for &c in &columns {
            self.map.set_rows(c, &new_rows, Some(k));
        }
        let placed = moves.len() as u32;
        {
            let j = self.job_mut(k);
            for &(_, r) in &moves {
                *j.rows.entry(r).or_default() += 1;
                j.row_set.insert(r);
            }
            j.placed += placed;
            j.t_cur.set(None);
        }
        self.place_assigned(k, moves, ctx);
        self.forget_resident();
        if self.job(k).placed as usize == self.job(k).vps.len() {
            self.waiting.remove(&k);
        }
    }
}
