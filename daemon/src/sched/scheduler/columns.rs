//! The map's columns: empty ones removed, redundant ones (a job whose every
//! VP also runs in another of its slots) dropped, and re-packing whole jobs
//! between slots (seed 001).

use super::*;

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
}
