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

mod admission;
mod align;
mod columns;
mod events;
mod memory;
mod placing;
mod planning;
mod repair;
mod room;

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::compress::fill;
use super::expand::{Expansion, RegularPattern};
use super::map::{AllocationMap, BitSet, JobKey, Processor, Row};
use super::mtat::finish_time;

pub use super::event::{Action, Event, SchedError, MAX_VPS};

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
    /// How jobs that find no room wait. Off (the paper's way): in the
    /// fairness queue's order, stopping at the first that finds none. On:
    /// in submission order, each placed where it fits (backfilling), as
    /// long as it does not delay the start promised to the oldest job
    /// that fits nowhere (EASY's rule over the map's slots: see
    /// `admission`).
    pub backfill: bool,
    /// Delete slots by moving jobs into other slots' free cells, migrating
    /// VPs to other processors where that is what it takes
    /// (`Scheduler::compact`).
    pub compact: bool,
    /// With few slots, move jobs that run in one slot onto the processors
    /// of another slot's job where that lets more jobs be lent a slot
    /// (`Scheduler::align`).
    pub align: bool,
    /// The most VPs compaction may move in one event.
    pub compact_moves: usize,
    /// A job that lost a processor, and whose other VPs already finish by
    /// the best turnaround MTAT finds on what is left, puts the VPs it had
    /// there where they finish by it too, moving no other VP
    /// (`Scheduler::repair_in_place`); MTAT and Compression plan it again
    /// only where that is not so. Off (the paper's way): every job that
    /// lost a processor is planned again (section 4.4.3).
    pub repair_in_place: bool,
    /// VPs start pinned: never migrated until `VpMovable` says they can be
    /// (the daemons: a program that never says so cannot be moved). Off for
    /// the simulator and replays, where every VP can be moved.
    pub pin_new_vps: bool,
}

impl Default for SchedConfig {
    fn default() -> Self {
        SchedConfig {
            expansion: Box::new(RegularPattern),
            repack: true,
            max_migrations_per_event: 16,
            max_slots: usize::MAX,
            backfill: false,
            compact: false,
            align: false,
            compact_moves: 64,
            repair_in_place: false,
            pin_new_vps: false,
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
            .field("backfill", &self.backfill)
            .field("compact", &self.compact)
            .field("align", &self.align)
            .field("compact_moves", &self.compact_moves)
            .field("repair_in_place", &self.repair_in_place)
            .field("pin_new_vps", &self.pin_new_vps)
            .finish()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Vp {
    /// Interned architecture (`AllocationMap::intern`).
    arch: u32,
    /// The row it is placed on (a live processor), if any.
    row: Option<Row>,
    /// Processor and host where its process is (set once started; kept while held).
    at: Option<(Arc<str>, Arc<str>)>,
    /// A `Hold` was emitted and it has not been placed since.
    held: bool,
    /// It cannot be moved (see `Event::VpMovable`): once started it runs
    /// on its own processor or is held.
    pinned: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Job {
    id: Arc<str>,
    /// Submission order (waiting jobs are admitted oldest first).
    seq: u64,
    /// Seconds of work of one VP alone on a capacity-1 processor, as its
    /// user estimated them (`Event::Submit`).
    estimate: Option<f64>,
    /// Of that work, what it has done (see `Scheduler::on_event_at`).
    done: f64,
    /// When it was submitted (the time of `on_event_at`).
    since: f64,
    /// Suspended (`Event::Suspend`): no cells, every VP held, not admitted.
    suspended: bool,
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
    /// Memory each VP needs (MB): processors whose host offers less are
    /// never its candidates.
    memory_mb: Option<u64>,
    /// The only rows it may use (`Event::Submit`'s `only`), while they last.
    only: Option<BitSet>,
    /// How many of its VPs are held, kept wherever `Vp::held` changes.
    held: u32,
}

impl Job {
    fn new(id: String, seq: u64, next_vp: u32, columns: Vec<u64>) -> Self {
        Job {
            id: id.into(),
            seq,
            estimate: None,
            done: 0.0,
            since: 0.0,
            suspended: false,
            vps: BTreeMap::new(),
            next_vp,
            columns,
            rows: BTreeMap::new(),
            arches: Vec::new(),
            t_cur: Cell::new(None),
            row_set: BitSet::default(),
            placed: 0,
            memory_mb: None,
            only: None,
            held: 0,
        }
    }

    fn insert_vp(&mut self, i: u32, vp: Vp) {
        match self.arches.iter_mut().find(|(a, _)| *a == vp.arch) {
            Some(e) => e.1 += 1,
            None => self.arches.push((vp.arch, 1)),
        }
        self.held += u32::from(vp.held);
        if let Some(old) = self.vps.insert(i, vp) {
            self.uncount(old.arch);
            self.held -= u32::from(old.held);
        }
    }

    fn remove_vp(&mut self, i: u32) -> Option<Vp> {
        let vp = self.vps.remove(&i)?;
        self.uncount(vp.arch);
        self.held -= u32::from(vp.held);
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
    /// Suspended: every VP held until it is resumed.
    pub suspended: bool,
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

/// With backfilling, what the oldest waiting job that found no room is
/// promised (EASY's reservation, over the map's slots): the column where,
/// as the jobs there end by their estimates, its VPs first fit, and when.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Reservation {
    /// The job.
    job: JobKey,
    /// The column.
    column: u64,
    /// When it fits there (infinite: not by any estimate).
    at: f64,
    /// The column's cells of rows it may use that are free at `at`, less
    /// those of jobs placed since that run past `at`.
    free_at: BitSet,
    /// Its VPs per architecture.
    counts: Vec<(u32, u32)>,
    /// The turnaround it must reach there (that of a slot of its own).
    bound: f64,
    /// Where it needs memory (MB a VP) and hosts say what they offer: the
    /// memory each host (by number, `u64::MAX` for one that says nothing)
    /// has left at `at` (that of the jobs of the column which end by then
    /// given back), less what jobs placed since that run past `at` take
    /// there. (Host numbers change with the pool: a processor joining or
    /// leaving voids the promise, made again at the next admission.)
    memory: Option<(u64, Vec<u64>)>,
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

/// The scheduler state. See the module doc. It serializes whole but for
/// its config (see `with_config`): the master's replicated state holds it.
#[derive(Serialize, Deserialize)]
pub struct Scheduler {
    map: AllocationMap,
    jobs: Vec<Option<Job>>,
    job_of: HashMap<String, JobKey>,
    queue: VecDeque<JobKey>,
    #[serde(skip)]
    cfg: SchedConfig,
    generation: u64,
    migrations: u64,
    /// Jobs that could get faster but the migration budget ran out.
    retry: BTreeSet<JobKey>,
    /// Jobs with VPs that have no processor.
    waiting: BTreeSet<JobKey>,
    /// Jobs submitted so far (the next job's `seq`).
    submitted: u64,
    /// `submitted` when waiting jobs were last admitted.
    admitted_upto: u64,
    /// With backfilling: the oldest waiting job that fits nowhere, and
    /// where and when it is promised to start (`admission`).
    reserved: Option<Reservation>,
    /// The time of the last event (`on_event_at`), seconds.
    now: f64,
    /// The rows offering at least so many MB, per amount jobs ask for:
    /// computed once, forgotten when a processor joins or leaves.
    #[serde(skip)]
    memory_masks: std::cell::RefCell<BTreeMap<u64, BitSet>>,
    /// The hosts numbered, with the memory each offers (`memory`):
    /// forgotten when a processor joins or leaves.
    #[serde(skip)]
    hosts: std::cell::RefCell<Option<Arc<memory::Hosts>>>,
    /// The memory (MB) placed VPs take on each host, by number: counted
    /// when asked, forgotten when VPs are placed, moved or removed.
    #[serde(skip)]
    resident: std::cell::RefCell<Option<Vec<u64>>>,
    /// From `resident`: the memory (MB) each host has left, and per amount
    /// a VP asks for how many such VPs each holds (`memory_caps` of a job
    /// with none placed), forgotten with it.
    #[serde(skip)]
    left: std::cell::RefCell<Option<memory::Left>>,
    /// A slot of its own's plan for jobs with no VP placed, per what
    /// decides it (`fresh_plan`): forgotten when a processor joins or
    /// leaves.
    #[serde(skip)]
    fresh_plans: std::cell::RefCell<HashMap<placing::FreshKey, Arc<placing::FreshPlan>>>,
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
            submitted: 0,
            admitted_upto: 0,
            reserved: None,
            now: 0.0,
            memory_masks: Default::default(),
            hosts: Default::default(),
            resident: Default::default(),
            left: Default::default(),
            fresh_plans: Default::default(),
        }
    }

    /// The same state under `cfg` (a scheduler read back from its bytes
    /// has the default config).
    pub fn with_config(mut self, cfg: SchedConfig) -> Self {
        self.cfg = cfg;
        self
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
            suspended: j.suspended,
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

    /// Handle one event at the time of the last (time stands still: no job
    /// progresses). On error nothing changed.
    pub fn on_event(&mut self, event: Event) -> Result<Vec<Action>, SchedError> {
        self.handle(event)
    }

    /// Handle one event at `now` (seconds on any clock that does not go
    /// back; an earlier or non-finite `now` counts as the last one's).
    /// Since the last event every job has done `w / τ / T` seconds of its
    /// estimate per second (`w` of the round's `τ` slots, `T = max n_r /
    /// a_r`), which is what backfilling projects ends from. The time is
    /// given, never read: the scheduler stays pure.
    pub fn on_event_at(&mut self, now: f64, event: Event) -> Result<Vec<Action>, SchedError> {
        self.advance(now);
        self.handle(event)
    }

    /// The time of the last event.
    pub fn now(&self) -> f64 {
        self.now
    }

    /// With backfilling, the oldest job that found no room, the slot
    /// (position in the round) it is promised and when it is projected to
    /// fit there (infinite where the jobs in its way have no estimate).
    pub fn reservation(&self) -> Option<(&str, usize, f64)> {
        let r = self.reserved.as_ref()?;
        let job = self.jobs.get(r.job as usize)?.as_ref()?;
        Some((&job.id, self.map.position(r.column)?, r.at))
    }

    /// Every job's progress from the last event to `now`.
    fn advance(&mut self, now: f64) {
        let dt = now - self.now;
        if !(dt.is_finite() && dt > 0.0) {
            return;
        }
        self.now = now;
        let tau = self.map.columns().len() as f64;
        for k in 0..self.jobs.len() {
            let Some(j) = self.jobs[k].as_ref() else {
                continue;
            };
            if j.columns.is_empty() || j.placed as usize != j.vps.len() || j.estimate.is_none() {
                continue;
            }
            let t = self.current_t(k as JobKey);
            if t > 0.0 {
                let w = j.columns.len() as f64;
                if let Some(j) = self.jobs[k].as_mut() {
                    j.done += dt * w / tau / t;
                }
            }
        }
    }

    fn handle(&mut self, event: Event) -> Result<Vec<Action>, SchedError> {
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
        let moved_by_hand = matches!(event, Event::VpMoved { .. });
        match event {
            Event::NewProcessor {
                id,
                host,
                arch,
                capacity,
                memory_mb,
            } => self.new_processor(id, host, arch, capacity, memory_mb, &mut ctx)?,
            Event::ProcessorExit { id } => self.processor_exit(&id, &mut ctx)?,
            Event::Submit {
                job,
                vps,
                memory_mb,
                only,
                estimate,
            } => self.submit(job, vps, memory_mb, only, estimate, &mut ctx)?,
            Event::NewVp { job, arch, host } => {
                self.new_vp(&job, None, arch, host.as_deref(), &mut ctx)?
            }
            Event::VpBack { job, vp, arch } => self.new_vp(&job, Some(vp), arch, None, &mut ctx)?,
            Event::VpMoved { job, vp, host } => self.vp_moved(&job, vp, &host, &mut ctx)?,
            Event::VpMovable { job, vp } => self.vp_movable(&job, vp, &mut ctx)?,
            Event::VpExit { job, vp } => self.vp_exit(&job, vp, &mut ctx)?,
            Event::JobExit { job } => self.job_exit(&job, &mut ctx)?,
            Event::Suspend { job } => self.suspend(&job, &mut ctx)?,
            Event::Resume { job } => self.resume(&job, &mut ctx)?,
        }
        // A VP moved by hand stays where it was put: the map only follows.
        if self.cfg.backfill && !moved_by_hand {
            self.rebalance(&mut ctx);
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
        let mut j = Job::new(
            job.to_string(),
            self.submitted,
            rows.len() as u32,
            cols.clone(),
        );
        self.submitted += 1;
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
                    pinned: self.cfg.pin_new_vps,
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
        self.forget_resident();
        Ok(())
    }

    /// Check every invariant; `Err` names the first broken one. Used by
    /// tests and debug builds of the daemon.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.check_memory()?;
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
            if c.free_count() != c.free().len() {
                return Err(format!("slot {pos}: free count out of step"));
            }
            if c.busy() != c.jobs().count() {
                return Err(format!("slot {pos}: busy count out of step"));
            }
            let counted = self.map.recount(c);
            for (class, &n) in counted.iter().enumerate() {
                if c.free_in_class(class as u32) != n {
                    return Err(format!(
                        "slot {pos}: free cells of class {class} out of step"
                    ));
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
                    if v.pinned && v.at.as_ref().is_some_and(|a| a.0 != p.id) {
                        return Err(format!(
                            "job {} vp {i} is pinned but was moved to {}",
                            j.id, p.id
                        ));
                    }
                    if self.map.row_arch(r) != Some(v.arch) {
                        return Err(format!(
                            "job {} vp {i} ({}) on {} ({})",
                            j.id, v.arch, p.id, p.arch
                        ));
                    }
                    if j.only.as_ref().is_some_and(|o| !o.contains(r)) {
                        return Err(format!(
                            "job {} vp {i} on {}, not among the processors chosen for it",
                            j.id, p.id
                        ));
                    }
                    if let (Some(need), Some(has)) = (j.memory_mb, p.memory_mb) {
                        if has < need {
                            return Err(format!(
                                "job {} vp {i} needs {need} MB, on {} offering {has} MB",
                                j.id, p.id
                            ));
                        }
                    }
                    *rows.entry(r).or_default() += 1;
                }
            }
            if rows != j.rows {
                return Err(format!("job {}: row counts out of step", j.id));
            }
            if j.held as usize != j.vps.values().filter(|v| v.held).count() {
                return Err(format!("job {}: held count out of step", j.id));
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
            if j.suspended && (!rows.is_empty() || !j.columns.is_empty()) {
                return Err(format!("job {} is suspended but holds cells", j.id));
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
