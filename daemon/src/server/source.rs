//! The source end of a move: asking a VP for its image, calling off a move
//! whose VP reaches no safe point in time, and sending the image on (while
//! it is written, then the rest) to the target host.

use super::*;

impl Daemon {
    pub(super) fn checkpoint(&mut self, to: String, start: StartVp) {
        let tid = start.tid;
        if let Some((_, path)) = self.parked.remove(&tid) {
            // Parked on disk: its image goes as it is.
            let image = map_image(&path);
            let _ = std::fs::remove_file(&path);
            return match image {
                Ok(image) => {
                    log!("sending parked VP t{tid:x} to {to}");
                    self.send_image(&to, start, image)
                }
                Err(e) => self.report(PeerMsg::MigrateFailed {
                    tid,
                    reason: format!("its parked image {}: {e}", path.display()),
                }),
            };
        }
        let (Some(&t), Some(vp)) = (self.vp_conns.get(&tid), self.vps.by_tid.get_mut(&tid)) else {
            return self.report(PeerMsg::MigrateFailed {
                tid,
                reason: format!("it is not running on {}", self.facts.name),
            });
        };
        let pid = vp.pid;
        if to == self.facts.name {
            log!("asking VP t{tid:x} to checkpoint to disk (parking it while the owner has the host)");
        } else {
            log!("asking VP t{tid:x} to checkpoint for {to}");
        }
        vp.moving = Some((to, start, Instant::now()));
        self.router.detach(tid);
        let path = self.cfg.state_dir.join(format!("t{tid:x}.ckpt"));
        self.send_vp(
            t,
            &VpMsg::Checkpoint {
                path: path.display().to_string(),
            },
        );
        let p = nix::unistd::Pid::from_raw(pid);
        let _ = nix::sys::signal::kill(p, nix::sys::signal::Signal::SIGCONT);
        let _ = nix::sys::signal::kill(p, nix::sys::signal::Signal::SIGUSR2);
    }

    /// A VP asked to move that has not reached a safe point in time stays
    /// where it is and runs on: it is told so, its messages flow again, and
    /// the master hears why (`mig ps` shows it running here again).
    pub(super) fn call_off_slow_moves(&mut self) {
        let limit = self.cfg.safe_point_timeout;
        let late: Vec<Tid> = self
            .vps
            .by_tid
            .iter()
            // One writing its image (sent on as it goes) is past its safe point.
            .filter(|(t, v)| {
                !v.moved
                    && !self.outgoing.contains_key(t)
                    && v.moving.as_ref().is_some_and(|m| m.2.elapsed() > limit)
            })
            .map(|(&t, _)| t)
            .collect();
        for tid in late {
            if let Some(v) = self.vps.by_tid.get_mut(&tid) {
                v.moving = None;
            }
            if let Some(&t) = self.vp_conns.get(&tid) {
                self.send_vp(t, &VpMsg::StayPut);
                for (env, body) in self.router.attach(tid, t) {
                    self.route(env, body, None);
                }
                self.released(tid);
            }
            let reason = if self.owner.offered() {
                format!(
                    "no safe point within {} ms: it stays on {} and runs on",
                    limit.as_millis(),
                    self.facts.name
                )
            } else {
                if let Some(v) = self.vps.by_tid.get(&tid) {
                    host::signal(v.pid, Signal::SIGSTOP);
                }
                format!(
                    "no safe point within {} ms: it stays stopped on {}, whose owner is back",
                    limit.as_millis(),
                    self.facts.name
                )
            };
            log!("VP t{tid:x}: {reason}");
            self.report(PeerMsg::MigrateFailed { tid, reason });
        }
    }

    /// VP `tid` wrote its image (with the messages it had taken in but not
    /// yet read): check it and send it on to the target host through the
    /// master.
    pub(super) fn checkpointed(&mut self, tid: Tid, path: &str) {
        let expected = self.cfg.state_dir.join(format!("t{tid:x}.ckpt"));
        let Some((to, start, _)) = self.vps.by_tid.get(&tid).and_then(|v| v.moving.clone()) else {
            // Its move was called off while it was writing: it goes on here.
            let late = std::fs::read(&expected)
                .ok()
                .filter(|b| libmig::checkpoint::Image::check(b).is_ok());
            if let (Some(v), Some(image)) = (self.vps.by_tid.get_mut(&tid), late) {
                log!("VP t{tid:x} checkpointed after its move was called off: it restarts here");
                v.moved = true;
                v.restart_here = Some(image);
                let _ = std::fs::remove_file(&expected);
            }
            return;
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
            libmig::checkpoint::Image::check_shape_of(&start, b.len() as u64)
                .map(|()| b)
                .map_err(|e| e.to_string())
        });
        match checked {
            Ok(image) if to == self.facts.name => {
                let parked = self.cfg.state_dir.join(format!("t{tid:x}.parked"));
                match std::fs::rename(&expected, &parked) {
                    Ok(()) => {
                        log!("VP t{tid:x} parked on disk ({} bytes)", image.len());
                        if let Some(v) = self.vps.by_tid.get_mut(&tid) {
                            v.moved = true;
                        }
                        self.parked.insert(tid, (start, parked));
                        self.report(PeerMsg::Parked { tid });
                    }
                    Err(e) => log!("VP t{tid:x}: keeping its image: {e}"),
                }
            }
            Ok(image) => {
                log!("VP t{tid:x} checkpointed ({} bytes) for {to}", image.len());
                if let Some(v) = self.vps.by_tid.get_mut(&tid) {
                    v.moved = true;
                }
                let _ = std::fs::remove_file(&expected);
                self.send_image(&to, start, image);
            }
            Err(e) => {
                log!("VP t{tid:x}: its checkpoint is unusable: {e}");
                self.report(PeerMsg::MigrateFailed {
                    tid,
                    reason: format!("its checkpoint is unusable: {e}"),
                });
            }
        }
    }

    /// VP `tid`, moving to another host, has written its image up to
    /// `upto`: the whole parts of it not sent yet go now, while it writes
    /// the rest (see `send_image` for the end). Only with a data link up;
    /// otherwise the image goes whole once written.
    pub(super) fn written(&mut self, tid: Tid, path: &str, upto: u64) {
        let Some((to, start, _)) = self.vps.by_tid.get(&tid).and_then(|v| v.moving.clone()) else {
            return;
        };
        // Its own temporary file in the state directory, nothing else.
        let path = std::path::Path::new(path);
        let ours = path.parent() == Some(self.cfg.state_dir.as_path())
            && path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("t{tid:x}.tmp.")));
        if to == self.facts.name || !ours {
            return;
        }
        let Some(d) = self.link_to(&to).filter(|d| {
            self.conns
                .get(d)
                .is_some_and(|c| matches!(c.kind, Kind::Data { .. }))
        }) else {
            return;
        };
        if self.outgoing.get(&tid).is_none_or(|o| o.path != path) {
            match std::fs::File::open(path) {
                Ok(file) => {
                    log!("sending on the image of VP t{tid:x} while it writes it");
                    let out = Outgoing {
                        file,
                        path: path.to_path_buf(),
                        sent: 0,
                        link: d,
                    };
                    self.outgoing.insert(tid, out);
                }
                Err(_) => return,
            }
        }
        let Some(out) = self.outgoing.get_mut(&tid).filter(|o| o.link == d) else {
            return;
        };
        // Never past what the file holds (a mapping past its end would
        // fault when read): the VP's word is checked against the file.
        let size = out.file.metadata().map_or(0, |m| m.len());
        let end = upto.min(size) / IMAGE_PART as u64 * IMAGE_PART as u64;
        let mut parts = Vec::new();
        while out.sent < end {
            match Payload::map_file_at(&out.file, out.sent, IMAGE_PART) {
                Ok(p) => parts.push((out.sent, p)),
                Err(e) => {
                    log!("VP t{tid:x}: cannot map its image as it is written: {e}");
                    break;
                }
            }
            out.sent += IMAGE_PART as u64;
        }
        for (at, part) in parts {
            let msg = PeerMsg::RestorePart {
                tid,
                at,
                total: 0,
                last: false,
                start: (at == 0).then(|| start.clone()),
            };
            if !self.send_image_part(d, &msg, part) {
                self.outgoing.remove(&tid);
                return;
            }
        }
    }

    /// One part of an image on data link `d`; false if the link failed.
    pub(super) fn send_image_part(&mut self, d: Token, msg: &PeerMsg, part: Payload) -> bool {
        let head = match frame::encode_head(msg, part.len()) {
            Ok(h) => h,
            Err(e) => {
                log!("cannot encode an image part: {e}");
                return false;
            }
        };
        let failed = match self.conns.get_mut(&d) {
            Some(c) => c
                .send_parts(head, part, None, self.poll.registry(), d)
                .err(),
            None => return false,
        };
        if let Some(e) = failed {
            self.write_failed(d, &e);
            return false;
        }
        true
    }

    /// Send a checkpoint image to `to` through the master (no data link).
    /// Copied through the kernel: a VP that cut its image file short makes
    /// the move fail, not this daemon crash.
    pub(super) fn relay_image(&mut self, to: &str, start: StartVp, image: Payload) {
        match image.copy_checked(0..image.len()) {
            Ok(image) => self.report(PeerMsg::Restore {
                to: to.to_string(),
                start,
                image,
            }),
            Err(e) => self.report(PeerMsg::MigrateFailed {
                tid: start.tid,
                reason: format!("reading its image: {e}"),
            }),
        }
    }

    /// Send a checkpoint image to `to` over the data link, in parts (raw
    /// frame payloads, read on arrival straight into their buffers) that
    /// share the mapped image; through the master if there is no link.
    /// The parts already sent while the VP wrote it are not sent again;
    /// then the preamble, written last, goes last.
    pub(super) fn send_image(&mut self, to: &str, start: StartVp, image: Payload) {
        let streamed = self.outgoing.remove(&start.tid);
        let Some(d) = self.link_to(to) else {
            return self.relay_image(to, start, image);
        };
        if !self
            .conns
            .get(&d)
            .is_some_and(|c| matches!(c.kind, Kind::Data { .. }))
        {
            return self
                .dialling
                .entry(d)
                .or_default()
                .push(Pending::Image(start, image));
        }
        let (tid, len) = (start.tid, image.len());
        let from = streamed
            .filter(|s| s.link == d)
            .map_or(0, |s| s.sent as usize)
            .min(len);
        let mut ranges: Vec<std::ops::Range<usize>> = (from..len)
            .step_by(IMAGE_PART)
            .map(|at| at..(at + IMAGE_PART).min(len))
            .collect();
        if from > 0 {
            ranges.push(0..libmig::checkpoint::PREAMBLE);
        }
        let n = ranges.len();
        let mut start = (from == 0).then_some(start);
        // Pieces of the image itself, not copies of them.
        for (i, (part, r)) in image.pieces(&ranges).into_iter().zip(ranges).enumerate() {
            let msg = PeerMsg::RestorePart {
                tid,
                at: r.start as u64,
                total: len as u64,
                last: i + 1 == n,
                start: start.take(),
            };
            if !self.send_image_part(d, &msg, part) {
                return log!("lost the link to {to} while sending VP t{tid:x}");
            }
        }
    }
}

/// An image sent on while its VP writes it (see `Daemon::written`).
pub(super) struct Outgoing {
    /// The file being written, and its name (a VP's process writes its own).
    pub(super) file: std::fs::File,
    pub(super) path: PathBuf,
    /// Bytes of it sent so far (whole parts).
    pub(super) sent: u64,
    /// The data link they went on.
    pub(super) link: Token,
}

/// The size of the parts images travel in between hosts.
pub(super) const IMAGE_PART: usize = 4 << 20;

/// A checkpoint image file, mapped read-only (no copy) after checking its
/// size against the largest image there can be.
pub(super) fn map_image(path: &std::path::Path) -> Result<Payload, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let len = f
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?
        .len();
    let limit = libmig::checkpoint::MAX_IMAGE + libmig::checkpoint::PREAMBLE as u64;
    if len > limit {
        return Err(format!(
            "{}: {len} bytes, larger than any image",
            path.display()
        ));
    }
    Payload::map_file(&f, len as usize, false).map_err(|e| format!("{}: {e}", path.display()))
}
