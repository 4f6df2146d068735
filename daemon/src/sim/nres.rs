//! Seed 004's experiments, reproduced: a grid of N-resource nodes (CPU,
//! memory, I/O: the first 1, 2 or 3 of them as in the paper; the network
//! as a fourth), each with a few neighbours
//! at a network latency, jobs submitted at random nodes in bursts. A node
//! whose burst is more than its resource usage admits
//! (`balance::nres::needs_triggering`, the line from (0, Max) to (100, 0))
//! sends a status request to the neighbours whose reply can come back
//! before its Internal Queue drains (`Time_IQ`), and they pass it on to
//! theirs while the round trip still fits (`balance::nres::asked`); each
//! reports its free capacity when the request reaches it. The node keeps
//! running its Internal Queue while it waits; at `Time_IQ` it maps the
//! burst (its External Queue) fewest-choices-first over the replies
//! (`balance::nres::balance`) and sends each job mapped elsewhere, which
//! travels the route's latency; the rest join its own queue. The figure is
//! `eta = (T_no - T_my) / (T_no - T_lb)`.
//!
//! The model (the paper gives its figures' trends, not its simulator):
//! time in steps; a node runs its queue one job at a time; a job's time is
//! its work over the node's speed (its CPU capacity over the mean: more
//! capacity all round means room for more jobs, "a smaller granularity",
//! not faster jobs), doubled where the node lacks memory or I/O that the
//! job needs (whether the job declared it or not: Figure 9's jobs declare
//! 1, 2 or 3 of their needs); a node's resource usage is what its running
//! job uses of its capacity (mean over its resources), and its free
//! capacity its capacity less that (each resource in 0..=1 of the largest
//! node's); an idle node struck by a burst starts its first job at once,
//! so `Time_IQ` is never zero; bursts are of 1 to twice their mean size at
//! nodes drawn at random, their gaps drawn for the load asked; a burst
//! reaching a node while its search is out joins that search's External
//! Queue. Capacities and needs are uniform around their means, latencies
//! around theirs; `T_no` is the work on one node of mean capacity. The
//! network as a fourth resource (not the paper's: its resources are a
//! node's own) is a node's link throughput and the rate a job moves data
//! at, drawn as the others but from a stream of their own, so the 1- to
//! 3-resource runs are what they are without it; a job on a node whose
//! link is slower than its data runs twice as long, as for memory and I/O.
//! Pure: no clock, no I/O.

use serde::Serialize;

use super::rng::SplitMix;
use crate::balance::nres;

/// Resources a node may have: CPU, memory, I/O, network.
pub const RESOURCES: usize = 4;

/// The paper's resources: CPU, memory, I/O.
pub const PAPER_RESOURCES: usize = 3;

/// The seed of the network's draws is the run's with these bits flipped.
const NETWORK_STREAM: u64 = 0x6e65_7477_6f72_6b00;

/// One experiment's settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Setup {
    /// Nodes.
    pub nodes: usize,
    /// Neighbours of each node (at least; links are both ways).
    pub degree: usize,
    /// Resources of a node (1-4: CPU, then memory, I/O, network).
    pub resources: usize,
    /// Of a job's needs, how many it declares (1 to `resources`).
    pub declared: usize,
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
    /// Mean work of a job (steps on a node of mean capacity).
    pub work: f64,
    /// Mean jobs a burst.
    pub burst: usize,
    /// Work offered over what the grid can do while jobs arrive.
    pub load: f64,
    /// The seed.
    pub seed: u64,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            nodes: 32,
            degree: 5,
            resources: 3,
            declared: 3,
            capacity: 8.0,
            need: 4.0,
            latency: 8.0,
            max: 15.0,
            jobs: 2000,
            work: 40.0,
            burst: 10,
            load: 0.8,
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
    /// Its speed: its CPU capacity over the mean capacity.
    speed: f64,
    /// Its Internal Queue, the first job running.
    queue: Vec<Job>,
    /// Work left of the running job, steps.
    left: f64,
    /// Its neighbours and the latency to each.
    links: Vec<(usize, f64)>,
}

impl Node {
    fn time_of(&self, j: &Job, resources: usize) -> f64 {
        let lacks = (1..resources).any(|r| j.need[r] > self.cap[r]);
        j.work / self.speed * if lacks { 2.0 } else { 1.0 }
    }

    /// `Time_IQ`: steps to drain its Internal Queue.
    fn drain(&self, resources: usize) -> f64 {
        self.left
            + self
                .queue
                .iter()
                .skip(1)
                .map(|j| self.time_of(j, resources))
                .sum::<f64>()
    }

    /// Its resource usage, percent: what the running job uses.
    fn usage(&self, resources: usize) -> f64 {
        let Some(j) = self.queue.first() else {
            return 0.0;
        };
        let used: f64 = (0..resources)
            .map(|r| (j.need[r] / self.cap[r]).min(1.0))
            .sum();
        100.0 * used / resources as f64
    }

    /// What it reports: its capacity less what the job running now uses
    /// ("the current usage of its resources").
    fn free(&self, resources: usize, scale: f64) -> Vec<f64> {
        (0..resources)
            .map(|r| {
                let used = self.queue.first().map_or(0.0, |j| j.need[r]);
                ((self.cap[r] - used) / scale).max(0.0)
            })
            .collect()
    }
}

/// A node's search: its External Queue, the nodes asked and their
/// replies, and when it maps.
struct Search {
    node: usize,
    jobs: Vec<Job>,
    sent: f64,
    asked: Vec<(usize, f64)>,
    replies: Vec<Option<Vec<f64>>>,
    due: f64,
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
    /// Status requests and replies sent.
    pub messages: u64,
}

/// The grid: `n` nodes of random capacities around the setting's, joined
/// in a ring and by random links up to the degree; and the largest
/// capacity of any resource (what needs and free room are scaled by).
fn grid(s: &Setup, rng: &mut SplitMix, net: &mut SplitMix, n: usize) -> (Vec<Node>, f64) {
    let around = |rng: &mut SplitMix, mean: f64| mean * (0.5 + rng.unit());
    let mut nodes: Vec<Node> = (0..n)
        .map(|_| Node {
            cap: draw(rng, net, |r| around(r, s.capacity).max(0.1)),
            speed: 1.0,
            queue: Vec::new(),
            left: 0.0,
            links: Vec::new(),
        })
        .collect();
    // A ring (so the grid is connected) and random links up to the degree.
    for a in 0..n {
        let b = (a + 1) % n;
        let l = around(rng, s.latency).max(0.0);
        nodes[a].links.push((b, l));
        nodes[b].links.push((a, l));
    }
    for a in 0..n {
        while nodes[a].links.len() < s.degree.min(n - 1) {
            let b = (rng.next_u64() % n as u64) as usize;
            if b == a || nodes[a].links.iter().any(|&(x, _)| x == b) {
                continue;
            }
            let l = around(rng, s.latency).max(0.0);
            nodes[a].links.push((b, l));
            nodes[b].links.push((a, l));
        }
    }
    for x in &mut nodes {
        x.speed = x.cap[0] / s.capacity.max(0.1);
    }
    // The paper's resources, and the network where it is one.
    let counted = s.resources.clamp(PAPER_RESOURCES, RESOURCES);
    let scale = nodes
        .iter()
        .flat_map(|x| x.cap[..counted].to_vec())
        .fold(f64::MIN_POSITIVE, f64::max);
    (nodes, scale)
}

/// The arrivals: bursts of jobs at random nodes of `n`, as far apart as
/// the load asks (time, node, jobs).
fn bursts(
    s: &Setup,
    rng: &mut SplitMix,
    net: &mut SplitMix,
    n: usize,
) -> Vec<(f64, usize, Vec<Job>)> {
    let around = |rng: &mut SplitMix, mean: f64| mean * (0.5 + rng.unit());
    let mean_burst = (2 * s.burst.max(1) + 1) as f64 / 2.0;
    let gap = mean_burst * s.work / (n as f64 * s.load.max(0.01));
    let mut arrivals: Vec<(f64, usize, Vec<Job>)> = Vec::new();
    let mut t = 0.0;
    let mut made = 0;
    while made < s.jobs {
        t += rng.exp(gap);
        let at = (rng.next_u64() % n as u64) as usize;
        let b = (1 + (rng.next_u64() % (2 * s.burst.max(1)) as u64) as usize).min(s.jobs - made);
        let jobs = (0..b)
            .map(|_| Job {
                need: draw(rng, net, |r| around(r, s.need)),
                work: rng.exp(s.work).max(1.0),
            })
            .collect();
        arrivals.push((t, at, jobs));
        made += b;
    }
    arrivals
}

/// One figure per resource: the paper's three from `rng` in their order,
/// the network's from `net`.
fn draw(
    rng: &mut SplitMix,
    net: &mut SplitMix,
    mut f: impl FnMut(&mut SplitMix) -> f64,
) -> [f64; RESOURCES] {
    let mut v = [0.0; RESOURCES];
    for x in &mut v[..PAPER_RESOURCES] {
        *x = f(rng);
    }
    for x in &mut v[PAPER_RESOURCES..] {
        *x = f(net);
    }
    v
}

/// Run the grid of `s`, balancing when `balance` (else every job stays).
pub fn run(s: &Setup, balance: bool) -> Run {
    let mut rng = SplitMix::new(s.seed);
    let mut net = SplitMix::new(s.seed ^ NETWORK_STREAM);
    let n = s.nodes.max(2);
    let k = s.resources.clamp(1, RESOURCES);
    let declared = s.declared.clamp(1, k);
    let (mut nodes, scale) = grid(s, &mut rng, &mut net, n);
    let arrivals = bursts(s, &mut rng, &mut net, n);
    let mean_cpu = nodes.iter().map(|x| x.speed).sum::<f64>() / n as f64;
    let t_no: f64 = arrivals
        .iter()
        .flat_map(|(_, _, js)| js.iter())
        .map(|j| j.work / mean_cpu)
        .sum();
    let latencies: Vec<Vec<(usize, f64)>> = nodes.iter().map(|x| x.links.clone()).collect();
    // Jobs on their way: (arrival step, node, job).
    let mut transit: Vec<(f64, usize, Job)> = Vec::new();
    let mut searches: Vec<Search> = Vec::new();
    let (mut moved, mut triggered, mut messages) = (0, 0, 0);
    let mut next = 0;
    let mut now = 0.0;
    let step = 1.0;
    loop {
        while next < arrivals.len() && arrivals[next].0 <= now {
            let (_, at, mut jobs) = arrivals[next].clone();
            next += 1;
            if let Some(out) = searches.iter_mut().find(|x| x.node == at) {
                out.jobs.extend(jobs);
                continue;
            }
            if !(balance && nres::needs_triggering(jobs.len() as u32, nodes[at].usage(k), s.max)) {
                nodes[at].queue.extend(jobs);
                continue;
            }
            triggered += 1;
            if nodes[at].queue.is_empty() {
                nodes[at].queue.push(jobs.remove(0));
            }
            let time_iq = nodes[at].drain(k).max(step);
            let asked = nres::asked(&latencies, at, time_iq);
            messages += 2 * asked.len() as u64;
            searches.push(Search {
                node: at,
                jobs,
                sent: now,
                replies: vec![None; asked.len()],
                asked,
                due: now + time_iq,
            });
        }
        // Requests reaching nodes: each replies with its status now.
        for x in &mut searches {
            for (reply, &(b, gamma)) in x.replies.iter_mut().zip(&x.asked) {
                if reply.is_none() && x.sent + gamma <= now {
                    *reply = Some(nodes[b].free(k, scale));
                }
            }
        }
        // Searches whose Time_IQ is up: Balance over the replies.
        let (due, out): (Vec<Search>, Vec<Search>) =
            searches.into_iter().partition(|x| x.due <= now);
        searches = out;
        for x in due {
            let (asked, free): (Vec<(usize, f64)>, Vec<Vec<f64>>) = x
                .asked
                .iter()
                .zip(x.replies)
                .filter_map(|(&a, r)| Some((a, r?)))
                .unzip();
            let needs: Vec<Vec<f64>> = x
                .jobs
                .iter()
                .map(|j| j.need[..declared].iter().map(|v| v / scale).collect())
                .collect();
            let mapped = nres::balance(&needs, &free);
            for (j, to) in x.jobs.into_iter().zip(mapped) {
                match to {
                    Some(m) => {
                        let (b, gamma) = asked[m];
                        moved += 1;
                        transit.push((now + gamma.max(step), b, j));
                    }
                    None => nodes[x.node].queue.push(j),
                }
            }
        }
        let (here, later): (Vec<_>, Vec<_>) = transit.into_iter().partition(|(t, _, _)| *t <= now);
        transit = later;
        for (_, b, j) in here {
            nodes[b].queue.push(j);
        }
        let idle = nodes.iter().all(|x| x.queue.is_empty());
        if idle && transit.is_empty() && searches.is_empty() && next >= arrivals.len() {
            let eta = nres::eta(t_no, now, n as u32);
            return Run {
                makespan: now,
                t_no,
                eta,
                moved,
                triggered,
                messages,
            };
        }
        for x in &mut nodes {
            if x.queue.is_empty() {
                continue;
            }
            if x.left <= 0.0 {
                x.left = x.time_of(&x.queue[0], k);
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

/// One point of a trend: the setting varied and eta for each trigger line
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

/// The setting a trend varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Vary {
    /// The nodes' mean capacity (Figure 7).
    Capacity,
    /// The links' mean latency (Figure 8).
    Latency,
}

/// Eta against `vary` over `values`, for each trigger line, the mean of
/// `seeds` grids.
pub fn trend(s: &Setup, vary: Vary, values: &[f64], seeds: u64) -> Vec<Row> {
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
                    Vary::Latency => base.latency = v,
                    Vary::Capacity => base.capacity = v,
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

/// Figures 7 and 8's curves: one trend per number of resources (1-3).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Curves {
    /// Resources of a node (and of a job).
    pub resources: usize,
    /// The points.
    pub rows: Vec<Row>,
}

/// Figure 7 (`Vary::Capacity`) or 8 (`Vary::Latency`) for 1-, 2- and
/// 3-resource nodes, and 4 (the network too) when `network`.
pub fn figure(s: &Setup, vary: Vary, values: &[f64], seeds: u64, network: bool) -> Vec<Curves> {
    let most = if network { RESOURCES } else { PAPER_RESOURCES };
    (1..=most)
        .map(|r| Curves {
            resources: r,
            rows: trend(
                &Setup {
                    resources: r,
                    declared: r,
                    ..s.clone()
                },
                vary,
                values,
                seeds,
            ),
        })
        .collect()
}

/// One point of Figure 9: the load and `T_my` for jobs declaring 1, 2 and
/// 3 of their needs on 3-resource nodes, `T_lb` beside them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoadRow {
    /// Work offered over what the grid can do.
    pub load: f64,
    /// `T_my`, steps, with 1, 2 and 3 needs declared.
    pub t_my: [f64; 3],
    /// `T_lb`: all the work spread evenly.
    pub t_lb: f64,
}

/// Figure 9: `T_my` against the load, means over `seeds` grids.
pub fn figure9(s: &Setup, loads: &[f64], seeds: u64) -> Vec<LoadRow> {
    loads
        .iter()
        .map(|&load| {
            let mut t_my = [0.0; 3];
            let mut t_lb = 0.0;
            for k in 0..seeds.max(1) {
                for (d, t) in t_my.iter_mut().enumerate() {
                    // The load by the work each job brings, the
                    // arrivals as they are.
                    let r = run(
                        &Setup {
                            load,
                            work: s.work * load / s.load.max(0.01),
                            resources: PAPER_RESOURCES,
                            declared: d + 1,
                            seed: s.seed + k,
                            ..s.clone()
                        },
                        true,
                    );
                    *t += r.makespan;
                    if d == 0 {
                        t_lb += r.t_no / s.nodes.max(2) as f64;
                    }
                }
            }
            let m = seeds.max(1) as f64;
            LoadRow {
                load,
                t_my: t_my.map(|t| t / m),
                t_lb: t_lb / m,
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

    /// Mean eta of balanced grids (Max 15 unless `s` says) over `seeds`.
    fn eta(s: &Setup, seeds: u64) -> f64 {
        (0..seeds)
            .map(|k| {
                run(
                    &Setup {
                        seed: s.seed + k,
                        jobs: 1000,
                        ..s.clone()
                    },
                    true,
                )
                .eta
            })
            .sum::<f64>()
            / seeds as f64
    }

    #[test]
    fn eta_rises_with_the_nodes_capacity() {
        // Figure 7: more capacity, more nodes a job fits.
        let at = |capacity| {
            eta(
                &Setup {
                    capacity,
                    ..Setup::default()
                },
                8,
            )
        };
        let (low, mid, high) = (at(2.0), at(4.0), at(8.0));
        assert!(low < mid && mid < high, "{low} {mid} {high}");
    }

    #[test]
    fn eta_falls_as_latency_grows() {
        // Figure 8: fewer nodes answer before the queue drains, and jobs
        // sent take longer on the way.
        let at = |latency| {
            eta(
                &Setup {
                    latency,
                    ..Setup::default()
                },
                8,
            )
        };
        let (near, far, farther) = (at(2.0), at(128.0), at(512.0));
        assert!(near > far && far > farther, "{near} {far} {farther}");
    }

    #[test]
    fn eta_falls_as_the_trigger_line_steepens() {
        // Figures 7-8: a steeper line (a higher Max) triggers less often.
        let at = |max| {
            eta(
                &Setup {
                    max,
                    ..Setup::default()
                },
                8,
            )
        };
        let (steep, gentle) = (at(25.0), at(15.0));
        assert!(steep < gentle, "{steep} {gentle}");
    }

    #[test]
    fn a_job_runs_twice_as_long_on_a_node_whose_link_is_slower_than_its_data() {
        let node = Node {
            cap: [1.0, 1.0, 1.0, 0.5],
            speed: 1.0,
            queue: Vec::new(),
            left: 0.0,
            links: Vec::new(),
        };
        let job = Job {
            need: [0.5, 0.5, 0.5, 1.0],
            work: 10.0,
        };
        // The paper's three resources do not see the network; a fourth does.
        assert_eq!(node.time_of(&job, PAPER_RESOURCES), 10.0);
        assert_eq!(node.time_of(&job, RESOURCES), 20.0);
    }

    #[test]
    fn with_the_network_a_fourth_resource_balancing_still_beats_none_and_the_paper_s_runs_stay() {
        let s = Setup {
            jobs: 400,
            resources: RESOURCES,
            declared: RESOURCES,
            ..Setup::default()
        };
        let (bal, none) = (run(&s, true), run(&s, false));
        assert!(bal.moved > 0 && bal.eta > none.eta, "{bal:?} vs {none:?}");
        // The network's draws come from a stream of their own: the same
        // jobs and grid for three resources whether a fourth is drawn or
        // not, so the work (T_no) is the same.
        let three = run(
            &Setup {
                resources: PAPER_RESOURCES,
                declared: PAPER_RESOURCES,
                ..s.clone()
            },
            false,
        );
        assert_eq!(three.t_no, none.t_no);
    }

    #[test]
    fn a_node_asks_only_as_far_as_replies_come_back_before_its_queue_drains() {
        // Links far slower than any queue drains: nobody is asked, no job
        // moves, and balancing is no balancing.
        let s = Setup {
            latency: 1e6,
            jobs: 300,
            ..Setup::default()
        };
        let (bal, none) = (run(&s, true), run(&s, false));
        assert!(bal.triggered > 0, "{bal:?}");
        assert_eq!((bal.moved, bal.messages), (0, 0), "{bal:?}");
        assert_eq!(bal.makespan, none.makespan);
    }
}
