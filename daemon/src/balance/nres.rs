//! Seed 004 (Arora, Das, Biswas): nodes offer normalised capacities per
//! resource (CPU, memory, I/O, ... each in 0..=1), jobs declare a
//! requirement vector. A node whose burst of waiting jobs is more than its
//! load admits asks its neighbours (and they theirs) for their free
//! capacity, within the time it needs to drain its own queue; then it maps
//! its waiting jobs with procedure Balance (Figure 6): the job with the
//! fewest nodes that meet all its requirements goes first, to the node that
//! fewest other jobs could use. Jobs that fit nowhere stay where they are.
//!
//! Open points the text leaves, and what is done here: the trigger of
//! Figures 2-3 is a line from (0, Max) to (100, 0): a burst above
//! `Max * (1 - U/100)` at utilisation U% triggers; a node takes at most
//! one job per round (Figure 6 step 4.4 removes its column); ties go to the
//! lower index, so a mapping is deterministic.

/// Does a burst of `burst` waiting jobs at utilisation `utilisation_pct`
/// (0-100) call for balancing, with the trigger line's height `max`
/// (Figure 3)? The busier the node, the smaller the burst it admits.
pub fn needs_triggering(burst: u32, utilisation_pct: f64, max: f64) -> bool {
    let u = utilisation_pct.clamp(0.0, 100.0);
    f64::from(burst) > max * (1.0 - u / 100.0)
}

/// `M` of eq. 4: how many of a node's resources meet a job's requirements.
pub fn matches(need: &[f64], free: &[f64]) -> usize {
    need.iter().zip(free).filter(|(n, f)| n <= f).count()
}

/// Which nodes a node asks for their status (Figures 1 and 4): a
/// neighbour `j` at latency `c` when `2 * (gamma + c) <= time_iq`, `gamma`
/// being the latency of the route to the node asking on its behalf; the
/// request spreads from node to node while that holds. `latency[a]` lists
/// `(b, latency)` for each neighbour `b` of `a`. Returns every node
/// reached (not `from`) with the shortest route latency to it.
pub fn asked(latency: &[Vec<(usize, f64)>], from: usize, time_iq: f64) -> Vec<(usize, f64)> {
    let n = latency.len();
    let mut best = vec![f64::INFINITY; n];
    let mut todo = vec![(from, 0.0)];
    if from < n {
        best[from] = 0.0;
    }
    while let Some((a, gamma)) = todo.pop() {
        for &(b, c) in latency.get(a).map_or(&[][..], Vec::as_slice) {
            let g = gamma + c;
            if b < n && 2.0 * g <= time_iq && g < best[b] {
                best[b] = g;
                todo.push((b, g));
            }
        }
    }
    (0..n)
        .filter(|&b| b != from && best[b].is_finite())
        .map(|b| (b, best[b]))
        .collect()
}

/// Procedure Balance (Figure 6): map waiting jobs (`needs[k]`, a
/// requirement per resource) to the nodes that replied (`free[u]`, free
/// capacity per resource). A job goes only to a node that meets all its
/// requirements (`M = N`); the job with the fewest such nodes left goes
/// first, to the one of them that fewest other unmapped jobs could also
/// use; each node takes one job. `result[k]` is job k's node, `None` if it
/// stays local.
pub fn balance(needs: &[Vec<f64>], free: &[Vec<f64>]) -> Vec<Option<usize>> {
    // T[u][k] = N: node u meets all of job k's requirements.
    let full: Vec<Vec<bool>> = needs
        .iter()
        .map(|need| {
            free.iter()
                .map(|f| f.len() >= need.len() && matches(need, f) == need.len())
                .collect()
        })
        .collect();
    let mut result = vec![None; needs.len()];
    let mut node_free = vec![true; free.len()];
    loop {
        let choices = |k: usize| {
            (0..free.len())
                .filter(|&u| node_free[u] && full[k][u])
                .count()
        };
        // Step 4.1: the unmapped job with the fewest choices (at least one).
        let Some(k) = (0..needs.len())
            .filter(|&k| result[k].is_none())
            .map(|k| (choices(k), k))
            .filter(|&(c, _)| c > 0)
            .min()
            .map(|(_, k)| k)
        else {
            return result;
        };
        // Step 4.2: among its nodes, the one fewest other unmapped jobs
        // could take (C: a conflict when two jobs share a node).
        let contention = |u: usize| {
            (0..needs.len())
                .filter(|&l| l != k && result[l].is_none() && full[l][u])
                .count()
        };
        let z = (0..free.len())
            .filter(|&u| node_free[u] && full[k][u])
            .map(|u| (contention(u), u))
            .min()
            .map(|(_, u)| u);
        let Some(z) = z else {
            return result;
        };
        // Steps 4.3-4.4: assigned; the node takes no other job this round.
        result[k] = Some(z);
        node_free[z] = false;
    }
}

/// Normalised performance, eq. 5: `(T_no - T_my) / (T_no - T_lb)` with
/// `T_lb = T_no / p` (ideal balance on `p` processors): 1 when balancing
/// reaches the ideal, 0 when it gains nothing.
pub fn eta(t_no: f64, t_my: f64, p: u32) -> f64 {
    let t_lb = t_no / f64::from(p.max(1));
    if t_no - t_lb <= 0.0 {
        return 0.0;
    }
    (t_no - t_my) / (t_no - t_lb)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_with_fewest_choices_go_first_as_the_paper_describes() {
        // Three jobs that fit {A}, {A, B} and {A, B, C}: mapped to A, B, C.
        // Two resources; A has most room, C least.
        let free = vec![vec![0.9, 0.9], vec![0.6, 0.6], vec![0.3, 0.3]];
        let needs = vec![vec![0.8, 0.1], vec![0.5, 0.5], vec![0.2, 0.2]];
        assert_eq!(balance(&needs, &free), [Some(0), Some(1), Some(2)]);
        // The order they come in does not matter.
        let rev: Vec<Vec<f64>> = needs.iter().rev().cloned().collect();
        assert_eq!(balance(&rev, &free), [Some(2), Some(1), Some(0)]);
        // Taken greedily in arrival order (each to its first node), the
        // {A, B, C} job would take A and the {A} job would stay local.
    }

    #[test]
    fn a_job_meets_a_node_only_on_every_resource_and_otherwise_stays_local() {
        assert_eq!(matches(&[0.5, 0.5, 0.9], &[0.6, 0.4, 1.0]), 2);
        let free = vec![vec![0.6, 0.4, 1.0]];
        assert_eq!(balance(&[vec![0.5, 0.5, 0.9]], &free), [None]);
        // One node, two jobs that fit it: one goes, the other stays.
        let two = vec![vec![0.1, 0.1, 0.1], vec![0.2, 0.2, 0.2]];
        let got = balance(&two, &free);
        assert_eq!(got.iter().filter(|g| g.is_some()).count(), 1);
        // A node that reports fewer resources than a job needs meets it not.
        assert_eq!(balance(&[vec![0.1, 0.1]], &[vec![0.9]]), [None]);
    }

    #[test]
    fn the_busier_a_node_the_smaller_the_burst_that_triggers_balancing() {
        assert!(!needs_triggering(20, 0.0, 20.0));
        assert!(needs_triggering(21, 0.0, 20.0));
        assert!(needs_triggering(11, 50.0, 20.0));
        assert!(!needs_triggering(10, 50.0, 20.0));
        assert!(needs_triggering(1, 100.0, 20.0));
        // A gentler slope (a lower Max) triggers sooner.
        assert!(needs_triggering(8, 50.0, 15.0) && !needs_triggering(8, 50.0, 20.0));
    }

    #[test]
    fn requests_spread_only_as_far_as_replies_come_back_before_the_queue_drains() {
        // 0 - 1 (2 ms) - 2 (3 ms) - 3 (1 ms); 0 - 3 directly (20 ms).
        let lat = vec![
            vec![(1, 2.0), (3, 20.0)],
            vec![(0, 2.0), (2, 3.0)],
            vec![(1, 3.0), (3, 1.0)],
            vec![(2, 1.0), (0, 20.0)],
        ];
        // 10 ms to drain: 2*2 <= 10, 2*5 <= 10, 2*6 > 10.
        assert_eq!(asked(&lat, 0, 10.0), [(1, 2.0), (2, 5.0)]);
        // 12 ms: node 3 through 1 and 2 (6 ms), not directly (20 ms).
        assert_eq!(asked(&lat, 0, 12.0), [(1, 2.0), (2, 5.0), (3, 6.0)]);
        assert!(asked(&lat, 0, 3.0).is_empty());
    }

    #[test]
    fn normalised_performance_is_the_papers_eq_5() {
        assert!((eta(100.0, 40.0, 4) - 0.8).abs() < 1e-12);
        assert!((eta(100.0, 25.0, 4) - 1.0).abs() < 1e-12);
        assert!(eta(100.0, 100.0, 4).abs() < 1e-12);
        assert_eq!(eta(100.0, 50.0, 1), 0.0);
    }
}
