//! VP supervision on this host: fork/exec, output pipes, reaping, killing.
//!
//! Every VP runs in its own process group with a parent-death signal, and,
//! where the host has cgroups, in a cell of its own (`contain`) that holds
//! the children it starts even when they call `setsid`: a killed job or a
//! halted daemon leaves no process behind (a SIGKILLed daemon's cells are
//! cleared by the next daemon to start).
//! What lives here: starting a program with the VP's identity in its
//! environment, reading its output line by line, turning `waitpid` results
//! into exit reports. What does not: deciding where VPs run (the master).

use std::collections::HashMap;
use std::ffi::CString;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use libmig::msg::{ExitInfo, StartVp, Stream, Tid};
use libmig::vp::env;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use crate::contain::Cell;

/// A VP running (or just ended) on this host.
#[derive(Debug)]
pub struct LocalVp {
    /// Its process id (also its process group).
    pub pid: i32,
    /// Output pipes still open.
    pub open_pipes: u8,
    /// Its exit, once reaped.
    pub exit: Option<ExitInfo>,
    /// How it was started (to start it again here from a late image).
    pub start: Option<StartVp>,
    /// It said it can be moved (`VpMsg::Movable`); until then it cannot.
    pub movable: bool,
    /// The cgroup holding its whole process tree, where the host has one.
    pub cell: Option<Cell>,
    /// When its process started.
    pub started: std::time::Instant,
    /// The owner came back before it could say whether it can be moved:
    /// it runs in the idle class until it says so or until this instant.
    pub probation: Option<std::time::Instant>,
    /// The signal it asked for before a long pause (`VpMsg::PauseNotice`,
    /// or `MIG_PAUSE_SIGNAL` in its environment).
    pub pause_signal: Option<i32>,
    /// It was given that notice as the owner came back: it runs on until it
    /// says it is ready or until this instant (`quiesce_ms`), then stops.
    pub quiescing: Option<(std::time::Instant, std::time::Instant)>,
    /// Its standard input, where the daemon feeds it (`StartVp::stdin`).
    pub input: Option<crate::stdin_feed::Input>,
    /// When it was asked for its image of a job checkpoint, until it
    /// wrote it (for `--metrics`).
    pub snapping_since: Option<std::time::Instant>,
    /// Rebuilt here from outside (`transparent`): how its exit is read.
    pub restored: Option<crate::transparent::Restored>,
    /// Its program does not move itself (it never said it can): it is
    /// moved from outside, and the master was told it can be moved.
    pub outside: bool,
    /// Its words were taken for the image of its move from outside (the
    /// calls it waits for go in it, and this much credit for its shared
    /// buffers still held here): an answer that comes for it now goes back
    /// to the master, which sends it where it runs next.
    pub carried: Option<u64>,
    /// The VPs it was given a direct link to, each with the inodes of its
    /// ends of the links' sockets (two, when both asked at once and it
    /// kept one): a move from outside cuts them (the sockets' other ends
    /// and the rings stay with the peer).
    pub direct: std::collections::BTreeMap<Tid, std::collections::BTreeSet<u64>>,
    /// What it sent and was given, numbered (see `ledger`).
    pub ledger: crate::ledger::Ledger,
    /// Bytes of its large messages (memfds) this daemon holds and has not
    /// yet credited back to it (`VpMsg::Credit`): a move from outside
    /// credits them at once, since their credit would not find it.
    pub uncredited: u64,
    /// The job checkpoint it is paused for, saved from outside.
    pub snap: Option<SnapWait>,
}

/// A job checkpoint a VP saved from outside is paused for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapWait {
    /// The checkpoint's generation.
    pub id: u64,
    /// What must have been handed to it before it is saved, once the
    /// master has said (`SnapOrder::Now`); taken (`None`) when its save
    /// is asked for.
    pub expect: Option<Vec<(Tid, u64)>>,
}

/// A VP this young when the owner comes back, that has not yet said
/// whether it can be moved, is given the time to say it (see `probation`).
pub const YOUNG: std::time::Duration = std::time::Duration::from_secs(2);

/// The longest such a VP runs on (in the idle class) to say it.
pub const PROBATION: std::time::Duration = std::time::Duration::from_secs(1);

impl LocalVp {
    /// A process rebuilt for a restore that a later one superseded: killed,
    /// kept only until it is reaped.
    pub fn superseded(pid: i32, restored: crate::transparent::Restored) -> LocalVp {
        LocalVp {
            pid,
            open_pipes: 0,
            exit: None,
            start: None,
            movable: false,
            cell: None,
            started: std::time::Instant::now(),
            probation: None,
            pause_signal: None,
            quiescing: None,
            input: None,
            snapping_since: None,
            restored: Some(restored),
            outside: true,
            carried: None,
            direct: Default::default(),
            ledger: Default::default(),
            uncredited: 0,
            snap: None,
        }
    }

    /// Its exit, from its process's raw wait status.
    pub fn exit_from(&self, status: i32, cpu_ms: Option<u64>) -> ExitInfo {
        match &self.restored {
            Some(r) => r.exit(status, cpu_ms),
            None => exit_info(status, cpu_ms),
        }
    }

    /// Send `sig` to the VP and every process it started: its process
    /// group, and its cell (children that left the group with `setsid`).
    pub fn signal(&self, sig: Signal) {
        signal(self.pid, sig);
        if let Some(r) = &self.restored {
            // Rebuilt under an init: its program leads a group of its own.
            signal(r.program(), sig);
        }
        if let Some(c) = &self.cell {
            c.signal(sig);
        }
    }

    /// Tell its program to look at its socket at its next safe point
    /// (SIGUSR2, which libmig catches): to its program itself, which a VP
    /// rebuilt from outside runs under an init that would drop it.
    pub fn nudge(&self) {
        match &self.restored {
            Some(r) => signal_one(r.program(), Signal::SIGUSR2),
            None => signal_one(self.pid, Signal::SIGUSR2),
        }
    }

    /// CPU time (ms) its whole process tree has used: its cell's, else
    /// its own process's (and the children it waited for).
    pub fn cpu_ms(&self) -> Option<u64> {
        match self.cell.as_ref().and_then(Cell::cpu_used) {
            Some(d) => Some(d.as_millis() as u64),
            None => crate::owner::load::cpu_ms(self.pid as u32),
        }
    }

    /// Its processes: those of its cell, else its own.
    pub fn pids(&self) -> Vec<i32> {
        let mut pids = self.cell.as_ref().map(Cell::pids).unwrap_or_default();
        if !pids.contains(&self.pid) {
            pids.push(self.pid);
        }
        pids
    }

    /// Its stdin as this host feeds it, if it has a pipe: what waits for
    /// room in it, and whether the end came (see `Input::held`).
    pub fn held_input(&self) -> Option<(Vec<u8>, bool)> {
        self.input.as_ref().map(crate::stdin_feed::Input::held)
    }

    /// Kill the VP's whole process tree.
    pub fn kill(&self) {
        if let Some(c) = &self.cell {
            c.kill();
        }
        kill(self.pid);
    }
}

/// One output pipe of a VP.
#[derive(Debug)]
pub struct Pipe {
    /// The read end (non-blocking).
    pub file: std::fs::File,
    /// Whose.
    pub tid: Tid,
    /// Which process of it (a VP that moved away and back has had two).
    pub pid: i32,
    /// Which stream.
    pub stream: Stream,
    /// A partial line.
    pub partial: Vec<u8>,
}

/// Find a program the way `execvp` would: a path with a `/` relative to
/// `cwd`, a bare name on `PATH` (from `env` if it sets one, else the
/// daemon's). Shared by the check of a spawn where it is asked for
/// (`missing_program`) and the host's exec.
pub fn find_program(program: &str, cwd: &str, env: &[(String, String)]) -> Option<PathBuf> {
    if program.is_empty() {
        return None;
    }
    if program.contains('/') {
        let p = Path::new(cwd).join(program);
        return p.is_file().then_some(p);
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var("PATH").ok())
        .unwrap_or_default();
    path.split(':')
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
}

/// Why a spawn of `program` (the job's program for this host's
/// architecture) is refused here, where it is asked for, if it is: it is
/// not found from `cwd` or on the `PATH` of `env`.
pub fn missing_program(program: &str, cwd: &str, env: &[(String, String)]) -> Option<String> {
    find_program(program, cwd, env).is_none().then(|| {
        format!("program {program:?} not found (relative to {cwd} or on PATH); build it or give its path")
    })
}

fn cstring(s: impl Into<Vec<u8>>) -> io::Result<CString> {
    CString::new(s).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "a NUL byte in an argument or variable",
        )
    })
}

/// A VP just started: its pid, its output pipes, and the daemon's end of
/// its message socket.
#[derive(Debug)]
pub struct Started {
    /// Process id (and process group).
    pub pid: i32,
    /// Read end of its stdout.
    pub stdout: OwnedFd,
    /// Read end of its stderr.
    pub stderr: OwnedFd,
    /// The daemon's end of the VP's socket (the VP has the other as `MIG_FD`).
    pub sock: OwnedFd,
    /// The write end of its stdin, if it has a pipe there (`StartVp::stdin`).
    pub stdin: Option<OwnedFd>,
}

impl Started {
    /// Process `pid`, given its descriptors `ours` (see [`Given`]).
    pub fn of(pid: i32, ours: Ours) -> Started {
        Started {
            pid,
            stdout: ours.stdout,
            stderr: ours.stderr,
            sock: ours.sock,
            stdin: ours.stdin,
        }
    }
}

/// The daemon's ends of a VP's descriptors.
#[derive(Debug)]
pub struct Ours {
    /// Read end of its stdout (non-blocking).
    pub stdout: OwnedFd,
    /// Read end of its stderr (non-blocking).
    pub stderr: OwnedFd,
    /// The daemon's end of its socket (non-blocking).
    pub sock: OwnedFd,
    /// The write end of its stdin, if it has a pipe there.
    pub stdin: Option<OwnedFd>,
}

/// A VP's descriptors, both ends: the daemon's, and the VP's as its
/// stdin, stdout, stderr and socket (`VP_FD`), each close-on-exec (the
/// child's `dup2` onto its number clears that on the copy).
#[derive(Debug)]
pub struct Given {
    /// The daemon's ends.
    pub ours: Ours,
    /// The VP's: stdin (a pipe the daemon feeds, or /dev/null), stdout,
    /// stderr, socket.
    pub theirs: [OwnedFd; 4],
}

impl Given {
    /// Make them; `piped_stdin`: a pipe the daemon feeds, else /dev/null.
    pub fn make(piped_stdin: bool) -> io::Result<Given> {
        let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from);
        let (stdin_r, stdin_w) = if piped_stdin {
            let (r, w) = pipe()?;
            (r, Some(w))
        } else {
            (OwnedFd::from(std::fs::File::open("/dev/null")?), None)
        };
        let (out_r, out_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        let (sock, vp_sock) = nix::sys::socket::socketpair(
            nix::sys::socket::AddressFamily::Unix,
            nix::sys::socket::SockType::Stream,
            None,
            nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        )
        .map_err(io::Error::from)?;
        for fd in [&out_r, &err_r, &sock] {
            set_nonblocking(fd)?;
        }
        roomy(&sock, &vp_sock);
        Ok(Given {
            ours: Ours {
                stdout: out_r,
                stderr: err_r,
                sock,
                stdin: stdin_w,
            },
            theirs: [stdin_r, out_w, err_w, vp_sock],
        })
    }

    /// The VP's ends by the numbers it has them at.
    pub fn by_number(theirs: [OwnedFd; 4]) -> std::collections::BTreeMap<i32, OwnedFd> {
        crate::transparent::GIVEN_FDS
            .into_iter()
            .zip(theirs)
            .collect()
    }
}

/// How VPs run, from the daemon's configuration.
#[derive(Debug, Clone, Copy)]
pub struct Treatment {
    /// Scheduling niceness: VPs run below the owner's programs and below
    /// migd, whose slot switches must not wait for a core.
    pub nice: i32,
    /// The SCHED_IDLE class.
    pub idle: bool,
    /// Large allocations in 2 MiB pages (glibc's `malloc.hugetlb` tunable),
    /// unless the job sets `GLIBC_TUNABLES` itself.
    pub huge_pages: bool,
}

/// The descriptor number a VP finds its socket at.
pub const VP_FD: i32 = 3;

/// Start a VP.
///
/// Everything the child needs is prepared before the clone; the child only
/// makes async-signal-safe calls (write, setpgid, setpriority, sigaction,
/// prctl, dup2, chdir, execve, _exit), and the daemon waits only until it
/// has called `execve`, not for the program to start, so many VPs start in
/// parallel.
/// `cell` says how it gets into its cell (see `contain`), if it has one.
pub fn spawn(
    s: &StartVp,
    host: &str,
    socket: &str,
    how: &Treatment,
    cell: Join,
) -> io::Result<Started> {
    let exec = Exec::prepare(s, host, socket, how.huge_pages)?;
    fork_exec(&exec, how, cell, s.stdin)
}

/// How a VP's process gets into its cell.
#[derive(Debug, Clone, Copy, Default)]
pub struct Join<'a> {
    /// The cell's directory: the process is born there (`clone_into`),
    /// where the kernel can.
    pub into: Option<std::os::fd::RawFd>,
    /// Else (or where it cannot) `cgroup.procs` files the child writes
    /// itself into first.
    pub fds: &'a [std::os::fd::RawFd],
    /// Of those, the ones it writes itself into even when born in its
    /// cell: its twins in v1 hierarchies (its limits').
    pub twins: &'a [std::os::fd::RawFd],
}

/// Everything a VP's `execve` needs, made before `fork` (the child may not
/// allocate).
struct Exec {
    program: CString,
    argv_own: Vec<CString>,
    envp_own: Vec<CString>,
    cwd: CString,
}

impl Exec {
    /// The program found, its arguments, and its environment: the
    /// daemon's (less `MIG_*`), the job's, and the VP's identity.
    fn prepare(s: &StartVp, host: &str, socket: &str, huge_pages: bool) -> io::Result<Exec> {
        let program = find_program(&s.program, &s.cwd, &s.env).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("not found (relative to {} or on PATH)", s.cwd),
            )
        })?;
        let program = cstring(program.as_os_str().as_bytes())?;
        let mut argv_own = vec![cstring(s.program.as_bytes())?];
        for a in &s.args {
            argv_own.push(cstring(a.as_bytes())?);
        }
        let mut vars: Vec<(String, String)> = std::env::vars()
            .filter(|(k, _)| !k.starts_with("MIG_"))
            .collect();
        vars.extend(s.env.iter().cloned());
        vars.extend([
            (env::TID.to_string(), s.tid.to_string()),
            (env::JOB.to_string(), s.job.clone()),
            (env::VP.to_string(), s.vp.to_string()),
            (env::NVPS.to_string(), s.nvps.to_string()),
            (env::HOST.to_string(), host.to_string()),
            (env::SOCKET.to_string(), socket.to_string()),
            (env::FD.to_string(), VP_FD.to_string()),
            (env::INCARNATION.to_string(), s.incarnation.to_string()),
        ]);
        if let Some(p) = s.parent {
            vars.push((env::PARENT.to_string(), p.to_string()));
        }
        if huge_pages && !vars.iter().any(|(k, _)| k == "GLIBC_TUNABLES") {
            vars.push(("GLIBC_TUNABLES".into(), "glibc.malloc.hugetlb=1".into()));
        }
        let mut envp_own = Vec::with_capacity(vars.len());
        for (k, v) in &vars {
            envp_own.push(cstring(format!("{k}={v}"))?);
        }
        Ok(Exec {
            program,
            argv_own,
            envp_own,
            cwd: cstring(s.cwd.as_bytes())?,
        })
    }
}

/// Clone (sharing memory until the exec, as vfork does) and in the child
/// (`vp_child`) set the VP up and exec it.
fn fork_exec(exec: &Exec, how: &Treatment, join: Join, piped_stdin: bool) -> io::Result<Started> {
    let Treatment { nice, idle, .. } = *how;
    let prog = &exec.program;
    let argv: Vec<*const libc::c_char> = exec
        .argv_own
        .iter()
        .map(|c| c.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let envp: Vec<*const libc::c_char> = exec
        .envp_own
        .iter()
        .map(|c| c.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let cwd = &exec.cwd;
    let Given {
        ours,
        theirs: [stdin_r, out_w, err_w, vp_sock],
    } = Given::make(piped_stdin)?;
    let parent = std::process::id() as libc::pid_t;
    // The child shares the daemon's memory until its `execve` (the daemon
    // waits for that: no page tables copied, no copy-on-write faults for
    // the daemon afterwards, as with posix_spawn). So every signal is
    // blocked across the clone: none may run a daemon handler in the
    // child; the child puts handled signals back to their defaults (what
    // exec would do) before it restores the mask.
    //
    // The daemon nudges a VP with SIGUSR2 when it asks for a checkpoint;
    // until libmig installs its handler (or in a program without libmig)
    // that must not end the process, even if it comes at once (the owner
    // stopping a VP that has just forked, then a move resuming it). So the
    // child ignores it (which discards one pending) before it unblocks
    // signals; an ignored signal stays ignored across exec.
    // SAFETY: a sigset_t is plain data, valid all zero.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut old_mask: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: sigset operations on local values; the mask is put back
    // once the clone returns.
    unsafe {
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_BLOCK, &all, &mut old_mask);
    }
    let mut args = ChildArgs {
        prog: prog.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        cwd: cwd.as_ptr(),
        join: join.twins,
        stdin: stdin_r.as_raw_fd(),
        stdout: out_w.as_raw_fd(),
        stderr: err_w.as_raw_fd(),
        vp_sock: vp_sock.as_raw_fd(),
        nice,
        idle,
        old_mask,
        parent,
    };
    let mut stack = vec![0u8; CHILD_STACK];
    // Born in its cell where the kernel can; else it writes itself in.
    // SAFETY (both): the child runs `vp_child` on its own stack, reads
    // `args` (alive until the clone returns: CLONE_VFORK holds the daemon
    // until the child has exec'd or exited) and makes only
    // async-signal-safe calls; every signal is blocked meanwhile.
    let born_in = join.into.and_then(|cg| {
        let arg = (&args as *const ChildArgs).cast_mut().cast();
        // SAFETY: see above (both).
        unsafe { crate::clone_into::clone_into(cg, &mut stack, vp_child, arg) }.ok()
    });
    let pid = match born_in {
        Some(pid) => pid,
        None => {
            args.join = join.fds;
            // The stack grows down from its 16-byte aligned top.
            let top = (stack.as_mut_ptr() as usize + CHILD_STACK) & !15;
            // SAFETY: see above (both).
            unsafe {
                libc::clone(
                    vp_child,
                    top as *mut libc::c_void,
                    libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                    (&args as *const ChildArgs).cast_mut().cast(),
                )
            }
        }
    };
    // SAFETY: restores the mask saved above.
    unsafe { libc::sigprocmask(libc::SIG_SETMASK, &old_mask, std::ptr::null_mut()) };
    drop(stack);
    match pid {
        -1 => Err(io::Error::last_os_error()),
        pid => {
            // Its process group exists from now on, whichever side runs
            // first (a stop sent to the group at once must reach it).
            // SAFETY: setpgid on our own child.
            unsafe { libc::setpgid(pid, pid) };
            drop((out_w, err_w, vp_sock, stdin_r));
            Ok(Started::of(pid, ours))
        }
    }
}

/// The child's stack until its `execve`.
const CHILD_STACK: usize = 64 * 1024;

/// What the child of `fork_exec` needs, prepared by the daemon.
struct ChildArgs<'a> {
    prog: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    join: &'a [std::os::fd::RawFd],
    stdin: i32,
    stdout: i32,
    stderr: i32,
    vp_sock: i32,
    nice: i32,
    idle: bool,
    old_mask: libc::sigset_t,
    parent: libc::pid_t,
}

/// The VP's side of `fork_exec`, on its own stack in the daemon's memory:
/// into its cell, its own process group, priority, signals, death with the
/// daemon, descriptors, then `execve`.
extern "C" fn vp_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the daemon's `ChildArgs`, alive while the daemon
    // waits for this child's exec; only async-signal-safe calls follow.
    unsafe {
        let a = &*(arg as *const ChildArgs);
        // Into its cell first, so that nothing it starts escapes it.
        for &fd in a.join {
            libc::write(fd, b"0".as_ptr().cast(), 1);
        }
        libc::setpgid(0, 0);
        libc::setpriority(libc::PRIO_PROCESS, 0, a.nice);
        if a.idle {
            let param = libc::sched_param { sched_priority: 0 };
            libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
        }
        // The daemon's handlers live in its memory: back to the default
        // (ignored signals stay ignored, as across exec).
        for sig in 1..libc::SIGRTMAX() {
            let mut was: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut was) == 0
                && was.sa_sigaction != libc::SIG_DFL
                && was.sa_sigaction != libc::SIG_IGN
            {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
            }
        }
        libc::signal(libc::SIGUSR2, libc::SIG_IGN);
        libc::sigprocmask(libc::SIG_SETMASK, &a.old_mask, std::ptr::null_mut());
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        if libc::getppid() != a.parent {
            libc::_exit(1);
        }
        libc::dup2(a.stdin, 0);
        libc::dup2(a.stdout, 1);
        libc::dup2(a.stderr, 2);
        // The VP's socket at a known number, without close-on-exec
        // (dup2 onto itself would keep the flag, so clear it then).
        if a.vp_sock == VP_FD {
            libc::fcntl(VP_FD, libc::F_SETFD, 0);
        } else {
            libc::dup2(a.vp_sock, VP_FD);
        }
        // Nothing else of the daemon's goes with it: descriptors it was
        // started with open and without close-on-exec (a shell's, a
        // service manager's) would leak to the VP, and a move from outside
        // would have to refuse them.
        let first = (VP_FD + 1) as libc::c_uint;
        if libc::syscall(
            libc::SYS_close_range,
            first,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        ) != 0
        {
            for fd in VP_FD + 1..4096 {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
        }
        let (what, path) = if libc::chdir(a.cwd) == 0 {
            libc::execve(a.prog, a.argv, a.envp);
            (&b"mig: cannot run "[..], a.prog)
        } else {
            (&b"mig: cannot enter the working directory "[..], a.cwd)
        };
        // Said with what is at hand: no allocation, no locale.
        let why = exec_error(*libc::__errno_location());
        let path = std::ffi::CStr::from_ptr(path).to_bytes();
        for part in [what, path, b": ", why, b"\n"] {
            libc::write(2, part.as_ptr().cast(), part.len());
        }
        libc::_exit(127)
    }
}

/// Why an `execve` (or the `chdir` before it) failed, for a child that may
/// not allocate: the common reasons, in words.
fn exec_error(errno: i32) -> &'static [u8] {
    match errno {
        libc::ENOENT => b"no such file or directory",
        libc::EACCES => b"permission denied (not executable, or a directory on the way is closed)",
        libc::ENOEXEC => b"not an executable this host can run (wrong format or architecture)",
        libc::ENOTDIR => b"a part of the path is not a directory",
        libc::ETXTBSY => b"the file is being written",
        libc::E2BIG => b"arguments and environment too long",
        libc::ENOMEM => b"out of memory",
        libc::ELOOP => b"too many symbolic links",
        libc::ENAMETOOLONG => b"path too long",
        libc::EISDIR => b"it is a directory",
        libc::ELIBBAD => b"its interpreter or a library is damaged",
        _ => b"exec failed",
    }
}

/// Socket buffers for a pair that carries messages: 1 MiB each way (the
/// kernel caps it at net.core.wmem_max), so streaming takes fewer wake-ups
/// than with the default of about 200 KiB. Best effort.
pub fn roomy(a: &OwnedFd, b: &OwnedFd) {
    use nix::sys::socket::{setsockopt, sockopt};
    for fd in [a, b] {
        let _ = setsockopt(fd, sockopt::SndBuf, &(1 << 20));
        let _ = setsockopt(fd, sockopt::RcvBuf, &(1 << 20));
    }
}

fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own; no memory is passed.
    unsafe {
        let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        if fl < 0 || libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Put processes in the SCHED_IDLE class (best effort): they run only on
/// a processor nothing else wants.
pub fn idle_class(pids: &[i32]) {
    let param = libc::sched_param { sched_priority: 0 };
    for &p in pids {
        // SAFETY: sched_setscheduler reads the parameter it is given.
        unsafe { libc::sched_setscheduler(p, libc::SCHED_IDLE, &param) };
    }
}

/// Put processes back in the class and niceness VPs run at (best effort).
pub fn vp_class(pids: &[i32], how: &Treatment) {
    if how.idle {
        return idle_class(pids);
    }
    let param = libc::sched_param { sched_priority: 0 };
    for &p in pids {
        // SAFETY: both calls only read their arguments.
        unsafe {
            libc::sched_setscheduler(p, libc::SCHED_OTHER, &param);
            libc::setpriority(libc::PRIO_PROCESS, p as libc::id_t, how.nice);
        }
    }
}

/// Kill a VP's whole process group.
pub fn kill(pid: i32) {
    signal(pid, Signal::SIGKILL);
}

/// Is process `pid` stopped (state T in /proc)?
pub fn is_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rfind(')')
                .map(|i| s[i + 1..].trim_start().starts_with('T'))
        })
        .unwrap_or(false)
}

/// Send `sig` to a VP's process group (the VP and its children).
pub fn signal(pid: i32, sig: Signal) {
    let _ = killpg(Pid::from_raw(pid), sig);
}

/// Send signal number `sig` (any, real-time ones too) to process `pid`.
pub fn signal_number(pid: i32, sig: i32) {
    // SAFETY: kill(2) has no memory effects; a stale pid is an error only.
    unsafe { libc::kill(pid, sig) };
}

/// The process group of process `pid`, if it still exists.
pub fn process_group(pid: i32) -> Option<i32> {
    nix::unistd::getpgid(Some(Pid::from_raw(pid)))
        .ok()
        .map(Pid::as_raw)
}

/// Send `sig` to the VP's own process only (not its children).
pub fn signal_one(pid: i32, sig: Signal) {
    let _ = nix::sys::signal::kill(Pid::from_raw(pid), sig);
}

/// Reap those of `pids` (children of this process) that ended: each with
/// its raw wait status and the CPU time (ms) it used. Only the pids named
/// are waited for: a wait for any child would also take the ptrace stops
/// of a process the checkpointer thread is saving (see `transparent`), and
/// the exits of children other parts of the daemon wait for themselves.
pub fn reap(pids: impl IntoIterator<Item = i32>) -> Vec<(i32, i32, Option<u64>)> {
    let mut out = Vec::new();
    for pid in pids {
        let mut status = 0;
        // SAFETY: wait4 fills the status and usage it is given.
        let (got, usage) = unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            let got = libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage);
            (got, usage)
        };
        if got != pid || !(libc::WIFEXITED(status) || libc::WIFSIGNALED(status)) {
            continue;
        }
        let ms = |t: libc::timeval| t.tv_sec.max(0) as u64 * 1000 + t.tv_usec.max(0) as u64 / 1000;
        out.push((pid, status, Some(ms(usage.ru_utime) + ms(usage.ru_stime))));
    }
    out
}

/// A process's end from its raw wait status.
pub fn exit_info(status: i32, cpu_ms: Option<u64>) -> ExitInfo {
    let (code, signal) = if libc::WIFEXITED(status) {
        (Some(libc::WEXITSTATUS(status)), None)
    } else {
        (None, Some(libc::WTERMSIG(status)))
    };
    ExitInfo {
        code,
        signal,
        error: None,
        cpu_ms,
    }
}

/// Read what a pipe has, up to `limit` bytes (a read at a time, 16 KiB):
/// complete lines, where the read stopped, and the bytes taken.
pub fn read_lines(p: &mut Pipe, limit: usize) -> (Vec<String>, Drained, usize) {
    let mut lines = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let mut taken = 0;
    let drained = loop {
        if taken >= limit {
            break Drained::More;
        }
        match p.file.read(&mut buf) {
            Ok(0) => break Drained::Eof,
            Ok(n) => {
                taken += n;
                p.partial.extend_from_slice(&buf[..n]);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break Drained::Empty,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break Drained::Eof,
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
    if drained == Drained::Eof && !p.partial.is_empty() {
        lines.push(String::from_utf8_lossy(&p.partial).into_owned());
        p.partial.clear();
    }
    (lines, drained, taken)
}

/// Where a read of a pipe stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drained {
    /// Nothing more just now.
    Empty,
    /// Its share of the turn was taken: more may wait (read it next turn).
    More,
    /// The writers closed it (or it failed).
    Eof,
}

/// The VPs of this host, by Tid and pid.
#[derive(Debug, Default)]
pub struct Vps {
    /// By Tid.
    pub by_tid: HashMap<Tid, LocalVp>,
    /// Pid to Tid.
    pub by_pid: HashMap<i32, Tid>,
}
