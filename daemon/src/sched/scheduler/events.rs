//! The handlers of the four events of section 4.4 (`new_processor`,
//! `processor_exit`, `new_VP`, `VP_exit`), submission and job exit, and a VP
//! moved by hand.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::{Ctx, Job, Scheduler, Vp};
use crate::sched::event::{Action, SchedError, MAX_VPS};
use crate::sched::map::{BitSet, JobKey, Processor, Row};
use crate::sched::mtat::finish_time;

impl Scheduler {
    pub(super) fn new_processor(
        &mut self,
        id: String,
        host: String,
        arch: String,
        capacity: f64,
        memory_mb: Option<u64>,
        ctx: &mut Ctx,
    ) -> Result<(), SchedError> {
        if id.is_empty() {
            return Err(SchedError::Empty("processor id"));
        }
        if arch.is_empty() {
            return Err(SchedError::Empty("architecture"));
        }
        if !(capacity.is_finite() && capacity > 0.0) {
            return Err(SchedError::BadCapacity { id, capacity });
        }
        if self.map.row_of(&id).is_some() {
            return Err(SchedError::DuplicateProcessor(id));
        }
        ctx.dirty.insert(host.clone());
        ctx.all_freed = true;
        self.memory_masks.get_mut().clear();
        self.forget_hosts();
        self.reserved = None;
        ctx.new_row = Some(self.map.add_row(Processor {
            id: id.into(),
            host: host.into(),
            arch,
            capacity,
            memory_mb,
        }));
        if !self.cfg.backfill {
            self.place_held(ctx);
            self.expand_jobs(ctx);
        }
        Ok(())
    }

    pub(super) fn processor_exit(&mut self, id: &str, ctx: &mut Ctx) -> Result<(), SchedError> {
        let row = self
            .map
            .row_of(id)
            .ok_or_else(|| SchedError::UnknownProcessor(id.to_string()))?;
        let affected: Vec<JobKey> = self
            .fair_order()
            .into_iter()
            .filter(|&k| self.job(k).rows.contains_key(&row))
            .collect();
        if let Some(p) = self.map.processor(row) {
            ctx.dirty.insert(p.host.to_string());
        }
        self.map.remove_row(row);
        self.memory_masks.get_mut().clear();
        self.forget_hosts();
        self.reserved = None;
        // A job whose chosen processors are no longer all there may go
        // anywhere.
        for j in self.jobs.iter_mut().flatten() {
            if j.only.as_ref().is_some_and(|o| o.contains(row)) {
                j.only = None;
            }
        }
        for &k in &affected {
            let j = self.job_mut(k);
            let gone = j.rows.remove(&row).unwrap_or(0);
            j.placed = j.placed.saturating_sub(gone);
            j.row_set.remove(row);
            j.t_cur.set(None);
            for v in j.vps.values_mut() {
                if v.row == Some(row) {
                    v.row = None;
                }
            }
        }
        for &k in &affected {
            if !(self.cfg.repair_in_place && self.repair_in_place(k, ctx)) {
                self.reposition(k, ctx);
            }
        }
        self.drop_empty_columns(ctx);
        if !self.cfg.backfill {
            self.expand_jobs(ctx);
            self.repack(ctx);
        }
        Ok(())
    }

    pub(super) fn submit(
        &mut self,
        job: String,
        vps: BTreeMap<String, u32>,
        memory_mb: Option<u64>,
        only: Option<Vec<String>>,
        estimate: Option<f64>,
        ctx: &mut Ctx,
    ) -> Result<(), SchedError> {
        if job.is_empty() {
            return Err(SchedError::Empty("job id"));
        }
        if let Some(e) = estimate.filter(|e| !(e.is_finite() && *e >= 0.0)) {
            return Err(SchedError::BadEstimate { job, estimate: e });
        }
        if self.job_of.contains_key(&job) {
            return Err(SchedError::DuplicateJob(job));
        }
        if vps.keys().any(String::is_empty) {
            return Err(SchedError::Empty("architecture"));
        }
        if vps.values().all(|&n| n == 0) {
            return Err(SchedError::NoVps(job));
        }
        if vps.values().map(|&n| u64::from(n)).sum::<u64>() > MAX_VPS {
            return Err(SchedError::TooManyVps(job));
        }
        let total: u32 = vps.values().sum();
        let mut j = Job::new(job.clone(), self.submitted, total, Vec::new());
        j.memory_mb = memory_mb;
        j.estimate = estimate;
        j.since = self.now;
        self.submitted += 1;
        let only = only.map(|ids| {
            let mut set = BitSet::default();
            for r in ids.iter().filter_map(|id| self.map.row_of(id)) {
                set.insert(r);
            }
            set
        });
        let mut next = 0u32;
        for (arch, &n) in &vps {
            let arch = self.map.intern(arch);
            for _ in 0..n {
                j.insert_vp(
                    next,
                    Vp {
                        arch,
                        row: None,
                        at: None,
                        held: false,
                        pinned: self.cfg.pin_new_vps,
                    },
                );
                next += 1;
            }
        }
        // A choice that leaves one of its architectures nowhere to go is
        // no choice.
        j.only = only.filter(|set| {
            j.arches.iter().all(|&(a, _)| {
                self.map
                    .arch_rows(a)
                    .is_some_and(|rows| rows.intersection_len(set) > 0)
            })
        });
        let k = match self.jobs.iter().position(Option::is_none) {
            Some(free) => {
                self.jobs[free] = Some(j);
                free as JobKey
            }
            None => {
                self.jobs.push(Some(j));
                (self.jobs.len() - 1) as JobKey
            }
        };
        self.job_of.insert(job, k);
        self.queue.push_back(k);
        if self.cfg.backfill {
            // Placed by `rebalance` at the end of the event.
            self.waiting.insert(k);
        } else {
            self.place_fresh(k, ctx);
        }
        Ok(())
    }

    /// `new_VP`: the next index, or `back`, an index the job had before;
    /// on `host` when one of its processors is a candidate.
    pub(super) fn new_vp(
        &mut self,
        job: &str,
        back: Option<u32>,
        arch: String,
        host: Option<&str>,
        ctx: &mut Ctx,
    ) -> Result<(), SchedError> {
        if arch.is_empty() {
            return Err(SchedError::Empty("architecture"));
        }
        let k = self.key(job)?;
        if self.job(k).vps.len() as u64 >= MAX_VPS {
            return Err(SchedError::TooManyVps(job.to_string()));
        }
        if let Some(vp) = back {
            let j = self.job(k);
            if vp >= j.next_vp || j.vps.contains_key(&vp) {
                return Err(SchedError::NotBack {
                    job: job.to_string(),
                    vp,
                });
            }
        }
        let arch_id = self.map.intern(&arch);
        let pinned = self.cfg.pin_new_vps;
        let j = self.job_mut(k);
        let vp = back.unwrap_or(j.next_vp);
        if back.is_none() {
            j.next_vp += 1;
        }
        j.insert_vp(
            vp,
            Vp {
                arch: arch_id,
                row: None,
                at: None,
                held: false,
                pinned,
            },
        );
        if self.job(k).suspended {
            // Held with the rest of its job until it is resumed.
            self.hold_unplaced(k, ctx);
            self.waiting.remove(&k);
            return Ok(());
        }
        if self.job(k).columns.is_empty() {
            self.place_fresh(k, ctx);
            return Ok(());
        }
        let (cand, to_host, before) = self.new_vp_candidates(k, arch_id, host);
        if cand.is_empty() && before > 0 {
            self.hold_unplaced(k, ctx);
            return Ok(());
        }
        if cand.is_empty() {
            if self.map.has_arch(&arch) {
                self.place_fresh(k, ctx);
            } else {
                self.hold_unplaced(k, ctx);
            }
            return Ok(());
        }
        self.place_new_vp(k, &cand, to_host, ctx);
        Ok(())
    }

    /// The rows a new VP of job `k` (of architecture `arch_id`) may go to:
    /// its job's candidates of that architecture, only those of `host` when
    /// it has some (then `true`: no re-planning that could put the VP
    /// elsewhere), and only on hosts whose memory holds one more of its
    /// VPs. With them, how many there were before memory was looked at.
    fn new_vp_candidates(
        &self,
        k: JobKey,
        arch_id: u32,
        host: Option<&str>,
    ) -> (Vec<Row>, bool, usize) {
        let cand: Vec<Row> = self
            .candidates(k)
            .into_iter()
            .filter(|&r| self.arch_of(r) == Some(arch_id))
            .collect();
        // A host asked for: its candidates only, and no re-planning that
        // could put the VP elsewhere.
        let on_host: Vec<Row> = match host {
            Some(h) => cand
                .iter()
                .copied()
                .filter(|&r| self.map.processor(r).is_some_and(|p| &*p.host == h))
                .collect(),
            None => Vec::new(),
        };
        let to_host = !on_host.is_empty();
        let cand = if to_host { on_host } else { cand };
        // Only hosts whose memory holds one more of its VPs; where none
        // does, the caller holds it until memory is freed.
        let before = cand.len();
        let cand = match self.memory_caps(k) {
            None => cand,
            Some(caps) => {
                let hosts = self.hosts();
                let mut own: HashMap<u32, u32> = HashMap::new();
                for (&r, &n) in &self.job(k).rows {
                    if let Some(h) = hosts.of(r) {
                        *own.entry(h).or_default() += n;
                    }
                }
                cand.iter()
                    .copied()
                    .filter(|&r| {
                        hosts
                            .of(r)
                            .is_some_and(|h| own.get(&h).copied().unwrap_or(0) < caps[h as usize])
                    })
                    .collect()
            }
        };
        (cand, to_host, before)
    }

    /// The new VP of job `k` placed among `cand` (not empty): (a) where it
    /// finishes first, without moving the others, or (b) the job's full
    /// optimum if that is strictly faster and its moves are affordable
    /// (never when `to_host`: the VP goes to the host asked for).
    fn place_new_vp(&mut self, k: JobKey, cand: &[Row], to_host: bool, ctx: &mut Ctx) {
        // (a) no migration: the new VP where it finishes first.
        let j = self.job(k);
        // Its VPs per row, by row (looked up once a candidate).
        let mut own = vec![0u32; self.map.row_capacity()];
        for (&r, &n) in &j.rows {
            if let Some(x) = own.get_mut(r) {
                *x = n;
            }
        }
        let own_of = |r: Row| own.get(r).copied().unwrap_or(0);
        let (best_row, t_here) = cand
            .iter()
            .map(|&r| (r, finish_time(own_of(r) + 1, self.cap(r))))
            .min_by(|a, b| {
                a.1.partial_cmp(&b.1)
                    .unwrap_or(std::cmp::Ordering::Equal)
                    .then((own_of(b.0) > 0).cmp(&(own_of(a.0) > 0)))
                    .then(a.0.cmp(&b.0))
            })
            .unwrap_or((cand[0], f64::INFINITY));
        let t_a = self.current_t(k).max(t_here);
        // (b) the full optimum, if it is strictly faster and affordable.
        let all = self.candidates(k);
        if let Some((t_b, counts)) = self.plan(k, &all, true, 0.0).filter(|_| !to_host) {
            if t_b < t_a * (1.0 - 1e-9) && self.optional_moves(k, &all, &counts) <= ctx.budget {
                let cols = self.job(k).columns.clone();
                self.apply(k, cols, &all, &counts, ctx);
                return;
            }
        }
        let cols = self.job(k).columns.clone();
        let rows: Vec<Row> = self
            .job(k)
            .rows
            .keys()
            .copied()
            .chain(std::iter::once(best_row))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let counts: Vec<u32> = rows
            .iter()
            .map(|r| self.job(k).rows.get(r).copied().unwrap_or(0) + u32::from(*r == best_row))
            .collect();
        self.apply(k, cols, &rows, &counts, ctx);
    }

    /// VP `vp` of `job` may be moved from now on; if it was held for want
    /// of its own processor, it is placed like any held VP.
    pub(super) fn vp_movable(
        &mut self,
        job: &str,
        vp: u32,
        ctx: &mut Ctx,
    ) -> Result<(), SchedError> {
        let k = self.key(job)?;
        let v = self
            .job_mut(k)
            .vps
            .get_mut(&vp)
            .ok_or_else(|| SchedError::UnknownVp {
                job: job.to_string(),
                vp,
            })?;
        if !std::mem::replace(&mut v.pinned, false) || v.row.is_some() || self.job(k).suspended {
            return Ok(());
        }
        self.waiting.insert(k);
        ctx.all_freed = true;
        self.place_held(ctx);
        Ok(())
    }

    pub(super) fn vp_moved(
        &mut self,
        job: &str,
        vp: u32,
        host: &str,
        ctx: &mut Ctx,
    ) -> Result<(), SchedError> {
        let k = self.key(job)?;
        self.forget_resident();
        let unknown = || SchedError::UnknownVp {
            job: job.to_string(),
            vp,
        };
        let (arch, from) = {
            let v = self.job(k).vps.get(&vp).ok_or_else(unknown)?;
            (v.arch, v.row.ok_or_else(unknown)?)
        };
        if self.map.processor(from).is_some_and(|p| &*p.host == host) {
            return Ok(());
        }
        let cols = self.job(k).columns.clone();
        let here: Vec<Row> = self
            .map
            .processors()
            .filter(|(r, p)| &*p.host == host && self.map.row_arch(*r) == Some(arch))
            .map(|(r, _)| r)
            .collect();
        let free = |r: Row| {
            cols.iter()
                .all(|&c| self.map.column(c).is_some_and(|col| col.cell(r).is_none()))
        };
        let to = here
            .iter()
            .copied()
            .find(|&r| free(r))
            .or_else(|| {
                here.iter()
                    .copied()
                    .find(|r| self.job(k).rows.contains_key(r))
            })
            .ok_or_else(|| SchedError::NoRoom {
                job: job.to_string(),
                host: host.to_string(),
            })?;
        let at = self
            .map
            .processor(to)
            .map(|p| (p.id.clone(), p.host.clone()));
        let j = self.job_mut(k);
        if let Some(v) = j.vps.get_mut(&vp) {
            v.row = Some(to);
            v.at = at;
        }
        j.t_cur.set(None);
        let added = {
            let n = j.rows.entry(to).or_default();
            *n += 1;
            *n == 1
        };
        if added {
            j.row_set.insert(to);
        }
        if let Some(o) = &mut j.only {
            o.insert(to);
        }
        let left = j.rows.get_mut(&from).map(|n| {
            *n -= 1;
            *n
        });
        if left == Some(0) {
            j.rows.remove(&from);
            j.row_set.remove(from);
        }
        for &c in &cols {
            if added {
                self.map.set(c, to, Some(k));
            }
            if left == Some(0) {
                self.map.set(c, from, None);
                ctx.freed.push(c);
            }
        }
        self.dirty_row(from, ctx);
        self.dirty_row(to, ctx);
        Ok(())
    }

    pub(super) fn vp_exit(&mut self, job: &str, vp: u32, ctx: &mut Ctx) -> Result<(), SchedError> {
        let k = self.key(job)?;
        self.forget_resident();
        let j = self.job_mut(k);
        let Some(v) = j.remove_vp(vp) else {
            return Err(SchedError::UnknownVp {
                job: job.to_string(),
                vp,
            });
        };
        if let Some(r) = v.row {
            j.t_cur.set(None);
            j.placed = j.placed.saturating_sub(1);
            let left = j.rows.get_mut(&r).map(|n| {
                *n -= 1;
                *n
            });
            if left == Some(0) {
                j.rows.remove(&r);
                j.row_set.remove(r);
                let cols = j.columns.clone();
                for c in cols {
                    self.map.set(c, r, None);
                    ctx.freed.push(c);
                }
                self.dirty_row(r, ctx);
            }
        }
        if self.job(k).vps.is_empty() {
            self.remove_job(k, ctx);
        }
        self.drop_empty_columns(ctx);
        self.room_freed(ctx);
        Ok(())
    }

    pub(super) fn job_exit(&mut self, job: &str, ctx: &mut Ctx) -> Result<(), SchedError> {
        let k = self.key(job)?;
        let j = self.job(k);
        for (&vp, v) in &j.vps {
            if let Some((processor, host)) = &v.at {
                ctx.actions.push(Action::Kill {
                    job: j.id.clone(),
                    vp,
                    processor: processor.clone(),
                    host: host.clone(),
                });
            }
        }
        self.remove_job(k, ctx);
        self.drop_empty_columns(ctx);
        self.room_freed(ctx);
        Ok(())
    }

    /// `mig suspend`: the job gives up its cells and its VPs are held where
    /// they are; it is not placed again until resumed.
    pub(super) fn suspend(&mut self, job: &str, ctx: &mut Ctx) -> Result<(), SchedError> {
        let k = self.key(job)?;
        if self.job(k).suspended {
            return Err(SchedError::Suspension {
                job: job.to_string(),
                suspended: true,
            });
        }
        self.apply(k, Vec::new(), &[], &[], ctx);
        let j = self.job_mut(k);
        j.suspended = true;
        // A held VP it had goes on being held, and said so again.
        for v in j.vps.values_mut() {
            v.held = true;
        }
        j.held = j.vps.len() as u32;
        self.waiting.remove(&k);
        self.retry.remove(&k);
        if self.reserved.as_ref().is_some_and(|r| r.job == k) {
            self.reserved = None;
        }
        self.drop_empty_columns(ctx);
        self.room_freed(ctx);
        Ok(())
    }

    /// `mig resume`: a suspended job waits for its place again, as if it
    /// had just been held (its submission order kept).
    pub(super) fn resume(&mut self, job: &str, ctx: &mut Ctx) -> Result<(), SchedError> {
        let k = self.key(job)?;
        if !self.job(k).suspended {
            return Err(SchedError::Suspension {
                job: job.to_string(),
                suspended: false,
            });
        }
        let seq = self.job(k).seq;
        self.job_mut(k).suspended = false;
        self.waiting.insert(k);
        if self.cfg.backfill {
            // Tried at this event's admission, old as it is.
            self.admitted_upto = self.admitted_upto.min(seq);
        } else {
            self.place_fresh(k, ctx);
        }
        Ok(())
    }
}
