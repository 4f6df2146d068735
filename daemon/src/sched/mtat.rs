//! The Minimum Turn Around Time algorithm (seed 000, section 4.1) and its
//! per-architecture extension.
//!
//! What lives here: `mtat` (one pool of processors), `mtat_pools` (several
//! architectures, `T_min = max_z T_z`), and the small arithmetic the other
//! algorithms share (`slots_at`: how many whole VPs fit on a processor by a
//! given time). What does not: choosing a smaller processor set (see
//! `compress`) or searching the allocation map (see `expand`).
//!
//! # Where the paper's formula and its theorem disagree
//!
//! Theorem 1 promises the true minimum over integer assignments. Step 3's
//! `Drag_i = (ceil(x_i) - x_i) / a_i` and step 4's "at most one extra VP per
//! processor" do not always deliver it, and the theorem (the true optimum)
//! wins here. Two cases, each kept as a named regression test below:
//!
//! * **Integral share** — when `x_i = alpha * a_i` is already an integer the
//!   formula gives `Drag_i = 0`, yet one more VP costs `1 / a_i`.
//! * **Fast processor takes two** — with `a = {10, 1, 1, 1, 1}` and `X = 5`,
//!   `alpha = 5/14`, the floors are `{3, 0, 0, 0, 0}` and `Diff = 2`. The
//!   paper gives one extra VP to processor 1 and one to a slow processor
//!   (`T = 1`), but `{5, 0, 0, 0, 0}` finishes at `T = 0.5`.
//!
//! We keep the paper's first stage (floors of the ideal shares, which never
//! exceed the optimum) and replace steps 3–4 by the greedy that adds each of
//! the `Diff` remaining VPs where it finishes soonest, `(x̃_i + 1) / a_i`: the
//! exact *marginal* drag. Adding VPs one at a time to the processor whose
//! completion time stays smallest is optimal for a max of increasing costs,
//! so the result is the true minimum (property-tested against brute force).
//! Step 5's tie rule is kept: on equal completion time a processor that
//! already holds VPs is preferred, then one the caller prefers (where the job
//! already runs, to save migrations), then the earlier processor.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// The result of MTAT on one set of processors.
#[derive(Debug, Clone, PartialEq)]
pub struct Mtat {
    /// `max_i assignment_i / capacity_i`, in the units of the capacities given.
    pub t_min: f64,
    /// VPs per processor, in input order.
    pub assignment: Vec<u32>,
}

impl Mtat {
    /// How many processors receive at least one VP.
    pub fn processors_used(&self) -> usize {
        self.assignment.iter().filter(|&&n| n > 0).count()
    }
}

/// Completion time of `n` VPs on a processor of relative capacity `a`.
pub fn finish_time(n: u32, a: f64) -> f64 {
    f64::from(n) / a
}

/// The largest number of whole VPs a processor of capacity `a` finishes by
/// time `t` (`floor(t * a)`, robust to rounding when `t` was itself computed
/// as `k / a`).
pub fn slots_at(t: f64, a: f64) -> u32 {
    let v = t * a;
    if !v.is_finite() || v <= 0.0 {
        return 0;
    }
    // Positive: truncation is the floor (and a cast, not a libm call).
    let w = v * (1.0 + 1e-12) + 1e-12;
    if w >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        w as u32
    }
}

/// Compare `n1 / a1` with `n2 / a2` exactly (cross-multiplied, no division).
fn cmp_time(n1: u32, a1: f64, n2: u32, a2: f64) -> Ordering {
    let l = f64::from(n1) * a2;
    let r = f64::from(n2) * a1;
    l.partial_cmp(&r).unwrap_or(Ordering::Equal)
}

/// One candidate for the next VP in the greedy stage: the completion time it
/// would give, then the step-5 tie rule.
struct Candidate {
    next: u32,
    cap: f64,
    holds: bool,
    preferred: bool,
    index: usize,
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Candidate {
    /// `BinaryHeap` is a max-heap: the *best* candidate must compare greatest.
    fn cmp(&self, other: &Self) -> Ordering {
        cmp_time(other.next, other.cap, self.next, self.cap)
            .then(self.holds.cmp(&other.holds))
            .then(self.preferred.cmp(&other.preferred))
            .then(other.index.cmp(&self.index))
    }
}

/// MTAT for one architecture pool: the assignment of `x` VPs to processors of
/// relative capacities `caps` that minimises the turnaround time.
///
/// `preferred[i]` (may be empty) breaks ties towards processors the caller
/// favours, e.g. those where the job already runs. Capacities must be
/// positive and finite (the scheduler validates them on entry). With no
/// processors and `x > 0` the turnaround is infinite and nothing is assigned.
pub fn mtat(x: u32, caps: &[f64], preferred: &[bool]) -> Mtat {
    let n = caps.len();
    if x == 0 {
        return Mtat {
            t_min: 0.0,
            assignment: vec![0; n],
        };
    }
    if n == 0 {
        return Mtat {
            t_min: f64::INFINITY,
            assignment: Vec::new(),
        };
    }
    let total: f64 = caps.iter().sum();
    let alpha = f64::from(x) / total;
    // Stage 1 (eq. 2): floors of the ideal shares. Their sum never exceeds X.
    let mut assignment: Vec<u32> = caps
        .iter()
        .map(|&a| {
            // Truncation is the floor of a positive share.
            let share = alpha * a;
            if share.is_finite() && share >= 1.0 {
                share.min(f64::from(x)) as u32
            } else {
                0
            }
        })
        .collect();
    let mut placed: u64 = assignment.iter().map(|&v| u64::from(v)).sum();
    // Floating point can overshoot by a VP in degenerate inputs: take back.
    while placed > u64::from(x) {
        if let Some(i) = (0..n).filter(|&i| assignment[i] > 0).max_by(|&i, &j| {
            cmp_time(assignment[i], caps[i], assignment[j], caps[j]).then(j.cmp(&i))
        }) {
            assignment[i] -= 1;
            placed -= 1;
        }
    }
    // Stage 2: the Diff remaining VPs, one at a time, where each finishes first.
    let mut diff = u64::from(x) - placed;
    if diff > 0 {
        let mut candidates: Vec<Candidate> = (0..n)
            .map(|i| Candidate {
                next: assignment[i] + 1,
                cap: caps[i],
                holds: assignment[i] > 0,
                preferred: preferred.get(i).copied().unwrap_or(false),
                index: i,
            })
            .collect();
        // Only the Diff best first candidates can ever be taken: a processor
        // is first taken when its first candidate is the best left, so the
        // processors taken are a prefix of the first candidates' order. The
        // heap then holds Diff entries instead of one per processor.
        if (diff as usize) < n {
            let d = diff as usize;
            candidates.select_nth_unstable_by(d - 1, |a, b| b.cmp(a));
            candidates.truncate(d);
        }
        let mut heap = BinaryHeap::from(candidates);
        while diff > 0 {
            let Some(mut best) = heap.pop() else { break };
            assignment[best.index] += 1;
            best.next += 1;
            best.holds = true;
            heap.push(best);
            diff -= 1;
        }
    }
    Mtat {
        t_min: turnaround(&assignment, caps),
        assignment,
    }
}

/// MTAT's turnaround alone, from a pool given as capacity classes
/// `(capacity, processors)`: the `x`-th smallest of the completion times
/// `k / a` (`k >= 1`, one per VP a processor could take), since the greedy
/// takes completion times smallest first. `O(classes)` plus a step per class
/// level beyond the ideal shares, instead of `O(processors)`: the scheduler
/// asks this for a job in a slot of its own on the whole pool.
pub fn t_min_by_classes(x: u32, classes: &[(f64, u32)]) -> f64 {
    if x == 0 {
        return 0.0;
    }
    let total: f64 = classes.iter().map(|&(a, m)| a * f64::from(m)).sum();
    if classes.is_empty() || total <= 0.0 {
        return f64::INFINITY;
    }
    let alpha = f64::from(x) / total;
    // Stage 1: every processor of a class takes floor(alpha a) VPs, all
    // finishing by alpha.
    let mut placed: u64 = 0;
    let mut t: f64 = 0.0;
    let mut level: Vec<u32> = classes
        .iter()
        .map(|&(a, m)| {
            let s = alpha * a;
            let f = if s.is_finite() && s >= 1.0 {
                s.min(f64::from(x)) as u32
            } else {
                0
            };
            placed += u64::from(f) * u64::from(m);
            if f > 0 {
                t = t.max(finish_time(f, a));
            }
            f
        })
        .collect();
    // Floating point can overshoot in degenerate inputs: fall back.
    if placed > u64::from(x) {
        let caps: Vec<f64> = classes
            .iter()
            .flat_map(|&(a, m)| std::iter::repeat_n(a, m as usize))
            .collect();
        return mtat(x, &caps, &[]).t_min;
    }
    // Stage 2: the next completion time of every class, smallest first.
    while placed < u64::from(x) {
        let Some(j) = (0..classes.len())
            .min_by(|&i, &j| cmp_time(level[i] + 1, classes[i].0, level[j] + 1, classes[j].0))
        else {
            break;
        };
        level[j] += 1;
        placed += u64::from(classes[j].1);
        t = t.max(finish_time(level[j], classes[j].0));
    }
    t
}

/// The paper's steps 1–5 exactly as written (Drag of eq. 3, at most one
/// extra VP per processor). Kept to explain results and to prove, in tests,
/// where it misses the optimum; the scheduler uses `mtat`.
pub fn mtat_paper(x: u32, caps: &[f64]) -> (Mtat, Vec<f64>) {
    let n = caps.len();
    if n == 0 || x == 0 {
        return (mtat(x, caps, &[]), vec![0.0; n]);
    }
    let alpha = f64::from(x) / caps.iter().sum::<f64>();
    let shares: Vec<f64> = caps.iter().map(|&a| alpha * a).collect();
    let mut assignment: Vec<u32> = shares.iter().map(|&s| s.floor().max(0.0) as u32).collect();
    let drag: Vec<f64> = shares
        .iter()
        .zip(caps)
        .map(|(&s, &a)| (s.ceil() - s) / a)
        .collect();
    let diff = x.saturating_sub(assignment.iter().sum::<u32>()) as usize;
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&i, &j| {
        drag[i]
            .partial_cmp(&drag[j])
            .unwrap_or(Ordering::Equal)
            .then((assignment[i] == 0).cmp(&(assignment[j] == 0)))
            .then(i.cmp(&j))
    });
    for &i in order.iter().take(diff) {
        assignment[i] += 1;
    }
    // Rounding can leave Diff >= n in degenerate inputs; the rest go round-robin.
    let mut left = x.saturating_sub(assignment.iter().sum::<u32>());
    let mut i = 0;
    while left > 0 {
        assignment[order[i % n]] += 1;
        left -= 1;
        i += 1;
    }
    (
        Mtat {
            t_min: turnaround(&assignment, caps),
            assignment,
        },
        drag,
    )
}

/// `max_i n_i / a_i` of an assignment (0 for an empty one).
pub fn turnaround(assignment: &[u32], caps: &[f64]) -> f64 {
    assignment
        .iter()
        .zip(caps)
        .filter(|(&n, _)| n > 0)
        .map(|(&n, &a)| finish_time(n, a))
        .fold(0.0, f64::max)
}

/// MTAT over several architecture pools. `pool_of[i]` names the pool of
/// processor `i`; `demand[z]` is the number of VPs restricted to pool `z`.
/// `T_min = max_z T_z`; a pool with demand but no processor gives `INFINITY`.
pub fn mtat_pools(demand: &[u32], pool_of: &[usize], caps: &[f64], preferred: &[bool]) -> Mtat {
    if let [x] = demand {
        if pool_of.iter().all(|&z| z == 0) {
            return mtat(*x, caps, preferred);
        }
    }
    let mut assignment = vec![0; caps.len()];
    let mut t_min: f64 = 0.0;
    for (z, &x) in demand.iter().enumerate() {
        let members: Vec<usize> = (0..caps.len()).filter(|&i| pool_of[i] == z).collect();
        let pool_caps: Vec<f64> = members.iter().map(|&i| caps[i]).collect();
        let pool_pref: Vec<bool> = members
            .iter()
            .map(|&i| preferred.get(i).copied().unwrap_or(false))
            .collect();
        let m = mtat(x, &pool_caps, &pool_pref);
        t_min = t_min.max(m.t_min);
        for (k, &i) in members.iter().enumerate() {
            if let Some(&v) = m.assignment.get(k) {
                assignment[i] = v;
            }
        }
    }
    Mtat { t_min, assignment }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The true minimum turnaround by enumerating every integer assignment.
    pub(crate) fn brute_force_t(x: u32, caps: &[f64]) -> f64 {
        fn go(i: usize, left: u32, caps: &[f64], cur: f64, best: &mut f64) {
            if i == caps.len() - 1 {
                let t = cur.max(finish_time(left, caps[i]));
                if t < *best {
                    *best = t;
                }
                return;
            }
            for k in 0..=left {
                let t = cur.max(finish_time(k, caps[i]));
                if t < *best {
                    go(i + 1, left - k, caps, t, best);
                }
            }
        }
        let mut best = f64::INFINITY;
        go(0, x, caps, 0.0, &mut best);
        best
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
    }

    #[test]
    fn paper_example_1() {
        // X = 20, a = {10, 1, 4, 3}: alpha = 1.111, floors {11, 1, 4, 3}, Diff = 1,
        // the extra VP goes to processor 1, {12, 1, 4, 3}, T_min = 1.2.
        let m = mtat(20, &[10.0, 1.0, 4.0, 3.0], &[]);
        assert_eq!(m.assignment, vec![12, 1, 4, 3]);
        assert!(close(m.t_min, 1.2));
        assert_eq!(m.processors_used(), 4);
    }

    #[test]
    fn paper_example_2() {
        // X = 4 on three equal processors: the extra VP may go anywhere, T_min = 2.
        let m = mtat(4, &[1.0, 1.0, 1.0], &[]);
        assert!(close(m.t_min, 2.0));
        assert_eq!(m.assignment.iter().sum::<u32>(), 4);
        assert_eq!(m.assignment.iter().filter(|&&n| n == 2).count(), 1);
    }

    #[test]
    fn paper_example_3() {
        // X = 9, a = {4, 2, 1}: alpha = 9/7, floors {5, 2, 1}, Diff = 1; the
        // extra VP on processor 1 or 2 both give T_min = 3/2 (the paper's
        // Figure 4-a picks processor 2; we take the earlier processor on a tie).
        let m = mtat(9, &[4.0, 2.0, 1.0], &[]);
        assert!(close(m.t_min, 1.5));
        assert_eq!(m.assignment, vec![6, 2, 1]);
        // The tie rule can be steered: a caller that prefers processor 2 gets
        // exactly the paper's figure.
        let m = mtat(9, &[4.0, 2.0, 1.0], &[false, true, false]);
        assert_eq!(m.assignment, vec![5, 3, 1]);
    }

    #[test]
    fn the_paper_rule_reproduces_its_own_examples() {
        let (m, drag) = mtat_paper(20, &[10.0, 1.0, 4.0, 3.0]);
        assert_eq!(m.assignment, vec![12, 1, 4, 3]);
        let expect = [0.089, 0.889, 0.139, 0.222];
        assert!(drag.iter().zip(expect).all(|(d, e)| (d - e).abs() < 1e-3));
        let (m, _) = mtat_paper(9, &[4.0, 2.0, 1.0]);
        assert!(close(m.t_min, 1.5));
    }

    #[test]
    fn regression_fast_processor_takes_two_extra_vps() {
        // The paper's steps 3-4 give {4, 1, 0, 0, 0} with T = 1; the optimum is 0.5.
        let caps = [10.0, 1.0, 1.0, 1.0, 1.0];
        let (paper, _) = mtat_paper(5, &caps);
        assert_eq!(paper.assignment, vec![4, 1, 0, 0, 0]);
        assert!(close(paper.t_min, 1.0));
        let m = mtat(5, &caps, &[]);
        assert_eq!(m.assignment, vec![5, 0, 0, 0, 0]);
        assert!(close(m.t_min, 0.5));
        assert!(close(m.t_min, brute_force_t(5, &caps)));
    }

    #[test]
    fn regression_integral_share_has_nonzero_drag() {
        // a = {1, 2, 3}, X = 2: alpha = 1/3, x = {1/3, 2/3, 1}. x_3 is integral so
        // the paper's Drag_3 = 0 and it puts the extra VP there: {0, 0, 2}, T = 2/3.
        // One more VP on processor 3 really costs 1/3; {0, 1, 1} gives T = 1/2.
        let caps = [1.0, 2.0, 3.0];
        let (paper, _) = mtat_paper(2, &caps);
        assert_eq!(paper.assignment, vec![0, 0, 2]);
        assert!(close(paper.t_min, 2.0 / 3.0));
        let m = mtat(2, &caps, &[]);
        assert_eq!(m.assignment, vec![0, 1, 1]);
        assert!(close(m.t_min, 0.5));
        assert!(close(m.t_min, brute_force_t(2, &caps)));
    }

    #[test]
    fn step5_prefers_processors_that_already_hold_vps() {
        // a = {2, 1, 1}, X = 2: floors {1, 0, 0}, Diff = 1. Processor 1 (holds a
        // VP) and processors 2, 3 (empty) all finish at T = 1 with the extra VP:
        // step 5 keeps the job on processor 1 rather than spreading it.
        let m = mtat(2, &[2.0, 1.0, 1.0], &[]);
        assert_eq!(m.assignment, vec![2, 0, 0]);
        // Between two empty processors with equal time, the caller's preference decides.
        let m = mtat(1, &[1.0, 1.0], &[false, true]);
        assert_eq!(m.assignment, vec![0, 1]);
    }

    #[test]
    fn pools_take_the_slowest_pool() {
        let m = mtat_pools(&[20, 3], &[0, 0, 1], &[10.0, 1.0, 4.0], &[]);
        let t0 = brute_force_t(20, &[10.0, 1.0]);
        let t1 = brute_force_t(3, &[4.0]);
        assert!(close(m.t_min, t0.max(t1)));
        assert_eq!(m.assignment[2], 3);
        assert_eq!(m.assignment[0] + m.assignment[1], 20);
    }

    #[test]
    fn no_processor_means_infinite_turnaround() {
        assert!(mtat(3, &[], &[]).t_min.is_infinite());
        assert_eq!(mtat(0, &[], &[]).t_min, 0.0);
        assert!(mtat_pools(&[0, 2], &[0], &[1.0], &[]).t_min.is_infinite());
    }

    fn caps_strategy() -> impl Strategy<Value = Vec<f64>> {
        prop::collection::vec(
            prop_oneof![
                (1u32..=12).prop_map(f64::from),
                (10u32..=120).prop_map(|v| f64::from(v) / 10.0)
            ],
            1..=5,
        )
    }

    proptest! {
        #[test]
        fn mtat_is_the_true_minimum(x in 0u32..=9, caps in caps_strategy()) {
            let m = mtat(x, &caps, &[]);
            prop_assert_eq!(m.assignment.iter().sum::<u32>(), x);
            prop_assert!(close(m.t_min, turnaround(&m.assignment, &caps)));
            prop_assert!(close(m.t_min, brute_force_t(x, &caps)), "mtat {} brute {}", m.t_min, brute_force_t(x, &caps));
        }

        #[test]
        fn capacity_classes_give_the_same_turnaround(x in 0u32..=40, caps in caps_strategy()) {
            let mut classes: Vec<(f64, u32)> = Vec::new();
            for &a in &caps {
                match classes.iter_mut().find(|(c, _)| *c == a) {
                    Some(e) => e.1 += 1,
                    None => classes.push((a, 1)),
                }
            }
            // (The same sums in another order: equal but for rounding.)
            let (by_classes, each) = (t_min_by_classes(x, &classes), mtat(x, &caps, &[]).t_min);
            prop_assert!(close(by_classes, each), "by classes {} each {}", by_classes, each);
        }

        #[test]
        fn preferences_never_change_the_optimum(x in 0u32..=9, caps in caps_strategy(), bits in any::<u8>()) {
            let pref: Vec<bool> = (0..caps.len()).map(|i| bits >> i & 1 == 1).collect();
            let a = mtat(x, &caps, &[]);
            let b = mtat(x, &caps, &pref);
            prop_assert!(close(a.t_min, b.t_min));
        }

        #[test]
        fn slots_at_inverts_finish_time(n in 0u32..1000, a in 1u32..200) {
            let a = f64::from(a) / 7.0;
            prop_assert!(slots_at(finish_time(n, a), a) >= n);
        }
    }
}
