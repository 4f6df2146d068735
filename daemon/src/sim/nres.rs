//! Seed 004's experiments, reproduced: a grid of N-resource nodes (CPU,
//! memory, I/O), each with a few neighbours at a network latency, jobs
//! arriving at random nodes in bursts. A node whose burst is more than its
//! load admits (`balance::nres::needs_triggering`) asks the nodes whose
//! replies come back before its own queue drains for their free capacity,
//! then maps its waiting jobs fewest-choices-first
//! (`balance::nres::balance`); a job mapped elsewhere travels there. The
//! figure is `eta = (T_no - T_my) / (T_no - T_lb)`.
//!
//! The model (the paper gives its figures' trends, not its simulator):
//! jobs are submitted at a quarter of the nodes (every fourth);
//! time in steps; a node runs its queue one job at a time; a job's time is
//! its work over the node's speed (its CPU capacity over the mean: more
//! capacity all round means room for more jobs, "a smaller granularity",
//! not faster jobs), doubled where a node lacks one of its resources
//! (memory or I/O); bursts are of 1 to twice their mean size; a node's
//! free capacity is its capacity less what its running job uses (each
//! resource in 0..=1 of the largest node's); capacities and needs are uniform around their means,
//! latencies around theirs; `T_no` is the work on one node of mean
//! capacity. Pure: no clock, no I/O.

use serde::Serialize;

use super::rng::SplitMix;
use crate::balance::nres;

/// Resources per node and job: CPU, memory, I/O.
pub const RESOURCES: usize = 3;

/// One experiment's settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Setup {
    /// Nodes.
    pub nodes: usize,
    /// Neighbours of each node (at least; links are both ways).
    pub degree: usize,
    /// Mean capacity of a node's resources (units, 2-16 in the paper).
    pub capacity: f64,
    /// Mean need of a job per resource (units).
    pub need: f64,
    /// Mean latency of a link (steps).
    pub latency: f64,
    /// The trigger line's height (`Max`: 15, 20 or 25 in the paper).
    pub max: f64,
    /// Jobs arriving.
    pub jobs: usize,
    /// Mean work of a job (steps on a node of capacity 1).
    pub work: f64,
    /// Jobs come in bursts of this many at one node.
    pub burst: usize,
    /// Mean steps between bursts.
    pub gap: f64,
    /// The seed.
    pub seed: u64,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            nodes: 32,
            degree: 5,
            capacity: 8.0,
            need: 4.0,
            latency: 8.0,
            max: 15.0,
            jobs: 2000,
            work: 40.0,
            burst: 20,
            gap: 12.0,
            seed: 1,
        }
    }
}

#[derive(Debug, Clone)]
struct Job {
    need: [f64; RESOURCES],
    work: f64,
}

struct Node {
    cap: [f64; RESOURCES],
    /// Its speed: its CPU capacity over the mean capacity (more capacity
    /// means room for more jobs, not faster jobs on average).
    speed: f64,
    /// Jobs committed here, the first running.
    queue: Vec<Job>,
    /// Work left of the running job, steps.
    left: f64,
    /// Its neighbours and the latency to each.
    links: Vec<(usize, f64)>,
}

impl Node {
    fn time_of(&self, j: &Job) -> f64 {
        let lacks = (1..RESOURCES).any(|r| j.need[r] > self.cap[r]);
        j.work / self.speed * if lacks { 2.0 } else { 1.0 }
    }

    /// Steps to drain its queue.
    fn drain(&self) -> f64 {
        self.left
            + self
                .queue
                .iter()
                .skip(1)
                .map(|j| self.time_of(j))
                .sum::<f64>()
    }

    /// What it reports: its capacity less what the job running now uses
    /// ("the current usage of its resources").
    fn free(&self, scale: f64) -> Vec<f64> {
        (0..RESOURCES)
            .map(|r| {
                let used = self.queue.first().map_or(0.0, |j| j.need[r]);
                ((self.cap[r] - used) / scale).max(0.0)
            })
            .collect()
    }
}

/// What one run did.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Run {
    /// Steps until the last job ended (`T_my`).
    pub makespan: f64,
    /// `T_no`: the work on one node of mean capacity.
    pub t_no: f64,
    /// `eta` for this run.
    pub eta: f64,
    /// Jobs sent to another node.
    pub moved: u64,
    /// Bursts that triggered balancing.
    pub triggered: u64,
}

/// Run the grid of `s`, balancing when `balance` (else every job stays).
pub fn run(s: &Setup, balance: bool) -> Run {
    let mut rng = SplitMix::new(s.seed);
    let n = s.nodes.max(2);
    let around = |rng: &mut SplitMix, mean: f64| mean * (0.5 + rng.unit());
    let mut nodes: Vec<Node> = (0..n)
        .map(|_| Node {
            cap: [0.0; RESOURCES].map(|_| around(&mut rng, s.capacity).max(0.1)),
            speed: 1.0,
            queue: Vec::new(),
            left: 0.0,
            links: Vec::new(),
        })
        .collect();
    // A ring (so the grid is connected) and random links up to the degree.
    for a in 0..n {
        let b = (a + 1) % n;
        let l = around(&mut rng, s.latency).max(0.0);
        nodes[a].links.push((b, l));
        nodes[b].links.push((a, l));
    }
    for a in 0..n {
        while nodes[a].links.len() < s.degree.min(n - 1) {
            let b = (rng.next_u64() % n as u64) as usize;
            if b == a || nodes[a].links.iter().any(|&(x, _)| x == b) {
                continue;
            }
            let l = around(&mut rng, s.latency).max(0.0);
            nodes[a].links.push((b, l));
            nodes[b].links.push((a, l));
        }
    }
    for x in &mut nodes {
        x.speed = x.cap[0] / s.capacity.max(0.1);
    }
    let scale = nodes
        .iter()
        .flat_map(|x| x.cap)
        .fold(f64::MIN_POSITIVE, f64::max);
    // The arrivals: bursts of jobs at random nodes.
    let mut arrivals: Vec<(f64, usize, Vec<Job>)> = Vec::new();
    let mut t = 0.0;
    let mut made = 0;
    while made < s.jobs {
        t += rng.exp(s.gap);
        // Users submit at a quarter of the nodes.
        let at = 4 * (rng.next_u64() % n.div_ceil(4) as u64) as usize % n;
        // Bursts of 1 to twice the mean.
        let k = (1 + (rng.next_u64() % (2 * s.burst.max(1)) as u64) as usize).min(s.jobs - made);
        let jobs = (0..k)
            .map(|_| Job {
                need: [0.0; RESOURCES].map(|_| around(&mut rng, s.need)),
                work: rng.exp(s.work).max(1.0),
            })
            .collect();
        arrivals.push((t, at, jobs));
        made += k;
    }
    let mean_cpu = nodes.iter().map(|x| x.speed).sum::<f64>() / n as f64;
    let t_no: f64 = arrivals
        .iter()
        .flat_map(|(_, _, js)| js.iter())
        .map(|j| j.work / mean_cpu)
        .sum();
    let latencies: Vec<Vec<(usize, f64)>> = nodes.iter().map(|x| x.links.clone()).collect();
    // Jobs on their way: (arrival step, node, job).
    let mut transit: Vec<(f64, usize, Job)> = Vec::new();
    let mut moved = 0;
    let mut triggered = 0;
    let mut next = 0;
    let mut now = 0.0;
    let step = 1.0;
    loop {
        while next < arrivals.len() && arrivals[next].0 <= now {
            let (_, at, jobs) = arrivals[next].clone();
            next += 1;
            let busy = nodes[at].drain();
            // Utilisation: how full its queue is, as a share of a burst's work.
            let u = (100.0 * busy / (busy + s.work * s.burst as f64 / nodes[at].speed)).min(100.0);
            if balance && nres::needs_triggering(jobs.len() as u32, u, s.max) {
                triggered += 1;
                let time_iq = busy.max(1.0);
                let asked = nres::asked(&latencies, at, time_iq);
                let nodes_asked: Vec<usize> = asked.iter().map(|&(b, _)| b).collect();
                let free: Vec<Vec<f64>> =
                    nodes_asked.iter().map(|&b| nodes[b].free(scale)).collect();
                let needs: Vec<Vec<f64>> = jobs
                    .iter()
                    .map(|j| j.need.iter().map(|x| x / scale).collect())
                    .collect();
                let mapped = nres::balance(&needs, &free);
                for (j, to) in jobs.into_iter().zip(mapped) {
                    match to {
                        Some(k) => {
                            let (b, gamma) = asked[k];
                            moved += 1;
                            transit.push((now + gamma.max(step), b, j));
                        }
                        None => nodes[at].queue.push(j),
                    }
                }
            } else {
                nodes[at].queue.extend(jobs);
            }
        }
        let (here, later): (Vec<_>, Vec<_>) = transit.into_iter().partition(|(t, _, _)| *t <= now);
        transit = later;
        for (_, b, j) in here {
            nodes[b].queue.push(j);
        }
        let idle = nodes.iter().all(|x| x.queue.is_empty());
        if idle && transit.is_empty() && next >= arrivals.len() {
            let eta = nres::eta(t_no, now, n as u32);
            return Run {
                makespan: now,
                t_no,
                eta,
                moved,
                triggered,
            };
        }
        for x in &mut nodes {
            if x.queue.is_empty() {
                continue;
            }
            if x.left <= 0.0 {
                x.left = x.time_of(&x.queue[0]);
            }
            x.left -= step;
            if x.left <= 0.0 {
                x.queue.remove(0);
                x.left = 0.0;
            }
        }
        now += step;
    }
}

/// One row of a trend: the setting varied and eta for each trigger line
/// (`Max` 25, 20 and 15: the steepest slope first), means over seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The value of the setting varied.
    pub value: f64,
    /// Eta at Max = 25, 20, 15.
    pub eta: [f64; 3],
    /// Eta without balancing.
    pub eta_none: f64,
}

/// Eta against `vary` (capacity or latency) over `values`, for each trigger
/// line, the mean of `seeds` grids.
pub fn trend(s: &Setup, vary: &str, values: &[f64], seeds: u64) -> Vec<Row> {
    values
        .iter()
        .map(|&v| {
            let mut eta = [0.0; 3];
            let mut none = 0.0;
            for k in 0..seeds.max(1) {
                let mut base = Setup {
                    seed: s.seed + k,
                    ..s.clone()
                };
                match vary {
                    "latency" => base.latency = v,
                    _ => base.capacity = v,
                }
                none += run(&base, false).eta;
                for (e, max) in eta.iter_mut().zip([25.0, 20.0, 15.0]) {
                    *e += run(
                        &Setup {
                            max,
                            ..base.clone()
                        },
                        true,
                    )
                    .eta;
                }
            }
            let m = seeds.max(1) as f64;
            Row {
                value: v,
                eta: eta.map(|e| e / m),
                eta_none: none / m,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balancing_moves_jobs_off_busy_nodes_and_beats_none() {
        let s = Setup {
            jobs: 400,
            ..Setup::default()
        };
        let none = run(&s, false);
        let bal = run(&s, true);
        assert_eq!(none.moved, 0);
        assert!(bal.moved > 0 && bal.triggered > 0, "{bal:?}");
        assert!(bal.makespan < none.makespan, "{bal:?} vs {none:?}");
        assert!(bal.eta > none.eta && bal.eta <= 1.0, "{bal:?} vs {none:?}");
        assert_eq!(run(&s, true), bal, "the same seed, the same run");
    }
}
