//! What MTAT and Compression say for one job on a set of rows: its
//! candidate processors, its turnaround now and at best, the plan that
//! reaches it (within what the hosts' memory holds: `memory`), and how
//! many optional moves that costs.

use std::collections::HashMap;

use super::{Ctx, PoolInput, Scheduler};
use crate::sched::compress::compress_pools;
use crate::sched::expand::Demand;
use crate::sched::map::{BitSet, Column, JobKey, Row};
use crate::sched::mtat::{finish_time, mtat_pools, slots_at, t_min_by_classes};

/// `Scheduler::class_room`'s answer.
pub(super) type ClassRoom = Vec<(u64, Vec<(u32, u64)>)>;

impl Scheduler {
    pub(super) fn fair_order(&self) -> Vec<JobKey> {
        self.queue.iter().copied().collect()
    }

    pub(super) fn arch_of(&self, r: Row) -> Option<u32> {
        self.map.row_arch(r)
    }

    pub(super) fn cap(&self, r: Row) -> f64 {
        self.map.row_capacity_of(r)
    }

    pub(super) fn dirty_row(&self, r: Row, ctx: &mut Ctx) {
        ctx.dirty_rows.push(r);
    }

    /// `max n_r / a_r` of the job's current placement.
    pub(super) fn current_t(&self, k: JobKey) -> f64 {
        let j = self.job(k);
        if let Some(t) = j.t_cur.get() {
            return t;
        }
        let t = j
            .rows
            .iter()
            .map(|(&r, &n)| finish_time(n, self.cap(r)))
            .fold(0.0, f64::max);
        j.t_cur.set(Some(t));
        t
    }

    /// Rows the job may use inside its own columns: its rows plus rows free in
    /// all its columns, of the architectures it has VPs of.
    pub(super) fn candidates(&self, k: JobKey) -> Vec<Row> {
        self.candidate_set(k).to_vec()
    }

    /// `candidates` narrowed to what MTAT and Compression can pick: the
    /// job's own rows, and of the free ones in each capacity class only
    /// the first `x` (its VPs of that architecture). Rows of one class are
    /// alike but for their index, and ties go to the lower one, so no
    /// placement uses a row beyond those: the plan is the same, found on
    /// tens of rows instead of thousands.
    pub(super) fn useful_candidates(&self, k: JobKey) -> Vec<Row> {
        self.useful_of(k, &self.free_candidates(k))
    }

    /// `useful_candidates` from the job's free candidates `free`.
    pub(super) fn useful_of(&self, k: JobKey, free: &BitSet) -> Vec<Row> {
        let j = self.job(k);
        // Few free rows: all of them (narrowing would cost more than MTAT).
        // Where the memory their hosts have left decides how many of its
        // VPs each row takes, rows of one class are alike only if their
        // hosts have the same room, and only if no two share a host.
        let by_memory = j.memory_mb.is_some_and(|m| m > 0) && self.any_memory_limit();
        let all = || {
            let mut set = j.row_set.clone();
            set.union_with(free);
            set.to_vec()
        };
        if free.len() <= 4 * j.vps.len().max(16) {
            return all();
        }
        if by_memory {
            return match self.memory_caps(k).filter(|_| self.hosts().single) {
                Some(caps) => self.narrowed_by_memory(k, free, &caps),
                None => all(),
            };
        }
        self.narrowed(k, free)
    }

    /// `narrowed` where each host is one row and `caps` says how many VPs
    /// of the job each holds: rows alike in capacity class and in room
    /// (up to the VPs of their architecture) are taken lowest first, as
    /// many as its VPs; rows whose host holds none of its VPs are left
    /// out.
    fn narrowed_by_memory(&self, k: JobKey, free: &BitSet, caps: &[u32]) -> Vec<Row> {
        let j = self.job(k);
        let hosts = self.hosts();
        let mut set = j.row_set.clone();
        let mut taken: HashMap<(u32, u32), u32> = HashMap::new();
        for r in free.iter() {
            let (Some(class), Some(arch), Some(h)) =
                (self.map.row_class(r), self.arch_of(r), hosts.of(r))
            else {
                continue;
            };
            let x = j
                .arches
                .iter()
                .find(|&&(a, _)| a == arch)
                .map_or(0, |&(_, x)| x);
            let room = caps[h as usize].min(x);
            if room == 0 {
                continue;
            }
            let n = taken.entry((class, room)).or_default();
            if *n < x {
                *n += 1;
                set.insert(r);
            }
        }
        set.to_vec()
    }

    /// The job's own rows and, per capacity class, the first of `free` MTAT
    /// could pick (see `useful_candidates`).
    fn narrowed(&self, k: JobKey, free: &BitSet) -> Vec<Row> {
        let j = self.job(k);
        let mut set = j.row_set.clone();
        // A class's own rows come first (they are preferred at equal
        // times), so its free rows are only ever used up to its VPs less
        // those.
        let mut taken = vec![0u32; self.map.class_count()];
        for r in j.row_set.iter() {
            if let Some(n) = self
                .map
                .row_class(r)
                .and_then(|c| taken.get_mut(c as usize))
            {
                *n += 1;
            }
        }
        for r in free.iter() {
            let (Some(class), Some(arch)) = (self.map.row_class(r), self.arch_of(r)) else {
                continue;
            };
            let x = j
                .arches
                .iter()
                .find(|&&(a, _)| a == arch)
                .map_or(0, |&(_, x)| x);
            if let Some(n) = taken.get_mut(class as usize).filter(|n| **n < x) {
                *n += 1;
                set.insert(r);
            }
        }
        set.to_vec()
    }

    /// `candidates` as a set.
    pub(super) fn candidate_set(&self, k: JobKey) -> BitSet {
        let mut set = self.free_candidates(k);
        set.union_with(&self.job(k).row_set);
        set
    }

    /// Rows free in all the job's columns, of its architectures and with
    /// the memory it needs (the candidates it does not hold already).
    pub(super) fn free_candidates(&self, k: JobKey) -> BitSet {
        let j = self.job(k);
        let mut set: BitSet = self.map.free_in_all(&j.columns);
        match j.arches[..] {
            // One architecture (the common case): its rows as they are.
            [(a, _)] => match self.map.arch_rows(a) {
                Some(rows) => set.intersect_with(rows),
                None => set.intersect_with(&BitSet::default()),
            },
            _ => {
                let mut wanted = BitSet::default();
                for &(a, _) in &j.arches {
                    if let Some(rows) = self.map.arch_rows(a) {
                        wanted.union_with(rows);
                    }
                }
                set.intersect_with(&wanted);
            }
        }
        if let Some(m) = self.allowed_rows(k) {
            set.intersect_with(&m);
        }
        set
    }

    /// The rows job `k` may use: those whose host offers the memory it
    /// needs (or does not say what it offers), and among the processors
    /// chosen for it if some were; `None` when neither limits it.
    pub(super) fn allowed_rows(&self, k: JobKey) -> Option<BitSet> {
        let j = self.job(k);
        let memory = j.memory_mb.map(|need| {
            let mut masks = self.memory_masks.borrow_mut();
            masks
                .entry(need)
                .or_insert_with(|| {
                    let mut set = BitSet::default();
                    for (r, p) in self.map.processors() {
                        if p.memory_mb.is_none_or(|m| m >= need) {
                            set.insert(r);
                        }
                    }
                    set
                })
                .clone()
        });
        match (memory, &j.only) {
            (m, None) => m,
            (None, Some(o)) => Some(o.clone()),
            (Some(mut m), Some(o)) => {
                m.intersect_with(o);
                Some(m)
            }
        }
    }

    /// Has architecture `a` a live row job `k` may use?
    pub(super) fn usable(&self, k: JobKey, a: u32) -> bool {
        let Some(rows) = self.map.arch_rows(a) else {
            return false;
        };
        match self.allowed_rows(k) {
            None => !rows.is_empty(),
            Some(m) => rows.intersection_len(&m) > 0,
        }
    }

    /// Job `k`'s demand on the map: its architectures' live rows that have
    /// the memory it needs (architectures left without any are left out),
    /// and the turnaround of a slot of its own there.
    pub(super) fn demand_of(&self, k: JobKey) -> (Demand, f64) {
        let j = self.job(k);
        let mut d = Demand::new(&self.map, j.arches.iter().copied());
        let memory = self.allowed_rows(k);
        if let Some(m) = &memory {
            d.rows.intersect_with(m);
            d.counts.retain(|&(a, _)| {
                self.map
                    .arch_rows(a)
                    .is_some_and(|r| r.intersection_len(m) > 0)
            });
        }
        let t_new = d
            .counts
            .iter()
            .map(|&(a, x)| {
                let classes = match &memory {
                    None => self.map.arch_capacities(a),
                    Some(m) => self.classes_among(a, m),
                };
                t_min_by_classes(x, &classes)
            })
            .fold(0.0, f64::max);
        (d, t_new)
    }

    /// Architecture `a`'s live rows among `rows` as `(capacity, how
    /// many)`, slowest first, classes without any left out.
    pub(super) fn classes_among(&self, a: u32, rows: &BitSet) -> Vec<(f64, u32)> {
        self.map
            .capacity_classes(a)
            .map(|(c, of)| (c, of.intersection_len(rows) as u32))
            .filter(|&(_, n)| n > 0)
            .collect()
    }

    /// The MTAT input for the job's VPs on `rows`: VPs per architecture
    /// pool, each row's pool, capacity and current VPs. Architectures with no
    /// row among `rows` are left out (their VPs are held).
    pub(super) fn pool_input(&self, k: JobKey, rows: &[Row]) -> Option<PoolInput> {
        let j = self.job(k);
        // Architectures with a row among `rows`, and the job's VPs of each.
        let mut arches: Vec<(u32, u32)> = Vec::new();
        let mut pool_of = Vec::with_capacity(rows.len());
        let mut caps = Vec::with_capacity(rows.len());
        let mut current = Vec::with_capacity(rows.len());
        for &r in rows {
            let a = self.arch_of(r).unwrap_or(u32::MAX);
            if !arches.iter().any(|&(x, _)| x == a) {
                arches.push((a, 0));
            }
            caps.push(self.cap(r));
            // (The set first: most candidates are free rows.)
            let here = if j.row_set.contains(r) {
                j.rows.get(&r).copied().unwrap_or(0)
            } else {
                0
            };
            current.push(here);
        }
        for &(a, n) in &j.arches {
            if let Some(e) = arches.iter_mut().find(|(x, _)| *x == a) {
                e.1 = n;
            }
        }
        // Pools in architecture order, those the job has VPs of.
        arches.retain(|&(_, n)| n > 0);
        if arches.is_empty() {
            return None;
        }
        arches.sort_unstable();
        for &r in rows {
            let a = self.arch_of(r).unwrap_or(u32::MAX);
            pool_of.push(
                arches
                    .iter()
                    .position(|&(x, _)| x == a)
                    .unwrap_or(usize::MAX),
            );
        }
        Some(PoolInput {
            counts: arches.iter().map(|&(_, n)| n).collect(),
            pool_of,
            caps,
            preferred: current.iter().map(|&n| n > 0).collect(),
            current,
        })
    }

    /// MTAT and then Compression (fewest processors) and/or a fill that keeps
    /// VPs where they are by `max(T, keep_t)` — so a caller passing the job's
    /// current turnaround moves no VP that need not move.
    pub(super) fn plan_both(
        &self,
        k: JobKey,
        rows: &[Row],
        keep_t: f64,
    ) -> Option<(f64, Vec<u32>, Vec<u32>)> {
        let inp = self.pool_input(k, rows)?;
        let m = mtat_pools(&inp.counts, &inp.pool_of, &inp.caps, &inp.preferred);
        if !m.t_min.is_finite() {
            return None;
        }
        let compressed =
            compress_pools(&inp.counts, &inp.pool_of, &inp.caps, m.t_min, &inp.current)?;
        let minimal = inp.fill(m.t_min.max(keep_t))?;
        // Hosts whose memory would not hold it: MTAT and Compression
        // within what they hold.
        if let Some(caps) = self.memory_caps(k) {
            if !self.within(&caps, rows, &compressed) || !self.within(&caps, rows, &minimal) {
                let [c, m] = self.capped_plan(&inp, rows, &caps, [(true, 0.0), (false, keep_t)]);
                let (t, compressed) = c?;
                let (_, minimal) = m?;
                return Some((t, compressed, minimal));
            }
        }
        Some((m.t_min, compressed, minimal))
    }

    /// MTAT and Compression for the job's VPs on `rows`: `T` and VPs per row
    /// (parallel to `rows`), or the fill by `T` when not `compressed`.
    pub(super) fn plan(
        &self,
        k: JobKey,
        rows: &[Row],
        compressed: bool,
        keep_t: f64,
    ) -> Option<(f64, Vec<u32>)> {
        let inp = self.pool_input(k, rows)?;
        let m = mtat_pools(&inp.counts, &inp.pool_of, &inp.caps, &inp.preferred);
        if !m.t_min.is_finite() {
            return None;
        }
        let out = if compressed {
            compress_pools(&inp.counts, &inp.pool_of, &inp.caps, m.t_min, &inp.current)?
        } else {
            inp.fill(m.t_min.max(keep_t))?
        };
        if let Some(caps) = self.memory_caps(k) {
            if !self.within(&caps, rows, &out) {
                let [plan] = self.capped_plan(&inp, rows, &caps, [(compressed, keep_t)]);
                return plan;
            }
        }
        Some((m.t_min, out))
    }

    /// Started VPs that `counts` on `rows` would move, beyond those that must
    /// move anyway because their processor left.
    /// `rows` is sorted (as `candidates` returns it).
    pub(super) fn optional_moves(&self, k: JobKey, rows: &[Row], counts: &[u32]) -> usize {
        let j = self.job(k);
        j.rows
            .iter()
            .map(|(r, &have)| {
                let keep = rows
                    .binary_search(r)
                    .ok()
                    .and_then(|i| counts.get(i))
                    .copied()
                    .unwrap_or(0);
                have.saturating_sub(keep) as usize
            })
            .sum()
    }

    /// Could the job finish strictly before `t` on its own rows plus `free`?
    /// Every architecture pool must hold its VPs with each processor
    /// finishing before `t`: `sum ceil(t a_r) - 1 >= X_z`. The free rows are
    /// counted per capacity class (a popcount each), not one by one: it
    /// spares MTAT for the many jobs that cannot get faster.
    pub(super) fn could_beat(&self, k: JobKey, free: &BitSet, t: f64) -> bool {
        let bound = t * (1.0 - 1e-9);
        // Whole VPs finishing strictly before the bound: ceil(y) - 1, with
        // casts rather than libm calls.
        let before = |a: f64| -> u64 {
            let y = bound * a;
            if y > 1.0 {
                let whole = y as u64;
                if whole as f64 == y {
                    whole - 1
                } else {
                    whole
                }
            } else {
                0
            }
        };
        let j = self.job(k);
        j.arches.iter().all(|&(arch, x)| {
            // Its own rows of the architecture, counted per capacity class
            // too (a popcount each rather than a walk of its rows).
            let mut room: u64 = self
                .map
                .capacity_classes(arch)
                .map(|(a, rows)| j.row_set.intersection_len(rows) as u64 * before(a))
                .sum();
            for (a, rows) in self.map.capacity_classes(arch) {
                if room >= u64::from(x) {
                    break;
                }
                room = room
                    .saturating_add((free.intersection_len(rows) as u64).saturating_mul(before(a)));
            }
            room >= u64::from(x)
        })
    }

    /// Could `demand` finish by `t` on `rows`? Each architecture's VPs must
    /// fit in `sum slots_at(t, a_r)` over its rows: exactly when MTAT's
    /// turnaround there is at most `t`. Linear, no allocation.
    pub(super) fn can_finish_by(&self, demand: &Demand, rows: &[Row], t: f64) -> bool {
        demand.counts.iter().all(|&(a, x)| {
            let mut room: u64 = 0;
            for &r in rows {
                if self.arch_of(r) == Some(a) {
                    room += u64::from(slots_at(t, self.cap(r)));
                    if room >= u64::from(x) {
                        return true;
                    }
                }
            }
            false
        })
    }

    /// Could job `k`'s VPs all run on rows of `set` finishing by `t`? Per
    /// architecture, `sum slots_at(t, a_r)` over its rows in `set` must
    /// hold its VPs: counted per capacity class, a popcount each.
    pub(super) fn fits_by(&self, k: JobKey, set: &BitSet, t: f64) -> bool {
        self.counts_fit_by(&self.job(k).arches, set, t)
    }

    /// For `column_fits`: per architecture, its VPs and, slowest first,
    /// each capacity class with the VPs one of its processors holds by `t`.
    pub(super) fn class_room(&self, counts: &[(u32, u32)], t: f64) -> ClassRoom {
        counts
            .iter()
            .map(|&(arch, x)| {
                let per = self
                    .map
                    .class_ids(arch)
                    .map(|(a, class)| (class, u64::from(slots_at(t, a))))
                    .collect();
                (u64::from(x), per)
            })
            .collect()
    }

    /// `counts_fit_by` on a column's free cells, from its per-class counts.
    pub(super) fn column_fits(&self, room: &ClassRoom, c: &Column) -> bool {
        room.iter().all(|(x, per)| {
            let mut got: u64 = 0;
            for &(class, slots) in per {
                got = got.saturating_add(u64::from(c.free_in_class(class)).saturating_mul(slots));
                if got >= *x {
                    return true;
                }
            }
            false
        })
    }

    /// `fits_by` for `(architecture, VPs)` counts.
    pub(super) fn counts_fit_by(&self, counts: &[(u32, u32)], set: &BitSet, t: f64) -> bool {
        counts.iter().all(|&(arch, x)| {
            let mut room: u64 = 0;
            for (a, rows) in self.map.capacity_classes(arch) {
                room = room.saturating_add(
                    (set.intersection_len(rows) as u64).saturating_mul(u64::from(slots_at(t, a))),
                );
                if room >= u64::from(x) {
                    return true;
                }
            }
            false
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::sched::random::{Generator, Shape};
    use crate::sched::scheduler::SchedConfig;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Narrowed candidates plan a job exactly as all of them do: the
        /// same turnaround, the same VPs on the same rows (none on a row
        /// left out), compressed and filled (jobs whose rows the hosts'
        /// memory tells apart are not narrowed).
        #[test]
        fn narrowed_candidates_plan_as_all_of_them(seed in any::<u64>(), memory in any::<bool>()) {
            let mut g = Generator::new(seed, Shape {
                processors: 24,
                per_host: 2,
                arches: vec!["x86_64".into(), "aarch64".into()],
                max_job: 10,
                target_jobs: 5,
                memory,
                ..Shape::default()
            });
            let mut s = Scheduler::new(SchedConfig::default());
            for e in g.pool() {
                s.on_event(e).unwrap();
            }
            for _ in 0..80 {
                let e = g.event();
                s.on_event(e).unwrap();
                for k in 0..s.jobs.len() as JobKey {
                    if s.jobs[k as usize].is_none() || s.job(k).columns.is_empty() {
                        continue;
                    }
                    // (Not narrowed where the hosts' memory tells rows apart.)
                    if s.job(k).memory_mb.is_some_and(|m| m > 0) && s.any_memory_limit() {
                        continue;
                    }
                    let all = s.candidates(k);
                    let narrow = s.narrowed(k, &s.free_candidates(k));
                    let keep = s.current_t(k);
                    let spread = |rows: &[Row], counts: &[u32]| -> BTreeMap<Row, u32> {
                        rows.iter().zip(counts).filter(|(_, &n)| n > 0).map(|(&r, &n)| (r, n)).collect()
                    };
                    let a = s.plan_both(k, &all, keep);
                    let b = s.plan_both(k, &narrow, keep);
                    match (a, b) {
                        (None, None) => {}
                        (Some((ta, ca, ma)), Some((tb, cb, mb))) => {
                            prop_assert_eq!(ta, tb);
                            prop_assert_eq!(spread(&all, &ca), spread(&narrow, &cb));
                            prop_assert_eq!(spread(&all, &ma), spread(&narrow, &mb));
                        }
                        (a, b) => prop_assert!(false, "{a:?} against {b:?}"),
                    }
                }
            }
        }
    }
}
