//! Space-sharing policies without time slicing: FCFS and EASY backfilling.
//!
//! What lives here: a discrete-event replay where a job holds its processors
//! from start to end. At each instant completions are handled first, then
//! arrivals, then the queue. EASY lets a later job start now if it does not
//! delay the first waiting job's reservation (computed from the running
//! jobs' estimates). What does not: time sharing (`gang`).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};

use super::swf::Job;
use super::{Outcome, Sample};

#[derive(PartialEq)]
struct Ending {
    end: f64,
    index: usize,
}
impl Eq for Ending {}
impl PartialOrd for Ending {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Ending {
    fn cmp(&self, o: &Self) -> Ordering {
        o.end.total_cmp(&self.end).then(o.index.cmp(&self.index))
    }
}

/// Replay `jobs` on `procs` processors with FCFS, or EASY if `easy`.
/// Jobs wider than the machine never start and are left out.
pub fn run(
    jobs: &[Job],
    procs: u32,
    easy: bool,
    done: &AtomicUsize,
) -> (Vec<Outcome>, Vec<Sample>) {
    let mut timeline: Vec<Sample> = Vec::new();
    let mut out: Vec<Option<Outcome>> = vec![None; jobs.len()];
    let mut next = 0;
    let mut queue: VecDeque<usize> = VecDeque::new();
    let mut running: BinaryHeap<Ending> = BinaryHeap::new();
    // (index, start) of running jobs, for EASY's reservation.
    let mut active: Vec<(usize, f64)> = Vec::new();
    let mut free = procs;
    while let Some(now) = super::next_instant(
        running.peek().map(|e| e.end),
        jobs.get(next).map(|j| j.submit),
    ) {
        while running.peek().is_some_and(|e| e.end <= now) {
            if let Some(e) = running.pop() {
                done.fetch_add(1, AtomicOrdering::Relaxed);
                free += jobs[e.index].procs;
                active.retain(|&(i, _)| i != e.index);
            }
        }
        while jobs.get(next).is_some_and(|j| j.submit <= now) {
            if jobs[next].procs <= procs && jobs[next].procs > 0 {
                queue.push_back(next);
            }
            next += 1;
        }
        let mut start = |i: usize,
                         free: &mut u32,
                         active: &mut Vec<(usize, f64)>,
                         running: &mut BinaryHeap<Ending>| {
            let j = &jobs[i];
            *free -= j.procs;
            active.push((i, now));
            running.push(Ending {
                end: now + j.run,
                index: i,
            });
            out[i] = Some(Outcome {
                id: j.id.clone(),
                submit: j.submit,
                start: now,
                end: now + j.run,
                procs: j.procs,
                migrations: 0,
            });
        };
        while let Some(&h) = queue.front() {
            if jobs[h].procs > free {
                break;
            }
            queue.pop_front();
            start(h, &mut free, &mut active, &mut running);
        }
        if easy {
            if let Some(&head) = queue.front() {
                // The head's reservation: when enough processors free up.
                let mut ends: Vec<(f64, u32)> = active
                    .iter()
                    .map(|&(i, s)| (s + jobs[i].estimate, jobs[i].procs))
                    .collect();
                ends.sort_by(|a, b| a.0.total_cmp(&b.0));
                let mut avail = free;
                let mut shadow = f64::INFINITY;
                for (t, p) in ends {
                    avail += p;
                    if avail >= jobs[head].procs {
                        shadow = t;
                        break;
                    }
                }
                let mut extra = avail.saturating_sub(jobs[head].procs);
                let candidates: Vec<usize> = queue.iter().skip(1).copied().collect();
                for i in candidates {
                    let j = &jobs[i];
                    if j.procs > free {
                        continue;
                    }
                    let before_shadow = now + j.estimate <= shadow;
                    if before_shadow || j.procs <= extra {
                        if !before_shadow {
                            extra -= j.procs;
                        }
                        queue.retain(|&x| x != i);
                        start(i, &mut free, &mut active, &mut running);
                    }
                }
            }
        }
        timeline.push(Sample {
            t: now,
            utilization: f64::from(procs - free) / f64::from(procs.max(1)),
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
            id: id.into(),
            submit,
            run,
            procs,
            estimate,
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
        let r = run(&jobs, 10, false, &AtomicUsize::new(0)).0;
        let end = |id: &str| r.iter().find(|o| o.id == id).unwrap().end;
        assert_eq!(end("a"), 100.0);
        assert_eq!(end("b"), 150.0);
        assert_eq!(r.iter().find(|o| o.id == "c").unwrap().start, 100.0);
        assert_eq!(end("c"), 110.0);
    }

    #[test]
    fn easy_backfills_a_short_job_without_delaying_the_head() {
        let jobs = [
            job("a", 0.0, 100.0, 6, 100.0),
            job("b", 1.0, 50.0, 6, 50.0),
            job("c", 2.0, 10.0, 2, 10.0),
        ];
        let r = run(&jobs, 10, true, &AtomicUsize::new(0)).0;
        let c = r.iter().find(|o| o.id == "c").unwrap();
        assert_eq!(
            c.start, 2.0,
            "c fits beside a and ends before b's reservation"
        );
        assert_eq!(r.iter().find(|o| o.id == "b").unwrap().start, 100.0);
    }
}
