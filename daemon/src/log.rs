//! The daemon log: one line per event on stderr, with a UTC timestamp and
//! milliseconds. `mig up` sends each daemon's stderr to `STATE_DIR/migd.log`.

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

/// Write one log line.
#[macro_export]
macro_rules! log {
    ($($arg:tt)*) => {
        eprintln!("{} migd[{}] {}", $crate::log::stamp(), std::process::id(), format_args!($($arg)*))
    };
}
