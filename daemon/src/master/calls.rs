//! Calls from VPs: spawning, killing, tasks, notices (exits, hosts), groups
//! and barriers, and answering them.

use libmig::msg::{
    Envelope, ExitInfo, Loc, MboxReply, Notice, NotifyOn, Response, SpawnSpec, Tid, ToHost, VpCall,
    VpRet, SYSTEM,
};

use super::jobs::Narrowed;
use super::vp::VpState;
use super::{loc_of, Master, Out, Requester};

/// The most answers kept for one VP while it moves (`return_back`).
const MAX_HELD_RETURNS: usize = 1024;

/// Who made a call: the host it came from, the VP and the call's id.
type Caller<'a> = (&'a str, Tid, u64);

/// The answer to `caller`'s call.
fn reply((host, tid, id): Caller, ret: VpRet) -> Vec<Out> {
    vec![Out::ToHost(
        host.to_string(),
        ToHost::VpReturn { tid, id, ret },
    )]
}

impl Master {
    /// A request of VP `tid` (on `host`).
    pub fn vp_call(&mut self, host: &str, tid: Tid, id: u64, call: VpCall) -> Vec<Out> {
        // A VP that calls from where it runs has said what it waits for,
        // if it was rebuilt (`Waits` comes first): the copies of answers
        // sent while it moved are no use now (and its call numbers may
        // start again, after its own image).
        if matches!(self.state_of(tid), Some(VpState::Running { host: h, .. }) if h == host) {
            self.sent_moving.remove(&tid);
        }
        let caller = (host, tid, id);
        let Some((job, _)) = self.tids.get(&tid).cloned() else {
            return reply(
                caller,
                VpRet::Error(format!("t{tid:x} is not a running VP")),
            );
        };
        match call {
            VpCall::Spawn {
                program,
                args,
                n,
                new_job,
            } => self.spawn_call(&job, caller, (program, args, n), new_job),
            VpCall::SpawnArch {
                program,
                args,
                n,
                arch,
            } => self.grow_narrowed(&job, caller, (program, args, n), Some(arch), None),
            VpCall::SpawnOn {
                program,
                args,
                n,
                host: on,
            } => self.grow_narrowed(&job, caller, (program, args, n), None, Some(on)),
            VpCall::Signal {
                tid: victim,
                signal,
            } => self.signal_call(&job, caller, victim, signal),
            VpCall::Kill { tid: victim } => self.kill_call(&job, caller, victim),
            VpCall::Tasks => {
                let tids = self
                    .jobs
                    .get(&job)
                    .map(|j| j.vps.values().map(|v| v.tid).collect())
                    .unwrap_or_default();
                reply(caller, VpRet::Tids(tids))
            }
            VpCall::Notify { on, tag } => {
                let mut out = reply(caller, VpRet::Done);
                out.extend(self.notify(tid, on, tag));
                out
            }
            VpCall::Join { group } => {
                let i = self.groups.join(&group, tid);
                reply(caller, VpRet::Instance(i))
            }
            VpCall::Leave { group } => self.leave_call(caller, &group),
            VpCall::Members { group } => reply(caller, VpRet::Members(self.groups.members(&group))),
            VpCall::Barrier { group, count } => match self.groups.barrier(&group, tid, id, count) {
                Ok(released) => released
                    .into_iter()
                    .flat_map(|(w, wid)| self.vp_return(w, wid, VpRet::Done))
                    .collect(),
                Err(e) => reply(caller, VpRet::Error(e)),
            },
            VpCall::MboxPut { name, flags, data } => self.mbox_put(caller, &name, flags, data),
            VpCall::MboxGet { name, index, flags } => {
                match self.mailbox.get(&name, index, flags, tid, id) {
                    Ok(Some((data, owner))) => {
                        reply(caller, VpRet::Mbox(MboxReply::Entry { data, owner }))
                    }
                    Ok(None) => Vec::new(),
                    Err(e) => reply(caller, VpRet::Mbox(MboxReply::Refused(e))),
                }
            }
            VpCall::MboxDel { name, index } => match self.mailbox.delete(&name, index, tid) {
                Ok(()) => reply(caller, VpRet::Mbox(MboxReply::Deleted)),
                Err(e) => reply(caller, VpRet::Mbox(MboxReply::Refused(e))),
            },
            VpCall::MboxList { pattern } => reply(
                caller,
                VpRet::Mbox(MboxReply::Classes(self.mailbox.list(&pattern))),
            ),
            VpCall::Hosts => reply(caller, VpRet::Hosts(self.hosts_info())),
            VpCall::Ps => reply(caller, VpRet::Ps(self.ps())),
        }
    }

    /// `Spawn`: VPs added to the caller's job, or (`new_job`) a job of
    /// their own, whose answer goes back to the caller as its return.
    fn spawn_call(
        &mut self,
        job: &str,
        caller: Caller,
        (program, args, n): (String, Vec<String>, u32),
        new_job: bool,
    ) -> Vec<Out> {
        let (host, tid, id) = caller;
        let Some(spec) = self.spec_for(job, tid, program, args, n) else {
            return reply(caller, VpRet::Error("the caller's job is gone".into()));
        };
        if !new_job {
            return self.grow_job(job, caller, spec, Narrowed::default());
        }
        let mut out = self.spawn(Requester::Vp { tid, id }, host, spec);
        for o in &mut out {
            if let Out::Reply(Requester::Vp { .. }, resp) = o {
                let ret = match resp {
                    Response::Spawned { tids, .. } => VpRet::Tids(tids.clone()),
                    Response::Error { message } => VpRet::Error(message.clone()),
                    Response::Hosts(_)
                    | Response::Ps(_)
                    | Response::Stats(_)
                    | Response::Owner(_)
                    | Response::Map { .. }
                    | Response::Output { .. }
                    | Response::Skipped { .. }
                    | Response::VpDone { .. }
                    | Response::JobDone { .. }
                    | Response::Ok { .. }
                    | Response::Token { .. }
                    | Response::Tokens(_)
                    | Response::Jobs(_)
                    | Response::Log { .. }
                    | Response::Timeline { .. } => VpRet::Done,
                };
                *o = Out::ToHost(host.to_string(), ToHost::VpReturn { tid, id, ret });
            }
        }
        out
    }

    /// `Signal`: `signal` sent to VP `victim`, if the caller of `job` may.
    fn signal_call(&mut self, job: &str, caller: Caller, victim: Tid, signal: i32) -> Vec<Out> {
        if !libmig::msg::signal_ok(signal) {
            return reply(
                caller,
                VpRet::Error(format!(
                    "signal {signal} may not be sent to a VP (1 to 64, not STOP or CONT)"
                )),
            );
        }
        if let Some(why) = self.not_theirs(job, victim) {
            return reply(caller, VpRet::Error(why));
        }
        match self.host_of(victim) {
            Some(h) => {
                let mut out = vec![Out::ToHost(
                    h,
                    ToHost::Signal {
                        tid: victim,
                        signal,
                    },
                )];
                out.extend(reply(caller, VpRet::Done));
                out
            }
            None => reply(caller, VpRet::Error(format!("no running VP t{victim:x}"))),
        }
    }

    /// `Kill`: VP `victim` killed, if the caller of `job` may.
    fn kill_call(&mut self, job: &str, caller: Caller, victim: Tid) -> Vec<Out> {
        if let Some(why) = self.not_theirs(job, victim) {
            return reply(caller, VpRet::Error(why));
        }
        match self.host_of(victim) {
            Some(h) => {
                let mut out = vec![Out::ToHost(h.clone(), ToHost::Kill { tid: victim })];
                out.extend(reply(caller, VpRet::Done));
                out.extend(self.killed_by_its_job(job, &h, victim, caller.1));
                out
            }
            None => reply(caller, VpRet::Error(format!("no running VP t{victim:x}"))),
        }
    }

    /// `Leave`: the caller leaves `group`; a barrier it was the last to
    /// reach lets the others go.
    fn leave_call(&mut self, caller: Caller, group: &str) -> Vec<Out> {
        let (was, released) = self.groups.leave(group, caller.1);
        let mut out = if was {
            reply(caller, VpRet::Done)
        } else {
            reply(
                caller,
                VpRet::Error(format!("not a member of group {group:?}")),
            )
        };
        for (w, wid) in released {
            out.extend(self.vp_return(w, wid, VpRet::Done));
        }
        out
    }

    /// `MboxPut`: an entry put in the mailbox, and given to those waiting
    /// for it.
    fn mbox_put(&mut self, caller: Caller, name: &str, flags: u32, data: Vec<u8>) -> Vec<Out> {
        match self.mailbox.put(name, flags, caller.1, data) {
            Ok((index, answered)) => {
                let mut out = reply(caller, VpRet::Mbox(MboxReply::Put(index)));
                for (w, wid, data, owner) in answered {
                    out.extend(self.vp_return(
                        w,
                        wid,
                        VpRet::Mbox(MboxReply::Entry { data, owner }),
                    ));
                }
                out
            }
            Err(e) => reply(caller, VpRet::Mbox(MboxReply::Refused(e))),
        }
    }

    /// What VP `tid` of `job` asks to start: its job's directory and
    /// environment, itself as the parent (`None`: the job is gone).
    fn spec_for(
        &self,
        job: &str,
        tid: Tid,
        program: String,
        args: Vec<String>,
        n: u32,
    ) -> Option<SpawnSpec> {
        let j = self.jobs.get(job)?;
        Some(SpawnSpec {
            program,
            args,
            n,
            cwd: j.spec.cwd.clone(),
            env: j.spec.env.clone(),
            wait: false,
            parent: Some(tid),
            independent: false,
            restartable: false,
            memory_mb: None,
            class: None,
            io: None,
            bid_hosts: Vec::new(),
        })
    }

    /// A VP is gone for good: tell those who asked, and leave its groups.
    pub(super) fn vp_gone(&mut self, tid: Tid, status: &ExitInfo) -> Vec<Out> {
        self.moved_from.remove(&tid);
        self.held_returns.remove(&tid);
        self.sent_moving.remove(&tid);
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
        self.mailbox.exited(tid);
        for (w, id) in self.groups.exited(tid) {
            out.extend(self.vp_return(w, id, VpRet::Done));
        }
        out
    }

    /// `SpawnArch` and `SpawnOn`: VPs added to `job`, on architecture
    /// `arch`, or on host `on` (and its architecture) when the scheduler may.
    fn grow_narrowed(
        &mut self,
        job: &str,
        caller: Caller,
        (program, args, n): (String, Vec<String>, u32),
        arch: Option<String>,
        on: Option<String>,
    ) -> Vec<Out> {
        let error = |e: String| reply(caller, VpRet::Error(e));
        let arch = match &on {
            Some(on) => match self.hosts.get(on).filter(|h| h.alive) {
                Some(h) => Some(h.facts.arch.clone()),
                None => return error(format!("no live host {on} in the virtual machine")),
            },
            None => arch,
        };
        let Some(spec) = self.spec_for(job, caller.1, program, args, n) else {
            return error("the caller's job is gone".into());
        };
        let want = Narrowed { arch, host: on };
        self.grow_job(job, caller, spec, want)
    }

    /// VP `victim` on `host`, killed by VP `killer` of `job` (PVM's
    /// `pvm_kill`, libmig's `Vm::kill`): when it is of the same job, the
    /// job meant it to end, so it ends here and now with status 0, not as
    /// a failure of the job (its host's report of the signal, later, is
    /// stale). A VP of another job ends as killed, as by `mig kill`.
    fn killed_by_its_job(&mut self, job: &str, host: &str, victim: Tid, killer: Tid) -> Vec<Out> {
        let Some((_, vp)) = self.tids.get(&victim).filter(|(j, _)| j == job) else {
            return Vec::new();
        };
        let cpu_ms = self
            .jobs
            .get(job)
            .and_then(|j| j.vps.get(vp))
            .and_then(|v| v.cpu_ms);
        let mut status = ExitInfo::ended_by_mig(0, format!("killed by t{killer:x} of its job"));
        status.cpu_ms = cpu_ms;
        self.exited(host, victim, status)
    }

    /// Why a VP of `job` may not act on VP `victim` (another user's, when
    /// the daemons are shared), if it may not.
    fn not_theirs(&self, job: &str, victim: Tid) -> Option<String> {
        let uid_of = |j: &str| self.jobs.get(j).and_then(|j| j.uid);
        let theirs = self.tids.get(&victim).map(|(j, _)| uid_of(j))?;
        (theirs != uid_of(job)).then(|| format!("t{victim:x} belongs to another user"))
    }

    /// The answer `ret` to call `id` of VP `tid` came back from `host`:
    /// the VP was not there to take it (it left, or its words had been
    /// taken for its move, which carries the call). It is kept until the
    /// VP runs again (`settle_returns`), or goes where it runs now.
    pub(super) fn return_back(&mut self, host: &str, tid: Tid, id: u64, ret: VpRet) -> Vec<Out> {
        // Only from a host the answer went to: where the VP is (or was
        // parked), or the host it last moved from.
        let state = self.state_of(tid);
        let there = match &state {
            Some(
                VpState::Moving { from: h, .. }
                | VpState::Parked { host: h, .. }
                | VpState::Starting { host: h, .. }
                | VpState::Running { host: h, .. },
            ) => h == host,
            // Ended, or started afresh: no one waits for it.
            Some(VpState::Waiting | VpState::Restoring { .. } | VpState::Exited { .. }) | None => {
                return Vec::new()
            }
        };
        if !there && self.moved_from.get(&tid).is_none_or(|h| h != host) {
            return vec![Out::Log(format!(
                "{host} sent back an answer to call {id} of VP t{tid:x}, which was never \
                 sent there: refused"
            ))];
        }
        match state {
            Some(VpState::Moving { .. } | VpState::Parked { .. } | VpState::Starting { .. }) => {
                // (One answer a call; a VP waits for few at once: a host
                // that says otherwise is not believed.)
                let held = self.held_returns.entry(tid).or_default();
                if held.len() >= MAX_HELD_RETURNS && !held.contains_key(&id) {
                    return vec![Out::Log(format!(
                        "{host} sent back an answer to call {id} of VP t{tid:x}, which has \
                         {MAX_HELD_RETURNS} kept already: dropped"
                    ))];
                }
                held.insert(id, ret);
                vec![Out::Log(format!(
                    "VP t{tid:x} is moving: the answer to its call {id} waits for it to run"
                ))]
            }
            Some(VpState::Running { host: at, .. }) if at != host => {
                vec![Out::ToHost(at, ToHost::VpReturn { tid, id, ret })]
            }
            // Where it runs as far as the master knows: that host is saving
            // it (to park it, say) or has just rebuilt it. Kept with the
            // copies, for the word of what it waits for (`waits`).
            Some(VpState::Running { .. }) => {
                let copies = self.sent_moving.entry(tid).or_default();
                if copies.len() < MAX_HELD_RETURNS {
                    copies.insert(id, ret);
                }
                vec![Out::Log(format!(
                    "the answer to call {id} of VP t{tid:x} came back from {host}, where it \
                     runs: kept until it says it waits for it"
                ))]
            }
            // Ended, or started afresh: no one waits for it.
            Some(VpState::Waiting | VpState::Restoring { .. } | VpState::Exited { .. }) | None => {
                Vec::new()
            }
        }
    }

    /// The answers kept for VPs that now run go where they run (a VP that
    /// ended, went back to its job's checkpoint or started afresh has its
    /// answers dropped). Called on what every entry that changes where
    /// VPs are returns.
    pub(super) fn settle_returns(&mut self, mut out: Vec<Out>) -> Vec<Out> {
        // A copy of each answer sent to a VP that moves, for `waits`.
        for o in &out {
            if let Out::ToHost(_, ToHost::VpReturn { tid, id, ret }) = o {
                if matches!(
                    self.state_of(*tid),
                    Some(VpState::Moving { .. } | VpState::Parked { .. })
                ) {
                    let copies = self.sent_moving.entry(*tid).or_default();
                    if copies.len() < MAX_HELD_RETURNS {
                        copies.insert(*id, ret.clone());
                    }
                }
            }
        }
        if self.held_returns.is_empty() {
            return out;
        }
        let held: Vec<Tid> = self.held_returns.keys().copied().collect();
        for tid in held {
            match self.state_of(tid) {
                Some(VpState::Running { host, .. }) => {
                    for (id, ret) in self.held_returns.remove(&tid).unwrap_or_default() {
                        out.push(Out::ToHost(host.clone(), ToHost::VpReturn { tid, id, ret }));
                    }
                }
                // (Starting: from its parked image.)
                Some(
                    VpState::Moving { .. } | VpState::Parked { .. } | VpState::Starting { .. },
                ) => {}
                Some(VpState::Waiting | VpState::Restoring { .. } | VpState::Exited { .. })
                | None => {
                    self.held_returns.remove(&tid);
                }
            }
        }
        out
    }

    /// VP `tid`, rebuilt on `host` from an image saved from outside, waits
    /// for the answers to `calls`: those sent while it moved go to it (its
    /// old host may have died with them; its daemon gives each once).
    pub(super) fn waits(&mut self, host: &str, tid: Tid, calls: &[u64]) -> Vec<Out> {
        if !matches!(self.state_of(tid), Some(VpState::Running { host: h, .. }) if h == host) {
            return Vec::new();
        }
        let mut copies = self.sent_moving.remove(&tid).unwrap_or_default();
        calls
            .iter()
            .filter_map(|id| copies.remove(id).map(|ret| (*id, ret)))
            .map(|(id, ret)| Out::ToHost(host.to_string(), ToHost::VpReturn { tid, id, ret }))
            .collect()
    }

    /// VP `tid` leaves the master's records: its Tid, and the answers and
    /// hosts kept for it.
    pub(super) fn forget_vp(&mut self, tid: Tid) {
        self.tids.remove(&tid);
        self.moved_from.remove(&tid);
        self.held_returns.remove(&tid);
        self.sent_moving.remove(&tid);
    }

    /// Where VP `tid` is in its life.
    fn state_of(&self, tid: Tid) -> Option<VpState> {
        let (job, vp) = self.tids.get(&tid)?;
        self.jobs.get(job)?.vps.get(vp).map(|v| v.state().clone())
    }

    pub(super) fn vp_return(&self, tid: Tid, id: u64, ret: VpRet) -> Vec<Out> {
        match self.host_of(tid) {
            Some(h) => vec![Out::ToHost(h, ToHost::VpReturn { tid, id, ret })],
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
            ToHost::Directory(vec![(tid, loc)]),
        )]
    }

    /// VP `tid` asks for a notice with `tag` when `on` happens (a VP that
    /// has already ended: at once).
    fn notify(&mut self, tid: Tid, on: NotifyOn, tag: i32) -> Vec<Out> {
        match on {
            NotifyOn::VpExit(watched) => {
                let running = self.tids.get(&watched).is_some_and(|(j, v)| {
                    self.jobs
                        .get(j)
                        .and_then(|j| j.vps.get(v))
                        .is_some_and(|v| !v.state().ended())
                });
                if running {
                    self.exit_watch.entry(watched).or_default().push((tid, tag));
                    return Vec::new();
                }
                let status = self.exit_of(watched).unwrap_or(ExitInfo {
                    code: None,
                    signal: None,
                    error: Some("no such VP".into()),
                    cpu_ms: None,
                });
                vec![notice_to(
                    tid,
                    tag,
                    &Notice::VpExited {
                        tid: watched,
                        status,
                    },
                )]
            }
            NotifyOn::HostJoin | NotifyOn::HostLeave => {
                self.host_watch.push((tid, tag, on == NotifyOn::HostJoin));
                Vec::new()
            }
        }
    }

    pub(super) fn exit_of(&self, tid: Tid) -> Option<ExitInfo> {
        if let Some(e) = self.gone.get(&tid) {
            return Some(e.clone());
        }
        let (j, v) = self.tids.get(&tid)?;
        self.jobs.get(j)?.vps.get(v)?.state().exit().cloned()
    }
}

/// A notice for VP `to` with `tag`.
pub(super) fn notice_to(to: Tid, tag: i32, notice: &Notice) -> Out {
    let env = Envelope {
        from: SYSTEM,
        to,
        tag,
        seq: 0,
        incarnation: 0,
    };
    Out::Deliver(env, postcard::to_allocvec(notice).unwrap_or_default())
}
