//! The lease guardian: a small process beside each worker daemon that
//! fences the daemon's VPs when the daemon can no longer vouch for them.
//!
//! A worker holds its VPs under a lease the master grants (see
//! `ToMaster::LeaseAsk`); the daemon passes each new deadline down a pipe.
//! The guardian is a process of its own (migd started again with a hidden
//! first argument), so it runs when the daemon does not: stopped, paging,
//! starved. When the deadline passes without a newer one, it freezes every
//! VP cell at once (the cgroup freezer: independent of the signals that
//! slice VPs); a later deadline thaws them. While they are frozen, a VP
//! the daemon was starting, caught between its clone and its exec, is
//! killed (the daemon waits for that exec and would never renew the
//! lease; `contain::kill_unborn`; cgroup v2 only). When the daemon ends, however
//! (it watches the daemon's process as well as the pipe: a child caught
//! between its clone and its exec holds the pipe too), it kills every VP
//! and exits: nobody is left to look after them, and the master starts
//! them elsewhere.
//!
//! What lives here: starting the guardian and renewing its deadline (the
//! daemon's side), and the guardian's loop. What does not: when a lease is
//! granted (the master) or asked for (the server), the cgroups themselves
//! (`contain`).

use std::io::{self, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Instant;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::time::{clock_gettime, ClockId};

use crate::contain::{self, Flavour};

/// While the VPs are frozen, how often the guardian looks for one caught
/// between its clone and its exec (ms).
const UNBORN_EVERY_MS: u16 = 100;

/// The first argument that makes migd a guardian.
pub const ARG: &str = "--lease-guardian";

/// The daemon's handle on its guardian.
#[derive(Debug)]
pub struct Guardian {
    child: Child,
    pipe: Option<ChildStdin>,
    /// The deadline last passed down (monotonic ns).
    sent: u64,
}

/// Now on the machine-wide monotonic clock, in ns.
fn mono_ns() -> u64 {
    clock_gettime(ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// `at` on the monotonic clock, in ns.
fn at_ns(at: Instant) -> u64 {
    let now = Instant::now();
    let base = mono_ns();
    if at >= now {
        base + (at - now).as_nanos() as u64
    } else {
        base.saturating_sub((now - at).as_nanos() as u64)
    }
}

impl Guardian {
    /// Start the guardian of the cells under `base`.
    pub fn start(flavour: Flavour, base: &Path) -> io::Result<Guardian> {
        let exe = std::env::current_exe()?;
        let flavour = match flavour {
            Flavour::V2 => "v2",
            Flavour::V1 => "v1",
        };
        let mut child = Command::new(exe)
            .arg(ARG)
            .arg(flavour)
            .arg(base)
            .arg(std::process::id().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()?;
        let pipe = child.stdin.take();
        Ok(Guardian {
            child,
            pipe,
            sent: 0,
        })
    }

    /// The VPs may run until `until`; after it they are frozen unless a
    /// later deadline comes. A deadline already past changes nothing.
    pub fn renew(&mut self, until: Instant) {
        let ns = at_ns(until);
        if ns <= self.sent || ns <= mono_ns() {
            return;
        }
        self.sent = ns;
        if let Some(p) = &mut self.pipe {
            if p.write_all(&ns.to_le_bytes()).is_err() {
                crate::log!("the lease guardian is gone: VPs here are no longer fenced");
                self.pipe = None;
            }
        }
    }

    /// Its process id, for logs and tests.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Guardian {
    fn drop(&mut self) {
        // Closing the pipe tells it to end (killing what is left).
        self.pipe = None;
        let _ = self.child.wait();
    }
}

/// A descriptor that becomes readable when process `pid` ends (`None`:
/// the kernel has no pidfd, before 5.3). A process already gone is `Err`.
fn watch_process(pid: libc::pid_t) -> io::Result<Option<std::os::fd::OwnedFd>> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd >= 0 {
        // SAFETY: a descriptor the kernel just gave us, owned from here.
        return Ok(Some(unsafe {
            std::os::fd::OwnedFd::from_raw_fd(fd as i32)
        }));
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENOSYS) => Ok(None),
        _ => Err(e),
    }
}

/// The guardian's main: `ARG FLAVOUR BASE [DAEMON_PID]`. Never returns.
pub fn run(args: &[String]) -> ! {
    let usage = || -> ! {
        eprintln!("migd {ARG}: expected v1|v2, a cgroup directory and the daemon's pid");
        std::process::exit(2);
    };
    let (flavour, base, daemon) = match args {
        [f, b, rest @ ..] if rest.len() <= 1 => {
            let flavour = match f.as_str() {
                "v2" => Flavour::V2,
                "v1" => Flavour::V1,
                _ => usage(),
            };
            let daemon = match rest.first().map(|p| p.parse::<libc::pid_t>()) {
                None => None,
                Some(Ok(p)) if p > 1 => Some(p),
                Some(_) => usage(),
            };
            (flavour, PathBuf::from(b), daemon)
        }
        _ => usage(),
    };
    let daemon_pid = daemon;
    // The daemon's process, watched beside the pipe: one already gone
    // leaves nothing to guard.
    let daemon = match daemon.map(watch_process).transpose() {
        Ok(d) => d.flatten(),
        Err(_) => {
            contain::clear_tree(flavour, &base);
            std::process::exit(0);
        }
    };
    // Not a VP, not the owner: it must run when the machine is busy.
    // SAFETY: setpriority on this process only.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -10) };
    let input = io::stdin();
    let mut deadline: Option<u64> = None;
    let mut frozen = false;
    let mut buf = [0u8; 8];
    let mut have = 0usize;
    loop {
        let now = mono_ns();
        if let Some(d) = deadline.filter(|&d| d <= now && !frozen) {
            // Tried once per lapse: a freezer that refuses is said, not
            // retried in a busy loop.
            frozen = true;
            match contain::freeze_tree(flavour, &base, true) {
                Ok(()) => crate::log!(
                    "lease guardian: the daemon's lease lapsed {} ms ago: its VPs are frozen",
                    (now - d) / 1_000_000
                ),
                Err(e) => {
                    crate::warn!("lease guardian: the lease lapsed, but freezing failed: {e}")
                }
            }
        }
        if frozen && flavour == Flavour::V2 {
            if let Some(pid) = daemon_pid {
                let n = contain::kill_unborn(&base, pid);
                if n > 0 {
                    crate::log!(
                        "lease guardian: {n} VP(s) frozen before their exec were killed: their \
                         daemon waited for them"
                    );
                }
            }
        }
        let wait = match deadline {
            Some(d) if !frozen => PollTimeout::try_from(((d - now.min(d)) / 1_000_000 + 1) as i64)
                .unwrap_or(PollTimeout::MAX),
            // Frozen: looked at again now and then for VPs caught before
            // their exec (see `contain::kill_unborn`).
            _ if frozen && daemon_pid.is_some() => PollTimeout::from(UNBORN_EVERY_MS),
            _ => PollTimeout::NONE,
        };
        let mut fds = vec![PollFd::new(input.as_fd(), PollFlags::POLLIN)];
        if let Some(d) = &daemon {
            fds.push(PollFd::new(d.as_fd(), PollFlags::POLLIN));
        }
        match poll(&mut fds, wait) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => break,
        }
        if fds
            .get(1)
            .and_then(|f| f.revents())
            .is_some_and(|r| !r.is_empty())
        {
            crate::log!("lease guardian: the daemon ended: its VPs end too");
            break;
        }
        if fds[0].revents().is_none_or(|r| r.is_empty()) {
            continue;
        }
        // (Unbuffered: poll must see every byte not yet read.)
        // SAFETY: reading into our own buffer from standard input.
        let n = unsafe {
            libc::read(
                libc::STDIN_FILENO,
                buf[have..].as_mut_ptr().cast(),
                buf.len() - have,
            )
        };
        match n {
            n if n > 0 => have += n as usize,
            -1 if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => continue,
            _ => break,
        }
        if have < buf.len() {
            continue;
        }
        have = 0;
        let d = u64::from_le_bytes(buf);
        deadline = Some(d);
        if frozen && d > mono_ns() {
            frozen = contain::freeze_tree(flavour, &base, false).is_err();
            crate::log!("lease guardian: the lease is renewed: the VPs are thawed");
        }
    }
    // The daemon is gone: so are its VPs.
    contain::clear_tree(flavour, &base);
    std::process::exit(0);
}
