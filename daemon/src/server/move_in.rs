//! The target end of a move: an image arriving in parts, checked on the way
//! into its restore file, and the VP started from it.

use libmig::msg::{StartVp, Tid, ToMaster};
use mio::Token;

use super::Daemon;
use crate::migrate::Incoming;
use crate::{debug, warn};

impl Daemon {
    /// Part of a VP's image from its previous host: written
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
            if let Some(inc) = self.moves.take_incoming(tid) {
                inc.discard();
            }
            return self.not_taken_in(
                tid,
                crate::migrate::Refused {
                    why: format!("an image of more than {limit} bytes"),
                    no_space: false,
                },
            );
        }
        if let Some(start) = start {
            match Incoming::create(from, start, self.state.restore_part(tid)) {
                Ok(inc) => self.moves.arriving(tid, inc),
                Err(why) => return self.not_taken_in(tid, why),
            }
        }
        let Some(inc) = self.moves.incoming(tid) else {
            // (The rest of one refused, or called off.)
            return debug!("an image part for t{tid:x} without its start");
        };
        if let Err(why) = inc.take(at, total, part) {
            if let Some(inc) = self.moves.take_incoming(tid) {
                inc.discard();
            }
            return self.not_taken_in(tid, why);
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
                    self.metrics.moved_in();
                    self.start_restored(start, &path, true)
                }
                Err(why) => self.not_taken_in(
                    tid,
                    crate::migrate::Refused {
                        why,
                        no_space: false,
                    },
                ),
            }
        }
    }

    /// VP `tid`'s image could not be taken in here (`why`; what arrived
    /// is gone): the master hears it, and sends the VP back to its source
    /// (or, restored from its job's checkpoint, says why the job ends).
    fn not_taken_in(&mut self, tid: Tid, why: crate::migrate::Refused) {
        if why.no_space {
            self.no_space();
        }
        let reason = if why.no_space {
            format!(
                "{why} (the state directory {} is full)",
                self.state.root().display()
            )
        } else {
            why.to_string()
        };
        warn!("cannot take in VP t{tid:x}: {reason}");
        self.report(ToMaster::Missing { tid, reason });
    }

    /// The image of VP `tid` arriving will not come whole (its source
    /// says): what arrived goes.
    pub(super) fn restore_off(&mut self, tid: Tid) {
        if let Some(inc) = self.moves.take_incoming(tid) {
            debug!("VP t{tid:x}: its image will not come whole; dropping what arrived");
            inc.discard();
        }
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
        debug!("restoring VP t{tid:x} from its image");
        // What this host still held of it (its process, ended by
        // `start_vp`; a parked image; one kept after it was sent; a start
        // waiting for the lease) is replaced by this start.
        self.drop_sent(tid);
        if let Some(p) = self.moves.unpark(tid) {
            crate::discard::remove_later(&p.path);
        }
        self.local.lease.undefer(tid);
        self.work_arrived();
        if crate::transparent::is_image_file(path) {
            // Saved from outside: rebuilt the same way.
            return self.restore_from_outside(start, path, summed);
        }
        self.start_vp(start);
        // It wrote an image: it can be moved again, even before its new
        // process says so (it may be stopped at once, the owner being back).
        if let Some(v) = self.local.vps.by_tid.get_mut(&tid) {
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
