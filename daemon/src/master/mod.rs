//! The master's bookkeeping: hosts, jobs, Tids, and the embedded scheduler.
//!
//! What lives here: turning what hosts and users say (registrations,
//! heartbeats, VP starts and exits, output, control requests) into scheduler
//! events, and the scheduler's actions into messages. It does no I/O: every
//! method returns the `Out`s the server must carry out, so it is tested without
//! sockets. What does not: sockets, processes, clocks (`now` is passed in),
//! disks (whether a program exists is looked at where a spawn is asked for,
//! and by the host that starts it, which says so when it cannot).

mod balancing;
mod batch;
mod calls;
mod checkpoints;
mod history;
mod hosts;
mod jobs;
mod moves;
mod owner;
mod records;
mod replica;
#[cfg(test)]
mod replica_tests;
mod slicing;
#[cfg(test)]
mod tests;
mod tokens;
mod users;
mod voters;
mod vp;

pub use batch::join_directories;
use records::{not_replicated, HostRec, JobRec};
pub use replica::ImportError;
use slicing::HostSlicing;
pub use voters::{voters_wanted, VoterChange};
use vp::{VpRec, VpState};

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use libmig::msg::{
    Envelope, ExitInfo, HostFacts, JobInfo, Loc, LoopTurns, MapCell, Request, Response, SlotCell,
    SnapReport, SpawnSpec, StartVp, Tid, ToHost, ToMaster, VpRet,
};

use crate::groups::Groups;
use crate::mailbox::Mailbox;
use crate::sched::{Action, Event, Placement, Scheduler};

/// Who asked: a local control connection, or a worker forwarding for one.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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

/// Something the server must carry out.
#[derive(Debug, Clone, PartialEq)]
pub enum Out {
    /// A message to a host (possibly the master itself).
    ToHost(String, ToHost),
    /// Close the link to a host given up for dead: if it lives, it dials
    /// again and hears on the fresh link that it is fenced (the old one
    /// may be what failed).
    Disconnect(String),
    /// A reply to whoever asked.
    Reply(Requester, Response),
    /// A line for the daemon log.
    Log(String),
    /// A line of a job's output, to keep with its others (`mig logs`).
    JobOutput {
        /// The job.
        job: String,
        /// The line, as `mig spawn --wait` shows it.
        line: String,
    },
    /// A job ended: keep it in the history file.
    History(JobInfo),
    /// A job left the history: its kept output may go.
    ForgetOutput(String),
    /// A message to every live host, the master's own included.
    Broadcast(ToHost),
    /// A message for a VP (a notice from `SYSTEM`), routed like any other.
    Deliver(Envelope, Vec<u8>),
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

/// The master's state. It serializes (`export`) but for what means
/// nothing on another machine (see `import`).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Master {
    name: String,
    sched: Scheduler,
    /// How the scheduler places gang jobs (the virtual machine's policy).
    #[serde(default)]
    placement: Placement,
    hosts: BTreeMap<String, HostRec>,
    jobs: BTreeMap<String, JobRec>,
    tids: HashMap<Tid, (String, u32)>,
    next_tid: Tid,
    next_job: u64,
    groups: Groups,
    /// PVM programs' message mailbox.
    #[serde(default)]
    mailbox: Mailbox,
    /// Answers to calls of VPs that came back from their hosts while the
    /// VPs moved or were parked, kept until they run again
    /// (`calls::return_back`, `calls::settle_returns`).
    #[serde(default)]
    held_returns: BTreeMap<Tid, BTreeMap<u64, VpRet>>,
    /// Copies of the answers sent to VPs while they moved (or were
    /// parked), since their move began, for a VP rebuilt elsewhere whose
    /// old host died with them (`calls::waits`).
    #[serde(default)]
    sent_moving: BTreeMap<Tid, BTreeMap<u64, VpRet>>,
    /// The host each VP last moved from: an answer to its call that went
    /// there may come back from it (`calls::return_back`).
    #[serde(default)]
    moved_from: BTreeMap<Tid, String>,
    exit_watch: HashMap<Tid, Vec<(Tid, i32)>>,
    host_watch: Vec<(Tid, i32, bool)>,
    gone: HashMap<Tid, ExitInfo>,
    /// Jobs that have ended.
    history: history::History,
    /// `mig owner reclaim|release` waiting for its host.
    owner_waiting: HashMap<u64, Requester>,
    next_owner_id: u64,
    #[serde(skip, default = "not_replicated")]
    now: Instant,
    /// The real-time clock (ns since the Unix epoch) as the server last
    /// set it, before each call. Not replicated: a clock reading in the
    /// state made every message a change to propose (a job printing 300,000
    /// lines proposed the whole state 300,000 times).
    #[serde(skip)]
    wall_ns: u64,
    /// Gang slicing: slot length (0: off), and the round the hosts run
    /// (epoch, slots) once tables went out.
    quantum_ns: u64,
    round: Option<(u64, u64)>,
    /// Per host, the switches and table installs it reported.
    #[serde(skip)]
    slicing: BTreeMap<String, HostSlicing>,
    /// Per host, how long its daemon loop's turns take.
    #[serde(skip)]
    turns: BTreeMap<String, LoopTurns>,
    /// Job checkpoints: the next generation, how often (none: on request),
    /// how long one may take.
    next_ckpt: u64,
    checkpoint_every: Option<Duration>,
    checkpoint_timeout: Duration,
    /// Jobs to restart from their checkpoint once the events at hand are done.
    to_restart: BTreeSet<String>,
    /// Of those, jobs whose VPs are independent: the VPs lost with their
    /// host, restored alone (the job's other VPs go on). Not replicated: a
    /// new master restarts such a job whole.
    #[serde(skip)]
    lost_alone: BTreeMap<String, BTreeSet<u32>>,
    /// How long a worker's lease on its VPs lasts from its ask.
    lease: Duration,
    /// The voters (see `voters`), by id, and the next id.
    voters: BTreeMap<u64, String>,
    next_voter: u64,
    max_voters: usize,
    /// The voters the consensus has made so (a change is made when the
    /// voters commit it): `mig hosts` calls only these voters. None: not
    /// said yet (all of `voters`).
    #[serde(skip)]
    voting: Option<std::collections::BTreeSet<u64>>,
    /// Join tokens, by id.
    tokens: BTreeMap<String, tokens::TokenRec>,
    /// The user the virtual machine runs as (see `users`).
    #[serde(skip)]
    admin_uid: u32,
    /// When `tick` last ran.
    #[serde(skip)]
    last_tick: Option<Instant>,
    /// The placement that chooses hosts for new work, if one does (from
    /// the config, like `placement`).
    #[serde(default)]
    balance: Option<crate::balance::choice::Policy>,
    /// Rate-of-Change's state, under `balance` `roc`.
    #[serde(skip)]
    spreading: balancing::Spreading,
}

/// How a master that stepped down knows its own clients still waiting on a
/// job (`spawn --wait`): as requests forwarded with this bit and their
/// connection's token as id (see `replica::import`).
pub const LOCAL_ID: u64 = 1 << 63;

/// A worker's lease with the default heartbeat (500 ms) and dead-after
/// (3 s): shorter than dead-after by a heartbeat (see `set_lease`).
const DEFAULT_LEASE: Duration = Duration::from_millis(2500);

impl Master {
    /// A master whose own host has `facts`.
    /// `quantum`: the slot length hosts slice with (zero: no slicing, the
    /// kernel shares processors among slots' VPs).
    pub fn new(facts: HostFacts, now: Instant, quantum: Duration) -> (Master, Vec<Out>) {
        let mut m = Master {
            name: facts.name.clone(),
            // A VP whose program has not said it can be moved never is.
            sched: Scheduler::new(replica::master_sched_config(Placement::default())),
            placement: Placement::default(),
            hosts: BTreeMap::new(),
            jobs: BTreeMap::new(),
            tids: HashMap::new(),
            next_tid: 0x40001,
            next_job: 1,
            groups: Groups::default(),
            mailbox: Mailbox::default(),
            held_returns: BTreeMap::new(),
            moved_from: BTreeMap::new(),
            sent_moving: BTreeMap::new(),
            exit_watch: HashMap::new(),
            host_watch: Vec::new(),
            gone: HashMap::new(),
            history: history::History::default(),
            owner_waiting: HashMap::new(),
            next_owner_id: 1,
            now,
            wall_ns: 0,
            quantum_ns: quantum.as_nanos() as u64,
            round: None,
            slicing: BTreeMap::new(),
            turns: BTreeMap::new(),
            next_ckpt: 1,
            checkpoint_every: None,
            checkpoint_timeout: Duration::from_secs(30),
            lease: DEFAULT_LEASE,
            last_tick: Some(now),
            voters: BTreeMap::from([(1, facts.name.clone())]),
            next_voter: 2,
            voting: None,
            max_voters: 5,
            tokens: BTreeMap::new(),
            admin_uid: 0,
            to_restart: BTreeSet::new(),
            lost_alone: BTreeMap::new(),
            balance: None,
            spreading: Default::default(),
        };
        let out = m.add_host(facts, now, true);
        (m, out)
    }

    /// Place gang jobs by `placement` from now on.
    pub fn set_placement(&mut self, placement: Placement) {
        self.placement = placement;
        self.sched =
            std::mem::take(&mut self.sched).with_config(replica::master_sched_config(placement));
    }

    /// Workers' leases last `lease` from their ask. It must be shorter than
    /// the silence after which a host is declared dead, so that a host's
    /// VPs are frozen before they are started elsewhere.
    pub fn set_lease(&mut self, lease: Duration) {
        self.lease = lease;
    }

    /// This master's own host name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Is `host` one of the virtual machine's hosts (alive or not)?
    pub fn knows(&self, host: &str) -> bool {
        self.hosts.contains_key(host)
    }

    /// Is `host` a live host of the virtual machine?
    pub fn is_alive(&self, host: &str) -> bool {
        self.hosts.get(host).is_some_and(|h| h.alive)
    }

    /// A report from host `host` (a worker, or the master's own host).
    pub fn from_host(&mut self, host: &str, msg: ToMaster) -> Vec<Out> {
        let out = self.report_unsettled(host, msg);
        self.settle_returns(out)
    }

    /// `from_host`, the answers to VPs' calls not yet sent where they run.
    fn report_unsettled(&mut self, host: &str, msg: ToMaster) -> Vec<Out> {
        match msg {
            ToMaster::Heartbeat => Vec::new(),
            ToMaster::LeaseAsk { n } => self.lease_ask(host, n),
            ToMaster::Started { tid, pid } => self.started(host, tid, pid),
            ToMaster::Exited { tid, status } => self.exited(host, tid, status),
            ToMaster::Output {
                tid, stream, line, ..
            } => self.output(host, tid, stream, line),
            ToMaster::Control { id, req, uid } => {
                let from = Requester::Remote {
                    host: host.to_string(),
                    id,
                };
                self.control_by(uid, from, host, req)
            }
            ToMaster::VpCall { tid, id, call } => self.vp_call(host, tid, id, call),
            ToMaster::Locate { tid } => self.locate(host, tid),
            ToMaster::Owner(report) => self.owner_report(host, report),
            ToMaster::OwnerDone { id, message } => self.owner_done(id, message),
            ToMaster::Slicing(r) => self.slicing_report(host, r),
            ToMaster::Usage(used) => {
                self.usage(host, used);
                Vec::new()
            }
            ToMaster::Parked { tid } => self.parked(host, tid),
            ToMaster::Movable { tid } => self.movable(host, tid),
            ToMaster::GiveAway { tid, to } => self.give_away(host, tid, &to),
            ToMaster::MigrateFailed { tid, reason } => self.migrate_failed(tid, &reason),
            ToMaster::Missing { tid, reason } => self.missing(host, tid, &reason),
            ToMaster::Snap { tid, step } => match step {
                SnapReport::Paused { id, sent } => self.snap_paused(tid, id, sent),
                SnapReport::Taken { id } => self.snap_taken(tid, id),
                SnapReport::Failed { id, reason } => self.snap_failed(host, tid, id, &reason),
            },
            ToMaster::ImageKept { image, size, crc } => self.image_kept(host, image, size, crc),
            ToMaster::ImageFailed {
                image,
                host: without,
                reason,
            } => self.image_failed(host, image, &without, &reason),
            ToMaster::ImageChecked { image, result } => self.image_checked(host, image, result),
            ToMaster::ReturnBack { tid, id, ret } => self.return_back(host, tid, id, ret),
            ToMaster::Waits { tid, calls } => self.waits(host, tid, &calls),
        }
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
                                independent: self
                                    .jobs
                                    .get(&c.job)
                                    .is_some_and(|j| j.spec.independent),
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
            Request::Timeline => vec![Out::Reply(
                from,
                Response::Timeline {
                    quantum_ns: self.quantum_ns,
                    hosts: self.timeline(),
                },
            )],
            Request::Checkpoint { job } => self.checkpoint_job(&job, Some(from)),
            Request::Restart { job } => self.restart_job(&job, Some(from)),
            Request::Input { job, data, eof } => self.input(from, &job, data, eof),
            Request::Jobs => vec![Out::Reply(from, Response::Jobs(self.job_list()))],
            Request::Wait { job } => self.wait_for(from, &job),
            Request::Suspend { job } => self.suspend(from, &job),
            Request::Resume { job } => self.resume(from, &job),
            Request::Delete { host } => self.delete_host(from, &host),
            // The server answers these from the files it keeps.
            Request::Logs { .. } => vec![Out::Reply(
                from,
                Response::Error {
                    message: "logs are read by the master's server".into(),
                },
            )],
            Request::TokenCreate { ttl_s } => self.make_token(from, ttl_s),
            Request::TokenList => vec![Out::Reply(from, Response::Tokens(self.list_tokens()))],
            Request::TokenRevoke { id } => self.revoke_token(from, &id),
            Request::Halt => {
                let mut out: Vec<Out> = self
                    .hosts
                    .iter()
                    .filter(|(_, h)| h.alive)
                    .map(|(n, _)| Out::ToHost(n.clone(), ToHost::Halt))
                    .collect();
                let hosts = out.len();
                out.extend(self.halt_jobs());
                out.insert(
                    0,
                    Out::Reply(
                        from,
                        Response::Ok {
                            message: match hosts {
                                1 => "halting 1 host".to_string(),
                                n => format!("halting {n} hosts"),
                            },
                        },
                    ),
                );
                out
            }
        }
    }

    fn event(&mut self, e: Event) -> Vec<Out> {
        match self.sched.on_event(e.clone()) {
            Ok(actions) => self.outs_for(actions),
            Err(err) => vec![Out::Log(format!(
                "scheduler refused {}: {err}",
                serde_json::to_string(&e).unwrap_or_else(|_| format!("{e:?}"))
            ))],
        }
    }

    /// How host `host` starts VP `vp` of `job` (with the job's program for
    /// that host's architecture).
    fn start_of(&self, job: &str, vp: u32, host: &str) -> Option<StartVp> {
        let j = self.jobs.get(job)?;
        let v = j.vps.get(&vp)?;
        let arch = &self.hosts.get(host)?.facts.arch;
        Some(StartVp {
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
            stdin: vp == 0 && j.spec.wait && j.spec.parent.is_none(),
            memory_mb: j.spec.memory_mb,
            io: j.spec.io,
            independent: j.spec.independent,
        })
    }

    /// VP `vp` of `job` goes to `state` (placed on a host, or back to
    /// waiting), and every host hears where it is now.
    fn set_vp(&mut self, job: &str, vp: u32, state: VpState) -> Vec<Out> {
        let Some(j) = self.jobs.get_mut(job) else {
            return Vec::new();
        };
        let host = state.host().map(String::from);
        let afresh = matches!(state, VpState::Starting { .. } | VpState::Waiting);
        match j.vps.get_mut(&vp) {
            Some(v) => {
                if afresh {
                    // Started from the beginning: no earlier call of it
                    // waits for an answer.
                    self.held_returns.remove(&v.tid);
                    self.sent_moving.remove(&v.tid);
                    self.moved_from.remove(&v.tid);
                }
                if let Err(refused) = v.go(state) {
                    return vec![refused.into()];
                }
                j.hosts.extend(host);
                vec![Out::Broadcast(ToHost::Directory(vec![(v.tid, loc_of(v))]))]
            }
            None => Vec::new(),
        }
    }

    /// The host a VP is on, if placed.
    fn host_of(&self, tid: Tid) -> Option<String> {
        let (job, vp) = self.tids.get(&tid)?;
        self.jobs.get(job)?.vps.get(vp)?.host().map(String::from)
    }
}

fn loc_of(v: &VpRec) -> Loc {
    v.state().loc()
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

/// What the master checks of a spawn's program, from the request alone:
/// one is named, no `MIG_*` variable is given, and the job names one for
/// `arch` (where the job starts); `Ok`: that program. Whether it exists is
/// looked at where the spawn is asked for (`crate::server`, on that host's
/// disk): the master has no disk of its own to look at.
pub fn check_program(spec: &SpawnSpec, arch: &str) -> Result<String, String> {
    if spec.program.is_empty() {
        return Err("no program given: mig spawn [-n N] -- PROGRAM ARGS...".into());
    }
    if let Some((k, _)) = spec.env.iter().find(|(k, _)| {
        k.starts_with("MIG_") && k != libmig::vp::env::SPIN_US && k != libmig::vp::env::PAUSE_SIGNAL
    }) {
        return Err(format!(
            "{k} is set by the daemon for every VP and cannot be given to a job"
        ));
    }
    program_for(&spec.program, arch).ok_or_else(|| {
        format!(
            "{:?} names no program for {arch}, where the job starts",
            spec.program
        )
    })
}
