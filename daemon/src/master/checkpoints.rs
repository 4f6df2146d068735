//! Job checkpoints: consistent rounds (every VP stopped at a safe point,
//! told what its peers sent it, its image written and kept by its own
//! host), the copies that give every image two live copies (made host to
//! host: the master hears only where each copy is, its size and its sum),
//! periodic rounds, a new copy when a host holding one dies, and
//! restarting a job from its newest generation of which an intact copy of
//! every image is found.
//!
//! What does not live here: reading, writing or sending images (the
//! server, `store`, `keeper`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use libmig::msg::{ExitInfo, ImageId, Loc, Response, SnapOrder, Tid, ToHost};

use super::records::{Generation, Hunt, ImageRec, JobRec, PendingRestart, Round};
use super::vp::{VpRec, VpState};
use super::{action_job, Master, Out, Requester};
use crate::sched::Event;

/// A periodic checkpoint comes at most once per this many times its
/// duration.
const CKPT_SHARE: u32 = 50;

/// A job's first periodic checkpoint comes this long after it starts (or
/// one interval, if that is shorter): a host that dies in a job's first
/// minute then costs it seconds of work, not the job.
pub(super) const FIRST_CHECKPOINT: Duration = Duration::from_secs(3);

/// How long the holders of a generation's images may take to read them
/// through before a restart gives that generation up.
const CHECK_TIMEOUT: Duration = Duration::from_secs(30);

/// The rate a copy is expected to go at, at least (bytes a second): a copy
/// that has not arrived within the checkpoint timeout plus its size at
/// this rate is ordered again elsewhere.
const COPY_RATE: u64 = 8 << 20;

impl Master {
    /// Checkpoint jobs every `every` (none: only on request); a checkpoint
    /// whose VPs have not all written their image within `timeout` is
    /// given up.
    pub fn set_checkpointing(&mut self, every: Option<Duration>, timeout: Duration) {
        self.checkpoint_every = every;
        self.checkpoint_timeout = timeout;
    }

    /// `mig checkpoint JOB` (or the periodic one): every VP stops at a safe
    /// point and reports what it sent; see `SnapOrder` and `SnapReport`.
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
            .map(|v| match v.state() {
                VpState::Running { host, .. } => Some((v.tid, host.clone())),
                VpState::Waiting
                | VpState::Starting { .. }
                | VpState::Moving { .. }
                | VpState::Restoring { .. }
                | VpState::Parked { .. }
                | VpState::Exited { .. } => None,
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
            progress: self.now,
            paused: HashMap::new(),
            taken: BTreeSet::new(),
            resumed: false,
            images: BTreeMap::new(),
            waiters: from.into_iter().collect(),
            moves: Vec::new(),
        });
        let mut out = vec![Out::Log(format!(
            "checkpointing job {job} (generation {id})"
        ))];
        for (tid, host) in hosts {
            out.push(Out::ToHost(
                host,
                ToHost::Snap {
                    tid,
                    step: SnapOrder::Begin { id },
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
        to_every_vp(j, &members, |tid| SnapOrder::Now {
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

    /// VP `tid` wrote its image of checkpoint `id` (its host keeps it and
    /// says so with `ImageKept`). Once all have, they go on: the images
    /// are copied meanwhile.
    pub(super) fn snap_taken(&mut self, tid: Tid, id: u64) -> Vec<Out> {
        let now = self.now;
        let Some((job, j)) = self.round_of(tid, id) else {
            return Vec::new();
        };
        let Some(r) = j.ckpt.round.as_mut() else {
            return Vec::new();
        };
        r.taken.insert(tid);
        if r.resumed || r.taken.len() < r.members.len() {
            return Vec::new();
        }
        r.resumed = true;
        // What the round cost the job: the time its VPs were held (the
        // copies are made while they run). The interval is 50 times it.
        j.ckpt.took = Some(now.saturating_duration_since(r.started));
        let members = r.members.clone();
        let moves = std::mem::take(&mut r.moves);
        let mut out = vec![Out::Log(format!(
            "job {job}: every VP wrote its image of generation {id}; they go on while the images \
             are copied"
        ))];
        out.extend(to_every_vp(j, &members, |_| SnapOrder::Resume { id }));
        out.extend(self.copy_images(&job));
        out.extend(self.moves_asked_meanwhile(moves));
        out
    }

    /// VP `tid` could not write its image of checkpoint `id` on `host`:
    /// the checkpoint fails, and the job goes on as it was.
    pub(super) fn snap_failed(&mut self, host: &str, tid: Tid, id: u64, reason: &str) -> Vec<Out> {
        let Some((job, _)) = self.round_of(tid, id) else {
            return Vec::new();
        };
        self.fail_round(
            &job,
            &format!("VP t{tid:x} could not write its image on {host}: {reason}"),
        )
    }

    /// `host` keeps a checked, durable copy of `image`.
    pub(super) fn image_kept(
        &mut self,
        host: &str,
        image: ImageId,
        size: u64,
        crc: u32,
    ) -> Vec<Out> {
        let now = self.now;
        let ids = self.checkpoint_ids(&image.job);
        let Some(j) = self.jobs.get_mut(&image.job) else {
            return vec![prune_at(host, &image.job, Vec::new())];
        };
        let in_round = j.ckpt.round.as_mut().filter(|r| r.id == image.gen);
        let is_round = in_round.is_some();
        let rec = match in_round {
            Some(r) => {
                r.progress = now;
                Some(r.images.entry(image.tid).or_default())
            }
            None => j
                .ckpt
                .good
                .iter_mut()
                .find(|g| g.id == image.gen)
                .and_then(|g| g.images.get_mut(&image.tid)),
        };
        let Some(rec) = rec else {
            // A generation given up meanwhile: its copy goes.
            return vec![prune_at(host, &image.job, ids)];
        };
        if rec.copying.as_ref().is_some_and(|(_, to, _)| to == host) {
            rec.copying = None;
        }
        let mut out = Vec::new();
        if rec.holders.is_empty() {
            rec.size = size;
            rec.crc = crc;
        } else if (rec.size, rec.crc) != (size, crc) {
            rec.refused
                .insert(host.to_string(), "its copy differs from the first".into());
            out.push(Out::Log(format!(
                "{image}: the copy on {host} ({size} bytes, sum {crc:08x}) differs from the \
                 first ({} bytes, sum {:08x}): not counted",
                rec.size, rec.crc
            )));
            out.extend(self.copy_images(&image.job));
            return out;
        }
        rec.holders.insert(host.to_string());
        if !is_round {
            let on: Vec<&str> = rec.holders.iter().map(String::as_str).collect();
            out.push(Out::Log(format!(
                "{image}: a new copy on {host} (copies on {})",
                on.join(", ")
            )));
        }
        out.extend(self.copy_images(&image.job));
        out
    }

    /// `host` has no usable copy of `image` (`reporter` says so: the host
    /// itself, or the one that was sending it a copy): another is made
    /// elsewhere, or the checkpoint fails if the image has no copy left.
    pub(super) fn image_failed(
        &mut self,
        reporter: &str,
        image: ImageId,
        host: &str,
        reason: &str,
    ) -> Vec<Out> {
        let Some(j) = self.jobs.get_mut(&image.job) else {
            return Vec::new();
        };
        let in_round = j.ckpt.round.as_mut().filter(|r| r.id == image.gen);
        let is_round = in_round.is_some();
        let rec = match in_round {
            Some(r) => r.images.get_mut(&image.tid),
            None => j
                .ckpt
                .good
                .iter_mut()
                .find(|g| g.id == image.gen)
                .and_then(|g| g.images.get_mut(&image.tid)),
        };
        let mut out = vec![Out::Log(format!(
            "{image}: no copy on {host}: {reason}{}",
            if reporter == host {
                String::new()
            } else {
                format!(" (says {reporter})")
            }
        ))];
        // A restart was bringing the VP back from that copy.
        let restoring = j.ckpt.restoring_from.get(&image.tid) == Some(&(image.gen, host.into()));
        match rec {
            Some(rec) => {
                rec.holders.remove(host);
                rec.refused.insert(host.to_string(), reason.to_string());
                if rec
                    .copying
                    .as_ref()
                    .is_some_and(|(from, to, _)| from == host || to == host)
                {
                    rec.copying = None;
                }
                let none_left = rec.holders.is_empty();
                if none_left && is_round {
                    out.extend(self.fail_round(
                        &image.job,
                        &format!("{image} could not be kept on {host}: {reason}"),
                    ));
                    return out;
                }
                if none_left {
                    out.extend(self.generation_lost(&image.job, image.gen, &image));
                }
            }
            // Its VP's own host could not keep it: the round fails.
            None if is_round => {
                out.extend(self.fail_round(
                    &image.job,
                    &format!("{image} could not be kept on {host}: {reason}"),
                ));
                return out;
            }
            None => {}
        }
        out.extend(self.copy_images(&image.job));
        // It looks for the images again (another copy).
        if restoring {
            self.restore_again_alone(image.tid);
            out.extend(self.restart_job(&image.job, None));
        }
        out
    }

    /// Generation `id` of `job` has lost every copy of `image`: it is no
    /// use any more.
    fn generation_lost(&mut self, job: &str, id: u64, image: &ImageId) -> Vec<Out> {
        let Some(j) = self.jobs.get_mut(job) else {
            return Vec::new();
        };
        let before = j.ckpt.good.len();
        j.ckpt.good.retain(|g| g.id != id);
        if j.ckpt.good.len() == before {
            return Vec::new();
        }
        let keep = j.ckpt.good.iter().map(|g| g.id).collect();
        vec![
            Out::Log(format!(
                "job {job}: generation {id} of its checkpoint lost its last copy of {image}"
            )),
            Out::Broadcast(ToHost::PruneImages {
                job: job.to_string(),
                keep,
            }),
        ]
    }

    /// The generations of `job` whose images hosts should keep.
    fn checkpoint_ids(&self, job: &str) -> Vec<u64> {
        self.jobs.get(job).map_or_else(Vec::new, |j| {
            j.ckpt
                .good
                .iter()
                .map(|g| g.id)
                .chain(j.ckpt.round.as_ref().map(|r| r.id))
                .collect()
        })
    }

    /// How many copies of each image a generation needs: two, or one
    /// while the virtual machine has a single live host.
    fn copies_needed(&self) -> usize {
        self.hosts.values().filter(|h| h.alive).count().clamp(1, 2)
    }

    /// Where a new copy of `rec` goes: a live host that has none, has not
    /// refused one and whose state directory is not full; one whose
    /// connection is not lost before one whose is (after a failover the
    /// old master is alive in the records until its lease lapses, and a
    /// copy sent there waits that long for nothing), not the master where another
    /// will do (its loop has the whole machine to serve), then the one
    /// with the most space.
    fn copy_target(&self, rec: &ImageRec) -> Option<String> {
        self.hosts
            .iter()
            .filter(|(n, h)| {
                h.alive
                    && !h.state_full
                    && !rec.holders.contains(*n)
                    && !rec.refused.contains_key(*n)
            })
            .min_by_key(|(n, h)| {
                (
                    h.lost.is_some(),
                    h.master,
                    std::cmp::Reverse(h.state_free_mb.unwrap_or(0)),
                    (*n).clone(),
                )
            })
            .map(|(n, _)| n.clone())
    }

    /// Every image of `job` (its round's and its complete generations')
    /// with fewer copies than it needs and none on its way gets one: a
    /// live holder is told to send it to another host. A round whose
    /// every image has its copies is complete; one with an image that no
    /// host can keep a copy of fails.
    pub(super) fn copy_images(&mut self, job: &str) -> Vec<Out> {
        let need = self.copies_needed();
        let now = self.now;
        let timeout = self.checkpoint_timeout;
        let alive: BTreeSet<String> = self
            .hosts
            .iter()
            .filter(|(_, h)| h.alive)
            .map(|(n, _)| n.clone())
            .collect();
        // (id, image, from, to) of the copies to order, and the images no
        // host can take.
        let mut orders: Vec<(u64, Tid, String, String)> = Vec::new();
        let mut stuck: Vec<(bool, ImageId, String)> = Vec::new();
        let mut overdue: Vec<(u64, Tid, ImageRec)> = Vec::new();
        let Some(j) = self.jobs.get(job) else {
            return Vec::new();
        };
        let round = j.ckpt.round.as_ref().map(|r| (true, r.id, &r.images));
        let gens = j.ckpt.good.iter().map(|g| (false, g.id, &g.images));
        for (in_round, id, images) in round.into_iter().chain(gens) {
            for (&tid, rec) in images {
                let live = rec.holders.iter().filter(|h| alive.contains(*h)).count();
                let late = rec.copying.as_ref().is_some_and(|(from, to, since)| {
                    !alive.contains(from)
                        || !alive.contains(to)
                        || now.saturating_duration_since(*since)
                            > timeout + Duration::from_secs(rec.size / COPY_RATE)
                });
                if live >= need || live == 0 || (rec.copying.is_some() && !late) {
                    continue;
                }
                let mut rec = rec.clone();
                if late {
                    if let Some((_, to, _)) = rec.copying.take() {
                        rec.refused
                            .insert(to, "the copy did not arrive in time".into());
                    }
                }
                let from = rec.holders.iter().find(|h| alive.contains(*h)).cloned();
                match (from, self.copy_target(&rec)) {
                    (Some(from), Some(to)) => orders.push((id, tid, from, to)),
                    _ => {
                        let why = if rec.refused.is_empty() {
                            "no other live host".to_string()
                        } else {
                            rec.refused
                                .iter()
                                .map(|(h, why)| format!("{h}: {why}"))
                                .collect::<Vec<_>>()
                                .join("; ")
                        };
                        let image = ImageId {
                            job: job.to_string(),
                            gen: id,
                            tid,
                        };
                        stuck.push((in_round, image, why));
                    }
                }
                if late {
                    // Refused by the host that did not answer in time.
                    overdue.push((id, tid, rec));
                }
            }
        }
        for (id, tid, rec) in overdue {
            if let Some(r) = self.image_rec(job, id, tid) {
                *r = rec;
            }
        }
        let mut out = Vec::new();
        for (id, tid, from, to) in orders {
            if let Some(r) = self.image_rec(job, id, tid) {
                r.copying = Some((from.clone(), to.clone(), now));
            }
            let image = ImageId {
                job: job.to_string(),
                gen: id,
                tid,
            };
            out.push(Out::Log(format!("{image}: copying it from {from} to {to}")));
            out.push(Out::ToHost(
                from,
                ToHost::CopyImage {
                    image,
                    to,
                    start: None,
                },
            ));
        }
        for (in_round, image, why) in stuck {
            if in_round {
                out.extend(self.fail_round(
                    job,
                    &format!("no second copy of {image} could be kept ({why})"),
                ));
                return out;
            }
            if let Some(r) = self.image_rec(job, image.gen, image.tid) {
                if !std::mem::replace(&mut r.short_said, true) {
                    out.push(Out::Log(format!(
                        "{image} has one copy: no other host can keep one now ({why}); another \
                         is made when one can"
                    )));
                }
            }
        }
        out.extend(self.round_complete(job));
        out
    }

    /// The record of `tid`'s image in generation `id` of `job` (its round
    /// or a complete generation).
    fn image_rec(&mut self, job: &str, id: u64, tid: Tid) -> Option<&mut ImageRec> {
        let j = self.jobs.get_mut(job)?;
        if let Some(r) = j.ckpt.round.as_mut().filter(|r| r.id == id) {
            return r.images.get_mut(&tid);
        }
        j.ckpt
            .good
            .iter_mut()
            .find(|g| g.id == id)?
            .images
            .get_mut(&tid)
    }

    /// `job`'s round, if its VPs went on and every image has the copies it
    /// needs: a complete generation (the last two are kept).
    fn round_complete(&mut self, job: &str) -> Vec<Out> {
        let need = self.copies_needed();
        let alive = |h: &String| self.hosts.get(h).is_some_and(|r| r.alive);
        let now = self.now;
        let Some(j) = self.jobs.get_mut(job) else {
            return Vec::new();
        };
        let done = j.ckpt.round.as_ref().is_some_and(|r| {
            r.resumed
                && r.members.iter().all(|t| {
                    r.images
                        .get(t)
                        .is_some_and(|i| i.holders.iter().filter(|h| alive(h)).count() >= need)
                })
        });
        if !done {
            return Vec::new();
        }
        let Some(r) = j.ckpt.round.take() else {
            return Vec::new();
        };
        let id = r.id;
        let vps = j
            .vps
            .iter()
            .filter(|(_, v)| r.members.contains(&v.tid))
            .map(|(&vp, _)| vp)
            .collect();
        let bytes: u64 = r.images.values().map(|i| i.size).sum();
        let n = r.images.len();
        j.ckpt.good.push(Generation {
            id,
            vps,
            images: r.images,
        });
        let extra = j.ckpt.good.len().saturating_sub(2);
        j.ckpt.good.drain(..extra);
        let took = now.saturating_duration_since(r.started);
        let copies = match need {
            1 => "one copy each (the virtual machine has one live host)".to_string(),
            n => format!("{n} copies each, on different hosts"),
        };
        let message = format!(
            "job {job} checkpointed (generation {id}): {}, {bytes} bytes, {copies}",
            libmig::words::count(n as u64, "VP", "VPs")
        );
        let mut out = vec![
            Out::Log(format!("{message}, in about {} ms", took.as_millis())),
            Out::Broadcast(ToHost::PruneImages {
                job: job.to_string(),
                keep: j.ckpt.good.iter().map(|g| g.id).collect(),
            }),
        ];
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

    /// `job`'s round fails for `why`: its VPs go on (if they were still
    /// stopped for it), whoever asked hears why, and every copy of its
    /// images goes.
    pub(super) fn fail_round(&mut self, job: &str, why: &str) -> Vec<Out> {
        let full: Vec<String> = self
            .hosts
            .iter()
            .filter(|(_, h)| h.alive && h.state_full)
            .map(|(n, _)| n.clone())
            .collect();
        let Some(j) = self.jobs.get_mut(job) else {
            return Vec::new();
        };
        let Some(mut r) = j.ckpt.round.take() else {
            return Vec::new();
        };
        let moves = std::mem::take(&mut r.moves);
        // The next periodic one comes an interval after this failure, not
        // at once.
        j.ckpt.last = Some(self.now);
        let mut out = vec![Out::Log(format!(
            "checkpoint {} of job {job} failed: {why}; the job goes on as it was",
            r.id
        ))];
        if !r.resumed {
            out.extend(to_every_vp(j, &r.members, |_| SnapOrder::Abort {
                id: r.id,
            }));
        }
        out.push(Out::Broadcast(ToHost::PruneImages {
            job: job.to_string(),
            keep: j.ckpt.good.iter().map(|g| g.id).collect(),
        }));
        let next = if full.is_empty() {
            format!("`mig checkpoint {job}` again")
        } else {
            format!(
                "the state directory of {} is full (`mig hosts` shows it): free space there and \
                 `mig checkpoint {job}` again",
                full.join(", ")
            )
        };
        for w in r.waiters {
            out.push(Out::Reply(
                w,
                Response::Error {
                    message: format!(
                        "checkpoint of job {job} failed: {why}; the job goes on as it was; {next}"
                    ),
                },
            ));
        }
        out.extend(self.moves_asked_meanwhile(moves));
        out
    }

    /// Moves asked by hand while a job's VPs paused for its checkpoint,
    /// made now that they go on.
    fn moves_asked_meanwhile(&mut self, moves: Vec<(Requester, Tid, String)>) -> Vec<Out> {
        let mut out = Vec::new();
        for (from, tid, to) in moves {
            out.extend(self.migrate(from, &format!("t{tid:x}"), &to));
        }
        out
    }

    /// Periodic checkpoints, rounds that take too long given up, and the
    /// copies every image needs.
    pub(super) fn checkpoint_tick(&mut self, now: Instant) -> Vec<Out> {
        let mut out = Vec::new();
        let timeout = self.checkpoint_timeout;
        let mut due = Vec::new();
        let mut late = Vec::new();
        let hosts = &self.hosts;
        for (job, j) in &mut self.jobs {
            if let Some(r) = &j.ckpt.round {
                let list = |done: &dyn Fn(&Tid) -> bool| {
                    r.members
                        .iter()
                        .filter(|t| !done(t))
                        .map(|t| format!("t{t:x}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                if !r.resumed && now.duration_since(r.started) > timeout {
                    late.push((
                        job.clone(),
                        format!(
                            "not every VP reached a safe point and wrote its image within {} s \
                             (not paused: [{}]; no image: [{}])",
                            timeout.as_secs(),
                            list(&|t| r.paused.contains_key(t)),
                            list(&|t| r.taken.contains(t)),
                        ),
                    ));
                }
                let left: u64 = r.images.values().map(|i| i.size).sum();
                let copies_for = timeout + Duration::from_secs(left / COPY_RATE);
                if r.resumed && now.duration_since(r.progress) > copies_for {
                    late.push((
                        job.clone(),
                        format!(
                            "its images did not get their copies within {} s",
                            copies_for.as_secs()
                        ),
                    ));
                }
            }
            // At most about 2% of the job's time: the interval stretches to
            // 50 times how long the last checkpoint held the job's VPs.
            let every = self.checkpoint_every.map(|e| match j.ckpt.took {
                None if j.ckpt.good.is_empty() => e.min(FIRST_CHECKPOINT),
                took => e.max(took.unwrap_or_default() * CKPT_SHARE),
            });
            // (Only jobs whose every VP keeps its state through libmig: the
            // others never reach a safe point.)
            let running = !j.suspended
                && j.vps
                    .values()
                    .all(|v| v.state().can_migrate() && v.movable());
            // Nor while one of its VPs waits to move, or sits on a host its
            // owner took back (stopped there, it reaches no safe point): the
            // round would hold the move back and wait for that VP in vain.
            let settled = j.vps.values().all(|v| {
                v.state().plan().is_none_or(|p| p.wants.is_none())
                    && v.host()
                        .and_then(|h| hosts.get(h))
                        .is_some_and(|h| h.in_pool)
            });
            if every.is_some_and(|e| j.ckpt.last.is_none_or(|l| now.duration_since(l) >= e))
                && j.ckpt.round.is_none()
                && running
                && settled
                && !j.killed
            {
                due.push(job.clone());
            }
        }
        for (job, why) in late {
            // A round whose VPs did not all pause in time cost the job that
            // long: it counts as a round's time, and the interval stretches
            // to 50 times it (else a VP that reaches no safe point in time
            // would hold its job, and moves, for a timeout every few
            // seconds).
            let paused_for = self
                .jobs
                .get(&job)
                .and_then(|j| j.ckpt.round.as_ref())
                .filter(|r| !r.resumed)
                .map(|r| now.saturating_duration_since(r.started));
            out.extend(self.fail_round(&job, &why));
            if let (Some(lost), Some(j)) = (paused_for, self.jobs.get_mut(&job)) {
                j.ckpt.took = Some(j.ckpt.took.map_or(lost, |t| t.max(lost)));
            }
        }
        let jobs: Vec<String> = self.jobs.keys().cloned().collect();
        for job in jobs {
            out.extend(self.copy_images(&job));
        }
        out.extend(self.hunts_overdue(now));
        for job in due {
            out.extend(self.checkpoint_job(&job, None));
        }
        out
    }

    /// `host` is gone: its copies of images with it. Images left with
    /// fewer copies than they need get one elsewhere at once; a generation
    /// that lost an image's every copy is dropped, a round fails.
    pub(super) fn images_host_gone(&mut self, host: &str) -> Vec<Out> {
        let mut out = Vec::new();
        let mut lost: Vec<(String, u64, ImageId)> = Vec::new();
        let mut failed: Vec<(String, String)> = Vec::new();
        for (job, j) in &mut self.jobs {
            if let Some(r) = &mut j.ckpt.round {
                for (&tid, rec) in &mut r.images {
                    forget_holder(rec, host);
                    if rec.holders.is_empty() {
                        let image = ImageId {
                            job: job.clone(),
                            gen: r.id,
                            tid,
                        };
                        failed.push((
                            job.clone(),
                            format!("{image} was kept only on {host}, gone"),
                        ));
                    }
                }
            }
            for g in &mut j.ckpt.good {
                for (&tid, rec) in &mut g.images {
                    forget_holder(rec, host);
                    if rec.holders.is_empty() {
                        let image = ImageId {
                            job: job.clone(),
                            gen: g.id,
                            tid,
                        };
                        lost.push((job.clone(), g.id, image));
                    }
                }
            }
        }
        for (job, why) in failed {
            out.extend(self.fail_round(&job, &why));
        }
        for (job, id, image) in lost {
            out.extend(self.generation_lost(&job, id, &image));
        }
        let jobs: Vec<String> = self.jobs.keys().cloned().collect();
        for job in jobs {
            out.extend(self.copy_images(&job));
        }
        out
    }

    /// Restart `job` from its newest checkpoint of which an intact copy of
    /// every image exists: `mig restart`, and automatically when a host
    /// dies under a job that has a checkpoint. Nothing is stopped yet: the
    /// hosts holding the images are asked to read them through first.
    pub(super) fn restart_job(&mut self, job: &str, from: Option<Requester>) -> Vec<Out> {
        let err = |m: String| match &from {
            Some(r) => vec![Out::Reply(r.clone(), Response::Error { message: m })],
            None => vec![Out::Log(m)],
        };
        let alive: BTreeSet<String> = self
            .hosts
            .iter()
            .filter(|(_, h)| h.alive)
            .map(|(n, _)| n.clone())
            .collect();
        let now = self.now;
        let Some(j) = self.jobs.get_mut(job) else {
            return err(format!("no job {job:?}; `mig ps` lists them"));
        };
        if j.ckpt.good.is_empty() {
            return err(format!(
                "job {job} has no checkpoint yet: `mig checkpoint {job}`, or set checkpoint_interval_s"
            ));
        }
        if let Some(p) = &mut j.ckpt.restart {
            let partial = p.hunt.as_ref().is_some_and(|h| h.only.is_some());
            if partial && from.is_some() {
                return err(format!(
                    "job {job} is restoring the VPs it lost with their host from its \
                     checkpoint; ask again once they run (`mig ps`)"
                ));
            }
            p.from.extend(from);
            return Vec::new();
        }
        // A job of independent VPs that lost some (or whose restore of
        // some failed) restores only those.
        let only = match from {
            None => self.lost_alone.remove(job),
            Some(_) => None,
        };
        let mut missing = Vec::new();
        let gens = j
            .ckpt
            .good
            .iter()
            .rev()
            .filter_map(|g| {
                let mut images = BTreeMap::new();
                if only.as_ref().is_some_and(|o| !o.is_subset(&g.vps)) {
                    return None;
                }
                let vps = g
                    .vps
                    .iter()
                    .filter(|vp| only.as_ref().is_none_or(|o| o.contains(vp)));
                for vp in vps {
                    let Some(v) = j.vps.get(vp) else { continue };
                    let holders: Vec<String> = g
                        .images
                        .get(&v.tid)
                        .map(|i| {
                            i.holders
                                .iter()
                                .filter(|h| alive.contains(*h))
                                .cloned()
                                .collect()
                        })
                        .unwrap_or_default();
                    if holders.is_empty() {
                        missing.push(format!(
                            "VP t{:x}'s image of generation {} (no live host keeps a copy)",
                            v.tid, g.id
                        ));
                        return None;
                    }
                    images.insert(v.tid, holders);
                }
                Some((g.id, images))
            })
            .collect();
        j.ckpt.restart = Some(PendingRestart {
            lost: from.is_none(),
            from: from.into_iter().collect(),
            hunt: Some(Hunt {
                gens,
                have: BTreeMap::new(),
                asked: BTreeMap::new(),
                deadline: now + CHECK_TIMEOUT,
                missing,
                only,
            }),
        });
        let mut out = vec![Out::Log(format!(
            "job {job}: looking for its checkpoint's images"
        ))];
        out.extend(self.hunt_on(job));
        out
    }

    /// The search for `job`'s images goes on: the generation at the front
    /// is whole once every image was found intact on a holder; each image
    /// not yet found is asked of its next holder; a generation with an
    /// image that no holder has intact is given up for the next.
    fn hunt_on(&mut self, job: &str) -> Vec<Out> {
        let now = self.now;
        let Some(h) = self
            .jobs
            .get_mut(job)
            .and_then(|j| j.ckpt.restart.as_mut())
            .and_then(|p| p.hunt.as_mut())
        else {
            return Vec::new();
        };
        let Some((id, images)) = h.gens.front() else {
            let why = if h.missing.is_empty() {
                "no checkpoint generation left".to_string()
            } else {
                format!("no intact copy of {}", h.missing.join("; "))
            };
            return self.images_checked(job, Err(why));
        };
        let id = *id;
        if images.keys().all(|t| h.have.contains_key(t)) {
            let found = std::mem::take(&mut h.have);
            return self.images_checked(job, Ok((id, found)));
        }
        let mut out = Vec::new();
        for (&tid, holders) in images {
            if h.have.contains_key(&tid) || h.asked.contains_key(&tid) {
                continue;
            }
            let Some(holder) = holders.first() else {
                continue;
            };
            h.asked.insert(tid, holder.clone());
            out.push(Out::ToHost(
                holder.clone(),
                ToHost::CheckImage {
                    image: ImageId {
                        job: job.to_string(),
                        gen: id,
                        tid,
                    },
                },
            ));
        }
        h.deadline = now + CHECK_TIMEOUT;
        out
    }

    /// `host` read its copy of `image` through: intact, or not (its next
    /// holder is asked; with none left, the generation is given up).
    pub(super) fn image_checked(
        &mut self,
        host: &str,
        image: ImageId,
        result: Result<(), String>,
    ) -> Vec<Out> {
        let job = image.job.clone();
        let Some(h) = self
            .jobs
            .get_mut(&job)
            .and_then(|j| j.ckpt.restart.as_mut())
            .and_then(|p| p.hunt.as_mut())
        else {
            return Vec::new();
        };
        let current = h.gens.front().is_some_and(|g| g.0 == image.gen);
        if !current || h.asked.get(&image.tid).map(String::as_str) != Some(host) {
            return Vec::new();
        }
        h.asked.remove(&image.tid);
        let mut out = Vec::new();
        match result {
            Ok(()) => {
                h.have.insert(image.tid, host.to_string());
            }
            Err(e) => {
                out.push(Out::Log(format!("job {job}: {image} on {host}: {e}")));
                let holders = h.gens.front_mut().and_then(|g| g.1.get_mut(&image.tid));
                if let Some(holders) = holders {
                    holders.retain(|x| x != host);
                    if holders.is_empty() {
                        h.missing.push(format!("{image} (on {host}: {e})"));
                        h.gens.pop_front();
                        h.have.clear();
                        h.asked.clear();
                    }
                }
            }
        }
        out.extend(self.hunt_on(&job));
        out
    }

    /// Holders that did not answer in time: their generation is given up.
    fn hunts_overdue(&mut self, now: Instant) -> Vec<Out> {
        let late: Vec<String> = self
            .jobs
            .iter()
            .filter(|(_, j)| {
                j.ckpt
                    .restart
                    .as_ref()
                    .and_then(|p| p.hunt.as_ref())
                    .is_some_and(|h| !h.asked.is_empty() && now > h.deadline)
            })
            .map(|(job, _)| job.clone())
            .collect();
        let mut out = Vec::new();
        for job in late {
            if let Some(h) = self
                .jobs
                .get_mut(&job)
                .and_then(|j| j.ckpt.restart.as_mut())
                .and_then(|p| p.hunt.as_mut())
            {
                let id = h.gens.front().map_or(0, |g| g.0);
                h.missing.push(format!(
                    "images of generation {id} (their hosts did not answer)"
                ));
                h.gens.pop_front();
                h.have.clear();
                h.asked.clear();
            }
            out.extend(self.hunt_on(&job));
        }
        out
    }

    /// The search for `job`'s images ended: `Ok` with the newest generation
    /// of which every image is intact, and a host keeping each; `Err`
    /// says what is missing. Restarts the job from them, or leaves it as
    /// it was (a `mig restart` fails), or, when a host died under it and it
    /// cannot go on consistently, ends it with the reason.
    fn images_checked(
        &mut self,
        job: &str,
        found: Result<(u64, BTreeMap<Tid, String>), String>,
    ) -> Vec<Out> {
        let Some(j) = self.jobs.get_mut(job) else {
            return Vec::new();
        };
        let Some(pending) = j.ckpt.restart.take() else {
            return Vec::new();
        };
        let only = pending.hunt.as_ref().and_then(|h| h.only.clone());
        if j.killed {
            self.lost_alone.remove(job);
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
        let mut out = match (found, only) {
            (Ok((id, sources)), only) => self.restart_from(job, id, sources, pending.from, only),
            // Independent VPs with no image left start again from the
            // beginning where they are placed; the others go on.
            (Err(why), Some(only)) => {
                let mut out = vec![Out::Log(format!(
                    "job {job}: no checkpoint to restore its lost VPs from ({why})"
                ))];
                for vp in only {
                    let at = self.jobs.get(job).and_then(|j| j.vps.get(&vp));
                    if let Some(to) = at.and_then(|v| v.host()).map(String::from) {
                        out.extend(self.start_from_beginning(job, vp, &to, "with its host"));
                    }
                }
                out
            }
            (Err(why), None) => {
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
                    self.lost_alone.remove(job);
                    out.extend(self.end_job(job, &format!("{why}, and a host died under it")));
                } else {
                    out.push(Out::Log(why));
                }
                out
            }
        };
        // VPs lost while these images were looked for (a second host died)
        // are restored next.
        if self.lost_alone.contains_key(job) {
            out.extend(self.restart_job(job, None));
        }
        out
    }

    /// Restart `job` from generation `id`, whose images were found intact
    /// on `sources`: every VP (or `only` those, lost in a job of
    /// independent VPs: the others go on) is started again from its image
    /// (see `restore_places`), which the host keeping it sends there; the
    /// host ends the VP's process it replaces.
    fn restart_from(
        &mut self,
        job: &str,
        id: u64,
        sources: BTreeMap<Tid, String>,
        from: Vec<Requester>,
        only: Option<BTreeSet<u32>>,
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
        let (added, mut out_back) = match only {
            Some(_) => (Vec::new(), Vec::new()),
            None => self.bring_back(job, &gen),
        };
        let Some(placed) = self.restore_places(job, &gen, only.as_ref()) else {
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
        let (mut out, mut out_after) = match &only {
            None => self.roll_back(job, &gen),
            Some(only) => {
                let mut out = self.fail_round(job, "VPs lost with their host are restored alone");
                let tids: Vec<Tid> = placed.iter().map(|p| p.1).collect();
                self.groups.restarted(&tids);
                out.push(Out::Log(format!(
                    "job {job}: its VPs are independent: restoring {} alone from generation {} \
                     (the others go on)",
                    libmig::words::count(only.len() as u64, "VP", "VPs"),
                    gen.id
                )));
                (out, Vec::new())
            }
        };
        let mut restores = Vec::new();
        let mut dir = Vec::new();
        let mut restoring = BTreeMap::new();
        for (vp, tid, host) in placed {
            restoring.insert(vp, host.clone());
            let Some(start) = self.start_of(job, vp, &host) else {
                continue;
            };
            // (Its process there is ended by the start from the image,
            // which may reach the host before any word from here would:
            // it comes from the host keeping the image.)
            // A move under way is called off: its target ends what it has
            // of the VP (a process started from the moved image included).
            // Restored elsewhere than it ran, its process there ends too.
            let v = self.jobs.get(job).and_then(|j| j.vps.get(&vp));
            let ran = v.filter(|v| !v.state().ended());
            let moving_to = ran.and_then(|v| v.state().moving_to());
            let ran_on = ran.and_then(|v| v.host());
            for old in BTreeSet::from_iter(moving_to.into_iter().chain(ran_on)) {
                if old != host && self.is_alive(old) {
                    out.push(Out::ToHost(old.to_string(), ToHost::Kill { tid }));
                }
            }
            if let Some(holder) = sources.get(&tid) {
                if let Some(j) = self.jobs.get_mut(job) {
                    j.ckpt.restoring_from.insert(tid, (id, holder.clone()));
                }
                let image = ImageId {
                    job: job.to_string(),
                    gen: id,
                    tid,
                };
                restores.push(Out::ToHost(
                    holder.clone(),
                    ToHost::CopyImage {
                        image,
                        to: host.clone(),
                        start: Some(start),
                    },
                ));
            }
            dir.push((tid, Loc::Waiting));
        }
        let mut follow = Vec::new();
        if let Some(j) = self.jobs.get_mut(job) {
            for (vp, v) in j.vps.iter_mut() {
                let Some(host) = restoring.remove(vp) else {
                    continue;
                };
                follow.push((*vp, host.clone()));
                out.extend(v.go(VpState::Restoring { host }).err().map(Out::from));
            }
        }
        // The scheduler's map has every VP where it is restored.
        for (vp, host) in follow {
            out_after.extend(self.follow_in_map(job, vp, &host));
        }
        out.push(Out::Broadcast(ToHost::Directory(dir)));
        out.push(Out::Log(format!(
            "job {job}: restoring from generation {id}"
        )));
        out.extend(restores);
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

    /// Where each VP of `job` in `gen` (`only` those, if given) is
    /// restored: where the scheduler's map has it, else on its host; not
    /// on the target of a move under way, which may still start it from
    /// the moved image (the move is called off and ends there what arrives
    /// of it: the map follows the VP instead). None while one has no live
    /// host.
    fn restore_places(
        &self,
        job: &str,
        gen: &Generation,
        only: Option<&BTreeSet<u32>>,
    ) -> Option<Vec<(u32, Tid, String)>> {
        let mapped: BTreeMap<u32, String> = self
            .sched
            .job_view(job)
            .map(|v| v.placement)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(vp, p)| Some((vp, p.rsplit_once('/')?.0.to_string())))
            .collect();
        let j = self.jobs.get(job)?;
        j.vps
            .iter()
            .filter(|(vp, _)| gen.vps.contains(vp) && only.is_none_or(|o| o.contains(vp)))
            .map(|(&vp, v)| {
                let alive = |h: &&str| self.is_alive(h);
                let moving_to = v.state().moving_to();
                let h = mapped.get(&vp).map(String::as_str);
                let h = h.filter(|h| alive(h) && Some(*h) != moving_to);
                let h = h.or(v.host().filter(alive))?.to_string();
                Some((vp, v.tid, h))
            })
            .collect()
    }

    /// The whole of `job` goes back to checkpoint `gen`: a round under way
    /// is given up, VPs spawned since are dropped, and what its VPs sent
    /// since is fenced off everywhere. What to carry out now, and after
    /// the restores.
    fn roll_back(&mut self, job: &str, gen: &Generation) -> (Vec<Out>, Vec<Out>) {
        // (VPs lost meanwhile are restored with the others.)
        self.lost_alone.remove(job);
        let mut out = self.fail_round(job, "the job restarts from an earlier checkpoint");
        // Every VP the job has had since, dropped or not.
        let Some(j) = self.jobs.get(job) else {
            return (out, Vec::new());
        };
        let fenced: Vec<Tid> = j.vps.values().map(|v| v.tid).collect();
        self.groups.restarted(&fenced);
        out.push(Out::Log(format!(
            "restarting job {job} from its checkpoint (generation {})",
            gen.id
        )));
        let out_after = self.drop_unsaved(job, &gen.vps, &mut out);
        let Some(j) = self.jobs.get_mut(job) else {
            return (out, out_after);
        };
        // Whatever the job's VPs sent after the checkpoint is not part of
        // the run that goes on: every host drops it from now on.
        j.incarnation += 1;
        out.push(Out::Broadcast(ToHost::Fence {
            tids: fenced,
            incarnation: j.incarnation,
        }));
        (out, out_after)
    }

    /// VPs of `job` that ended after checkpoint `gen` come back with it:
    /// the scheduler places them again (`VpBack`), so they are gang-sliced
    /// like the others. What the scheduler asks of other jobs is carried
    /// out. The VPs brought back, and what the server must carry out.
    fn bring_back(&mut self, job: &str, gen: &Generation) -> (Vec<u32>, Vec<Out>) {
        let Some(j) = self.jobs.get(job) else {
            return (Vec::new(), Vec::new());
        };
        let back: Vec<(u32, String)> = j
            .vps
            .iter()
            .filter(|(vp, v)| gen.vps.contains(vp) && v.state().ended())
            .filter_map(|(&vp, v)| {
                let arch = self.hosts.get(v.host()?)?.facts.arch.clone();
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
        }
        out.extend(self.outs_for(actions));
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
            let exited = v.state().ended();
            if let Some(h) = v
                .host()
                .map(String::from)
                .filter(|h| !exited && self.hosts.get(h).is_some_and(|h| h.alive))
            {
                out.push(Out::ToHost(h, ToHost::Kill { tid: v.tid }));
            }
            if !exited {
                events.push(Event::VpExit {
                    job: job.to_string(),
                    vp,
                });
            }
            self.forget_vp(v.tid);
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
            out.push(Out::Broadcast(ToHost::Directory(gone)));
        }
        events.into_iter().flat_map(|e| self.event(e)).collect()
    }
}

/// `host` holds no copy of `rec` any more, nor is one on its way there or
/// from there.
fn forget_holder(rec: &mut ImageRec, host: &str) {
    rec.holders.remove(host);
    if rec
        .copying
        .as_ref()
        .is_some_and(|(from, to, _)| from == host || to == host)
    {
        rec.copying = None;
    }
    rec.short_said = false;
}

/// Tell `host` to keep only generations `keep` of `job`'s images.
fn prune_at(host: &str, job: &str, keep: Vec<u64>) -> Out {
    Out::ToHost(
        host.to_string(),
        ToHost::PruneImages {
            job: job.to_string(),
            keep,
        },
    )
}

/// `step` for each VP of `j` in `members` (the VPs of a checkpoint round),
/// to its host.
pub(super) fn to_every_vp(
    j: &JobRec,
    members: &BTreeSet<Tid>,
    step: impl Fn(Tid) -> SnapOrder,
) -> Vec<Out> {
    j.vps
        .values()
        .filter(|v| members.contains(&v.tid))
        .filter_map(|v| {
            let h = v.host()?.to_string();
            Some(Out::ToHost(
                h,
                ToHost::Snap {
                    tid: v.tid,
                    step: step(v.tid),
                },
            ))
        })
        .collect()
}
