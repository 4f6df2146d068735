//! The target end of a move: an image arriving in parts, checked on the way
//! into its restore file, and the VP started from it.

use super::*;
use crate::migrate::Incoming;

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
            return warn!("refusing an image of more than {limit} bytes for t{tid:x}");
        }
        if let Some(start) = start {
            match Incoming::create(from, start, self.state.restore_part(tid)) {
                Ok(inc) => self.moves.arriving(tid, inc),
                Err(e) => return warn!("cannot take in VP t{tid:x}: {e}"),
            }
        }
        let Some(inc) = self.moves.incoming(tid) else {
            return warn!("an image part for t{tid:x} without its start");
        };
        if let Err(why) = inc.take(at, total, part) {
            if let Some(inc) = self.moves.take_incoming(tid) {
                inc.discard();
            }
            return warn!("cannot take in VP t{tid:x}: {why}");
        }
        if !last {
            return;
        }
        // Whole and checked, it becomes the VP's restore file and the VP
        // starts from it.
        if let Some(inc) = self.moves.take_incoming(tid) {
            match inc.finish(total, &self.state.restore(tid)) {
                Ok(start) => {
                    let path = self.state.restore(tid);
                    self.start_restored(start, &path, true)
                }
                Err(why) => self.restore_failed(tid, &why),
            }
        }
    }

    /// Start a VP from a checkpoint image sent by its previous host.
    pub(super) fn restore(&mut self, start: StartVp, image: &[u8]) {
        let tid = start.tid;
        let path = self.state.restore(tid);
        // Checked, then written as received: the VP decodes it itself.
        let written = libmig::checkpoint::Image::check(image)
            .and_then(|()| libmig::checkpoint::write_bytes(&path, image, false))
            .map_err(|e| e.to_string());
        match written {
            Ok(()) => self.start_restored(start, &path, true),
            Err(e) => self.restore_failed(tid, &e),
        }
    }

    pub(super) fn restore_failed(&mut self, tid: Tid, e: &str) {
        warn!("cannot restore VP t{tid:x}: {e}");
        let status = ExitInfo {
            code: None,
            signal: None,
            error: Some(format!("restoring it failed: {e}")),
            cpu_ms: None,
        };
        self.report(PeerMsg::Exited { tid, status });
    }

    /// Start VP `start` from the image at `path`, whose checksum was
    /// checked on its way here (`summed`; else the VP checks it).
    pub(super) fn start_restored(
        &mut self,
        mut start: StartVp,
        path: &std::path::Path,
        summed: bool,
    ) {
        let tid = start.tid;
        start
            .env
            .retain(|(k, _)| k != libmig::vp::env::RESTORE && k != libmig::vp::env::RESTORE_SUMMED);
        if summed {
            start
                .env
                .push((libmig::vp::env::RESTORE_SUMMED.to_string(), "1".into()));
        }
        start.env.push((
            libmig::vp::env::RESTORE.to_string(),
            path.display().to_string(),
        ));
        debug!("restoring VP t{tid:x} from its checkpoint");
        self.start_vp(start);
        // It wrote an image: it can be moved again, even before its new
        // process says so (it may be stopped at once, the owner being back).
        if let Some(v) = self.vps.by_tid.get_mut(&tid) {
            v.movable = true;
        }
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
