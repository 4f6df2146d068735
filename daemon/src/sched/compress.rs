//! The Compression algorithm (seed 000, section 4.2): the smallest set of
//! processors that still reaches a given turnaround, and an assignment on it
//! that moves as few VPs as possible.
//!
//! What lives here: `compress` (one pool), `compress_pools` (several
//! architectures) and `fill` (place VPs within a time bound keeping those that
//! may stay). What does not: computing the bound itself (`mtat`).
//!
//! # Where the paper's formula and its theorems disagree
//!
//! * **One pool.** The paper's step 3 frees processors in order of increasing
//!   VP count while `x_if <= free`, then subtracts `x_if` from `free`. Freeing
//!   processor `i` really removes its whole capacity `floor(x_imax_i)` from the
//!   pool, not just its VPs, so that bookkeeping can both stop early and free
//!   one processor too many. Theorem 3 (the smallest set reaching `T_min`) is
//!   what we implement directly: a set reaches `T` exactly when the whole VPs
//!   it can finish by `T`, `sum floor(T a_i)`, cover `X`; the fewest
//!   processors that do so are the ones with the largest `floor(T a_i)`.
//!   Ties prefer processors that already hold more of the job's VPs, so the
//!   result also moves few VPs.
//! * **Several pools.** The paper compresses pool `z` against its own `T_z`;
//!   Theorem 4 claims the union is the smallest set reaching `T_min`. Since
//!   `T_z <= T_min`, compressing every pool against the job's overall
//!   `T_min` can free more processors while the job still finishes at
//!   `T_min` (regression test `regression_pools_compress_to_the_overall_t_min`).
//!   The theorem wins: every pool is compressed against `T_min`.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::mtat::slots_at;

/// Assign `x` VPs to the processors where `allowed[i]`, each holding at most
/// `slots_at(t, caps[i])`. VPs already on an allowed processor stay there as
/// far as the bound allows (`current[i]`); the rest go where they finish
/// soonest. `None` when the allowed processors cannot take `x` VPs by `t`.
pub fn fill(x: u32, caps: &[f64], t: f64, current: &[u32], allowed: &[bool]) -> Option<Vec<u32>> {
    let n = caps.len();
    let limit: Vec<u32> = (0..n)
        .map(|i| {
            if allowed.get(i).copied().unwrap_or(true) {
                slots_at(t, caps[i])
            } else {
                0
            }
        })
        .collect();
    let capacity: u64 = limit.iter().map(|&v| u64::from(v)).sum();
    if capacity < u64::from(x) {
        return None;
    }
    let mut out: Vec<u32> = (0..n)
        .map(|i| current.get(i).copied().unwrap_or(0).min(limit[i]))
        .collect();
    let mut kept: u64 = out.iter().map(|&v| u64::from(v)).sum();
    // More VPs kept than needed (the job shrank): drop from the slowest-finishing.
    while kept > u64::from(x) {
        let worst = (0..n).filter(|&i| out[i] > 0).max_by(|&i, &j| {
            let l = f64::from(out[i]) * caps[j];
            let r = f64::from(out[j]) * caps[i];
            l.partial_cmp(&r).unwrap_or(Ordering::Equal).then(j.cmp(&i))
        })?;
        out[worst] -= 1;
        kept -= 1;
    }
    // Place the rest where they finish soonest.
    #[derive(PartialEq)]
    struct Slot(u32, f64, usize);
    impl Eq for Slot {}
    impl PartialOrd for Slot {
        fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
            Some(self.cmp(o))
        }
    }
    impl Ord for Slot {
        fn cmp(&self, o: &Self) -> Ordering {
            let l = f64::from(o.0) * self.1;
            let r = f64::from(self.0) * o.1;
            l.partial_cmp(&r)
                .unwrap_or(Ordering::Equal)
                .then(o.2.cmp(&self.2))
        }
    }
    let mut heap: BinaryHeap<Slot> = (0..n)
        .filter(|&i| out[i] < limit[i])
        .map(|i| Slot(out[i] + 1, caps[i], i))
        .collect();
    let mut left = u64::from(x) - kept;
    while left > 0 {
        let Slot(next, cap, i) = heap.pop()?;
        out[i] = next;
        left -= 1;
        if next < limit[i] {
            heap.push(Slot(next + 1, cap, i));
        }
    }
    Some(out)
}

/// Compression for one pool: the fewest processors that finish `x` VPs by
/// `t`, with an assignment on them that keeps VPs where they are
/// (`current[i]`) as far as possible. `None` if even all processors cannot.
pub fn compress(x: u32, caps: &[f64], t: f64, current: &[u32]) -> Option<Vec<u32>> {
    let n = caps.len();
    if x == 0 {
        return Some(vec![0; n]);
    }
    let slots: Vec<u32> = caps.iter().map(|&a| slots_at(t, a)).collect();
    let cur = |i: usize| current.get(i).copied().unwrap_or(0);
    let mut order: Vec<usize> = (0..n).filter(|&i| slots[i] > 0).collect();
    order.sort_unstable_by(|&i, &j| {
        slots[j]
            .cmp(&slots[i])
            .then(cur(j).cmp(&cur(i)))
            .then(i.cmp(&j))
    });
    let mut allowed = vec![false; n];
    let mut covered: u64 = 0;
    for &i in &order {
        if covered >= u64::from(x) {
            break;
        }
        allowed[i] = true;
        covered += u64::from(slots[i]);
    }
    if covered < u64::from(x) {
        return None;
    }
    fill(x, caps, t, current, &allowed)
}

/// Compression over architecture pools, every pool against the same `t` (the
/// job's overall `T_min`; see the module doc). Arguments as in `mtat_pools`.
pub fn compress_pools(
    demand: &[u32],
    pool_of: &[usize],
    caps: &[f64],
    t: f64,
    current: &[u32],
) -> Option<Vec<u32>> {
    if let [x] = demand {
        if pool_of.iter().all(|&z| z == 0) {
            return compress(*x, caps, t, current);
        }
    }
    let mut out = vec![0; caps.len()];
    for (z, &x) in demand.iter().enumerate() {
        let members: Vec<usize> = (0..caps.len()).filter(|&i| pool_of[i] == z).collect();
        let pool_caps: Vec<f64> = members.iter().map(|&i| caps[i]).collect();
        let pool_cur: Vec<u32> = members
            .iter()
            .map(|&i| current.get(i).copied().unwrap_or(0))
            .collect();
        let got = compress(x, &pool_caps, t, &pool_cur)?;
        for (k, &i) in members.iter().enumerate() {
            out[i] = got[k];
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::super::mtat::{mtat, mtat_pools, tests::brute_force_t, turnaround};
    use super::*;
    use proptest::prelude::*;

    fn used(v: &[u32]) -> usize {
        v.iter().filter(|&&n| n > 0).count()
    }

    /// The fewest processors whose whole-VP capacity by `t` covers `x`, by
    /// trying every subset.
    fn brute_force_min_set(x: u32, caps: &[f64], t: f64) -> usize {
        let n = caps.len();
        (0u32..1 << n)
            .filter(|mask| {
                let cap: u64 = (0..n)
                    .filter(|i| mask >> i & 1 == 1)
                    .map(|i| u64::from(slots_at(t, caps[i])))
                    .sum();
                cap >= u64::from(x)
            })
            .map(|mask| mask.count_ones() as usize)
            .min()
            .unwrap_or(usize::MAX)
    }

    #[test]
    fn paper_example_2_two_processors_suffice() {
        let caps = [1.0, 1.0, 1.0];
        let m = mtat(4, &caps, &[]);
        let c = compress(4, &caps, m.t_min, &m.assignment).unwrap();
        assert_eq!(used(&c), 2);
        assert_eq!(c.iter().sum::<u32>(), 4);
        assert!(turnaround(&c, &caps) <= m.t_min + 1e-12);
    }

    #[test]
    fn paper_example_3_figure_4b() {
        // x_max = {6, 3, 1.5}; processor 3 is freed and the job runs as {6, 3, 0}.
        let caps = [4.0, 2.0, 1.0];
        let m = mtat(9, &caps, &[]);
        let c = compress(9, &caps, m.t_min, &m.assignment).unwrap();
        assert_eq!(c, vec![6, 3, 0]);
    }

    #[test]
    fn keeps_vps_where_they_are_when_it_can() {
        // Four equal processors, T = 2 allows two per processor; the job sits on
        // processors 3 and 4, so compression keeps it there.
        let c = compress(4, &[1.0; 4], 2.0, &[0, 0, 2, 2]).unwrap();
        assert_eq!(c, vec![0, 0, 2, 2]);
    }

    #[test]
    fn regression_pools_compress_to_the_overall_t_min() {
        // Pool A: 2 VPs on two speed-1 processors (T_A = 1). Pool B: 4 VPs on
        // one speed-1 processor (T_B = 4), so T_min = 4. The paper compresses A
        // against T_A = 1 and keeps both A processors (3 in all); against
        // T_min = 4 one A processor takes both VPs and the job still ends at 4.
        let caps = [1.0, 1.0, 1.0];
        let pool_of = [0, 0, 1];
        let m = mtat_pools(&[2, 4], &pool_of, &caps, &[]);
        assert!((m.t_min - 4.0).abs() < 1e-12);
        let c = compress_pools(&[2, 4], &pool_of, &caps, m.t_min, &m.assignment).unwrap();
        assert_eq!(used(&c), 2);
        assert_eq!(c[0] + c[1], 2);
        assert_eq!(c[2], 4);
    }

    #[test]
    fn infeasible_bound_is_none() {
        assert_eq!(compress(5, &[1.0, 1.0], 2.0, &[]), None);
        assert_eq!(fill(3, &[1.0, 1.0], 1.0, &[], &[true, true]), None);
    }

    proptest! {
        #[test]
        fn compression_is_minimal_and_keeps_t_min(
            x in 0u32..=9,
            caps in prop::collection::vec((1u32..=8).prop_map(f64::from), 1..=6),
            cur_seed in any::<u64>(),
        ) {
            let m = mtat(x, &caps, &[]);
            // Any current placement of the job's VPs must not change the answer's size.
            let mut current = vec![0u32; caps.len()];
            let mut s = cur_seed;
            for _ in 0..x { s = s.wrapping_mul(6364136223846793005).wrapping_add(1); current[(s >> 33) as usize % caps.len()] += 1; }
            let c = compress(x, &caps, m.t_min, &current).unwrap();
            prop_assert_eq!(c.iter().sum::<u32>(), x);
            prop_assert!(turnaround(&c, &caps) <= brute_force_t(x, &caps) * (1.0 + 1e-9));
            if x > 0 {
                prop_assert_eq!(used(&c), brute_force_min_set(x, &caps, m.t_min));
            }
        }

        #[test]
        fn fill_keeps_every_vp_it_can(
            caps in prop::collection::vec((1u32..=4).prop_map(f64::from), 1..=5),
            current in prop::collection::vec(0u32..=3, 5),
            extra in 0u32..=3,
        ) {
            let current: Vec<u32> = current.into_iter().take(caps.len()).collect();
            let x: u32 = current.iter().sum::<u32>() + extra;
            let t = brute_force_t(x, &caps);
            let out = fill(x, &caps, t, &current, &[]).unwrap();
            prop_assert_eq!(out.iter().sum::<u32>(), x);
            let limit: Vec<u32> = caps.iter().map(|&a| slots_at(t, a)).collect();
            for i in 0..caps.len() {
                prop_assert!(out[i] <= limit[i]);
                prop_assert!(out[i] >= current[i].min(limit[i]));
            }
        }
    }
}
