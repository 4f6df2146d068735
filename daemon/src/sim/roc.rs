//! Seed 003's load-balancing experiments, reproduced: 16 PEs run a set of
//! tasks that spawn tasks as they end (so load drifts apart even from an
//! even start), with no balancing, with sender-initiated diffusion (SID,
//! Willebeek-LeMair and Reeves, the paper's comparison) and with
//! Rate-of-Change (`crate::balance::roc`); the figure is the paper's
//! normalised performance `NP = (T_noLB - T_bal) / (T_noLB - T_opt)`.
//!
//! The model (the paper gives its tables, not its simulator): time in
//! steps; a PE shares its processor round-robin, one step per task in
//! turn; a task's work (exponential, mean `mean_work` steps) and whether
//! it spawns two children when it ends follow from its own id and the
//! seed alone, so every policy runs the very same task tree; a task moved
//! between PEs is in transit for the latency between them (hops x
//! `hop_steps` on a hypercube, one hop on a fully connected network, a
//! slower shared network for workstations); a PE knows others' loads as of
//! the last sampling interval. "Stable" starts the tasks spread evenly
//! over all PEs, "unstable" over half of them.
//!
//! Pure: no clock, no I/O.

use std::collections::VecDeque;

use serde::Serialize;

use super::rng::SplitMix;
use crate::balance::roc::{self, Answer, LoadRequest, Roc, Thresholds};

/// How the PEs are connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Topology {
    /// A binary hypercube (16 PEs: 4 neighbours each).
    Hypercube,
    /// Every PE a neighbour of every other.
    FullyConnected,
    /// Workstations on a shared network: all neighbours, each transfer
    /// slower.
    Workstations,
}

impl Topology {
    /// All three, as the paper's tables have them.
    pub const ALL: [Topology; 3] = [
        Topology::Hypercube,
        Topology::FullyConnected,
        Topology::Workstations,
    ];

    /// Its name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Topology::Hypercube => "hypercube",
            Topology::FullyConnected => "fully connected",
            Topology::Workstations => "workstations",
        }
    }

    fn neighbours(self, p: usize, n: usize) -> Vec<usize> {
        match self {
            Topology::Hypercube => (0..usize::BITS)
                .map(|b| p ^ (1 << b))
                .filter(|&q| q < n)
                .collect(),
            _ => (0..n).filter(|&q| q != p).collect(),
        }
    }

    /// Steps a message or a task takes from `a` to `b`.
    fn latency(self, a: usize, b: usize, hop: u64) -> u64 {
        match self {
            Topology::Hypercube => hop * u64::from((a ^ b).count_ones()),
            Topology::FullyConnected => hop,
            Topology::Workstations => 2 * hop,
        }
    }
}

/// How the tasks start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Start {
    /// Spread evenly over every PE.
    Stable,
    /// Spread over half the PEs, the rest idle.
    Unstable,
}

/// Who moves tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Balancer {
    /// Nobody.
    None,
    /// Sender-initiated diffusion: a PE above its neighbourhood's mean
    /// sends its excess to the neighbours below it, in proportion to
    /// what each lacks.
    Sid,
    /// Rate-of-Change, receiver-initiated.
    Roc,
}

/// One experiment's settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Setup {
    /// Processing elements.
    pub pes: usize,
    /// Tasks at the start, per PE of the machine.
    pub tasks_per_pe: usize,
    /// Mean work of a task, steps.
    pub mean_work: f64,
    /// Chance that a task spawns two children when it ends.
    pub spawn: f64,
    /// Generations of spawning at most.
    pub depth: u32,
    /// Steps one hop of the network takes.
    pub hop_steps: u64,
    /// Steps between two samples of the load (both balancers).
    pub interval: u64,
    /// Rate-of-Change's thresholds, in tasks.
    pub thresholds: Thresholds,
    /// Passes a load request may make.
    pub ttl: u32,
    /// The seed of the task tree.
    pub seed: u64,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            pes: 16,
            tasks_per_pe: 16,
            mean_work: 20.0,
            spawn: 0.4,
            depth: 5,
            hop_steps: 2,
            interval: 2,
            thresholds: Thresholds {
                critical: 1.0,
                low: 2.0,
                high: 4.0,
            },
            ttl: 3,
            seed: 1,
        }
    }
}

/// What one run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Run {
    /// Steps until every task had ended.
    pub steps: u64,
    /// Tasks moved between PEs.
    pub moved: u64,
    /// Load requests (Rate-of-Change) or diffusion rounds that sent tasks.
    pub messages: u64,
}

#[derive(Debug, Clone)]
struct Task {
    id: u64,
    left: u64,
    cpu: u64,
    depth: u32,
}

fn mix(a: u64, b: u64) -> u64 {
    SplitMix::new(a ^ b.wrapping_mul(0x9e37_79b9_7f4a_7c15)).next_u64()
}

impl Setup {
    fn task(&self, id: u64, depth: u32) -> Task {
        let mut r = SplitMix::new(mix(self.seed, id));
        let work = r.exp(self.mean_work).round().max(1.0) as u64;
        Task {
            id,
            left: work,
            cpu: 0,
            depth,
        }
    }

    fn children(&self, t: &Task) -> Vec<Task> {
        let mut r = SplitMix::new(mix(self.seed ^ 0x5eed, t.id));
        if t.depth >= self.depth || r.unit() >= self.spawn {
            return Vec::new();
        }
        (1..=2)
            .map(|k| self.task(mix(t.id, k), t.depth + 1))
            .collect()
    }

    fn roots(&self) -> Vec<Task> {
        (0..(self.pes * self.tasks_per_pe) as u64)
            .map(|i| self.task(i, 0))
            .collect()
    }

    /// All the work of the task tree, in steps.
    pub fn total_work(&self) -> u64 {
        let mut todo = self.roots();
        let mut sum = 0;
        while let Some(t) = todo.pop() {
            sum += t.left;
            todo.extend(self.children(&t));
        }
        sum
    }

    /// `T_opt`: the work on one PE divided by the PEs.
    pub fn t_opt(&self) -> f64 {
        self.total_work() as f64 / self.pes.max(1) as f64
    }
}

enum Msg {
    Request {
        to: usize,
        req: LoadRequest,
        asked: u64,
    },
    Tasks {
        to: usize,
        tasks: Vec<Task>,
        asked: Option<u64>,
    },
    Unfulfilled {
        to: usize,
    },
}

/// Run the task tree of `s` from `start` on `topology` under `balancer`.
pub fn run(s: &Setup, topology: Topology, start: Start, balancer: Balancer) -> Run {
    let mut m = Machine::new(s, topology, start);
    loop {
        m.arrive();
        if m.queues.iter().all(VecDeque::is_empty) && m.transit.is_empty() {
            m.out.steps = m.t;
            return m.out;
        }
        if m.t.is_multiple_of(s.interval.max(1)) {
            let loads: Vec<f64> = m.queues.iter().map(|q| q.len() as f64).collect();
            match balancer {
                Balancer::None => {}
                Balancer::Roc => m.roc_round(&loads),
                Balancer::Sid => m.sid_round(&loads),
            }
            m.known = loads;
        }
        m.work_step();
        m.t += 1;
    }
}

/// The simulated machine: each PE's queue and Rate-of-Change balancer,
/// the loads last sampled, the messages in transit, the step, the figures.
struct Machine<'a> {
    s: &'a Setup,
    topology: Topology,
    n: usize,
    queues: Vec<VecDeque<Task>>,
    pes: Vec<Roc>,
    /// Each message and the step it arrives at.
    transit: Vec<(u64, Msg)>,
    /// Each PE's load as of the last sampling interval.
    known: Vec<f64>,
    out: Run,
    t: u64,
}

impl<'a> Machine<'a> {
    /// The root tasks spread over all PEs (`Start::Stable`) or half of them.
    fn new(s: &'a Setup, topology: Topology, start: Start) -> Machine<'a> {
        let n = s.pes.max(1);
        let mut queues: Vec<VecDeque<Task>> = vec![VecDeque::new(); n];
        let spread = match start {
            Start::Stable => n,
            Start::Unstable => n.div_ceil(2),
        };
        for (i, t) in s.roots().into_iter().enumerate() {
            queues[i % spread].push_back(t);
        }
        let pes: Vec<Roc> = (0..n)
            .map(|_| {
                Roc::new(
                    s.thresholds,
                    2.0 * topology.latency(0, n - 1, s.hop_steps) as f64,
                )
            })
            .collect();
        let known: Vec<f64> = queues.iter().map(|q| q.len() as f64).collect();
        Machine {
            s,
            topology,
            n,
            queues,
            pes,
            transit: Vec::new(),
            known,
            out: Run {
                steps: 0,
                moved: 0,
                messages: 0,
            },
            t: 0,
        }
    }

    /// Steps a message takes from PE `a` to PE `b` (at least one).
    fn lat(&self, a: usize, b: usize) -> u64 {
        self.topology.latency(a, b, self.s.hop_steps).max(1)
    }

    /// What arrives now: tasks join their queue, requests are answered.
    fn arrive(&mut self) {
        let t = self.t;
        let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.transit)
            .into_iter()
            .partition(|(at, _)| *at <= t);
        self.transit = later;
        for (_, msg) in now {
            match msg {
                Msg::Tasks { to, tasks, asked } => {
                    self.queues[to].extend(tasks);
                    if let Some(at) = asked {
                        self.pes[to].received((t - at) as f64);
                    }
                }
                Msg::Unfulfilled { to } => self.pes[to].unfulfilled(),
                Msg::Request { to, req, asked } => self.answer(to, req, asked),
            }
        }
    }

    /// PE `to` answers a load request (first sent at step `asked`): tasks
    /// sent, the request forwarded, or unfulfilled.
    fn answer(&mut self, to: usize, req: LoadRequest, asked: u64) {
        let t = self.t;
        let high = self.s.thresholds.high;
        let cpu: Vec<f64> = self.queues[to].iter().map(|x| x.cpu as f64).collect();
        let sources = source_table(&self.known, high, to);
        match roc::answer(&cpu, high, &sources, req) {
            Answer::Send(mut which) => {
                which.sort_unstable_by(|a, b| b.cmp(a));
                let tasks: Vec<Task> = which
                    .iter()
                    .filter_map(|&i| self.queues[to].remove(i))
                    .collect();
                self.out.moved += tasks.len() as u64;
                let at = t + self.lat(to, req.from);
                self.transit.push((
                    at,
                    Msg::Tasks {
                        to: req.from,
                        tasks,
                        asked: Some(asked),
                    },
                ));
            }
            Answer::Forward(next, req) => {
                let at = t + self.lat(to, next);
                self.transit.push((
                    at,
                    Msg::Request {
                        to: next,
                        req,
                        asked,
                    },
                ))
            }
            Answer::Unfulfilled => {
                let at = t + self.lat(to, req.from);
                self.transit.push((at, Msg::Unfulfilled { to: req.from }))
            }
        }
    }

    /// Rate-of-Change at a sampling interval: each PE whose load falls
    /// fast enough asks the most loaded PE it knows of.
    fn roc_round(&mut self, loads: &[f64]) {
        let t = self.t;
        for (p, &load) in loads.iter().enumerate() {
            let Some(amount) = self.pes[p].sample(load, self.s.interval as f64) else {
                continue;
            };
            self.out.messages += 1;
            let req = LoadRequest {
                from: p,
                amount,
                ttl: self.s.ttl,
            };
            match source_table(&self.known, self.s.thresholds.high, p).first() {
                Some(&x) => {
                    let at = t + self.lat(p, x);
                    self.transit.push((
                        at,
                        Msg::Request {
                            to: x,
                            req,
                            asked: t,
                        },
                    ))
                }
                None => self.pes[p].unfulfilled(),
            }
        }
    }

    /// Sender-initiated diffusion at a sampling interval: each PE above
    /// its neighbourhood's mean sends waiting tasks to the neighbours
    /// below it, in proportion to what each lacks.
    fn sid_round(&mut self, loads: &[f64]) {
        let t = self.t;
        for p in 0..self.n {
            let near = self.topology.neighbours(p, self.n);
            let mean =
                (loads[p] + near.iter().map(|&q| loads[q]).sum::<f64>()) / (near.len() + 1) as f64;
            let excess = loads[p] - mean;
            if excess < 1.0 {
                continue;
            }
            let lack: Vec<(usize, f64)> = near
                .iter()
                .map(|&q| (q, mean - loads[q]))
                .filter(|&(_, d)| d > 0.0)
                .collect();
            let total: f64 = lack.iter().map(|(_, d)| d).sum();
            let mut sent = false;
            for (q, d) in lack {
                let k = (excess * d / total).floor() as usize;
                // Waiting tasks, not the one at the front.
                let k = k.min(self.queues[p].len().saturating_sub(1));
                if k == 0 {
                    continue;
                }
                let at = self.queues[p].len() - k;
                let tasks: Vec<Task> = self.queues[p].drain(at..).collect();
                self.out.moved += k as u64;
                sent = true;
                let arrives = t + self.lat(p, q);
                self.transit.push((
                    arrives,
                    Msg::Tasks {
                        to: q,
                        tasks,
                        asked: None,
                    },
                ));
            }
            self.out.messages += u64::from(sent);
        }
    }

    /// One step of work: each PE gives its front task a step, round-robin;
    /// a task that ends leaves its children in its queue.
    fn work_step(&mut self) {
        for q in &mut self.queues {
            let Some(mut task) = q.pop_front() else {
                continue;
            };
            task.left -= 1;
            task.cpu += 1;
            if task.left == 0 {
                q.extend(self.s.children(&task));
            } else {
                q.push_back(task);
            }
        }
    }
}

/// A PE's source table: the PEs (not itself) last known at or above
/// `high`, most loaded first.
fn source_table(known: &[f64], high: f64, me: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (0..known.len())
        .filter(|&q| q != me && known[q] >= high)
        .collect();
    v.sort_by(|&a, &b| known[b].total_cmp(&known[a]).then(a.cmp(&b)));
    v
}

/// One row of the reproduction: a topology and start, NP of each
/// balancer (mean over seeds) and tasks moved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The network.
    pub topology: Topology,
    /// How the tasks started.
    pub start: Start,
    /// Mean steps with no balancing.
    pub t_no_lb: f64,
    /// Mean `T_opt`.
    pub t_opt: f64,
    /// Mean NP of sender-initiated diffusion.
    pub np_sid: f64,
    /// Mean NP of Rate-of-Change.
    pub np_roc: f64,
    /// Mean tasks moved by each.
    pub moved_sid: f64,
    /// Mean tasks moved by Rate-of-Change.
    pub moved_roc: f64,
}

/// The paper's Tables 2 and 3: every topology, stable and unstable, each
/// the mean over `seeds` task trees (seeds `s.seed .. s.seed + seeds`).
pub fn reproduce(s: &Setup, seeds: u64) -> Vec<Row> {
    let mut rows = Vec::new();
    for start in [Start::Stable, Start::Unstable] {
        for topology in Topology::ALL {
            let mut acc = [0.0f64; 6];
            for k in 0..seeds.max(1) {
                let s = Setup {
                    seed: s.seed + k,
                    ..s.clone()
                };
                let none = run(&s, topology, start, Balancer::None).steps as f64;
                let opt = s.t_opt();
                let sid = run(&s, topology, start, Balancer::Sid);
                let roc = run(&s, topology, start, Balancer::Roc);
                acc[0] += none;
                acc[1] += opt;
                acc[2] += roc::np(none, sid.steps as f64, opt);
                acc[3] += roc::np(none, roc.steps as f64, opt);
                acc[4] += sid.moved as f64;
                acc[5] += roc.moved as f64;
            }
            let m = seeds.max(1) as f64;
            rows.push(Row {
                topology,
                start,
                t_no_lb: acc[0] / m,
                t_opt: acc[1] / m,
                np_sid: acc[2] / m,
                np_roc: acc[3] / m,
                moved_sid: acc[4] / m,
                moved_roc: acc[5] / m,
            });
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_policy_runs_the_same_task_tree_to_its_end() {
        let s = Setup {
            tasks_per_pe: 4,
            ..Setup::default()
        };
        let work = s.total_work();
        assert!(work > 0);
        for b in [Balancer::None, Balancer::Sid, Balancer::Roc] {
            for top in Topology::ALL {
                let r = run(&s, top, Start::Unstable, b);
                // No PE does more than a step a step: the work bounds the time.
                assert!(r.steps as f64 >= s.t_opt().floor(), "{b:?} {top:?}");
                assert!(r.steps <= work + 100 * s.hop_steps, "{b:?} {top:?}");
                if b == Balancer::None {
                    assert_eq!(r.moved, 0);
                }
            }
        }
        // The same seed, the same run.
        assert_eq!(
            run(&s, Topology::Hypercube, Start::Stable, Balancer::Roc),
            run(&s, Topology::Hypercube, Start::Stable, Balancer::Roc)
        );
    }

    #[test]
    fn half_the_machine_idle_costs_without_balancing_and_both_balancers_win_it_back() {
        let s = Setup::default();
        let none = run(
            &s,
            Topology::FullyConnected,
            Start::Unstable,
            Balancer::None,
        );
        // Half the PEs do all the work: about twice the ideal.
        assert!(
            none.steps as f64 > 1.8 * s.t_opt(),
            "{none:?} {}",
            s.t_opt()
        );
        for b in [Balancer::Sid, Balancer::Roc] {
            let r = run(&s, Topology::FullyConnected, Start::Unstable, b);
            let np = roc::np(none.steps as f64, r.steps as f64, s.t_opt());
            assert!(np > 0.5, "{b:?}: NP {np}");
            assert!(r.moved > 0);
        }
    }

    #[test]
    fn a_source_table_lists_the_loaded_pes_most_loaded_first_never_oneself() {
        assert_eq!(source_table(&[5.0, 9.0, 1.0, 4.0], 4.0, 0), [1, 3]);
        assert_eq!(source_table(&[5.0, 9.0, 1.0, 4.0], 4.0, 1), [0, 3]);
        assert!(source_table(&[1.0, 2.0], 4.0, 0).is_empty());
    }
}
