//! The master's bookkeeping: hosts, jobs, Tids, and the embedded scheduler.
//!
//! What lives here: turning what hosts and users say (registrations,
//! heartbeats, VP starts and exits, output, control requests) into scheduler
//! events, and the scheduler's actions into messages. It does no I/O: every
//! method returns the `Out`s the server must deliver, so it is tested without
//! sockets. What does not: sockets, processes, clocks (`now` is passed in).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use libmig::msg::{
    Envelope, ExitInfo, HostFacts, HostInfo, Loc, MapCell, Notice, NotifyOn, OwnerAction,
    OwnerReport, OwnerState, PeerMsg, Request, Response, SliceReport, SliceStats, SlotCell,
    SnapStep, SpawnSpec, StartVp, StatsInfo, Stream, Switch, Tid, VpCall, VpInfo, VpRet, SYSTEM,
};

use crate::groups::Groups;
use crate::sched::{Action, Event, SchedConfig, Scheduler};

/// Who asked: a local control connection, or a worker forwarding for one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requester {
    /// A control connection of the master (its token).
    Local(usize),
    /// A control connection of a worker: the worker and its request id.
    Remote {
        /// The worker.
        host: String,
        /// Its id for the request.
        id: u64,
    },
    /// A VP's call (answered as a `VpReturn`, never as a `Reply`).
    Vp {
        /// The VP.
        tid: Tid,
        /// Its call id.
        id: u64,
    },
}

/// Something the server must deliver.
#[derive(Debug, Clone, PartialEq)]
pub enum Out {
    /// A message to a host (possibly the master itself).
    ToHost(String, PeerMsg),
    /// A reply to whoever asked.
    Reply(Requester, Response),
    /// A line for the daemon log.
    Log(String),
    /// A message to every live host, the master's own included.
    Broadcast(PeerMsg),
    /// A message for a VP (a notice from `SYSTEM`), routed like any other.
    Deliver(Envelope, Vec<u8>),
    /// Keep VP `tid`'s image of checkpoint `id` of `job` (the server writes
    /// it to the master's state directory).
    StoreImage {
        /// The job.
        job: String,
        /// Generation.
        id: u64,
        /// The VP.
        tid: Tid,
        /// The image.
        image: Vec<u8>,
    },
    /// Restart `job` from its newest checkpoint whose images are all
    /// intact (`ids`, newest first): each VP on its host.
    RestoreJob {
        /// The job.
        job: String,
        /// Complete generations, newest first.
        ids: Vec<u64>,
        /// (VP, host, how to start it).
        placements: Vec<(Tid, String, StartVp)>,
    },
    /// Keep only these generations of `job`'s checkpoints.
    PruneCheckpoints {
        /// The job.
        job: String,
        /// Generations to keep (none: the job is gone).
        keep: Vec<u64>,
    },
    /// New slot tables for these hosts (the server sets when they take
    /// effect, on its clock, and sends each). `slots` is the round's length;
    /// `all`: every host's table changed (a new epoch for all).
    SlotTables {
        /// Orders tables.
        generation: u64,
        /// Slots per round.
        slots: usize,
        /// Every host gets one.
        all: bool,
        /// Per host, per slot, its cells.
        tables: Vec<(String, Vec<Vec<SlotCell>>)>,
    },
}

#[derive(Debug)]
struct HostRec {
    facts: HostFacts,
    last_seen: Instant,
    alive: bool,
    master: bool,
    /// Are its processors in the scheduler's pool (alive and offered)?
    in_pool: bool,
    /// Its owner monitor's last report.
    owner: Option<OwnerReport>,
}

#[derive(Debug, Clone, PartialEq)]
enum VpState {
    Waiting,
    Starting,
    Running,
    /// Being checkpointed on its host and restarted on this one.
    Moving(String),
    /// Being started again from the job's checkpoint.
    Restoring,
    /// Checkpointed to its host's disk while the owner has it; no process.
    Parked,
    Exited,
}

#[derive(Debug)]
struct VpRec {
    tid: Tid,
    program: String,
    args: Vec<String>,
    parent: Option<Tid>,
    host: Option<String>,
    pid: Option<u32>,
    state: VpState,
    exit: Option<ExitInfo>,
    /// Where the scheduler wants it, when a move there is still to be made:
    /// after the move under way, or after one that failed (with the number
    /// of failed attempts and when to try again).
    wants: Option<Wanted>,
}

/// A move the scheduler asked for that has not happened yet.
#[derive(Debug, Clone)]
struct Wanted {
    to: String,
    failures: u32,
    retry_at: Option<Instant>,
}

/// A scheduler move that failed this many times is given up (the VP runs,
/// or stays stopped, where it is) and reported.
const MAX_MOVE_ATTEMPTS: u32 = 5;

#[derive(Debug)]
struct JobRec {
    spec: SpawnSpec,
    vps: BTreeMap<u32, VpRec>,
    waiters: Vec<Requester>,
    killed: bool,
    ckpt: Ckpt,
    /// Restarts from a checkpoint so far (see `Envelope::incarnation`).
    incarnation: u32,
    /// The index the next VP spawned into the job gets (as the scheduler
    /// counts: never reused, even after a restart drops VPs).
    next_vp: u32,
}

/// A job's consistent checkpoints.
#[derive(Debug, Default)]
struct Ckpt {
    /// The one being taken.
    round: Option<Round>,
    /// Complete generations, oldest first (the last two are kept).
    good: Vec<Generation>,
    /// When the last one began.
    last: Option<Instant>,
}

/// A complete consistent checkpoint of a job.
#[derive(Debug, Clone)]
struct Generation {
    id: u64,
    /// The VPs (indices in the job) it holds: those that existed when it
    /// was taken. VPs spawned after it are not in it.
    vps: BTreeSet<u32>,
}

/// A checkpoint being taken.
#[derive(Debug)]
struct Round {
    id: u64,
    /// The VPs it covers (all the job had when it began).
    members: BTreeSet<Tid>,
    started: Instant,
    /// VPs stopped, with the last sequence number each sent to each peer.
    paused: HashMap<Tid, Vec<(Tid, u64)>>,
    /// VPs whose image arrived, and its size.
    taken: HashMap<Tid, usize>,
    waiters: Vec<Requester>,
}

/// The master's state.
pub struct Master {
    name: String,
    sched: Scheduler,
    hosts: BTreeMap<String, HostRec>,
    jobs: BTreeMap<String, JobRec>,
    tids: HashMap<Tid, (String, u32)>,
    next_tid: Tid,
    next_job: u64,
    groups: Groups,
    exit_watch: HashMap<Tid, Vec<(Tid, i32)>>,
    host_watch: Vec<(Tid, i32, bool)>,
    gone: HashMap<Tid, ExitInfo>,
    /// `mig owner reclaim|release` waiting for its host.
    owner_waiting: HashMap<u64, Requester>,
    next_owner_id: u64,
    now: Instant,
    /// The real-time clock (ns since the Unix epoch) as the server last set it.
    wall_ns: u64,
    /// Gang slicing: slot length (0: off), and the round the hosts run
    /// (epoch, slots) once tables went out.
    quantum_ns: u64,
    round: Option<(u64, u64)>,
    /// Per host, the switches and table installs it reported.
    slicing: BTreeMap<String, HostSlicing>,
    /// Job checkpoints: the next generation, how often (none: on request),
    /// how long one may take.
    next_ckpt: u64,
    checkpoint_every: Option<Duration>,
    checkpoint_timeout: Duration,
    /// Jobs to restart from their checkpoint once the events at hand are done.
    to_restart: BTreeSet<String>,
}

/// What a host's slicer reported, for `mig stats`.
#[derive(Debug, Default)]
struct HostSlicing {
    switches: std::collections::VecDeque<Switch>,
    installed: Vec<(u64, u64, u64)>,
}

/// Switches kept per host for `mig stats`.
const KEEP_SWITCHES: usize = 4096;

fn processor_id(host: &str, i: u32) -> String {
    format!("{host}/{i}")
}

impl Master {
    /// A master whose own host has `facts`.
    /// `quantum`: the slot length hosts slice with (zero: no slicing, the
    /// kernel shares processors among slots' VPs).
    pub fn new(facts: HostFacts, now: Instant, quantum: Duration) -> (Master, Vec<Out>) {
        let mut m = Master {
            name: facts.name.clone(),
            sched: Scheduler::new(SchedConfig::default()),
            hosts: BTreeMap::new(),
            jobs: BTreeMap::new(),
            tids: HashMap::new(),
            next_tid: 0x40001,
            next_job: 1,
            groups: Groups::default(),
            exit_watch: HashMap::new(),
            host_watch: Vec::new(),
            gone: HashMap::new(),
            owner_waiting: HashMap::new(),
            next_owner_id: 1,
            now,
            wall_ns: 0,
            quantum_ns: quantum.as_nanos() as u64,
            round: None,
            slicing: BTreeMap::new(),
            next_ckpt: 1,
            checkpoint_every: None,
            checkpoint_timeout: Duration::from_secs(30),
            to_restart: BTreeSet::new(),
        };
        let out = m.add_host(facts, now, true);
        (m, out)
    }

    /// This master's own host name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Is `host` known and alive?
    pub fn is_alive(&self, host: &str) -> bool {
        self.hosts.get(host).is_some_and(|h| h.alive)
    }

    fn add_host(&mut self, facts: HostFacts, now: Instant, master: bool) -> Vec<Out> {
        let mut out = vec![Out::Log(format!(
            "host {} joined: {} processors of {} (capacity {:.2}) at {}{}",
            facts.name,
            facts.processors,
            facts.arch,
            facts.capacity,
            facts.addr,
            if facts.offered {
                ""
            } else {
                " (its owner is active: not offered yet)"
            }
        ))];
        let name = facts.name.clone();
        let offered = facts.offered;
        let owner = self.hosts.remove(&name).and_then(|h| h.owner);
        self.hosts.insert(
            name.clone(),
            HostRec {
                facts,
                last_seen: now,
                alive: true,
                master,
                in_pool: false,
                owner,
            },
        );
        if offered {
            out.extend(self.join_pool(&name));
        }
        out.push(Out::Broadcast(self.peers()));
        if !master {
            out.extend(self.host_notices(true, &name));
        }
        out
    }

    fn peers(&self) -> PeerMsg {
        PeerMsg::Peers(
            self.hosts
                .iter()
                .filter(|(_, h)| h.alive)
                .map(|(n, h)| (n.clone(), h.facts.addr.clone()))
                .collect(),
        )
    }

    /// Everything a host that (re)joins must know: where every VP is.
    pub fn directory(&self) -> PeerMsg {
        let mut d: Vec<(Tid, Loc)> = self.gone.keys().map(|&t| (t, Loc::Gone)).collect();
        for j in self.jobs.values() {
            for v in j.vps.values() {
                d.push((v.tid, loc_of(v)));
            }
        }
        PeerMsg::Directory(d)
    }

    fn host_notices(&self, joined: bool, host: &str) -> Vec<Out> {
        let notice = if joined {
            Notice::HostJoined {
                host: host.to_string(),
            }
        } else {
            Notice::HostLeft {
                host: host.to_string(),
            }
        };
        self.host_watch
            .iter()
            .filter(|(_, _, j)| *j == joined)
            .map(|&(to, tag, _)| notice_to(to, tag, &notice))
            .collect()
    }

    /// A worker registers. Returns the name it gets (a live host's name is
    /// not reused; a dead host's name is, so a host that comes back rejoins).
    pub fn register(&mut self, mut facts: HostFacts, now: Instant) -> (String, Vec<Out>) {
        let base = facts.name.clone();
        let mut n = 2;
        while self.hosts.get(&facts.name).is_some_and(|h| h.alive) {
            facts.name = format!("{base}-{n}");
            n += 1;
        }
        let name = facts.name.clone();
        let out = self.add_host(facts, now, false);
        (name, out)
    }

    /// A host said something: it is alive. A host that had been taken out
    /// of the pool for silence comes back with all its processors.
    pub fn heard_from(&mut self, host: &str, now: Instant) -> Vec<Out> {
        self.now = now;
        let Some(h) = self.hosts.get_mut(host) else {
            return Vec::new();
        };
        h.last_seen = now;
        if h.alive {
            return Vec::new();
        }
        let facts = h.facts.clone();
        let mut out = vec![Out::Log(format!(
            "host {host} answers again: back in the pool"
        ))];
        out.extend(self.add_host(facts, now, false));
        out
    }

    /// Hosts silent for longer than `dead_after` leave the pool.
    pub fn tick(&mut self, now: Instant, dead_after: Duration) -> Vec<Out> {
        self.now = now;
        let mut out = self.retry_moves(now);
        out.extend(self.checkpoint_tick(now));
        let silent: Vec<String> = self
            .hosts
            .iter()
            .filter(|(_, h)| h.alive && !h.master && now.duration_since(h.last_seen) > dead_after)
            .map(|(n, _)| n.clone())
            .collect();
        for h in silent {
            out.extend(self.host_gone(&h, "stopped answering heartbeats"));
        }
        out
    }

    /// A host is gone (connection lost or silent): its processors leave the
    /// map and its VPs are placed again elsewhere.
    pub fn host_gone(&mut self, host: &str, why: &str) -> Vec<Out> {
        let Some(h) = self.hosts.get_mut(host) else {
            return Vec::new();
        };
        if !h.alive {
            return Vec::new();
        }
        h.alive = false;
        let mut out = vec![Out::Log(format!("host {host} left the pool: {why}"))];
        out.push(Out::Broadcast(self.peers()));
        out.extend(self.host_notices(false, host));
        out.extend(self.leave_pool(host));
        for job in std::mem::take(&mut self.to_restart) {
            out.extend(self.restart_job(&job, None));
        }
        out
    }

    /// A host's processors join the pool (`new_processor` for each).
    fn join_pool(&mut self, host: &str) -> Vec<Out> {
        let Some(h) = self.hosts.get_mut(host).filter(|h| h.alive && !h.in_pool) else {
            return Vec::new();
        };
        h.in_pool = true;
        let f = h.facts.clone();
        let mut out = Vec::new();
        for i in 0..f.processors {
            out.extend(self.event(Event::NewProcessor {
                id: processor_id(host, i),
                host: host.to_string(),
                arch: f.arch.clone(),
                capacity: f.capacity,
            }));
        }
        out
    }

    /// A host's processors leave the pool (`processor_exit` for each): the
    /// scheduler moves its VPs elsewhere or holds them.
    fn leave_pool(&mut self, host: &str) -> Vec<Out> {
        let Some(h) = self.hosts.get_mut(host).filter(|h| h.in_pool) else {
            return Vec::new();
        };
        h.in_pool = false;
        let n = h.facts.processors;
        let mut out = Vec::new();
        for i in 0..n {
            out.extend(self.event(Event::ProcessorExit {
                id: processor_id(host, i),
            }));
        }
        out
    }

    /// A host's owner monitor reports: its processors leave the pool when
    /// the owner has taken it back and join it when it is offered again.
    pub fn owner_report(&mut self, host: &str, report: OwnerReport) -> Vec<Out> {
        let Some(h) = self.hosts.get_mut(host) else {
            return Vec::new();
        };
        let before = h.owner.as_ref().map(|r| r.state);
        let state = report.state;
        let mut out = Vec::new();
        if before != Some(state) {
            out.push(Out::Log(format!(
                "host {host} is {state} ({})",
                report.decided_by
            )));
        }
        h.facts.offered = state == OwnerState::Offered;
        h.owner = Some(report);
        match state {
            OwnerState::Reclaimed => out.extend(self.leave_pool(host)),
            OwnerState::Offered => out.extend(self.join_pool(host)),
            OwnerState::Suspended => {}
        }
        out
    }

    /// A report from host `host` (a worker, or the master's own host);
    /// `None` for a message hosts do not send.
    pub fn from_host(&mut self, host: &str, msg: PeerMsg) -> Option<Vec<Out>> {
        Some(match msg {
            PeerMsg::Heartbeat => Vec::new(),
            PeerMsg::Started { tid, pid } => self.started(host, tid, pid),
            PeerMsg::Exited { tid, status } => self.exited(host, tid, status),
            PeerMsg::Restore { to, start, image } => {
                vec![Out::ToHost(
                    to.clone(),
                    PeerMsg::Restore { to, start, image },
                )]
            }
            PeerMsg::MigrateFailed { tid, reason } => self.migrate_failed(tid, &reason),
            PeerMsg::Output { tid, stream, line } => self.output(host, tid, stream, line),
            PeerMsg::VpCall { tid, id, call } => self.vp_call(host, tid, id, call),
            PeerMsg::Locate { tid } => self.locate(host, tid),
            PeerMsg::Owner(report) => self.owner_report(host, report),
            PeerMsg::OwnerDone { id, message } => self.owner_done(id, message),
            PeerMsg::Parked { tid } => self.parked(host, tid),
            PeerMsg::Slicing(r) => self.slicing_report(host, r),
            PeerMsg::Snap {
                tid,
                step: SnapStep::Paused { id, sent },
            } => self.snap_paused(tid, id, sent),
            PeerMsg::SnapImage { tid, id, image } => self.snap_image(host, tid, id, image),
            _ => return None,
        })
    }

    /// A VP waiting on a taken-back host was checkpointed to its disk.
    fn parked(&mut self, host: &str, tid: Tid) -> Vec<Out> {
        let Some((job, vp)) = self.tids.get(&tid).cloned() else {
            return Vec::new();
        };
        match self.jobs.get_mut(&job).and_then(|j| j.vps.get_mut(&vp)) {
            Some(v) if v.host.as_deref() == Some(host) && v.state == VpState::Running => {
                v.state = VpState::Parked;
                v.pid = None;
                vec![Out::Log(format!(
                    "VP t{tid:x} parked on {host}'s disk until a processor is free"
                ))]
            }
            _ => Vec::new(),
        }
    }

    /// The host carried out `mig owner reclaim|release`.
    pub fn owner_done(&mut self, id: u64, message: String) -> Vec<Out> {
        match self.owner_waiting.remove(&id) {
            Some(r) => vec![Out::Reply(r, Response::Ok { message })],
            None => Vec::new(),
        }
    }

    fn owner(
        &mut self,
        from: Requester,
        from_host: &str,
        action: OwnerAction,
        host: Option<String>,
    ) -> Vec<Out> {
        let err = |m: String| vec![Out::Reply(from.clone(), Response::Error { message: m })];
        if let Some(h) = &host {
            if !self.is_alive(h) {
                return err(format!("no live host {h:?}; `mig hosts` lists them"));
            }
        }
        match action {
            OwnerAction::Status => {
                let list = self
                    .hosts
                    .iter()
                    .filter(|(n, h)| h.alive && host.as_ref().is_none_or(|x| x == *n))
                    .filter_map(|(n, h)| Some((n.clone(), h.owner.clone()?)))
                    .collect();
                vec![Out::Reply(from, Response::Owner(list))]
            }
            OwnerAction::Reclaim | OwnerAction::Release => {
                let target = host.unwrap_or_else(|| from_host.to_string());
                let id = self.next_owner_id;
                self.next_owner_id += 1;
                self.owner_waiting.insert(id, from);
                vec![Out::ToHost(
                    target,
                    PeerMsg::OwnerCommand {
                        id,
                        reclaim: action == OwnerAction::Reclaim,
                    },
                )]
            }
        }
    }

    fn event(&mut self, e: Event) -> Vec<Out> {
        match self.sched.on_event(e.clone()) {
            Ok(actions) => self.carry_out(actions),
            Err(err) => vec![Out::Log(format!("scheduler refused {e:?}: {err}"))],
        }
    }

    fn tid_of(&self, job: &str, vp: u32) -> Option<Tid> {
        self.jobs
            .get(job)
            .and_then(|j| j.vps.get(&vp))
            .map(|v| v.tid)
    }

    /// How host `host` starts VP `vp` of `job` (with the job's program for
    /// that host's architecture).
    fn start_msg(&self, job: &str, vp: u32, host: &str) -> Option<PeerMsg> {
        let j = self.jobs.get(job)?;
        let v = j.vps.get(&vp)?;
        let arch = &self.hosts.get(host)?.facts.arch;
        Some(PeerMsg::Start(StartVp {
            tid: v.tid,
            job: job.to_string(),
            vp,
            nvps: j.vps.len() as u32,
            program: program_for(&v.program, arch)?,
            args: v.args.clone(),
            cwd: j.spec.cwd.clone(),
            env: j.spec.env.clone(),
            parent: v.parent,
            incarnation: j.incarnation,
        }))
    }

    fn carry_out(&mut self, actions: Vec<Action>) -> Vec<Out> {
        let mut out = Vec::new();
        for a in actions {
            match a {
                Action::Start { job, vp, host, .. } => out.extend(self.place(&job, vp, &host)),
                Action::Migrate {
                    job,
                    vp,
                    from_host,
                    to_host,
                    ..
                } => {
                    if self.is_alive(&from_host) {
                        out.extend(self.place(&job, vp, &to_host));
                        continue;
                    }
                    // Its host died with it: the whole job goes back to its
                    // last consistent checkpoint, if it has one.
                    if let Some(j) = self.jobs.get_mut(&*job).filter(|j| !j.ckpt.good.is_empty()) {
                        if let Some(v) = j.vps.get_mut(&vp) {
                            v.host = Some(to_host.to_string());
                        }
                        self.to_restart.insert(job.to_string());
                        continue;
                    }
                    // Its host died with it: start it again from the beginning.
                    if let Some(msg) = self.start_msg(&job, vp, &to_host) {
                        out.push(Out::Log(format!(
                            "restarting VP {vp} of {job} on {to_host} (its host {from_host} is gone)"
                        )));
                        out.extend(self.set_vp(
                            &job,
                            vp,
                            Some(to_host.to_string()),
                            VpState::Starting,
                        ));
                        out.push(Out::ToHost(to_host.to_string(), msg));
                    }
                }
                Action::Hold { job, vp, .. } => {
                    // A VP whose process lives on (stopped on a host its owner
                    // took back) stays where it is until a processor is free.
                    let hosts = &self.hosts;
                    let parked = self
                        .jobs
                        .get_mut(&*job)
                        .and_then(|j| j.vps.get_mut(&vp))
                        .filter(|v| {
                            let alive = v
                                .host
                                .as_ref()
                                .and_then(|h| hosts.get(h))
                                .is_some_and(|h| h.alive);
                            alive && v.state != VpState::Waiting
                        });
                    match parked {
                        Some(v) => {
                            v.wants = None;
                            out.push(Out::Log(format!(
                                "VP t{:x} waits on {} for a free processor",
                                v.tid,
                                v.host.as_deref().unwrap_or("?")
                            )));
                        }
                        None => out.extend(self.set_vp(&job, vp, None, VpState::Waiting)),
                    }
                }
                Action::Kill { job, vp, host, .. } => {
                    if let Some(tid) = self.tid_of(&job, vp) {
                        out.push(Out::ToHost(host.to_string(), PeerMsg::Kill { tid }));
                    }
                }
                Action::SlotTables {
                    generation,
                    slots,
                    all,
                    hosts,
                } => {
                    if self.quantum_ns == 0 {
                        continue;
                    }
                    // A new round length is a new epoch: every host's table.
                    let all = all || self.round.is_none_or(|(_, n)| n != slots as u64);
                    let mut targets: Vec<String> = hosts;
                    if all {
                        targets.extend(
                            self.hosts
                                .iter()
                                .filter(|(_, h)| h.alive)
                                .map(|(n, _)| n.clone()),
                        );
                    }
                    targets.sort();
                    targets.dedup();
                    targets.retain(|h| self.is_alive(h));
                    let tables = targets
                        .into_iter()
                        .map(|h| {
                            let t = self.slot_table(&h);
                            (h, t)
                        })
                        .collect();
                    out.push(Out::SlotTables {
                        generation,
                        slots,
                        all,
                        tables,
                    });
                }
            }
        }
        out
    }

    /// The scheduler puts VP `vp` of `job` on `host`: start it there if it
    /// has no process yet, leave it if it is there already, else move it
    /// (checkpoint where it is, restart there), now or after the move under way.
    fn place(&mut self, job: &str, vp: u32, host: &str) -> Vec<Out> {
        let Some(v) = self.jobs.get_mut(job).and_then(|j| j.vps.get_mut(&vp)) else {
            return Vec::new();
        };
        let tid = v.tid;
        match (&v.state, v.host.clone()) {
            (VpState::Waiting, _) | (_, None) => {
                let Some(msg) = self.start_msg(job, vp, host) else {
                    return Vec::new();
                };
                let mut out = self.set_vp(job, vp, Some(host.to_string()), VpState::Starting);
                out.push(Out::ToHost(host.to_string(), msg));
                out
            }
            (VpState::Exited | VpState::Restoring, _) => Vec::new(),
            (VpState::Parked, Some(at)) if at == host => {
                v.state = VpState::Starting;
                vec![Out::ToHost(host.to_string(), PeerMsg::Unpark { tid })]
            }
            (VpState::Moving(to), _) => {
                v.wants = (to != host).then(|| Wanted {
                    to: host.to_string(),
                    failures: 0,
                    retry_at: None,
                });
                Vec::new()
            }
            (VpState::Running | VpState::Starting, Some(at)) if at == host => {
                v.wants = None;
                Vec::new()
            }
            (VpState::Running | VpState::Starting | VpState::Parked, Some(at)) => {
                v.wants = Some(Wanted {
                    to: host.to_string(),
                    failures: 0,
                    retry_at: None,
                });
                match self.begin_move(tid, job, vp, &at, host) {
                    Ok(out) => out,
                    Err(e) => vec![Out::Log(format!("cannot move VP t{tid:x} to {host}: {e}"))],
                }
            }
        }
    }

    /// Ask `src` to checkpoint VP `tid` and ship it to `to`; messages for
    /// it are held everywhere until it runs there.
    fn begin_move(
        &mut self,
        tid: Tid,
        job: &str,
        vp: u32,
        src: &str,
        to: &str,
    ) -> Result<Vec<Out>, String> {
        let to_arch = self
            .hosts
            .get(to)
            .filter(|h| h.alive)
            .map(|h| h.facts.arch.clone())
            .ok_or_else(|| format!("no live host {to:?}; `mig hosts` lists them"))?;
        let Some(PeerMsg::Start(start)) = self.start_msg(job, vp, to) else {
            return Err(format!(
                "{to} is {to_arch} and the job names no program for it: spawn it with a path \
                 template (./prog-{{arch}}) or ARCH=PATH,... to let it move there"
            ));
        };
        if crate::host::find_program(&start.program, &start.cwd, &start.env).is_none() {
            return Err(format!(
                "the job's program for {to_arch}, {:?}, does not exist: VP t{tid:x} cannot run on {to}",
                start.program
            ));
        }
        if let Some(v) = self.jobs.get_mut(job).and_then(|j| j.vps.get_mut(&vp)) {
            v.state = VpState::Moving(to.to_string());
        }
        Ok(vec![
            Out::Broadcast(PeerMsg::Directory(vec![(tid, Loc::Waiting)])),
            Out::ToHost(
                src.to_string(),
                PeerMsg::Checkpoint {
                    to: to.to_string(),
                    start,
                },
            ),
            Out::Log(format!("moving VP t{tid:x} from {src} to {to}")),
        ])
    }

    /// Moves the scheduler asked for that are due: after a move under way
    /// ended elsewhere, or again after a failed attempt.
    fn retry_moves(&mut self, now: Instant) -> Vec<Out> {
        let due: Vec<(Tid, String, u32, String, String)> = self
            .jobs
            .iter()
            .flat_map(|(job, j)| j.vps.iter().map(move |(&vp, v)| (job, vp, v)))
            .filter_map(|(job, vp, v)| {
                let w = v.wants.as_ref()?;
                let due = w.retry_at.is_none_or(|t| now >= t)
                    && matches!(v.state, VpState::Running | VpState::Parked);
                let at = v.host.clone().filter(|_| due)?;
                Some((v.tid, job.clone(), vp, at, w.to.clone()))
            })
            .collect();
        let mut out = Vec::new();
        for (tid, job, vp, at, to) in due {
            if at == to {
                self.clear_wants(&job, vp);
                continue;
            }
            match self.begin_move(tid, &job, vp, &at, &to) {
                Ok(o) => out.extend(o),
                Err(e) => {
                    self.clear_wants(&job, vp);
                    out.push(Out::Log(format!("not moving VP t{tid:x} to {to}: {e}")));
                }
            }
        }
        out
    }

    fn clear_wants(&mut self, job: &str, vp: u32) {
        if let Some(v) = self.jobs.get_mut(job).and_then(|j| j.vps.get_mut(&vp)) {
            v.wants = None;
        }
    }

    /// Checkpoint jobs every `every` (none: only on request); a checkpoint
    /// not done within `timeout` is given up.
    pub fn set_checkpointing(&mut self, every: Option<Duration>, timeout: Duration) {
        self.checkpoint_every = every;
        self.checkpoint_timeout = timeout;
    }

    /// `mig checkpoint JOB` (or the periodic one): every VP stops at a safe
    /// point and reports what it sent; see `SnapStep`.
    fn checkpoint_job(&mut self, job: &str, from: Option<Requester>) -> Vec<Out> {
        let err = |m: String| match &from {
            Some(r) => vec![Out::Reply(r.clone(), Response::Error { message: m })],
            None => vec![Out::Log(m)],
        };
        let Some(j) = self.jobs.get_mut(job) else {
            return err(format!("no job {job:?}; `mig ps` lists them"));
        };
        if let Some(r) = &mut j.ckpt.round {
            if let Some(f) = from {
                r.waiters.push(f);
            }
            return Vec::new();
        }
        let hosts: Option<Vec<(Tid, String)>> = j
            .vps
            .values()
            .map(|v| match (&v.state, &v.host) {
                (VpState::Running, Some(h)) => Some((v.tid, h.clone())),
                _ => None,
            })
            .collect();
        let Some(hosts) = hosts else {
            return err(format!(
                "job {job} cannot be checkpointed now: not all of its VPs are running"
            ));
        };
        let id = self.next_ckpt;
        self.next_ckpt += 1;
        j.ckpt.last = Some(self.now);
        j.ckpt.round = Some(Round {
            id,
            members: hosts.iter().map(|(t, _)| *t).collect(),
            started: self.now,
            paused: HashMap::new(),
            taken: HashMap::new(),
            waiters: from.into_iter().collect(),
        });
        let mut out = vec![Out::Log(format!(
            "checkpointing job {job} (generation {id})"
        ))];
        for (tid, host) in hosts {
            out.push(Out::ToHost(
                host,
                PeerMsg::Snap {
                    tid,
                    step: SnapStep::Begin {
                        id,
                        path: String::new(),
                    },
                },
            ));
        }
        out
    }

    /// The job a VP belongs to, and its checkpoint round if `id` is current.
    fn round_of(&mut self, tid: Tid, id: u64) -> Option<(String, &mut JobRec)> {
        let (job, _) = self.tids.get(&tid)?.clone();
        let j = self.jobs.get_mut(&job)?;
        j.ckpt.round.as_ref().filter(|r| r.id == id)?;
        Some((job, j))
    }

    /// A VP stopped for checkpoint `id`. Once all have, each is told how
    /// much its peers sent it.
    fn snap_paused(&mut self, tid: Tid, id: u64, sent: Vec<(Tid, u64)>) -> Vec<Out> {
        let Some((_, j)) = self.round_of(tid, id) else {
            return Vec::new();
        };
        let Some(r) = j.ckpt.round.as_mut() else {
            return Vec::new();
        };
        r.paused.insert(tid, sent);
        if r.paused.len() < r.members.len() {
            return Vec::new();
        }
        let paused = r.paused.clone();
        let members = r.members.clone();
        to_every_vp(j, &members, |tid| SnapStep::Now {
            id,
            expect: paused
                .iter()
                .filter_map(|(&from, sent)| {
                    sent.iter()
                        .find(|(to, _)| *to == tid)
                        .map(|&(_, n)| (from, n))
                })
                .collect(),
        })
    }

    /// VP `tid`'s image of checkpoint `id` arrived from `host`: keep it here
    /// (and on a third host when `host` is this one); once all are in, the
    /// checkpoint is good and the VPs go on.
    fn snap_image(&mut self, host: &str, tid: Tid, id: u64, image: Vec<u8>) -> Vec<Out> {
        let me = self.name.clone();
        let now = self.now;
        let spare = self
            .hosts
            .iter()
            .find(|(n, h)| h.alive && **n != me)
            .map(|(n, _)| n.clone());
        let Some((job, j)) = self.round_of(tid, id) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if host == me {
            // The image lives on this host already: one copy elsewhere.
            if let Some(other) = spare {
                out.push(Out::ToHost(
                    other,
                    PeerMsg::Replica {
                        job: job.clone(),
                        id,
                        tid,
                        image: image.clone(),
                    },
                ));
            }
        }
        let size = image.len();
        out.push(Out::StoreImage {
            job: job.clone(),
            id,
            tid,
            image,
        });
        let Some(r) = j.ckpt.round.as_mut() else {
            return out;
        };
        r.taken.insert(tid, size);
        if r.taken.len() < r.members.len() {
            return out;
        }
        let Some(r) = j.ckpt.round.take() else {
            return out;
        };
        let vps = j
            .vps
            .iter()
            .filter(|(_, v)| r.members.contains(&v.tid))
            .map(|(&vp, _)| vp)
            .collect();
        j.ckpt.good.push(Generation { id, vps });
        let extra = j.ckpt.good.len().saturating_sub(2);
        j.ckpt.good.drain(..extra);
        let bytes: usize = r.taken.values().sum();
        let took = now.saturating_duration_since(r.started);
        let message = format!(
            "job {job} checkpointed (generation {id}): {} VPs, {bytes} bytes",
            r.taken.len()
        );
        out.push(Out::Log(format!(
            "{message}, in about {} ms",
            took.as_millis()
        )));
        out.extend(to_every_vp(j, &r.members, |_| SnapStep::Resume { id }));
        out.push(Out::PruneCheckpoints {
            job: job.clone(),
            keep: j.ckpt.good.iter().map(|g| g.id).collect(),
        });
        for w in r.waiters {
            out.push(Out::Reply(
                w,
                Response::Ok {
                    message: message.clone(),
                },
            ));
        }
        out
    }

    /// Periodic checkpoints, and rounds that take too long given up.
    fn checkpoint_tick(&mut self, now: Instant) -> Vec<Out> {
        let mut out = Vec::new();
        let timeout = self.checkpoint_timeout;
        let mut due = Vec::new();
        for (job, j) in &mut self.jobs {
            if let Some(r) = j
                .ckpt
                .round
                .take_if(|r| now.duration_since(r.started) > timeout)
            {
                out.push(Out::Log(format!(
                    "checkpoint {} of job {job} given up: not every VP reached a safe point within {} s",
                    r.id,
                    timeout.as_secs()
                )));
                out.extend(to_every_vp(j, &r.members, |_| SnapStep::Abort { id: r.id }));
                for w in r.waiters {
                    out.push(Out::Reply(
                        w,
                        Response::Error {
                            message: format!("checkpoint of job {job} given up: not every VP reached a safe point"),
                        },
                    ));
                }
            }
            let every = self.checkpoint_every;
            let running = j.vps.values().all(|v| v.state == VpState::Running);
            if every.is_some_and(|e| j.ckpt.last.is_none_or(|l| now.duration_since(l) >= e))
                && j.ckpt.round.is_none()
                && running
                && !j.killed
            {
                due.push(job.clone());
            }
        }
        for job in due {
            out.extend(self.checkpoint_job(&job, None));
        }
        out
    }

    /// Restart `job` from its last good checkpoint: every VP's process is
    /// ended and started again from its image (on its host, or where the
    /// scheduler put it if its host is gone). `mig restart`, and
    /// automatically when a host dies under a job that has a checkpoint.
    fn restart_job(&mut self, job: &str, from: Option<Requester>) -> Vec<Out> {
        let err = |m: String| match &from {
            Some(r) => vec![Out::Reply(r.clone(), Response::Error { message: m })],
            None => vec![Out::Log(m)],
        };
        let Some(j) = self.jobs.get(job) else {
            return err(format!("no job {job:?}; `mig ps` lists them"));
        };
        let Some(gen) = j.ckpt.good.last().cloned() else {
            return err(format!(
                "job {job} has no checkpoint yet: `mig checkpoint {job}`, or set checkpoint_interval_s"
            ));
        };
        // VPs that ended after the checkpoint come back with it: the
        // scheduler places them again (`VpBack`), so they are gang-sliced
        // like the others.
        let back: Vec<(u32, String)> = j
            .vps
            .iter()
            .filter(|(vp, v)| gen.vps.contains(vp) && v.state == VpState::Exited)
            .filter_map(|(&vp, v)| {
                let arch = self.hosts.get(v.host.as_ref()?)?.facts.arch.clone();
                Some((vp, arch))
            })
            .collect();
        let mut actions = Vec::new();
        let mut out_back = Vec::new();
        let mut added = Vec::new();
        if !back.is_empty() {
            for (vp, arch) in back {
                let e = Event::VpBack {
                    job: job.to_string(),
                    vp,
                    arch,
                };
                match self.sched.on_event(e) {
                    Ok(a) => {
                        actions.extend(a);
                        added.push(vp);
                    }
                    Err(e) => out_back.push(Out::Log(format!("job {job}: {e}"))),
                }
            }
            // This job restarts where the scheduler now has its VPs; what
            // the scheduler asks of other jobs is carried out.
            actions.retain(|a| action_job(a) != Some(job));
            let placement = self
                .sched
                .job_view(job)
                .map(|v| v.placement)
                .unwrap_or_default();
            if let Some(j) = self.jobs.get_mut(job) {
                for (vp, v) in j.vps.iter_mut() {
                    if let Some((host, _)) = placement.get(vp).and_then(|p| p.rsplit_once('/')) {
                        v.host = Some(host.to_string());
                    }
                }
            }
        }
        out_back.extend(self.carry_out(actions));
        let Some(j) = self.jobs.get(job) else {
            return err(format!("no job {job:?}; `mig ps` lists them"));
        };
        let placed: Option<Vec<(u32, Tid, String)>> = j
            .vps
            .iter()
            .filter(|(vp, _)| gen.vps.contains(vp))
            .map(|(&vp, v)| {
                let h = v.host.clone().filter(|h| self.is_alive(h))?;
                Some((vp, v.tid, h))
            })
            .collect();
        let Some(placed) = placed else {
            let mut out = err(format!(
                "job {job} waits for processors before it can restart from its checkpoint"
            ));
            // The VPs brought back leave again: the job goes on as it was.
            for vp in added {
                out.extend(self.event(Event::VpExit {
                    job: job.to_string(),
                    vp,
                }));
            }
            out.extend(out_back);
            return out;
        };
        // An older generation is the fallback should this one's images be
        // refused, if it holds the same VPs.
        let ids: Vec<u64> = j
            .ckpt
            .good
            .iter()
            .rev()
            .filter(|g| g.vps == gen.vps)
            .map(|g| g.id)
            .collect();
        // Every VP the job has had since, dropped or not.
        let fenced: Vec<Tid> = j.vps.values().map(|v| v.tid).collect();
        self.groups.restarted(&fenced);
        let mut out = vec![Out::Log(format!(
            "restarting job {job} from its checkpoint (generation {})",
            gen.id
        ))];
        let mut out_after = self.drop_unsaved(job, &gen.vps, &mut out);
        let Some(j) = self.jobs.get_mut(job) else {
            return out;
        };
        // Whatever the job's VPs sent after the checkpoint is not part of
        // the run that goes on: every host drops it from now on.
        j.incarnation += 1;
        out.push(Out::Broadcast(PeerMsg::Fence {
            tids: fenced,
            incarnation: j.incarnation,
        }));
        let mut placements = Vec::new();
        let mut dir = Vec::new();
        for (vp, tid, host) in placed {
            let Some(PeerMsg::Start(start)) = self.start_msg(job, vp, &host) else {
                continue;
            };
            out.push(Out::ToHost(host.clone(), PeerMsg::Kill { tid }));
            placements.push((tid, host, start));
            dir.push((tid, Loc::Waiting));
        }
        if let Some(j) = self.jobs.get_mut(job) {
            j.ckpt.round = None;
            for v in j.vps.values_mut() {
                v.state = VpState::Restoring;
                v.pid = None;
                v.exit = None;
                v.wants = None;
            }
        }
        out.push(Out::Broadcast(PeerMsg::Directory(dir)));
        out.push(Out::RestoreJob {
            job: job.to_string(),
            ids,
            placements,
        });
        if let Some(r) = from {
            out.push(Out::Reply(
                r,
                Response::Ok {
                    message: format!("restarting job {job} from its last checkpoint"),
                },
            ));
        }
        out.append(&mut out_after);
        out.append(&mut out_back);
        out
    }

    /// A restart goes back to a checkpoint taken before the VPs of `job`
    /// outside `keep` were spawned: they are ended and forgotten (their
    /// parents, rolled back, spawn them again under new Tids). Their
    /// processes' ends go into `out`; the scheduler's answers to their
    /// exits are returned, to follow the restart.
    fn drop_unsaved(&mut self, job: &str, keep: &BTreeSet<u32>, out: &mut Vec<Out>) -> Vec<Out> {
        let Some(j) = self.jobs.get_mut(job) else {
            return Vec::new();
        };
        let dropped: Vec<(u32, VpRec)> = j.vps.extract_if(.., |vp, _| !keep.contains(vp)).collect();
        let members: BTreeSet<Tid> = j.vps.values().map(|v| v.tid).collect();
        let mut gone = Vec::new();
        let mut events = Vec::new();
        for (vp, v) in dropped {
            let exited = v.state == VpState::Exited;
            if let Some(h) = v
                .host
                .filter(|h| !exited && self.hosts.get(h).is_some_and(|h| h.alive))
            {
                out.push(Out::ToHost(h, PeerMsg::Kill { tid: v.tid }));
            }
            if !exited {
                events.push(Event::VpExit {
                    job: job.to_string(),
                    vp,
                });
            }
            self.tids.remove(&v.tid);
            gone.push((v.tid, Loc::Gone));
            // Its exit is news to nobody in the job: they are rolled back
            // to before it existed.
            if let Some(w) = self.exit_watch.get_mut(&v.tid) {
                w.retain(|(to, _)| !members.contains(to));
            }
            let status = ExitInfo {
                code: None,
                signal: None,
                error: Some(format!(
                    "dropped: spawned after the checkpoint job {job} restarted from"
                )),
            };
            out.extend(self.vp_gone(v.tid, &status));
            self.gone.insert(v.tid, status);
        }
        if !gone.is_empty() {
            out.push(Out::Log(format!(
                "job {job}: {} VPs spawned after its checkpoint dropped",
                gone.len()
            )));
            out.push(Out::Broadcast(PeerMsg::Directory(gone)));
        }
        events.into_iter().flat_map(|e| self.event(e)).collect()
    }

    /// Host `host`'s slot table from the scheduler's map: per slot, per
    /// processor of the host, the Tids there.
    fn slot_table(&self, host: &str) -> Vec<Vec<SlotCell>> {
        self.sched
            .host_table(host)
            .into_iter()
            .map(|slot| {
                slot.into_iter()
                    .filter_map(|c| {
                        let j = self.jobs.get(&c.job)?;
                        let processor = c.processor.rsplit('/').next()?.parse().ok()?;
                        Some(SlotCell {
                            processor,
                            tids: c
                                .vps
                                .iter()
                                .filter_map(|vp| j.vps.get(vp).map(|v| v.tid))
                                .collect(),
                            independent: j.spec.independent,
                        })
                    })
                    .collect()
            })
            .collect()
    }

    /// The server's clock, for answers that depend on it (`mig map`).
    pub fn set_wall(&mut self, ns: u64) {
        self.wall_ns = ns;
    }

    /// `set_wall`, chained.
    pub fn with_wall(&mut self, ns: u64) -> &mut Master {
        self.wall_ns = ns;
        self
    }

    /// The round the hosts now slice: its epoch (ns) and slots.
    pub fn set_round(&mut self, epoch_ns: u64, slots: u64) {
        self.round = Some((epoch_ns, slots));
    }

    /// The slot length (ns); 0 when not slicing.
    pub fn quantum_ns(&self) -> u64 {
        self.quantum_ns
    }

    /// The round in force, if tables went out.
    pub fn round(&self) -> Option<(u64, u64)> {
        self.round
    }

    /// A host's slicer reported.
    fn slicing_report(&mut self, host: &str, r: SliceReport) -> Vec<Out> {
        let h = self.slicing.entry(host.to_string()).or_default();
        for s in r.switches {
            if h.switches.len() == KEEP_SWITCHES {
                h.switches.pop_front();
            }
            h.switches.push_back(s);
        }
        h.installed.extend(r.installed);
        let extra = h.installed.len().saturating_sub(64);
        h.installed.drain(..extra);
        Vec::new()
    }

    /// `mig stats`: switch lateness per host and overall, cross-host skew
    /// for the same boundary, time lost to switching.
    fn stats(&self) -> StatsInfo {
        fn pcts(mut v: Vec<f64>) -> [f64; 3] {
            if v.is_empty() {
                return [0.0; 3];
            }
            v.sort_by(f64::total_cmp);
            let at = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
            [at(0.5), at(0.99), at(1.0)]
        }
        let ms = |ns: u64| ns as f64 / 1e6;
        let lost = |sw: &[&Switch]| {
            let (first, last) = match (
                sw.iter().map(|s| s.ideal_ns).min(),
                sw.iter().map(|s| s.ideal_ns).max(),
            ) {
                (Some(a), Some(b)) if b > a => (a, b),
                _ => return 0.0,
            };
            let took: u64 = sw.iter().map(|s| s.took_ns).sum();
            took as f64 / (last - first) as f64
        };
        let mut hosts = Vec::new();
        let mut all: Vec<&Switch> = Vec::new();
        let mut by_boundary: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for (name, h) in &self.slicing {
            let sw: Vec<&Switch> = h.switches.iter().collect();
            for s in &sw {
                by_boundary.entry(s.ideal_ns).or_default().push(s.late_ns);
            }
            hosts.push(SliceStats {
                host: name.clone(),
                switches: sw.len() as u64,
                late_ms: pcts(sw.iter().map(|s| ms(s.late_ns)).collect()),
                lost: lost(&sw),
                installed: h.installed.clone(),
            });
            all.extend(sw);
        }
        let lost_all = if hosts.is_empty() {
            0.0
        } else {
            hosts.iter().map(|h| h.lost).sum::<f64>() / hosts.len() as f64
        };
        hosts.push(SliceStats {
            host: "all".into(),
            switches: all.len() as u64,
            late_ms: pcts(all.iter().map(|s| ms(s.late_ns)).collect()),
            lost: lost_all,
            installed: Vec::new(),
        });
        let skews: Vec<f64> = by_boundary
            .values()
            .filter(|l| l.len() > 1)
            .map(|l| {
                let (lo, hi) = (
                    l.iter().min().copied().unwrap_or(0),
                    l.iter().max().copied().unwrap_or(0),
                );
                ms(hi - lo)
            })
            .collect();
        StatsInfo {
            quantum_ms: ms(self.quantum_ns),
            slots: self.sched.map().columns().len() as u32,
            boundaries: skews.len() as u64,
            skew_ms: pcts(skews),
            hosts,
        }
    }

    fn set_vp(&mut self, job: &str, vp: u32, host: Option<String>, state: VpState) -> Vec<Out> {
        match self.jobs.get_mut(job).and_then(|j| j.vps.get_mut(&vp)) {
            Some(v) => {
                v.host = host;
                v.state = state;
                v.pid = None;
                vec![Out::Broadcast(PeerMsg::Directory(vec![(v.tid, loc_of(v))]))]
            }
            None => Vec::new(),
        }
    }

    /// A host started a VP (after a migration: the target host restored it).
    pub fn started(&mut self, host: &str, tid: Tid, pid: u32) -> Vec<Out> {
        let Some((job, vp)) = self.tids.get(&tid).cloned() else {
            return Vec::new();
        };
        let Some(v) = self.jobs.get_mut(&job).and_then(|j| j.vps.get_mut(&vp)) else {
            return Vec::new();
        };
        v.pid = Some(pid);
        match &v.state {
            VpState::Restoring => {
                v.state = VpState::Running;
                v.host = Some(host.to_string());
                vec![Out::Broadcast(PeerMsg::Directory(vec![(
                    tid,
                    Loc::At(host.to_string()),
                )]))]
            }
            VpState::Moving(to) if to == host => {
                let from = v.host.replace(host.to_string()).unwrap_or_default();
                v.state = VpState::Running;
                if v.wants.as_ref().is_some_and(|w| w.to == host) {
                    v.wants = None;
                }
                let mut out = vec![
                    Out::Log(format!("VP t{tid:x} moved from {from} to {host}")),
                    Out::Broadcast(PeerMsg::Directory(vec![(tid, Loc::At(host.to_string()))])),
                ];
                out.extend(self.follow_in_map(&job, vp, host));
                out
            }
            _ => {
                v.state = VpState::Running;
                Vec::new()
            }
        }
    }

    /// A VP moved by hand runs where the scheduler's map does not have it:
    /// its place in the map follows it (so gang slicing and later decisions
    /// see where it is), if that host has room in its job's slots.
    fn follow_in_map(&mut self, job: &str, vp: u32, host: &str) -> Vec<Out> {
        let mapped = self
            .sched
            .job_view(job)
            .and_then(|v| v.placement.get(&vp).cloned());
        let Some(p) = mapped else {
            return Vec::new();
        };
        if p.rsplit_once('/').is_some_and(|(h, _)| h == host) {
            return Vec::new();
        }
        let e = Event::VpMoved {
            job: job.to_string(),
            vp,
            host: host.to_string(),
        };
        match self.sched.on_event(e) {
            Ok(actions) => self.carry_out(actions),
            Err(e) => vec![Out::Log(format!(
                "VP {vp} of {job} runs on {host} outside the allocation map ({e}): gang slicing there leaves it alone"
            ))],
        }
    }

    /// `mig migrate`: checkpoint VP `target` on its host and restart it on
    /// `to`. Messages for it are held everywhere until it runs there.
    fn migrate(&mut self, from: Requester, target: &str, to: &str) -> Vec<Out> {
        let err = |m: String| vec![Out::Reply(from.clone(), Response::Error { message: m })];
        let hex = target.trim_start_matches('t').trim_start_matches("0x");
        let found = Tid::from_str_radix(hex, 16).ok().and_then(|tid| {
            let (job, vp) = self.tids.get(&tid)?.clone();
            let v = self.jobs.get(&job)?.vps.get(&vp)?;
            Some((tid, job, vp, v.host.clone(), v.state.clone()))
        });
        let Some((tid, job, vp, host, state)) = found else {
            return err(format!("no VP {target:?}; `mig ps` lists them (as t40001)"));
        };
        let Some(src) = host.filter(|_| state == VpState::Running) else {
            return err(format!("VP t{tid:x} is not running (it is {state:?})"));
        };
        if src == to {
            return err(format!("VP t{tid:x} already runs on {to}"));
        }
        match self.begin_move(tid, &job, vp, &src, to) {
            Ok(mut out) => {
                out.push(Out::Reply(
                    from,
                    Response::Ok {
                        message: format!("moving VP t{tid:x} from {src} to {to}"),
                    },
                ));
                out
            }
            Err(e) => err(e),
        }
    }

    /// The VP's host could not checkpoint it: it stays where it is.
    pub fn migrate_failed(&mut self, tid: Tid, reason: &str) -> Vec<Out> {
        let Some((job, vp)) = self.tids.get(&tid).cloned() else {
            return Vec::new();
        };
        let Some(v) = self.jobs.get_mut(&job).and_then(|j| j.vps.get_mut(&vp)) else {
            return Vec::new();
        };
        let VpState::Moving(to) = v.state.clone() else {
            return Vec::new();
        };
        v.state = VpState::Running;
        let at = v.host.clone().unwrap_or_default();
        let mut also = String::new();
        if let Some(w) = &mut v.wants {
            if w.to == to {
                w.failures += 1;
                if w.failures >= MAX_MOVE_ATTEMPTS {
                    also = format!("; gave up moving it to {to} after {} attempts", w.failures);
                    v.wants = None;
                } else {
                    let wait = Duration::from_secs(5) * 2u32.pow(w.failures - 1);
                    w.retry_at = Some(self.now + wait);
                    also = format!("; trying again in {} s", wait.as_secs());
                }
            }
        }
        let reason = format!("{reason}{also}");
        vec![
            Out::Log(format!("VP t{tid:x} stays on {at}: {reason}")),
            Out::Broadcast(PeerMsg::Directory(vec![(tid, Loc::At(at))])),
        ]
    }

    /// A line of a VP's output.
    pub fn output(&mut self, host: &str, tid: Tid, stream: Stream, line: String) -> Vec<Out> {
        let Some((job, vp)) = self.tids.get(&tid).cloned() else {
            return Vec::new();
        };
        let Some(j) = self.jobs.get(&job) else {
            return Vec::new();
        };
        let mut out = vec![Out::Log(format!("[t{tid:x} {job}/{vp}@{host}] {line}"))];
        for w in &j.waiters {
            out.push(Out::Reply(
                w.clone(),
                Response::Output {
                    tid,
                    vp,
                    host: host.to_string(),
                    stream,
                    line: line.clone(),
                },
            ));
        }
        out
    }

    /// A host reports a VP ended.
    pub fn exited(&mut self, host: &str, tid: Tid, status: ExitInfo) -> Vec<Out> {
        let Some((job, vp)) = self.tids.get(&tid).cloned() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        {
            let Some(j) = self.jobs.get_mut(&job) else {
                return out;
            };
            let Some(v) = j.vps.get_mut(&vp) else {
                return out;
            };
            // The end of a process the job's restart replaces is no exit.
            if v.state == VpState::Restoring {
                return out;
            }
            // A report from a host the VP already left (restarted elsewhere) is stale.
            let restoring_there = matches!(&v.state, VpState::Moving(to) if to == host);
            if (v.host.as_deref() != Some(host) && !restoring_there) || v.state == VpState::Exited {
                return out;
            }
            v.state = VpState::Exited;
            v.exit = Some(status.clone());
            out.push(Out::Log(format!(
                "VP t{tid:x} ({job}/{vp}) on {host}: {status}"
            )));
            out.push(Out::Broadcast(PeerMsg::Directory(vec![(tid, Loc::Gone)])));
            for w in &j.waiters {
                out.push(Out::Reply(
                    w.clone(),
                    Response::VpDone {
                        tid,
                        vp,
                        host: host.to_string(),
                        status: status.clone(),
                    },
                ));
            }
        }
        out.extend(self.vp_gone(tid, &status));
        if !self.jobs.get(&job).is_some_and(|j| j.killed) {
            out.extend(self.event(Event::VpExit {
                job: job.clone(),
                vp,
            }));
        }
        out.extend(self.finish_if_done(&job));
        out
    }

    fn finish_if_done(&mut self, job: &str) -> Vec<Out> {
        let done = self
            .jobs
            .get(job)
            .is_some_and(|j| j.vps.values().all(|v| v.state == VpState::Exited));
        if !done {
            return Vec::new();
        }
        let Some(j) = self.jobs.remove(job) else {
            return Vec::new();
        };
        for v in j.vps.values() {
            self.tids.remove(&v.tid);
            if let Some(e) = &v.exit {
                self.gone.insert(v.tid, e.clone());
            }
        }
        let status = j
            .vps
            .values()
            .filter_map(|v| v.exit.as_ref())
            .map(ExitInfo::status)
            .find(|&s| s != 0)
            .unwrap_or(0);
        let mut out = vec![Out::Log(format!("job {job} finished with status {status}"))];
        for w in j.waiters {
            out.push(Out::Reply(
                w,
                Response::JobDone {
                    job: job.to_string(),
                    status,
                },
            ));
        }
        out
    }

    /// A control request from `from`, made on host `from_host`.
    pub fn control(&mut self, from: Requester, from_host: &str, req: Request) -> Vec<Out> {
        match req {
            Request::Hosts => vec![Out::Reply(from, Response::Hosts(self.hosts_info()))],
            Request::Ps => vec![Out::Reply(from, Response::Ps(self.ps()))],
            Request::Map => {
                let processors = self
                    .sched
                    .map()
                    .processors()
                    .map(|(_, p)| p.id.to_string())
                    .collect();
                let slots = self
                    .sched
                    .table()
                    .into_iter()
                    .map(|s| {
                        s.into_iter()
                            .map(|c| MapCell {
                                processor: c.processor,
                                job: c.job,
                                vps: c.vps,
                            })
                            .collect()
                    })
                    .collect();
                let now = self
                    .round
                    .filter(|&(_, n)| n > 1 && self.quantum_ns > 0 && self.wall_ns >= 1)
                    .map(|(epoch, n)| {
                        (self.wall_ns.saturating_sub(epoch) / self.quantum_ns % n) as u32
                    });
                vec![Out::Reply(
                    from,
                    Response::Map {
                        processors,
                        slots,
                        now,
                    },
                )]
            }
            Request::Spawn(spec) => self.spawn(from, from_host, spec),
            Request::Kill { target } => self.kill(from, &target),
            Request::Migrate { tid, to } => self.migrate(from, &tid, &to),
            Request::Owner { action, host } => self.owner(from, from_host, action, host),
            Request::Stats => vec![Out::Reply(from, Response::Stats(self.stats()))],
            Request::Checkpoint { job } => self.checkpoint_job(&job, Some(from)),
            Request::Restart { job } => self.restart_job(&job, Some(from)),
            Request::Halt => {
                let mut out: Vec<Out> = self
                    .hosts
                    .iter()
                    .filter(|(_, h)| h.alive)
                    .map(|(n, _)| Out::ToHost(n.clone(), PeerMsg::Halt))
                    .collect();
                out.insert(
                    0,
                    Out::Reply(
                        from,
                        Response::Ok {
                            message: format!("halting {} hosts", out.len()),
                        },
                    ),
                );
                out
            }
        }
    }

    fn spawn(&mut self, from: Requester, from_host: &str, spec: SpawnSpec) -> Vec<Out> {
        let err = |m: String| vec![Out::Reply(from.clone(), Response::Error { message: m })];
        if spec.n == 0 || spec.n > 65536 {
            return err(format!(
                "cannot start {} VPs: ask for between 1 and 65536",
                spec.n
            ));
        }
        let arch = match self
            .hosts
            .get(from_host)
            .or_else(|| self.hosts.get(&self.name))
        {
            Some(h) => h.facts.arch.clone(),
            None => return err("no host to run on".into()),
        };
        if let Err(m) = check_program(&spec, &arch) {
            return err(m);
        }
        let job = format!("j{}", self.next_job);
        self.next_job += 1;
        let mut vps = BTreeMap::new();
        let mut tids = Vec::new();
        for vp in 0..spec.n {
            let tid = self.next_tid;
            self.next_tid += 1;
            self.tids.insert(tid, (job.clone(), vp));
            tids.push(tid);
            vps.insert(
                vp,
                VpRec {
                    tid,
                    program: spec.program.clone(),
                    args: spec.args.clone(),
                    parent: spec.parent,
                    host: None,
                    pid: None,
                    state: VpState::Waiting,
                    exit: None,
                    wants: None,
                },
            );
        }
        let waiters = if spec.wait {
            vec![from.clone()]
        } else {
            Vec::new()
        };
        let n = spec.n;
        self.jobs.insert(
            job.clone(),
            JobRec {
                spec,
                vps,
                waiters,
                killed: false,
                ckpt: Ckpt::default(),
                incarnation: 0,
                next_vp: n,
            },
        );
        let mut out = vec![
            Out::Broadcast(PeerMsg::Directory(
                tids.iter().map(|&t| (t, Loc::Waiting)).collect(),
            )),
            Out::Reply(
                from,
                Response::Spawned {
                    job: job.clone(),
                    tids,
                },
            ),
            Out::Log(format!("job {job}: {n} VPs of {arch}")),
        ];
        out.extend(self.event(Event::Submit {
            job,
            vps: BTreeMap::from([(arch, n)]),
        }));
        out
    }

    fn kill(&mut self, from: Requester, target: &str) -> Vec<Out> {
        if self.jobs.contains_key(target) {
            if let Some(j) = self.jobs.get_mut(target) {
                j.killed = true;
            }
            let mut out = self.event(Event::JobExit {
                job: target.to_string(),
            });
            // VPs never started have nothing to kill: they end here.
            let never: Vec<u32> = self.jobs[target]
                .vps
                .iter()
                .filter(|(_, v)| v.host.is_none() && v.state != VpState::Exited)
                .map(|(&i, _)| i)
                .collect();
            for vp in never {
                if let Some(v) = self.jobs.get_mut(target).and_then(|j| j.vps.get_mut(&vp)) {
                    out.push(Out::Broadcast(PeerMsg::Directory(vec![(v.tid, Loc::Gone)])));
                    v.state = VpState::Exited;
                    v.exit = Some(ExitInfo {
                        code: None,
                        signal: Some(9),
                        error: None,
                    });
                }
            }
            out.push(Out::Reply(
                from,
                Response::Ok {
                    message: format!("killing job {target}"),
                },
            ));
            out.extend(self.finish_if_done(target));
            return out;
        }
        let tid = target.trim_start_matches("t").trim_start_matches("0x");
        if let Ok(tid) = Tid::from_str_radix(tid, 16) {
            if let Some((job, vp)) = self.tids.get(&tid).cloned() {
                if let Some(host) = self
                    .jobs
                    .get(&job)
                    .and_then(|j| j.vps.get(&vp))
                    .and_then(|v| v.host.clone())
                {
                    return vec![
                        Out::ToHost(host, PeerMsg::Kill { tid }),
                        Out::Reply(
                            from,
                            Response::Ok {
                                message: format!("killing VP t{tid:x}"),
                            },
                        ),
                    ];
                }
            }
        }
        vec![Out::Reply(
            from,
            Response::Error {
                message: format!(
                    "no job or VP {target:?}; `mig ps` lists them (jobs as j1, VPs as t40001)"
                ),
            },
        )]
    }

    /// A VP is gone for good: tell those who asked, and leave its groups.
    fn vp_gone(&mut self, tid: Tid, status: &ExitInfo) -> Vec<Out> {
        let notice = Notice::VpExited {
            tid,
            status: status.clone(),
        };
        let mut out: Vec<Out> = self
            .exit_watch
            .remove(&tid)
            .unwrap_or_default()
            .into_iter()
            .map(|(to, tag)| notice_to(to, tag, &notice))
            .collect();
        self.host_watch.retain(|&(t, _, _)| t != tid);
        for (w, id) in self.groups.exited(tid) {
            out.extend(self.vp_return(w, id, VpRet::Done));
        }
        out
    }

    /// The host a VP is on, if placed.
    fn host_of(&self, tid: Tid) -> Option<String> {
        let (job, vp) = self.tids.get(&tid)?;
        self.jobs.get(job)?.vps.get(vp)?.host.clone()
    }

    fn vp_return(&self, tid: Tid, id: u64, ret: VpRet) -> Vec<Out> {
        match self.host_of(tid) {
            Some(h) => vec![Out::ToHost(h, PeerMsg::VpReturn { tid, id, ret })],
            None => Vec::new(),
        }
    }

    /// A worker asks where `tid` is.
    pub fn locate(&self, host: &str, tid: Tid) -> Vec<Out> {
        let loc = match self.tids.get(&tid) {
            Some((job, vp)) => self
                .jobs
                .get(job)
                .and_then(|j| j.vps.get(vp))
                .map_or(Loc::Gone, loc_of),
            None => Loc::Gone,
        };
        vec![Out::ToHost(
            host.to_string(),
            PeerMsg::Directory(vec![(tid, loc)]),
        )]
    }

    /// A request of VP `tid` (on `host`).
    pub fn vp_call(&mut self, host: &str, tid: Tid, id: u64, call: VpCall) -> Vec<Out> {
        let reply = |ret: VpRet| {
            vec![Out::ToHost(
                host.to_string(),
                PeerMsg::VpReturn { tid, id, ret },
            )]
        };
        let Some((job, _)) = self.tids.get(&tid).cloned() else {
            return reply(VpRet::Error(format!("t{tid:x} is not a running VP")));
        };
        match call {
            VpCall::Spawn {
                program,
                args,
                n,
                new_job,
            } => {
                let Some(j) = self.jobs.get(&job) else {
                    return reply(VpRet::Error("the caller's job is gone".into()));
                };
                let spec = SpawnSpec {
                    program,
                    args,
                    n,
                    cwd: j.spec.cwd.clone(),
                    env: j.spec.env.clone(),
                    wait: false,
                    parent: Some(tid),
                    independent: false,
                };
                if new_job {
                    let mut out = self.spawn(Requester::Vp { tid, id }, host, spec);
                    for o in &mut out {
                        if let Out::Reply(Requester::Vp { .. }, resp) = o {
                            let ret = match resp {
                                Response::Spawned { tids, .. } => VpRet::Tids(tids.clone()),
                                Response::Error { message } => VpRet::Error(message.clone()),
                                _ => VpRet::Done,
                            };
                            *o = Out::ToHost(host.to_string(), PeerMsg::VpReturn { tid, id, ret });
                        }
                    }
                    return out;
                }
                self.grow_job(&job, host, tid, id, spec)
            }
            VpCall::Kill { tid: victim } => match self.host_of(victim) {
                Some(h) => {
                    let mut out = vec![Out::ToHost(h, PeerMsg::Kill { tid: victim })];
                    out.extend(reply(VpRet::Done));
                    out
                }
                None => reply(VpRet::Error(format!("no running VP t{victim:x}"))),
            },
            VpCall::Tasks => {
                let tids = self
                    .jobs
                    .get(&job)
                    .map(|j| j.vps.values().map(|v| v.tid).collect())
                    .unwrap_or_default();
                reply(VpRet::Tids(tids))
            }
            VpCall::Notify { on, tag } => match on {
                NotifyOn::VpExit(watched) => {
                    let running = self.tids.get(&watched).is_some_and(|(j, v)| {
                        self.jobs
                            .get(j)
                            .and_then(|j| j.vps.get(v))
                            .is_some_and(|v| v.state != VpState::Exited)
                    });
                    let mut out = reply(VpRet::Done);
                    if running {
                        self.exit_watch.entry(watched).or_default().push((tid, tag));
                    } else {
                        let status = self.exit_of(watched).unwrap_or(ExitInfo {
                            code: None,
                            signal: None,
                            error: Some("no such VP".into()),
                        });
                        out.push(notice_to(
                            tid,
                            tag,
                            &Notice::VpExited {
                                tid: watched,
                                status,
                            },
                        ));
                    }
                    out
                }
                NotifyOn::HostJoin | NotifyOn::HostLeave => {
                    self.host_watch.push((tid, tag, on == NotifyOn::HostJoin));
                    reply(VpRet::Done)
                }
            },
            VpCall::Join { group } => {
                let i = self.groups.join(&group, tid);
                reply(VpRet::Instance(i))
            }
            VpCall::Leave { group } => {
                let (was, released) = self.groups.leave(&group, tid);
                let mut out = if was {
                    reply(VpRet::Done)
                } else {
                    reply(VpRet::Error(format!("not a member of group {group:?}")))
                };
                for (w, wid) in released {
                    out.extend(self.vp_return(w, wid, VpRet::Done));
                }
                out
            }
            VpCall::Members { group } => reply(VpRet::Members(self.groups.members(&group))),
            VpCall::Barrier { group, count } => match self.groups.barrier(&group, tid, id, count) {
                Ok(released) => released
                    .into_iter()
                    .flat_map(|(w, wid)| self.vp_return(w, wid, VpRet::Done))
                    .collect(),
                Err(e) => reply(VpRet::Error(e)),
            },
        }
    }

    fn exit_of(&self, tid: Tid) -> Option<ExitInfo> {
        if let Some(e) = self.gone.get(&tid) {
            return Some(e.clone());
        }
        let (j, v) = self.tids.get(&tid)?;
        self.jobs.get(j)?.vps.get(v)?.exit.clone()
    }

    /// `new_VP`: a VP of `job` starts `spec.n` more VPs in it.
    fn grow_job(&mut self, job: &str, host: &str, tid: Tid, id: u64, spec: SpawnSpec) -> Vec<Out> {
        let reply = |ret: VpRet| Out::ToHost(host.to_string(), PeerMsg::VpReturn { tid, id, ret });
        if spec.n == 0 || spec.n > 65536 {
            return vec![reply(VpRet::Error(format!(
                "cannot start {} VPs: ask for between 1 and 65536",
                spec.n
            )))];
        }
        let arch = match self.hosts.get(host) {
            Some(h) => h.facts.arch.clone(),
            None => return vec![reply(VpRet::Error("no host to run on".into()))],
        };
        if let Err(m) = check_program(&spec, &arch) {
            return vec![reply(VpRet::Error(m))];
        }
        let mut tids = Vec::new();
        let mut events = Vec::new();
        if let Some(j) = self.jobs.get_mut(job) {
            for _ in 0..spec.n {
                let vp = j.next_vp;
                j.next_vp += 1;
                let t = self.next_tid;
                self.next_tid += 1;
                self.tids.insert(t, (job.to_string(), vp));
                tids.push(t);
                j.vps.insert(
                    vp,
                    VpRec {
                        tid: t,
                        program: spec.program.clone(),
                        args: spec.args.clone(),
                        parent: Some(tid),
                        host: None,
                        pid: None,
                        state: VpState::Waiting,
                        exit: None,
                        wants: None,
                    },
                );
                events.push(Event::NewVp {
                    job: job.to_string(),
                    arch: arch.clone(),
                });
            }
        }
        let mut out = vec![
            Out::Broadcast(PeerMsg::Directory(
                tids.iter().map(|&t| (t, Loc::Waiting)).collect(),
            )),
            reply(VpRet::Tids(tids)),
        ];
        for e in events {
            out.extend(self.event(e));
        }
        out
    }

    fn hosts_info(&self) -> Vec<HostInfo> {
        let mut counts: HashMap<&str, u32> = HashMap::new();
        for j in self.jobs.values() {
            for v in j.vps.values() {
                if let (Some(h), VpState::Running | VpState::Starting) = (&v.host, &v.state) {
                    *counts.entry(h.as_str()).or_default() += 1;
                }
            }
        }
        self.hosts
            .iter()
            .map(|(n, h)| HostInfo {
                facts: h.facts.clone(),
                alive: h.alive,
                master: h.master,
                vps: counts.get(n.as_str()).copied().unwrap_or(0),
                owner: h.owner.clone(),
            })
            .collect()
    }

    fn ps(&self) -> Vec<VpInfo> {
        let mut out = Vec::new();
        for (job, j) in &self.jobs {
            for (&vp, v) in &j.vps {
                out.push(VpInfo {
                    tid: v.tid,
                    job: job.clone(),
                    vp,
                    host: v.host.clone(),
                    pid: v.pid,
                    state: self.vp_state(v),
                });
            }
        }
        out
    }
}

impl Master {
    /// A VP's state as `mig ps` says it.
    fn vp_state(&self, v: &VpRec) -> String {
        let owner_back = v
            .host
            .as_ref()
            .and_then(|h| self.hosts.get(h))
            .is_some_and(|h| h.alive && !h.facts.offered);
        let mut s = match &v.state {
            VpState::Waiting => "waiting".to_string(),
            VpState::Starting => "starting".to_string(),
            VpState::Moving(to) => format!("moving to {to}"),
            VpState::Running if owner_back => "stopped (owner back)".to_string(),
            VpState::Parked => "parked on disk (owner back)".to_string(),
            VpState::Restoring => "restoring from the job's checkpoint".to_string(),
            VpState::Running => "running".to_string(),
            VpState::Exited => "exited".to_string(),
        };
        if let Some(w) = v.wants.as_ref().filter(|w| w.failures > 0) {
            s.push_str(&format!(
                ", to move to {} ({} failed attempt{})",
                w.to,
                w.failures,
                if w.failures == 1 { "" } else { "s" }
            ));
        }
        s
    }
}

fn loc_of(v: &VpRec) -> Loc {
    match (&v.state, &v.host) {
        (VpState::Exited, _) => Loc::Gone,
        (_, Some(h)) => Loc::At(h.clone()),
        (_, None) => Loc::Waiting,
    }
}

/// A job checkpoint's step for every VP of job `j`, to its host.
/// `step` for each VP of `j` in `members` (the VPs of a checkpoint round).
fn to_every_vp(j: &JobRec, members: &BTreeSet<Tid>, step: impl Fn(Tid) -> SnapStep) -> Vec<Out> {
    j.vps
        .values()
        .filter(|v| members.contains(&v.tid))
        .filter_map(|v| {
            let h = v.host.clone()?;
            Some(Out::ToHost(
                h,
                PeerMsg::Snap {
                    tid: v.tid,
                    step: step(v.tid),
                },
            ))
        })
        .collect()
}

/// A notice for VP `to` with `tag`.
fn notice_to(to: Tid, tag: i32, notice: &Notice) -> Out {
    let env = Envelope {
        from: SYSTEM,
        to,
        tag,
        seq: 0,
        incarnation: 0,
    };
    Out::Deliver(env, postcard::to_allocvec(notice).unwrap_or_default())
}

/// The job an action is about, if one.
fn action_job(a: &Action) -> Option<&str> {
    match a {
        Action::Start { job, .. }
        | Action::Migrate { job, .. }
        | Action::Hold { job, .. }
        | Action::Kill { job, .. } => Some(job),
        _ => None,
    }
}

/// The program of a job for architecture `arch`. A job names its program
/// as one path (the same everywhere), as a template with `{arch}` in it
/// (`./heat-{arch}`), or per architecture (`x86_64=./heat,aarch64=./heat-arm`;
/// a key matches the whole architecture or its part before `-`).
pub fn program_for(spec: &str, arch: &str) -> Option<String> {
    if spec.contains("{arch}") {
        return Some(spec.replace("{arch}", arch));
    }
    let pairs: Option<Vec<(&str, &str)>> = spec
        .split(',')
        .map(|p| {
            p.split_once('=')
                .filter(|(k, _)| !k.is_empty() && !k.contains('/'))
        })
        .collect();
    match pairs {
        Some(pairs) if spec.contains('=') => {
            let short = arch.split('-').next().unwrap_or(arch);
            pairs
                .iter()
                .find(|(k, _)| *k == arch)
                .or_else(|| pairs.iter().find(|(k, _)| *k == short))
                .map(|(_, p)| p.to_string())
        }
        _ => Some(spec.to_string()),
    }
}

/// The program must exist where the user named it (relative paths from the
/// spawn's working directory, bare names on `PATH`).
fn check_program(spec: &SpawnSpec, arch: &str) -> Result<(), String> {
    if spec.program.is_empty() {
        return Err("no program given: mig spawn [-n N] -- PROGRAM ARGS...".into());
    }
    if let Some((k, _)) = spec
        .env
        .iter()
        .find(|(k, _)| k.starts_with("MIG_") && k != libmig::vp::env::SPIN_US)
    {
        return Err(format!(
            "{k} is set by the daemon for every VP and cannot be given to a job"
        ));
    }
    let Some(program) = program_for(&spec.program, arch) else {
        return Err(format!(
            "{:?} names no program for {arch}, where the job starts",
            spec.program
        ));
    };
    match crate::host::find_program(&program, &spec.cwd, &spec.env) {
        Some(_) => Ok(()),
        None => Err(format!(
            "program {program:?} not found (relative to {} or on PATH); build it or give its path",
            spec.cwd
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_names_its_program_per_architecture() {
        assert_eq!(
            program_for("./heat", "aarch64-linux").as_deref(),
            Some("./heat")
        );
        assert_eq!(
            program_for("./heat-{arch}", "aarch64-linux").as_deref(),
            Some("./heat-aarch64-linux")
        );
        let map = "x86_64=./heat,aarch64-linux=./heat-arm";
        assert_eq!(program_for(map, "x86_64-linux").as_deref(), Some("./heat"));
        assert_eq!(
            program_for(map, "aarch64-linux").as_deref(),
            Some("./heat-arm")
        );
        assert_eq!(program_for(map, "riscv64-linux"), None);
        // A path with '=' in a directory is still one path.
        assert_eq!(
            program_for("/opt/a=b/prog", "x").as_deref(),
            Some("/opt/a=b/prog")
        );
    }

    fn facts(name: &str, procs: u32) -> HostFacts {
        HostFacts {
            name: name.into(),
            arch: "x86_64-linux".into(),
            processors: procs,
            capacity: 1.0,
            memory_mb: 1024,
            addr: "127.0.0.1:1".into(),
            pid: 1,
            offered: true,
        }
    }

    fn spec(n: u32) -> SpawnSpec {
        SpawnSpec {
            program: "/bin/true".into(),
            args: vec![],
            n,
            cwd: "/".into(),
            env: vec![],
            wait: true,
            parent: None,
            independent: false,
        }
    }

    fn starts(out: &[Out]) -> Vec<(String, Tid)> {
        out.iter()
            .filter_map(|o| match o {
                Out::ToHost(h, PeerMsg::Start(s)) => Some((h.clone(), s.tid)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_job_spreads_over_hosts_and_finishes_with_its_status() {
        let now = Instant::now();
        let (mut m, _) = Master::new(facts("h0", 1), now, Duration::ZERO);
        m.register(facts("h1", 1), now);
        let out = m.control(Requester::Local(7), "h0", Request::Spawn(spec(2)));
        let s = starts(&out);
        assert_eq!(s.len(), 2);
        assert_ne!(s[0].0, s[1].0, "one VP per host");
        for (h, tid) in &s {
            m.started(h, *tid, 100);
            let out = m.exited(
                h,
                *tid,
                ExitInfo {
                    code: Some(if h == "h1" { 3 } else { 0 }),
                    signal: None,
                    error: None,
                },
            );
            if h == &s[1].0 {
                assert!(out.contains(&Out::Reply(
                    Requester::Local(7),
                    Response::JobDone {
                        job: "j1".into(),
                        status: 3
                    }
                )));
            }
        }
        assert!(m.ps().is_empty());
    }

    #[test]
    fn a_dead_host_leaves_the_map_and_its_vps_restart_elsewhere() {
        let now = Instant::now();
        let (mut m, _) = Master::new(facts("h0", 1), now, Duration::ZERO);
        m.register(facts("h1", 1), now);
        let out = m.control(Requester::Local(1), "h0", Request::Spawn(spec(2)));
        assert_eq!(starts(&out).len(), 2);
        let out = m.tick(now + Duration::from_secs(10), Duration::from_secs(3));
        let again = starts(&out);
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].0, "h0");
        assert!(!m.is_alive("h1"));
        assert!(m.sched.map().processors().all(|(_, p)| &*p.host == "h0"));
        // It answers again on the same connection: back in the pool.
        m.heard_from("h1", now + Duration::from_secs(11));
        assert!(m.is_alive("h1"));
        assert_eq!(m.sched.map().processors().count(), 2);
        m.host_gone("h1", "connection lost");
        // Or it comes back under the same name.
        let (name, _) = m.register(facts("h1", 1), now);
        assert_eq!(name, "h1");
        assert!(m.is_alive("h1"));
    }

    #[test]
    fn bad_requests_are_clear_errors() {
        let now = Instant::now();
        let (mut m, _) = Master::new(facts("h0", 1), now, Duration::ZERO);
        let mut s = spec(1);
        s.program = "./no-such-program".into();
        let out = m.control(Requester::Local(1), "h0", Request::Spawn(s));
        assert!(
            matches!(&out[0], Out::Reply(_, Response::Error { message }) if message.contains("not found"))
        );
        let mut s = spec(1);
        s.env.push(("MIG_TID".into(), "1".into()));
        let out = m.control(Requester::Local(1), "h0", Request::Spawn(s));
        assert!(
            matches!(&out[0], Out::Reply(_, Response::Error { message }) if message.contains("MIG_TID is set by the daemon"))
        );
        let out = m.control(
            Requester::Local(1),
            "h0",
            Request::Kill {
                target: "j99".into(),
            },
        );
        assert!(
            matches!(&out[0], Out::Reply(_, Response::Error { message }) if message.contains("no job or VP"))
        );
        let (name, _) = m.register(facts("h0", 1), now);
        assert_eq!(name, "h0-2");
    }
}
