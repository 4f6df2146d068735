//! Jobs: spawning them, killing them, their output and their VPs' ends, a
//! job growing (`new_VP`), and `mig ps`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use libmig::msg::{
    ExitInfo, HostUsage, JobInfo, Loc, Response, SpawnSpec, Stream, Tid, ToHost, VpInfo, VpRet,
};

use super::records::{Ckpt, JobRec};
use super::vp::{VpRec, VpState};
use super::{check_program, Master, Out, Requester};
use crate::sched::Event;

/// Where new VPs are narrowed to: an architecture (else the caller's), and
/// a host of it the scheduler should use if it may.
#[derive(Debug, Default)]
pub(super) struct Narrowed {
    pub(super) arch: Option<String>,
    pub(super) host: Option<String>,
}

/// How long `mig kill JOB` waits for every VP of the job to end.
const KILL_WAIT: Duration = Duration::from_secs(10);

/// "1 VP", "3 VPs".
fn vps(n: usize) -> String {
    libmig::words::count(n as u64, "VP", "VPs")
}

impl Master {
    pub(super) fn spawn(&mut self, from: Requester, from_host: &str, spec: SpawnSpec) -> Vec<Out> {
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
        if let Some(need) = spec.memory_mb {
            let most = self
                .hosts
                .values()
                .filter(|h| h.alive && h.facts.arch == arch)
                .map(|h| (h.facts.memory_mb, h.facts.name.as_str()))
                .max();
            match most {
                Some((mb, _)) if mb >= need => {}
                Some((mb, host)) => {
                    return err(format!(
                        "no host offers {need} MB of memory a VP: the most is {mb} MB, on {host}"
                    ))
                }
                None => return err(format!("no live host of {arch}")),
            }
        }
        let memory_mb = spec.memory_mb;
        let job = format!("j{}", self.next_job);
        self.next_job += 1;
        let mut vps = BTreeMap::new();
        let mut tids = Vec::new();
        for vp in 0..spec.n {
            let tid = self.next_tid;
            self.next_tid += 1;
            self.tids.insert(tid, (job.clone(), vp));
            tids.push(tid);
            vps.insert(vp, VpRec::waiting(tid, &spec, spec.parent));
        }
        let waiters = if spec.wait {
            vec![from.clone()]
        } else {
            Vec::new()
        };
        let n = spec.n;
        // Where the placement policy lets it go, if it chooses hosts.
        let chosen = self.choose_processors(from_host, &arch, &spec);
        self.jobs.insert(
            job.clone(),
            JobRec {
                spec,
                vps,
                waiters,
                killed: false,
                kill_waiters: Vec::new(),
                // The first periodic checkpoint `FIRST_CHECKPOINT` after
                // the start.
                ckpt: Ckpt {
                    last: Some(self.now),
                    ..Ckpt::default()
                },
                incarnation: 0,
                next_vp: n,
                uid: None,
                submitted_ms: self.wall_ns / 1_000_000,
                hosts: BTreeSet::new(),
                cpu_ms: 0,
                suspended: false,
                refused_by: BTreeMap::new(),
            },
        );
        let mut out = vec![
            Out::Broadcast(ToHost::Directory(
                tids.iter().map(|&t| (t, Loc::Waiting)).collect(),
            )),
            Out::Reply(
                from,
                Response::Spawned {
                    job: job.clone(),
                    tids,
                },
            ),
            Out::Log(format!("job {job}: {} of {arch}", self::vps(n as usize))),
        ];
        let only = chosen.map(|(chosen, line)| {
            out.push(Out::Log(format!("job {job}: {line}")));
            chosen
        });
        out.extend(self.event(Event::Submit {
            job,
            vps: BTreeMap::from([(arch, n)]),
            memory_mb,
            only,
            estimate: None,
        }));
        out
    }

    /// Running jobs, then ended ones (oldest first).
    pub(super) fn job_list(&self) -> Vec<JobInfo> {
        let mut out: Vec<JobInfo> = self.history.all().cloned().collect();
        out.extend(self.jobs.iter().map(|(id, j)| j.info(id, None)));
        out
    }

    /// Is `job` known, and has it ended (`None`: unknown)?
    pub fn job_ended(&self, job: &str) -> Option<bool> {
        if self.jobs.contains_key(job) {
            Some(false)
        } else {
            self.history.find(job).map(|_| true)
        }
    }

    /// Jobs read back from the history file of an earlier master here.
    pub fn load_history(&mut self, read: Vec<JobInfo>) {
        self.history.load(read);
        self.next_job = self.next_job.max(self.history.last_number() + 1);
    }

    /// New jobs are numbered above `n` (an earlier master's files use it).
    pub fn number_jobs_above(&mut self, n: u64) {
        self.next_job = self.next_job.max(n + 1);
    }

    /// `Request::Wait`: answered with `JobDone` when `job` ends (output and
    /// VP ends first, as to `spawn --wait`); at once if it has.
    pub(super) fn wait_for(&mut self, from: Requester, job: &str) -> Vec<Out> {
        if let Some(j) = self.jobs.get_mut(job) {
            j.waiters.push(from);
            return Vec::new();
        }
        let resp = match self.history.find(job) {
            Some(h) => Response::JobDone {
                job: job.to_string(),
                status: h.status.unwrap_or(0),
            },
            None => Response::Error {
                message: format!("no job {job} (running, or among the last ended ones)"),
            },
        };
        vec![Out::Reply(from, resp)]
    }

    /// `Request::Input`: bytes for VP 0 of `job`, sent to its host. While
    /// it is not running (placed later, moving, parked) the caller is told
    /// to try again (`libmig::msg::INPUT_LATER`); bytes the host has not yet written
    /// into the pipe when the VP moves are lost with the old process.
    pub(super) fn input(
        &mut self,
        from: Requester,
        job: &str,
        data: Vec<u8>,
        eof: bool,
    ) -> Vec<Out> {
        let error = |message: String| vec![Out::Reply(from.clone(), Response::Error { message })];
        if data.len() > libmig::msg::INPUT_CHUNK {
            return error(format!(
                "input arrives in pieces of at most {} bytes, not {}",
                libmig::msg::INPUT_CHUNK,
                data.len()
            ));
        }
        let Some(j) = self.jobs.get(job) else {
            return error(format!("no job {job}"));
        };
        if !j.spec.wait || j.spec.parent.is_some() {
            return error(format!(
                "job {job} was not started by `mig spawn --wait`: its VPs read no input"
            ));
        }
        let Some(v) = j.vps.get(&0) else {
            return error(format!("job {job} has no VP 0"));
        };
        match v.state() {
            VpState::Running { host, .. } | VpState::Starting { host, .. } => vec![
                Out::ToHost(
                    host.clone(),
                    ToHost::Input {
                        tid: v.tid,
                        data,
                        eof,
                    },
                ),
                Out::Reply(
                    from,
                    Response::Ok {
                        message: String::new(),
                    },
                ),
            ],
            VpState::Exited { .. } => error(format!("VP 0 of job {job} has ended")),
            VpState::Waiting
            | VpState::Moving { .. }
            | VpState::Restoring { .. }
            | VpState::Parked { .. } => error(format!(
                "VP 0 of job {job} is not running now; {}",
                libmig::msg::INPUT_LATER
            )),
        }
    }

    pub(super) fn kill(&mut self, from: Requester, target: &str) -> Vec<Out> {
        if let Some(j) = self.jobs.get_mut(target) {
            // Answered once every VP has ended, or at the deadline with
            // those that have not.
            j.kill_waiters.push((from, self.now + KILL_WAIT));
            if j.killed {
                return self.finish_if_done(target);
            }
            j.killed = true;
            let mut out = self.event(Event::JobExit {
                job: target.to_string(),
            });
            // VPs never started have nothing to kill: they end here.
            let never: Vec<u32> = self.jobs[target]
                .vps
                .iter()
                .filter(|(_, v)| v.host().is_none() && !v.state().ended())
                .map(|(&i, _)| i)
                .collect();
            for vp in never {
                if let Some(v) = self.jobs.get_mut(target).and_then(|j| j.vps.get_mut(&vp)) {
                    out.push(Out::Broadcast(ToHost::Directory(vec![(v.tid, Loc::Gone)])));
                    let killed = VpState::Exited {
                        host: None,
                        pid: None,
                        exit: ExitInfo {
                            code: None,
                            signal: Some(9),
                            error: None,
                            cpu_ms: None,
                        },
                    };
                    out.extend(v.go(killed).err().map(Out::from));
                }
            }
            out.extend(self.finish_if_done(target));
            return out;
        }
        if let Some(status) = self.history.find(target).and_then(|j| j.status) {
            return vec![Out::Reply(
                from,
                Response::Error {
                    message: format!("job {target} has already ended (status {status})"),
                },
            )];
        }
        let tid = target.trim_start_matches("t").trim_start_matches("0x");
        if let Ok(tid) = Tid::from_str_radix(tid, 16) {
            if let Some(e) = self.gone.get(&tid) {
                return vec![Out::Reply(
                    from,
                    Response::Error {
                        message: format!("VP t{tid:x} has already ended ({e})"),
                    },
                )];
            }
            if let Some((job, vp)) = self.tids.get(&tid).cloned() {
                if let Some(host) = self
                    .jobs
                    .get(&job)
                    .and_then(|j| j.vps.get(&vp))
                    .and_then(|v| v.host().map(String::from))
                {
                    return vec![
                        Out::ToHost(host, ToHost::Kill { tid }),
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

    /// `mig kill` of jobs whose VPs have not all ended by the deadline is
    /// answered with those VPs, and fails.
    /// `mig suspend`: the job's VPs stop where they are and its processors
    /// go to other jobs until `mig resume`.
    pub(super) fn suspend(&mut self, from: Requester, job: &str) -> Vec<Out> {
        let err = |m: String| vec![Out::Reply(from.clone(), Response::Error { message: m })];
        let Some(j) = self.jobs.get_mut(job) else {
            return err(self.no_such_job(job));
        };
        if j.killed {
            return err(format!("job {job} is being killed"));
        }
        if j.suspended {
            return err(format!(
                "job {job} is already suspended (`mig resume {job}`)"
            ));
        }
        if j.ckpt.round.is_some() || j.ckpt.restart.is_some() {
            return err(format!(
                "job {job} is being checkpointed or restarted; try again when it is done"
            ));
        }
        if let Some(v) = j.vps.values().find(|v| {
            matches!(
                v.state(),
                VpState::Moving { .. } | VpState::Restoring { .. }
            )
        }) {
            return err(format!(
                "VP t{:x} of job {job} is moving; try again when it has moved",
                v.tid
            ));
        }
        j.suspended = true;
        let mut out = self.event(Event::Suspend {
            job: job.to_string(),
        });
        let Some(j) = self.jobs.get_mut(job) else {
            return out;
        };
        let mut by_host: BTreeMap<String, Vec<Tid>> = BTreeMap::new();
        for v in j.vps.values_mut() {
            let (tid, host) = (v.tid, v.host().map(String::from));
            if let (Some(p), Some(h)) = (v.plan_mut(), host) {
                p.held = true;
                p.wants = None;
                by_host.entry(h).or_default().push(tid);
            }
        }
        let stopped: usize = by_host.values().map(Vec::len).sum();
        let hosts: Vec<String> = by_host.keys().cloned().collect();
        for (h, tids) in by_host {
            out.push(Out::ToHost(h, ToHost::Hold { tids, hold: true }));
        }
        out.push(Out::Log(format!("job {job} suspended")));
        out.push(Out::Reply(
            from,
            Response::Ok {
                message: format!(
                    "job {job} suspended: {} stopped{}",
                    libmig::words::count(stopped as u64, "VP", "VPs"),
                    if hosts.is_empty() {
                        String::new()
                    } else {
                        format!(" on {}", hosts.join(", "))
                    }
                ),
            },
        ));
        out
    }

    /// `mig resume`: a suspended job is placed again (where its VPs are if
    /// there is room there); its VPs run as soon as they have a place.
    pub(super) fn resume(&mut self, from: Requester, job: &str) -> Vec<Out> {
        let err = |m: String| vec![Out::Reply(from.clone(), Response::Error { message: m })];
        let Some(j) = self.jobs.get_mut(job) else {
            return err(self.no_such_job(job));
        };
        if !j.suspended {
            return err(format!("job {job} is not suspended"));
        }
        j.suspended = false;
        let mut out = self.event(Event::Resume {
            job: job.to_string(),
        });
        let waiting = self
            .jobs
            .get(job)
            .map_or(0, |j| j.vps.values().filter(|v| v.state().held()).count());
        out.push(Out::Log(format!("job {job} resumed")));
        out.push(Out::Reply(
            from,
            Response::Ok {
                message: if waiting == 0 {
                    format!("job {job} resumed")
                } else {
                    format!(
                        "job {job} resumed; {} wait{} for room",
                        libmig::words::count(waiting as u64, "VP", "VPs"),
                        if waiting == 1 { "s" } else { "" }
                    )
                },
            },
        ));
        out
    }

    /// A VP held by its job's suspension that the scheduler placed again:
    /// its host lets it run (now, or in its slot).
    pub(super) fn release_held(&mut self, job: &str, vp: u32) -> Vec<Out> {
        let Some(v) = self.jobs.get_mut(job).and_then(|j| j.vps.get_mut(&vp)) else {
            return Vec::new();
        };
        if !v
            .plan_mut()
            .is_some_and(|p| std::mem::replace(&mut p.held, false))
        {
            return Vec::new();
        }
        match v.host().map(String::from) {
            Some(h) => vec![Out::ToHost(
                h.clone(),
                ToHost::Hold {
                    tids: vec![v.tid],
                    hold: false,
                },
            )],
            None => Vec::new(),
        }
    }

    /// A host's word on the CPU time its running VPs have used, what it
    /// has free, and how long its loop's turns take.
    pub(super) fn usage(&mut self, host: &str, used: HostUsage) {
        self.note_turns(host, used.turns);
        if let Some(h) = self.hosts.get_mut(host) {
            h.free_memory_mb = used.free_memory_mb;
            h.state_free_mb = used.state_free_mb;
            h.state_full = used.state_full;
            h.io_busy = used
                .io_busy
                .filter(|b| b.is_finite())
                .map(|b| b.clamp(0.0, 1.0));
        }
        for (tid, ms) in used.vps {
            let Some((job, vp)) = self.tids.get(&tid) else {
                continue;
            };
            if let Some(v) = self.jobs.get_mut(job).and_then(|j| j.vps.get_mut(vp)) {
                if v.host() == Some(host) && !v.state().ended() {
                    v.cpu_ms = Some(ms);
                }
            }
        }
    }

    /// Why `job` is not a running job: it ended, or never was.
    fn no_such_job(&self, job: &str) -> String {
        match self.history.find(job) {
            Some(_) => format!("job {job} has already ended"),
            None => format!("no job {job:?}; `mig jobs` lists them"),
        }
    }

    pub(super) fn kill_overdue(&mut self, now: Instant) -> Vec<Out> {
        let mut out = Vec::new();
        let names: Vec<String> = self.jobs.keys().cloned().collect();
        for name in names {
            let Some(j) = self.jobs.get_mut(&name) else {
                continue;
            };
            let (late, keep) = std::mem::take(&mut j.kill_waiters)
                .into_iter()
                .partition::<Vec<_>, _>(|(_, by)| now >= *by);
            j.kill_waiters = keep;
            if late.is_empty() {
                continue;
            }
            let Some(j) = self.jobs.get(&name) else {
                continue;
            };
            let left: Vec<String> = j
                .vps
                .values()
                .filter(|v| !v.state().ended())
                .map(|v| {
                    let at = v.host().unwrap_or("no host");
                    format!("t{:x} ({} on {at})", v.tid, self.vp_state(v))
                })
                .collect();
            for (w, _) in late {
                out.push(Out::Reply(
                    w,
                    Response::Error {
                        message: format!(
                            "job {name}: not every VP ended within {} s of the kill: {}",
                            KILL_WAIT.as_secs(),
                            left.join(", ")
                        ),
                    },
                ));
            }
        }
        out
    }

    /// A line of a VP's output.
    pub fn output(&mut self, host: &str, tid: Tid, stream: Stream, line: String) -> Vec<Out> {
        let Some((job, vp)) = self.tids.get(&tid).cloned() else {
            return Vec::new();
        };
        let Some(j) = self.jobs.get(&job) else {
            return Vec::new();
        };
        let mark = if stream == Stream::Stderr {
            " stderr"
        } else {
            ""
        };
        let mut out = vec![Out::JobOutput {
            job: job.clone(),
            line: format!("[t{tid:x} {host}{mark}] {line}"),
        }];
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
            // The end of a process the job's restart replaces is no exit;
            // once the job is killed, any end of it is its end (the kill
            // went where it is being restored, after its image).
            let restoring = matches!(v.state(), VpState::Restoring { .. });
            if restoring && !j.killed {
                return out;
            }
            // A report from a host the VP already left (restarted elsewhere) is stale.
            let restoring_there = v.state().moving_to() == Some(host) || restoring;
            if (v.host() != Some(host) && !restoring_there) || v.state().ended() {
                return out;
            }
            if let Err(e) = v.go(v.state().ended_as(status.clone())) {
                out.push(e.into());
                return out;
            }
            v.cpu_ms = status.cpu_ms.or(v.cpu_ms);
            j.cpu_ms += status.cpu_ms.unwrap_or(0);
            out.push(Out::Log(format!(
                "VP t{tid:x} ({job}/{vp}) on {host}: {status}"
            )));
            out.push(Out::Broadcast(ToHost::Directory(vec![(tid, Loc::Gone)])));
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

    /// End `job` for `why` (it cannot go on): every VP's process is killed
    /// and each VP ends with `why` and status `STATUS_LOST`, which the
    /// job's status then is.
    pub(super) fn end_job(&mut self, job: &str, why: &str) -> Vec<Out> {
        let Some(j) = self.jobs.get_mut(job).filter(|j| !j.killed) else {
            return Vec::new();
        };
        j.killed = true;
        let mut out = vec![Out::Log(format!("ending job {job}: {why}"))];
        out.extend(self.event(Event::JobExit {
            job: job.to_string(),
        }));
        let status = ExitInfo::ended_by_mig(libmig::msg::STATUS_LOST, why.to_string());
        let mut ended = Vec::new();
        if let Some(j) = self.jobs.get_mut(job) {
            for (&vp, v) in j.vps.iter_mut().filter(|(_, v)| !v.state().ended()) {
                if let Err(e) = v.go(v.state().ended_as(status.clone())) {
                    out.push(e.into());
                    continue;
                }
                out.push(Out::Broadcast(ToHost::Directory(vec![(v.tid, Loc::Gone)])));
                for w in &j.waiters {
                    out.push(Out::Reply(
                        w.clone(),
                        Response::VpDone {
                            tid: v.tid,
                            vp,
                            host: v.host().unwrap_or_default().to_string(),
                            status: status.clone(),
                        },
                    ));
                }
                ended.push(v.tid);
            }
        }
        for tid in ended {
            out.extend(self.vp_gone(tid, &status));
        }
        out.extend(self.finish_if_done(job));
        out
    }

    /// The virtual machine halts: every job still here ends with it (its
    /// VPs are killed with their hosts), and the history says so (state
    /// `halted`, status 137 as for a SIGKILL), so that `mig jobs` on the
    /// next machine started on the same state lists it.
    pub(super) fn halt_jobs(&mut self) -> Vec<Out> {
        let mut out = Vec::new();
        let now_ms = self.wall_ns / 1_000_000;
        for (job, j) in std::mem::take(&mut self.jobs) {
            for v in j.vps.values() {
                self.forget_vp(v.tid);
            }
            let mut info = j.info(&job, Some((now_ms, 137)));
            info.state = "halted".into();
            out.push(Out::Log(format!("job {job} ends with the halt")));
            for old in self.history.record(info.clone()) {
                out.push(Out::ForgetOutput(old));
            }
            out.push(Out::History(info));
        }
        out
    }

    pub(super) fn finish_if_done(&mut self, job: &str) -> Vec<Out> {
        let done = self
            .jobs
            .get(job)
            .is_some_and(|j| j.vps.values().all(|v| v.state().ended()));
        if !done {
            return Vec::new();
        }
        let Some(j) = self.jobs.remove(job) else {
            return Vec::new();
        };
        for v in j.vps.values() {
            self.forget_vp(v.tid);
            if let Some(e) = v.state().exit() {
                self.gone.insert(v.tid, e.clone());
            }
        }
        let status = j
            .vps
            .values()
            .filter_map(|v| v.state().exit())
            .map(ExitInfo::status)
            .find(|&s| s != 0)
            .unwrap_or(0);
        let mut out = vec![Out::Log(format!("job {job} finished with status {status}"))];
        if !j.ckpt.good.is_empty() || j.ckpt.round.is_some() {
            // Its checkpoints' copies go, wherever they are.
            out.push(Out::Broadcast(ToHost::PruneImages {
                job: job.to_string(),
                keep: Vec::new(),
            }));
        }
        let info = j.info(job, Some((self.wall_ns / 1_000_000, status)));
        for old in self.history.record(info.clone()) {
            out.push(Out::ForgetOutput(old));
        }
        out.push(Out::History(info));
        // Whoever waits on its checkpoint or its restart hears it ended.
        let how = if j.killed { "was killed" } else { "ended" };
        let restart_from = j.ckpt.restart.map(|p| p.from).unwrap_or_default();
        for w in restart_from {
            out.push(Out::Reply(
                w,
                Response::Error {
                    message: format!("job {job} {how} before it could restart"),
                },
            ));
        }
        for w in j.ckpt.round.map(|r| r.waiters).unwrap_or_default() {
            out.push(Out::Reply(
                w,
                Response::Error {
                    message: format!("job {job} {how} before its checkpoint was complete"),
                },
            ));
        }
        for (w, _) in j.kill_waiters {
            out.push(Out::Reply(
                w,
                Response::Ok {
                    message: format!("job {job} killed: its {} ended", vps(j.vps.len())),
                },
            ));
        }
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

    /// `new_VP`: VP `tid` of `job` (on `host`, asking with call `id`)
    /// starts `spec.n` more VPs in it, where `want` narrows them to.
    pub(super) fn grow_job(
        &mut self,
        job: &str,
        (host, tid, id): (&str, Tid, u64),
        spec: SpawnSpec,
        want: Narrowed,
    ) -> Vec<Out> {
        let Narrowed {
            arch: want_arch,
            host: want_host,
        } = want;
        let reply = |ret: VpRet| Out::ToHost(host.to_string(), ToHost::VpReturn { tid, id, ret });
        if spec.n == 0 || spec.n > 65536 {
            return vec![reply(VpRet::Error(format!(
                "cannot start {} VPs: ask for between 1 and 65536",
                spec.n
            )))];
        }
        // The caller's architecture, or the one asked for if a host has it.
        let arch = match (want_arch, self.hosts.get(host)) {
            (Some(a), _) if self.hosts.values().any(|h| h.alive && h.facts.arch == a) => a,
            (Some(a), _) => {
                return vec![reply(VpRet::Error(format!(
                    "no host of architecture {a} in the virtual machine"
                )))]
            }
            (None, Some(h)) => h.facts.arch.clone(),
            (None, None) => return vec![reply(VpRet::Error("no host to run on".into()))],
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
                j.vps.insert(vp, VpRec::waiting(t, &spec, Some(tid)));
                events.push(Event::NewVp {
                    job: job.to_string(),
                    arch: arch.clone(),
                    host: want_host.clone(),
                });
            }
        }
        let mut out = vec![
            Out::Broadcast(ToHost::Directory(
                tids.iter().map(|&t| (t, Loc::Waiting)).collect(),
            )),
            reply(VpRet::Tids(tids)),
        ];
        for e in events {
            out.extend(self.event(e));
        }
        out
    }

    pub(super) fn ps(&self) -> Vec<VpInfo> {
        let mut out = Vec::new();
        for (job, j) in &self.jobs {
            for (&vp, v) in &j.vps {
                out.push(VpInfo {
                    tid: v.tid,
                    job: job.clone(),
                    vp,
                    host: v.host().map(String::from),
                    pid: v.state().pid(),
                    state: self.vp_state(v),
                    movable: v.movable(),
                    command: std::iter::once(v.program.as_str())
                        .chain(v.args.iter().map(String::as_str))
                        .collect::<Vec<_>>()
                        .join(" "),
                    started_ms: v.started_ms,
                    cpu_ms: v.cpu_ms,
                    move_failed: v.move_failed.clone(),
                });
            }
        }
        out
    }

    /// A VP's state as `mig ps` says it.
    pub(super) fn vp_state(&self, v: &VpRec) -> String {
        let owner_back = v
            .host()
            .and_then(|h| self.hosts.get(h))
            .is_some_and(|h| h.alive && !h.facts.offered);
        let mut s = match v.state() {
            state if state.held() => "suspended".to_string(),
            VpState::Waiting => "waiting".to_string(),
            VpState::Starting { .. } => "starting".to_string(),
            VpState::Moving { to, .. } => format!("moving to {to}"),
            VpState::Running { .. } if owner_back && !v.movable() => {
                "stopped (owner back; its program cannot be moved)".to_string()
            }
            VpState::Running { .. } if owner_back => "stopped (owner back)".to_string(),
            VpState::Parked { .. } => "parked on disk (owner back)".to_string(),
            VpState::Restoring { .. } => "restoring from the job's checkpoint".to_string(),
            VpState::Running { .. } => "running".to_string(),
            VpState::Exited { .. } => "exited".to_string(),
        };
        if let Some(w) = v.state().wants().filter(|w| w.failures > 0) {
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
