//! The target end of a move: an image arriving in parts, checked on the way
//! into its restore file, and the VP started from it.

use super::*;

impl Daemon {
    /// Part of a checkpoint image from the VP's previous host: written
    /// to a file as it arrives and checked on the way, never held whole.
    pub(super) fn image_part(
        &mut self,
        from: Token,
        ImagePart {
            tid,
            at,
            total,
            last,
        }: ImagePart,
        start: Option<StartVp>,
        part: &[u8],
    ) {
        let limit = libmig::checkpoint::MAX_IMAGE + libmig::checkpoint::PREAMBLE as u64;
        let end = at.saturating_add(part.len() as u64);
        if total > limit || end > limit {
            return log!("refusing an image of more than {limit} bytes for t{tid:x}");
        }
        if let Some(start) = start {
            let tmp = self.cfg.state_dir.join(format!("t{tid:x}.restore.part"));
            match std::fs::File::create(&tmp) {
                Ok(file) => {
                    self.incoming.insert(
                        tid,
                        Incoming {
                            from,
                            start,
                            file,
                            tmp,
                            check: libmig::checkpoint::Checker::default(),
                        },
                    );
                }
                Err(e) => return log!("cannot take in VP t{tid:x}: {}: {e}", tmp.display()),
            }
        }
        let Some(inc) = self.incoming.get_mut(&tid) else {
            return log!("an image part for t{tid:x} without its start");
        };
        let failed = if total > 0 && end > total {
            Some("image parts overflow its size".to_string())
        } else {
            use std::os::unix::fs::FileExt;
            match inc.check.update_at(at, part) {
                Ok(()) => inc.file.write_all_at(part, at).err().map(|e| e.to_string()),
                Err(e) => Some(e.to_string()),
            }
        };
        if let Some(why) = failed {
            if let Some(inc) = self.incoming.remove(&tid) {
                let _ = std::fs::remove_file(&inc.tmp);
            }
            return log!("cannot take in VP t{tid:x}: {why}");
        }
        if last {
            if let Some(inc) = self.incoming.remove(&tid) {
                if inc.check.seen() == total {
                    self.restore_received(inc);
                } else {
                    let _ = std::fs::remove_file(&inc.tmp);
                    let why = format!("{} bytes of an image of {total} arrived", inc.check.seen());
                    self.restore_failed(tid, &why);
                }
            }
        }
    }

    /// A whole image arrived in parts: checked, it becomes the VP's restore
    /// file and the VP starts from it.
    pub(super) fn restore_received(&mut self, inc: Incoming) {
        let tid = inc.start.tid;
        let path = self.cfg.state_dir.join(format!("t{tid:x}.restore"));
        drop(inc.file);
        let ready = inc
            .check
            .finish()
            .map_err(|e| e.to_string())
            .and_then(|()| std::fs::rename(&inc.tmp, &path).map_err(|e| e.to_string()));
        match ready {
            Ok(()) => self.start_restored(inc.start, &path),
            Err(e) => {
                let _ = std::fs::remove_file(&inc.tmp);
                self.restore_failed(tid, &e);
            }
        }
    }

    /// Start a VP from a checkpoint image sent by its previous host.
    pub(super) fn restore(&mut self, start: StartVp, image: &[u8]) {
        let tid = start.tid;
        let path = self.cfg.state_dir.join(format!("t{tid:x}.restore"));
        // Checked, then written as received: the VP decodes it itself.
        let written = libmig::checkpoint::Image::check(image)
            .and_then(|()| libmig::checkpoint::write_bytes(&path, image, false))
            .map_err(|e| e.to_string());
        match written {
            Ok(()) => self.start_restored(start, &path),
            Err(e) => self.restore_failed(tid, &e),
        }
    }

    pub(super) fn restore_failed(&mut self, tid: Tid, e: &str) {
        log!("cannot restore VP t{tid:x}: {e}");
        let status = ExitInfo {
            code: None,
            signal: None,
            error: Some(format!("restoring it failed: {e}")),
        };
        self.report(PeerMsg::Exited { tid, status });
    }

    /// Start VP `start` from the image at `path`.
    pub(super) fn start_restored(&mut self, mut start: StartVp, path: &std::path::Path) {
        let tid = start.tid;
        start
            .env
            .retain(|(k, _)| k != libmig::vp::env::RESTORE && k != libmig::vp::env::RESTORE_SUMMED);
        // Every caller checked the image's checksum on its way here.
        start
            .env
            .push((libmig::vp::env::RESTORE_SUMMED.to_string(), "1".into()));
        start.env.push((
            libmig::vp::env::RESTORE.to_string(),
            path.display().to_string(),
        ));
        log!("restoring VP t{tid:x} from its checkpoint");
        self.start_vp(start);
    }
}

/// Where a part of an image goes: whose, at which offset, of how many
/// bytes in all, and whether it is the last.
pub(super) struct ImagePart {
    pub(super) tid: Tid,
    pub(super) at: u64,
    pub(super) total: u64,
    pub(super) last: bool,
}

/// A checkpoint image arriving in parts (see `Daemon::image_part`).
pub(super) struct Incoming {
    /// The link it arrives on.
    pub(super) from: Token,
    pub(super) start: StartVp,
    pub(super) file: std::fs::File,
    pub(super) tmp: std::path::PathBuf,
    pub(super) check: libmig::checkpoint::Checker,
}
