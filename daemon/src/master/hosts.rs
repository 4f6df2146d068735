//! Hosts: joining (registration, or answering again after silence), leaving
//! (a lost connection or silence), their processors entering and leaving
//! the scheduler's pool, and what every host must know (peers, directory).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use libmig::msg::{HostFacts, HostInfo, Loc, Notice, Response, Tid, ToHost};

use super::calls::notice_to;
use super::records::HostRec;
use super::vp::{VpRec, VpState};
use super::{loc_of, Master, Out, Requester};
use crate::sched::Event;

impl Master {
    pub(super) fn add_host(&mut self, facts: HostFacts, now: Instant, master: bool) -> Vec<Out> {
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
                free_memory_mb: None,
                io_busy: None,
                state_free_mb: None,
                state_full: false,
                granted: None,
                lost: None,
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

    pub(super) fn peers(&self) -> ToHost {
        ToHost::Peers(self.peer_list())
    }

    /// Live hosts and their addresses.
    pub fn peer_list(&self) -> Vec<(String, String)> {
        self.hosts
            .iter()
            .filter(|(_, h)| h.alive)
            .map(|(n, h)| (n.clone(), h.facts.addr.clone()))
            .collect()
    }

    /// A worker attaches after a change of master, as host `facts.name`:
    /// known and alive, it goes on as it was; declared dead meanwhile, it
    /// must end its VPs (`true`: fenced); unknown, it joins afresh. Its
    /// name, and what follows.
    pub fn attach(&mut self, facts: HostFacts, now: Instant) -> (String, Vec<Out>, bool) {
        let name = facts.name.clone();
        match self.hosts.get_mut(&name) {
            Some(h) if h.alive => {
                h.last_seen = now;
                h.lost = None;
                h.facts.addr = facts.addr;
                h.facts.pid = facts.pid;
                // Where every VP is, as this master has it: what the old
                // one said last may not have reached it (a move's end it
                // could not get replicated), and a VP it still holds
                // messages for would wait for them for good.
                let out = vec![
                    Out::Log(format!("host {name} attached to this master")),
                    Out::Broadcast(self.peers()),
                    Out::ToHost(name.clone(), self.directory()),
                ];
                (name, out, false)
            }
            Some(_) => (name, Vec::new(), true),
            None => {
                let (name, out) = self.register(facts, now);
                (name, out, false)
            }
        }
    }

    /// Everything a host that (re)joins must know: where every VP is.
    pub fn directory(&self) -> ToHost {
        let mut d: Vec<(Tid, Loc)> = self.gone.keys().map(|&t| (t, Loc::Gone)).collect();
        for j in self.jobs.values() {
            for v in j.vps.values() {
                d.push((v.tid, loc_of(v)));
            }
        }
        ToHost::Directory(d)
    }

    pub(super) fn host_notices(&self, joined: bool, host: &str) -> Vec<Out> {
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
    /// The same daemon registering again (its answer was lost, and it
    /// tried again) gets the same name: it joins afresh, and what the
    /// master had placed on it under the first registration, which it
    /// never heard of, is placed again.
    pub fn register(&mut self, mut facts: HostFacts, now: Instant) -> (String, Vec<Out>) {
        let base = facts.name.clone();
        let same = |h: &HostRec| h.facts.addr == facts.addr && h.facts.pid == facts.pid;
        let mut out = Vec::new();
        if self
            .hosts
            .get(&base)
            .is_some_and(|h| h.alive && !h.master && same(h))
        {
            out.extend(self.host_gone(&base, "its daemon registered again"));
        }
        let mut n = 2;
        while self.hosts.get(&facts.name).is_some_and(|h| h.alive) {
            facts.name = format!("{base}-{n}");
            n += 1;
        }
        let name = facts.name.clone();
        out.extend(self.add_host(facts, now, false));
        (name, self.settle_returns(out))
    }

    /// The master is cut off from most voters (it cannot commit anything):
    /// hosts' silence until `now` does not count, and a host whose link
    /// broke has a lease's time again from `now` to come back (see
    /// `host_lost`). What it would decide from them now, it would carry
    /// out only once the partition heals, when they may well be back.
    pub fn excuse_silence(&mut self, now: Instant) {
        self.now = now;
        let lease = self.lease;
        for h in self.hosts.values_mut().filter(|h| h.alive) {
            h.last_seen = h.last_seen.max(now);
            if let Some((until, _)) = &mut h.lost {
                *until = (*until).max(now + lease);
            }
        }
    }

    /// A host said something: it is alive, unless it was declared dead
    /// (its VPs are being started elsewhere): then it is told it is fenced,
    /// and must end its VPs and leave.
    pub fn heard_from(&mut self, host: &str, now: Instant) -> Vec<Out> {
        self.now = now;
        let Some(h) = self.hosts.get_mut(host) else {
            return Vec::new();
        };
        h.last_seen = now;
        if h.alive || h.master {
            return Vec::new();
        }
        vec![Out::ToHost(
            host.to_string(),
            ToHost::Fenced {
                why: "it was declared dead while it did not answer (its VPs are started \
                      elsewhere)"
                    .into(),
            },
        )]
    }

    /// Worker `host` asks for lease `n` on its VPs: granted while it is
    /// held alive (a dead one hears it is fenced from `heard_from`).
    pub(super) fn lease_ask(&mut self, host: &str, n: u64) -> Vec<Out> {
        let now = self.now;
        let ms = self.lease.as_millis() as u64;
        match self.hosts.get_mut(host).filter(|h| h.alive) {
            Some(h) => {
                h.granted = Some(now);
                vec![Out::ToHost(host.to_string(), ToHost::LeaseGrant { n, ms })]
            }
            None => Vec::new(),
        }
    }

    /// The connection to `host` is gone. Its VPs may still run until its
    /// lease lapses (a daemon cut off, not dead): only then is it taken for
    /// dead and are they started elsewhere.
    pub fn host_lost(&mut self, host: &str, why: &str, now: Instant) -> Vec<Out> {
        self.now = now;
        let lease = self.lease;
        let Some(h) = self.hosts.get_mut(host).filter(|h| h.alive) else {
            return Vec::new();
        };
        match h.granted.map(|g| g + lease).filter(|&until| until > now) {
            Some(until) => {
                h.lost = Some((until, why.to_string()));
                vec![Out::Log(format!(
                    "lost connection to {host} ({why}): its VPs are started elsewhere once its \
                     lease lapses, in {} ms",
                    (until - now).as_millis()
                ))]
            }
            None => {
                let out = self.host_gone(host, why);
                self.settle_returns(out)
            }
        }
    }

    /// Hosts silent for longer than `dead_after` leave the pool.
    pub fn tick(&mut self, now: Instant, dead_after: Duration) -> Vec<Out> {
        self.now = now;
        let mut out = self.release_vacated();
        let lapsed: Vec<(String, String)> = self
            .hosts
            .iter()
            .filter_map(|(n, h)| {
                let (until, why) = h.lost.as_ref().filter(|(u, _)| now >= *u)?;
                let _ = until;
                Some((n.clone(), why.clone()))
            })
            .collect();
        for (host, why) in lapsed {
            out.extend(self.host_gone(&host, &why));
        }
        out.extend(self.retry_moves(now));
        out.extend(self.balance_tick(now));
        out.extend(self.kill_overdue(now));
        out.extend(self.checkpoint_tick(now));
        // The master itself was busy (storing a large checkpoint, say): what
        // the hosts said meanwhile is still unread, so their silence does
        // not count (late, never unsafe: a silent host's VPs are frozen by
        // its lease anyway).
        let stalled = self
            .last_tick
            .replace(now)
            .map(|t| now.saturating_duration_since(t))
            .filter(|&d| d > dead_after / 2);
        if let Some(d) = stalled {
            out.push(Out::Log(format!(
                "the master was busy for {} ms: hosts' silence meanwhile is not counted",
                d.as_millis()
            )));
            for h in self.hosts.values_mut() {
                h.last_seen = h.last_seen.max(now);
            }
        }
        // (Never one whose lease, as this master granted it, still runs:
        // its VPs may.)
        let lease = self.lease;
        let silent: Vec<String> = self
            .hosts
            .iter()
            .filter(|(_, h)| h.alive && !h.master && now.duration_since(h.last_seen) > dead_after)
            .filter(|(_, h)| h.granted.is_none_or(|g| g + lease <= now))
            .map(|(n, _)| n.clone())
            .collect();
        for h in silent {
            out.extend(self.host_gone(&h, "stopped answering heartbeats"));
        }
        self.settle_returns(out)
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
        h.lost = None;
        let mut out = vec![
            Out::Log(format!("host {host} left the pool: {why}")),
            Out::Disconnect(host.to_string()),
        ];
        out.push(Out::Broadcast(self.peers()));
        out.extend(self.host_notices(false, host));
        // Its copies of checkpoint images are gone: others are made.
        out.extend(self.images_host_gone(host));
        out.extend(self.recall_moves(host));
        // Its VPs' processes are gone with it: whether or not they could be
        // moved, they may now be started again elsewhere. Those recalled to
        // it (the other end of their move had died, or their image never
        // reached their target) are lost on their way.
        let recalled = |v: &VpRec| v.state().moving_to() == Some(host);
        let (stranded, lost): (Vec<_>, Vec<_>) = self
            .jobs
            .iter()
            .flat_map(|(job, j)| {
                j.vps
                    .iter()
                    .filter(|(_, v)| v.host() == Some(host) && !v.state().ended())
                    .map(move |(&vp, v)| ((job.clone(), vp), recalled(v)))
            })
            .partition(|(_, r)| *r);
        let stranded: Vec<(String, u32)> = stranded.into_iter().map(|(k, _)| k).collect();
        let lost = lost.into_iter().map(|(k, _)| k);
        for (job, vp) in lost {
            out.extend(self.event(Event::VpMovable { job, vp }));
        }
        out.extend(self.leave_pool(host));
        // (Unless the scheduler's moves off the host just did that.)
        let me = self.name.clone();
        for (job, vp) in stranded {
            let still = self
                .jobs
                .get(&job)
                .and_then(|j| j.vps.get(&vp))
                .is_some_and(recalled);
            if still {
                out.extend(self.lost_on_its_way(&job, vp, &me));
            }
        }
        for job in std::mem::take(&mut self.to_restart) {
            out.extend(self.restart_job(&job, None));
        }
        out
    }

    /// VPs on their way to or from `host`, now gone: the live end of each
    /// move is asked to run it from what it still has (`Recall`: its
    /// process short of its safe point, the image it sent, the image that
    /// arrived), or says it has nothing (`missing`).
    fn recall_moves(&mut self, host: &str) -> Vec<Out> {
        let alive: std::collections::HashSet<String> = self
            .hosts
            .iter()
            .filter(|(_, h)| h.alive)
            .map(|(n, _)| n.clone())
            .collect();
        let mut out = Vec::new();
        for v in self.jobs.values_mut().flat_map(|j| j.vps.values_mut()) {
            let VpState::Moving {
                from,
                to,
                pid,
                plan,
            } = v.state()
            else {
                continue;
            };
            let survivor = if to == host && from != host {
                from.clone()
            } else if from == host && to != host {
                to.clone()
            } else {
                continue;
            };
            if !alive.contains(&survivor) {
                continue;
            }
            out.push(Out::Log(format!(
                "VP t{:x} was moving from {from} to {to} and {host} is gone: recalled to {survivor}",
                v.tid
            )));
            out.push(Out::ToHost(survivor.clone(), ToHost::Recall { tid: v.tid }));
            let recalled = VpState::Moving {
                from: survivor.clone(),
                to: survivor,
                pid: *pid,
                plan: plan.clone(),
            };
            out.extend(v.go(recalled).err().map(Out::from));
            // (Why an earlier move failed is not why this one does.)
            v.move_failed = None;
        }
        out
    }

    /// `mig delete HOST`: a host that holds no VP (drained: `mig delete`
    /// reclaims it first) is told to stop and forgotten, so that its
    /// leaving restarts nothing and `mig hosts` lists it no more. Refused
    /// for the master's host and for a host that VPs are on or wait on.
    pub(super) fn delete_host(&mut self, from: Requester, host: &str) -> Vec<Out> {
        let err = |m: String| vec![Out::Reply(from.clone(), Response::Error { message: m })];
        let Some(h) = self.hosts.get(host) else {
            return err(format!("no host {host:?}; `mig hosts` lists them"));
        };
        if h.master {
            return err(format!(
                "{host} is the master's host: stop the whole virtual machine with `mig halt`, \
                 or stop its daemon and let another host take over"
            ));
        }
        let mut on: Vec<String> = self
            .jobs
            .values()
            .flat_map(|j| j.vps.values())
            .filter(|v| v.host() == Some(host) && !v.state().ended())
            .map(|v| format!("t{:x}", v.tid))
            .collect();
        if !on.is_empty() {
            on.sort();
            let n = on.len();
            on.truncate(8);
            return err(format!(
                "{host} still holds {n} VP{} ({}): drain it first (`mig delete` takes it back \
                 from the pool and waits until they have moved)",
                if n == 1 { "" } else { "s" },
                on.join(", ")
            ));
        }
        let alive = h.alive;
        let mut out = vec![Out::Reply(
            from,
            Response::Ok {
                message: format!("{host} leaves the virtual machine"),
            },
        )];
        if alive {
            out.push(Out::ToHost(host.to_string(), ToHost::Halt));
        }
        out.extend(self.leave_pool(host));
        self.hosts.remove(host);
        // Nor do `mig stats` and its plot show it any more.
        self.slicing.remove(host);
        out.push(Out::Log(format!(
            "host {host} was deleted from the virtual machine"
        )));
        if alive {
            out.push(Out::Broadcast(self.peers()));
            out.extend(self.host_notices(false, host));
        }
        out
    }

    /// A host's processors join the pool (`new_processor` for each).
    pub(super) fn join_pool(&mut self, host: &str) -> Vec<Out> {
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
                memory_mb: (f.memory_mb > 0).then_some(f.memory_mb),
            }));
        }
        out
    }

    /// A host's processors leave the pool (`processor_exit` for each): the
    /// scheduler moves its VPs elsewhere or holds them.
    pub(super) fn leave_pool(&mut self, host: &str) -> Vec<Out> {
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

    pub(super) fn hosts_info(&self) -> Vec<HostInfo> {
        let mut counts: HashMap<&str, u32> = HashMap::new();
        let mut waiting: HashMap<&str, Vec<(Tid, String)>> = HashMap::new();
        for j in self.jobs.values() {
            for v in j.vps.values() {
                if let (Some(h), true) = (v.host(), v.state().on_a_processor()) {
                    *counts.entry(h).or_default() += 1;
                }
                let state = self.vp_state(v);
                if let (Some(h), false) = (v.host(), state == "running" || v.state().ended()) {
                    waiting.entry(h).or_default().push((v.tid, state));
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
                waiting: waiting.remove(n.as_str()).unwrap_or_default(),
                voter: self.votes(n),
                free_memory_mb: h.free_memory_mb,
                reserved_memory_mb: self.reserved_on(n).memory_mb,
                io_busy: h.io_busy,
                state_free_mb: h.state_free_mb,
                state_full: h.state_full,
            })
            .collect()
    }
}

pub(super) fn processor_id(host: &str, i: u32) -> String {
    format!("{host}/{i}")
}
