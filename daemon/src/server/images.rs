//! Job checkpoints' images on this host (laid out by `store`): a VP's image
//! kept where it wrote it, a copy sent to another host or to the host that
//! restarts the VP from it, a copy taken in from another host, a copy read
//! through before a restart, generations dropped; and every image going
//! out to another host, a move's included, sent a part at a time as its
//! link drains (`Outbound`; a copy also as its other end writes it). The
//! file work (reading, writing, sums, syncs) is done on threads
//! (`keeper`): images never hold up this loop, nor pass through the
//! master's (it hears only where each copy is).
//!
//! What does not live here: where copies go (the master), the other steps
//! of a move (`move_out`, `move_in`).
//!
//! Their state is the daemon's `Images` part, defined here: the store and
//! its keeper thread, the copies coming in and going out, the images going
//! out (a move's too: `move_out` queues them here) and how full the disk
//! is. Handlers elsewhere reach it as `self.images`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use libmig::msg::{DataLink, ImageId, StartVp, Tid, ToMaster};
use libmig::Payload;
use mio::Token;

use super::Daemon;
use crate::disk::DiskWatch;
use crate::keeper::{Done, Keeper, Reader, Task, Writer};
use crate::migrate::{map_image, Outbound, Sending, ACK_WINDOW, COPY_PART, WINDOW};
use crate::store::Store;
use crate::{debug, log, warn};

/// How long an image waits for its data link before it is given up.
const LINK_WAIT: Duration = Duration::from_secs(10);

/// Job checkpoints' images kept here and the thread that keeps them,
/// copies of images coming in and going out, and every image going out to
/// another host (a move's too), a few parts at a time. Owned by the
/// `Daemon`; its handlers reach it as `self.images`.
pub(super) struct Images {
    /// Job checkpoints' images kept here.
    pub(super) store: Store,
    /// The thread that checks, syncs and keeps images off the loop.
    pub(super) keeper: Keeper,
    /// Images going out to other hosts, a few parts at a time.
    pub(super) outbound: Vec<Outbound>,
    /// Copies of other hosts' images arriving to be kept here: the link
    /// each comes on, and the thread writing it.
    pub(super) copies_in: HashMap<ImageId, (Token, Writer)>,
    /// Copies of images kept here going to other hosts, read ahead: one
    /// reader a copy (an image may go to two hosts at once, when the
    /// master gave up on the first target before its copy was given up
    /// here).
    pub(super) copies_out: HashMap<(ImageId, String), Reader>,
    /// How full the state directory is.
    pub(super) disk: DiskWatch,
}

impl Images {
    /// Nothing going in or out yet.
    pub(super) fn new(store: Store, keeper: Keeper, state_dir: PathBuf) -> Images {
        Images {
            store,
            keeper,
            outbound: Vec::new(),
            copies_in: HashMap::new(),
            copies_out: HashMap::new(),
            disk: DiskWatch::new(state_dir),
        }
    }

    /// The master counts none of the images kept here any more (this host
    /// was fenced): none is kept, copied in or sent on.
    pub(super) fn forget_copies(&mut self) {
        self.copies_in.clear();
        self.copies_out.clear();
        self.outbound
            .retain(|o| !matches!(o.what, crate::migrate::Sending::Copy(_)));
        self.store.clear();
    }

    /// Link `t` closed: the copies arriving on it never will (their
    /// threads say so as they end).
    pub(super) fn copies_cut_off(&mut self, t: Token) {
        self.copies_in.retain(|_, (from, _)| *from != t);
    }

    /// `PruneImages`: of `job`'s images, only generations `keep` stay here.
    pub(super) fn prune_images(&mut self, job: &str, keep: &[u64]) {
        let gone = |i: &ImageId| i.job == job && !keep.contains(&i.gen);
        self.copies_in.retain(|i, _| !gone(i));
        self.copies_out.retain(|(i, _), _| !gone(i));
        self.outbound
            .retain(|o| !matches!(&o.what, Sending::Copy(i) if gone(i)));
        self.store.prune(job, keep);
    }
}

impl Daemon {
    /// VP `tid` wrote its image of job checkpoint `id` at `path`: the
    /// master hears it at once (the VPs go on once all have), and the
    /// image is checked, synced and kept here, off the loop (`ImageKept`
    /// follows).
    pub(super) fn snap_taken(&mut self, tid: Tid, id: u64, path: &str) {
        let expected = self.state.snap_image(tid);
        if std::path::Path::new(path) != expected {
            return log!(
                "VP t{tid:x} wrote its checkpoint to {path}, not {}",
                expected.display()
            );
        }
        let job = self
            .local
            .vps
            .by_tid
            .get(&tid)
            .and_then(|v| v.start.as_ref())
            .map(|s| s.job.clone())
            .unwrap_or_default();
        if let Some(since) = self
            .local
            .vps
            .by_tid
            .get_mut(&tid)
            .and_then(|v| v.snapping_since.take())
        {
            let bytes = std::fs::metadata(&expected).map_or(0, |m| m.len());
            self.metrics.checkpoint(bytes, since.elapsed());
        }
        self.report(ToMaster::Snap {
            tid,
            step: libmig::msg::SnapReport::Taken { id },
        });
        let image = ImageId { job, gen: id, tid };
        match self.images.store.path(&image) {
            Ok(to) => self.keep(Task::Keep {
                image,
                from: expected,
                to,
            }),
            Err(reason) => {
                crate::discard::remove_later(&expected);
                let host = self.facts.name.clone();
                self.report(ToMaster::ImageFailed {
                    image,
                    host,
                    reason,
                });
            }
        }
    }

    /// Hand `task` to the keeper thread.
    fn keep(&mut self, task: Task) {
        if let Some(done) = self.images.keeper.send(task) {
            self.kept(done);
        }
    }

    /// The keeper thread's results.
    pub(super) fn keeper_done(&mut self) {
        for done in self.images.keeper.done() {
            self.kept(done);
        }
    }

    fn kept(&mut self, done: Done) {
        let host = self.facts.name.clone();
        match done {
            Done::Kept { image, size, crc } => {
                self.images.copies_in.remove(&image);
                self.images.disk.wrote();
                debug!("{image}: kept here ({size} bytes)");
                self.report(ToMaster::ImageKept { image, size, crc });
            }
            Done::Wrote { image, upto } => {
                // The sender sends on as far as this.
                if let Some(&(t, _)) = self.images.copies_in.get(&image) {
                    self.send_peer(t, DataLink::ImageAck { image, upto });
                }
            }
            Done::Read { .. } => self.pump_outbound(),
            Done::NotKept {
                image,
                reason,
                no_space,
            } => {
                self.images.copies_in.remove(&image);
                let reason = if no_space {
                    self.no_space();
                    format!(
                        "{reason} (the state directory {} is full)",
                        self.state.root().display()
                    )
                } else {
                    reason
                };
                warn!("{image}: cannot keep it here: {reason}");
                self.report(ToMaster::ImageFailed {
                    image,
                    host,
                    reason,
                });
            }
            Done::Checked { image, result } => {
                self.report(ToMaster::ImageChecked { image, result });
            }
        }
    }

    /// The master asks for this host's copy of `image` to be read through.
    pub(super) fn check_image(&mut self, image: ImageId) {
        match self.images.store.path(&image) {
            Ok(path) => self.keep(Task::Check { image, path }),
            Err(e) => self.report(ToMaster::ImageChecked {
                image,
                result: Err(e),
            }),
        }
    }

    /// The master asks for this host's copy of `image` to go to `to`: to
    /// be kept there, or (`start`) to start its VP from there (here: from
    /// the copy itself, linked, not copied).
    pub(super) fn copy_image(&mut self, image: ImageId, to: String, start: Option<StartVp>) {
        let me = self.facts.name.clone();
        let fail = |d: &mut Daemon, image: ImageId, reason: String| {
            warn!("{image}: cannot send it to {to}: {reason}");
            d.report(ToMaster::ImageFailed {
                image,
                host: me.clone(),
                reason,
            })
        };
        let path = match self.images.store.path(&image) {
            Ok(p) => p,
            Err(e) => return fail(self, image, e),
        };
        if to == me {
            let Some(start) = start else { return };
            let restore = self.state.restore(image.tid);
            crate::discard::remove_later(&restore);
            return match std::fs::hard_link(&path, &restore) {
                Ok(()) => {
                    debug!("{image}: restoring its VP here from it");
                    self.start_restored(start, &restore, false)
                }
                Err(e) => fail(self, image, format!("{}: {e}", path.display())),
            };
        }
        debug!("{image}: sending it to {to}");
        if let Some(start) = start {
            // A restore: its VP waits for it, as a move's does.
            let mapped = match map_image(&path) {
                Ok(m) => m,
                Err(e) => return fail(self, image, e),
            };
            let tid = image.tid;
            let out = Outbound::whole(to.clone(), tid, mapped, Some(start), Instant::now());
            self.images.outbound.push(out);
        } else {
            // A copy to keep: read ahead off the loop as it goes.
            let reader = match self.images.keeper.read(image.clone(), &path, COPY_PART) {
                Ok(r) => r,
                Err(e) => return fail(self, image, e),
            };
            self.images
                .copies_out
                .insert((image.clone(), to.clone()), reader);
            self.images
                .outbound
                .push(Outbound::copy(to.clone(), image, Instant::now()));
        }
        self.pump_outbound();
    }

    /// Part of a copy of `image` from another host (on link `t`), to keep:
    /// written and summed as it arrives, and once whole synced and kept, on
    /// a thread of its own (which says how far it wrote, and the sender
    /// keeps at most `ACK_WINDOW` ahead of that). A copy that cannot be
    /// written is dropped and the master hears why.
    pub(super) fn image_copy_part(
        &mut self,
        t: Token,
        image: ImageId,
        (at, total): (u64, u64),
        part: Vec<u8>,
    ) {
        if at == 0 {
            // (Whatever arrived of an earlier copy of it goes.)
            self.images.copies_in.remove(&image);
            let paths = self
                .images
                .store
                .part_path(&image)
                .and_then(|tmp| Ok((tmp, self.images.store.path(&image)?)));
            match paths {
                Ok((tmp, to)) => {
                    let w = self.images.keeper.write(image.clone(), tmp, to);
                    self.images.copies_in.insert(image.clone(), (t, w));
                }
                Err(reason) => return self.copy_refused(image, reason),
            }
        }
        match self.images.copies_in.get(&image) {
            Some((from, w)) if *from == t => w.take(at, total, part),
            // (The rest of a copy refused, or one that came another way.)
            _ => {}
        }
    }

    fn copy_refused(&mut self, image: ImageId, reason: String) {
        warn!("{image}: cannot keep a copy here: {reason}");
        let host = self.facts.name.clone();
        self.report(ToMaster::ImageFailed {
            image,
            host,
            reason,
        });
    }

    /// The other end of a copy of `image` wrote it up to `upto`.
    pub(super) fn image_acked(&mut self, image: &ImageId, upto: u64) {
        for o in &mut self.images.outbound {
            if matches!(&o.what, Sending::Copy(i) if i == image) {
                o.acked(upto);
            }
        }
        self.pump_outbound();
    }

    /// Send on the images going out, each as far as its link has room
    /// (called every turn of the loop); one whose link is gone, or never
    /// came up, is given up.
    pub(super) fn pump_outbound(&mut self) {
        let now = Instant::now();
        let mut i = 0;
        while i < self.images.outbound.len() {
            let to = self.images.outbound[i].to.clone();
            let Some(d) = self.data_link(&to) else {
                let waited = now.saturating_duration_since(self.images.outbound[i].since);
                if waited > LINK_WAIT || !self.net.peers.contains_key(&to) {
                    self.outbound_failed(i, &format!("no data link to {to}"));
                } else {
                    i += 1;
                }
                continue;
            };
            if self.images.outbound[i].link.is_some_and(|l| l != d) {
                self.outbound_failed(i, &format!("its link to {to} broke"));
                continue;
            }
            self.images.outbound[i].link = Some(d);
            // A copy's next part, once read (off the loop).
            if let Sending::Copy(image) = self.images.outbound[i].what.clone() {
                if !self.images.outbound[i].ready() {
                    let read = self
                        .images
                        .copies_out
                        .get_mut(&(image.clone(), to.clone()))
                        .and_then(|r| {
                            let total = r.total;
                            r.next_part()
                                .map(|p| p.map(|(at, bytes)| (at, bytes, total)))
                        });
                    match read {
                        Some(Ok((at, bytes, total))) => {
                            self.images.outbound[i].add_read(at, bytes, total)
                        }
                        Some(Err(e)) => {
                            // This host's copy cannot be read: it has none.
                            let me = self.facts.name.clone();
                            self.images.outbound.remove(i);
                            self.images.copies_out.remove(&(image.clone(), to.clone()));
                            warn!("{image}: cannot send it to {to}: {e}");
                            self.report(ToMaster::ImageFailed {
                                image,
                                host: me,
                                reason: e,
                            });
                            continue;
                        }
                        None => {}
                    }
                }
            }
            // One part a turn at most: sealing and writing it is the
            // loop's, and a turn owes the rest of the machine its share;
            // a copy's other end keeps up with what it is sent.
            let mut broke = false;
            let o = &self.images.outbound[i];
            let room = self.net.conns.get(&d).is_some_and(|c| c.queued() < WINDOW)
                && o.unacked() < ACK_WINDOW;
            if room {
                if let Some((msg, part)) = self.images.outbound[i].next_part() {
                    broke = !self.send_image_part(d, msg, part);
                }
            }
            if broke {
                self.outbound_failed(i, &format!("lost the link to {to}"));
            } else if self.images.outbound[i].done() {
                let o = self.images.outbound.remove(i);
                if let Sending::Copy(image) = o.what {
                    self.images.copies_out.remove(&(image, o.to));
                }
            } else {
                i += 1;
            }
        }
    }

    /// Has an image going out a part ready for a link with room (the loop
    /// then does not wait for an event: a link that drained says nothing)?
    pub(super) fn outbound_ready(&self) -> bool {
        self.images.outbound.iter().any(|o| {
            let link = o.link.or_else(|| self.net.links.get(&o.to).copied());
            o.ready()
                && o.unacked() < ACK_WINDOW
                && link.is_some_and(|d| {
                    self.net.is_data_link(d)
                        && self.net.conns.get(&d).is_some_and(|c| c.queued() < WINDOW)
                })
        })
    }

    /// Image `i` going out is given up (`why`).
    fn outbound_failed(&mut self, i: usize, why: &str) {
        let o = self.images.outbound.remove(i);
        match o.what {
            Sending::Copy(image) => {
                self.images
                    .copies_out
                    .remove(&(image.clone(), o.to.clone()));
                warn!("{image}: not sent: {why}");
                self.report(ToMaster::ImageFailed {
                    image,
                    host: o.to,
                    reason: why.to_string(),
                });
            }
            // Its target hears its link closed, and says what it has.
            Sending::Restore(tid) => warn!("VP t{tid:x}: its image not sent: {why}"),
        }
    }

    /// VP `tid`'s image going out stops (its move is called off): its
    /// target drops what arrived of it.
    pub(super) fn cancel_outbound(&mut self, tid: Tid) {
        let mut links = Vec::new();
        self.images.outbound.retain(|o| {
            let it = o.restores(tid);
            if it {
                links.extend(o.link);
            }
            !it
        });
        for d in links {
            let msg = DataLink::RestoreOff { tid };
            self.send_image_part(d, msg, Payload::from(Vec::new()));
        }
    }

    /// An image could not be written here for lack of space: `mig hosts`
    /// says so from now on (the master hears it at once).
    pub(super) fn no_space(&mut self) {
        self.images.disk.no_space(Instant::now());
        self.send_usage();
    }

    /// Tell the master the CPU time of each local VP, and what this host
    /// has free (memory, disk time, space in its state directory).
    pub(super) fn send_usage(&mut self) {
        self.pace.usage_sent = Instant::now();
        let vps: Vec<(Tid, u64)> = self
            .local
            .vps
            .by_tid
            .iter()
            .filter(|(_, v)| v.exit.is_none())
            .filter_map(|(&t, v)| Some((t, v.cpu_ms()?)))
            .collect();
        let (state_free_mb, state_full) = self.images.disk.report(Instant::now());
        let usage = libmig::msg::HostUsage {
            vps,
            free_memory_mb: crate::facts::free_memory_mb(),
            io_busy: self.pace.io_meter.read(),
            state_free_mb,
            state_full,
            turns: self.pace.turns.report(Instant::now()),
        };
        self.report(ToMaster::Usage(usage));
    }
}
