//! Time sharing through the embedded scheduler (`mig`, `mtat`,
//! `mtat+repack`).
//!
//! The same `Scheduler` that runs in migd places every job; a virtual clock
//! advances between events. A job's run time in the trace is its work on
//! dedicated speed-1 processors; in the map it runs in `w` of the round's
//! `τ` slots with `n_r` VPs on a processor of capacity `a_r`, so it
//! progresses at `(w / τ) / max_r(n_r / a_r)` (the MTAT model), or not at
//! all while some VP waits for a processor.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::swf::Job;
use super::{last_submit, Outcome, Sample};
use crate::sched::{Action, Event, Placement, SchedConfig, Scheduler};

/// What a gang replay produced.
pub struct GangRun {
    /// Per job.
    pub outcomes: Vec<Outcome>,
    /// Migrations in all.
    pub migrations: u64,
    /// Time-weighted mean and maximum slots per round.
    pub slots: (f64, usize),
    /// Utilisation and slots after every event.
    pub timeline: Vec<Sample>,
}

/// Replay `jobs` on processors of the given capacities, with at most
/// `max_slots` slots per round (jobs beyond wait).
pub fn run(
    jobs: &[Job],
    capacities: &[f64],
    placement: Placement,
    max_slots: usize,
    cond: &super::Conditions,
    done_count: &AtomicUsize,
) -> GangRun {
    let mut g = Gang::new(jobs, capacities, placement, max_slots, cond);
    g.replay(done_count, |_| {});
    GangRun {
        outcomes: g.out.into_iter().flatten().collect(),
        migrations: g.sched.migrations(),
        slots: g.slots.summary(),
        timeline: g.timeline,
    }
}

/// The state of a replay through the embedded scheduler.
struct Gang<'a> {
    jobs: &'a [Job],
    capacities: &'a [f64],
    cond: &'a super::Conditions,
    sched: Scheduler,
    /// Processors per architecture.
    pools: Vec<usize>,
    /// Work left per job, and the rate of each job in the scheduler.
    remaining: Vec<f64>,
    rate: BTreeMap<usize, f64>,
    total_capacity: f64,
    timeline: Vec<Sample>,
    out: Vec<Option<Outcome>>,
    moved: Vec<u32>,
    started: Vec<Option<f64>>,
    /// The next job to arrive.
    next: usize,
    now: f64,
    /// Slots per round over the replay.
    slots: super::SlotTime,
    /// Processors their owners have taken back.
    away: usize,
}

impl<'a> Gang<'a> {
    fn new(
        jobs: &'a [Job],
        capacities: &'a [f64],
        placement: Placement,
        max_slots: usize,
        cond: &'a super::Conditions,
    ) -> Gang<'a> {
        let mut sched = Scheduler::new(SchedConfig {
            max_slots,
            ..placement.config()
        });
        for (i, &c) in capacities.iter().enumerate() {
            let id = format!("p{i}");
            let _ = sched.on_event(Event::NewProcessor {
                id: id.clone(),
                host: id,
                arch: cond.arch_name(cond.arch_of(i)).into(),
                capacity: c,
                memory_mb: cond.node_memory_mb,
            });
        }
        Gang {
            jobs,
            capacities,
            cond,
            sched,
            pools: (0..cond.arch_names.len().max(1) as u32)
                .map(|a| cond.pool_size(capacities.len(), a))
                .collect(),
            remaining: jobs.iter().map(|j| j.run).collect(),
            rate: BTreeMap::new(),
            total_capacity: capacities.iter().sum::<f64>().max(f64::MIN_POSITIVE),
            timeline: Vec::new(),
            out: vec![None; jobs.len()],
            moved: vec![0; jobs.len()],
            started: vec![None; jobs.len()],
            next: 0,
            now: jobs.first().map_or(0.0, |j| j.submit),
            slots: super::SlotTime::default(),
            away: 0,
        }
    }

    /// The whole replay: completions, owners and arrivals in time order,
    /// the scheduler told of each; `after` sees the state after every
    /// step.
    fn replay(&mut self, done_count: &AtomicUsize, mut after: impl FnMut(&Self)) {
        let mut owners =
            self.cond
                .owners
                .changes(self.capacities.len(), self.now, last_submit(self.jobs));
        loop {
            // The next completion at current rates, the next arrival, and (while
            // jobs are left) the next owner change.
            let finish = self
                .rate
                .iter()
                .filter(|(_, &r)| r > 0.0)
                .map(|(&i, &r)| (self.now + self.remaining[i] / r, i))
                .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            // Owner changes matter while jobs are left, and when nothing else
            // will happen, only while some processor is away (its return may
            // let a waiting job run; with all present nothing more can).
            let pending = !self.rate.is_empty() || self.next < self.jobs.len();
            let stuck = finish.is_none() && self.next >= self.jobs.len() && self.away == 0;
            let Some(t) = super::step_to(
                finish.map(|f| f.0),
                self.jobs.get(self.next).map(|j| j.submit),
                owners.peek().filter(|_| pending && !stuck),
            ) else {
                break;
            };
            self.advance(t);
            // Completions first (all jobs whose work is done by now), then
            // owners, then arrivals.
            self.complete(done_count);
            while owners.peek().is_some_and(|o| o <= self.now) {
                let Some(c) = owners.next() else { break };
                self.owner_change(c.processor, c.leaves);
            }
            self.arrivals();
            self.update_rates();
            after(self);
        }
    }

    /// Tell the scheduler `e`; a moved VP stalls its gang for the move's
    /// cost: the job loses what it would have done in that time at its
    /// rate so far.
    fn event(&mut self, e: Event) {
        let Ok(actions) = self.sched.on_event_at(self.now, e) else {
            return;
        };
        for a in actions {
            if let Action::Migrate { job, .. } = a {
                if let Ok(i) = job.parse::<usize>() {
                    self.moved[i] += 1;
                    self.remaining[i] += self.cond.move_cost(&self.jobs[i])
                        * self.rate.get(&i).copied().unwrap_or(0.0);
                }
            }
        }
    }

    /// The clock moves to `t`: every job did its rate's worth of work.
    fn advance(&mut self, t: f64) {
        let dt = (t - self.now).max(0.0);
        for (&i, &r) in &self.rate {
            self.remaining[i] -= r * dt;
        }
        let slots = self.sched.map().columns().len();
        self.slots.passed(slots, dt, !self.rate.is_empty());
        self.now = t;
    }

    /// Jobs whose work is done by now end (`JobExit`).
    fn complete(&mut self, done_count: &AtomicUsize) {
        let now = self.now;
        let done: Vec<usize> = self
            .rate
            .iter()
            .filter(|(&i, &r)| {
                r > 0.0
                    && super::finished(
                        self.remaining[i],
                        self.jobs[i].run,
                        now,
                        self.remaining[i] / r,
                    )
            })
            .map(|(&i, _)| i)
            .collect();
        for i in done {
            self.rate.remove(&i);
            done_count.fetch_add(1, Ordering::Relaxed);
            self.event(Event::JobExit { job: i.to_string() });
            let j = &self.jobs[i];
            self.out[i] = Some(Outcome {
                id: j.id.clone(),
                submit: j.submit,
                start: self.started[i].unwrap_or(j.submit),
                end: now,
                procs: j.procs,
                migrations: self.moved[i],
            });
        }
    }

    /// A processor taken back leaves the pool, one left joins it.
    fn owner_change(&mut self, processor: usize, leaves: bool) {
        if leaves {
            self.away += 1;
        } else {
            self.away = self.away.saturating_sub(1);
        }
        let id = format!("p{processor}");
        let e = if leaves {
            Event::ProcessorExit { id }
        } else {
            Event::NewProcessor {
                id: id.clone(),
                host: id,
                arch: self.cond.arch_name(self.cond.arch_of(processor)).into(),
                capacity: self.capacities[processor],
                memory_mb: self.cond.node_memory_mb,
            }
        };
        self.event(e);
    }

    /// Jobs submitted by now are submitted to the scheduler. Doubling up is
    /// allowed, but not without bound: a job of more VPs than the scheduler
    /// takes, or than its pool's nodes' memory holds, is left out like a
    /// too-wide job, and so is one whose architecture the machine has none
    /// of.
    fn arrivals(&mut self) {
        while self
            .jobs
            .get(self.next)
            .is_some_and(|j| j.submit <= self.now)
        {
            let (i, j) = (self.next, &self.jobs[self.next]);
            // (With memory a limit, as many VPs as the pool's nodes hold.)
            let pool = self.pools[(j.arch as usize).min(self.pools.len() - 1)];
            let need = self.cond.need_mb(j);
            let holds = match (need, self.cond.node_memory_mb) {
                (Some(n), Some(node)) if n > 0 => (node / n).saturating_mul(pool as u64),
                _ => u64::MAX,
            };
            if j.procs > 0
                && u64::from(j.procs) <= crate::sched::event::MAX_VPS
                && pool > 0
                && u64::from(j.procs) <= holds
            {
                let e = Event::Submit {
                    job: i.to_string(),
                    vps: BTreeMap::from([(self.cond.arch_name(j.arch).to_string(), j.procs)]),
                    memory_mb: need,
                    only: None,
                    estimate: Some(j.estimate),
                };
                self.event(e);
                self.rate.insert(i, 0.0);
            }
            self.next += 1;
        }
    }

    /// Every job's rate from the map as it is now, and a sample of the
    /// machine.
    fn update_rates(&mut self) {
        let slots = self.sched.map().columns().len();
        let tau = slots.max(1) as f64;
        let efficiency = self.cond.sharing_efficiency(slots);
        self.slots.seen(slots);
        let mut work_rate = 0.0;
        for (id, width, t_job, waiting) in self.sched.job_shares() {
            if let Ok(i) = id.parse::<usize>() {
                let r = if waiting || t_job <= 0.0 {
                    0.0
                } else {
                    (width as f64 / tau) / t_job * efficiency
                };
                if r > 0.0 && self.started[i].is_none() {
                    self.started[i] = Some(self.now);
                }
                self.rate.insert(i, r);
                work_rate += r * f64::from(self.jobs[i].procs);
            }
        }
        self.timeline.push(Sample {
            t: self.now,
            utilization: work_rate / self.total_capacity,
            slots,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(jobs: &[Job], caps: &[f64], repack: bool, max_slots: usize) -> GangRun {
        super::run(
            jobs,
            caps,
            if repack {
                Placement::MtatRepack
            } else {
                Placement::Mtat
            },
            max_slots,
            &crate::sim::Conditions::default(),
            &AtomicUsize::new(0),
        )
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        /// EASY's promise, over time: with estimates no shorter than the
        /// run times and nothing that costs, the oldest waiting job starts
        /// no later than the earliest start it was promised while it
        /// waited, however many younger jobs backfilled meanwhile.
        #[test]
        fn a_waiting_job_starts_by_its_promise(seed in proptest::prelude::any::<u64>(), slots in 1usize..4) {
            let mut rng = crate::sim::rng::SplitMix::new(seed);
            let mut t = 0.0;
            let jobs: Vec<Job> = (0..40)
                .map(|i| {
                    t += (rng.unit() * 20.0).floor();
                    let run = 1.0 + (rng.unit() * 200.0).floor();
                    let procs = 1 + (rng.unit() * 8.0) as u32;
                    let mut j = Job::new(&i.to_string(), t, run, procs);
                    if rng.unit() < 0.5 {
                        j.estimate = (run * (1.0 + 3.0 * rng.unit())).ceil();
                    }
                    j
                })
                .collect();
            let caps = [1.0, 1.0, 2.0, 1.0, 1.0, 2.0, 1.0, 1.0];
            let cond = crate::sim::Conditions::default();
            let mut g = Gang::new(&jobs, &caps, Placement::Mig, slots, &cond);
            let mut promised: BTreeMap<String, f64> = BTreeMap::new();
            g.replay(&AtomicUsize::new(0), |g| {
                if let Some((job, _, at)) = g.sched.reservation() {
                    let p = promised.entry(job.to_string()).or_insert(at);
                    *p = p.min(at);
                }
            });
            proptest::prop_assert!(g.out.iter().all(Option::is_some), "every job ran");
            for (id, at) in promised {
                let i: usize = id.parse().unwrap();
                let start = g.started[i].unwrap();
                proptest::prop_assert!(start <= at + 1e-6 * at.max(1.0),
                    "job {} started at {} though promised {}", id, start, at);
            }
        }
    }

    #[test]
    fn a_processor_taken_back_mid_run_slows_the_job_and_its_return_restores_it() {
        // 2 processors, a 2-VP job of 100 s from 0. p1's owner is back from
        // 10 to 60: its VP doubles up on p0 (half speed), then moves back.
        // Work: 10 s at full speed, 50 s at half (25), then 65 left: ends at
        // 125. Each move stalls the job 1 s: 1 s of work at full speed at
        // t = 10, 0.5 at half speed at t = 60: 126.5.
        let owners = crate::sim::owners::Model::availability(
            "10 1 leave
60 1 return
",
            2,
        )
        .unwrap();
        for (cost, end) in [(0.0, 125.0), (1.0, 126.5)] {
            let cond = crate::sim::Conditions {
                owners: owners.clone(),
                migration_cost: cost,
                ..crate::sim::Conditions::default()
            };
            let r = super::run(
                &[Job::new("a", 0.0, 100.0, 2)],
                &[1.0; 2],
                Placement::MtatRepack,
                4,
                &cond,
                &AtomicUsize::new(0),
            );
            let o = &r.outcomes[0];
            assert!((o.end - end).abs() < 1e-6, "cost {cost}: {o:?}");
            assert_eq!(o.migrations, 2, "{o:?}");
        }
    }

    #[test]
    fn synthetic_owners_never_lose_a_job() {
        let jobs: Vec<Job> = (0..40)
            .map(|i| {
                Job::new(
                    &i.to_string(),
                    f64::from(i) * 7.0,
                    50.0 + f64::from(i % 5) * 30.0,
                    1 + i % 4,
                )
            })
            .collect();
        let cond = crate::sim::Conditions {
            owners: crate::sim::owners::Model::parse("synthetic:100/300").unwrap(),
            migration_cost: 2.0,
            ..crate::sim::Conditions::default()
        };
        let r = super::run(
            &jobs,
            &[1.0; 8],
            Placement::MtatRepack,
            4,
            &cond,
            &AtomicUsize::new(0),
        );
        assert_eq!(r.outcomes.len(), jobs.len());
        for (o, j) in r.outcomes.iter().zip(&jobs) {
            assert!(
                o.end >= o.submit + j.run - 1e-6,
                "{o:?} finished before its work allows"
            );
        }
        assert!(r.outcomes.iter().map(|o| o.migrations).sum::<u32>() > 0);
    }

    #[test]
    fn two_full_width_jobs_share_the_machine_in_two_slots() {
        // 4 processors; a and b each need all 4 for 100 s. Time sharing in two
        // slots: both progress at half speed, both end at 200.
        let r = run(
            &[Job::new("a", 0.0, 100.0, 4), Job::new("b", 0.0, 100.0, 4)],
            &[1.0; 4],
            true,
            4,
        );
        for o in &r.outcomes {
            assert!((o.end - 200.0).abs() < 1e-6, "{o:?}");
        }
        assert_eq!(r.slots.1, 2);
        // With one slot per round, b waits for a: a ends at 100, b at 200.
        let r = run(
            &[Job::new("a", 0.0, 100.0, 4), Job::new("b", 0.0, 100.0, 4)],
            &[1.0; 4],
            true,
            1,
        );
        let b = r.outcomes.iter().find(|o| o.id == "b").unwrap();
        assert!(
            (b.start - 100.0).abs() < 1e-6 && (b.end - 200.0).abs() < 1e-6,
            "{b:?}"
        );
        assert_eq!(r.slots.1, 1);
    }

    #[test]
    fn a_job_alone_runs_at_full_speed_and_doubling_up_halves_it() {
        let r = run(&[Job::new("a", 5.0, 100.0, 2)], &[1.0; 2], true, 4);
        assert!((r.outcomes[0].end - 105.0).abs() < 1e-6);
        // 4 VPs on 2 processors: two per processor, T = 2, so 200 s.
        let r = run(&[Job::new("a", 0.0, 100.0, 4)], &[1.0; 2], true, 4);
        assert!((r.outcomes[0].end - 200.0).abs() < 1e-6);
        // A faster processor: capacity 2 takes both VPs at T = 1.
        let r = run(&[Job::new("a", 0.0, 100.0, 2)], &[2.0], true, 4);
        assert!((r.outcomes[0].end - 100.0).abs() < 1e-6);
    }

    #[test]
    fn late_in_a_long_trace_the_clock_still_advances() {
        // At t = 1e16 one second is below the clock's resolution: the job
        // must still complete rather than stall the replay.
        let r = run(&[Job::new("a", 1e16, 1.0, 1)], &[1.0], true, 4);
        assert_eq!(r.outcomes.len(), 1);
        assert!(r.outcomes[0].end >= 1e16);
    }

    #[test]
    fn a_small_job_shares_the_slot_of_a_running_one() {
        // 4 processors: a uses 2 for 100 s; b (2 VPs, 50 s) fits beside it in
        // the same slot: both at full speed.
        let r = run(
            &[Job::new("a", 0.0, 100.0, 2), Job::new("b", 10.0, 50.0, 2)],
            &[1.0; 4],
            true,
            4,
        );
        let b = r.outcomes.iter().find(|o| o.id == "b").unwrap();
        assert!((b.end - 60.0).abs() < 1e-6);
        assert_eq!(r.slots.1, 1);
    }
}
