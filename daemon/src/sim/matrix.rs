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
//! waiting job that now fits is placed, in submission order. These policies
//! cannot move work: a processor its owner takes back stops every job with a
//! cell on it (the gang cannot run without it) until the owner leaves, and
//! takes no new job meanwhile.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::gang::GangRun;
use super::swf::Job;
use super::Conditions;
use super::{last_submit, Outcome, Sample};

struct Matrix {
    procs: usize,
    slots: Vec<Vec<Option<usize>>>,
    buddy: bool,
    /// Processors their owners have taken back.
    owned: Vec<bool>,
    /// The processors of each architecture, in order.
    cols: Vec<Vec<usize>>,
}

impl Matrix {
    /// Cells for job `i` of `n` VPs of architecture `a` in some slot,
    /// creating one if allowed.
    fn place(&mut self, i: usize, n: usize, a: usize, max_slots: usize) -> bool {
        if n == 0 || n > self.cols.get(a).map_or(0, Vec::len) {
            return false;
        }
        for s in 0..self.slots.len() {
            if let Some(cells) = self.fit(s, n, a) {
                for c in cells {
                    self.slots[s][c] = Some(i);
                }
                return true;
            }
        }
        if self.slots.len() < max_slots {
            self.slots.push(vec![None; self.procs]);
            let s = self.slots.len() - 1;
            if let Some(cells) = self.fit(s, n, a) {
                for c in cells {
                    self.slots[s][c] = Some(i);
                }
                return true;
            }
            self.slots.pop();
        }
        false
    }

    fn fit(&self, s: usize, n: usize, a: usize) -> Option<Vec<usize>> {
        let row = &self.slots[s];
        let cols = self.cols.get(a)?;
        let usable = |c: usize| row[c].is_none() && !self.owned[c];
        if self.buddy {
            // Blocks over the architecture's processors. On a pool that is
            // not a power of two, a job whose rounded size exceeds it takes
            // the whole pool.
            let block = n.next_power_of_two().min(cols.len());
            (0..cols.len() / block)
                .map(|b| &cols[b * block..(b + 1) * block])
                .find(|block| block.iter().all(|&c| usable(c)))
                .map(<[usize]>::to_vec)
        } else {
            let free: Vec<usize> = cols
                .iter()
                .copied()
                .filter(|&c| usable(c))
                .take(n)
                .collect();
            (free.len() == n).then_some(free)
        }
    }

    /// The most cells a job could get: free cells not taken back in the
    /// roomiest slot, or every processor not taken back if a slot may be
    /// added. An upper bound that placing jobs only lowers.
    fn widest_room(&self, max_slots: usize) -> usize {
        let present = self.owned.iter().filter(|&&o| !o).count();
        if self.slots.len() < max_slots {
            return present;
        }
        self.slots
            .iter()
            .map(|row| {
                row.iter()
                    .zip(&self.owned)
                    .filter(|(c, &o)| c.is_none() && !o)
                    .count()
            })
            .max()
            .unwrap_or(0)
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

/// Replay `jobs` on `procs` processors under `cond` (owners, switch cost).
pub fn run(
    jobs: &[Job],
    procs: u32,
    buddy: bool,
    max_slots: usize,
    cond: &Conditions,
    done_count: &AtomicUsize,
) -> GangRun {
    let mut m = Matrix {
        procs: procs as usize,
        slots: Vec::new(),
        buddy,
        owned: vec![false; procs as usize],
        cols: {
            let mut cols = vec![Vec::new(); cond.arch_names.len().max(1)];
            for p in 0..procs as usize {
                let a = (cond.arch_of(p) as usize).min(cols.len() - 1);
                cols[a].push(p);
            }
            cols
        },
    };
    let arches = m.cols.len();
    let arch = |i: usize| (jobs[i].arch as usize).min(arches - 1);
    // Cells of each job on processors taken back: it runs only at 0.
    let mut blocked: Vec<u32> = vec![0; jobs.len()];
    let mut owners = cond.owners.changes(
        procs as usize,
        jobs.first().map_or(0.0, |j| j.submit),
        last_submit(jobs),
    );
    let mut remaining: Vec<f64> = jobs.iter().map(|j| j.run).collect();
    let mut timeline: Vec<Sample> = Vec::new();
    let mut running: BTreeMap<usize, f64> = BTreeMap::new(); // job -> start
    let mut waiting: Vec<usize> = Vec::new();
    let mut out: Vec<Option<Outcome>> = vec![None; jobs.len()];
    let mut next = 0;
    let mut now = jobs.first().map_or(0.0, |j| j.submit);
    let (mut slot_time, mut span, mut max_seen) = (0.0, 0.0, 0usize);
    loop {
        // Each running job gets a slot in `tau`, less what switching costs.
        let tau = m.slots.len().max(1) as f64 / cond.sharing_efficiency(m.slots.len());
        let finish = running
            .keys()
            .filter(|&&i| blocked[i] == 0)
            .map(|&i| (now + remaining[i] * tau, i))
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let pending = !running.is_empty() || !waiting.is_empty() || next < jobs.len();
        let owner = owners.peek().filter(|_| pending);
        let Some(t) = super::next_instant(finish.map(|f| f.0), jobs.get(next).map(|j| j.submit))
            .map(|t| owner.map_or(t, |o| t.min(o)))
            .or(owner)
        else {
            break;
        };
        let dt = (t - now).max(0.0);
        for &i in running.keys() {
            if blocked[i] == 0 {
                remaining[i] -= dt / tau;
            }
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
                blocked[i] == 0
                    && (remaining[i] <= 1e-9 * jobs[i].run.max(1.0)
                        || now + remaining[i] * tau <= now)
            })
            .collect();
        let mut freed = !done.is_empty();
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
        // Owners: every job with a cell on a processor taken back stops.
        while owners.peek().is_some_and(|o| o <= now) {
            let Some(c) = owners.next() else { break };
            let p = c.processor;
            if p >= m.procs {
                continue;
            }
            m.owned[p] = c.leaves;
            for row in &m.slots {
                if let Some(i) = row[p] {
                    if c.leaves {
                        blocked[i] += 1;
                    } else {
                        blocked[i] = blocked[i].saturating_sub(1);
                    }
                }
            }
            freed |= !c.leaves;
        }
        if freed {
            // No job wider than the most free cells of a slot (or of a new
            // one) can be placed: skip those without searching.
            let widest = m.widest_room(max_slots);
            waiting.retain(|&i| {
                if jobs[i].procs as usize <= widest
                    && m.place(i, jobs[i].procs as usize, arch(i), max_slots)
                {
                    running.insert(i, now);
                    false
                } else {
                    true
                }
            });
        }
        while jobs.get(next).is_some_and(|j| j.submit <= now) {
            let j = &jobs[next];
            if j.procs > 0 && j.procs as usize <= m.cols[arch(next)].len() {
                if waiting.is_empty() && m.place(next, j.procs as usize, arch(next), max_slots) {
                    running.insert(next, now);
                } else {
                    waiting.push(next);
                }
            }
            next += 1;
        }
        max_seen = max_seen.max(m.slots.len());
        let busy: u32 = running
            .keys()
            .filter(|&&i| blocked[i] == 0)
            .map(|&i| jobs[i].procs)
            .sum();
        let tau = m.slots.len().max(1) as f64;
        timeline.push(Sample {
            t: now,
            utilization: f64::from(busy) / tau * cond.sharing_efficiency(m.slots.len())
                / f64::from(procs.max(1)),
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
        let r = run(
            &jobs,
            4,
            false,
            8,
            &Conditions::default(),
            &AtomicUsize::new(0),
        );
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
    fn an_owner_stops_the_jobs_on_their_processor_and_it_takes_no_new_one() {
        // 4 processors. a (2, 100 s) takes p0, p1 in slot 1. p1's owner is
        // back 10..60: a stops and ends at 150. p3's owner is back from 15
        // on, so b (2, 10 s, at 20) finds only p2 free in slot 1 and opens
        // slot 2 on p0, p2; with two slots it runs at half speed, 20..40.
        let jobs = [Job::new("a", 0.0, 100.0, 2), Job::new("b", 20.0, 10.0, 2)];
        let cond = Conditions {
            owners: crate::sim::owners::Model::availability(
                "10 1 leave\n60 1 return\n15 3 leave\n500 3 return\n",
                4,
            )
            .unwrap(),
            ..Conditions::default()
        };
        let r = run(&jobs, 4, false, 8, &cond, &AtomicUsize::new(0));
        let span = |id: &str| {
            let o = r.outcomes.iter().find(|o| o.id == id).unwrap();
            (o.start, o.end)
        };
        assert_eq!(span("a"), (0.0, 150.0));
        let (start, end) = span("b");
        assert!(
            start == 20.0 && (end - 40.0).abs() < 1e-9,
            "b {start}..{end}"
        );
        assert_eq!(r.slots.1, 2);
    }

    #[test]
    fn buddy_rounds_up_to_aligned_blocks() {
        // 4 processors: a (3) takes the block 0-3, so b (1) cannot share its
        // slot under buddy but can under first fit.
        let jobs = [Job::new("a", 0.0, 100.0, 3), Job::new("b", 0.0, 10.0, 1)];
        assert_eq!(
            run(
                &jobs,
                4,
                true,
                8,
                &Conditions::default(),
                &AtomicUsize::new(0)
            )
            .slots
            .1,
            2
        );
        assert_eq!(
            run(
                &jobs,
                4,
                false,
                8,
                &Conditions::default(),
                &AtomicUsize::new(0)
            )
            .slots
            .1,
            1
        );
        // 100 processors: 65 rounds to 128 > 100, so it takes the machine.
        let r = run(
            &[Job::new("w", 0.0, 10.0, 65)],
            100,
            true,
            8,
            &Conditions::default(),
            &AtomicUsize::new(0),
        );
        assert_eq!(r.outcomes.len(), 1);
        // At the slot cap a job waits for room.
        let r = run(
            &jobs,
            4,
            true,
            1,
            &Conditions::default(),
            &AtomicUsize::new(0),
        );
        let b = r.outcomes.iter().find(|o| o.id == "b").unwrap();
        assert!((b.start - 100.0).abs() < 1e-9 && (b.end - 110.0).abs() < 1e-9);
    }
}
