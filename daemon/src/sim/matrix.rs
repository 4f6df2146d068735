//! Classic gang scheduling on an Ousterhout matrix: `gang-firstfit` and
//! `gang-buddy`, for comparison with the embedded scheduler.
//!
//! Each job gets one processor per VP in one slot (no doubling up, no
//! capacities): first fit puts it in the first slot with enough free
//! processors (the lowest-numbered ones); buddy rounds its size up to a
//! power of two and holds the first aligned free block of that size (the
//! rounding stays idle: buddy's internal fragmentation). With
//! `τ` slots every running job progresses at `1/τ`. Slots beyond
//! `max_slots` are not created: jobs wait, and whenever a job ends every
//! waiting job that now fits is placed, in submission order.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::gang::GangRun;
use super::swf::Job;
use super::{Outcome, Sample};

struct Matrix {
    procs: usize,
    slots: Vec<Vec<Option<usize>>>,
    buddy: bool,
}

impl Matrix {
    /// Cells for job `i` of `n` VPs in some slot, creating one if allowed.
    fn place(&mut self, i: usize, n: usize, max_slots: usize) -> bool {
        if n == 0 || n > self.procs {
            return false;
        }
        for s in 0..self.slots.len() {
            if let Some(cells) = self.fit(s, n) {
                for c in cells {
                    self.slots[s][c] = Some(i);
                }
                return true;
            }
        }
        if self.slots.len() < max_slots {
            self.slots.push(vec![None; self.procs]);
            let s = self.slots.len() - 1;
            if let Some(cells) = self.fit(s, n) {
                for c in cells {
                    self.slots[s][c] = Some(i);
                }
                return true;
            }
            self.slots.pop();
        }
        false
    }

    fn fit(&self, s: usize, n: usize) -> Option<Vec<usize>> {
        let row = &self.slots[s];
        if self.buddy {
            // On a machine that is not a power of two, a job whose rounded
            // size exceeds it takes the whole machine.
            let block = n.next_power_of_two().min(self.procs);
            (0..self.procs / block)
                .map(|b| b * block)
                .find(|&start| row[start..start + block].iter().all(Option::is_none))
                .map(|start| (start..start + block).collect())
        } else {
            let free: Vec<usize> = (0..self.procs)
                .filter(|&c| row[c].is_none())
                .take(n)
                .collect();
            (free.len() == n).then_some(free)
        }
    }

    fn remove(&mut self, i: usize) {
        for row in &mut self.slots {
            for c in row.iter_mut() {
                if *c == Some(i) {
                    *c = None;
                }
            }
        }
        self.slots.retain(|row| row.iter().any(Option::is_some));
    }
}

/// Replay `jobs` on `procs` processors.
pub fn run(
    jobs: &[Job],
    procs: u32,
    buddy: bool,
    max_slots: usize,
    done_count: &AtomicUsize,
) -> GangRun {
    let mut m = Matrix {
        procs: procs as usize,
        slots: Vec::new(),
        buddy,
    };
    let mut remaining: Vec<f64> = jobs.iter().map(|j| j.run).collect();
    let mut timeline: Vec<Sample> = Vec::new();
    let mut running: BTreeMap<usize, f64> = BTreeMap::new(); // job -> start
    let mut waiting: Vec<usize> = Vec::new();
    let mut out: Vec<Option<Outcome>> = vec![None; jobs.len()];
    let mut next = 0;
    let mut now = jobs.first().map_or(0.0, |j| j.submit);
    let (mut slot_time, mut span, mut max_seen) = (0.0, 0.0, 0usize);
    loop {
        let tau = m.slots.len().max(1) as f64;
        let finish = running
            .keys()
            .map(|&i| (now + remaining[i] * tau, i))
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let Some(t) = super::next_instant(finish.map(|f| f.0), jobs.get(next).map(|j| j.submit))
        else {
            break;
        };
        let dt = (t - now).max(0.0);
        for &i in running.keys() {
            remaining[i] -= dt / tau;
        }
        if !running.is_empty() {
            slot_time += m.slots.len() as f64 * dt;
            span += dt;
        }
        now = t;
        let done: Vec<usize> = running
            .keys()
            .copied()
            .filter(|&i| {
                remaining[i] <= 1e-9 * jobs[i].run.max(1.0) || now + remaining[i] * tau <= now
            })
            .collect();
        let freed = !done.is_empty();
        for i in done {
            let start = running.remove(&i).unwrap_or(now);
            done_count.fetch_add(1, Ordering::Relaxed);
            m.remove(i);
            let j = &jobs[i];
            out[i] = Some(Outcome {
                id: j.id.clone(),
                submit: j.submit,
                start,
                end: now,
                procs: j.procs,
                migrations: 0,
            });
        }
        if freed {
            waiting.retain(|&i| {
                if m.place(i, jobs[i].procs as usize, max_slots) {
                    running.insert(i, now);
                    false
                } else {
                    true
                }
            });
        }
        while jobs.get(next).is_some_and(|j| j.submit <= now) {
            let j = &jobs[next];
            if j.procs > 0 && j.procs <= procs {
                if waiting.is_empty() && m.place(next, j.procs as usize, max_slots) {
                    running.insert(next, now);
                } else {
                    waiting.push(next);
                }
            }
            next += 1;
        }
        max_seen = max_seen.max(m.slots.len());
        let busy: u32 = running.keys().map(|&i| jobs[i].procs).sum();
        let tau = m.slots.len().max(1) as f64;
        timeline.push(Sample {
            t: now,
            utilization: f64::from(busy) / tau / f64::from(procs.max(1)),
            slots: m.slots.len(),
        });
    }
    GangRun {
        outcomes: out.into_iter().flatten().collect(),
        migrations: 0,
        slots: (if span > 0.0 { slot_time / span } else { 0.0 }, max_seen),
        timeline,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_shares_a_slot_and_opens_a_new_one_when_full() {
        // 4 processors: a (3) and b (1) share slot 1; c (2) needs slot 2, so
        // all three run at half speed until c ends.
        let jobs = [
            Job::new("a", 0.0, 100.0, 3),
            Job::new("b", 0.0, 10.0, 1),
            Job::new("c", 0.0, 10.0, 2),
        ];
        let r = run(&jobs, 4, false, 8, &AtomicUsize::new(0));
        let end = |id: &str| r.outcomes.iter().find(|o| o.id == id).unwrap().end;
        assert!((end("b") - 20.0).abs() < 1e-9);
        assert!((end("c") - 20.0).abs() < 1e-9);
        assert!(
            (end("a") - 110.0).abs() < 1e-9,
            "10 s of work at half speed, then alone"
        );
        assert_eq!(r.slots.1, 2);
    }

    #[test]
    fn buddy_rounds_up_to_aligned_blocks() {
        // 4 processors: a (3) takes the block 0-3, so b (1) cannot share its
        // slot under buddy but can under first fit.
        let jobs = [Job::new("a", 0.0, 100.0, 3), Job::new("b", 0.0, 10.0, 1)];
        assert_eq!(run(&jobs, 4, true, 8, &AtomicUsize::new(0)).slots.1, 2);
        assert_eq!(run(&jobs, 4, false, 8, &AtomicUsize::new(0)).slots.1, 1);
        // 100 processors: 65 rounds to 128 > 100, so it takes the machine.
        let r = run(
            &[Job::new("w", 0.0, 10.0, 65)],
            100,
            true,
            8,
            &AtomicUsize::new(0),
        );
        assert_eq!(r.outcomes.len(), 1);
        // At the slot cap a job waits for room.
        let r = run(&jobs, 4, true, 1, &AtomicUsize::new(0));
        let b = r.outcomes.iter().find(|o| o.id == "b").unwrap();
        assert!((b.start - 100.0).abs() < 1e-9 && (b.end - 110.0).abs() < 1e-9);
    }
}
