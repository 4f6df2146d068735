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
//! takes no new job meanwhile. With memory a limit (`Conditions::
//! node_memory_mb`) a cell is free only where its node still holds the
//! job's memory beside that of the VPs resident there in other slots.

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
    /// With memory a limit: each node's memory (MB), and what the VPs on
    /// each processor (in every slot) hold there.
    memory: Option<(u64, Vec<u64>)>,
}

impl Matrix {
    /// Cells for job `i` of `n` VPs of architecture `a` in some slot,
    /// creating one if allowed.
    /// Each VP holds `need` MB on its node (with memory a limit).
    fn place(&mut self, i: usize, n: usize, a: usize, need: u64, max_slots: usize) -> bool {
        if n == 0 || n > self.cols.get(a).map_or(0, Vec::len) {
            return false;
        }
        for s in 0..self.slots.len() {
            if let Some(cells) = self.fit(s, n, a, need) {
                self.take(s, i, &cells, need);
                return true;
            }
        }
        if self.slots.len() < max_slots {
            self.slots.push(vec![None; self.procs]);
            let s = self.slots.len() - 1;
            if let Some(cells) = self.fit(s, n, a, need) {
                self.take(s, i, &cells, need);
                return true;
            }
            self.slots.pop();
        }
        false
    }

    /// Job `i` takes `cells` of slot `s`, `need` MB on each node.
    fn take(&mut self, s: usize, i: usize, cells: &[usize], need: u64) {
        for &c in cells {
            self.slots[s][c] = Some(i);
            if let Some((_, used)) = self.memory.as_mut() {
                used[c] += need;
            }
        }
    }

    fn fit(&self, s: usize, n: usize, a: usize, need: u64) -> Option<Vec<usize>> {
        let row = &self.slots[s];
        let cols = self.cols.get(a)?;
        let usable = |c: usize| {
            row[c].is_none()
                && !self.owned[c]
                && self
                    .memory
                    .as_ref()
                    .is_none_or(|(node, used)| used[c] + need <= *node)
        };
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

    /// The most cells a job of VPs that each hold `need` MB could get:
    /// free cells not taken back (on nodes with that memory left) in the
    /// roomiest slot, or every such processor if a slot may be added. An
    /// upper bound that placing jobs only lowers.
    fn widest_room(&self, max_slots: usize, need: u64) -> usize {
        let ok = |p: usize| {
            !self.owned[p]
                && self
                    .memory
                    .as_ref()
                    .is_none_or(|(node, used)| used[p] + need <= *node)
        };
        let present = (0..self.procs).filter(|&p| ok(p)).count();
        if self.slots.len() < max_slots {
            return present;
        }
        self.slots
            .iter()
            .map(|row| {
                row.iter()
                    .enumerate()
                    .filter(|&(p, c)| c.is_none() && ok(p))
                    .count()
            })
            .max()
            .unwrap_or(0)
    }

    /// Job `i` ends: its cells are free, and the `need` MB a VP it held
    /// on each node.
    fn remove(&mut self, i: usize, need: u64) {
        for row in &mut self.slots {
            for (p, c) in row.iter_mut().enumerate() {
                if *c == Some(i) {
                    *c = None;
                    if let Some((_, used)) = self.memory.as_mut() {
                        used[p] -= need;
                    }
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
    let mut r = MatrixReplay::new(jobs, procs, buddy, max_slots, cond);
    let mut owners = cond.owners.changes(
        procs as usize,
        jobs.first().map_or(0.0, |j| j.submit),
        last_submit(jobs),
    );
    loop {
        // Each running job gets a slot in `tau`, less what switching costs.
        let tau = r.tau();
        let finish = r
            .running
            .keys()
            .filter(|&&i| r.blocked[i] == 0)
            .map(|&i| (r.now + r.remaining[i] * tau, i))
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let pending = !r.running.is_empty() || !r.waiting.is_empty() || r.next < jobs.len();
        let Some(t) = super::step_to(
            finish.map(|f| f.0),
            jobs.get(r.next).map(|j| j.submit),
            owners.peek().filter(|_| pending),
        ) else {
            break;
        };
        r.advance(t, tau);
        let mut freed = r.complete(tau, done_count);
        // Owners: every job with a cell on a processor taken back stops.
        while owners.peek().is_some_and(|o| o <= r.now) {
            let Some(c) = owners.next() else { break };
            freed |= r.owner_change(c.processor, c.leaves);
        }
        if freed {
            r.place_waiting();
        }
        r.arrivals();
        r.sample();
    }
    GangRun {
        outcomes: r.out.into_iter().flatten().collect(),
        migrations: 0,
        slots: r.slot_time.summary(),
        timeline: r.timeline,
    }
}

/// The state of a replay on an Ousterhout matrix.
struct MatrixReplay<'a> {
    jobs: &'a [Job],
    cond: &'a Conditions,
    m: Matrix,
    max_slots: usize,
    /// Cells of each job on processors taken back: it runs only at 0.
    blocked: Vec<u32>,
    remaining: Vec<f64>,
    timeline: Vec<Sample>,
    /// Running jobs and when each started; jobs waiting for room.
    running: BTreeMap<usize, f64>,
    waiting: Vec<usize>,
    out: Vec<Option<Outcome>>,
    /// The next job to arrive.
    next: usize,
    now: f64,
    /// Slots per round over the replay.
    slot_time: super::SlotTime,
}

impl<'a> MatrixReplay<'a> {
    fn new(
        jobs: &'a [Job],
        procs: u32,
        buddy: bool,
        max_slots: usize,
        cond: &'a Conditions,
    ) -> MatrixReplay<'a> {
        let mut cols = vec![Vec::new(); cond.arch_names.len().max(1)];
        for p in 0..procs as usize {
            let a = (cond.arch_of(p) as usize).min(cols.len() - 1);
            cols[a].push(p);
        }
        MatrixReplay {
            jobs,
            cond,
            m: Matrix {
                procs: procs as usize,
                slots: Vec::new(),
                buddy,
                owned: vec![false; procs as usize],
                cols,
                memory: cond
                    .node_memory_mb
                    .map(|node| (node, vec![0; procs as usize])),
            },
            max_slots,
            blocked: vec![0; jobs.len()],
            remaining: jobs.iter().map(|j| j.run).collect(),
            timeline: Vec::new(),
            running: BTreeMap::new(),
            waiting: Vec::new(),
            out: vec![None; jobs.len()],
            next: 0,
            now: jobs.first().map_or(0.0, |j| j.submit),
            slot_time: super::SlotTime::default(),
        }
    }

    /// The memory (MB) each VP of job `i` holds on its node.
    fn need(&self, i: usize) -> u64 {
        self.cond.need_mb(&self.jobs[i]).unwrap_or(0)
    }

    /// Job `i`'s architecture.
    fn arch(&self, i: usize) -> usize {
        (self.jobs[i].arch as usize).min(self.m.cols.len() - 1)
    }

    /// Seconds of the round per second of a job's work.
    fn tau(&self) -> f64 {
        let slots = self.m.slots.len();
        slots.max(1) as f64 / self.cond.sharing_efficiency(slots)
    }

    /// The clock moves to `t`: every running job not stopped did its share.
    fn advance(&mut self, t: f64, tau: f64) {
        let dt = (t - self.now).max(0.0);
        for &i in self.running.keys() {
            if self.blocked[i] == 0 {
                self.remaining[i] -= dt / tau;
            }
        }
        self.slot_time
            .passed(self.m.slots.len(), dt, !self.running.is_empty());
        self.now = t;
    }

    /// Jobs whose work is done by now end; whether any did (room freed).
    fn complete(&mut self, tau: f64, done_count: &AtomicUsize) -> bool {
        let now = self.now;
        let done: Vec<usize> = self
            .running
            .keys()
            .copied()
            .filter(|&i| {
                self.blocked[i] == 0
                    && super::finished(
                        self.remaining[i],
                        self.jobs[i].run,
                        now,
                        self.remaining[i] * tau,
                    )
            })
            .collect();
        let freed = !done.is_empty();
        for i in done {
            let start = self.running.remove(&i).unwrap_or(now);
            done_count.fetch_add(1, Ordering::Relaxed);
            self.m.remove(i, self.need(i));
            let j = &self.jobs[i];
            self.out[i] = Some(Outcome {
                id: j.id.clone(),
                submit: j.submit,
                start,
                end: now,
                procs: j.procs,
                migrations: 0,
            });
        }
        freed
    }

    /// Processor `p`'s owner leaves it or comes back; whether room was freed.
    fn owner_change(&mut self, p: usize, leaves: bool) -> bool {
        if p >= self.m.procs {
            return false;
        }
        self.m.owned[p] = leaves;
        for row in &self.m.slots {
            if let Some(i) = row[p] {
                if leaves {
                    self.blocked[i] += 1;
                } else {
                    self.blocked[i] = self.blocked[i].saturating_sub(1);
                }
            }
        }
        !leaves
    }

    /// Every waiting job that now fits is placed, in submission order. No
    /// job wider than the most free cells of a slot (or of a new one) can
    /// be placed: those are skipped without searching.
    fn place_waiting(&mut self) {
        // The widest room for each memory need among the waiting jobs.
        let mut widest: BTreeMap<u64, usize> = BTreeMap::new();
        let waiting = std::mem::take(&mut self.waiting);
        for i in waiting {
            let n = self.jobs[i].procs as usize;
            let need = self.need(i);
            let room = *widest
                .entry(need)
                .or_insert_with(|| self.m.widest_room(self.max_slots, need));
            if n <= room && self.m.place(i, n, self.arch(i), need, self.max_slots) {
                // Placing it lowered the room for every need.
                widest.clear();
                self.running.insert(i, self.now);
            } else {
                self.waiting.push(i);
            }
        }
    }

    /// Jobs submitted by now are placed, or wait behind those waiting.
    fn arrivals(&mut self) {
        while self
            .jobs
            .get(self.next)
            .is_some_and(|j| j.submit <= self.now)
        {
            let (i, j) = (self.next, &self.jobs[self.next]);
            let a = self.arch(i);
            if j.procs > 0 && j.procs as usize <= self.m.cols[a].len() && self.cond.fits_a_node(j) {
                if self.waiting.is_empty()
                    && self
                        .m
                        .place(i, j.procs as usize, a, self.need(i), self.max_slots)
                {
                    self.running.insert(i, self.now);
                } else {
                    self.waiting.push(i);
                }
            }
            self.next += 1;
        }
    }

    /// The machine now: the share of processors doing work.
    fn sample(&mut self) {
        self.slot_time.seen(self.m.slots.len());
        let busy: u32 = self
            .running
            .keys()
            .filter(|&&i| self.blocked[i] == 0)
            .map(|&i| self.jobs[i].procs)
            .sum();
        let slots = self.m.slots.len();
        let tau = slots.max(1) as f64;
        self.timeline.push(Sample {
            t: self.now,
            utilization: f64::from(busy) / tau * self.cond.sharing_efficiency(slots)
                / (self.m.procs.max(1) as f64),
            slots,
        });
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
