//! The balancing papers on a trace, where they put it: a job is a bag of
//! independent tasks. `roc`: seed 003's Rate-of-Change load balancing.
//! Each of a job's k tasks (its run time of work on a processor of
//! capacity 1) goes, when
//! the job arrives, to the processor with the fewest tasks queued
//! (IPG-SaLaD's static allocator; it does not know how long tasks run); a processor runs its queue first come first served;
//! every `INTERVAL` seconds each processor samples its load (tasks
//! queued, the running one included) and asks for work by
//! `balance::roc`; a source answers with its tasks above its high
//! threshold, those that have run longest first (a running task moved
//! stalls for the migration cost). A task in transit takes `TRANSFER`
//! seconds. A job ends with its last task: its tasks never wait for each
//! other, so this is what these policies do for bags of tasks, not for
//! parallel programs that synchronise (the gang policies' case).
//!
//! `nres` on a trace: seed 004's N-resource mapping in the same world.
//! Each processor offers CPU (its capacity over the fastest's), memory and
//! I/O (drawn, fixed seed, a quarter to all of the largest); each task
//! needs CPU and I/O (drawn per job: I/O light, medium or heavy) and its
//! job's memory per processor from the trace (over the largest in it;
//! drawn when the trace has none). A job's tasks arrive as a burst at one
//! processor (job number modulo the pool); past the trigger line (`Max`
//! 15) they are mapped fewest-choices-first onto processors whose free
//! capacity (less what their running task uses) meets every need, one a
//! processor, the rest queued where they arrived. A task runs twice as long
//! where its memory or I/O need is not met. No later balancing.
//!
//! `bidding` on a trace: seed 002's arrival rules in the same world. A
//! one-task job is a simple program; a wider one a cluster or a
//! distributed group, half each (`class_of`). A task's estimate at a
//! processor is when its queue drains plus its own run (a group's tasks,
//! arriving together, as sharing it: each when all would end); a simple
//! program stays where it arrives under slowdown `TASK_THRESHOLD`, else
//! goes to the lowest bid (estimate plus transfer); a group's tasks over
//! the threshold spread one a processor by ascending bid; a cluster goes
//! whole to the processor with the lowest bid for all its tasks. No
//! periodic or idle-site moves.
//!
//! A task runs only on processors of its job's architecture (and moves
//! only between them); a job whose architecture has none is left out.
//! Left out: owners. Pure: no clock, no I/O.

use std::cmp::Ordering as CmpOrdering;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::rng::SplitMix;
use super::swf::Job;
use super::{Conditions, Outcome, Sample};
use crate::balance::roc::{self, Answer, LoadRequest, Roc, Thresholds};
use crate::balance::{bidding, nres};

/// How tasks are placed and moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Where the fewest tasks are queued, never moved.
    Queue,
    /// Where the fewest are, then moved by Rate-of-Change.
    Roc,
    /// Fewest-choices-first onto processors that meet every need.
    Nres,
    /// Seed 002's estimates and bids, by the job's class.
    Bidding,
}

/// Resources per processor and task: CPU, memory, I/O.
const RESOURCES: usize = 3;

/// `bidding`'s task threshold: a slowdown (estimate over own run time).
pub const TASK_THRESHOLD: f64 = 3.0;

/// A job's class for `bidding`, which a trace does not give: one task is a
/// simple program; wider ones are clusters or distributed groups, half
/// each, by a fixed hash of the job's position.
fn class_of(i: usize, k: usize) -> bidding::Class {
    if k <= 1 {
        bidding::Class::Simple
    } else if SplitMix::new(0x636c_7573 ^ i as u64)
        .next_u64()
        .is_multiple_of(2)
    {
        bidding::Class::Cluster
    } else {
        bidding::Class::Group
    }
}

/// Seconds between two samples of a processor's load.
pub const INTERVAL: f64 = 60.0;
/// Seconds a task (or a request) takes from one processor to another.
pub const TRANSFER: f64 = 1.0;
/// The trigger line's height for `nres` (the paper's best, the gentlest
/// slope).
pub const NRES_MAX: f64 = 15.0;

/// Rate-of-Change's thresholds, in tasks.
pub const THRESHOLDS: Thresholds = Thresholds {
    critical: 1.0,
    low: 2.0,
    high: 3.0,
};

#[derive(Debug, Clone)]
struct Task {
    job: usize,
    /// Its job's architecture.
    arch: u32,
    /// Work left, seconds at capacity 1.
    left: f64,
    /// Seconds it has run.
    ran: f64,
    /// What it needs of each resource (0..=1).
    need: [f64; RESOURCES],
}

struct Proc {
    cap: f64,
    arch: u32,
    /// What it offers of each resource (0..=1).
    has: [f64; RESOURCES],
    /// Resources count (`nres`): a task lacking one runs at half speed.
    resources: bool,
    queue: VecDeque<Task>,
    /// When the front task's current stretch began, if it runs.
    since: Option<f64>,
    /// Bumped whenever the front task changes (stale completions skipped).
    epoch: u64,
    roc: Roc,
    asked_at: f64,
}

impl Proc {
    /// Seconds until its queue drains, first come first served.
    fn drain(&self, now: f64) -> f64 {
        let mut w: f64 = self.queue.iter().map(|t| t.left / self.speed(t)).sum();
        if let Some(s) = self.since {
            w -= (now - s).max(0.0);
        }
        w.max(0.0)
    }

    /// How fast a task runs here: its capacity, halved where the task's
    /// memory or I/O need is not met.
    fn speed(&self, t: &Task) -> f64 {
        let lacks = self.resources && (1..RESOURCES).any(|r| t.need[r] > self.has[r]);
        if lacks {
            self.cap / 2.0
        } else {
            self.cap
        }
    }

    /// Account the running task's progress up to `now`.
    fn settle(&mut self, now: f64) {
        let speed = self.queue.front().map_or(self.cap, |t| self.speed(t));
        if let (Some(s), Some(t)) = (self.since, self.queue.front_mut()) {
            let dt = (now - s).max(0.0);
            t.left = (t.left - dt * speed).max(0.0);
            t.ran += dt;
            self.since = Some(now);
        }
    }
}

#[derive(Debug, PartialEq)]
struct Done {
    at: f64,
    proc: usize,
    epoch: u64,
}

impl Eq for Done {}

impl Ord for Done {
    fn cmp(&self, o: &Self) -> CmpOrdering {
        o.at.total_cmp(&self.at).then(o.proc.cmp(&self.proc))
    }
}

impl PartialOrd for Done {
    fn partial_cmp(&self, o: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(o))
    }
}

enum Msg {
    Tasks {
        to: usize,
        tasks: Vec<Task>,
        asked: Option<f64>,
    },
    Request {
        to: usize,
        req: LoadRequest,
    },
    Unfulfilled {
        to: usize,
    },
}

struct World<'a> {
    jobs: &'a [Job],
    /// Each job's tasks' needs.
    needs: Vec<[f64; RESOURCES]>,
    procs: Vec<Proc>,
    done_at: BinaryHeap<Done>,
    transit: Vec<(f64, Msg)>,
    left: Vec<u32>,
    started: Vec<Option<f64>>,
    moved: Vec<u32>,
    out: Vec<Option<Outcome>>,
    move_cost: f64,
}

impl World<'_> {
    /// Start the front task of `p` if it is idle.
    fn kick(&mut self, p: usize, now: f64) {
        let pr = &mut self.procs[p];
        if pr.since.is_some() {
            return;
        }
        if let Some(t) = pr.queue.front() {
            pr.since = Some(now);
            pr.epoch += 1;
            let at = now + t.left / pr.speed(t);
            let job = t.job;
            self.done_at.push(Done {
                at,
                proc: p,
                epoch: pr.epoch,
            });
            self.started[job].get_or_insert(now);
        }
    }

    fn arrive(&mut self, i: usize, now: f64, rule: Rule) {
        let j = &self.jobs[i];
        let k = j.procs.max(1) as usize;
        let pool: Vec<usize> = (0..self.procs.len())
            .filter(|&p| self.procs[p].arch == j.arch)
            .collect();
        if pool.is_empty() {
            return;
        }
        self.left[i] = k as u32;
        let task = Task {
            job: i,
            arch: j.arch,
            left: j.run.max(0.0),
            ran: 0.0,
            need: self.needs[i],
        };
        let places: Vec<usize> = match rule {
            Rule::Queue | Rule::Roc => {
                // The k processors of its pool with the fewest tasks queued.
                let mut order: Vec<(usize, usize)> = pool
                    .iter()
                    .map(|&p| (self.procs[p].queue.len(), p))
                    .collect();
                order.sort_unstable();
                (0..k).map(|n| order[n % order.len()].1).collect()
            }
            Rule::Bidding => {
                let at = pool[i % pool.len()];
                // A task's estimate at a processor: when its queue drains
                // (first come first served) plus its own run; a bid adds
                // the transfer.
                let work = j.run.max(0.0);
                let drain: Vec<f64> = pool.iter().map(|&p| self.procs[p].drain(now)).collect();
                let etc = |x: usize, n: usize| drain[x] + n as f64 * work / self.procs[pool[x]].cap;
                let here = pool.iter().position(|&p| p == at).unwrap_or(0);
                let slowdown = |e: f64| e / work.max(1e-9);
                match class_of(i, k) {
                    bidding::Class::Simple => {
                        let bids: Vec<(usize, f64)> =
                            (0..pool.len()).map(|x| (x, etc(x, 1) + TRANSFER)).collect();
                        let x = if slowdown(etc(here, 1)) <= TASK_THRESHOLD {
                            here
                        } else {
                            bidding::place_simple(here, etc(here, 1), 0.0, &bids)
                        };
                        vec![pool[x]]
                    }
                    bidding::Class::Group => {
                        let bids: Vec<(usize, f64)> =
                            (0..pool.len()).map(|x| (x, etc(x, 1))).collect();
                        // Arriving together they share the processor (the
                        // paper's estimate under processor sharing): each
                        // finishes when all k would.
                        let etcs = vec![etc(here, k); k];
                        bidding::place_group(here, &etcs, TASK_THRESHOLD * work, &bids)
                            .into_iter()
                            .map(|x| pool[x])
                            .collect()
                    }
                    bidding::Class::Cluster => {
                        // Whole, to the lowest bid for all its tasks.
                        let x = (0..pool.len())
                            .map(|x| (etc(x, k) + if x == here { 0.0 } else { TRANSFER }, x))
                            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))
                            .map_or(here, |(_, x)| x);
                        vec![pool[x]; k]
                    }
                }
            }
            Rule::Nres => {
                let at = pool[i % pool.len()];
                let busy = !self.procs[at].queue.is_empty();
                let u = if busy { 100.0 } else { 0.0 };
                if !nres::needs_triggering(k as u32, u, NRES_MAX) {
                    vec![at; k]
                } else {
                    let free: Vec<Vec<f64>> = pool
                        .iter()
                        .map(|&p| {
                            let pr = &self.procs[p];
                            let used = pr.queue.front().map(|t| t.need);
                            (0..RESOURCES)
                                .map(|r| (pr.has[r] - used.map_or(0.0, |n| n[r])).max(0.0))
                                .collect()
                        })
                        .collect();
                    // A job's tasks need the same: Balance then gives task
                    // n the n-th processor meeting every need (every job
                    // has as many choices, every processor as many takers;
                    // ties go to the lower index), without its k x k x n.
                    let fits: Vec<usize> = (0..pool.len())
                        .filter(|&x| nres::matches(&task.need, &free[x]) == RESOURCES)
                        .collect();
                    (0..k)
                        .map(|n| fits.get(n).map_or(at, |&x| pool[x]))
                        .collect()
                }
            }
        };
        for p in places {
            self.procs[p].queue.push_back(task.clone());
            self.kick(p, now);
        }
    }

    fn complete(&mut self, d: Done, done: &AtomicUsize) {
        let p = d.proc;
        if self.procs[p].epoch != d.epoch || self.procs[p].since.is_none() {
            return;
        }
        self.procs[p].since = None;
        let Some(t) = self.procs[p].queue.pop_front() else {
            return;
        };
        self.left[t.job] = self.left[t.job].saturating_sub(1);
        if self.left[t.job] == 0 {
            let j = &self.jobs[t.job];
            done.fetch_add(1, Ordering::Relaxed);
            self.out[t.job] = Some(Outcome {
                id: j.id.clone(),
                submit: j.submit,
                start: self.started[t.job].unwrap_or(j.submit),
                end: d.at,
                procs: j.procs,
                migrations: self.moved[t.job],
            });
        }
        self.kick(p, d.at);
    }

    fn sources(&self, me: usize) -> Vec<usize> {
        let arch = self.procs[me].arch;
        let mut v: Vec<usize> = (0..self.procs.len())
            .filter(|&q| {
                q != me
                    && self.procs[q].arch == arch
                    && self.procs[q].queue.len() as f64 >= THRESHOLDS.high
            })
            .collect();
        v.sort_by_key(|&q| (std::cmp::Reverse(self.procs[q].queue.len()), q));
        v.truncate(4);
        v
    }

    fn sample(&mut self, now: f64) {
        // The sources, most loaded first: one list for this round.
        let mut loaded: Vec<usize> = (0..self.procs.len())
            .filter(|&q| self.procs[q].queue.len() as f64 >= THRESHOLDS.high)
            .collect();
        loaded.sort_by_key(|&q| (std::cmp::Reverse(self.procs[q].queue.len()), q));
        for p in 0..self.procs.len() {
            let load = self.procs[p].queue.len() as f64;
            if let Some(amount) = self.procs[p].roc.sample(load, INTERVAL) {
                self.procs[p].asked_at = now;
                let arch = self.procs[p].arch;
                let first = loaded
                    .iter()
                    .copied()
                    .find(|&q| q != p && self.procs[q].arch == arch);
                match first {
                    Some(x) => self.transit.push((
                        now + TRANSFER,
                        Msg::Request {
                            to: x,
                            req: LoadRequest {
                                from: p,
                                amount,
                                ttl: 2,
                            },
                        },
                    )),
                    None => self.procs[p].roc.unfulfilled(),
                }
            }
        }
    }

    /// The messages in transit due by `now` land at their processors.
    fn land(&mut self, now: f64) {
        let (here, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.transit)
            .into_iter()
            .partition(|(t, _)| *t <= now);
        self.transit = later;
        for (_, m) in here {
            match m {
                Msg::Tasks { to, tasks, asked } => {
                    self.procs[to].queue.extend(tasks);
                    if let Some(at) = asked {
                        self.procs[to].roc.received(now - at);
                    }
                    self.kick(to, now);
                }
                Msg::Unfulfilled { to } => self.procs[to].roc.unfulfilled(),
                Msg::Request { to, req } => {
                    self.procs[to].settle(now);
                    // Only tasks the asker's architecture can run.
                    let arch = self.procs[req.from].arch;
                    let ran: Vec<f64> = self.procs[to]
                        .queue
                        .iter()
                        .map(|t| if t.arch == arch { t.ran } else { -1.0 })
                        .collect();
                    let sources = self.sources(to);
                    match roc::answer(&ran, THRESHOLDS.high, &sources, req) {
                        Answer::Send(which) => {
                            let mut which: Vec<usize> =
                                which.into_iter().filter(|&i| ran[i] >= 0.0).collect();
                            which.sort_unstable_by(|a, b| b.cmp(a));
                            let mut tasks = Vec::new();
                            for i in which {
                                if i == 0 && self.procs[to].since.is_some() {
                                    // The running one: it stops here.
                                    self.procs[to].since = None;
                                    self.procs[to].epoch += 1;
                                }
                                if let Some(mut t) = self.procs[to].queue.remove(i) {
                                    if t.ran > 0.0 {
                                        self.moved[t.job] += 1;
                                        t.left += self.move_cost;
                                    }
                                    tasks.push(t);
                                }
                            }
                            self.kick(to, now);
                            let asked = Some(self.procs[req.from].asked_at);
                            self.transit.push((
                                now + TRANSFER,
                                Msg::Tasks {
                                    to: req.from,
                                    tasks,
                                    asked,
                                },
                            ));
                        }
                        Answer::Forward(next, req) => self
                            .transit
                            .push((now + TRANSFER, Msg::Request { to: next, req })),
                        Answer::Unfulfilled => self
                            .transit
                            .push((now + TRANSFER, Msg::Unfulfilled { to: req.from })),
                    }
                }
            }
        }
    }
}

/// Replay `jobs` on processors of `capacities` with Rate-of-Change: each
/// job's outcome (jobs with no run time or no processors are left out),
/// the moves of running tasks, and utilisation over time.
pub fn run(
    jobs: &[Job],
    capacities: &[f64],
    cond: &Conditions,
    done: &AtomicUsize,
) -> (Vec<Outcome>, u64, Vec<Sample>) {
    run_with(jobs, capacities, cond, done, Rule::Roc)
}

/// Replay `jobs` under `rule`.
pub fn run_with(
    jobs: &[Job],
    capacities: &[f64],
    cond: &Conditions,
    done: &AtomicUsize,
    rule: Rule,
) -> (Vec<Outcome>, u64, Vec<Sample>) {
    let total: f64 = capacities.iter().sum::<f64>().max(f64::MIN_POSITIVE);
    let fastest = capacities.iter().copied().fold(f64::MIN_POSITIVE, f64::max);
    let most_memory = jobs.iter().map(|j| j.memory_kb).fold(0.0, f64::max);
    let needs: Vec<[f64; RESOURCES]> = jobs
        .iter()
        .enumerate()
        .map(|(i, j)| {
            let mut r = SplitMix::new(0x6e72_6573 ^ i as u64);
            let cpu = 0.1 + 0.5 * r.unit();
            let memory = if most_memory > 0.0 && j.memory_kb > 0.0 {
                (j.memory_kb / most_memory).min(1.0)
            } else {
                0.1 + 0.5 * r.unit()
            };
            let io = [0.1, 0.3, 0.6][(r.next_u64() % 3) as usize];
            [cpu, memory, io]
        })
        .collect();
    let mut w = World {
        jobs,
        needs,
        procs: capacities
            .iter()
            .enumerate()
            .map(|(p, &c)| Proc {
                cap: c.max(1e-9),
                arch: cond.arch_of(p),
                has: {
                    let mut r = SplitMix::new(0x6e6f_6465 ^ p as u64);
                    [c / fastest, 0.25 + 0.75 * r.unit(), 0.25 + 0.75 * r.unit()]
                },
                resources: rule == Rule::Nres,
                queue: VecDeque::new(),
                since: None,
                epoch: 0,
                roc: Roc::new(THRESHOLDS, 2.0 * TRANSFER),
                asked_at: 0.0,
            })
            .collect(),
        done_at: BinaryHeap::new(),
        transit: Vec::new(),
        left: vec![0; jobs.len()],
        started: vec![None; jobs.len()],
        moved: vec![0; jobs.len()],
        out: vec![None; jobs.len()],
        move_cost: cond.migration_cost,
    };
    if w.procs.is_empty() {
        return (Vec::new(), 0, Vec::new());
    }
    let mut timeline = Vec::new();
    let mut next = 0;
    let mut tick = jobs.first().map_or(0.0, |j| j.submit);
    loop {
        while w
            .done_at
            .peek()
            .is_some_and(|d| w.procs[d.proc].epoch != d.epoch)
        {
            w.done_at.pop();
        }
        let busy = w.procs.iter().any(|p| !p.queue.is_empty()) || !w.transit.is_empty();
        let candidates = [
            w.done_at.peek().map(|d| d.at),
            jobs.get(next).map(|j| j.submit),
            w.transit.iter().map(|(t, _)| *t).min_by(f64::total_cmp),
            busy.then_some(tick),
        ];
        let Some(now) = candidates.into_iter().flatten().min_by(f64::total_cmp) else {
            break;
        };
        while let Some(d) = w.done_at.peek() {
            if d.at > now {
                break;
            }
            let Some(d) = w.done_at.pop() else { break };
            w.complete(d, done);
        }
        while jobs.get(next).is_some_and(|j| j.submit <= now) {
            // A job wider than the scheduler takes is left out, as the gang
            // policies leave it (a trace line may claim any width).
            let procs = u64::from(jobs[next].procs);
            if procs > 0 && procs <= crate::sched::event::MAX_VPS && jobs[next].run > 0.0 {
                w.arrive(next, now, rule);
            }
            next += 1;
        }
        w.land(now);
        if busy && now >= tick {
            if rule == Rule::Roc {
                w.sample(now);
            }
            tick = now + INTERVAL;
            let running: f64 = w
                .procs
                .iter()
                .filter(|p| p.since.is_some())
                .map(|p| p.cap)
                .sum();
            timeline.push(Sample {
                t: now,
                utilization: running / total,
                slots: 1,
            });
        } else if !busy {
            tick = tick.max(now);
        }
    }
    let moves = w.moved.iter().map(|&m| u64::from(m)).sum();
    (w.out.into_iter().flatten().collect(), moves, timeline)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: u32, submit: f64, run: f64, procs: u32) -> Job {
        Job::new(&id.to_string(), submit, run, procs)
    }

    #[test]
    fn a_bag_of_tasks_spreads_at_arrival_and_every_job_ends() {
        let jobs = vec![job(1, 0.0, 100.0, 4), job(2, 10.0, 50.0, 2)];
        let (out, _, _) = run(
            &jobs,
            &[1.0; 4],
            &Conditions::default(),
            &AtomicUsize::new(0),
        );
        assert_eq!(out.len(), 2);
        // Four tasks on four idle processors: the job takes its run time.
        assert!((out[0].end - 100.0).abs() < 1e-6, "{out:?}");
        // The second waits for processors: its tasks queue behind the first's.
        assert!((out[1].end - 150.0).abs() < 1e-6, "{out:?}");
    }

    #[test]
    fn an_idle_processor_takes_work_from_a_loaded_one() {
        // Long and short one-task jobs alternate: placed by queue length,
        // the long ones all land on p0 and the short on p1, which drains
        // in 40 s; Rate-of-Change has it take p0's spare work.
        let jobs: Vec<Job> = (0..8)
            .map(|i| job(i, 0.0, if i % 2 == 0 { 1000.0 } else { 10.0 }, 1))
            .collect();
        let done = AtomicUsize::new(0);
        let cond = Conditions::default();
        let (alone, moved0, _) = run_with(&jobs, &[1.0; 2], &cond, &done, Rule::Queue);
        let (balanced, moved, _) = run_with(&jobs, &[1.0; 2], &cond, &done, Rule::Roc);
        let last = |o: &[Outcome]| o.iter().map(|x| x.end).fold(0.0, f64::max);
        assert_eq!(alone.len(), 8);
        assert_eq!(balanced.len(), 8);
        assert_eq!(moved0, 0);
        assert!((last(&alone) - 4000.0).abs() < 1e-6, "{}", last(&alone));
        assert!(
            last(&balanced) < 3500.0,
            "{} ({moved} moves)",
            last(&balanced)
        );
    }

    #[test]
    fn a_burst_past_the_trigger_line_is_mapped_out_and_a_small_one_stays() {
        let done = AtomicUsize::new(0);
        let cond = Conditions::default();
        let last = |o: &[Outcome]| o.iter().map(|x| x.end).fold(0.0, f64::max);
        // 20 tasks on 40 idle processors: past Max = 15, so mapped; each
        // goes to a processor meeting its needs, one a processor (or stays).
        let wide = [job(1, 0.0, 100.0, 20)];
        let (out, _, _) = run_with(&wide, &[1.0; 40], &cond, &done, Rule::Nres);
        assert_eq!(out.len(), 1);
        assert!(last(&out) < 20.0 * 100.0 / 2.0, "{out:?}");
        // 4 tasks at an idle processor: under the line, they stay and run
        // one after another there.
        let small = [job(2, 0.0, 100.0, 4)];
        let (out, _, _) = run_with(&small, &[1.0; 40], &cond, &done, Rule::Nres);
        assert!(last(&out) >= 400.0, "{out:?}");
    }

    #[test]
    fn the_shortcut_for_tasks_that_need_the_same_is_what_balance_gives() {
        let need = vec![0.3, 0.5, 0.2];
        let free = vec![
            vec![0.2, 0.9, 0.9],
            vec![0.5, 0.6, 0.3],
            vec![0.9, 0.4, 0.9],
            vec![0.4, 0.5, 0.2],
            vec![0.9, 0.9, 0.9],
        ];
        let fits: Vec<usize> = (0..free.len())
            .filter(|&x| nres::matches(&need, &free[x]) == RESOURCES)
            .collect();
        for k in 1..=4 {
            let by_balance = nres::balance(&vec![need.clone(); k], &free);
            let by_shortcut: Vec<Option<usize>> = (0..k).map(|n| fits.get(n).copied()).collect();
            assert_eq!(by_balance, by_shortcut, "{k} tasks");
        }
    }

    #[test]
    fn bidding_keeps_a_cluster_whole_and_spreads_a_group() {
        let done = AtomicUsize::new(0);
        let cond = Conditions::default();
        // Job positions 0.. give classes by a fixed hash: find one of each.
        let cluster = (0..64).find(|&i| class_of(i, 4) == bidding::Class::Cluster);
        let group = (0..64).find(|&i| class_of(i, 4) == bidding::Class::Group);
        let (Some(c), Some(g)) = (cluster, group) else {
            panic!("both classes among 64 positions");
        };
        let jobs_at = |pos: usize| -> Vec<Job> {
            (0..=pos)
                .map(|i| job(i as u32, 0.0, if i == pos { 100.0 } else { 0.0 }, 4))
                .collect()
        };
        // Jobs before `pos` have no run time: left out, only `pos` runs.
        let (out, _, _) = run_with(&jobs_at(c), &[1.0; 8], &cond, &done, Rule::Bidding);
        assert_eq!(out.len(), 1);
        assert!(
            (out[0].end - 400.0).abs() < 1e-6,
            "a cluster on one processor: {out:?}"
        );
        let (out, _, _) = run_with(&jobs_at(g), &[1.0; 8], &cond, &done, Rule::Bidding);
        assert!(
            (out[0].end - 100.0).abs() < 1e-6,
            "a group, one task a processor: {out:?}"
        );
    }
}
