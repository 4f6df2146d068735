//! The scheduler's actions turned into `Out`s (`outs_for`), and moves: placing a VP, asking its
//! host for its image and starting it on the target, retrying a move that
//! failed, `mig migrate`.

use std::time::{Duration, Instant};

use libmig::msg::{Loc, OwnerState, Response, SlotCell, StartVp, Tid, ToHost};

use super::vp::{Mobility, Plan, VpRec, VpState, Wanted};
use super::{Master, Out, Requester};
use crate::sched::{Action, Event};

/// How many times (a second apart) the scheduler's move of a VP that has
/// not said it can be moved is tried before it is given up.
const SILENT_TRIES: u32 = 3;

/// How a move's target says it could not take a VP in (the reason a
/// recall then fails the move with).
const TOOK_NOT_IN: &str = "could not take it in";

impl Master {
    /// The `Out`s that carry out the scheduler's `actions` (the server
    /// carries those out in turn).
    pub(super) fn outs_for(&mut self, actions: Vec<Action>) -> Vec<Out> {
        let mut out = Vec::new();
        // VPs the scheduler moved to a host that refused their job before:
        // they stay, and its map follows them back once these actions
        // (their slot tables among them) are carried out.
        let mut stay: Vec<(String, u32, String)> = Vec::new();
        for a in actions {
            match a {
                Action::Start { job, vp, host, .. } => {
                    out.extend(self.release_held(&job, vp));
                    out.extend(self.place(&job, vp, &host));
                }
                Action::Migrate {
                    job,
                    vp,
                    from_host,
                    to_host,
                    ..
                } => {
                    // Where its process (or image) is: the map's host, or
                    // the host a move under way or recalled left it on.
                    let at = self
                        .jobs
                        .get(&*job)
                        .and_then(|j| j.vps.get(&vp))
                        .and_then(|v| v.host().map(String::from))
                        .unwrap_or_else(|| from_host.to_string());
                    if let Some(why) = self
                        .refused_by(&job, &to_host)
                        .filter(|_| self.is_alive(&at))
                    {
                        out.push(Out::Log(format!(
                            "VP {vp} of {job} stays on {at}: {to_host} could not take in a VP \
                             of it before ({why})"
                        )));
                        out.extend(self.release_held(&job, vp));
                        stay.push((job.to_string(), vp, at));
                        continue;
                    }
                    if self.is_alive(&from_host) || self.is_alive(&at) {
                        // (Its process goes on to its safe point, then ends.)
                        out.extend(self.release_held(&job, vp));
                        out.extend(self.place(&job, vp, &to_host));
                        continue;
                    }
                    out.extend(self.start_lost_again(
                        &job,
                        vp,
                        &to_host,
                        &format!("with its host {from_host}"),
                    ));
                }
                Action::Hold { job, vp, .. } => {
                    // A suspended job's VPs stay where they are: its host
                    // holds them (`suspend`).
                    if self.jobs.get(&*job).is_some_and(|j| j.suspended) {
                        continue;
                    }
                    // A VP whose process lives on (stopped on a host its owner
                    // took back) stays where it is until a processor is free.
                    let hosts = &self.hosts;
                    let parked = self
                        .jobs
                        .get_mut(&*job)
                        .and_then(|j| j.vps.get_mut(&vp))
                        .filter(|v| v.host().and_then(|h| hosts.get(h)).is_some_and(|h| h.alive));
                    match parked {
                        Some(v) => {
                            if let Some(p) = v.plan_mut() {
                                p.wants = None;
                            }
                            let why = if v.movable() {
                                "for a free processor"
                            } else {
                                "until its owner leaves (its program cannot be moved)"
                            };
                            out.push(Out::Log(format!(
                                "VP t{:x} waits on {} {why}",
                                v.tid,
                                v.host().unwrap_or("?")
                            )));
                        }
                        None => out.extend(self.set_vp(&job, vp, VpState::Waiting)),
                    }
                }
                Action::Kill { job, vp, host, .. } => {
                    // Where its process is (the map may have it where a
                    // move under way takes it), and where it is going.
                    let Some(v) = self.jobs.get(&*job).and_then(|j| j.vps.get(&vp)) else {
                        continue;
                    };
                    let tid = v.tid;
                    let mut at: Vec<String> = v.host().into_iter().map(String::from).collect();
                    at.extend(v.state().moving_to().map(String::from));
                    if at.is_empty() {
                        at.push(host.to_string());
                    }
                    at.dedup();
                    out.extend(at.into_iter().map(|h| Out::ToHost(h, ToHost::Kill { tid })));
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
                    let tables: Vec<(String, Vec<Vec<SlotCell>>)> = targets
                        .into_iter()
                        .map(|h| {
                            let t = self.slot_table(&h);
                            (h, t)
                        })
                        .collect();
                    for (h, t) in &tables {
                        self.note_table(h, generation, t);
                    }
                    out.push(Out::SlotTables {
                        generation,
                        slots,
                        all,
                        tables,
                    });
                }
            }
        }
        for (job, vp, at) in stay {
            out.extend(self.follow_in_map(&job, vp, &at));
        }
        out
    }

    /// Why `host` could not take in a VP of `job` moved there, if it could
    /// not: the scheduler's moves of the job's VPs do not go there again.
    fn refused_by(&self, job: &str, host: &str) -> Option<String> {
        self.jobs.get(job)?.refused_by.get(host).cloned()
    }

    /// The scheduler puts VP `vp` of `job` on `host`: start it there if it
    /// has no process yet, leave it if it is there already, else move it
    /// (its image written where it is, started there), now or after the move
    /// under way.
    pub(super) fn place(&mut self, job: &str, vp: u32, host: &str) -> Vec<Out> {
        let Some(v) = self.jobs.get_mut(job).and_then(|j| j.vps.get_mut(&vp)) else {
            return Vec::new();
        };
        let tid = v.tid;
        let wanted = Wanted {
            to: host.to_string(),
            failures: 0,
            retry_at: None,
        };
        match v.state().clone() {
            VpState::Waiting => {
                let Some(start) = self.start_of(job, vp, host) else {
                    return Vec::new();
                };
                let mut out = self.set_vp(job, vp, starting(host));
                out.push(Out::ToHost(host.to_string(), ToHost::Start(start)));
                out
            }
            VpState::Exited { .. } | VpState::Restoring { .. } => Vec::new(),
            VpState::Parked { host: at, plan } if at == host => {
                if let Err(refused) = v.go(VpState::Starting { host: at, plan }) {
                    return vec![refused.into()];
                }
                vec![Out::ToHost(host.to_string(), ToHost::Unpark { tid })]
            }
            VpState::Moving { to, .. } => {
                if let Some(p) = v.plan_mut() {
                    p.wants = (to != host).then_some(wanted);
                }
                Vec::new()
            }
            VpState::Running { host: at, .. } | VpState::Starting { host: at, .. }
                if at == host =>
            {
                if let Some(p) = v.plan_mut() {
                    p.wants = None;
                }
                Vec::new()
            }
            VpState::Running { host: at, .. }
            | VpState::Starting { host: at, .. }
            | VpState::Parked { host: at, .. } => {
                if let Some(p) = v.plan_mut() {
                    p.wants = Some(wanted);
                }
                match self.begin_move(tid, job, vp, &at, host) {
                    Ok(out) => out,
                    Err(e) => vec![Out::Log(format!("cannot move VP t{tid:x} to {host}: {e}"))],
                }
            }
        }
    }

    /// Ask `src` to move VP `tid` out to `to` (`ToHost::MoveOut`); messages for
    /// it are held everywhere until it runs there.
    pub(super) fn begin_move(
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
        let Some(start) = self.start_of(job, vp, to) else {
            return Err(format!(
                "{to} is {to_arch} and the job names no program for it: spawn it with a path \
                 template (./prog-{{arch}}) or ARCH=PATH,... to let it move there"
            ));
        };
        if let Some(why) = self.refused_by(job, to) {
            return Err(format!(
                "{to} could not take in a VP of job {job} before ({why}): its VPs go there again \
                 only when moved there by hand (mig migrate)"
            ));
        }
        let vacate = self.vacate_due(job, src);
        let v = self
            .jobs
            .get_mut(job)
            .and_then(|j| j.vps.get_mut(&vp))
            .ok_or_else(|| format!("no VP t{tid:x}"))?;
        if !v.movable() && vacate {
            if let Some(p) = v.plan_mut() {
                p.wants = None;
            }
            return Ok(self.vacate(tid, job, vp, src, to, start));
        }
        if !v.movable() {
            return Err(format!(
                "VP t{tid:x} cannot be moved: it has not said it can (a program that keeps \
                 its state through libmig says so as it starts, in init_or_restore; one that \
                 has just started may not have yet: try again in a moment)"
            ));
        }
        // A VP stopped for a checkpoint of its job cannot also stop for a
        // move: each would wait for the other's safe point. (Once they go
        // on, only copies of the images are being made: it may move.)
        if self.pausing_for_checkpoint(job) {
            return Err(format!(
                "job {job} is being checkpointed: VP t{tid:x} can move once that is done (in a \
                 moment; try again)"
            ));
        }
        let Some(v) = self.jobs.get_mut(job).and_then(|j| j.vps.get_mut(&vp)) else {
            return Err(format!("no VP t{tid:x}"));
        };
        let moving = VpState::Moving {
            from: src.to_string(),
            to: to.to_string(),
            pid: v.state().pid(),
            plan: v.state().plan().cloned().unwrap_or_default(),
        };
        v.go(moving).map_err(|e| e.to_string())?;
        Ok(vec![
            Out::Broadcast(ToHost::Directory(vec![(tid, Loc::Waiting)])),
            Out::ToHost(
                src.to_string(),
                ToHost::MoveOut {
                    to: to.to_string(),
                    start,
                },
            ),
            Out::Log(format!("moving VP t{tid:x} from {src} to {to}")),
        ])
    }

    /// VPs that cannot be moved, of restartable jobs, on hosts whose owner
    /// has stayed past `vacate_after_s`: the scheduler (which holds them
    /// where they are) is told they may go; its move of each is then made
    /// as a vacate.
    pub(super) fn release_vacated(&mut self) -> Vec<Out> {
        let due: Vec<(String, u32)> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.spec.restartable)
            .flat_map(|(job, j)| {
                j.vps
                    .iter()
                    .filter_map(move |(&vp, v)| match (v.mobility, v.state()) {
                        (Mobility::Pinned, VpState::Running { host, .. }) => {
                            Some((job.clone(), vp, host.clone()))
                        }
                        _ => None,
                    })
            })
            .filter(|(job, _, host)| self.vacate_due(job, host))
            .map(|(job, vp, _)| (job, vp))
            .collect();
        let mut out = Vec::new();
        for (job, vp) in due {
            if let Some(v) = self.jobs.get_mut(&job).and_then(|j| j.vps.get_mut(&vp)) {
                v.mobility = Mobility::Released;
            }
            out.extend(self.event(Event::VpMovable { job, vp }));
        }
        out
    }

    /// May VPs of `job` that cannot be moved be ended on `host` now and
    /// started again elsewhere? (A `--restartable` job, on a host whose
    /// owner has been back longer than its `vacate_after_s`.)
    fn vacate_due(&self, job: &str, host: &str) -> bool {
        self.vacate_after(job, host)
            .is_some_and(|(after, back_for)| back_for >= after)
    }

    /// `(vacate_after_s, seconds the owner has been back)` for VPs of `job`
    /// on `host`, if its VPs may be vacated there at all.
    fn vacate_after(&self, job: &str, host: &str) -> Option<(f64, f64)> {
        if !self.jobs.get(job)?.spec.restartable {
            return None;
        }
        let r = self.hosts.get(host)?.owner.as_ref()?;
        let after = r.vacate_after_s?;
        (r.state != OwnerState::Offered).then_some((after, r.for_s))
    }

    /// End VP `tid` on `src` (whose owner stays) and start it again on `to`
    /// from the beginning. The old process's end is then a stale report.
    fn vacate(
        &mut self,
        tid: Tid,
        job: &str,
        vp: u32,
        src: &str,
        to: &str,
        start: StartVp,
    ) -> Vec<Out> {
        let mut out = vec![
            Out::ToHost(src.to_string(), ToHost::Kill { tid }),
            Out::Log(format!(
                "vacating VP t{tid:x} from {src}, whose owner stays (it cannot be moved; its job \
                 is restartable): starting it again from the beginning on {to}"
            )),
        ];
        out.extend(self.set_vp(job, vp, starting(to)));
        out.push(Out::ToHost(to.to_string(), ToHost::Start(start)));
        out
    }

    /// VP `vp` of `job` was lost (`how`: with its host, on its way to
    /// another): the whole job goes back to its last consistent
    /// checkpoint if it has one (`to_restart`: the caller restarts it);
    /// else, where that is consistent, the VP starts again from the
    /// beginning on `to`; else the job ends.
    pub(super) fn start_lost_again(&mut self, job: &str, vp: u32, to: &str, how: &str) -> Vec<Out> {
        if let Some(j) = self.jobs.get_mut(job).filter(|j| !j.ckpt.good.is_empty()) {
            let alone = j.spec.independent || j.spec.restartable;
            let saved = j.ckpt.good.iter().any(|g| g.vps.contains(&vp));
            if alone && !saved {
                // Independent, and spawned after the last checkpoint: it
                // starts again from the beginning, the others go on.
                return self.start_from_beginning(job, vp, to, how);
            }
            if alone {
                // Restored alone from its image: the others go on.
                self.lost_alone
                    .entry(job.to_string())
                    .or_default()
                    .insert(vp);
            }
            let Some(j) = self.jobs.get_mut(job) else {
                return Vec::new();
            };
            // Restored on `to` once its job's images are found.
            let mut out = Vec::new();
            if let Some(v) = j.vps.get_mut(&vp) {
                match v.state().on(to) {
                    Some(there) => out.extend(v.go(there).err().map(Out::from)),
                    None => out.push(Out::Log(format!(
                        "VP {vp} of {job}, lost {how}, has no host to be restored on"
                    ))),
                }
            }
            self.to_restart.insert(job.to_string());
            return out;
        }
        // A VP that keeps its state through libmig, in a job of several
        // that may talk: starting it again from the beginning while its
        // peers are mid-run would not be consistent (they would wait for
        // it for ever).
        if let Some(why) = self.restart_inconsistent(job, vp) {
            return self.end_job(
                job,
                &format!(
                    "VP {vp} was lost {how} and the job has no checkpoint to go back to; {why}"
                ),
            );
        }
        self.start_from_beginning(job, vp, to, how)
    }

    /// VP `tid`'s restore failed: in a job of independent VPs, it alone is
    /// restored again (the others' restores go on).
    pub(super) fn restore_again_alone(&mut self, tid: Tid) {
        let Some((job, vp)) = self.tids.get(&tid).cloned() else {
            return;
        };
        if self
            .jobs
            .get(&job)
            .is_some_and(|j| j.spec.independent || j.spec.restartable)
        {
            self.lost_alone.entry(job).or_default().insert(vp);
        }
    }

    /// VP `vp` of `job`, lost `how`, starts again from the beginning on
    /// `to` (where that is consistent: the caller knows).
    pub(super) fn start_from_beginning(
        &mut self,
        job: &str,
        vp: u32,
        to: &str,
        how: &str,
    ) -> Vec<Out> {
        let Some(start) = self.start_of(job, vp, to) else {
            return Vec::new();
        };
        let mut out = vec![Out::Log(format!(
            "restarting VP {vp} of {job} on {to} (it was lost {how})"
        ))];
        out.extend(self.set_vp(job, vp, starting(to)));
        out.push(Out::ToHost(to.to_string(), ToHost::Start(start)));
        out
    }

    /// `host` has nothing of VP `tid` (`reason`): recalled to it (the
    /// other end of its move died), the VP was lost on its way; the target
    /// of its move (its image stopped coming, or could not be written
    /// there), the VP goes back to its source, which starts it again from
    /// the image it kept (or says it has nothing). A VP being restored
    /// from its job's checkpoint that its host could not take in ends its
    /// job, with the reason.
    pub(super) fn missing(&mut self, host: &str, tid: Tid, reason: &str) -> Vec<Out> {
        let Some((job, vp)) = self.tids.get(&tid).cloned() else {
            return Vec::new();
        };
        let Some(v) = self.jobs.get_mut(&job).and_then(|j| j.vps.get_mut(&vp)) else {
            return Vec::new();
        };
        if matches!(v.state(), VpState::Restoring { host: h } if h == host) {
            // Its image stopped coming (the host sending it died, say):
            // the images are looked for again, a few times; a host that
            // cannot take it in still then leaves the job unable to go on.
            let tries = self.jobs.get_mut(&job).map_or(u32::MAX, |j| {
                j.ckpt.restore_failures += 1;
                j.ckpt.restore_failures
            });
            if tries <= RESTORE_TRIES {
                let mut out = vec![Out::Log(format!(
                    "VP t{tid:x} was not restored on {host} ({reason}): looking for the \
                     images again"
                ))];
                self.restore_again_alone(tid);
                out.extend(self.restart_job(&job, None));
                return out;
            }
            return self.end_job(
                &job,
                &format!(
                    "VP t{tid:x} could not be restored from its checkpoint on {host}: {reason}"
                ),
            );
        }
        let VpState::Moving {
            from: src,
            to,
            pid,
            mut plan,
        } = v.state().clone()
        else {
            return Vec::new();
        };
        if to != host {
            return Vec::new();
        }
        if src != host {
            let arch = self.hosts.get(host).map_or("", |h| h.facts.arch.as_str());
            v.move_failed = Some(format!("{host} ({arch}) {TOOK_NOT_IN}: {reason}"));
            if !self.hosts.get(&src).is_some_and(|h| h.alive) {
                // When its source is declared dead, the VP is recalled to
                // this host, which then says again that it has nothing.
                return Vec::new();
            }
            // The scheduler's moves of its job's VPs do not come here
            // again (it would refuse again: each attempt a move there and
            // back), and this one is not tried again.
            if plan.wants.as_ref().is_some_and(|w| w.to == host) {
                plan.wants = None;
            }
            if let Some(j) = self.jobs.get_mut(&job) {
                j.refused_by.insert(host.to_string(), reason.to_string());
            }
            let Some(v) = self.jobs.get_mut(&job).and_then(|j| j.vps.get_mut(&vp)) else {
                return Vec::new();
            };
            let recalled = VpState::Moving {
                from: src.clone(),
                to: src.clone(),
                pid,
                plan,
            };
            if let Err(refused) = v.go(recalled) {
                return vec![refused.into()];
            }
            return vec![
                Out::Log(format!(
                    "VP t{tid:x}'s image did not reach {host} ({reason}): recalled to {src}"
                )),
                Out::ToHost(src, ToHost::Recall { tid }),
            ];
        }
        let mut out = self.lost_on_its_way(&job, vp, host);
        for job in std::mem::take(&mut self.to_restart) {
            out.extend(self.restart_job(&job, None));
        }
        out
    }

    /// VP `vp` of `job` was lost on its way between two hosts: started
    /// again (see `start_lost_again`) where the scheduler has it now if
    /// that host is alive, else on `fallback`. Jobs to restart are left in
    /// `to_restart`.
    pub(super) fn lost_on_its_way(&mut self, job: &str, vp: u32, fallback: &str) -> Vec<Out> {
        let mapped = self
            .sched
            .job_view(job)
            .and_then(|j| j.placement.get(&vp).cloned())
            .and_then(|p| p.rsplit_once('/').map(|(h, _)| h.to_string()))
            .filter(|h| self.is_alive(h));
        let to = mapped.unwrap_or_else(|| fallback.to_string());
        self.start_lost_again(job, vp, &to, "on its way between two hosts")
    }

    /// Why VP `vp` of `job`, lost with its host, cannot be started again
    /// from the beginning, if it cannot: its program keeps its state through
    /// libmig and its job has other VPs it may have talked to (unless the
    /// job says its VPs are independent or restartable).
    fn restart_inconsistent(&self, job: &str, vp: u32) -> Option<String> {
        let j = self.jobs.get(job)?;
        let v = j.vps.get(&vp)?;
        let alone = j.vps.values().filter(|o| !o.state().ended()).count() <= 1;
        // (One that had not yet said so is taken to be like its peers.)
        let libmig = v.movable() || j.vps.values().any(VpRec::movable);
        if alone || !libmig || j.spec.independent || j.spec.restartable {
            return None;
        }
        Some(
            "its VPs may exchange messages, so starting it again from the beginning would not \
             be consistent (keep checkpoint_interval_s on, or spawn with --restartable if its \
             VPs are independent)"
                .into(),
        )
    }

    /// Moves the scheduler asked for that are due: after a move under way
    /// ended elsewhere, or again after a failed attempt.
    pub(super) fn retry_moves(&mut self, now: Instant) -> Vec<Out> {
        let due: Vec<(Tid, String, u32, String, String)> = self
            .jobs
            .iter()
            .flat_map(|(job, j)| j.vps.iter().map(move |(&vp, v)| (job, vp, v)))
            .filter_map(|(job, vp, v)| {
                let w = v.state().wants()?;
                let due = w.retry_at.is_none_or(|t| now >= t) && v.state().can_begin_move();
                let at = v.host().filter(|_| due)?.to_string();
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
                Err(_)
                    if self.vacate_after(&job, &at).is_some()
                        && self
                            .jobs
                            .get(&job)
                            .and_then(|j| j.vps.get(&vp))
                            .is_some_and(|v| !v.movable()) =>
                {
                    // It cannot be moved: vacated once the owner has stayed
                    // long enough.
                    if let Some(w) = self
                        .jobs
                        .get_mut(&job)
                        .and_then(|j| j.vps.get_mut(&vp))
                        .and_then(VpRec::wants_mut)
                    {
                        w.retry_at = Some(now + Duration::from_secs(1));
                    }
                }
                Err(e) => {
                    // One that has not yet said it can be moved may say so
                    // in a moment (it has just started): asked again for a
                    // few seconds before the move is given up.
                    let silent = self
                        .jobs
                        .get_mut(&job)
                        .and_then(|j| j.vps.get_mut(&vp))
                        .filter(|v| !v.movable())
                        .and_then(VpRec::wants_mut)
                        .filter(|w| w.failures < SILENT_TRIES);
                    match silent {
                        Some(w) => {
                            w.failures += 1;
                            w.retry_at = Some(now + Duration::from_secs(1));
                        }
                        None => {
                            self.clear_wants(&job, vp);
                            out.push(Out::Log(format!("not moving VP t{tid:x} to {to}: {e}")));
                        }
                    }
                }
            }
        }
        out
    }

    pub(super) fn clear_wants(&mut self, job: &str, vp: u32) {
        if let Some(p) = self
            .jobs
            .get_mut(job)
            .and_then(|j| j.vps.get_mut(&vp))
            .and_then(VpRec::plan_mut)
        {
            p.wants = None;
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
        // Only the host the master records starts a VP: one that raced a
        // restart or a move (the target of a move called off, say) has a
        // second process of the Tid, ended at once.
        let recorded = match v.state() {
            VpState::Moving { from, to, .. } => to == host || from == host,
            VpState::Starting { host: at, .. }
            | VpState::Running { host: at, .. }
            | VpState::Restoring { host: at }
            | VpState::Parked { host: at, .. } => at == host,
            // Not placed, or ended: no process of it belongs anywhere.
            VpState::Waiting | VpState::Exited { .. } => false,
        };
        if !recorded {
            return vec![
                Out::Log(format!(
                    "VP t{tid:x} started on {host}, where it does not belong (it is on {}): \
                     ending that process",
                    v.host().unwrap_or("no host")
                )),
                Out::ToHost(host.to_string(), ToHost::Kill { tid }),
            ];
        }
        v.started_ms.get_or_insert(self.wall_ns / 1_000_000);
        if self.jobs.get(&job).is_some_and(|j| j.killed) {
            // Its job was killed while it moved or restored: it ends here.
            return vec![Out::ToHost(host.to_string(), ToHost::Kill { tid })];
        }
        let Some(v) = self.jobs.get_mut(&job).and_then(|j| j.vps.get_mut(&vp)) else {
            return Vec::new();
        };
        let running = |plan| VpState::Running {
            host: host.to_string(),
            pid: Some(pid),
            plan,
        };
        match v.state().clone() {
            VpState::Restoring { .. } => {
                if let Err(e) = v.go(running(Plan::default())) {
                    return vec![e.into()];
                }
                if let Some(j) = self.jobs.get_mut(&job) {
                    j.ckpt.restoring_from.remove(&tid);
                    // The tries are the job's: one VP restored says
                    // nothing of another whose image never arrives.
                    if j.ckpt.restoring_from.is_empty() {
                        j.ckpt.restore_failures = 0;
                    }
                }
                vec![Out::Broadcast(ToHost::Directory(vec![(
                    tid,
                    Loc::At(host.to_string()),
                )]))]
            }
            VpState::Moving {
                from, to, mut plan, ..
            } if to == host => {
                if plan.wants.as_ref().is_some_and(|w| w.to == host) {
                    plan.wants = None;
                }
                let wanted = plan.wants.is_some();
                if let Err(refused) = v.go(running(plan)) {
                    return vec![refused.into()];
                }
                if from != host {
                    v.move_failed = None;
                    self.moved_from.insert(tid, from.clone());
                }
                let what = if from == host {
                    format!("VP t{tid:x} runs on {host} again (its move was recalled)")
                } else {
                    format!("VP t{tid:x} moved from {from} to {host}")
                };
                let mut out = vec![
                    Out::Log(what),
                    Out::Broadcast(ToHost::Directory(vec![(tid, Loc::At(host.to_string()))])),
                ];
                // (One recalled that the scheduler wants elsewhere goes
                // there next: the map already has it there.)
                if from != host || !wanted {
                    out.extend(self.follow_in_map(&job, vp, host));
                }
                out
            }
            // (A move's source that runs it still: the move came to
            // nothing.)
            VpState::Starting { plan, .. }
            | VpState::Running { plan, .. }
            | VpState::Moving { plan, .. }
            | VpState::Parked { plan, .. } => v
                .go(running(plan))
                .err()
                .map(Out::from)
                .into_iter()
                .collect(),
            // (Answered above: not where it belongs.)
            VpState::Waiting | VpState::Exited { .. } => Vec::new(),
        }
    }

    /// A VP moved by hand runs where the scheduler's map does not have it:
    /// its place in the map follows it (so gang slicing and later decisions
    /// see where it is), if that host has room in its job's slots.
    pub(super) fn follow_in_map(&mut self, job: &str, vp: u32, host: &str) -> Vec<Out> {
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
            Ok(actions) => self.outs_for(actions),
            Err(e) => vec![Out::Log(format!(
                "VP {vp} of {job} runs on {host} outside the allocation map ({e}): gang slicing there leaves it alone"
            ))],
        }
    }

    /// `mig migrate`: move VP `target` from its host (its image written
    /// there) and start it again on `to`. Messages for it are held everywhere until it runs there.
    pub(super) fn migrate(&mut self, from: Requester, target: &str, to: &str) -> Vec<Out> {
        let err = |m: String| vec![Out::Reply(from.clone(), Response::Error { message: m })];
        let hex = target.trim_start_matches('t').trim_start_matches("0x");
        let found = Tid::from_str_radix(hex, 16).ok().and_then(|tid| {
            let (job, vp) = self.tids.get(&tid)?.clone();
            let v = self.jobs.get(&job)?.vps.get(&vp)?;
            let src = v
                .host()
                .filter(|_| v.state().can_migrate())
                .map(String::from);
            Some((tid, job, vp, src, self.vp_state(v)))
        });
        let Some((tid, job, vp, src, state)) = found else {
            return err(format!("no VP {target:?}; `mig ps` lists them (as t40001)"));
        };
        let Some(src) = src else {
            return err(format!("VP t{tid:x} is not running (it is {state})"));
        };
        if src == to {
            return err(format!("VP t{tid:x} already runs on {to}"));
        }
        // Its memory beside what the VPs resident there (in every slot)
        // already need.
        let need = self.jobs.get(&job).and_then(|j| j.spec.memory_mb);
        let offers = self.hosts.get(to).map(|h| h.facts.memory_mb);
        if let (Some(need), Some(has)) = (need, offers) {
            let taken = self.reserved_on(to).memory_mb;
            if has > 0 && has < taken.saturating_add(need) {
                let beside = if taken > 0 {
                    format!(", {taken} MB of it needed by the VPs there")
                } else {
                    String::new()
                };
                return err(format!(
                    "VP t{tid:x} needs {need} MB of memory and {to} offers {has} MB{beside}"
                ));
            }
        }
        // Asked by hand, a host that refused the job before is tried again
        // (its program may be there now).
        if let Some(j) = self.jobs.get_mut(&job) {
            j.refused_by.remove(to);
        }
        if self.pausing_for_checkpoint(&job) {
            // Made once the VPs go on (in a moment).
            if let Some(r) = self.jobs.get_mut(&job).and_then(|j| j.ckpt.round.as_mut()) {
                r.moves.push((from, tid, to.to_string()));
            }
            return vec![Out::Log(format!(
                "VP t{tid:x} moves to {to} once job {job}'s checkpoint under way lets it go on"
            ))];
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

    /// Are `job`'s VPs pausing for a checkpoint of it (not yet told to go
    /// on)?
    fn pausing_for_checkpoint(&self, job: &str) -> bool {
        self.jobs
            .get(job)
            .and_then(|j| j.ckpt.round.as_ref())
            .is_some_and(|r| !r.resumed)
    }

    /// VP `tid`'s program, on `host`, says it can be moved (believed only
    /// from the host it is on or moving to).
    pub(super) fn movable(&mut self, host: &str, tid: Tid) -> Vec<Out> {
        let Some((job, vp)) = self.tids.get(&tid).cloned() else {
            return Vec::new();
        };
        let Some(v) = self.jobs.get_mut(&job).and_then(|j| j.vps.get_mut(&vp)) else {
            return Vec::new();
        };
        if !v.state().at_or_bound_for(host) || v.movable() {
            return Vec::new();
        }
        v.mobility = Mobility::Movable;
        // From now on the scheduler may move it.
        self.event(Event::VpMovable { job, vp })
    }

    /// The VP's host could not move it out: it stays where it is.
    pub fn migrate_failed(&mut self, tid: Tid, reason: &str) -> Vec<Out> {
        let Some((job, vp)) = self.tids.get(&tid).cloned() else {
            return Vec::new();
        };
        let Some(v) = self.jobs.get_mut(&job).and_then(|j| j.vps.get_mut(&vp)) else {
            return Vec::new();
        };
        let VpState::Moving {
            from: at,
            to,
            pid,
            mut plan,
        } = v.state().clone()
        else {
            return Vec::new();
        };
        let mut also = String::new();
        if let Some(w) = &mut plan.wants {
            if w.to == to {
                w.failures += 1;
                if w.failures >= MAX_MOVE_ATTEMPTS {
                    also = format!("; gave up moving it to {to} after {} attempts", w.failures);
                    plan.wants = None;
                } else {
                    let wait = Duration::from_secs(5) * 2u32.pow(w.failures - 1);
                    w.retry_at = Some(self.now + wait);
                    also = format!("; trying again in {} s", wait.as_secs());
                }
            }
        }
        let stays = VpState::Running {
            host: at.clone(),
            pid,
            plan,
        };
        if let Err(refused) = v.go(stays) {
            return vec![refused.into()];
        }
        let gave_up = v.state().plan().is_some_and(|p| p.wants.is_none());
        // Recalled because its target could not take it in (`missing`):
        // that is why, not what its source says of the recall.
        let reason = match &v.move_failed {
            Some(why) if to == at && why.contains(TOOK_NOT_IN) => format!("{why}{also}"),
            _ => format!("{reason}{also}"),
        };
        v.move_failed = Some(reason.clone());
        let mut out = vec![
            Out::Log(format!("VP t{tid:x} stays on {at}: {reason}")),
            Out::Broadcast(ToHost::Directory(vec![(tid, Loc::At(at.clone()))])),
        ];
        // A move no longer wanted leaves the map where the VP is.
        if gave_up {
            out.extend(self.follow_in_map(&job, vp, &at));
        }
        out
    }
}

/// A restart from a checkpoint whose images did not reach their VPs' hosts
/// this many times in a row ends its job.
const RESTORE_TRIES: u32 = 3;

/// A scheduler move that failed this many times is given up (the VP runs,
/// or stays stopped, where it is) and reported.
pub(super) const MAX_MOVE_ATTEMPTS: u32 = 5;

/// Told to start on `host` from the beginning: not held, no move wanted.
fn starting(host: &str) -> VpState {
    VpState::Starting {
        host: host.to_string(),
        plan: Plan::default(),
    }
}
