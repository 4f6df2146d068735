//! The owner's activity as input: terminals, input devices, keyboard and mouse interrupts.
//!
//! What lives here: one type per source, each polled and each saying what it
//! sees. What does not: CPU load (`load`) or what input means (`policy`).
//!
//! * Terminals: the access time of each terminal of a logged-in user (from
//!   utmp) or of the terminals the config names. The kernel updates a
//!   terminal's access time on input at most once every 8 seconds, so this
//!   source can be up to 8 s late; input devices and interrupts are not.
//! * Input devices: /dev/input/event* read without blocking; any key,
//!   relative or absolute event is input (reading does not take events from
//!   the desktop: each reader gets its own copy).
//! * Interrupts: the i8042 (PS/2 keyboard and mouse) lines of
//!   /proc/interrupts. USB devices share their controller's interrupt with
//!   disks and more, so they are left to the input devices source.
//! * Desktop sessions: logind's idle hint of each graphical session (the
//!   session files under /run/systemd/sessions say which are graphical;
//!   `loginctl show-session` gives the hint, run every 5 s without waiting
//!   for it). A desktop sets the hint after minutes of idleness, so this
//!   source keeps a host from being offered rather than reclaiming it fast.

use std::fs::{self, File};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

/// What one source says for `mig owner status`.
#[derive(Debug, Clone)]
pub struct Status {
    /// Its name.
    pub name: &'static str,
    /// Is it watching anything?
    pub active: bool,
    /// What it sees.
    pub sees: String,
    /// When it last saw input.
    pub last_input: Option<Instant>,
}

/// Which terminals to watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Terminals {
    /// Those of logged-in users (utmp).
    LoggedIn,
    /// These.
    List(Vec<PathBuf>),
}

/// Terminal access times.
#[derive(Debug)]
pub struct TerminalSource {
    which: Terminals,
    utmp: PathBuf,
    watched: Vec<(PathBuf, Option<SystemTime>)>,
    refreshed: Option<Instant>,
    last_input: Option<Instant>,
}

/// utmp record layout (glibc, 64-bit Linux): type at 0, line at 8..40.
const UTMP_RECORD: usize = 384;
const USER_PROCESS: i16 = 7;

/// The terminals of logged-in users in a utmp file.
pub fn utmp_terminals(bytes: &[u8]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for r in bytes.chunks_exact(UTMP_RECORD) {
        let kind = i16::from_ne_bytes([r[0], r[1]]);
        if kind != USER_PROCESS {
            continue;
        }
        let line = &r[8..40];
        let end = line.iter().position(|&b| b == 0).unwrap_or(line.len());
        let Ok(line) = std::str::from_utf8(&line[..end]) else {
            continue;
        };
        if line.is_empty() || line.contains("..") || line.starts_with('/') || line.contains(':') {
            continue;
        }
        let p = PathBuf::from("/dev").join(line);
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

fn atime(p: &PathBuf) -> Option<SystemTime> {
    fs::metadata(p).ok()?.accessed().ok()
}

/// The instant, on the monotonic clock, of a wall-clock time in the past.
fn instant_of(t: SystemTime, now: Instant) -> Instant {
    let ago = SystemTime::now()
        .duration_since(t)
        .unwrap_or(Duration::ZERO);
    now.checked_sub(ago).unwrap_or(now)
}

impl TerminalSource {
    /// Watch `which`, logged-in users read from `utmp`.
    pub fn new(which: Terminals, utmp: PathBuf, now: Instant) -> TerminalSource {
        let mut s = TerminalSource {
            which,
            utmp,
            watched: Vec::new(),
            refreshed: None,
            last_input: None,
        };
        s.refresh(now);
        // The newest access time so far is the owner's last input.
        s.last_input = s
            .watched
            .iter()
            .filter_map(|(_, t)| *t)
            .max()
            .map(|t| instant_of(t, now));
        s
    }

    fn refresh(&mut self, now: Instant) {
        let paths = match &self.which {
            Terminals::List(l) => l.clone(),
            Terminals::LoggedIn => fs::read(&self.utmp)
                .map(|b| utmp_terminals(&b))
                .unwrap_or_default(),
        };
        let old = std::mem::take(&mut self.watched);
        self.watched = paths
            .into_iter()
            .map(|p| {
                let seen = old
                    .iter()
                    .find(|(q, _)| *q == p)
                    .map_or_else(|| atime(&p), |(_, t)| *t);
                (p, seen)
            })
            .collect();
        self.refreshed = Some(now);
    }

    /// Input since the last poll, as `tty PATH`.
    pub fn poll(&mut self, now: Instant) -> Option<String> {
        if self.which == Terminals::LoggedIn
            && self
                .refreshed
                .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(2))
        {
            self.refresh(now);
        }
        let mut seen = None;
        for (p, last) in &mut self.watched {
            let t = atime(p);
            if t.is_some() && t > *last {
                *last = t;
                seen = Some(format!("tty {}", p.display()));
            }
        }
        if seen.is_some() {
            self.last_input = Some(now);
        }
        seen
    }

    /// What it sees.
    pub fn status(&self) -> Status {
        let names: Vec<String> = self
            .watched
            .iter()
            .map(|(p, _)| p.display().to_string())
            .collect();
        Status {
            name: "terminals",
            active: !self.watched.is_empty(),
            sees: if names.is_empty() {
                match self.which {
                    Terminals::LoggedIn => {
                        format!("no logged-in user's terminal ({})", self.utmp.display())
                    }
                    Terminals::List(_) => "none watched".into(),
                }
            } else {
                format!(
                    "access times of {} (updated at most every 8 s by the kernel)",
                    names.join(", ")
                )
            },
            last_input: self.last_input,
        }
    }
}

/// Keyboards, mice, touchpads under /dev/input.
#[derive(Debug)]
pub struct DeviceSource {
    dir: PathBuf,
    devices: Vec<(PathBuf, File)>,
    scanned: Option<Instant>,
    last_input: Option<Instant>,
    problem: Option<String>,
}

/// `struct input_event` on 64-bit Linux: a timeval, type, code, value.
const EVENT_SIZE: usize = 24;

impl DeviceSource {
    /// Watch the event devices in `dir` (normally /dev/input).
    pub fn new(dir: PathBuf, now: Instant) -> DeviceSource {
        let mut s = DeviceSource {
            dir,
            devices: Vec::new(),
            scanned: None,
            last_input: None,
            problem: None,
        };
        s.scan(now);
        s
    }

    fn scan(&mut self, now: Instant) {
        self.scanned = Some(now);
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) => {
                self.problem = Some(format!("{}: {e}", self.dir.display()));
                return;
            }
        };
        let mut denied = 0;
        for e in entries.flatten() {
            let p = e.path();
            let is_event = p
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("event"));
            if !is_event || self.devices.iter().any(|(q, _)| *q == p) {
                continue;
            }
            match fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&p)
            {
                Ok(f) => self.devices.push((p, f)),
                Err(_) => denied += 1,
            }
        }
        self.problem = (denied > 0).then(|| format!("{denied} device(s) not readable"));
    }

    /// Input since the last poll, as `input /dev/input/eventN`.
    pub fn poll(&mut self, now: Instant) -> Option<String> {
        if self
            .scanned
            .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(10))
        {
            self.scan(now);
        }
        let mut seen = None;
        let mut buf = [0u8; EVENT_SIZE * 64];
        self.devices.retain_mut(|(p, f)| loop {
            match f.read(&mut buf) {
                Ok(0) => break false,
                Ok(n) => {
                    // EV_KEY, EV_REL, EV_ABS: a key, a move, a touch.
                    let input = buf[..n]
                        .chunks_exact(EVENT_SIZE)
                        .any(|e| matches!(u16::from_ne_bytes([e[16], e[17]]), 1..=3));
                    if input {
                        seen = Some(format!("input {}", p.display()));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break true,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // Unplugged (ENODEV) or broken: stop watching it.
                Err(_) => break false,
            }
        });
        if seen.is_some() {
            self.last_input = Some(now);
        }
        seen
    }

    /// What it sees.
    pub fn status(&self) -> Status {
        let mut sees = if self.devices.is_empty() {
            format!("no readable event device in {}", self.dir.display())
        } else {
            format!(
                "reading {} event device(s) in {}",
                self.devices.len(),
                self.dir.display()
            )
        };
        if let Some(p) = &self.problem {
            sees = format!("{sees} ({p})");
        }
        Status {
            name: "input devices",
            active: !self.devices.is_empty(),
            sees,
            last_input: self.last_input,
        }
    }
}

/// The i8042 keyboard and mouse interrupt counters.
#[derive(Debug)]
pub struct InterruptSource {
    path: PathBuf,
    count: Option<u64>,
    last_input: Option<Instant>,
}

/// The sum of the i8042 lines' counters in /proc/interrupts text.
pub fn i8042_count(text: &str) -> Option<u64> {
    let mut found = false;
    let mut sum = 0u64;
    for line in text.lines().filter(|l| l.contains("i8042")) {
        found = true;
        let counts = line
            .split_whitespace()
            .skip(1)
            .map_while(|w| w.parse::<u64>().ok());
        sum = counts.fold(sum, u64::saturating_add);
    }
    found.then_some(sum)
}

impl InterruptSource {
    /// Watch the i8042 lines of `path` (normally /proc/interrupts).
    pub fn new(path: PathBuf) -> InterruptSource {
        let count = fs::read_to_string(&path).ok().and_then(|t| i8042_count(&t));
        InterruptSource {
            path,
            count,
            last_input: None,
        }
    }

    /// Input since the last poll, as `interrupts i8042`.
    pub fn poll(&mut self, now: Instant) -> Option<String> {
        self.count?;
        let n = fs::read_to_string(&self.path)
            .ok()
            .and_then(|t| i8042_count(&t))?;
        let more = self.count.is_some_and(|c| n > c);
        self.count = Some(n);
        more.then(|| {
            self.last_input = Some(now);
            "interrupts i8042 (PS/2 keyboard or mouse)".to_string()
        })
    }

    /// What it sees.
    pub fn status(&self) -> Status {
        Status {
            name: "interrupts",
            active: self.count.is_some(),
            sees: match self.count {
                Some(n) => format!("i8042 keyboard/mouse interrupts: {n}"),
                None => format!("no i8042 keyboard/mouse line in {}", self.path.display()),
            },
            last_input: self.last_input,
        }
    }
}

/// logind's graphical sessions and their idle hints.
#[derive(Debug)]
pub struct LogindSource {
    dir: PathBuf,
    running: Option<(std::process::Child, Vec<u8>)>,
    next: Instant,
    sees: String,
    last_input: Option<Instant>,
}

/// The graphical sessions among logind's session files in `dir`.
pub fn graphical_sessions(dir: &std::path::Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<String> = entries
        .flatten()
        .filter_map(|e| {
            let id = e.file_name().to_str()?.to_string();
            let ok = id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            let text = fs::read_to_string(e.path()).ok()?;
            let graphical = text
                .lines()
                .any(|l| matches!(l, "TYPE=x11" | "TYPE=wayland" | "TYPE=mir"));
            (ok && graphical).then_some(id)
        })
        .collect();
    out.sort();
    out
}

/// `loginctl show-session -p IdleHint ...` output: is any session not idle?
pub fn any_active(text: &str) -> Option<bool> {
    let hints: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("IdleHint="))
        .collect();
    (!hints.is_empty()).then(|| hints.iter().any(|h| h.trim() == "no"))
}

impl LogindSource {
    /// Watch the graphical sessions logind lists in `dir`.
    pub fn new(dir: PathBuf, now: Instant) -> LogindSource {
        LogindSource {
            dir,
            running: None,
            next: now,
            sees: "not read yet".into(),
            last_input: None,
        }
    }

    /// A graphical session that is not idle, as `logind session ...`.
    pub fn poll(&mut self, now: Instant) -> Option<String> {
        if let Some((child, buf)) = &mut self.running {
            let out = child.stdout.as_mut()?;
            let mut chunk = [0u8; 4096];
            loop {
                match out.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) if buf.len() < 1 << 20 => buf.extend_from_slice(&chunk[..n]),
                    Ok(_) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return None,
                    Err(_) => break,
                }
            }
            let text = String::from_utf8_lossy(buf).into_owned();
            // The daemon's reaper collects the process.
            self.running = None;
            return match any_active(&text) {
                Some(true) => {
                    self.sees = "a graphical session is not idle".into();
                    self.last_input = Some(now);
                    Some("logind: a graphical session is not idle".into())
                }
                Some(false) => {
                    self.sees = "every graphical session is idle".into();
                    None
                }
                None => {
                    self.sees = "loginctl gave no idle hint".into();
                    None
                }
            };
        }
        if now < self.next {
            return None;
        }
        self.next = now + Duration::from_secs(5);
        let sessions = graphical_sessions(&self.dir);
        if sessions.is_empty() {
            self.sees = format!("no graphical session in {}", self.dir.display());
            return None;
        }
        let child = std::process::Command::new("loginctl")
            .args(["show-session", "-p", "IdleHint"])
            .args(&sessions)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn();
        match child {
            Ok(c) => {
                if let Some(out) = &c.stdout {
                    let fd = std::os::fd::AsRawFd::as_raw_fd(out);
                    // SAFETY: fcntl on a descriptor the child handle owns.
                    unsafe {
                        let fl = libc::fcntl(fd, libc::F_GETFL);
                        libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
                    }
                }
                self.running = Some((c, Vec::new()));
            }
            Err(e) => self.sees = format!("cannot run loginctl: {e}"),
        }
        None
    }

    /// What it sees.
    pub fn status(&self) -> Status {
        Status {
            name: "logind",
            active: self.dir.is_dir(),
            sees: if self.dir.is_dir() {
                self.sees.clone()
            } else {
                format!("no logind here ({})", self.dir.display())
            },
            last_input: self.last_input,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utmp_record(kind: i16, line: &str) -> Vec<u8> {
        let mut r = vec![0u8; UTMP_RECORD];
        r[..2].copy_from_slice(&kind.to_ne_bytes());
        r[8..8 + line.len()].copy_from_slice(line.as_bytes());
        r
    }

    #[test]
    fn utmp_gives_logged_in_users_terminals_only() {
        let mut bytes = utmp_record(USER_PROCESS, "pts/3");
        bytes.extend(utmp_record(8, "pts/4")); // DEAD_PROCESS
        bytes.extend(utmp_record(USER_PROCESS, "tty1"));
        bytes.extend(utmp_record(USER_PROCESS, "../etc/passwd"));
        bytes.extend(utmp_record(USER_PROCESS, ":0"));
        bytes.extend(utmp_record(USER_PROCESS, "pts/3"));
        bytes.extend([1, 2, 3]); // a torn last record is ignored
        assert_eq!(
            utmp_terminals(&bytes),
            vec![PathBuf::from("/dev/pts/3"), PathBuf::from("/dev/tty1")]
        );
    }

    #[test]
    fn i8042_lines_are_summed_and_absent_ones_said() {
        let text = "           CPU0       CPU1\n  1:        9         0   IO-APIC   1-edge      i8042\n 12:       100        23   IO-APIC  12-edge      i8042\n 16:  5000 4000 IO-APIC 16-fasteoi ehci_hcd:usb1\n";
        assert_eq!(i8042_count(text), Some(132));
        assert_eq!(i8042_count("  0: 1 2 timer\n"), None);
    }

    #[test]
    fn a_terminal_read_after_its_access_time_is_input() {
        let dir = tempfile::tempdir().unwrap();
        let tty = dir.path().join("tty");
        fs::write(&tty, "x").unwrap();
        let old = SystemTime::now() - Duration::from_secs(3600);
        File::options()
            .write(true)
            .open(&tty)
            .unwrap()
            .set_times(fs::FileTimes::new().set_accessed(old))
            .unwrap();
        let t0 = Instant::now();
        let mut s = TerminalSource::new(
            Terminals::List(vec![tty.clone()]),
            "/nonexistent".into(),
            t0,
        );
        let last = s.status().last_input.unwrap();
        assert!(t0.duration_since(last) >= Duration::from_secs(3500));
        assert_eq!(s.poll(t0), None);
        File::options()
            .write(true)
            .open(&tty)
            .unwrap()
            .set_times(fs::FileTimes::new().set_accessed(SystemTime::now()))
            .unwrap();
        assert_eq!(s.poll(t0), Some(format!("tty {}", tty.display())));
        assert_eq!(s.poll(t0), None, "the same access is input once");
    }

    #[test]
    fn key_events_on_an_event_device_are_input_and_sync_events_are_not() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let dev = dir.path().join("event0");
        nix::unistd::mkfifo(&dev, nix::sys::stat::Mode::S_IRWXU).unwrap();
        // Held open read-write, the fifo never reads as ended.
        let mut w = File::options().read(true).write(true).open(&dev).unwrap();
        let t0 = Instant::now();
        let mut s = DeviceSource::new(dir.path().into(), t0);
        assert!(s.status().active, "{}", s.status().sees);
        let event = |kind: u16| {
            let mut e = [0u8; EVENT_SIZE];
            e[16..18].copy_from_slice(&kind.to_ne_bytes());
            e
        };
        assert_eq!(s.poll(t0), None);
        w.write_all(&event(0)).unwrap();
        assert_eq!(s.poll(t0), None, "EV_SYN alone is not input");
        w.write_all(&event(1)).unwrap();
        assert_eq!(s.poll(t0), Some(format!("input {}", dev.display())));
        assert_eq!(s.status().last_input, Some(t0));
    }

    #[test]
    fn logind_graphical_sessions_and_idle_hints() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("2"), "UID=1000\nTYPE=x11\nACTIVE=1\n").unwrap();
        fs::write(dir.path().join("c1"), "UID=0\nTYPE=tty\n").unwrap();
        fs::write(dir.path().join("5"), "TYPE=wayland\n").unwrap();
        assert_eq!(graphical_sessions(dir.path()), vec!["2", "5"]);
        assert_eq!(any_active("IdleHint=yes\n\nIdleHint=no\n"), Some(true));
        assert_eq!(any_active("IdleHint=yes\n\nIdleHint=yes\n"), Some(false));
        assert_eq!(any_active("Failed to get session\n"), None);
        let mut s = LogindSource::new("/nonexistent/sessions".into(), Instant::now());
        assert_eq!(s.poll(Instant::now()), None);
        assert!(!s.status().active);
    }

    #[test]
    fn missing_sources_say_why() {
        let t0 = Instant::now();
        let d = DeviceSource::new("/nonexistent/input".into(), t0);
        assert!(!d.status().active);
        assert!(d.status().sees.contains("/nonexistent/input"));
        let i = InterruptSource::new("/nonexistent/interrupts".into());
        assert!(!i.status().active);
        let t = TerminalSource::new(Terminals::LoggedIn, "/nonexistent/utmp".into(), t0);
        assert!(
            t.status().sees.contains("no logged-in user"),
            "{}",
            t.status().sees
        );
    }
}
