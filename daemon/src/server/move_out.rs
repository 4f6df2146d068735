//! The source end of a move, as the loop carries it out: asking a VP for
//! its image, calling off a move whose VP reaches no safe point in time,
//! and sending the image on (while it is written, then the rest) to the
//! target host. Where each move is lives in the `MoveTable` (`migrate`).

use std::time::{Duration, Instant};

use libmig::msg::{DataLink, PeerMsg, StartVp, Tid, ToMaster, VpMsg};
use libmig::{frame, Payload};
use mio::Token;
use nix::sys::signal::Signal;

use super::Daemon;
use crate::migrate::{map_image, Dest, Outbound, Outgoing, Recalled, Written};
use crate::{debug, host, log, warn};

impl Daemon {
    /// The master moves local VP `start.tid` to `to` (this host: park it on
    /// disk while the owner has the host). From now on messages for it are
    /// held here (the master has told every host to hold them too); it is
    /// asked to write its image at its next safe point (woken if stopped,
    /// and signalled so that its safe point looks).
    pub(super) fn move_out(&mut self, to: String, start: StartVp) {
        let tid = start.tid;
        if let Some(parked) = self.moves.unpark(tid) {
            // Parked on disk: its image goes as it is (and is kept until
            // the VP runs there).
            let image = map_image(&parked.path);
            if image.is_ok() {
                self.keep_sent(tid, &start, Some(&parked.start.program), &parked.path);
            }
            let _ = std::fs::remove_file(&parked.path);
            return match image {
                Ok(image) => {
                    debug!("sending parked VP t{tid:x} to {to}");
                    self.send_image(&to, start, image, None)
                }
                Err(e) => self.report(ToMaster::MigrateFailed {
                    tid,
                    reason: format!("its parked image {}: {e}", parked.path.display()),
                }),
            };
        }
        let (Some(&t), Some(vp)) = (
            self.local.vp_conns.get(&tid),
            self.local.vps.by_tid.get(&tid),
        ) else {
            return self.report(ToMaster::MigrateFailed {
                tid,
                reason: format!("it is not running on {}", self.facts.name),
            });
        };
        if !vp.movable {
            // A program that does not move itself: saved from outside,
            // unless that cannot be (never resumed for a move it cannot
            // make: while the owner is back it stays stopped).
            return match self.cannot_move_from_outside(tid) {
                None => self.move_from_outside(to, start),
                Some(why) => self.report(ToMaster::MigrateFailed {
                    tid,
                    reason: format!("it cannot be moved from outside: {why}"),
                }),
            };
        }
        let dest = if to == self.facts.name {
            log!("asking VP t{tid:x} to write its image to disk (parking it while the owner has the host)");
            Dest::Disk
        } else {
            debug!("asking VP t{tid:x} to write its image for {to}");
            Dest::Host(to)
        };
        self.moves.ask(tid, dest, start, Instant::now());
        self.router.detach(tid);
        let path = self.state.move_image(tid);
        self.send_vp(
            t,
            &VpMsg::WriteImage {
                path: path.display().to_string(),
            },
        );
        // (Written before the signal: at its safe point the VP reads its
        // socket once, and a word still queued would be missed.)
        self.flush_now(t);
        if let Some(v) = self.local.vps.by_tid.get(&tid) {
            if !self.owner.offered() {
                // The owner is back: it runs on only what they leave idle,
                // and for at most `safe_point_limit`. SCHED_IDLE can starve
                // it outright on a machine busy with other work: a VP that
                // missed a try is tried next at nice 19, then at the
                // priority VPs run at (each try still bounded).
                match self.moves.missed(tid) {
                    0 => host::idle_class(&v.pids()),
                    1 => host::vp_class(
                        &v.pids(),
                        &host::Treatment {
                            nice: 19,
                            idle: false,
                            huge_pages: false,
                        },
                    ),
                    _ => host::vp_class(&v.pids(), &self.treatment()),
                }
            }
            v.signal(Signal::SIGCONT);
            v.nudge();
        }
    }

    /// A VP asked to move that has not reached a safe point in time is
    /// saved from outside instead, as a program that does not move itself
    /// is: the request is withdrawn inside it (`VpMsg::StayPut`, queued
    /// behind the request, so both travel in its image and it reads them
    /// together at its next safe point, wherever that is). Where it cannot
    /// be saved from outside it stays where it is: it is told so, its
    /// messages flow again, and the master hears why (`mig ps` shows it
    /// here again). One writing its image (sent on as it goes) is past its
    /// safe point.
    pub(super) fn call_off_slow_moves(&mut self) {
        let limit = self.safe_point_limit();
        for (tid, dest, start) in self.moves.call_off_overdue(Instant::now(), limit) {
            if self.movable_from_outside(tid) {
                if let Some(&t) = self.local.vp_conns.get(&tid) {
                    self.send_vp(t, &VpMsg::StayPut);
                }
                log!(
                    "VP t{tid:x}: no safe point within {} ms: it is saved from outside instead",
                    limit.as_millis()
                );
                let to = match dest {
                    Dest::Host(to) => to,
                    Dest::Disk => self.facts.name.clone(),
                };
                self.move_from_outside(to, start);
                continue;
            }
            let reason = if self.owner.offered() {
                format!(
                    "no safe point within {} ms: it stays on {} and runs on",
                    limit.as_millis(),
                    self.facts.name
                )
            } else {
                format!(
                    "no safe point within {} ms: it stays stopped on {}, whose owner is back",
                    limit.as_millis(),
                    self.facts.name
                )
            };
            log!("VP t{tid:x}: {reason}");
            self.stay_put(tid, reason);
        }
    }

    /// How long a VP asked to move may take to reach its safe point: while
    /// the owner is back, `safe_point_timeout` (short: they lose at most
    /// that, once per try, and only CPU they leave idle); on a host still
    /// offered, where the VP runs anyway, `move_timeout`.
    pub(super) fn safe_point_limit(&self) -> Duration {
        if self.owner.offered() {
            self.cfg.move_timeout
        } else {
            self.cfg.safe_point_timeout
        }
    }

    /// VP `tid` wrote its image (with the messages it had taken in but not
    /// yet read): check it, then send it to the target host or park it.
    pub(super) fn image_written(&mut self, tid: Tid, path: &str) {
        let expected = self.state.move_image(tid);
        let (to, start, streamed) = match self.moves.written(tid) {
            Written::Send {
                to,
                start,
                streamed,
            } => (Some(to), start, streamed),
            Written::Park { start } => (None, start, None),
            Written::Unasked => return self.image_written_late(tid, &expected),
        };
        // Mapped, not read, and sent from the page cache. Its writer summed
        // it as it wrote it, and the target sums it again as it arrives (a
        // VP parked here sums it when it restores): here only its shape is
        // checked, without a pass over the body.
        let read = if std::path::Path::new(path) == expected {
            map_image(&expected)
        } else {
            Err(format!("it wrote {path}, not {}", expected.display()))
        };
        // (The preamble is copied, not read from the mapping: a VP that
        // cut its file short meanwhile must not crash this daemon.)
        let checked = read.and_then(|b| {
            let start = b
                .copy_checked(0..libmig::checkpoint::PREAMBLE.min(b.len()))
                .map_err(|e| e.to_string())?;
            if crate::transparent::is_image(&start) {
                // Saved from outside (its header, metadata and trailer
                // read; the target sums its pages as they arrive).
                return std::fs::File::open(&expected)
                    .map_err(|e| e.to_string())
                    .and_then(|f| mig_ckpt::ImageFile::open(f, false).map_err(|e| e.to_string()))
                    .map(|_| b);
            }
            libmig::checkpoint::Image::check_shape_of(&start, b.len() as u64)
                .map(|()| b)
                .map_err(|e| e.to_string())
        });
        match (checked, to) {
            (Ok(image), None) => {
                let parked = self.state.parked(tid);
                match std::fs::rename(&expected, &parked) {
                    Ok(()) => {
                        log!("VP t{tid:x} parked on disk ({} bytes)", image.len());
                        self.moved_out(tid);
                        self.moves.park(tid, start, parked);
                        self.report(ToMaster::Parked { tid });
                    }
                    Err(e) => warn!("VP t{tid:x}: keeping its image: {e}"),
                }
            }
            (Ok(image), Some(to)) => {
                debug!(
                    "VP t{tid:x} wrote its image ({} bytes) for {to}",
                    image.len()
                );
                self.moved_out(tid);
                let own = self
                    .local
                    .vps
                    .by_tid
                    .get(&tid)
                    .and_then(|v| v.start.as_ref())
                    .map(|s| s.program.clone());
                self.keep_sent(tid, &start, own.as_deref(), &expected);
                let _ = std::fs::remove_file(&expected);
                self.send_image(&to, start, image, streamed);
            }
            (Err(e), _) => {
                warn!("VP t{tid:x}: its image is unusable: {e}");
                crate::discard::remove_later(&expected);
                if self.moves.saving_outside(tid) {
                    // Saved from outside, it is still here, stopped: it
                    // runs on where it is.
                    self.cancel_outbound(tid);
                    self.moves.call_off(tid);
                    self.stay_put(tid, format!("its image is unusable: {e}"));
                    return self.run_if_it_may(tid);
                }
                self.report(ToMaster::MigrateFailed {
                    tid,
                    reason: format!("its image is unusable: {e}"),
                });
            }
        }
    }

    /// VP `tid`'s image went (or is parked): counted, with how long it
    /// took from the master's word.
    /// A VP saved from outside does not end by itself: its processes are
    /// killed (its end, like a VP's that wrote its own image, is no exit).
    fn moved_out(&mut self, tid: Tid) {
        let outside = self.moves.saving_outside(tid);
        if let Some(since) = self.moves.left(tid) {
            self.metrics.moved_out(since.elapsed());
        }
        if let Some(v) = self.local.vps.by_tid.get(&tid) {
            // One saved from outside (a program that moves itself too, when
            // it missed its safe point) does not end by itself.
            if !v.movable || outside {
                v.kill();
            }
        }
    }

    /// Keep the image at `path` of VP `tid`, on its way to another host,
    /// until it runs there: linked under its own name (the mapping being
    /// sent is unaffected when `path` is removed). Without it, a target
    /// that dies or cannot start it before the VP runs there would lose
    /// the VP. Recalled, it starts here again with `own`, the program it
    /// ran here (`start`'s is the target's, for its architecture).
    fn keep_sent(&mut self, tid: Tid, start: &StartVp, own: Option<&str>, path: &std::path::Path) {
        let kept = self.state.sent(tid);
        crate::discard::remove_later(&kept);
        let mut here = start.clone();
        if let Some(own) = own {
            here.program = own.to_string();
        }
        match std::fs::hard_link(path, &kept) {
            Ok(()) => {
                if let Some(old) = self.moves.keep_sent(tid, here, kept.clone()) {
                    if old.path != kept {
                        crate::discard::remove_later(&old.path);
                    }
                }
            }
            Err(e) => warn!("VP t{tid:x}: cannot keep its image until it runs there: {e}"),
        }
    }

    /// VP `tid` runs elsewhere now, or ended: the image kept since it was
    /// sent goes.
    pub(super) fn drop_sent(&mut self, tid: Tid) {
        if let Some(kept) = self.moves.arrived(tid) {
            crate::discard::remove_later(&kept.path);
        }
    }

    /// The master recalls VP `tid`: the other end of its move died. It runs
    /// on here from what this host still has of it, or the master hears
    /// that nothing is left.
    pub(super) fn recall(&mut self, tid: Tid) {
        match self.moves.recall(tid) {
            Recalled::StaysHere => {
                // (What went of an image being saved from outside is
                // dropped there, if the target is still up to hear it.)
                self.cancel_outbound(tid);
                log!("VP t{tid:x}: its move's target is gone; it stays here");
                self.stay_put(tid, "its move's target host is gone".into());
                // (One stopped to be saved from outside runs on if it may.)
                self.run_if_it_may(tid);
            }
            Recalled::Writing => {
                self.cancel_outbound(tid);
                log!("VP t{tid:x}: its move's target is gone; it starts again here from its image");
            }
            Recalled::Kept(kept) => {
                self.cancel_outbound(tid);
                // Renamed, not read: the VP checks it as it starts.
                let path = self.state.restore(tid);
                match std::fs::rename(&kept.path, &path) {
                    Ok(()) => {
                        log!(
                            "VP t{tid:x}: its move's target is gone; it starts again here from \
                             the image it sent"
                        );
                        if self.local.vps.by_tid.contains_key(&tid) {
                            // Its process is still ending: then.
                            self.moves.restart_here(tid, kept.start, path);
                        } else {
                            self.start_restored(kept.start, &path, false);
                        }
                    }
                    Err(e) => {
                        let reason = format!("its kept image {}: {e}", kept.path.display());
                        warn!("VP t{tid:x}: {reason}");
                        crate::discard::remove_later(&kept.path);
                        self.report(ToMaster::Missing { tid, reason });
                    }
                }
            }
            Recalled::Nothing => match self.local.vps.by_tid.get(&tid) {
                // It arrived here whole and runs: the master hears it again.
                Some(v) if self.moves.get(tid).is_none() && v.exit.is_none() => {
                    let pid = v.pid as u32;
                    self.report(ToMaster::Started { tid, pid });
                }
                _ => {
                    // Part of it arrived here, from a host now gone: it
                    // never will whole.
                    if let Some(inc) = self.moves.take_incoming(tid) {
                        inc.discard();
                    }
                    log!("VP t{tid:x}: recalled, but nothing of it is left here");
                    self.report(ToMaster::Missing {
                        tid,
                        reason: format!("nothing of it is left on {}", self.facts.name),
                    });
                }
            },
        }
    }

    /// VP `tid`'s move is called off before its safe point: it is told to
    /// stay, its messages flow again, and the master hears `reason`.
    fn stay_put(&mut self, tid: Tid, reason: String) {
        // Its image, which credited it for its large messages held here,
        // is no use: what of that credit their taking in absorbed meanwhile
        // is given to it now, and the rest as they are taken in.
        let mut absorbed = 0;
        if let Some(v) = self.local.vps.by_tid.get_mut(&tid) {
            if let Some(credit) = v.carried.take() {
                let left = self.flow.unprepay(tid, credit);
                v.uncredited += left;
                absorbed = credit - left;
            }
        }
        if let Some(&t) = self.local.vp_conns.get(&tid) {
            // (One saved from outside: what was held for it goes first.)
            self.release_output(t);
            if absorbed > 0 {
                self.send_vp(t, &VpMsg::Credit { bytes: absorbed });
            }
            self.send_vp(t, &VpMsg::StayPut);
            for (env, body) in self.router.attach(tid, t) {
                self.route(env, body, None);
            }
            self.released(tid);
        }
        if let Some(v) = self.local.vps.by_tid.get(&tid) {
            if !self.owner.offered() {
                v.signal(Signal::SIGSTOP);
            }
            host::vp_class(&v.pids(), &self.treatment());
        }
        self.report(ToMaster::MigrateFailed { tid, reason });
        // Saved from outside waiting for the master, it stays: what it
        // waits for (an answer sent back meanwhile is kept for it there).
        let calls: Vec<u64> = self
            .local
            .vps
            .by_tid
            .get(&tid)
            .map(|v| v.ledger.calls.iter().copied().collect())
            .unwrap_or_default();
        if !calls.is_empty() {
            self.report(ToMaster::Waits { tid, calls });
        }
    }

    /// VP `tid` wrote its image after its move was called off: it goes on
    /// here, from that image (renamed, not read: the VP checks it as it
    /// starts) once its process has ended.
    fn image_written_late(&mut self, tid: Tid, expected: &std::path::Path) {
        self.cancel_outbound(tid);
        let start = self
            .local
            .vps
            .by_tid
            .get(&tid)
            .and_then(|v| v.start.clone());
        let path = self.state.restore(tid);
        let renamed = std::fs::rename(expected, &path);
        match (start, renamed) {
            (Some(start), Ok(())) => {
                log!("VP t{tid:x} wrote its image after its move was called off: it restarts here");
                self.moves.restart_here(tid, start, path);
            }
            (_, r) => {
                if let Err(e) = r {
                    warn!("VP t{tid:x}: its late image: {e}");
                }
                crate::discard::remove_later(expected);
                crate::discard::remove_later(&path);
            }
        }
    }

    /// VP `tid`, asked for its image for a move, could not write it
    /// (`reason`; its partial file is gone): the move is called off and it
    /// runs on here; the target drops what it had of it, and the master
    /// hears why.
    pub(super) fn image_not_written(&mut self, tid: Tid, reason: &str, no_space: bool) {
        if no_space {
            self.no_space();
        }
        self.cancel_outbound(tid);
        if let Some(inc) = self.moves.take_incoming(tid) {
            inc.discard();
        }
        let (name, dir) = (
            self.facts.name.clone(),
            self.state.root().display().to_string(),
        );
        self.moves.call_off(tid);
        let why = if no_space {
            format!("it could not write its image on {name}: {reason} (the state directory {dir} is full)")
        } else {
            format!("it could not write its image on {name}: {reason}")
        };
        log!("VP t{tid:x}: {why}; it stays here");
        self.stay_put(tid, why);
    }

    /// VP `tid`, moving to another host, has written its image up to
    /// `upto`: the whole parts of it not sent yet go now, while it writes
    /// the rest (see `send_image` for the end). Only with a data link up;
    /// otherwise the image goes whole once written.
    pub(super) fn written(&mut self, tid: Tid, path: &str, upto: u64) {
        // Its own temporary file in the state directory, nothing else.
        let path = std::path::Path::new(path);
        if self.state.is_move_image_being_written(tid, path) {
            self.stream_written(tid, path, upto);
        }
    }

    /// The image of VP `tid`, moving to another host, is written up to
    /// `upto` in `path` (by the VP, or by the checkpointer saving it from
    /// outside): the whole parts of it not sent yet go now, on the data
    /// link, while the rest is written. Only with a data link up.
    pub(super) fn stream_written(&mut self, tid: Tid, path: &std::path::Path, upto: u64) {
        let Some((to, start)) = self
            .moves
            .target(tid)
            .map(|(to, start)| (to.to_string(), start.clone()))
        else {
            return;
        };
        let Some(d) = self.data_link(&to) else {
            return;
        };
        if self.moves.outgoing(tid).is_none_or(|o| o.path != path) {
            match std::fs::File::open(path) {
                Ok(file) => {
                    debug!("sending on the image of VP t{tid:x} while it is written");
                    self.moves
                        .stream(tid, Outgoing::new(file, path.to_path_buf(), d));
                }
                Err(_) => return,
            }
        }
        let Some(out) = self.moves.outgoing(tid).filter(|o| o.link == d) else {
            return;
        };
        let parts = match out.due_parts(upto) {
            Ok(parts) => parts,
            Err(e) => return log!("VP t{tid:x}: {e}"),
        };
        // They go as the link drains, with the rest once it is written.
        let now = Instant::now();
        let at = self
            .images
            .outbound
            .iter()
            .position(|o| o.restores(tid) && o.link == Some(d));
        let i = at.unwrap_or_else(|| {
            self.images
                .outbound
                .push(Outbound::streaming(to.clone(), tid, d, now));
            self.images.outbound.len() - 1
        });
        for (at, part) in parts {
            let first = (at == 0).then(|| start.clone());
            self.images.outbound[i].add_written(at, part, first);
        }
        self.pump_outbound();
    }

    /// One part of an image on data link `d`; false if the link failed.
    pub(super) fn send_image_part(&mut self, d: Token, msg: DataLink, part: Payload) -> bool {
        let head = match frame::encode_head(&PeerMsg::Data(msg), part.len()) {
            Ok(h) => h,
            Err(e) => {
                warn!("cannot encode an image part: {e}");
                return false;
            }
        };
        let failed = match self.net.conns.get_mut(&d) {
            Some(c) => c
                .send_parts(head, part, None, self.net.poll.registry(), d)
                .err(),
            None => return false,
        };
        if let Some(e) = failed {
            self.write_failed(d, &e);
            return false;
        }
        true
    }

    /// Send a VP's image to `to` over the data link, in parts (raw
    /// frame payloads, read on arrival straight into their buffers) that
    /// share the mapped image, as the link drains (`pump_outbound`). The
    /// parts already sent while the VP wrote it (`streamed`: on which link,
    /// how many bytes) are not sent again; then the preamble, written last,
    /// goes last.
    pub(super) fn send_image(
        &mut self,
        to: &str,
        start: StartVp,
        image: Payload,
        streamed: Option<(Token, u64)>,
    ) {
        let tid = start.tid;
        let going = streamed.and_then(|(link, _)| {
            self.images
                .outbound
                .iter()
                .position(|o| o.restores(tid) && o.link == Some(link))
        });
        match (going, streamed) {
            (Some(i), Some((_, sent))) => {
                self.images.outbound[i].add_rest(image, sent as usize, None)
            }
            _ => self.images.outbound.push(Outbound::whole(
                to.to_string(),
                tid,
                image,
                Some(start),
                Instant::now(),
            )),
        }
        self.pump_outbound();
    }
}
