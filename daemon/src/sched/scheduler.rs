//! The embedded scheduler: events in, actions out (seed 000, section 4.4).
//!
//! What lives here: `Scheduler` (the allocation map plus every job's VPs and
//! the fairness queue), the `Event`s it accepts and the `Action`s it returns,
//! and the handlers that combine MTAT, Expansion, Compression and re-packing.
//! What does not: carrying actions out (the daemon), reading the clock (events
//! carry no time; the slicer times the slots), or parsing input (`replay`).
//!
//! Rules the handlers follow:
//! * gang: a job's VPs sit in the same column(s) with the same VP→processor
//!   assignment in each; cells of one job only; empty columns are removed;
//! * a VP runs only on a processor of its architecture; a VP with no such
//!   processor left is held (`Action::Hold`), never lost;
//! * migrations only where MTAT says the job gets faster (or its processor
//!   left), at most `max_migrations_per_event` optional ones per event;
//! * the fairness queue starts from a different job on each event;
//! * deterministic: the same events give the same actions.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::compress::{compress_pools, fill};
use super::expand::{Demand, Expansion, RegularPattern};
use super::map::{AllocationMap, BitSet, JobKey, Processor, Row};
use super::mtat::{finish_time, mtat_pools, slots_at, t_min_by_classes};
use super::repack::{repack, Piece};

/// Something the scheduler is told.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A processor joins the pool (`new_processor`).
    NewProcessor {
        /// Unique processor id, e.g. `h1/0`.
        id: String,
        /// Owning host.
        host: String,
        /// Architecture.
        arch: String,
        /// Capacity relative to the slowest processor; positive and finite.
        capacity: f64,
    },
    /// A processor leaves the pool (`processor_exit`): its owner is back or its host died.
    ProcessorExit {
        /// The processor.
        id: String,
    },
    /// A new job with a number of VPs per architecture.
    Submit {
        /// Unique job id.
        job: String,
        /// VPs per architecture.
        vps: BTreeMap<String, u32>,
    },
    /// A running job creates one more VP (`new_VP`); it gets the next index.
    NewVp {
        /// The job.
        job: String,
        /// The new VP's architecture.
        arch: String,
    },
    /// A VP that ended comes back under its own index: its job restarts
    /// from a checkpoint taken while it ran. Placed as `new_VP` places one.
    VpBack {
        /// The job.
        job: String,
        /// The VP's index in its job (one it had and no longer has).
        vp: u32,
        /// Its architecture.
        arch: String,
    },
    /// A VP was moved by hand to `host` (`mig migrate`): its place in the
    /// map follows it, to a processor of that host that is free in the
    /// job's slots, else one the job already holds there.
    VpMoved {
        /// The job.
        job: String,
        /// The VP's index in its job.
        vp: u32,
        /// Where it runs now.
        host: String,
    },
    /// A VP ended (`VP_exit`).
    VpExit {
        /// The job.
        job: String,
        /// The VP's index in its job.
        vp: u32,
    },
    /// A whole job ended or was killed.
    JobExit {
        /// The job.
        job: String,
    },
}

/// Something the daemons must do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Start VP `vp` of `job` on `processor` of `host` (from its last
    /// checkpoint when `restore`).
    Start {
        /// Job id.
        job: Arc<str>,
        /// VP index.
        vp: u32,
        /// Architecture of the program to run.
        arch: Arc<str>,
        /// Target processor.
        processor: Arc<str>,
        /// Target host.
        host: Arc<str>,
        /// Start from the VP's checkpoint rather than fresh.
        restore: bool,
    },
    /// Move a VP (checkpoint on `from`, restart on `to`).
    Migrate {
        /// Job id.
        job: Arc<str>,
        /// VP index.
        vp: u32,
        /// Processor it is on.
        from: Arc<str>,
        /// Its host.
        from_host: Arc<str>,
        /// Processor it moves to.
        to: Arc<str>,
        /// That host.
        to_host: Arc<str>,
    },
    /// No processor of the VP's architecture can take it: keep it stopped
    /// (or checkpointed) where it is until one can. `processor` is where its
    /// process is, if it was started.
    Hold {
        /// Job id.
        job: Arc<str>,
        /// VP index.
        vp: u32,
        /// Where its process is, if it was started.
        processor: Option<Arc<str>>,
        /// That host.
        host: Option<Arc<str>>,
    },
    /// Kill a VP (its job was killed).
    Kill {
        /// Job id.
        job: Arc<str>,
        /// VP index.
        vp: u32,
        /// Where its process is.
        processor: Arc<str>,
        /// That host.
        host: Arc<str>,
    },
    /// The slot tables of these hosts changed (of every host when `all`,
    /// as when the round's length changed): fetch each with
    /// `Scheduler::host_table` and install it at the next round boundary.
    /// `slots` is the new round length; `generation` orders tables.
    SlotTables {
        /// Table generation (increases with every change).
        generation: u64,
        /// Slots per round.
        slots: usize,
        /// Every host's table changed.
        all: bool,
        /// Hosts whose table changed (with `all`: hosts that left the pool,
        /// which `host_table` no longer lists).
        hosts: Vec<String>,
    },
}

/// Input the scheduler refuses; the state is unchanged.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum SchedError {
    /// A processor id that is already in the pool.
    #[error("processor {0:?} is already in the pool")]
    DuplicateProcessor(String),
    /// A processor id the pool does not have.
    #[error("unknown processor {0:?}")]
    UnknownProcessor(String),
    /// Capacity zero, negative, infinite or NaN.
    #[error("processor {id:?}: capacity must be a positive finite number, got {capacity}")]
    BadCapacity {
        /// Processor id.
        id: String,
        /// The value given.
        capacity: f64,
    },
    /// An empty id or architecture name.
    #[error("{0} must not be empty")]
    Empty(&'static str),
    /// A job id that already exists.
    #[error("job {0:?} already exists")]
    DuplicateJob(String),
    /// A job id the scheduler does not have.
    #[error("unknown job {0:?}")]
    UnknownJob(String),
    /// A VP index the job does not have.
    #[error("job {job:?} has no VP {vp}")]
    UnknownVp {
        /// Job id.
        job: String,
        /// VP index.
        vp: u32,
    },
    /// A VP said to come back that never left, or never was.
    #[error("VP {vp} of job {job:?} cannot come back: it is still there or never was")]
    NotBack {
        /// Job id.
        job: String,
        /// VP index.
        vp: u32,
    },
    /// No processor of a host can take a VP moved there by hand.
    #[error("no processor of {host} of the VP's architecture is free in job {job:?}'s slots")]
    NoRoom {
        /// Job id.
        job: String,
        /// The host.
        host: String,
    },
    /// A submission without any VP.
    #[error("job {0:?} has no VPs")]
    NoVps(String),
    /// More VPs than one job may have.
    #[error("job {0:?} would have more than {MAX_VPS} VPs")]
    TooManyVps(String),
}

/// Most VPs one job may have (bounds the scheduler's memory per job).
pub const MAX_VPS: u64 = 1 << 20;

/// Tunables.
pub struct SchedConfig {
    /// The Expansion search.
    pub expansion: Box<dyn Expansion>,
    /// Re-pack jobs between slots after events that free space.
    pub repack: bool,
    /// Optional migrations allowed per event (expansion, compression).
    /// Migrations forced by a processor leaving do not count.
    pub max_migrations_per_event: usize,
    /// Most slots per round (the multiprogramming level). A job that would
    /// need one more slot waits (its VPs held) until space appears.
    pub max_slots: usize,
}

impl Default for SchedConfig {
    fn default() -> Self {
        SchedConfig {
            expansion: Box::new(RegularPattern),
            repack: true,
            max_migrations_per_event: 16,
            max_slots: usize::MAX,
        }
    }
}

impl std::fmt::Debug for SchedConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedConfig")
            .field("expansion", &self.expansion.name())
            .field("repack", &self.repack)
            .field("max_migrations_per_event", &self.max_migrations_per_event)
            .field("max_slots", &self.max_slots)
            .finish()
    }
}

#[derive(Debug, Clone)]
struct Vp {
    /// Interned architecture (`AllocationMap::intern`).
    arch: u32,
    /// The row it is placed on (a live processor), if any.
    row: Option<Row>,
    /// Processor and host where its process is (set once started; kept while held).
    at: Option<(Arc<str>, Arc<str>)>,
    /// A `Hold` was emitted and it has not been placed since.
    held: bool,
}

#[derive(Debug, Clone)]
struct Job {
    id: Arc<str>,
    vps: BTreeMap<u32, Vp>,
    next_vp: u32,
    /// Column ids the job occupies (round order not implied).
    columns: Vec<u64>,
    /// VPs per occupied row.
    rows: BTreeMap<Row, u32>,
    /// VPs per architecture id (no zero counts), kept by `insert_vp` and
    /// `remove_vp`.
    arches: Vec<(u32, u32)>,
    /// `current_t`, once computed; cleared wherever `rows` changes.
    t_cur: Cell<Option<f64>>,
    /// The keys of `rows` as a set, kept wherever `rows` changes.
    row_set: BitSet,
    /// The sum of `rows`: VPs placed, kept wherever `rows` changes.
    placed: u32,
}

impl Job {
    fn new(id: String, next_vp: u32, columns: Vec<u64>) -> Self {
        Job {
            id: id.into(),
            vps: BTreeMap::new(),
            next_vp,
            columns,
            rows: BTreeMap::new(),
            arches: Vec::new(),
            t_cur: Cell::new(None),
            row_set: BitSet::default(),
            placed: 0,
        }
    }

    fn insert_vp(&mut self, i: u32, vp: Vp) {
        match self.arches.iter_mut().find(|(a, _)| *a == vp.arch) {
            Some(e) => e.1 += 1,
            None => self.arches.push((vp.arch, 1)),
        }
        if let Some(old) = self.vps.insert(i, vp) {
            self.uncount(old.arch);
        }
    }

    fn remove_vp(&mut self, i: u32) -> Option<Vp> {
        let vp = self.vps.remove(&i)?;
        self.uncount(vp.arch);
        Some(vp)
    }

    fn uncount(&mut self, arch: u32) {
        if let Some(p) = self.arches.iter().position(|(a, _)| *a == arch) {
            self.arches[p].1 -= 1;
            if self.arches[p].1 == 0 {
                self.arches.swap_remove(p);
            }
        }
    }
}

/// One cell of a host's slot table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableCell {
    /// The processor (on this host).
    pub processor: String,
    /// The job holding it in this slot.
    pub job: String,
    /// That job's VPs on this processor.
    pub vps: Vec<u32>,
}

/// A read-only view of a job, for status and output.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobView {
    /// Job id.
    pub id: String,
    /// Architecture of every VP.
    pub vps: BTreeMap<u32, String>,
    /// Processor of every placed VP.
    pub placement: BTreeMap<u32, String>,
    /// VPs held for lack of a processor of their architecture.
    pub waiting: Vec<u32>,
    /// Slots (positions in the round) the job runs in.
    pub slots: Vec<usize>,
    /// `max_i n_i / a_i` of its current assignment (per slot it runs in).
    pub t_min: f64,
}

/// MTAT's input for one job on a set of rows (see `Scheduler::pool_input`).
struct PoolInput {
    counts: Vec<u32>,
    pool_of: Vec<usize>,
    caps: Vec<f64>,
    current: Vec<u32>,
    preferred: Vec<bool>,
}

impl PoolInput {
    /// Every pool filled by `t`, keeping current VPs where `t` allows.
    fn fill(&self, t: f64) -> Option<Vec<u32>> {
        if let [x] = self.counts[..] {
            if self.pool_of.iter().all(|&z| z == 0) {
                return fill(x, &self.caps, t, &self.current, &[]);
            }
        }
        let mut out = vec![0; self.caps.len()];
        for (z, &x) in self.counts.iter().enumerate() {
            let members: Vec<usize> = (0..self.caps.len())
                .filter(|&i| self.pool_of[i] == z)
                .collect();
            let pc: Vec<f64> = members.iter().map(|&i| self.caps[i]).collect();
            let cur: Vec<u32> = members.iter().map(|&i| self.current[i]).collect();
            let got = fill(x, &pc, t, &cur, &[])?;
            for (q, &i) in members.iter().enumerate() {
                out[i] = got[q];
            }
        }
        Some(out)
    }
}

/// Per-event bookkeeping.
struct Ctx {
    actions: Vec<Action>,
    /// Hosts named directly (a processor joined or left there).
    dirty: BTreeSet<String>,
    /// Rows whose cells changed (resolved to hosts once, at the end).
    dirty_rows: Vec<Row>,
    all_dirty: bool,
    budget: usize,
    /// Columns where cells were freed during the event.
    freed: Vec<u64>,
    /// Every column gained a free cell (a processor joined).
    all_freed: bool,
    /// The row that joined, if one did.
    new_row: Option<Row>,
}

/// The scheduler state. See the module doc.
pub struct Scheduler {
    map: AllocationMap,
    jobs: Vec<Option<Job>>,
    job_of: HashMap<String, JobKey>,
    queue: VecDeque<JobKey>,
    cfg: SchedConfig,
    generation: u64,
    migrations: u64,
    /// Jobs that could get faster but the migration budget ran out.
    retry: BTreeSet<JobKey>,
    /// Jobs with VPs that have no processor.
    waiting: BTreeSet<JobKey>,
}

impl Default for Scheduler {
    fn default() -> Self {
        Scheduler::new(SchedConfig::default())
    }
}

impl Scheduler {
    /// An empty pool.
    pub fn new(cfg: SchedConfig) -> Self {
        Scheduler {
            map: AllocationMap::default(),
            jobs: Vec::new(),
            job_of: HashMap::new(),
            queue: VecDeque::new(),
            cfg,
            generation: 0,
            migrations: 0,
            retry: BTreeSet::new(),
            waiting: BTreeSet::new(),
        }
    }

    /// The allocation map.
    pub fn map(&self) -> &AllocationMap {
        &self.map
    }

    /// Migrations ordered so far.
    pub fn migrations(&self) -> u64 {
        self.migrations
    }

    /// Slot-table generation (bumped whenever a table changes).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The config.
    pub fn config(&self) -> &SchedConfig {
        &self.cfg
    }

    fn job(&self, k: JobKey) -> &Job {
        self.jobs[k as usize]
            .as_ref()
            .expect("job key refers to a live job")
    }

    fn job_mut(&mut self, k: JobKey) -> &mut Job {
        self.jobs[k as usize]
            .as_mut()
            .expect("job key refers to a live job")
    }

    fn key(&self, job: &str) -> Result<JobKey, SchedError> {
        self.job_of
            .get(job)
            .copied()
            .ok_or_else(|| SchedError::UnknownJob(job.to_string()))
    }

    /// Job ids in fairness-queue order.
    pub fn job_ids(&self) -> Vec<String> {
        self.queue
            .iter()
            .map(|&k| self.job(k).id.to_string())
            .collect()
    }

    /// A view of one job.
    pub fn job_view(&self, job: &str) -> Option<JobView> {
        let k = *self.job_of.get(job)?;
        let j = self.job(k);
        let mut slots: Vec<usize> = j
            .columns
            .iter()
            .filter_map(|&c| self.map.position(c))
            .collect();
        slots.sort_unstable();
        Some(JobView {
            id: j.id.to_string(),
            vps: j
                .vps
                .iter()
                .map(|(&i, v)| (i, self.map.arch_name(v.arch).to_string()))
                .collect(),
            placement: j
                .vps
                .iter()
                .filter_map(|(&i, v)| {
                    v.row
                        .and_then(|r| self.map.processor(r))
                        .map(|p| (i, p.id.to_string()))
                })
                .collect(),
            waiting: j
                .vps
                .iter()
                .filter(|(_, v)| v.row.is_none())
                .map(|(&i, _)| i)
                .collect(),
            slots,
            t_min: self.current_t(k),
        })
    }

    /// For every job: its id, the slots it runs in, `max n_r / a_r` of its
    /// assignment, and whether some of its VPs wait for a processor. What a
    /// simulator needs to advance jobs, without building views.
    pub fn job_shares(&self) -> Vec<(&str, usize, f64, bool)> {
        self.queue
            .iter()
            .map(|&k| {
                let j = self.job(k);
                (
                    &*j.id,
                    j.columns.len(),
                    self.current_t(k),
                    j.placed as usize != j.vps.len(),
                )
            })
            .collect()
    }

    /// The slot table of `host`: for each slot of the round, the cells of its
    /// processors that hold a job, with that job's VPs there.
    pub fn host_table(&self, host: &str) -> Vec<Vec<TableCell>> {
        self.cells_where(|p| &*p.host == host)
    }

    /// The whole map as slot tables (every processor).
    pub fn table(&self) -> Vec<Vec<TableCell>> {
        self.cells_where(|_| true)
    }

    fn cells_where(&self, keep: impl Fn(&Processor) -> bool) -> Vec<Vec<TableCell>> {
        let rows: Vec<(Row, &Processor)> = self.map.processors().filter(|(_, p)| keep(p)).collect();
        self.map
            .columns()
            .iter()
            .map(|c| {
                rows.iter()
                    .filter_map(|&(r, p)| {
                        let k = c.cell(r)?;
                        let j = self.job(k);
                        let vps = j
                            .vps
                            .iter()
                            .filter(|(_, v)| v.row == Some(r))
                            .map(|(&i, _)| i)
                            .collect();
                        Some(TableCell {
                            processor: p.id.to_string(),
                            job: j.id.to_string(),
                            vps,
                        })
                    })
                    .collect()
            })
            .collect()
    }

    /// Handle one event. On error nothing changed.
    pub fn on_event(&mut self, event: Event) -> Result<Vec<Action>, SchedError> {
        let mut ctx = Ctx {
            actions: Vec::new(),
            dirty: BTreeSet::new(),
            dirty_rows: Vec::new(),
            all_dirty: false,
            budget: self.cfg.max_migrations_per_event,
            freed: Vec::new(),
            all_freed: false,
            new_row: None,
        };
        let columns_before = self.map.columns().len();
        match event {
            Event::NewProcessor {
                id,
                host,
                arch,
                capacity,
            } => self.new_processor(id, host, arch, capacity, &mut ctx)?,
            Event::ProcessorExit { id } => self.processor_exit(&id, &mut ctx)?,
            Event::Submit { job, vps } => self.submit(job, vps, &mut ctx)?,
            Event::NewVp { job, arch } => self.new_vp(&job, None, arch, &mut ctx)?,
            Event::VpBack { job, vp, arch } => self.new_vp(&job, Some(vp), arch, &mut ctx)?,
            Event::VpMoved { job, vp, host } => self.vp_moved(&job, vp, &host, &mut ctx)?,
            Event::VpExit { job, vp } => self.vp_exit(&job, vp, &mut ctx)?,
            Event::JobExit { job } => self.job_exit(&job, &mut ctx)?,
        }
        if self.map.columns().len() != columns_before {
            ctx.all_dirty = true;
        }
        if ctx.all_dirty || !ctx.dirty.is_empty() || !ctx.dirty_rows.is_empty() {
            self.generation += 1;
            let mut hosts = ctx.dirty;
            if !ctx.all_dirty {
                ctx.dirty_rows.sort_unstable();
                ctx.dirty_rows.dedup();
                for r in ctx.dirty_rows {
                    if let Some(p) = self.map.processor(r) {
                        if !hosts.contains(&*p.host) {
                            hosts.insert(p.host.to_string());
                        }
                    }
                }
            }
            ctx.actions.push(Action::SlotTables {
                generation: self.generation,
                slots: self.map.columns().len(),
                all: ctx.all_dirty,
                hosts: hosts.into_iter().collect(),
            });
        }
        self.queue.rotate_left(usize::from(!self.queue.is_empty()));
        Ok(ctx.actions)
    }

    // ----- events ---------------------------------------------------------

    fn new_processor(
        &mut self,
        id: String,
        host: String,
        arch: String,
        capacity: f64,
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
        ctx.new_row = Some(self.map.add_row(Processor {
            id: id.into(),
            host: host.into(),
            arch,
            capacity,
        }));
        self.place_held(ctx);
        self.expand_jobs(ctx);
        Ok(())
    }

    fn processor_exit(&mut self, id: &str, ctx: &mut Ctx) -> Result<(), SchedError> {
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
            self.reposition(k, ctx);
        }
        self.drop_empty_columns(ctx);
        self.expand_jobs(ctx);
        self.repack(ctx);
        Ok(())
    }

    fn submit(
        &mut self,
        job: String,
        vps: BTreeMap<String, u32>,
        ctx: &mut Ctx,
    ) -> Result<(), SchedError> {
        if job.is_empty() {
            return Err(SchedError::Empty("job id"));
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
        let mut j = Job::new(job.clone(), total, Vec::new());
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
                    },
                );
                next += 1;
            }
        }
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
        self.place_fresh(k, ctx);
        Ok(())
    }

    /// `new_VP`: the next index, or `back`, an index the job had before.
    fn new_vp(
        &mut self,
        job: &str,
        back: Option<u32>,
        arch: String,
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
            },
        );
        if self.job(k).columns.is_empty() {
            self.place_fresh(k, ctx);
            return Ok(());
        }
        let cand: Vec<Row> = self
            .candidates(k)
            .into_iter()
            .filter(|&r| self.arch_of(r) == Some(arch_id))
            .collect();
        if cand.is_empty() {
            if self.map.has_arch(&arch) {
                self.place_fresh(k, ctx);
            } else {
                self.hold_unplaced(k, ctx);
            }
            return Ok(());
        }
        // (a) no migration: the new VP where it finishes first.
        let j = self.job(k);
        let (best_row, t_here) = cand
            .iter()
            .map(|&r| {
                let n = j.rows.get(&r).copied().unwrap_or(0) + 1;
                (r, finish_time(n, self.cap(r)))
            })
            .min_by(|a, b| {
                a.1.partial_cmp(&b.1)
                    .unwrap_or(std::cmp::Ordering::Equal)
                    .then(j.rows.contains_key(&b.0).cmp(&j.rows.contains_key(&a.0)))
                    .then(a.0.cmp(&b.0))
            })
            .unwrap_or((cand[0], f64::INFINITY));
        let t_a = self.current_t(k).max(t_here);
        // (b) the full optimum, if it is strictly faster and affordable.
        let all = self.candidates(k);
        if let Some((t_b, counts)) = self.plan(k, &all, true, 0.0) {
            if t_b < t_a * (1.0 - 1e-9) && self.optional_moves(k, &all, &counts) <= ctx.budget {
                let cols = self.job(k).columns.clone();
                self.apply(k, cols, &all, &counts, ctx);
                return Ok(());
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
        Ok(())
    }

    fn vp_moved(
        &mut self,
        job: &str,
        vp: u32,
        host: &str,
        ctx: &mut Ctx,
    ) -> Result<(), SchedError> {
        let k = self.key(job)?;
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

    fn vp_exit(&mut self, job: &str, vp: u32, ctx: &mut Ctx) -> Result<(), SchedError> {
        let k = self.key(job)?;
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
        self.place_held(ctx);
        self.expand_jobs(ctx);
        self.repack(ctx);
        Ok(())
    }

    fn job_exit(&mut self, job: &str, ctx: &mut Ctx) -> Result<(), SchedError> {
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
        self.place_held(ctx);
        self.expand_jobs(ctx);
        self.repack(ctx);
        Ok(())
    }

    // ----- the algorithms, applied ------------------------------------------

    fn fair_order(&self) -> Vec<JobKey> {
        self.queue.iter().copied().collect()
    }

    fn arch_of(&self, r: Row) -> Option<u32> {
        self.map.row_arch(r)
    }

    fn cap(&self, r: Row) -> f64 {
        self.map.row_capacity_of(r)
    }

    fn dirty_row(&self, r: Row, ctx: &mut Ctx) {
        ctx.dirty_rows.push(r);
    }

    /// `max n_r / a_r` of the job's current placement.
    fn current_t(&self, k: JobKey) -> f64 {
        let j = self.job(k);
        if let Some(t) = j.t_cur.get() {
            return t;
        }
        let t = j
            .rows
            .iter()
            .map(|(&r, &n)| finish_time(n, self.cap(r)))
            .fold(0.0, f64::max);
        j.t_cur.set(Some(t));
        t
    }

    /// Rows the job may use inside its own columns: its rows plus rows free in
    /// all its columns, of the architectures it has VPs of.
    fn candidates(&self, k: JobKey) -> Vec<Row> {
        self.candidate_set(k).to_vec()
    }

    /// `candidates` as a set.
    fn candidate_set(&self, k: JobKey) -> BitSet {
        let mut set = self.free_candidates(k);
        set.union_with(&self.job(k).row_set);
        set
    }

    /// Rows free in all the job's columns, of its architectures (the
    /// candidates it does not hold already).
    fn free_candidates(&self, k: JobKey) -> BitSet {
        let j = self.job(k);
        let mut set: BitSet = self.map.free_in_all(&j.columns);
        let mut wanted = BitSet::default();
        for &(a, _) in &j.arches {
            if let Some(rows) = self.map.arch_rows(a) {
                wanted.union_with(rows);
            }
        }
        set.intersect_with(&wanted);
        set
    }

    /// The MTAT input for the job's VPs on `rows`: VPs per architecture
    /// pool, each row's pool, capacity and current VPs. Architectures with no
    /// row among `rows` are left out (their VPs are held).
    fn pool_input(&self, k: JobKey, rows: &[Row]) -> Option<PoolInput> {
        let j = self.job(k);
        // Architectures with a row among `rows`, and the job's VPs of each.
        let mut arches: Vec<(u32, u32)> = Vec::new();
        let mut pool_of = Vec::with_capacity(rows.len());
        let mut caps = Vec::with_capacity(rows.len());
        let mut current = Vec::with_capacity(rows.len());
        for &r in rows {
            let a = self.arch_of(r).unwrap_or(u32::MAX);
            if !arches.iter().any(|&(x, _)| x == a) {
                arches.push((a, 0));
            }
            caps.push(self.cap(r));
            current.push(j.rows.get(&r).copied().unwrap_or(0));
        }
        for &(a, n) in &j.arches {
            if let Some(e) = arches.iter_mut().find(|(x, _)| *x == a) {
                e.1 = n;
            }
        }
        // Pools in architecture order, those the job has VPs of.
        arches.retain(|&(_, n)| n > 0);
        if arches.is_empty() {
            return None;
        }
        arches.sort_unstable();
        for &r in rows {
            let a = self.arch_of(r).unwrap_or(u32::MAX);
            pool_of.push(
                arches
                    .iter()
                    .position(|&(x, _)| x == a)
                    .unwrap_or(usize::MAX),
            );
        }
        Some(PoolInput {
            counts: arches.iter().map(|&(_, n)| n).collect(),
            pool_of,
            caps,
            preferred: current.iter().map(|&n| n > 0).collect(),
            current,
        })
    }

    /// MTAT and then Compression (fewest processors) and/or a fill that keeps
    /// VPs where they are by `max(T, keep_t)` — so a caller passing the job's
    /// current turnaround moves no VP that need not move.
    fn plan_both(&self, k: JobKey, rows: &[Row], keep_t: f64) -> Option<(f64, Vec<u32>, Vec<u32>)> {
        let inp = self.pool_input(k, rows)?;
        let m = mtat_pools(&inp.counts, &inp.pool_of, &inp.caps, &inp.preferred);
        if !m.t_min.is_finite() {
            return None;
        }
        let compressed =
            compress_pools(&inp.counts, &inp.pool_of, &inp.caps, m.t_min, &inp.current)?;
        let minimal = inp.fill(m.t_min.max(keep_t))?;
        Some((m.t_min, compressed, minimal))
    }

    /// MTAT and Compression for the job's VPs on `rows`: `T` and VPs per row
    /// (parallel to `rows`), or the fill by `T` when not `compressed`.
    fn plan(
        &self,
        k: JobKey,
        rows: &[Row],
        compressed: bool,
        keep_t: f64,
    ) -> Option<(f64, Vec<u32>)> {
        let inp = self.pool_input(k, rows)?;
        let m = mtat_pools(&inp.counts, &inp.pool_of, &inp.caps, &inp.preferred);
        if !m.t_min.is_finite() {
            return None;
        }
        let out = if compressed {
            compress_pools(&inp.counts, &inp.pool_of, &inp.caps, m.t_min, &inp.current)?
        } else {
            inp.fill(m.t_min.max(keep_t))?
        };
        Some((m.t_min, out))
    }

    /// Started VPs that `counts` on `rows` would move, beyond those that must
    /// move anyway because their processor left.
    /// `rows` is sorted (as `candidates` returns it).
    fn optional_moves(&self, k: JobKey, rows: &[Row], counts: &[u32]) -> usize {
        let j = self.job(k);
        j.rows
            .iter()
            .map(|(r, &have)| {
                let keep = rows
                    .binary_search(r)
                    .ok()
                    .and_then(|i| counts.get(i))
                    .copied()
                    .unwrap_or(0);
                have.saturating_sub(keep) as usize
            })
            .sum()
    }

    /// Put the job in `columns` with `counts[i]` VPs on `rows[i]`: frees its
    /// old cells, moves as few VPs as it can, and emits Start/Migrate/Hold.
    fn apply(&mut self, k: JobKey, columns: Vec<u64>, rows: &[Row], counts: &[u32], ctx: &mut Ctx) {
        // A job already held whole that gets nowhere again: nothing changes
        // (the common case of a job waiting at the slot cap).
        {
            let j = self.job(k);
            if j.rows.is_empty()
                && j.columns.is_empty()
                && counts.iter().all(|&n| n == 0)
                && j.vps.values().all(|v| v.held && v.row.is_none())
            {
                if j.vps.is_empty() {
                    self.waiting.remove(&k);
                } else {
                    self.waiting.insert(k);
                }
                self.drop_empty_columns(ctx);
                return;
            }
        }
        let (old_cols, old_rows): (Vec<u64>, Vec<Row>) = {
            let j = self.job(k);
            (j.columns.clone(), j.rows.keys().copied().collect())
        };
        for &c in &old_cols {
            for &r in &old_rows {
                self.map.set(c, r, None);
            }
        }
        let same_columns = {
            let mut a = old_cols.clone();
            let mut b = columns.clone();
            a.sort_unstable();
            b.sort_unstable();
            a == b
        };
        // Which VPs stay, which move, where the deficits are (dense by row:
        // jobs can span thousands of rows).
        let width = self.map.row_capacity();
        let mut want = vec![0u32; width];
        let mut target_rows: Vec<Row> = Vec::with_capacity(rows.len());
        for (&r, &n) in rows.iter().zip(counts) {
            if r < width && n > 0 {
                want[r] = n;
                target_rows.push(r);
            }
        }
        target_rows.sort_unstable();
        target_rows.dedup();
        let mut kept = vec![0u32; width];
        // VPs that must find a row: (index, architecture, placed before).
        let mut movers: Vec<(u32, u32, bool)> = Vec::new();
        {
            let j = self.job(k);
            for (&i, v) in &j.vps {
                match v.row {
                    Some(r) if r < width && kept[r] < want[r] => kept[r] += 1,
                    _ => movers.push((i, v.arch, v.row.is_some() || v.at.is_some())),
                }
            }
        }
        // Place movers in row order, each on a row of its architecture;
        // placed movers first so that new or held VPs fill what is left.
        let mut queues: BTreeMap<u32, VecDeque<u32>> = BTreeMap::new();
        for placed in [true, false] {
            for &(i, arch, was) in &movers {
                if was == placed {
                    queues.entry(arch).or_default().push_back(i);
                }
            }
        }
        let mut assignments: Vec<(u32, Row)> = Vec::new();
        for &r in &target_rows {
            let Some(q) = self.arch_of(r).and_then(|a| queues.get_mut(&a)) else {
                continue;
            };
            for _ in kept[r]..want[r] {
                if let Some(i) = q.pop_front() {
                    assignments.push((i, r));
                }
            }
        }
        let queue: Vec<u32> = queues.into_values().flatten().collect();
        let job_id = self.job(k).id.clone();
        for (i, r) in assignments {
            let Some(p) = self.map.processor(r) else {
                continue;
            };
            ctx.dirty_rows.push(r);
            let Some(v) = self.jobs[k as usize]
                .as_mut()
                .and_then(|j| j.vps.get_mut(&i))
            else {
                continue;
            };
            let start = |job: &Arc<str>| Action::Start {
                job: job.clone(),
                vp: i,
                arch: self.map.arch_shared(v.arch),
                processor: p.id.clone(),
                host: p.host.clone(),
                restore: false,
            };
            let action = match v.at.take() {
                // A held VP back on the processor it is on: just resume it.
                Some(at) if at.0 == p.id => {
                    let action = start(&job_id);
                    v.at = if at.1 == p.host {
                        Some(at)
                    } else {
                        Some((at.0, p.host.clone()))
                    };
                    action
                }
                Some((from, from_host)) => {
                    self.migrations += 1;
                    ctx.budget = ctx.budget.saturating_sub(1);
                    v.at = Some((p.id.clone(), p.host.clone()));
                    Action::Migrate {
                        job: job_id.clone(),
                        vp: i,
                        from,
                        from_host,
                        to: p.id.clone(),
                        to_host: p.host.clone(),
                    }
                }
                None => {
                    let action = start(&job_id);
                    v.at = Some((p.id.clone(), p.host.clone()));
                    action
                }
            };
            ctx.actions.push(action);
            v.row = Some(r);
            v.held = false;
        }
        // VPs left without a row are held (said once, until placed again).
        for i in queue {
            let v = self.job_mut(k).vps.get_mut(&i).expect("vp exists");
            v.row = None;
            if !v.held {
                v.held = true;
                let at = v.at.clone();
                ctx.actions.push(Action::Hold {
                    job: job_id.clone(),
                    vp: i,
                    processor: at.as_ref().map(|a| a.0.clone()),
                    host: at.map(|a| a.1),
                });
            }
        }
        // Rebuild the job's rows and cells.
        let mut new_rows: BTreeMap<Row, u32> = BTreeMap::new();
        for v in self.job(k).vps.values() {
            if let Some(r) = v.row {
                *new_rows.entry(r).or_default() += 1;
            }
        }
        // `self.job(k).rows` still holds the old counts here.
        for &r in old_rows.iter().chain(new_rows.keys()) {
            if !same_columns || self.job(k).rows.get(&r) != new_rows.get(&r) {
                self.dirty_row(r, ctx);
            }
        }
        let lost_a_row = old_rows.iter().any(|r| !new_rows.contains_key(r));
        for &c in &old_cols {
            if lost_a_row || !columns.contains(&c) {
                ctx.freed.push(c);
            }
        }
        let placed: u32 = new_rows.values().sum();
        if placed as usize == self.job(k).vps.len() {
            self.waiting.remove(&k);
        } else {
            self.waiting.insert(k);
        }
        let columns = if new_rows.is_empty() {
            Vec::new()
        } else {
            columns
        };
        for &c in &columns {
            for &r in new_rows.keys() {
                self.map.set(c, r, Some(k));
            }
        }
        let j = self.job_mut(k);
        j.row_set = BitSet::default();
        for &r in new_rows.keys() {
            j.row_set.insert(r);
        }
        j.placed = new_rows.values().sum();
        j.rows = new_rows;
        j.t_cur.set(None);
        j.columns = columns;
        self.drop_empty_columns(ctx);
    }

    /// Emit Hold for VPs without a row that were not held before.
    fn hold_unplaced(&mut self, k: JobKey, ctx: &mut Ctx) {
        self.waiting.insert(k);
        let j = self.jobs[k as usize]
            .as_mut()
            .expect("job key refers to a live job");
        for (&i, v) in j.vps.iter_mut() {
            if v.row.is_none() && !v.held {
                v.held = true;
                ctx.actions.push(Action::Hold {
                    job: j.id.clone(),
                    vp: i,
                    processor: v.at.as_ref().map(|a| a.0.clone()),
                    host: v.at.as_ref().map(|a| a.1.clone()),
                });
            }
        }
    }

    /// Place a job as if submitted now (seed 000 section 4.4.1): MTAT on a new
    /// slot vs. the Expansion pattern, then Compression. Section 4.3 compares
    /// the turnaround in a new slot, "T_min / τ" of the round, with the
    /// pattern's; we compare wall-clock turnarounds: `T_new · (τ + 1)` in a new
    /// slot (the round grows by one) against `T_free · τ / w` in a pattern of
    /// `w` of the `τ` existing slots. Its own cells count
    /// as free; its VPs prefer the processors they are on.
    fn place_fresh(&mut self, k: JobKey, ctx: &mut Ctx) {
        // Release its cells first.
        let (old_cols, old_rows): (Vec<u64>, Vec<Row>) = {
            let j = self.job(k);
            (j.columns.clone(), j.rows.keys().copied().collect())
        };
        for &c in &old_cols {
            for &r in &old_rows {
                self.map.set(c, r, None);
                self.dirty_row(r, ctx);
            }
            ctx.freed.push(c);
        }
        self.job_mut(k).columns.clear();
        let demand = Demand::new(&self.map, self.job(k).arches.iter().copied());
        if demand.counts.is_empty() {
            self.apply(k, Vec::new(), &[], &[], ctx);
            self.drop_empty_columns(ctx);
            return;
        }
        let all: Vec<Row> = demand.rows.to_vec();
        // The turnaround in a slot of its own: on the whole pool, from its
        // capacity classes.
        let t_new = demand
            .counts
            .iter()
            .map(|&(a, x)| t_min_by_classes(x, &self.map.arch_capacities(a)))
            .fold(0.0, f64::max);
        if !t_new.is_finite() {
            self.apply(k, Vec::new(), &[], &[], ctx);
            return;
        }
        let pattern = self.cfg.expansion.find(&self.map, &demand);
        let at_cap = self.map.columns().len() >= self.cfg.max_slots;
        let choice = pattern.and_then(|p| {
            let covers = demand
                .counts
                .iter()
                .all(|&(a, _)| p.rows.iter().any(|&r| self.arch_of(r) == Some(a)));
            if !covers {
                return None;
            }
            // Wall-clock turnaround: a job in w of tau slots runs w/tau of the
            // time; a new slot makes the round tau + 1 long for everyone.
            // At the slot cap there is no new slot: the pattern must then be
            // as fast per slot as a slot of its own (the paper's T_free <= T_min).
            let tau = self.map.columns().len() as f64;
            let w = p.columns.len() as f64;
            // A pattern that cannot even finish by a bound a little above the
            // one it must meet is out without running MTAT on it.
            let bound = if at_cap {
                t_new * w
            } else {
                t_new * (tau + 1.0) / tau * w
            };
            if !self.can_finish_by(&demand, &p.rows, bound * (1.0 + 1e-6)) {
                return None;
            }
            let (t_p, counts) = self.plan(k, &p.rows, true, 0.0)?;
            let fits = if at_cap {
                t_p / w <= t_new * (1.0 + 1e-9)
            } else {
                t_p * tau / w <= t_new * (tau + 1.0) * (1.0 + 1e-9)
            };
            fits.then_some((p.columns, p.rows, counts))
        });
        let (columns, rows, counts) = match choice {
            Some(c) => c,
            None if at_cap => {
                self.apply(k, Vec::new(), &[], &[], ctx);
                return;
            }
            None => {
                let id = self.map.push_column();
                ctx.all_dirty = true;
                // MTAT on `all` gave `t_new` (cached or just now): compress to it.
                let counts = self
                    .pool_input(k, &all)
                    .and_then(|inp| {
                        compress_pools(&inp.counts, &inp.pool_of, &inp.caps, t_new, &inp.current)
                    })
                    .unwrap_or_default();
                (vec![id], all, counts)
            }
        };
        self.apply(k, columns, &rows, &counts, ctx);
        self.drop_empty_columns(ctx);
    }

    /// A job lost a processor (or gained a VP that does not fit): MTAT and
    /// Compression within its columns (section 4.4.3), or a fresh placement if
    /// an architecture it needs has no room there but exists elsewhere.
    fn reposition(&mut self, k: JobKey, ctx: &mut Ctx) {
        let cand = self.candidates(k);
        let needs_elsewhere = {
            let j = self.job(k);
            j.arches.iter().any(|&(a, _)| {
                !cand.iter().any(|&r| self.arch_of(r) == Some(a))
                    && self.map.arch_rows(a).is_some_and(|rows| !rows.is_empty())
            })
        };
        if needs_elsewhere || self.job(k).columns.is_empty() {
            self.place_fresh(k, ctx);
            return;
        }
        let cols = self.job(k).columns.clone();
        match self.plan_both(k, &cand, self.current_t(k)) {
            Some((_, compressed, minimal)) => {
                let extra = self.optional_moves(k, &cand, &compressed);
                let counts = if extra <= ctx.budget {
                    compressed
                } else {
                    minimal
                };
                self.apply(k, cols, &cand, &counts, ctx);
            }
            None => self.apply(k, cols, &[], &[], ctx),
        }
    }

    /// Held VPs whose architecture is back: place them (fairness order).
    fn place_held(&mut self, ctx: &mut Ctx) {
        if self.waiting.is_empty() {
            return;
        }
        // A job waiting at the slot cap can only start where cells were freed.
        let room =
            !ctx.freed.is_empty() || ctx.all_freed || self.map.columns().len() < self.cfg.max_slots;
        for k in self.fair_order() {
            if !self.waiting.contains(&k) || (!room && self.job(k).columns.is_empty()) {
                continue;
            }
            let j = self.job(k);
            if j.vps.values().any(|v| {
                v.row.is_none() && self.map.arch_rows(v.arch).is_some_and(|r| !r.is_empty())
            }) {
                self.reposition(k, ctx);
                // At the slot cap, jobs wait in queue order: stop at the first
                // that still finds no room.
                if self.job(k).columns.is_empty() && self.map.columns().len() >= self.cfg.max_slots
                {
                    break;
                }
            }
        }
    }

    /// Offer free cells to jobs that get faster with them (section 4.4.2),
    /// starting from the head of the fairness queue.
    fn expand_jobs(&mut self, ctx: &mut Ctx) {
        ctx.freed.sort_unstable();
        ctx.freed.dedup();
        for k in self.fair_order() {
            if ctx.budget == 0 || !self.map.has_free_cells() {
                break;
            }
            let j = self.job(k);
            if j.columns.is_empty() {
                continue;
            }
            // Only free cells that are new (or a job the budget cut off last
            // time) can change a job's answer.
            let retry = self.retry.contains(&k);
            let freed_here = j.columns.iter().any(|c| ctx.freed.binary_search(c).is_ok());
            if !(ctx.all_freed || retry || freed_here) {
                continue;
            }
            // A joining processor helps only if a VP finishes there sooner
            // than the job does now (and it has the job's architecture).
            let t_cur = self.current_t(k);
            if let (Some(r), false, false) = (ctx.new_row, retry, freed_here) {
                let arch = self.arch_of(r);
                let fits = j.arches.iter().any(|&(a, _)| Some(a) == arch);
                if !fits || finish_time(1, self.cap(r)) >= t_cur * (1.0 - 1e-9) {
                    continue;
                }
            }
            self.retry.remove(&k);
            let mut set = self.free_candidates(k);
            if set.is_empty() || !self.could_beat(k, &set, t_cur) {
                continue;
            }
            set.union_with(&self.job(k).row_set);
            let cand: Vec<Row> = set.to_vec();
            let Some((t_new, counts)) = self.plan(k, &cand, true, 0.0) else {
                continue;
            };
            if t_new < t_cur * (1.0 - 1e-9) {
                let moves = self.optional_moves(k, &cand, &counts);
                if moves <= ctx.budget {
                    let cols = self.job(k).columns.clone();
                    self.apply(k, cols, &cand, &counts, ctx);
                } else if moves <= self.cfg.max_migrations_per_event {
                    // Cut off by what this event already spent: next time.
                    self.retry.insert(k);
                }
            }
        }
    }

    /// Could the job finish strictly before `t` on its own rows plus `free`?
    /// Every architecture pool must hold its VPs with each processor
    /// finishing before `t`: `sum ceil(t a_r) - 1 >= X_z`. The free rows are
    /// counted per capacity class (a popcount each), not one by one: it
    /// spares MTAT for the many jobs that cannot get faster.
    fn could_beat(&self, k: JobKey, free: &BitSet, t: f64) -> bool {
        let bound = t * (1.0 - 1e-9);
        // Whole VPs finishing strictly before the bound: ceil(y) - 1, with
        // casts rather than libm calls.
        let before = |a: f64| -> u64 {
            let y = bound * a;
            if y > 1.0 {
                let whole = y as u64;
                if whole as f64 == y {
                    whole - 1
                } else {
                    whole
                }
            } else {
                0
            }
        };
        let j = self.job(k);
        j.arches.iter().all(|&(arch, x)| {
            let mut room: u64 = j
                .rows
                .keys()
                .filter(|&&r| self.arch_of(r) == Some(arch))
                .map(|&r| before(self.cap(r)))
                .sum();
            for (a, rows) in self.map.capacity_classes(arch) {
                if room >= u64::from(x) {
                    break;
                }
                room = room
                    .saturating_add((free.intersection_len(rows) as u64).saturating_mul(before(a)));
            }
            room >= u64::from(x)
        })
    }

    /// Could `demand` finish by `t` on `rows`? Each architecture's VPs must
    /// fit in `sum slots_at(t, a_r)` over its rows: exactly when MTAT's
    /// turnaround there is at most `t`. Linear, no allocation.
    fn can_finish_by(&self, demand: &Demand, rows: &[Row], t: f64) -> bool {
        demand.counts.iter().all(|&(a, x)| {
            let mut room: u64 = 0;
            for &r in rows {
                if self.arch_of(r) == Some(a) {
                    room += u64::from(slots_at(t, self.cap(r)));
                    if room >= u64::from(x) {
                        return true;
                    }
                }
            }
            false
        })
    }

    fn remove_job(&mut self, k: JobKey, ctx: &mut Ctx) {
        let (cols, rows): (Vec<u64>, Vec<Row>) = {
            let j = self.job(k);
            (j.columns.clone(), j.rows.keys().copied().collect())
        };
        for &c in &cols {
            for &r in &rows {
                self.map.set(c, r, None);
                self.dirty_row(r, ctx);
            }
            ctx.freed.push(c);
        }
        if let Some(j) = self.jobs[k as usize].take() {
            self.job_of.remove(&*j.id);
        }
        self.queue.retain(|&x| x != k);
        self.retry.remove(&k);
        self.waiting.remove(&k);
    }

    fn drop_empty_columns(&mut self, ctx: &mut Ctx) {
        let empty: Vec<u64> = self
            .map
            .columns()
            .iter()
            .filter(|c| c.is_empty())
            .map(|c| c.id)
            .collect();
        if empty.is_empty() {
            return;
        }
        // A job with no rows keeps no columns either.
        for id in &empty {
            self.map.remove_column(*id);
        }
        for j in self.jobs.iter_mut().flatten() {
            j.columns.retain(|c| !empty.contains(c));
        }
        ctx.all_dirty = true;
    }

    /// A slot whose every job also runs in another slot only replicates
    /// them: deleting it shortens the round for everyone (seed 001 weighs
    /// slot unification against slot minimisation; we minimise).
    fn drop_redundant_columns(&mut self, ctx: &mut Ctx) {
        loop {
            // Columns some job runs in alone are needed; the first other
            // column goes.
            let mut needed: Vec<u64> = self
                .jobs
                .iter()
                .flatten()
                .filter_map(|j| match j.columns[..] {
                    [only] => Some(only),
                    _ => None,
                })
                .collect();
            needed.sort_unstable();
            let redundant = self
                .map
                .columns()
                .iter()
                .map(|c| c.id)
                .find(|id| needed.binary_search(id).is_err());
            let Some(id) = redundant else { return };
            for j in self.jobs.iter_mut().flatten() {
                j.columns.retain(|&c| c != id);
            }
            // Its cells go with it.
            let rows: Vec<Row> = (0..self.map.row_capacity()).collect();
            for r in rows {
                self.map.set(id, r, None);
            }
            self.map.remove_column(id);
            ctx.all_dirty = true;
        }
    }

    /// Seed 001 re-packing: shift whole jobs between slots to delete slots.
    fn repack(&mut self, ctx: &mut Ctx) {
        if !self.cfg.repack || self.map.columns().len() < 2 {
            return;
        }
        self.drop_redundant_columns(ctx);
        if self.map.columns().len() < 2 {
            return;
        }
        // A slot can only go if each of its busy rows is free in some other
        // slot: skip the search when no slot passes that test.
        let mut free_somewhere = BitSet::default();
        for c in self.map.columns() {
            free_somewhere.union_with(c.free());
        }
        let movable = self.map.columns().iter().any(|c| {
            let mut busy = self.map.live().clone();
            busy.remove_all(c.free());
            busy.is_subset(&free_somewhere)
        });
        if !movable {
            return;
        }
        let mut pieces = Vec::new();
        let mut slot_of = Vec::new();
        let mut owner = Vec::new();
        for k in self.fair_order() {
            let j = self.job(k);
            for &c in &j.columns {
                if let Some(pos) = self.map.position(c) {
                    pieces.push(Piece {
                        job: k,
                        rows: j.row_set.clone(),
                    });
                    slot_of.push(pos);
                    owner.push(k);
                }
            }
        }
        let before = self.map.columns().len();
        let (new_slot, count) = repack(&pieces, &slot_of, before, pieces.len() <= 64);
        if count >= before {
            return;
        }
        // Rebuild the columns: clear every job cell, then lay the pieces out.
        let old: Vec<u64> = self.map.columns().iter().map(|c| c.id).collect();
        let fresh: Vec<u64> = (0..count).map(|_| self.map.push_column()).collect();
        for j in self.jobs.iter_mut().flatten() {
            j.columns.clear();
        }
        for (i, &k) in owner.iter().enumerate() {
            let col = fresh[new_slot[i]];
            let rows: Vec<Row> = self.job(k).rows.keys().copied().collect();
            for r in rows {
                self.map.set(col, r, Some(k));
            }
            self.job_mut(k).columns.push(col);
        }
        for id in old {
            self.map.remove_column(id);
        }
        ctx.all_dirty = true;
    }

    /// Place a job at given slots and processors, bypassing the algorithms:
    /// used to restore a saved map and to set up the paper's figures in tests.
    /// `slots` are positions in the round (missing columns are appended);
    /// `placement[i]` is the processor of VP `i`. The state is unchanged on error.
    pub fn restore_job(
        &mut self,
        job: &str,
        slots: &[usize],
        placement: &[&str],
    ) -> Result<(), SchedError> {
        if self.job_of.contains_key(job) {
            return Err(SchedError::DuplicateJob(job.to_string()));
        }
        if placement.is_empty() {
            return Err(SchedError::NoVps(job.to_string()));
        }
        let mut rows = Vec::new();
        for id in placement {
            rows.push(
                self.map
                    .row_of(id)
                    .ok_or_else(|| SchedError::UnknownProcessor(id.to_string()))?,
            );
        }
        while self.map.columns().len() <= slots.iter().copied().max().unwrap_or(0) {
            self.map.push_column();
        }
        let cols: Vec<u64> = slots.iter().map(|&s| self.map.columns()[s].id).collect();
        for &c in &cols {
            for &r in &rows {
                if self.map.column(c).and_then(|col| col.cell(r)).is_some() {
                    let id = self
                        .map
                        .processor(r)
                        .map(|p| p.id.to_string())
                        .unwrap_or_default();
                    return Err(SchedError::DuplicateProcessor(id));
                }
            }
        }
        let k = self.jobs.len() as JobKey;
        let mut j = Job::new(job.to_string(), rows.len() as u32, cols.clone());
        for (i, &r) in rows.iter().enumerate() {
            let Some(p) = self.map.processor(r) else {
                continue;
            };
            j.insert_vp(
                i as u32,
                Vp {
                    arch: self.map.row_arch(r).unwrap_or(u32::MAX),
                    row: Some(r),
                    at: Some((p.id.clone(), p.host.clone())),
                    held: false,
                },
            );
            *j.rows.entry(r).or_default() += 1;
            j.placed += 1;
            j.row_set.insert(r);
        }
        j.t_cur.set(None);
        for &c in &cols {
            for &r in j.rows.keys() {
                self.map.set(c, r, Some(k));
            }
        }
        self.jobs.push(Some(j));
        self.job_of.insert(job.to_string(), k);
        self.queue.push_back(k);
        Ok(())
    }

    /// Check every invariant; `Err` names the first broken one. Used by
    /// tests and debug builds of the daemon.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (pos, c) in self.map.columns().iter().enumerate() {
            if c.is_empty() {
                return Err(format!("slot {pos} is empty"));
            }
            for r in 0..self.map.row_capacity() {
                let live = self.map.live().contains(r);
                let cell = c.cell(r);
                if live != (cell.is_some() || c.free().contains(r))
                    || (cell.is_some() && c.free().contains(r))
                {
                    return Err(format!("slot {pos} row {r}: free set out of step"));
                }
                if let Some(k) = cell {
                    let j = self
                        .jobs
                        .get(k as usize)
                        .and_then(Option::as_ref)
                        .ok_or(format!("slot {pos} row {r}: dead job"))?;
                    if !j.rows.contains_key(&r) || !j.columns.contains(&c.id) {
                        return Err(format!("slot {pos} row {r}: job {} has no VP there", j.id));
                    }
                }
            }
        }
        for j in self.jobs.iter().flatten() {
            let mut rows: BTreeMap<Row, u32> = BTreeMap::new();
            for (i, v) in &j.vps {
                if let Some(r) = v.row {
                    let p = self
                        .map
                        .processor(r)
                        .ok_or(format!("job {} vp {i} on a processor that left", j.id))?;
                    if self.map.row_arch(r) != Some(v.arch) {
                        return Err(format!(
                            "job {} vp {i} ({}) on {} ({})",
                            j.id, v.arch, p.id, p.arch
                        ));
                    }
                    *rows.entry(r).or_default() += 1;
                }
            }
            if rows != j.rows {
                return Err(format!("job {}: row counts out of step", j.id));
            }
            // The caches kept beside `rows` and `vps`.
            if j.placed != rows.values().sum::<u32>() {
                return Err(format!("job {}: placed count out of step", j.id));
            }
            if j.row_set.to_vec() != rows.keys().copied().collect::<Vec<_>>() {
                return Err(format!("job {}: row set out of step", j.id));
            }
            let t = rows
                .iter()
                .map(|(&r, &n)| finish_time(n, self.cap(r)))
                .fold(0.0, f64::max);
            if j.t_cur.get().is_some_and(|c| c != t) {
                return Err(format!("job {}: cached turnaround out of step", j.id));
            }
            let mut arches: Vec<(u32, u32)> = Vec::new();
            for v in j.vps.values() {
                match arches.iter_mut().find(|(a, _)| *a == v.arch) {
                    Some(e) => e.1 += 1,
                    None => arches.push((v.arch, 1)),
                }
            }
            let mut have = j.arches.clone();
            arches.sort_unstable();
            have.sort_unstable();
            if arches != have {
                return Err(format!("job {}: VPs per architecture out of step", j.id));
            }
            if !rows.is_empty() && j.columns.is_empty() {
                return Err(format!("job {}: placed VPs but no slot", j.id));
            }
            for &c in &j.columns {
                let col = self
                    .map
                    .column(c)
                    .ok_or(format!("job {}: slot gone", j.id))?;
                for &r in rows.keys() {
                    if col.cell(r) != self.job_of.get(&*j.id).copied() {
                        return Err(format!("job {}: not gang-placed in slot {c}", j.id));
                    }
                }
            }
        }
        Ok(())
    }

    /// Total VPs known (placed or held), for "no VP lost" checks.
    pub fn vp_count(&self) -> usize {
        self.jobs.iter().flatten().map(|j| j.vps.len()).sum()
    }
}
