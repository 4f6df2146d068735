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
    let n = procs as usize;
    let arches = cond.arch_names.len().max(1);
    let pool: Vec<usize> = (0..arches as u32).map(|a| cond.pool_size(n, a)).collect();
    let arch = |i: usize| (jobs[i].arch as usize).min(arches - 1);
    let mut timeline: Vec<Sample> = Vec::new();
    let mut out: Vec<Option<Outcome>> = vec![None; jobs.len()];
    let mut next = 0;
    let mut queue: VecDeque<usize> = VecDeque::new();
    let mut running: BinaryHeap<Ending> = BinaryHeap::new();
    // (index, start) of running jobs, for EASY's reservation.
    let mut active: Vec<(usize, f64)> = Vec::new();
    // Per architecture: processors free and not taken back, lowest first;
    // who holds the rest.
    let mut avail: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); arches];
    for p in 0..n {
        avail[(cond.arch_of(p) as usize).min(arches - 1)].insert(p);
    }
    let home = |p: usize| (cond.arch_of(p) as usize).min(arches - 1);
    let mut holder: Vec<Option<usize>> = vec![None; n];
    let mut held: Vec<Vec<usize>> = vec![Vec::new(); jobs.len()];
    // A running job's processors taken back now, its projected end, the work
    // it had left when it stopped, and the epoch of its live `Ending`.
    let mut blocked: Vec<u32> = vec![0; jobs.len()];
    let mut ends: Vec<f64> = vec![0.0; jobs.len()];
    let mut left: Vec<f64> = vec![0.0; jobs.len()];
    let mut epoch: Vec<u32> = vec![0; jobs.len()];
    let mut started: Vec<f64> = vec![0.0; jobs.len()];
    let mut owners =
        cond.owners
            .changes(n, jobs.first().map_or(0.0, |j| j.submit), last_submit(jobs));
    loop {
        while running.peek().is_some_and(|e| e.epoch != epoch[e.index]) {
            running.pop();
        }
        let pending = !active.is_empty() || !queue.is_empty() || next < jobs.len();
        let owner = owners.peek().filter(|_| pending);
        let Some(now) = super::next_instant(
            running.peek().map(|e| e.end),
            jobs.get(next).map(|j| j.submit),
        )
        .map(|t| owner.map_or(t, |o| t.min(o)))
        .or(owner) else {
            break;
        };
        while running.peek().is_some_and(|e| e.end <= now) {
            let Some(e) = running.pop() else { break };
            if e.epoch != epoch[e.index] {
                continue;
            }
            done.fetch_add(1, AtomicOrdering::Relaxed);
            for p in std::mem::take(&mut held[e.index]) {
                holder[p] = None;
                avail[home(p)].insert(p);
            }
            active.retain(|&(i, _)| i != e.index);
            let j = &jobs[e.index];
            out[e.index] = Some(Outcome {
                id: j.id.clone(),
                submit: j.submit,
                start: started[e.index],
                end: e.end,
                procs: j.procs,
                migrations: 0,
            });
        }
        // Owners: a held processor stops its job; a free one is withheld.
        while owners.peek().is_some_and(|o| o <= now) {
            let Some(c) = owners.next() else { break };
            let p = c.processor;
            if p >= n {
                continue;
            }
            match (c.leaves, holder[p]) {
                (true, Some(i)) => {
                    blocked[i] += 1;
                    if blocked[i] == 1 {
                        left[i] = (ends[i] - now).max(0.0);
                        epoch[i] += 1;
                    }
                }
                (true, None) => {
                    avail[home(p)].remove(&p);
                }
                (false, Some(i)) => {
                    blocked[i] = blocked[i].saturating_sub(1);
                    if blocked[i] == 0 {
                        ends[i] = now + left[i];
                        running.push(Ending {
                            end: ends[i],
                            index: i,
                            epoch: epoch[i],
                        });
                    }
                }
                (false, None) => {
                    avail[home(p)].insert(p);
                }
            }
        }
        while jobs.get(next).is_some_and(|j| j.submit <= now) {
            if jobs[next].procs as usize <= pool[arch(next)] && jobs[next].procs > 0 {
                queue.push_back(next);
            }
            next += 1;
        }
        let mut start =
            |i: usize, avail: &mut Vec<BTreeSet<usize>>, active: &mut Vec<(usize, f64)>| {
                let j = &jobs[i];
                for _ in 0..j.procs {
                    if let Some(p) = avail[arch(i)].pop_first() {
                        holder[p] = Some(i);
                        held[i].push(p);
                    }
                }
                active.push((i, now));
                started[i] = now;
                ends[i] = now + j.run;
                running.push(Ending {
                    end: ends[i],
                    index: i,
                    epoch: epoch[i],
                });
            };
        while let Some(&h) = queue.front() {
            if jobs[h].procs as usize > avail[arch(h)].len() {
                break;
            }
            queue.pop_front();
            start(h, &mut avail, &mut active);
        }
        if easy {
            if let Some(&head) = queue.front() {
                // The head's reservation: when enough processors of its
                // architecture free up.
                let ha = arch(head);
                let mut ends: Vec<(f64, u32)> = active
                    .iter()
                    .filter(|&&(i, _)| arch(i) == ha)
                    .map(|&(i, s)| (s + jobs[i].estimate, jobs[i].procs))
                    .collect();
                ends.sort_by(|a, b| a.0.total_cmp(&b.0));
                let mut avail_then = avail[ha].len() as u32;
                let mut shadow = f64::INFINITY;
                for (t, p) in ends {
                    avail_then += p;
                    if avail_then >= jobs[head].procs {
                        shadow = t;
                        break;
                    }
                }
                let mut extra = avail_then.saturating_sub(jobs[head].procs);
                let candidates: Vec<usize> = queue.iter().skip(1).copied().collect();
                for i in candidates {
                    let j = &jobs[i];
                    if j.procs as usize > avail[arch(i)].len() {
                        continue;
                    }
                    // Another architecture's job cannot delay the head.
                    let before_shadow = arch(i) != ha || now + j.estimate <= shadow;
                    if before_shadow || j.procs <= extra {
                        if !before_shadow {
                            extra -= j.procs;
                        }
                        queue.retain(|&x| x != i);
                        start(i, &mut avail, &mut active);
                    }
                }
            }
        }
        let busy: u32 = active
            .iter()
            .filter(|&&(i, _)| blocked[i] == 0)
            .map(|&(i, _)| jobs[i].procs)
            .sum();
        timeline.push(Sample {
            t: now,
            utilization: f64::from(busy) / f64::from(procs.max(1)),
            slots: 1,
        });
    }
    (out.into_iter().flatten().collect(), timeline)
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
