//! Space-sharing policies without time slicing: FCFS and EASY backfilling.
//!
//! What lives here: a discrete-event replay where a job holds its processors
//! from start to end. At each instant completions are handled first, then
//! owner changes, then arrivals, then the queue. EASY lets a later job start
//! now if it does not delay the first waiting job's reservation (computed
//! from the running jobs' estimates). These policies cannot move work: when
//! an owner takes back a processor a job holds, the whole job stops (as a
//! suspended job does under HTCondor's default policy or a gang-suspended one
//! under Slurm) until every processor it holds is left again; a processor
//! taken back while free is not given to new jobs. A job runs on processors
//! of its own architecture only (one pool each; the queue is shared). What
//! does not: time sharing (`gang`, `matrix`).

use std::cmp::Ordering;
use std::collections::{BTreeSet, BinaryHeap, VecDeque};

use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};

use super::swf::Job;
use super::{last_submit, Conditions, Outcome, Sample};

/// A running job's projected end; stale once its `epoch` is behind the job's.
#[derive(PartialEq)]
struct Ending {
    end: f64,
    index: usize,
    epoch: u32,
}
impl Eq for Ending {}
impl PartialOrd for Ending {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Ending {
    fn cmp(&self, o: &Self) -> Ordering {
        o.end
            .total_cmp(&self.end)
            .then(o.index.cmp(&self.index))
            .then(o.epoch.cmp(&self.epoch))
    }
}

/// Replay `jobs` on `procs` processors with FCFS, or EASY if `easy`, under
/// `cond` (architectures, owners). Jobs wider than their architecture's
/// pool never start and are left out.
pub fn run(
    jobs: &[Job],
    procs: u32,
    easy: bool,
    cond: &Conditions,
    done: &AtomicUsize,
) -> (Vec<Outcome>, Vec<Sample>) {
    let mut r = Batch::new(jobs, procs, cond);
    let mut owners = cond.owners.changes(
        r.n,
        jobs.first().map_or(0.0, |j| j.submit),
        last_submit(jobs),
    );
    loop {
        while r
            .running
            .peek()
            .is_some_and(|e| e.epoch != r.epoch[e.index])
        {
            r.running.pop();
        }
        let pending = !r.active.is_empty() || !r.queue.is_empty() || r.next < jobs.len();
        let Some(now) = super::step_to(
            r.running.peek().map(|e| e.end),
            jobs.get(r.next).map(|j| j.submit),
            owners.peek().filter(|_| pending),
        ) else {
            break;
        };
        r.complete(now, done);
        // Owners: a held processor stops its job; a free one is withheld.
        while owners.peek().is_some_and(|o| o <= now) {
            let Some(c) = owners.next() else { break };
            r.owner_change(now, c.processor, c.leaves);
        }
        r.arrivals(now);
        r.start_in_order(now);
        if easy {
            r.backfill(now);
        }
        r.sample(now);
    }
    (r.out.into_iter().flatten().collect(), r.timeline)
}

/// The state of a space-sharing replay.
struct Batch<'a> {
    jobs: &'a [Job],
    cond: &'a Conditions,
    /// Processors, and per architecture how many.
    n: usize,
    pool: Vec<usize>,
    timeline: Vec<Sample>,
    out: Vec<Option<Outcome>>,
    /// The next job to arrive.
    next: usize,
    queue: VecDeque<usize>,
    running: BinaryHeap<Ending>,
    /// (index, start) of running jobs, for EASY's reservation.
    active: Vec<(usize, f64)>,
    /// Per architecture: processors free and not taken back, lowest first;
    /// who holds the rest.
    avail: Vec<BTreeSet<usize>>,
    holder: Vec<Option<usize>>,
    held: Vec<Vec<usize>>,
    /// A running job's processors taken back now, its projected end, the
    /// work it had left when it stopped, and the epoch of its live `Ending`.
    blocked: Vec<u32>,
    ends: Vec<f64>,
    left: Vec<f64>,
    epoch: Vec<u32>,
    started: Vec<f64>,
}

impl<'a> Batch<'a> {
    fn new(jobs: &'a [Job], procs: u32, cond: &'a Conditions) -> Batch<'a> {
        let n = procs as usize;
        let arches = cond.arch_names.len().max(1);
        let mut avail: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); arches];
        for p in 0..n {
            avail[(cond.arch_of(p) as usize).min(arches - 1)].insert(p);
        }
        Batch {
            jobs,
            cond,
            n,
            pool: (0..arches as u32).map(|a| cond.pool_size(n, a)).collect(),
            timeline: Vec::new(),
            out: vec![None; jobs.len()],
            next: 0,
            queue: VecDeque::new(),
            running: BinaryHeap::new(),
            active: Vec::new(),
            avail,
            holder: vec![None; n],
            held: vec![Vec::new(); jobs.len()],
            blocked: vec![0; jobs.len()],
            ends: vec![0.0; jobs.len()],
            left: vec![0.0; jobs.len()],
            epoch: vec![0; jobs.len()],
            started: vec![0.0; jobs.len()],
        }
    }

    /// Job `i`'s architecture (one pool each).
    fn arch(&self, i: usize) -> usize {
        (self.jobs[i].arch as usize).min(self.avail.len() - 1)
    }

    /// Processor `p`'s architecture.
    fn home(&self, p: usize) -> usize {
        (self.cond.arch_of(p) as usize).min(self.avail.len() - 1)
    }

    /// Jobs whose end has come by `now` end: their processors are free.
    fn complete(&mut self, now: f64, done: &AtomicUsize) {
        while self.running.peek().is_some_and(|e| e.end <= now) {
            let Some(e) = self.running.pop() else { break };
            if e.epoch != self.epoch[e.index] {
                continue;
            }
            done.fetch_add(1, AtomicOrdering::Relaxed);
            for p in std::mem::take(&mut self.held[e.index]) {
                self.holder[p] = None;
                let home = self.home(p);
                self.avail[home].insert(p);
            }
            self.active.retain(|&(i, _)| i != e.index);
            let j = &self.jobs[e.index];
            self.out[e.index] = Some(Outcome {
                id: j.id.clone(),
                submit: j.submit,
                start: self.started[e.index],
                end: e.end,
                procs: j.procs,
                migrations: 0,
            });
        }
    }

    /// Processor `p`'s owner leaves it (`leaves`) or comes back: the job
    /// holding it stops until every processor it holds is left again; a
    /// free one is withheld from new jobs.
    fn owner_change(&mut self, now: f64, p: usize, leaves: bool) {
        if p >= self.n {
            return;
        }
        match (leaves, self.holder[p]) {
            (true, Some(i)) => {
                self.blocked[i] += 1;
                if self.blocked[i] == 1 {
                    self.left[i] = (self.ends[i] - now).max(0.0);
                    self.epoch[i] += 1;
                }
            }
            (true, None) => {
                let home = self.home(p);
                self.avail[home].remove(&p);
            }
            (false, Some(i)) => {
                self.blocked[i] = self.blocked[i].saturating_sub(1);
                if self.blocked[i] == 0 {
                    self.ends[i] = now + self.left[i];
                    self.running.push(Ending {
                        end: self.ends[i],
                        index: i,
                        epoch: self.epoch[i],
                    });
                }
            }
            (false, None) => {
                let home = self.home(p);
                self.avail[home].insert(p);
            }
        }
    }

    /// Jobs submitted by `now` join the queue (those wider than their
    /// pool, or of no processors, are left out).
    fn arrivals(&mut self, now: f64) {
        while self.jobs.get(self.next).is_some_and(|j| j.submit <= now) {
            let (i, j) = (self.next, &self.jobs[self.next]);
            // (One job a node: memory limits only a VP that fits no node.)
            if j.procs as usize <= self.pool[self.arch(i)]
                && j.procs > 0
                && self.cond.fits_a_node(j)
            {
                self.queue.push_back(i);
            }
            self.next += 1;
        }
    }

    /// Start job `i` now on the lowest free processors of its architecture.
    fn start(&mut self, i: usize, now: f64) {
        let j = &self.jobs[i];
        let a = self.arch(i);
        for _ in 0..j.procs {
            if let Some(p) = self.avail[a].pop_first() {
                self.holder[p] = Some(i);
                self.held[i].push(p);
            }
        }
        self.active.push((i, now));
        self.started[i] = now;
        self.ends[i] = now + j.run;
        self.running.push(Ending {
            end: self.ends[i],
            index: i,
            epoch: self.epoch[i],
        });
    }

    /// FCFS: start jobs from the head of the queue while they fit.
    fn start_in_order(&mut self, now: f64) {
        while let Some(&h) = self.queue.front() {
            if self.jobs[h].procs as usize > self.avail[self.arch(h)].len() {
                break;
            }
            self.queue.pop_front();
            self.start(h, now);
        }
    }

    /// EASY: start a later job now if it does not delay the reservation of
    /// the head of the queue (when enough processors of its architecture
    /// free up, from the running jobs' estimates).
    fn backfill(&mut self, now: f64) {
        let Some(&head) = self.queue.front() else {
            return;
        };
        let ha = self.arch(head);
        let mut ends: Vec<(f64, u32)> = self
            .active
            .iter()
            .filter(|&&(i, _)| self.arch(i) == ha)
            .map(|&(i, s)| (s + self.jobs[i].estimate, self.jobs[i].procs))
            .collect();
        ends.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut avail_then = self.avail[ha].len() as u32;
        let mut shadow = f64::INFINITY;
        for (t, p) in ends {
            avail_then += p;
            if avail_then >= self.jobs[head].procs {
                shadow = t;
                break;
            }
        }
        let mut extra = avail_then.saturating_sub(self.jobs[head].procs);
        let candidates: Vec<usize> = self.queue.iter().skip(1).copied().collect();
        for i in candidates {
            let j = &self.jobs[i];
            if j.procs as usize > self.avail[self.arch(i)].len() {
                continue;
            }
            // Another architecture's job cannot delay the head.
            let before_shadow = self.arch(i) != ha || now + j.estimate <= shadow;
            if before_shadow || j.procs <= extra {
                if !before_shadow {
                    extra -= j.procs;
                }
                self.queue.retain(|&x| x != i);
                self.start(i, now);
            }
        }
    }

    /// The machine now: the share of processors doing work.
    fn sample(&mut self, now: f64) {
        let busy: u32 = self
            .active
            .iter()
            .filter(|&&(i, _)| self.blocked[i] == 0)
            .map(|&(i, _)| self.jobs[i].procs)
            .sum();
        self.timeline.push(Sample {
            t: now,
            utilization: f64::from(busy) / (self.n.max(1) as f64),
            slots: 1,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: &str, submit: f64, run: f64, procs: u32, estimate: f64) -> Job {
        Job {
            estimate,
            ..Job::new(id, submit, run, procs)
        }
    }

    #[test]
    fn fcfs_runs_in_order_and_a_wide_job_waits() {
        // 10 processors: a (6 procs, 100 s) runs; b (6) waits until 100; c
        // (2 procs) arrives later and, under FCFS, waits behind b.
        let jobs = [
            job("a", 0.0, 100.0, 6, 100.0),
            job("b", 1.0, 50.0, 6, 50.0),
            job("c", 2.0, 10.0, 2, 10.0),
        ];
        let r = run(
            &jobs,
            10,
            false,
            &Conditions::default(),
            &AtomicUsize::new(0),
        )
        .0;
        let end = |id: &str| r.iter().find(|o| o.id == id).unwrap().end;
        assert_eq!(end("a"), 100.0);
        assert_eq!(end("b"), 150.0);
        assert_eq!(r.iter().find(|o| o.id == "c").unwrap().start, 100.0);
        assert_eq!(end("c"), 110.0);
    }

    #[test]
    fn an_owner_stops_the_job_holding_their_processor_and_withholds_a_free_one() {
        // 4 processors. a (2 procs, 100 s) takes p0 and p1 at 0; b (3 procs)
        // arrives at 5 and waits (2 free). p1's owner is back 10..60: a
        // stops for 50 s and ends at 150. p3's owner takes it, free, at 20
        // and keeps it past 150: when a ends, p0, p1, p2 are left and b runs
        // 150..160. Without owners: a ends at 100, b runs 100..110.
        let jobs = [job("a", 0.0, 100.0, 2, 100.0), job("b", 5.0, 10.0, 3, 10.0)];
        let owners = Conditions {
            owners: crate::sim::owners::Model::availability(
                "10 1 leave\n60 1 return\n20 3 leave\n200 3 return\n",
                4,
            )
            .unwrap(),
            ..Conditions::default()
        };
        let span = |r: &[Outcome], id: &str| {
            let o = r.iter().find(|o| o.id == id).unwrap();
            (o.start, o.end)
        };
        for easy in [false, true] {
            let (r, timeline) = run(&jobs, 4, easy, &owners, &AtomicUsize::new(0));
            assert_eq!(span(&r, "a"), (0.0, 150.0));
            assert_eq!(span(&r, "b"), (150.0, 160.0));
            let stopped = timeline.iter().find(|s| s.t == 10.0).unwrap();
            assert_eq!(stopped.utilization, 0.0, "a does nothing while stopped");
            let r = run(&jobs, 4, easy, &Conditions::default(), &AtomicUsize::new(0)).0;
            assert_eq!(span(&r, "a"), (0.0, 100.0));
            assert_eq!(span(&r, "b"), (100.0, 110.0));
        }
    }

    #[test]
    fn easy_backfills_a_short_job_without_delaying_the_head() {
        let jobs = [
            job("a", 0.0, 100.0, 6, 100.0),
            job("b", 1.0, 50.0, 6, 50.0),
            job("c", 2.0, 10.0, 2, 10.0),
        ];
        let r = run(
            &jobs,
            10,
            true,
            &Conditions::default(),
            &AtomicUsize::new(0),
        )
        .0;
        let c = r.iter().find(|o| o.id == "c").unwrap();
        assert_eq!(
            c.start, 2.0,
            "c fits beside a and ends before b's reservation"
        );
        assert_eq!(r.iter().find(|o| o.id == "b").unwrap().start, 100.0);
    }
}
