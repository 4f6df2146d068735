//! The daemon log: one line per event on stderr, `DATE TIME LEVEL
//! migd[PID] message`, UTC with milliseconds. Lines have levels (`error`,
//! `warn`, `info`, `debug`) and a filter says which are written:
//! `MIG_LOG` (else `RUST_LOG`, else the config's `log`), as `info` or
//! `warn,net=debug` (a level for the modules under a path). `mig up` sends
//! each daemon's stderr to `STATE_DIR/migd.log`; a log there that grows
//! past its bound (`log_max_mb`) is rotated (`migd.log.1`, the one before
//! dropped), so the disk holds at most twice that.

use std::sync::OnceLock;

/// How much a line matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Something failed that should not have.
    Error,
    /// Something refused or odd, handled.
    Warn,
    /// What happened (the default).
    Info,
    /// Detail for finding a fault.
    Debug,
}

impl Level {
    fn parse(s: &str) -> Option<Level> {
        Some(match s.trim().to_ascii_lowercase().as_str() {
            "error" => Level::Error,
            "warn" | "warning" => Level::Warn,
            "info" => Level::Info,
            "debug" | "trace" => Level::Debug,
            _ => return None,
        })
    }

    /// As written in a line.
    pub fn label(self) -> &'static str {
        match self {
            Level::Error => "ERROR",
            Level::Warn => "WARN",
            Level::Info => "INFO",
            Level::Debug => "DEBUG",
        }
    }
}

/// Which lines are written: a default level and levels for modules.
#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    default: Level,
    /// (module path under the crate, as `server::net`, level); the longest
    /// matching path decides.
    modules: Vec<(String, Level)>,
}

impl Default for Filter {
    fn default() -> Self {
        Filter {
            default: Level::Info,
            modules: Vec::new(),
        }
    }
}

impl Filter {
    /// Parse `info`, `warn,server::net=debug`, `migd::owner=debug`.
    pub fn parse(spec: &str) -> Result<Filter, String> {
        let mut f = Filter::default();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = || {
                format!(
                    "bad log filter {part:?}: expected a level (error, warn, info, debug) or \
                     MODULE=LEVEL"
                )
            };
            match part.split_once('=') {
                Some((m, l)) => {
                    let level = Level::parse(l).ok_or_else(bad)?;
                    let m = m.trim();
                    let m = m.strip_prefix("migd::").unwrap_or(m);
                    if m.is_empty() || m == "migd" {
                        f.default = level;
                    } else {
                        f.modules.push((m.to_string(), level));
                    }
                }
                None => f.default = Level::parse(part).ok_or_else(bad)?,
            }
        }
        f.modules.sort_by_key(|(m, _)| std::cmp::Reverse(m.len()));
        Ok(f)
    }

    /// Is a line of `level` from `module` (as `module_path!()`) written?
    pub fn enabled(&self, level: Level, module: &str) -> bool {
        let m = module.strip_prefix("migd::").unwrap_or(module);
        let most = self
            .modules
            .iter()
            .find(|(p, _)| m == p || m.starts_with(&format!("{p}::")))
            .map_or(self.default, |(_, l)| *l);
        level <= most
    }
}

static FILTER: OnceLock<Filter> = OnceLock::new();

/// Set the filter once, at start: `MIG_LOG`, else `RUST_LOG`, else
/// `configured`, else `info`. `Err` names a bad filter.
pub fn init(configured: Option<&str>) -> Result<(), String> {
    let env = ["MIG_LOG", "RUST_LOG"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.trim().is_empty()));
    let f = match env.as_deref().or(configured) {
        Some(spec) => Filter::parse(spec)?,
        None => Filter::default(),
    };
    let _ = FILTER.set(f);
    Ok(())
}

/// Is a line of `level` from `module` written?
pub fn enabled(level: Level, module: &str) -> bool {
    match FILTER.get() {
        Some(f) => f.enabled(level, module),
        None => level <= Level::Info,
    }
}

/// Now, as `YYYY-MM-DD HH:MM:SS.mmm` UTC.
pub fn stamp() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let s = d.as_secs();
    let (y, m, day) = civil_date(s / 86_400);
    format!(
        "{y:04}-{m:02}-{day:02} {:02}:{:02}:{:02}.{:03}",
        s / 3600 % 24,
        s / 60 % 60,
        s % 60,
        d.subsec_millis()
    )
}

/// The calendar date of a day counted from 1970-01-01 (proleptic
/// Gregorian; Hinnant's days-to-civil).
fn civil_date(days: u64) -> (i64, u32, u32) {
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
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

/// Size at which `STATE_DIR/migd.log` is rotated by default (MiB).
pub const DEFAULT_MAX_MB: u64 = 16;

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

/// Write one log line at `level` for module `module` (a path such as
/// `module_path!()`), if the filter lets it through.
#[macro_export]
macro_rules! log_at {
    ($level:expr, $module:expr, $($arg:tt)*) => {
        if $crate::log::enabled($level, $module) {
            eprintln!(
                "{} {:<5} migd[{}] {}",
                $crate::log::stamp(),
                $level.label(),
                std::process::id(),
                format_args!($($arg)*)
            )
        }
    };
}

/// Write one line of what happened (`info`).
#[macro_export]
macro_rules! log {
    ($($arg:tt)*) => { $crate::log_at!($crate::log::Level::Info, module_path!(), $($arg)*) };
}

/// Write one line about something refused or odd (`warn`).
#[macro_export]
macro_rules! warn {
    ($($arg:tt)*) => { $crate::log_at!($crate::log::Level::Warn, module_path!(), $($arg)*) };
}

/// Write one line of detail (`debug`).
#[macro_export]
macro_rules! debug {
    ($($arg:tt)*) => { $crate::log_at!($crate::log::Level::Debug, module_path!(), $($arg)*) };
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

    #[test]
    fn filters_choose_lines_by_level_and_module() {
        let f = Filter::parse("warn,server::net=debug").unwrap();
        assert!(f.enabled(Level::Error, "migd::server"));
        assert!(!f.enabled(Level::Info, "migd::server"));
        assert!(f.enabled(Level::Debug, "migd::server::net"));
        assert!(!f.enabled(Level::Debug, "migd::server::network"));
        assert!(f.enabled(Level::Info, "migd::server::net::x"));
        let f = Filter::parse("migd=debug").unwrap();
        assert!(f.enabled(Level::Debug, "migd::owner"));
        assert_eq!(Filter::parse("").unwrap(), Filter::default());
        for bad in ["loud", "net=", "=x", "a=b=c"] {
            let e = Filter::parse(bad).unwrap_err();
            assert!(e.contains("bad log filter"), "{e}");
        }
    }

    #[test]
    fn dates_are_the_calendars() {
        assert_eq!(civil_date(0), (1970, 1, 1));
        assert_eq!(civil_date(59), (1970, 3, 1));
        assert_eq!(civil_date(11_016), (2000, 2, 29));
        assert_eq!(civil_date(20_781), (2026, 11, 24));
        assert_eq!(civil_date(20_818), (2026, 12, 31));
    }
}
