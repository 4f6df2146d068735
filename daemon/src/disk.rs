//! How full the state directory is, as `mig hosts` shows it: the space
//! free there (`statvfs`), and whether it is *full*: an image could not be
//! written there for lack of space (ENOSPC, EDQUOT) and no room was made
//! since. Room is made when an image is written there again, or when the
//! space free grows past what was free once the failed write's partial
//! file was gone (a second after the failure) by `ROOM`.
//!
//! What does not live here: writing images, or deciding where they go.

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Space free must grow by this much after a failure to count as room.
const ROOM: u64 = 16 << 20;

/// How long after a failure the space free is taken as the baseline (its
/// partial file is removed by then).
const SETTLE: Duration = Duration::from_secs(1);

/// The state directory's fullness.
#[derive(Debug)]
pub struct DiskWatch {
    dir: PathBuf,
    full: Option<Full>,
}

/// An image write failed for lack of space: when, and the space free once
/// its partial file was gone.
#[derive(Debug, Clone, Copy)]
struct Full {
    since: Instant,
    free_after: Option<u64>,
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
            free_after: None,
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
        if f.free_after.is_none() && now.saturating_duration_since(f.since) >= SETTLE {
            f.free_after = free;
        }
        if let (Some(after), Some(free)) = (f.free_after, free) {
            if free > after.saturating_add(ROOM) {
                self.full = None;
                return false;
            }
        }
        true
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
        // Its partial file going frees space: not room yet.
        assert!(d.full_with(Some(0), t0));
        assert!(d.full_with(Some(6 << 20), t0 + SETTLE));
        assert!(d.full_with(Some(20 << 20), t0 + 2 * SETTLE));
        // Room made: 16 MiB more than once the partial file was gone.
        assert!(!d.full_with(Some(23 << 20), t0 + 3 * SETTLE));
        assert!(!d.full_with(Some(0), t0 + 4 * SETTLE));
        // Or an image written there.
        d.no_space(t0);
        assert!(d.full_with(None, t0 + 10 * SETTLE));
        d.wrote();
        assert!(!d.full_with(None, t0 + 10 * SETTLE));
        // The real thing answers for a directory that exists.
        let dir = tempfile::tempdir().unwrap();
        assert!(DiskWatch::new(dir.path().into()).free_bytes().is_some());
    }
}
