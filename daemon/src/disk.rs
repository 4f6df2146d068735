//! How full the state directory is, as `mig hosts` shows it: the space
//! free there (`statvfs`), and whether it is *full*: an image could not be
//! written there for lack of space (ENOSPC, EDQUOT), and since then none was
//! written there, and either it happened less than `HOLD` ago or the space
//! free has not grown by `ROOM` over the least seen since.
//!
//! What does not live here: writing images, or deciding where they go.

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Space free must grow by this much over the least seen since a failure
/// to count as room made.
const ROOM: u64 = 16 << 20;

/// A failure counts this long whatever the space free does (its partial
/// file going, or other files of the failed operation, is no room made).
const HOLD: Duration = Duration::from_secs(10);

/// The state directory's fullness.
#[derive(Debug)]
pub struct DiskWatch {
    dir: PathBuf,
    full: Option<Full>,
}

/// An image write failed for lack of space: when, and the least space free
/// seen since.
#[derive(Debug, Clone, Copy)]
struct Full {
    since: Instant,
    least: Option<u64>,
}

impl DiskWatch {
    /// Watching `dir`.
    pub fn new(dir: PathBuf) -> DiskWatch {
        DiskWatch { dir, full: None }
    }

    /// An image write failed there for lack of space, at `now`.
    pub fn no_space(&mut self, now: Instant) {
        self.full = Some(Full {
            since: now,
            least: None,
        });
    }

    /// An image was written there: there is room.
    pub fn wrote(&mut self) {
        self.full = None;
    }

    /// Bytes free there now, if the file system says.
    pub fn free_bytes(&self) -> Option<u64> {
        let s = nix::sys::statvfs::statvfs(&self.dir).ok()?;
        Some(s.blocks_available() as u64 * s.fragment_size() as u64)
    }

    /// (MiB free, full) at `now`, reading the space free.
    pub fn report(&mut self, now: Instant) -> (Option<u64>, bool) {
        let free = self.free_bytes();
        (free.map(|b| b >> 20), self.full_with(free, now))
    }

    /// Is it full at `now`, with `free` bytes free?
    fn full_with(&mut self, free: Option<u64>, now: Instant) -> bool {
        let Some(f) = &mut self.full else {
            return false;
        };
        if let Some(free) = free {
            f.least = Some(f.least.map_or(free, |l| l.min(free)));
        }
        let held = now.saturating_duration_since(f.since) < HOLD;
        let room =
            matches!((f.least, free), (Some(l), Some(free)) if free > l.saturating_add(ROOM));
        if held || !room {
            return true;
        }
        self.full = None;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_after_a_failure_until_an_image_is_written_or_room_is_made() {
        let t0 = Instant::now();
        let mut d = DiskWatch::new(PathBuf::from("/"));
        assert!(!d.full_with(Some(5 << 20), t0));
        d.no_space(t0);
        assert!(d.full_with(Some(0), t0));
        // Its partial file going, and the rest of the operation's files,
        // are no room made as long as the failure is fresh.
        assert!(d.full_with(Some(30 << 20), t0 + HOLD / 2));
        // Later, room made: 16 MiB more than the least seen.
        assert!(d.full_with(Some(12 << 20), t0 + HOLD));
        assert!(!d.full_with(Some(17 << 20), t0 + HOLD));
        assert!(
            !d.full_with(Some(0), t0 + 2 * HOLD),
            "until the next failure"
        );
        // Without room made it stays full.
        d.no_space(t0);
        assert!(d.full_with(Some(1 << 20), t0 + 3 * HOLD));
        assert!(d.full_with(None, t0 + 3 * HOLD));
        // An image written there: there is room.
        d.wrote();
        assert!(!d.full_with(None, t0 + 3 * HOLD));
        // The real thing answers for a directory that exists.
        let dir = tempfile::tempdir().unwrap();
        assert!(DiskWatch::new(dir.path().into()).free_bytes().is_some());
    }
}
