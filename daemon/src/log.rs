//! The daemon log: one line per event on stderr, with a UTC timestamp and
//! milliseconds. `mig up` sends each daemon's stderr to `STATE_DIR/migd.log`;
//! a log there that grows past `ROTATE_AT` is rotated (`migd.log.1`, the
//! one before dropped), so the disk holds at most twice that.

/// Seconds and milliseconds since the epoch, as `HH:MM:SS.mmm` UTC.
pub fn stamp() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let s = d.as_secs();
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        s / 3600 % 24,
        s / 60 % 60,
        s % 60,
        d.subsec_millis()
    )
}

/// A budget for lines anyone can cause (connections from strangers): at
/// most `LINES` a minute; the rest are counted and the count said once the
/// minute is over, so a flood of connections cannot fill the disk.
#[derive(Debug, Default)]
pub struct Budget {
    window: Option<std::time::Instant>,
    used: u32,
    dropped: u64,
}

impl Budget {
    /// Lines allowed per minute.
    pub const LINES: u32 = 20;

    /// May one more line be written now? (When a new minute begins, the
    /// count of the last one's lines not written is logged first.)
    pub fn allow(&mut self, now: std::time::Instant) -> bool {
        let fresh = self
            .window
            .is_none_or(|w| now.duration_since(w) >= std::time::Duration::from_secs(60));
        if fresh {
            if self.dropped > 0 {
                crate::log!(
                    "{} more lines about connections from unknown peers were not logged in the \
                     last minute",
                    self.dropped
                );
            }
            self.window = Some(now);
            self.used = 0;
            self.dropped = 0;
        }
        if self.used < Self::LINES {
            self.used += 1;
            true
        } else {
            self.dropped += 1;
            false
        }
    }
}

/// Size at which `STATE_DIR/migd.log` is rotated.
pub const ROTATE_AT: u64 = 16 << 20;

/// If stderr is `log` (the same file) and it has grown past `limit`, move
/// it to `log.1` and carry on in a fresh `log`. Returns whether it did.
pub fn rotate_if_large(log: &std::path::Path, limit: u64) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let stderr = std::io::stderr();
    let fd = stderr.as_raw_fd();
    let Ok(ours) = nix::sys::stat::fstat(fd) else {
        return Ok(false);
    };
    let Ok(file) = std::fs::metadata(log) else {
        return Ok(false);
    };
    if file.ino() != ours.st_ino || file.dev() != ours.st_dev || file.len() < limit {
        return Ok(false);
    }
    let old = log.with_extension("log.1");
    std::fs::rename(log, &old)?;
    let fresh = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(log)?;
    // SAFETY: dup2 onto our own stderr descriptor; `fresh` stays valid
    // for the call and is closed after (stderr keeps its copy).
    if unsafe { libc::dup2(fresh.as_raw_fd(), fd) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(true)
}

/// Write one log line.
#[macro_export]
macro_rules! log {
    ($($arg:tt)*) => {
        eprintln!("{} migd[{}] {}", $crate::log::stamp(), std::process::id(), format_args!($($arg)*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_is_logged_a_few_lines_a_minute() {
        let mut b = Budget::default();
        let t0 = std::time::Instant::now();
        let said = (0..1000).filter(|_| b.allow(t0)).count();
        assert_eq!(said, Budget::LINES as usize);
        assert_eq!(b.dropped, 1000 - u64::from(Budget::LINES));
        // The next minute starts afresh (after saying what it dropped).
        assert!(b.allow(t0 + std::time::Duration::from_secs(61)));
        assert_eq!(b.dropped, 0);
    }
}
