//! Job checkpoints: consistent rounds (every VP stopped at a safe point, told
//! what its peers sent it, its image kept), periodic ones, and restarting a
//! job from its newest complete generation.

use super::*;

/// A periodic checkpoint comes at most once per this many times its
/// duration.
const CKPT_SHARE: u32 = 50;

impl Master {
    /// Checkpoint jobs every `every` (none: only on request); a checkpoint
    /// not done within `timeout` is given up.
    pub fn set_checkpointing(&mut self, every: Option<Duration>, timeout: Duration) {
        self.checkpoint_every = every;
        self.checkpoint_timeout = timeout;
    }

    /// `mig checkpoint JOB` (or the periodic one): every VP stops at a safe
    /// point and reports what it sent; see `SnapStep`.
    pub(super) fn checkpoint_job(&mut self, job: &str, from: Option<Requester>) -> Vec<Out> {
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
        if j.suspended {
            return err(format!(
                "job {job} is suspended: its VPs reach no safe point until `mig resume {job}`"
            ));
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
            replicas: BTreeMap::new(),
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
    pub(super) fn round_of(&mut self, tid: Tid, id: u64) -> Option<(String, &mut JobRec)> {
        let (job, _) = self.tids.get(&tid)?.clone();
        let j = self.jobs.get_mut(&job)?;
        j.ckpt.round.as_ref().filter(|r| r.id == id)?;
        Some((job, j))
    }

    /// A VP stopped for checkpoint `id`. Once all have, each is told how
    /// much its peers sent it.
    pub(super) fn snap_paused(&mut self, tid: Tid, id: u64, sent: Vec<(Tid, u64)>) -> Vec<Out> {
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
    pub(super) fn snap_image(&mut self, host: &str, tid: Tid, id: u64, image: Vec<u8>) -> Vec<Out> {
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
        // The other copy: kept by the VP's host, or sent to a third.
        let replica = if host == me {
            spare.clone()
        } else {
            Some(host.to_string())
        };
        if let (Some(r), Some(at)) = (j.ckpt.round.as_mut(), replica) {
            r.replicas.insert(tid, at);
        }
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
        j.ckpt.good.push(Generation {
            id,
            vps,
            replicas: r.replicas.clone(),
            kept_by: me,
        });
        let extra = j.ckpt.good.len().saturating_sub(2);
        j.ckpt.good.drain(..extra);
        let bytes: usize = r.taken.values().sum();
        let took = now.saturating_duration_since(r.started);
        j.ckpt.took = Some(took);
        let message = format!(
            "job {job} checkpointed (generation {id}): {}, {bytes} bytes",
            libmig::words::count(r.taken.len() as u64, "VP", "VPs")
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
    pub(super) fn checkpoint_tick(&mut self, now: Instant) -> Vec<Out> {
        let mut out = Vec::new();
        let timeout = self.checkpoint_timeout;
        let mut due = Vec::new();
        for (job, j) in &mut self.jobs {
            if let Some(r) = j
                .ckpt
                .round
                .take_if(|r| now.duration_since(r.started) > timeout)
            {
                let late = |done: &dyn Fn(&Tid) -> bool| {
                    r.members
                        .iter()
                        .filter(|t| !done(t))
                        .map(|t| format!("t{t:x}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                out.push(Out::Log(format!(
                    "checkpoint {} of job {job} given up: not every VP reached a safe point within {} s (not paused: [{}]; no image: [{}])",
                    r.id,
                    timeout.as_secs(),
                    late(&|t| r.paused.contains_key(t)),
                    late(&|t| r.taken.contains_key(t)),
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
            // At most about 2% of the job's time: the interval stretches to
            // 50 times what the last checkpoint took.
            let every = self
                .checkpoint_every
                .map(|e| e.max(j.ckpt.took.unwrap_or_default() * CKPT_SHARE));
            // (Only jobs whose every VP keeps its state through libmig: the
            // others never reach a safe point.)
            let running =
                !j.suspended && j.vps.values().all(|v| v.state.can_migrate() && v.movable);
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

    /// Restart `job` from its newest checkpoint of which an intact copy of
    /// every image exists: `mig restart`, and automatically when a host
    /// dies under a job that has a checkpoint. Nothing is stopped yet: the
    /// server first looks for the images (`Out::CheckImages`: its own
    /// copies, then the replicas on other hosts) and answers with
    /// `images_checked`.
    pub(super) fn restart_job(&mut self, job: &str, from: Option<Requester>) -> Vec<Out> {
        let err = |m: String| match &from {
            Some(r) => vec![Out::Reply(r.clone(), Response::Error { message: m })],
            None => vec![Out::Log(m)],
        };
        let Some(j) = self.jobs.get_mut(job) else {
            return err(format!("no job {job:?}; `mig ps` lists them"));
        };
        if j.ckpt.good.is_empty() {
            return err(format!(
                "job {job} has no checkpoint yet: `mig checkpoint {job}`, or set checkpoint_interval_s"
            ));
        }
        if let Some(p) = &mut j.ckpt.restart {
            p.from.extend(from);
            return Vec::new();
        }
        // Each image's other copy: on its replica host, or, that host gone,
        // on the master that kept the first copies when that was another.
        let alive = |h: &String| self.hosts.get(h).is_some_and(|r| r.alive);
        let me = &self.name;
        let gens = j
            .ckpt
            .good
            .iter()
            .rev()
            .map(|g| {
                let images = g
                    .vps
                    .iter()
                    .filter_map(|vp| j.vps.get(vp))
                    .map(|v| {
                        let replica = g.replicas.get(&v.tid);
                        let keeper = Some(&g.kept_by).filter(|k| *k != me && alive(k));
                        let other = replica.filter(|r| alive(r)).or(keeper).or(replica);
                        (v.tid, other.cloned())
                    })
                    .collect();
                (g.id, images)
            })
            .collect();
        j.ckpt.restart = Some(PendingRestart {
            lost: from.is_none(),
            from: from.into_iter().collect(),
        });
        vec![
            Out::Log(format!("job {job}: looking for its checkpoint's images")),
            Out::CheckImages {
                job: job.to_string(),
                gens,
            },
        ]
    }

    /// The server looked for `job`'s images: `Ok` with the newest
    /// generation of which every image is intact, and the images; `Err`
    /// says what is missing. Restarts the job from them, or leaves it as it
    /// was (a `mig restart` fails), or, when a host died under it and it
    /// cannot go on consistently, ends it with the reason.
    pub fn images_checked(&mut self, job: &str, found: Result<FoundImages, String>) -> Vec<Out> {
        let Some(j) = self.jobs.get_mut(job) else {
            return Vec::new();
        };
        let Some(pending) = j.ckpt.restart.take() else {
            return Vec::new();
        };
        if j.killed {
            // Killed while its images were looked for: nothing comes back.
            return pending
                .from
                .into_iter()
                .map(|r| {
                    Out::Reply(
                        r,
                        Response::Error {
                            message: format!("job {job} was killed before it could restart"),
                        },
                    )
                })
                .collect();
        }
        match found {
            Ok((id, images)) => self.restart_from(job, id, images, pending.from),
            Err(why) => {
                let why = format!("job {job} cannot restart from its checkpoint: {why}");
                let mut out: Vec<Out> = pending
                    .from
                    .into_iter()
                    .map(|r| {
                        Out::Reply(
                            r,
                            Response::Error {
                                message: format!("{why}; the job goes on as it was"),
                            },
                        )
                    })
                    .collect();
                if pending.lost {
                    out.extend(self.end_job(job, &format!("{why}, and a host died under it")));
                } else {
                    out.push(Out::Log(why));
                }
                out
            }
        }
    }

    /// Restart `job` from generation `id`, whose images were checked: every
    /// VP's process is ended and started again from its image (on its host,
    /// or where the scheduler put it if its host is gone).
    fn restart_from(
        &mut self,
        job: &str,
        id: u64,
        mut images: Vec<(Tid, Vec<u8>)>,
        from: Vec<Requester>,
    ) -> Vec<Out> {
        let err = |m: String| -> Vec<Out> {
            let mut out: Vec<Out> = from
                .iter()
                .map(|r| Out::Reply(r.clone(), Response::Error { message: m.clone() }))
                .collect();
            out.push(Out::Log(m.clone()));
            out
        };
        let Some(gen) = self
            .jobs
            .get(job)
            .and_then(|j| j.ckpt.good.iter().find(|g| g.id == id).cloned())
        else {
            return err(format!("job {job}: its checkpoint generation {id} is gone"));
        };
        let (added, mut out_back) = self.bring_back(job, &gen);
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
            // A move under way is called off: its target ends what it has
            // of the VP (a process started from the moved image included).
            let moving = self.jobs.get(job).and_then(|j| j.vps.get(&vp));
            if let Some(VpState::Moving(to)) = moving.map(|v| &v.state) {
                if *to != host {
                    out.push(Out::ToHost(to.clone(), PeerMsg::Kill { tid }));
                }
            }
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
        let tids: Vec<Tid> = placements.iter().map(|p| p.0).collect();
        images.retain(|(t, _)| tids.contains(t));
        out.push(Out::RestoreJob {
            job: job.to_string(),
            id,
            placements,
            images,
        });
        for r in from {
            out.push(Out::Reply(
                r,
                Response::Ok {
                    message: format!("restarting job {job} from its checkpoint generation {id}"),
                },
            ));
        }
        out.append(&mut out_after);
        out.append(&mut out_back);
        out
    }

    /// VPs of `job` that ended after checkpoint `gen` come back with it:
    /// the scheduler places them again (`VpBack`), so they are gang-sliced
    /// like the others, and the job's VPs are recorded where the scheduler
    /// now has them. What the scheduler asks of other jobs is carried out.
    /// The VPs brought back, and what to deliver.
    fn bring_back(&mut self, job: &str, gen: &Generation) -> (Vec<u32>, Vec<Out>) {
        let Some(j) = self.jobs.get(job) else {
            return (Vec::new(), Vec::new());
        };
        let back: Vec<(u32, String)> = j
            .vps
            .iter()
            .filter(|(vp, v)| gen.vps.contains(vp) && v.state.ended())
            .filter_map(|(&vp, v)| {
                let arch = self.hosts.get(v.host.as_ref()?)?.facts.arch.clone();
                Some((vp, arch))
            })
            .collect();
        let mut actions = Vec::new();
        let mut out = Vec::new();
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
                    Err(e) => out.push(Out::Log(format!("job {job}: {e}"))),
                }
            }
            // This job restarts where the scheduler now has its VPs.
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
        out.extend(self.carry_out(actions));
        (added, out)
    }

    /// A restart goes back to a checkpoint taken before the VPs of `job`
    /// outside `keep` were spawned: they are ended and forgotten (their
    /// parents, rolled back, spawn them again under new Tids). Their
    /// processes' ends go into `out`; the scheduler's answers to their
    /// exits are returned, to follow the restart.
    pub(super) fn drop_unsaved(
        &mut self,
        job: &str,
        keep: &BTreeSet<u32>,
        out: &mut Vec<Out>,
    ) -> Vec<Out> {
        let Some(j) = self.jobs.get_mut(job) else {
            return Vec::new();
        };
        let dropped: Vec<(u32, VpRec)> = j.vps.extract_if(.., |vp, _| !keep.contains(vp)).collect();
        let members: BTreeSet<Tid> = j.vps.values().map(|v| v.tid).collect();
        let mut gone = Vec::new();
        let mut events = Vec::new();
        for (vp, v) in dropped {
            let exited = v.state.ended();
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
                cpu_ms: None,
            };
            out.extend(self.vp_gone(v.tid, &status));
            self.gone.insert(v.tid, status);
        }
        if !gone.is_empty() {
            out.push(Out::Log(format!(
                "job {job}: {} spawned after its checkpoint dropped",
                libmig::words::count(gone.len() as u64, "VP", "VPs")
            )));
            out.push(Out::Broadcast(PeerMsg::Directory(gone)));
        }
        events.into_iter().flat_map(|e| self.event(e)).collect()
    }
}

/// A job checkpoint's step for every VP of job `j`, to its host.
/// `step` for each VP of `j` in `members` (the VPs of a checkpoint round).
pub(super) fn to_every_vp(
    j: &JobRec,
    members: &BTreeSet<Tid>,
    step: impl Fn(Tid) -> SnapStep,
) -> Vec<Out> {
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
