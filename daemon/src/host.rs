//! VP supervision on this host: fork/exec, output pipes, reaping, killing.
//!
//! Every VP runs in its own process group with a parent-death signal, so a
//! killed job or a halted (even SIGKILLed) daemon leaves no process behind.
//! What lives here: starting a program with the VP's identity in its
//! environment, reading its output line by line, turning `waitpid` results
//! into exit reports. What does not: deciding where VPs run (the master).

use std::collections::HashMap;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use libmig::msg::{ExitInfo, StartVp, Stream, Tid};
use libmig::vp::env;
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// A VP running (or just ended) on this host.
#[derive(Debug)]
pub struct LocalVp {
    /// Its process id (also its process group).
    pub pid: i32,
    /// Output pipes still open.
    pub open_pipes: u8,
    /// Its exit, once reaped.
    pub exit: Option<ExitInfo>,
}

/// One output pipe of a VP.
#[derive(Debug)]
pub struct Pipe {
    /// The read end (non-blocking).
    pub file: std::fs::File,
    /// Whose.
    pub tid: Tid,
    /// Which stream.
    pub stream: Stream,
    /// A partial line.
    pub partial: Vec<u8>,
}

/// Start a VP. Returns its pid and its two output pipes.
pub fn spawn(s: &StartVp, host: &str, socket: &str) -> io::Result<(i32, OwnedFd, OwnedFd)> {
    let mut cmd = Command::new(&s.program);
    let cwd = std::path::Path::new(&s.cwd);
    if s.program.contains('/') && !s.program.starts_with('/') {
        cmd = Command::new(cwd.join(&s.program));
    }
    cmd.args(&s.args)
        .current_dir(cwd)
        .envs(s.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env(env::TID, s.tid.to_string())
        .env(env::JOB, &s.job)
        .env(env::VP, s.vp.to_string())
        .env(env::NVPS, s.nvps.to_string())
        .env(env::HOST, host)
        .env(env::SOCKET, socket)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: between fork and exec only async-signal-safe calls are made
    // (setpgid, prctl, getppid, _exit); nothing allocates or takes locks.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setpgid(0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The daemon may have died between fork and prctl.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    let pid = child.id() as i32;
    let out: OwnedFd = child
        .stdout
        .take()
        .ok_or_else(|| io::Error::other("no stdout pipe"))?
        .into();
    let err: OwnedFd = child
        .stderr
        .take()
        .ok_or_else(|| io::Error::other("no stderr pipe"))?
        .into();
    for fd in [&out, &err] {
        set_nonblocking(fd)?;
    }
    // The daemon reaps with waitpid(-1); dropping `child` does not wait.
    drop(child);
    Ok((pid, out, err))
}

fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own; no memory is passed.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Kill a VP's whole process group.
pub fn kill(pid: i32) {
    let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
}

/// Reap every child that ended: (pid, how).
pub fn reap() -> Vec<(i32, ExitInfo)> {
    let mut out = Vec::new();
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) => out.push((
                pid.as_raw(),
                ExitInfo {
                    code: Some(code),
                    signal: None,
                    error: None,
                },
            )),
            Ok(WaitStatus::Signaled(pid, sig, _)) => out.push((
                pid.as_raw(),
                ExitInfo {
                    code: None,
                    signal: Some(sig as i32),
                    error: None,
                },
            )),
            Ok(WaitStatus::StillAlive) | Err(_) => return out,
            Ok(_) => {}
        }
    }
}

/// Read what a pipe has: complete lines, and whether it reached EOF.
pub fn read_lines(p: &mut Pipe) -> (Vec<String>, bool) {
    let mut lines = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let eof = loop {
        match p.file.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => p.partial.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break true,
        }
        // Long lines without a newline are cut at 64 KiB.
        while let Some(pos) = p.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = p.partial.drain(..=pos).collect();
            lines.push(String::from_utf8_lossy(&line[..line.len() - 1]).into_owned());
        }
        if p.partial.len() > 64 * 1024 {
            lines.push(String::from_utf8_lossy(&p.partial).into_owned());
            p.partial.clear();
        }
    };
    if eof && !p.partial.is_empty() {
        lines.push(String::from_utf8_lossy(&p.partial).into_owned());
        p.partial.clear();
    }
    (lines, eof)
}

/// The VPs of this host, by Tid and pid.
#[derive(Debug, Default)]
pub struct Vps {
    /// By Tid.
    pub by_tid: HashMap<Tid, LocalVp>,
    /// Pid to Tid.
    pub by_pid: HashMap<i32, Tid>,
}
