//! Admission with backfilling (`SchedConfig::backfill`): which waiting job
//! starts, where, and what every event leaves the map as.
//!
//! What lives here: the pass every event ends with in this mode
//! (`rebalance`): jobs give up the slots beyond their first (`contract`),
//! slots are emptied by moving jobs (`compact`, in `columns`), waiting jobs
//! are admitted oldest first wherever they fit, the oldest that fits
//! nowhere is promised a slot and a time and younger ones pass it only
//! where they keep that promise (EASY's rule: `reserve`, `admissible`),
//! and every job then runs in each further slot where its processors are
//! free (`fill`). What does not:
//! the paper's own order (held jobs in fairness order, Expansion, then
//! re-packing: `placing`), or the searches themselves (`expand`, `mtat`).

use std::collections::HashMap;

use super::{Ctx, Reservation, Scheduler};
use crate::sched::expand::Demand;
use crate::sched::map::{BitSet, JobKey, Row};
use crate::sched::mtat::slots_at;

impl Scheduler {
    /// The end of every event in backfill mode. A job's slots beyond its
    /// first are only lent: they are taken back before anything is placed,
    /// so that a slot holding nothing else can go and a waiting job can
    /// start there, and lent again at the end.
    pub(super) fn rebalance(&mut self, ctx: &mut Ctx) {
        // A promise to a job that started (a VP of it placed some other
        // way) or left the queue is void.
        if self
            .reserved
            .as_ref()
            .is_some_and(|r| !self.waiting.contains(&r.job) || !self.job(r.job).columns.is_empty())
        {
            self.reserved = None;
        }
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
        self.keep_promise_whole();
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
            // (The field itself, not `job`: the map changes while it is read.)
            let j = self.jobs[k as usize]
                .as_ref()
                .expect("job key refers to a live job");
            if j.columns.len() < 2 {
                continue;
            }
            had.push((k, j.columns.clone()));
            // (`row_set` holds the keys of `rows`.)
            for &c in &j.columns[1..] {
                self.map.set_row_set(c, &j.row_set, None);
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
        // With at most 64 slots, per row the slots where it is free (kept
        // as cells are lent): a job's slots are those its rows have in
        // common, a word per row rather than a look at every slot.
        let mut free_in = self.map.free_slots_by_row();
        for k in self.fair_order() {
            // (The field itself, not `job`: the map changes while it is read.)
            let j = self.jobs[k as usize]
                .as_ref()
                .expect("job key refers to a live job");
            // (`rows` and `row_set` hold the same rows.)
            if j.columns.is_empty() || j.rows.is_empty() {
                continue;
            }
            let columns = self.map.columns();
            let extra: Vec<u64> = match &free_in {
                Some(by_row) => {
                    let mut common = u64::MAX;
                    for r in j.row_set.iter() {
                        common &= by_row.get(r).copied().unwrap_or(0);
                        if common == 0 {
                            break;
                        }
                    }
                    std::iter::from_fn(|| {
                        (common != 0).then(|| {
                            let pos = common.trailing_zeros() as usize;
                            common &= common - 1;
                            pos
                        })
                    })
                    .filter_map(|pos| columns.get(pos).map(|c| c.id))
                    .filter(|id| !j.columns.contains(id))
                    .collect()
                }
                None => columns
                    .iter()
                    .filter(|c| {
                        c.free_count() >= j.rows.len()
                            && j.row_set.is_subset(c.free())
                            && !j.columns.contains(&c.id)
                    })
                    .map(|c| c.id)
                    .collect(),
            };
            if extra.is_empty() {
                continue;
            }
            lent.push((k, j.columns.clone()));
            for &c in &extra {
                self.map.set_row_set(c, &j.row_set, Some(k));
                if let (Some(by_row), Some(pos)) = (free_in.as_mut(), self.map.position(c)) {
                    for r in j.row_set.iter() {
                        if let Some(m) = by_row.get_mut(r) {
                            *m &= !(1 << pos);
                        }
                    }
                }
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
            .filter(|(_, c)| self.column_fits(&room, c))
            .map(|(pos, c)| (c.free().intersection_len(&demand.rows), pos))
            .collect();
        columns.sort_unstable();
        // What each host's memory holds of it, for a count that says no
        // before MTAT is run.
        let caps = self.memory_caps(k);
        columns.into_iter().find_map(|(_, pos)| {
            let c = self.map.columns().get(pos)?;
            if let Some(caps) = &caps {
                if !self.fits_in_memory(caps, c.free(), &demand.counts, bound) {
                    return None;
                }
            }
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
            (t <= bound && self.admissible(k, c.id, &rows, &counts, t)).then_some((
                vec![c.id],
                rows,
                counts,
            ))
        })
    }

    /// The column job `k` may not grow in: the one promised to an older
    /// job.
    pub(super) fn avoided_by(&self, k: JobKey) -> Option<u64> {
        self.reserved
            .as_ref()
            .filter(|r| r.job != k)
            .map(|r| r.column)
    }

    /// Waiting jobs oldest first, each placed where it fits (MTAT and
    /// Compression on a slot's free cells, or a slot of its own) until one
    /// fits nowhere: that one is promised the slot where it will first fit
    /// as the jobs there end by their estimates (`reserve`), unless moving
    /// a few jobs out of a slot lets it start now (`make_room`). The others
    /// are then tried in order of expansion factor (`by_expansion`), each
    /// placed only where it leaves that promise whole (`admissible`): EASY
    /// backfilling, over the map's slots.
    pub(super) fn admit(&mut self, ctx: &mut Ctx, freed: bool) {
        if self.waiting.is_empty() {
            self.reserved = None;
            return;
        }
        // With no cell freed, a job that found no room last time finds none
        // now: only jobs submitted since are tried, against the promise to
        // the oldest. Else every waiting job is tried, and the promise made
        // to the first that finds no room. (The oldest is tried again
        // either way: what an event does after admission, alignment and
        // expansion, may have made room for it.)
        let mut head = self
            .reserved
            .take()
            .map(|r| r.job)
            .filter(|&k| !freed && self.waiting.contains(&k) && self.job(k).columns.is_empty());
        let mut freed = freed;
        if let Some(k) = head.filter(|&k| self.placeable(k)) {
            self.place_fresh(k, ctx);
            if !self.job(k).columns.is_empty() {
                head = None;
                freed = true;
            }
        }
        let since = if freed { 0 } else { self.admitted_upto };
        self.admitted_upto = self.submitted;
        let mut order: Vec<JobKey> = self
            .waiting
            .iter()
            .copied()
            .filter(|&k| self.job(k).seq >= since && Some(k) != head && self.placeable(k))
            .collect();
        order.sort_by_key(|&k| self.job(k).seq);
        // Jobs that run already, with VPs held (their processor left), are
        // placed again first, in their own slots where they can.
        let (running, fresh): (Vec<JobKey>, Vec<JobKey>) = order
            .into_iter()
            .partition(|&k| !self.job(k).columns.is_empty());
        for k in running {
            self.reposition(k, ctx);
        }
        if let Some(k) = head {
            self.reserved = self.reserve(k);
        }
        // Once one waits with a promise, the others are tried in order of
        // how long they have waited for their length.
        let mut fresh = fresh;
        if self.reserved.is_some() {
            self.by_expansion(&mut fresh);
        }
        let mut i = 0;
        while let Some(&k) = fresh.get(i) {
            i += 1;
            let promised = self.reserved.is_some();
            self.place_fresh(k, ctx);
            if self.job(k).columns.is_empty() && self.reserved.is_none() && self.make_room(k, ctx) {
                self.place_fresh(k, ctx);
            }
            if !self.job(k).columns.is_empty() {
                self.note_backfilled(k);
            } else if self.reserved.is_none() {
                self.reserved = self.reserve(k);
            }
            if !promised && self.reserved.is_some() {
                self.by_expansion(&mut fresh[i..]);
            }
        }
    }

    /// Jobs in order of their expansion factor, largest first: the
    /// bounded slowdown each would have if it started now and ran as
    /// estimated, `(waited + estimate) / max(estimate, 10 s)`; jobs
    /// without an estimate count 1; oldest first on a tie. (Shortest and
    /// longest-waiting first, as a backfilling queue ordered by expansion
    /// factor does; a job's factor grows while it waits.)
    fn by_expansion(&self, jobs: &mut [JobKey]) {
        let factor = |k: JobKey| {
            let j = self.job(k);
            j.estimate
                .map_or(1.0, |e| (self.now - j.since + e) / e.max(10.0))
        };
        jobs.sort_by(|&a, &b| {
            factor(b)
                .total_cmp(&factor(a))
                .then(self.job(a).seq.cmp(&self.job(b).seq))
        });
    }

    /// Has job `k` a VP without a processor that some processor could take?
    fn placeable(&self, k: JobKey) -> bool {
        self.job(k)
            .vps
            .values()
            .any(|v| v.row.is_none() && self.usable(k, v.arch))
    }

    /// When job `k`, in the map, is projected to end: its estimate less
    /// what it has done, at the pace of its own slot alone (`1 / τ / T`;
    /// slots lent only make it sooner). Infinite without an estimate or
    /// while a VP of it is held.
    pub(super) fn projected_end(&self, k: JobKey, tau: f64) -> f64 {
        let j = self.job(k);
        match j.estimate {
            Some(e) if j.placed as usize == j.vps.len() && j.placed > 0 => {
                self.now + (e - j.done).max(0.0) * tau * self.current_t(k)
            }
            _ => f64::INFINITY,
        }
    }

    /// The promise to job `k`, which fits nowhere now: for each column, the
    /// first projected end of its jobs after which `k`'s VPs fit in its
    /// free cells by the turnaround of a slot of its own; the column where
    /// that comes first (on a tie, the one with most room then). Where no
    /// estimate gets it there, the column with most room once every job
    /// with an estimate has ended, and no time.
    pub(super) fn reserve(&self, k: JobKey) -> Option<Reservation> {
        let (demand, t_new) = self.demand_of(k);
        if demand.counts.is_empty() || !t_new.is_finite() {
            return None;
        }
        let bound = t_new * (1.0 + 1e-9);
        let tau = self.map.columns().len().max(1) as f64;
        // The memory each host has left now, where the job needs some.
        let memory = self.job(k).memory_mb.filter(|&m| m > 0).and_then(|m| {
            let hosts = self.hosts();
            if !self.any_memory_limit() {
                return None;
            }
            let resident = self.resident();
            let room = (0..hosts.len())
                .map(|h| match hosts.offer(h as u32) {
                    Some(offer) => offer.saturating_sub(resident[h]),
                    None => u64::MAX,
                })
                .collect();
            Some((m, room))
        });
        let mut best: Option<Reservation> = None;
        for c in self.map.columns() {
            let mut r = Reservation {
                job: k,
                column: c.id,
                at: self.now,
                free_at: c.free().clone(),
                counts: demand.counts.clone(),
                bound,
                memory: memory.clone(),
            };
            r.free_at.intersect_with(&demand.rows);
            let mut jobs: Vec<JobKey> = c.jobs().map(|(_, j)| j).collect();
            jobs.sort_unstable();
            jobs.dedup();
            let mut ends: Vec<(f64, JobKey)> = jobs
                .into_iter()
                .map(|j| (self.projected_end(j, tau), j))
                .collect();
            ends.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let mut fits = self.promise_fits(&r, &r.free_at);
            for (end, j) in ends {
                if fits || !end.is_finite() {
                    break;
                }
                let mut rows = self.job(j).row_set.clone();
                rows.intersect_with(&demand.rows);
                r.free_at.union_with(&rows);
                self.give_memory(j, &mut r.memory, true);
                r.at = end;
                fits = self.promise_fits(&r, &r.free_at);
            }
            if !fits {
                r.at = f64::INFINITY;
            }
            let better = best
                .as_ref()
                .is_none_or(|b| r.at < b.at || (r.at == b.at && r.free_at.len() > b.free_at.len()));
            if better {
                best = Some(r);
            }
        }
        best
    }

    /// Job `j`'s memory on each host of `memory`'s map given back to it
    /// (`back`) or taken from it.
    fn give_memory(&self, j: JobKey, memory: &mut Option<(u64, Vec<u64>)>, back: bool) {
        let Some((_, room)) = memory.as_mut() else {
            return;
        };
        let job = self.job(j);
        let Some(m) = job.memory_mb.filter(|&m| m > 0) else {
            return;
        };
        let hosts = self.hosts();
        for (&r, &n) in &job.rows {
            let Some(left) = hosts.of(r).and_then(|h| room.get_mut(h as usize)) else {
                continue;
            };
            if *left == u64::MAX {
                continue;
            }
            let mb = m.saturating_mul(u64::from(n));
            *left = if back {
                left.saturating_add(mb)
            } else {
                left.saturating_sub(mb)
            };
        }
    }

    /// Does the promised job fit in `free` (rows of the promised column)
    /// by its bound, and in the memory `r` says its hosts have left then?
    /// For every set of its architectures, the VPs the rows can take by
    /// the bound, no host more than its memory holds, must reach the
    /// set's VPs (the cut condition of a transport problem: exact where
    /// architectures share a host).
    pub(super) fn promise_fits(&self, r: &Reservation, free: &BitSet) -> bool {
        let Some((m, room)) = &r.memory else {
            return self.counts_fit_by(&r.counts, free, r.bound);
        };
        // Per host (by number; those that say nothing of memory together
        // as one without limit, the last): VPs of each architecture its
        // free rows take by the bound.
        let hosts = self.hosts();
        if room.len() != hosts.len() {
            // (Made for another pool: a processor came or went since.)
            return false;
        }
        let a = r.counts.len().min(16);
        let none = hosts.len();
        let mut per = vec![0u64; (hosts.len() + 1) * a];
        for row in free.iter() {
            let (Some(h), Some(arch)) = (hosts.of(row), self.arch_of(row)) else {
                continue;
            };
            let Some(z) = r.counts[..a].iter().position(|&(x, _)| x == arch) else {
                continue;
            };
            let h = if room[h as usize] == u64::MAX {
                none
            } else {
                h as usize
            };
            per[h * a + z] += u64::from(slots_at(r.bound, self.cap(row)));
        }
        (1u32..(1 << a)).all(|set| {
            let want: u64 = (0..a)
                .filter(|z| set >> z & 1 == 1)
                .map(|z| u64::from(r.counts[z].1))
                .sum();
            let got: u64 = (0..=none)
                .map(|h| {
                    let s: u64 = (0..a)
                        .filter(|z| set >> z & 1 == 1)
                        .map(|z| per[h * a + z])
                        .sum();
                    if h == none {
                        s
                    } else {
                        s.min(room[h] / m)
                    }
                })
                .sum();
            got >= want
        })
    }

    /// May job `k` start in `column` with `counts[i]` VPs on `rows[i]` at
    /// turnaround `t`, as far as the promise to an older job goes? Yes
    /// where it is projected to end by the promised time, where it takes
    /// neither cells of the promised column free then nor memory the older
    /// job needs then (in another column it takes no cell; it never
    /// lengthens the round), or where it leaves enough of both for the
    /// older job still to fit then.
    pub(super) fn admissible(
        &self,
        k: JobKey,
        column: u64,
        rows: &[Row],
        counts: &[u32],
        t: f64,
    ) -> bool {
        let Some(r) = self.reserved.as_ref().filter(|r| r.job != k) else {
            return true;
        };
        // (A job left with VPs held there does not progress: it never ends.)
        let tau = self.map.columns().len().max(1) as f64;
        let whole = counts.iter().map(|&n| n as usize).sum::<usize>() >= self.job(k).vps.len();
        let end = match self.job(k).estimate {
            Some(e) if whole => self.now + e * tau * t,
            _ => f64::INFINITY,
        };
        if r.at.is_finite() && end <= r.at {
            return true;
        }
        let mut left = r.free_at.clone();
        let mut taken = false;
        if column == r.column {
            for (&row, &n) in rows.iter().zip(counts) {
                if n > 0 && left.contains(row) {
                    left.remove(row);
                    taken = true;
                }
            }
        }
        // And the memory it would take, in any column, on the hosts the
        // promised job needs memory of.
        let mut memory = r.memory.clone();
        let need = self.job(k).memory_mb.filter(|&m| m > 0);
        if let (Some((_, room)), Some(m)) = (memory.as_mut(), need) {
            let hosts = self.hosts();
            for (&row, &n) in rows.iter().zip(counts) {
                let Some(left) = hosts
                    .of(row)
                    .filter(|_| n > 0)
                    .and_then(|h| room.get_mut(h as usize))
                    .filter(|l| **l != u64::MAX)
                else {
                    continue;
                };
                *left = left.saturating_sub(m.saturating_mul(u64::from(n)));
                taken = true;
            }
        }
        if !taken {
            return true;
        }
        let after = Reservation {
            memory,
            ..r.clone()
        };
        r.at.is_finite() && self.promise_fits(&after, &left)
    }

    /// Would job `k`, already placed, moved to `counts[i]` VPs on
    /// `rows[i]` (expansion, alignment) leave the promise whole? It takes
    /// no cell of the promised column (those jobs do not move there);
    /// the memory it would take beyond what it holds now on the promised
    /// job's hosts must leave that job room by the promised time, unless
    /// it ends by then.
    pub(super) fn keeps_promise(&self, k: JobKey, rows: &[Row], counts: &[u32]) -> bool {
        let Some(r) = self
            .reserved
            .as_ref()
            .filter(|r| r.job != k && r.memory.is_some())
        else {
            return true;
        };
        let Some(m) = self.job(k).memory_mb.filter(|&m| m > 0) else {
            return true;
        };
        let tau = self.map.columns().len().max(1) as f64;
        if r.at.is_finite() && self.projected_end(k, tau) <= r.at {
            return true;
        }
        let mut memory = r.memory.clone();
        let Some((_, room)) = memory.as_mut() else {
            return true;
        };
        let hosts = self.hosts();
        let mut delta: HashMap<u32, i64> = HashMap::new();
        for (&row, &n) in &self.job(k).rows {
            if let Some(h) = hosts.of(row) {
                *delta.entry(h).or_default() -= i64::from(n);
            }
        }
        for (&row, &n) in rows.iter().zip(counts) {
            if let Some(h) = hosts.of(row) {
                *delta.entry(h).or_default() += i64::from(n);
            }
        }
        let mut more = false;
        for (h, d) in delta {
            if let Some(left) = room
                .get_mut(h as usize)
                .filter(|l| d > 0 && **l != u64::MAX)
            {
                *left = left.saturating_sub(m.saturating_mul(d as u64));
                more = true;
            }
        }
        if !more {
            return true;
        }
        let after = Reservation {
            memory,
            ..r.clone()
        };
        r.at.is_finite() && self.promise_fits(&after, &r.free_at)
    }

    /// A job of another slot that expansion or alignment moved since the
    /// promise was made may hold memory on the promised job's hosts (a VP
    /// keeps its memory in every slot): a promise that no longer holds is
    /// made again, later. (One that still holds stays as it is.)
    fn keep_promise_whole(&mut self) {
        let Some((k, at)) = self
            .reserved
            .as_ref()
            .filter(|r| r.memory.is_some() && r.at.is_finite())
            .map(|r| (r.job, r.at))
        else {
            return;
        };
        if let Some(again) = self.reserve(k).filter(|n| n.at > at * (1.0 + 1e-9) + 1e-9) {
            self.reserved = Some(again);
        }
    }

    /// Job `k` was just placed: if it runs past the promised time, the
    /// cells it took in the promised column are no longer free then, nor
    /// the memory it took on the promised job's hosts.
    fn note_backfilled(&mut self, k: JobKey) {
        let tau = self.map.columns().len().max(1) as f64;
        let end = self.projected_end(k, tau);
        let Some(mut r) = self.reserved.take() else {
            return;
        };
        if r.job != k && !(r.at.is_finite() && end <= r.at) {
            if self.job(k).columns.contains(&r.column) {
                r.free_at.remove_all(&self.job(k).row_set);
            }
            self.give_memory(k, &mut r.memory, false);
        }
        self.reserved = Some(r);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::sched::mtat::mtat_pools;
    use crate::sched::random::{Generator, Shape};
    use crate::sched::scheduler::SchedConfig;
    use crate::sched::Placement;

    /// Could job `k`'s VPs all run on `rows` by `bound`? MTAT's minimum
    /// (itself tested against every assignment) decides; an architecture
    /// of `counts` (those the pool has for it) with no row among them
    /// cannot. Where the job needs memory, each host takes no more VPs
    /// than `room` (MB it has left) holds: a maximum flow from the
    /// architectures (their VPs) through the hosts (the VPs their rows
    /// take by the bound) to the end (what their memory holds) decides.
    fn fits(
        s: &Scheduler,
        k: JobKey,
        counts: &[(u32, u32)],
        rows: &[Row],
        bound: f64,
        room: &[u64],
    ) -> bool {
        let present = counts
            .iter()
            .all(|&(a, _)| rows.iter().any(|&r| s.arch_of(r) == Some(a)));
        let by_time = s.pool_input(k, rows).is_some_and(|inp| {
            mtat_pools(&inp.counts, &inp.pool_of, &inp.caps, &inp.preferred).t_min <= bound
        });
        let Some(m) = s.job(k).memory_mb.filter(|&m| m > 0) else {
            return present && by_time;
        };
        // Nodes: 0 source, 1..=A architectures, then hosts, then the sink.
        let numbers = s.hosts();
        let hosts: Vec<u32> = {
            let mut h: Vec<u32> = rows.iter().filter_map(|&r| numbers.of(r)).collect();
            h.sort_unstable();
            h.dedup();
            h
        };
        let a = counts.len();
        let n = a + hosts.len() + 2;
        let sink = n - 1;
        let mut cap = vec![vec![0u64; n]; n];
        for (z, &(_, x)) in counts.iter().enumerate() {
            cap[0][1 + z] = u64::from(x);
        }
        for &r in rows {
            let (Some(host), Some(arch)) = (numbers.of(r), s.arch_of(r)) else {
                continue;
            };
            let (Some(z), Ok(h)) = (
                counts.iter().position(|&(x, _)| x == arch),
                hosts.binary_search(&host),
            ) else {
                continue;
            };
            cap[1 + z][1 + a + h] += u64::from(slots_at(bound, s.cap(r)));
        }
        for (h, &number) in hosts.iter().enumerate() {
            cap[1 + a + h][sink] = (room[number as usize] / m).min(u64::MAX / 4);
        }
        let mut flow = 0u64;
        loop {
            // Breadth first for a path with room left.
            let mut prev = vec![usize::MAX; n];
            prev[0] = 0;
            let mut queue = std::collections::VecDeque::from([0usize]);
            while let Some(u) = queue.pop_front() {
                for v in 0..n {
                    if prev[v] == usize::MAX && cap[u][v] > 0 {
                        prev[v] = u;
                        queue.push_back(v);
                    }
                }
            }
            if prev[sink] == usize::MAX {
                break;
            }
            let mut push = u64::MAX;
            let mut v = sink;
            while v != 0 {
                push = push.min(cap[prev[v]][v]);
                v = prev[v];
            }
            let mut v = sink;
            while v != 0 {
                cap[prev[v]][v] -= push;
                cap[v][prev[v]] += push;
                v = prev[v];
            }
            flow += push;
        }
        present && flow >= counts.iter().map(|&(_, x)| u64::from(x)).sum::<u64>()
    }

    /// When job `k` is first projected to fit in `column`, found the long
    /// way: every instant at which a job of that slot ends is tried, and
    /// at each the rows it may use that no job of the slot still running
    /// then holds (cells only lent there do not count: they are taken back
    /// before anything is placed), and the memory each host has left once
    /// every job (of any slot) that ends by then is gone.
    pub(super) fn earliest_fit(s: &Scheduler, k: JobKey, column: u64) -> f64 {
        let (demand, t_new) = s.demand_of(k);
        let bound = t_new * (1.0 + 1e-9);
        let tau = s.map.columns().len().max(1) as f64;
        let ends: Vec<(JobKey, f64)> = s
            .jobs
            .iter()
            .enumerate()
            .filter(|(_, j)| j.is_some())
            .map(|(i, _)| (i as JobKey, s.projected_end(i as JobKey, tau)))
            .collect();
        let home: Vec<(JobKey, f64)> = ends
            .iter()
            .copied()
            .filter(|&(j, _)| s.job(j).columns.first() == Some(&column))
            .collect();
        let mut instants: Vec<f64> = home.iter().map(|&(_, e)| e).collect();
        instants.push(s.now);
        instants
            .into_iter()
            .filter(|t| t.is_finite())
            .filter(|&t| {
                let rows: Vec<Row> = demand
                    .rows
                    .iter()
                    .filter(|&r| {
                        !home
                            .iter()
                            .any(|&(j, end)| end > t && s.job(j).row_set.contains(r))
                    })
                    .collect();
                let numbers = s.hosts();
                let mut room: Vec<u64> = (0..numbers.len())
                    .map(|h| numbers.offer(h as u32).unwrap_or(u64::MAX))
                    .collect();
                for &(j, end) in &ends {
                    let job = s.job(j);
                    let Some(m) = job.memory_mb.filter(|_| end > t) else {
                        continue;
                    };
                    for (&r, &n) in &job.rows {
                        if let Some(h) = numbers.of(r).filter(|&h| numbers.offer(h).is_some()) {
                            room[h as usize] = room[h as usize].saturating_sub(m * u64::from(n));
                        }
                    }
                }
                fits(s, k, &demand.counts, &rows, bound, &room)
            })
            .fold(f64::INFINITY, f64::min)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        /// Whatever happens (jobs come, grow, shrink, end, are suspended;
        /// processors come and go; time passes), after every event the
        /// oldest waiting job's promise holds: in the promised slot it
        /// still fits by the promised time, counted the long way, with
        /// every job placed since in the map, and in the memory its hosts
        /// have left then; it waits with no cell; no cell holds two jobs
        /// and no host's memory is oversubscribed (`check_invariants`).
        #[test]
        fn no_backfilled_job_delays_the_promise(seed in any::<u64>(), two_arch in any::<bool>(), slots in 1usize..4) {
            let mut g = Generator::new(seed, Shape {
                processors: 6,
                per_host: 2,
                arches: if two_arch { vec!["x86_64".into(), "aarch64".into()] } else { vec!["x86_64".into()] },
                max_job: 6,
                target_jobs: 6,
                memory: true,
                chosen: true,
                estimates: true,
                ..Shape::default()
            });
            let mut s = Scheduler::new(SchedConfig { max_slots: slots, ..Placement::Mig.config() });
            let mut now = 0.0;
            for e in g.pool() {
                s.on_event_at(now, e).unwrap();
            }
            for _ in 0..150 {
                now += g.pause();
                let e = g.event();
                s.on_event_at(now, e.clone()).unwrap();
                if let Err(why) = s.check_invariants() {
                    panic!("after {e:?}: {why}");
                }
                let Some(r) = s.reserved.clone() else { continue };
                prop_assert!(s.waiting.contains(&r.job) && s.job(r.job).columns.is_empty(),
                    "after {:?}: {} promised, waiting {}, slots {:?}", e, s.job(r.job).id, s.waiting.contains(&r.job), s.job(r.job).columns);
                if r.at.is_finite() {
                    let kept = earliest_fit(&s, r.job, r.column);
                    prop_assert!(kept <= r.at * (1.0 + 1e-9) + 1e-9,
                        "after {:?}: promised {} at {}, fits only at {}", e, s.job(r.job).id, r.at, kept);
                }
            }
        }
    }
}
