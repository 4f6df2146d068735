//! The master's side of `balance`, for the placements that choose hosts
//! (`migd --placement bidding|nres|roc`): what the master knows of each
//! host turned into `balance::choice`'s views when a job arrives, the memory and I/O the VPs placed on a host
//! reserve there, the hosts the bids chose (`SpawnSpec::bid_hosts`),
//! and after arrival bidding's idle hosts (`choice::idle_takes`) turned
//! into moves and the VPs a host gives away under Rate-of-Change (its own
//! decision, `balance::rate`) moved. What does not live here: the
//! decisions themselves (`crate::balance`), carrying a move out (`moves`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use libmig::msg::{SpawnSpec, Tid};

use super::vp::{VpRec, VpState};
use super::{Master, Out};
use crate::balance::choice::{self, HostView, Need, Policy, SiteTasks};

/// The processors the hosts the bids chose (`SpawnSpec::bid_hosts`) give
/// a job, the least busy of each; `Err` names a host that is not in the
/// pool, or cannot hold the job's share (a bid is a moment's state).
fn by_the_bids(
    views: &[(String, HostView)],
    need: &Need,
    chosen: &[(String, u32)],
) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for (host, n) in chosen {
        let view = views
            .iter()
            .find(|(name, _)| name == host)
            .map(|(_, v)| v)
            .filter(|v| v.can_take(*n, need.memory_mb))
            .ok_or_else(|| host.clone())?;
        out.extend(view.least_busy(*n as usize));
    }
    if out.is_empty() {
        return Err("no host".into());
    }
    Ok(out)
}

/// How often Rate-of-Change samples the hosts' loads.
pub(super) const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// What the VPs placed on a host asked for there.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(super) struct Reserved {
    /// Memory (MiB), as `mig spawn --mem` said.
    pub(super) memory_mb: u64,
    /// I/O share, as `mig spawn --io` said.
    pub(super) io: f64,
}

/// A host at a sample: its processors and its movable tasks.
#[derive(Debug, Clone, PartialEq)]
struct HostLoad {
    /// The host.
    name: String,
    /// Its processors in the pool.
    processors: u32,
    /// Its movable tasks: an id and the CPU time (s) each has used.
    tasks: Vec<(u64, f64)>,
    /// Tasks on their way to it (counted in its load, not sent on).
    incoming: u32,
}

/// Bidding's idle hosts on the master: when it last looked, and the moves
/// their takes began (VP, the host taking it).
#[derive(Debug, Default)]
pub(super) struct Spreading {
    last: Option<Instant>,
    moving: BTreeMap<Tid, String>,
}

impl Master {
    /// Choose hosts for new work by `policy` from now on (`None`: the gang
    /// scheduler alone places it).
    pub fn set_balance(&mut self, policy: Option<Policy>) {
        self.balance = policy;
    }

    /// What the live VPs on `host` (or moving there) asked for.
    pub(super) fn reserved_on(&self, host: &str) -> Reserved {
        let mut r = Reserved::default();
        for j in self.jobs.values() {
            let each = j.spec.memory_mb.unwrap_or(0);
            let io = j.spec.io.map_or(0.0, |c| c.share());
            for v in j.vps.values().filter(|v| !v.state().ended()) {
                if v.state().at_or_bound_for(host) {
                    r.memory_mb = r.memory_mb.saturating_add(each);
                    r.io += io;
                }
            }
        }
        r
    }

    /// The hosts of `arch` in the pool, by name, as `choice` sees them.
    fn host_views(&self, arch: &str) -> Vec<(String, HostView)> {
        let mut busy: HashMap<String, u32> = HashMap::new();
        for job in self.sched.job_ids() {
            if let Some(view) = self.sched.job_view(&job) {
                for p in view.placement.into_values() {
                    *busy.entry(p).or_default() += 1;
                }
            }
        }
        let mut processors: BTreeMap<&str, Vec<(String, u32)>> = BTreeMap::new();
        for (_, p) in self.sched.map().processors() {
            let id = p.id.to_string();
            let n = busy.get(&id).copied().unwrap_or(0);
            processors.entry(&p.host).or_default().push((id, n));
        }
        self.hosts
            .iter()
            .filter(|(_, h)| h.alive && h.in_pool && h.facts.arch == arch)
            .filter_map(|(name, h)| {
                let procs = processors.get(name.as_str())?.clone();
                let reserved = self.reserved_on(name);
                let free_memory_mb = libmig::msg::memory_for_new_vp(
                    h.facts.memory_mb,
                    h.free_memory_mb,
                    reserved.memory_mb,
                );
                let free_io = 1.0 - reserved.io.max(h.io_busy.unwrap_or(0.0));
                Some((
                    name.clone(),
                    HostView {
                        processors: procs,
                        capacity: h.facts.capacity,
                        free_memory_mb,
                        free_io: free_io.clamp(0.0, 1.0),
                    },
                ))
            })
            .collect()
    }

    /// The processors the placement policy lets a new job of `spec` asked
    /// for at `from_host` use, with a line saying so; `None` when no policy
    /// chooses hosts or it leaves the choice to the gang scheduler.
    pub(super) fn choose_processors(
        &self,
        from_host: &str,
        arch: &str,
        spec: &SpawnSpec,
    ) -> Option<(Vec<String>, String)> {
        let policy = self.balance?;
        let views = self.host_views(arch);
        let local = views
            .iter()
            .position(|(n, _)| n == from_host)
            .unwrap_or(usize::MAX);
        let need = Need {
            vps: spec.n,
            class: spec.job_class(),
            memory_mb: spec.memory_mb,
            io: spec.io.map_or(0.0, |c| c.share()),
        };
        let mut why_not_the_bids = String::new();
        if policy != Policy::Roc && !spec.bid_hosts.is_empty() {
            match by_the_bids(&views, &need, &spec.bid_hosts) {
                Ok(chosen) => {
                    let line = match policy {
                        Policy::Bidding => format!(
                            "bidding placement by the bids at {from_host}, {} job: ",
                            need.class.name()
                        ),
                        _ => format!("nres placement by {from_host}'s search: "),
                    } + &chosen.join(" ");
                    return Some((chosen, line));
                }
                Err(host) => {
                    why_not_the_bids = format!(
                        "the bids at {from_host} chose {host}, which cannot take the job now; "
                    )
                }
            }
        }
        let hosts: Vec<HostView> = views.into_iter().map(|(_, v)| v).collect();
        let chosen = choice::choose(policy, &need, local, &hosts)?;
        let line = why_not_the_bids
            + &match policy {
                Policy::Bidding => format!("bidding placement, {} job: ", need.class.name()),
                _ => format!("{} placement: ", policy.name()),
            }
            + &chosen.join(" ");
        Some((chosen, line))
    }

    /// After arrival, every `SAMPLE_EVERY`: Rate-of-Change's moves under
    /// `roc`, the idle hosts' takes under `bidding`.
    pub(super) fn balance_tick(&mut self, now: Instant) -> Vec<Out> {
        match self.balance {
            Some(Policy::Bidding) => self.idle_tick(now),
            _ => Vec::new(),
        }
    }

    /// Seed 002's idle sites: once the moves begun before have ended, each
    /// host holding no VP takes from the most loaded one.
    fn idle_tick(&mut self, now: Instant) -> Vec<Out> {
        self.moves_ended();
        let due = self
            .spreading
            .last
            .is_none_or(|last| now.saturating_duration_since(last) >= SAMPLE_EVERY);
        if !due || !self.spreading.moving.is_empty() {
            return Vec::new();
        }
        self.spreading.last = Some(now);
        let loads = self.host_loads();
        let mut programs: BTreeMap<&str, u32> = BTreeMap::new();
        let mut holding: BTreeSet<&str> = BTreeSet::new();
        for (name, j) in &self.jobs {
            let next = programs.len() as u32;
            programs.entry(name).or_insert(next);
            for v in j.vps.values().filter(|v| !v.state().ended()) {
                if let Some(h) = v.host() {
                    holding.insert(h);
                }
            }
        }
        let sites: Vec<SiteTasks> = loads
            .iter()
            .map(|h| SiteTasks {
                processors: h.processors,
                holds_vps: holding.contains(h.name.as_str()),
                tasks: h
                    .tasks
                    .iter()
                    .filter_map(|&(tid, _)| {
                        let (job, _) = self.tids.get(&tid)?;
                        let j = self.jobs.get(job)?;
                        Some((tid, *programs.get(job.as_str())?, j.spec.job_class()))
                    })
                    .collect(),
            })
            .collect();
        let mut out = Vec::new();
        for (tid, from, to) in choice::idle_takes(&sites) {
            let (from, to) = (loads[from].name.clone(), loads[to].name.clone());
            let Some((job, vp)) = self.tids.get(&tid).cloned() else {
                continue;
            };
            match self.begin_move(tid, &job, vp, &from, &to) {
                Ok(o) => {
                    out.push(Out::Log(format!(
                        "bidding: {to} is idle and takes VP t{tid:x} from {from}"
                    )));
                    out.extend(o);
                    self.spreading.moving.insert(tid, to);
                }
                Err(e) => out.push(Out::Log(format!(
                    "bidding: VP t{tid:x} stays on {from}: {e}"
                ))),
            }
        }
        out
    }

    /// Rate-of-Change: `host` gives its VP `tid` to host `to`, which asked
    /// it for work (the decision was theirs): moved, if it is `host`'s to
    /// give (running there, movable, of an independent or one-VP job not
    /// suspended, not already being moved).
    pub(super) fn give_away(&mut self, host: &str, tid: Tid, to: &str) -> Vec<Out> {
        let refuse = |why: &str| {
            vec![Out::Log(format!(
                "rate-of-change: {host} gives VP t{tid:x} to {to}, which is refused: {why}"
            ))]
        };
        if self.balance != Some(Policy::Roc) {
            return refuse("the placement is not roc");
        }
        let Some((job, vp)) = self.tids.get(&tid).cloned() else {
            return refuse("no such VP");
        };
        let Some(j) = self.jobs.get(&job) else {
            return refuse("no such job");
        };
        let live = j.vps.values().filter(|v| !v.state().ended()).count();
        let Some(v) = j.vps.get(&vp) else {
            return refuse("no such VP");
        };
        let givable = match v.state() {
            VpState::Running { host: on, plan, .. } => {
                on == host && plan.wants.is_none() && !plan.held
            }
            _ => false,
        };
        if !givable || !v.movable() {
            return refuse("it is not running there, movable and left alone");
        }
        if j.suspended || !(j.spec.independent || live == 1) {
            return refuse("its job is suspended, or its VPs are not independent");
        }
        match self.begin_move(tid, &job, vp, host, to) {
            Ok(o) => {
                let mut out = vec![Out::Log(format!(
                    "rate-of-change: moving VP t{tid:x} from {host} to {to}, which asked for work"
                ))];
                out.extend(o);
                out
            }
            Err(e) => refuse(&e),
        }
    }

    /// Moves begun by the idle hosts' rule that have ended, forgotten.
    fn moves_ended(&mut self) {
        let (tids, jobs) = (&self.tids, &self.jobs);
        self.spreading.moving.retain(|tid, _| {
            let v = tids
                .get(tid)
                .and_then(|(job, vp)| jobs.get(job)?.vps.get(vp));
            matches!(v.map(VpRec::state), Some(VpState::Moving { .. }))
        });
    }

    /// Each host in the pool with its movable tasks: running VPs that said
    /// they can be moved, of independent or one-VP jobs, that the
    /// scheduler does not already mean to move. (Under `bidding` the idle
    /// hosts' rule sorts out by class what it may take.)
    fn host_loads(&self) -> Vec<HostLoad> {
        let mut tasks: BTreeMap<&str, Vec<(u64, f64)>> = BTreeMap::new();
        let mut incoming: BTreeMap<&str, u32> = BTreeMap::new();
        for j in self.jobs.values() {
            for v in j.vps.values() {
                if let Some(to) = v.state().moving_to() {
                    *incoming.entry(to).or_default() += 1;
                }
            }
        }
        for j in self.jobs.values().filter(|j| !j.suspended) {
            let live = j.vps.values().filter(|v| !v.state().ended()).count();
            let bidding = self.balance == Some(Policy::Bidding);
            if !(j.spec.independent || live == 1 || bidding) {
                continue;
            }
            for v in j.vps.values().filter(|v| v.movable()) {
                if let VpState::Running { host, plan, .. } = v.state() {
                    if plan.wants.is_none() && !plan.held {
                        let cpu = v.cpu_ms.unwrap_or(0) as f64 / 1000.0;
                        tasks.entry(host).or_default().push((v.tid, cpu));
                    }
                }
            }
        }
        let mut width: BTreeMap<&str, u32> = BTreeMap::new();
        for (_, p) in self.sched.map().processors() {
            *width.entry(&p.host).or_default() += 1;
        }
        self.hosts
            .iter()
            .filter(|(_, h)| h.alive && h.in_pool)
            .filter_map(|(name, _)| {
                Some(HostLoad {
                    name: name.clone(),
                    processors: *width.get(name.as_str())?,
                    tasks: tasks.remove(name.as_str()).unwrap_or_default(),
                    incoming: incoming.get(name.as_str()).copied().unwrap_or(0),
                })
            })
            .collect()
    }
}
