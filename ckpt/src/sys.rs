//! The unsafe edge: ptrace requests, system calls injected into a stopped
//! thread, reads and writes of another process's memory, `kcmp` (what two
//! processes share), and reading a pipe's bytes without taking them
//! (`tee`). Every function here is one kernel interface wrapped so that the
//! rest of the crate is safe code; every failure names the call and the
//! thread. (The other unsafe edge, the child side of the `clone` that
//! makes a pid namespace, is in `ns`.)
//!
//! Injection, as CRIU's compel does it: the thread's registers are set so
//! that it sits on a `syscall` instruction (one found in its vDSO, so that
//! nothing of the program's own memory is written) with the call's number
//! and arguments, `PTRACE_SYSCALL` takes it to the call's entry and exit
//! stops, and `rax` at the exit stop is the answer. The caller puts the
//! registers back. `orig_rax` is set to -1 so that the kernel does not treat
//! the resumption as the restart of a call interrupted by the stop. A call
//! that makes a process or thread (`clone3`) reports the new one's id as
//! the caller sees it through the ptrace event on the way; one that ends
//! the process ([`Injector::end_as`]) leaves it a zombie for its parent.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// A failed system call or ptrace request.
#[derive(Debug, thiserror::Error)]
#[error("{call} on pid {pid}: {source}")]
pub struct SysError {
    /// The call (and its argument when that helps).
    pub call: String,
    /// The thread or process it was about.
    pub pid: i32,
    /// The kernel's answer.
    #[source]
    pub source: io::Error,
}

fn err(call: impl Into<String>, pid: i32) -> SysError {
    SysError {
        call: call.into(),
        pid,
        source: io::Error::last_os_error(),
    }
}

/// `NT_X86_XSTATE`: the FPU, SSE, AVX and AVX-512 state.
pub const NT_X86_XSTATE: libc::c_int = 0x202;
const PTRACE_GET_RSEQ_CONFIGURATION: libc::c_uint = 0x420f;

/// The 27 words of `user_regs_struct`, by index.
pub mod reg {
    /// rax.
    pub const RAX: usize = 10;
    /// rdx (third argument).
    pub const RDX: usize = 12;
    /// rsi (second argument).
    pub const RSI: usize = 13;
    /// rdi (first argument).
    pub const RDI: usize = 14;
    /// orig_rax: the number of the call the thread is in, or -1.
    pub const ORIG_RAX: usize = 15;
    /// rip.
    pub const RIP: usize = 16;
    /// eflags.
    pub const EFLAGS: usize = 18;
    /// fs_base (the thread pointer).
    pub const FS_BASE: usize = 21;
    /// r12.
    pub const R12: usize = 3;
    /// r10 (fourth argument).
    pub const R10: usize = 7;
    /// r9 (sixth argument).
    pub const R9: usize = 8;
    /// r8 (fifth argument).
    pub const R8: usize = 9;
    /// Number of words.
    pub const COUNT: usize = 27;
}

/// Registers as words.
pub type Regs = [u64; reg::COUNT];

fn ptrace(req: libc::c_uint, pid: i32, addr: usize, data: usize) -> libc::c_long {
    // SAFETY: every request passed here takes `addr` and `data` as integers
    // or as pointers to buffers the callers own and size for that request.
    unsafe {
        libc::ptrace(
            req,
            pid,
            addr as *mut libc::c_void,
            data as *mut libc::c_void,
        )
    }
}

/// Attaches to a thread without stopping it (`PTRACE_SEIZE`).
pub fn seize(tid: i32, options: i32) -> Result<(), SysError> {
    if ptrace(libc::PTRACE_SEIZE, tid, 0, options as usize) < 0 {
        return Err(err("PTRACE_SEIZE", tid));
    }
    Ok(())
}

/// Sets ptrace options on a tracee.
pub fn set_options(tid: i32, options: i32) -> Result<(), SysError> {
    if ptrace(libc::PTRACE_SETOPTIONS, tid, 0, options as usize) < 0 {
        return Err(err("PTRACE_SETOPTIONS", tid));
    }
    Ok(())
}

/// Asks a seized thread to stop (`PTRACE_INTERRUPT`).
pub fn interrupt(tid: i32) -> Result<(), SysError> {
    if ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0) < 0 {
        return Err(err("PTRACE_INTERRUPT", tid));
    }
    Ok(())
}

/// Detaches, delivering `sig` (0 for none).
pub fn detach(tid: i32, sig: i32) -> Result<(), SysError> {
    if ptrace(libc::PTRACE_DETACH, tid, 0, sig as usize) < 0 {
        return Err(err("PTRACE_DETACH", tid));
    }
    Ok(())
}

/// Resumes to the next system call stop (`PTRACE_SYSCALL`).
pub fn cont_syscall(tid: i32, sig: i32) -> Result<(), SysError> {
    if ptrace(libc::PTRACE_SYSCALL, tid, 0, sig as usize) < 0 {
        return Err(err("PTRACE_SYSCALL", tid));
    }
    Ok(())
}

/// How a thread stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stop {
    /// The stop signal (`SIGTRAP | 0x80` for a system call stop).
    pub sig: i32,
    /// The ptrace event (`status >> 16`), 0 for none.
    pub event: i32,
}

/// Waits for `tid` to stop; an exit is an error, and is left to be
/// collected: the tracer may be a thread of the process's own parent (a
/// daemon saving its child), whose wait for that child must still get its
/// end and status.
pub fn wait_stop(tid: i32) -> Result<Stop, SysError> {
    if let Some(end) = peek_end(tid)? {
        if ours(tid) {
            return Err(SysError {
                call: format!("waitpid (the process {end})"),
                pid: tid,
                source: io::Error::other("no longer there"),
            });
        }
        // Another's child: collecting it here only lets its parent have
        // it (a tracer that never does holds it from its parent for good).
    }
    let mut status = 0;
    loop {
        // SAFETY: waitpid writes one int to `status`, which we own.
        let r = unsafe { libc::waitpid(tid, &mut status, libc::__WALL) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(SysError {
                call: "waitpid".into(),
                pid: tid,
                source: e,
            });
        }
        break;
    }
    if libc::WIFSTOPPED(status) {
        return Ok(Stop {
            sig: libc::WSTOPSIG(status),
            event: status >> 16,
        });
    }
    let what = if libc::WIFEXITED(status) {
        format!("exited with status {}", libc::WEXITSTATUS(status))
    } else {
        format!("killed by signal {}", libc::WTERMSIG(status))
    };
    Err(SysError {
        call: format!("waitpid (the process {what})"),
        pid: tid,
        source: io::Error::other("no longer there"),
    })
}

/// Is `tid` a child process of this process, its main thread (its
/// parent's wait would be ours)? Another thread's end is the tracer's to
/// collect, or its process's main thread is never released.
fn ours(tid: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{tid}/status")) else {
        return false;
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<i32>().ok())
    };
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    field("Tgid:") == Some(tid) && field("PPid:") == Some(me)
}

/// Waits for `tid` to change state, without collecting it: its end, if
/// it ended (the zombie stays for its parent), else `None` (it stopped).
fn peek_end(tid: i32) -> Result<Option<String>, SysError> {
    loop {
        // SAFETY: a zeroed siginfo_t is valid; waitid writes into ours.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid with WNOWAIT only reads the state; `info` is ours.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                tid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WSTOPPED | libc::WNOWAIT | libc::__WALL,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(SysError {
                call: "waitid".into(),
                pid: tid,
                source: e,
            });
        }
        // SAFETY: waitid filled `info` for a child's state change.
        let status = unsafe { info.si_status() };
        return Ok(match info.si_code {
            libc::CLD_EXITED => Some(format!("exited with status {status}")),
            libc::CLD_KILLED | libc::CLD_DUMPED => Some(format!("killed by signal {status}")),
            _ => None,
        });
    }
}

fn regset_get(tid: i32, kind: libc::c_int, buf: &mut [u8]) -> Result<usize, SysError> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let iov_addr = &mut iov as *mut libc::iovec as usize;
    if ptrace(libc::PTRACE_GETREGSET, tid, kind as usize, iov_addr) < 0 {
        return Err(err(format!("PTRACE_GETREGSET {kind:#x}"), tid));
    }
    Ok(iov.iov_len)
}

fn regset_set(tid: i32, kind: libc::c_int, buf: &[u8]) -> Result<(), SysError> {
    let mut iov = libc::iovec {
        iov_base: buf.as_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let iov_addr = &mut iov as *mut libc::iovec as usize;
    if ptrace(libc::PTRACE_SETREGSET, tid, kind as usize, iov_addr) < 0 {
        return Err(err(format!("PTRACE_SETREGSET {kind:#x}"), tid));
    }
    Ok(())
}

/// The general registers.
pub fn get_regs(tid: i32) -> Result<Regs, SysError> {
    let mut buf = [0u8; reg::COUNT * 8];
    let n = regset_get(tid, libc::NT_PRSTATUS, &mut buf)?;
    if n != buf.len() {
        return Err(SysError {
            call: "PTRACE_GETREGSET NT_PRSTATUS".into(),
            pid: tid,
            source: io::Error::other(format!("{n} bytes of registers")),
        });
    }
    let mut r = [0u64; reg::COUNT];
    for (w, c) in r.iter_mut().zip(buf.chunks_exact(8)) {
        *w = u64::from_ne_bytes(c.try_into().unwrap_or_default());
    }
    Ok(r)
}

/// Sets the general registers.
pub fn set_regs(tid: i32, r: &Regs) -> Result<(), SysError> {
    let buf: Vec<u8> = r.iter().flat_map(|w| w.to_ne_bytes()).collect();
    regset_set(tid, libc::NT_PRSTATUS, &buf)
}

/// The extended state (`NT_X86_XSTATE`).
pub fn get_xstate(tid: i32) -> Result<Vec<u8>, SysError> {
    let mut buf = vec![0u8; 64 * 1024];
    let n = regset_get(tid, NT_X86_XSTATE, &mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

/// Sets the extended state.
pub fn set_xstate(tid: i32, x: &[u8]) -> Result<(), SysError> {
    regset_set(tid, NT_X86_XSTATE, x)
}

/// The blocked-signal mask.
pub fn get_sigmask(tid: i32) -> Result<u64, SysError> {
    let mut m = 0u64;
    if ptrace(libc::PTRACE_GETSIGMASK, tid, 8, &mut m as *mut u64 as usize) < 0 {
        return Err(err("PTRACE_GETSIGMASK", tid));
    }
    Ok(m)
}

/// Sets the blocked-signal mask.
pub fn set_sigmask(tid: i32, m: u64) -> Result<(), SysError> {
    if ptrace(libc::PTRACE_SETSIGMASK, tid, 8, &m as *const u64 as usize) < 0 {
        return Err(err("PTRACE_SETSIGMASK", tid));
    }
    Ok(())
}

#[repr(C)]
struct PeekSiginfoArgs {
    off: u64,
    flags: u32,
    nr: i32,
}

/// Pending signals (`siginfo_t`s of 128 bytes), the thread's own or (with
/// `shared`) the process's.
pub fn pending(tid: i32, shared: bool) -> Result<Vec<Vec<u8>>, SysError> {
    let mut out = Vec::new();
    loop {
        let args = PeekSiginfoArgs {
            off: out.len() as u64,
            flags: if shared {
                libc::PTRACE_PEEKSIGINFO_SHARED
            } else {
                0
            },
            nr: 1,
        };
        let mut buf = [0u8; 128];
        let n = ptrace(
            libc::PTRACE_PEEKSIGINFO,
            tid,
            &args as *const PeekSiginfoArgs as usize,
            buf.as_mut_ptr() as usize,
        );
        if n < 0 {
            return Err(err("PTRACE_PEEKSIGINFO", tid));
        }
        if n == 0 {
            return Ok(out);
        }
        out.push(buf.to_vec());
    }
}

#[repr(C)]
#[derive(Default)]
struct RseqConfig {
    ptr: u64,
    size: u32,
    signature: u32,
    flags: u32,
    pad: u32,
}

/// The thread's rseq registration: (address, length, signature).
pub fn rseq(tid: i32) -> Result<Option<(u64, u32, u32)>, SysError> {
    let mut c = RseqConfig::default();
    let r = ptrace(
        PTRACE_GET_RSEQ_CONFIGURATION,
        tid,
        std::mem::size_of::<RseqConfig>(),
        &mut c as *mut RseqConfig as usize,
    );
    if r < 0 {
        return Err(err("PTRACE_GET_RSEQ_CONFIGURATION", tid));
    }
    Ok((c.ptr != 0).then_some((c.ptr, c.size, c.signature)))
}

/// The thread's robust futex list: (head, length).
pub fn robust_list(tid: i32) -> Result<(u64, u64), SysError> {
    let mut head = 0u64;
    let mut len = 0u64;
    // SAFETY: get_robust_list writes a pointer and a size_t to the two
    // locations, which we own.
    let r = unsafe {
        libc::syscall(
            libc::SYS_get_robust_list,
            tid,
            &mut head as *mut u64,
            &mut len as *mut u64,
        )
    };
    if r < 0 {
        return Err(err("get_robust_list", tid));
    }
    Ok((head, len))
}

/// A resource limit of a process: (soft, hard).
pub fn get_rlimit(pid: i32, res: u32) -> Result<(u64, u64), SysError> {
    let mut old = libc::rlimit64 {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit64 with a null new limit only writes `old`, ours.
    let r = unsafe { libc::prlimit64(pid, res as _, std::ptr::null(), &mut old) };
    if r < 0 {
        return Err(err(format!("prlimit (get resource {res})"), pid));
    }
    Ok((old.rlim_cur, old.rlim_max))
}

/// Sets a resource limit of a process.
pub fn set_rlimit(pid: i32, res: u32, soft: u64, hard: u64) -> Result<(), SysError> {
    let new = libc::rlimit64 {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: prlimit64 only reads `new`, ours; the old limit is not asked.
    let r = unsafe { libc::prlimit64(pid, res as _, &new, std::ptr::null_mut()) };
    if r < 0 {
        return Err(err(format!("prlimit (set resource {res})"), pid));
    }
    Ok(())
}

/// Sends a signal to a process.
pub fn kill(pid: i32, sig: i32) -> Result<(), SysError> {
    // SAFETY: kill takes integers only.
    if unsafe { libc::kill(pid, sig) } < 0 {
        return Err(err(format!("kill {sig}"), pid));
    }
    Ok(())
}

/// What [`kcmp`] compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kcmp {
    /// One open file (file description): descriptor `a` of the first,
    /// `b` of the second.
    File(i32, i32),
    /// The address space (`CLONE_VM`).
    Vm,
    /// The descriptor table (`CLONE_FILES`).
    Files,
    /// Working directory, root and umask (`CLONE_FS`).
    Fs,
    /// Signal handlers (`CLONE_SIGHAND`).
    Sighand,
}

/// Whether two processes share the kernel object `what` (`kcmp`).
pub fn kcmp(pid1: i32, pid2: i32, what: Kcmp) -> Result<bool, SysError> {
    let (kind, a, b) = match what {
        Kcmp::File(a, b) => (0, a as u64, b as u64),
        Kcmp::Vm => (1, 0, 0),
        Kcmp::Files => (2, 0, 0),
        Kcmp::Fs => (3, 0, 0),
        Kcmp::Sighand => (4, 0, 0),
    };
    // SAFETY: kcmp takes integers only.
    let r = unsafe { libc::syscall(libc::SYS_kcmp, pid1, pid2, kind, a, b) };
    if r < 0 {
        return Err(err(format!("kcmp {what:?} with pid {pid2}"), pid1));
    }
    Ok(r == 0)
}

/// The message of the ptrace event a tracee stopped at (a new child's
/// pid, as the caller sees it, for a fork or clone event).
pub fn event_msg(tid: i32) -> Result<u64, SysError> {
    let mut m: libc::c_ulong = 0;
    if ptrace(
        libc::PTRACE_GETEVENTMSG,
        tid,
        0,
        &mut m as *mut libc::c_ulong as usize,
    ) < 0
    {
        return Err(err("PTRACE_GETEVENTMSG", tid));
    }
    Ok(m)
}

/// `struct clone_args` (the version with `set_tid`, 80 bytes) for `clone3`
/// of a process or thread with `flags`, `exit_signal`, and the pid wanted
/// in its namespace as the one `set_tid` entry at `set_tid_at`.
pub fn clone_args(flags: u64, exit_signal: u64, set_tid_at: u64) -> [u8; 80] {
    let words: [u64; 10] = [
        flags,
        0,           // pidfd
        0,           // child_tid
        0,           // parent_tid
        exit_signal, // exit_signal
        0,           // stack
        0,           // stack_size
        0,           // tls
        set_tid_at,  // set_tid
        1,           // set_tid_size
    ];
    let mut b = [0u8; 80];
    for (c, w) in b.chunks_exact_mut(8).zip(words) {
        c.copy_from_slice(&w.to_le_bytes());
    }
    b
}

/// The bytes waiting in the pipe of `pid`'s descriptor `fd` and its
/// capacity, read without taking them: the pipe is opened anew through
/// `/proc` and its buffers duplicated with `tee(2)` into a pipe of ours.
pub fn peek_pipe(pid: i32, fd: i32) -> Result<(u32, Vec<u8>), SysError> {
    use std::io::Read;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::fs::OpenOptionsExt;
    let call = |what: &str, source: io::Error| SysError {
        call: format!("{what} (pipe of fd {fd})"),
        pid,
        source,
    };
    let theirs = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(format!("/proc/{pid}/fd/{fd}"))
        .map_err(|e| call("open /proc/PID/fd", e))?;
    // SAFETY: fcntl and ioctl on a descriptor we own; FIONREAD writes one
    // int, ours.
    let (size, waiting) = unsafe {
        let size = libc::fcntl(theirs.as_raw_fd(), libc::F_GETPIPE_SZ);
        let mut n: libc::c_int = 0;
        let r = libc::ioctl(theirs.as_raw_fd(), libc::FIONREAD, &mut n);
        (size, if r < 0 { -1 } else { n })
    };
    if size < 0 || waiting < 0 {
        return Err(call("F_GETPIPE_SZ/FIONREAD", io::Error::last_os_error()));
    }
    if waiting == 0 {
        return Ok((size as u32, Vec::new()));
    }
    let mut ends = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `ends`, which we then own.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } < 0 {
        return Err(call("pipe2", io::Error::last_os_error()));
    }
    // SAFETY: both are ours, just made.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
    // SAFETY: fcntl and tee on descriptors we own.
    let copied = unsafe {
        if libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, size) < 0 {
            return Err(call("F_SETPIPE_SZ", io::Error::last_os_error()));
        }
        libc::tee(
            theirs.as_raw_fd(),
            w.as_raw_fd(),
            waiting as usize,
            libc::SPLICE_F_NONBLOCK,
        )
    };
    if copied != waiting as isize {
        return Err(call(
            &format!("tee ({copied} of {waiting} bytes)"),
            io::Error::last_os_error(),
        ));
    }
    drop(w);
    let mut data = Vec::with_capacity(waiting as usize);
    std::fs::File::from(r)
        .read_to_end(&mut data)
        .map_err(|e| call("read", e))?;
    Ok((size as u32, data))
}

/// The bytes waiting to be read in the stream socket of `pid`'s descriptor
/// `fd`, looked at without taking them, and the descriptors that came with
/// them, in order (copies lent by the peek). The socket is duplicated into
/// this process (`pidfd_getfd(2)`, which needs the right to trace `pid`)
/// and read with `MSG_PEEK` from a peek offset (`SO_PEEK_OFF`, put back
/// after): a peek stops where bytes carrying descriptors begin, and the
/// offset lets the next go on from there. What `pid` reads next is
/// unchanged.
pub fn peek_socket(pid: i32, fd: i32) -> Result<(Vec<u8>, Vec<std::os::fd::OwnedFd>), SysError> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let call = |what: &str| err(format!("{what} (socket of fd {fd})"), pid);
    let sock = borrow_fd(pid, fd)?;
    let mut kind: libc::c_int = 0;
    let mut kind_len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    let mut waiting: libc::c_int = 0;
    // SAFETY: getsockopt writes one int (and its length) into ours; the
    // ioctl (FIONREAD, SIOCINQ for a socket) writes one int, ours.
    let (r1, r2) = unsafe {
        (
            libc::getsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_TYPE,
                (&mut kind as *mut libc::c_int).cast(),
                &mut kind_len,
            ),
            libc::ioctl(sock.as_raw_fd(), libc::FIONREAD, &mut waiting),
        )
    };
    if r1 < 0 {
        return Err(call("getsockopt SO_TYPE"));
    }
    if kind != libc::SOCK_STREAM {
        return Err(SysError {
            call: format!("peek (fd {fd})"),
            pid,
            source: io::Error::new(io::ErrorKind::InvalidInput, "not a stream socket"),
        });
    }
    if r2 < 0 {
        return Err(call("ioctl FIONREAD"));
    }
    if waiting <= 0 {
        return Ok((Vec::new(), Vec::new()));
    }
    let peek_off = |off: libc::c_int| {
        // SAFETY: setsockopt reads one int of ours.
        unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEEK_OFF,
                (&off as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        }
    };
    if peek_off(0) < 0 {
        return Err(call("setsockopt SO_PEEK_OFF"));
    }
    let mut data = vec![0u8; waiting as usize];
    let mut got = 0;
    let mut fds = Vec::new();
    // Room for the most descriptors one message may carry (SCM_MAX_FD).
    const MAX_FDS: usize = 253;
    // SAFETY: CMSG_SPACE computes a size from an integer.
    let space = unsafe { libc::CMSG_SPACE((MAX_FDS * std::mem::size_of::<libc::c_int>()) as u32) };
    let mut control = vec![0u8; space as usize];
    let result = loop {
        if got == data.len() {
            break Ok(());
        }
        let mut iov = libc::iovec {
            iov_base: data[got..].as_mut_ptr().cast(),
            iov_len: data.len() - got,
        };
        // SAFETY: a zeroed msghdr is valid; its pointers are set below.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = control.len();
        // SAFETY: `msg` points at the rest of `data` and at `control`,
        // both alive and as long as it says, for the call.
        let n = unsafe {
            libc::recvmsg(
                sock.as_raw_fd(),
                &mut msg,
                libc::MSG_PEEK | libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
            )
        };
        if n < 0 {
            break Err(call("recvmsg MSG_PEEK"));
        }
        // SAFETY: the CMSG_* macros walk the control buffer the kernel
        // filled (`msg_controllen` was set by recvmsg to what it wrote);
        // each SCM_RIGHTS header is followed by its descriptors, which are
        // ours (lent by the peek).
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let bytes = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                    let k = bytes / std::mem::size_of::<libc::c_int>();
                    let at = libc::CMSG_DATA(c).cast::<libc::c_int>();
                    for i in 0..k {
                        fds.push(OwnedFd::from_raw_fd(at.add(i).read_unaligned()));
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            break Err(SysError {
                call: format!("recvmsg MSG_PEEK (socket of fd {fd})"),
                pid,
                source: io::Error::other("more descriptors than one message carries"),
            });
        }
        if n == 0 {
            break Err(SysError {
                call: format!("recvmsg MSG_PEEK (socket of fd {fd})"),
                pid,
                source: io::Error::other(format!("{got} of {waiting} bytes")),
            });
        }
        got += n as usize;
    };
    peek_off(-1);
    result.map(|()| (data, fds))
}

/// Shuts the socket on `pid`'s descriptor `fd` for reading (`shutdown(2)`
/// through a duplicate): its peer's writes fail from then on (`EPIPE`);
/// what it holds can still be read.
pub fn shut_reading(pid: i32, fd: i32) -> Result<(), SysError> {
    use std::os::fd::AsRawFd;
    let sock = borrow_fd(pid, fd)?;
    // SAFETY: shutdown on our duplicate of the socket.
    if unsafe { libc::shutdown(sock.as_raw_fd(), libc::SHUT_RD) } < 0 {
        return Err(err(format!("shutdown (socket of fd {fd})"), pid));
    }
    Ok(())
}

/// A duplicate of `pid`'s descriptor `fd` in this process
/// (`pidfd_getfd(2)`, which needs the right to trace `pid`).
pub fn borrow_fd(pid: i32, fd: i32) -> Result<std::os::fd::OwnedFd, SysError> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let call = |what: &str| err(format!("{what} (fd {fd})"), pid);
    // SAFETY: pidfd_open takes integers and returns a new descriptor,
    // which we then own.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if pidfd < 0 {
        return Err(call("pidfd_open"));
    }
    // SAFETY: just made, ours alone.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as i32) };
    // SAFETY: pidfd_getfd takes integers and returns a new descriptor (a
    // duplicate of the other process's), which we then own.
    let dup = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if dup < 0 {
        return Err(call("pidfd_getfd"));
    }
    // SAFETY: just made, ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(dup as i32) })
}

/// Sets bit `bit` (0-31) of the aligned 32-bit word at `addr` in the
/// memory of the thread `inj` runs in, atomically against every other
/// process that maps it (a futex operation, `FUTEX_WAKE_OP` waking no one:
/// the kernel's own atomic OR on the word).
pub fn set_bit(inj: &Injector, addr: u64, bit: u32) -> Result<(), SysError> {
    const FUTEX_WAKE_OP: u64 = 5;
    const FUTEX_OP_OR: u32 = 2;
    const FUTEX_OP_OPARG_SHIFT: u32 = 8;
    if bit > 31 || !addr.is_multiple_of(4) {
        return Err(SysError {
            call: format!("set bit {bit} at {addr:#x}"),
            pid: inj.tid,
            source: io::Error::new(io::ErrorKind::InvalidInput, "not an aligned 32-bit word"),
        });
    }
    // FUTEX_OP(op, oparg, cmp = EQ, cmparg = 0): *addr |= 1 << bit.
    let op = ((FUTEX_OP_OR | FUTEX_OP_OPARG_SHIFT) << 28) | ((bit & 0xfff) << 12);
    inj.ok(
        &format!("futex FUTEX_WAKE_OP (set bit {bit} at {addr:#x})"),
        libc::SYS_futex,
        &[addr, FUTEX_WAKE_OP, 0, 0, addr, op as u64],
    )?;
    Ok(())
}

/// Reads `buf.len()` bytes at `addr` of `pid` with `process_vm_readv`
/// (readable memory only: one copy, straight into `buf`).
pub fn vm_read(pid: i32, addr: u64, buf: &mut [u8]) -> Result<(), SysError> {
    let mut done = 0;
    while done < buf.len() {
        let local = libc::iovec {
            iov_base: buf[done..].as_mut_ptr().cast(),
            iov_len: buf.len() - done,
        };
        let remote = libc::iovec {
            iov_base: (addr + done as u64) as *mut libc::c_void,
            iov_len: buf.len() - done,
        };
        // SAFETY: the local iovec covers the rest of `buf`, which we hold
        // mutably; the remote one is only an address in the other process,
        // which the kernel checks.
        let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        if n <= 0 {
            return Err(err(
                format!("process_vm_readv at {:#x}", addr + done as u64),
                pid,
            ));
        }
        done += n as usize;
    }
    Ok(())
}

/// Another process's memory through `/proc/PID/mem`, which also reaches
/// pages the process may not read or write itself (`PROT_NONE`, read-only).
pub struct Mem {
    file: File,
    pid: i32,
}

impl Mem {
    /// Opens `/proc/PID/mem` for reading and writing.
    pub fn open(pid: i32) -> Result<Mem, SysError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{pid}/mem"))
            .map_err(|source| SysError {
                call: "open /proc/PID/mem".into(),
                pid,
                source,
            })?;
        Ok(Mem { file, pid })
    }

    /// Reads at `addr`.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), SysError> {
        self.file
            .read_exact_at(buf, addr)
            .map_err(|source| SysError {
                call: format!("read /proc/PID/mem at {addr:#x}"),
                pid: self.pid,
                source,
            })
    }

    /// Writes at `addr`.
    pub fn write(&self, addr: u64, buf: &[u8]) -> Result<(), SysError> {
        self.file
            .write_all_at(buf, addr)
            .map_err(|source| SysError {
                call: format!("write /proc/PID/mem at {addr:#x}"),
                pid: self.pid,
                source,
            })
    }

    /// Reads a little-endian word.
    pub fn read_u64(&self, addr: u64) -> Result<u64, SysError> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }
}

/// A thread stopped under ptrace into which system calls are injected.
pub struct Injector {
    /// The thread.
    pub tid: i32,
    /// Address of a `syscall` instruction in its address space.
    pub syscall_at: u64,
    /// The registers injected calls start from (the thread's own).
    pub base: Regs,
}

impl Injector {
    /// Runs system call `nr` with `args` in the thread; returns `rax` (a
    /// negative errno on failure, as the kernel answers). The thread ends
    /// at the call's exit stop with its registers changed: the caller sets
    /// them back.
    pub fn call(&self, nr: i64, args: &[u64]) -> Result<i64, SysError> {
        self.call_seeing(nr, args).map(|(r, _)| r)
    }

    /// Sets the registers for call `nr` with `args`.
    fn set_up(&self, nr: i64, args: &[u64]) -> Result<(), SysError> {
        let mut r = self.base;
        r[reg::RIP] = self.syscall_at;
        r[reg::RAX] = nr as u64;
        r[reg::ORIG_RAX] = u64::MAX;
        // No single-stepping, no direction flag.
        r[reg::EFLAGS] &= !(0x100 | 0x400);
        let slots = [reg::RDI, reg::RSI, reg::RDX, reg::R10, reg::R8, reg::R9];
        for (slot, a) in slots.iter().zip(args) {
            r[*slot] = *a;
        }
        set_regs(self.tid, &r)
    }

    /// As [`Injector::call`], also giving the message of the first fork,
    /// vfork or clone event on the way (the new process's or thread's id
    /// as the caller sees it).
    fn call_seeing(&self, nr: i64, args: &[u64]) -> Result<(i64, Option<u64>), SysError> {
        self.set_up(nr, args)?;
        let name = format!("injected system call {nr}");
        // To the entry stop, then the exit stop; ptrace events on the way
        // (a clone's, an exec's) are passed.
        let mut entered = false;
        let mut event = None;
        loop {
            cont_syscall(self.tid, 0)?;
            let s = wait_stop(self.tid)?;
            if s.event != 0 {
                if matches!(
                    s.event,
                    libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK | libc::PTRACE_EVENT_CLONE
                ) && event.is_none()
                {
                    event = Some(event_msg(self.tid)?);
                }
                continue;
            }
            if !entered && s.sig == libc::SIGSTOP {
                // A SIGSTOP pending before the call (the process is
                // stopped anyway): dropped; every other signal is blocked.
                continue;
            }
            if s.sig != (libc::SIGTRAP | 0x80) {
                return Err(SysError {
                    call: name,
                    pid: self.tid,
                    source: io::Error::other(format!("stopped by signal {} instead", s.sig)),
                });
            }
            if entered {
                break;
            }
            entered = true;
        }
        let out = get_regs(self.tid)?;
        Ok((out[reg::RAX] as i64, event))
    }

    /// Runs a call that makes a process or thread (`clone`, `clone3`):
    /// its answer (the new id as the thread sees it) and the new id as the
    /// caller sees it.
    pub fn spawn(&self, what: &str, nr: i64, args: &[u64]) -> Result<(u64, i32), SysError> {
        let (r, event) = self.call_seeing(nr, args)?;
        if r < 0 && r > -4096 {
            return Err(SysError {
                call: format!("{what} (injected)"),
                pid: self.tid,
                source: io::Error::from_raw_os_error(-r as i32),
            });
        }
        let outer = event.ok_or_else(|| SysError {
            call: format!("{what} (injected)"),
            pid: self.tid,
            source: io::Error::other("no clone event"),
        })?;
        Ok((r as u64, outer as i32))
    }

    /// Makes the thread's process end as a child that exited with wait
    /// status `status` would (`exit_group`, or the signal it names
    /// delivered at its default), and takes the tracer's notice of it, so
    /// that it stays a zombie for its parent to wait for.
    pub fn end_as(&self, status: i32) -> Result<(), SysError> {
        let sig = status & 0x7f;
        if sig == 0 {
            self.set_up(libc::SYS_exit_group, &[((status >> 8) & 0xff) as u64])?;
        } else {
            set_sigmask(self.tid, !(1u64 << (sig - 1)))?;
            kill(self.tid, sig)?;
        }
        let mut deliver = 0;
        loop {
            if ptrace(libc::PTRACE_CONT, self.tid, 0, deliver as usize) < 0 {
                return Err(err("PTRACE_CONT", self.tid));
            }
            match wait_stop(self.tid) {
                Ok(s) => deliver = if s.sig == sig && s.event == 0 { sig } else { 0 },
                // Ended: the tracer has taken its notice.
                Err(_) => return Ok(()),
            }
        }
    }

    /// As [`Injector::call`], a negative answer made an error naming `what`.
    pub fn ok(&self, what: &str, nr: i64, args: &[u64]) -> Result<u64, SysError> {
        let r = self.call(nr, args)?;
        if r < 0 && r > -4096 {
            return Err(SysError {
                call: format!("{what} (injected)"),
                pid: self.tid,
                source: io::Error::from_raw_os_error(-r as i32),
            });
        }
        Ok(r as u64)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::process::Command;

    #[test]
    fn a_child_killed_while_its_stop_is_awaited_is_left_to_its_parents_wait() {
        let mut child = Command::new("sleep").arg("30").spawn().expect("sleep");
        let pid = child.id() as i32;
        super::seize(pid, 0).expect("seize");
        // SAFETY: kill on our own child, which has not been waited for.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let e = super::wait_stop(pid).expect_err("it ended");
        assert!(e.to_string().contains("killed by signal 9"), "{e}");
        let status = child.wait().expect("its parent still collects it");
        assert_eq!(status.signal(), Some(9));
    }

    #[test]
    fn a_child_that_exits_while_its_stop_is_awaited_keeps_its_status_for_its_parent() {
        // (No child of its own: its end would stop it with SIGCHLD.)
        let mut child = Command::new("perl")
            .args(["-e", "select(undef, undef, undef, 0.2); exit 7"])
            .spawn()
            .expect("perl");
        let pid = child.id() as i32;
        super::seize(pid, 0).expect("seize");
        let e = super::wait_stop(pid).expect_err("it ended");
        assert!(e.to_string().contains("exited with status 7"), "{e}");
        let status = child.wait().expect("its parent still collects it");
        assert_eq!(status.code(), Some(7));
    }
}
