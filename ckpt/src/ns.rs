//! A pid namespace of its own for a tree of processes, so that their pids
//! can be kept across a move: a shell waits for its children by pid.
//!
//! The namespace's init (pid 1 inside) is the crate's: a static program of
//! 114 bytes of code ([`init_program`]), run from a sealed memfd, that
//! reaps every process left to it and, when the tree's root (pid 2, or
//! the pid it is told at a restore) ends, writes the root's wait status to
//! its descriptor 3 and exits with the root's exit code (or 128 + the
//! signal that killed it). The caller's child is that init; the program
//! is init's first child. Why not the program itself as pid 1: a pid 1 gets
//! only the signals it has handlers for from inside its namespace, and only
//! SIGKILL and SIGSTOP from outside, so a `SIGTERM` from the caller, or a
//! `pvm_sendsig`, to a program without a handler would do nothing, and a
//! shell as pid 1 would wait for orphans it never made. Under the crate's
//! init the program keeps the signal semantics it has anywhere else. Why
//! not a fork of the caller as init: it would keep the caller's memory
//! alive (copy on write) for the life of the tree.
//!
//! What lives here: the init program, [`spawn_in_namespace`], the [`Tree`]
//! handle (stop, continue, signal, kill, wait), finding a namespace's
//! processes, and starting an init for a restore (`start_init`). Saving
//! and restoring trees live in `dump` and `restore`.
//!
//! The child side of the `clone` runs in a copy of the caller that may be
//! multi-threaded: it makes only async-signal-safe calls on data prepared
//! before the `clone` (no allocation), as after `fork`.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::{CString, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::proc;

/// The name of the init program's memfd (`/proc/PID/exe` of an init is
/// `/memfd:mig-init (deleted)`).
pub const INIT_NAME: &str = "mig-init";

/// Where init is loaded.
const BASE: u64 = 0x40_0000;

/// Init's code (x86-64). Registers at entry are zero but `rsp` (and
/// `r12`, which a restore sets to the root's pid; 0 means 2).
///
/// ```text
///  0: 48 83 ec 10           sub   rsp, 16             ; status at [rsp]
///  4: 45 85 e4              test  r12d, r12d
///  7: 75 06                 jnz   wait
///  9: 41 bc 02 00 00 00     mov   r12d, 2             ; the root
/// wait:
///  f: b8 3d 00 00 00        mov   eax, 61             ; wait4(-1, &status, __WALL, 0)
/// 14: 48 c7 c7 ff ff ff ff  mov   rdi, -1
/// 1b: 48 89 e6              mov   rsi, rsp
/// 1e: ba 00 00 00 40        mov   edx, 0x40000000
/// 23: 45 31 d2              xor   r10d, r10d
/// 26: 0f 05                 syscall
/// 28: 48 83 f8 fc           cmp   rax, -4             ; EINTR: again
/// 2c: 74 e1                 je    wait
/// 2e: 48 85 c0              test  rax, rax
/// 31: 78 33                 js    none                ; ECHILD: no root
/// 33: 44 39 e0              cmp   eax, r12d
/// 36: 75 d7                 jne   wait                ; an orphan: reaped
/// 38: b8 01 00 00 00        mov   eax, 1              ; write(3, &status, 4)
/// 3d: bf 03 00 00 00        mov   edi, 3
/// 42: 48 89 e6              mov   rsi, rsp
/// 45: ba 04 00 00 00        mov   edx, 4
/// 4a: 0f 05                 syscall
/// 4c: 8b 04 24              mov   eax, [rsp]
/// 4f: 89 c7                 mov   edi, eax
/// 51: 83 e7 7f              and   edi, 0x7f           ; the signal, if killed
/// 54: 74 08                 jz    exited
/// 56: 81 c7 80 00 00 00     add   edi, 128
/// 5c: eb 0d                 jmp   out
/// exited:
/// 5e: c1 e8 08              shr   eax, 8
/// 61: 0f b6 f8              movzx edi, al             ; the exit code
/// 64: eb 05                 jmp   out
/// none:
/// 66: bf 7f 00 00 00        mov   edi, 127
/// out:
/// 6b: b8 e7 00 00 00        mov   eax, 231            ; exit_group(edi)
/// 70: 0f 05                 syscall
/// ```
const CODE: [u8; 0x72] = [
    0x48, 0x83, 0xec, 0x10, 0x45, 0x85, 0xe4, 0x75, 0x06, 0x41, 0xbc, 0x02, 0x00, 0x00, 0x00, 0xb8,
    0x3d, 0x00, 0x00, 0x00, 0x48, 0xc7, 0xc7, 0xff, 0xff, 0xff, 0xff, 0x48, 0x89, 0xe6, 0xba, 0x00,
    0x00, 0x00, 0x40, 0x45, 0x31, 0xd2, 0x0f, 0x05, 0x48, 0x83, 0xf8, 0xfc, 0x74, 0xe1, 0x48, 0x85,
    0xc0, 0x78, 0x33, 0x44, 0x39, 0xe0, 0x75, 0xd7, 0xb8, 0x01, 0x00, 0x00, 0x00, 0xbf, 0x03, 0x00,
    0x00, 0x00, 0x48, 0x89, 0xe6, 0xba, 0x04, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x8b, 0x04, 0x24, 0x89,
    0xc7, 0x83, 0xe7, 0x7f, 0x74, 0x08, 0x81, 0xc7, 0x80, 0x00, 0x00, 0x00, 0xeb, 0x0d, 0xc1, 0xe8,
    0x08, 0x0f, 0xb6, 0xf8, 0xeb, 0x05, 0xbf, 0x7f, 0x00, 0x00, 0x00, 0xb8, 0xe7, 0x00, 0x00, 0x00,
    0x0f, 0x05,
];

/// The init program: an ELF header, one loadable segment (read and
/// execute) holding the headers and the code, entry at the code.
pub fn init_program() -> Vec<u8> {
    const EHDR: u64 = 64;
    const PHDR: u64 = 56;
    let total = EHDR + PHDR + CODE.len() as u64;
    let mut b = Vec::with_capacity(total as usize);
    // e_ident: magic, 64-bit, little-endian, version 1, System V.
    b.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0]);
    b.extend_from_slice(&[0; 8]);
    b.extend_from_slice(&2u16.to_le_bytes()); // e_type: executable
    b.extend_from_slice(&0x3eu16.to_le_bytes()); // e_machine: x86-64
    b.extend_from_slice(&1u32.to_le_bytes()); // e_version
    b.extend_from_slice(&(BASE + EHDR + PHDR).to_le_bytes()); // e_entry
    b.extend_from_slice(&EHDR.to_le_bytes()); // e_phoff
    b.extend_from_slice(&0u64.to_le_bytes()); // e_shoff
    b.extend_from_slice(&0u32.to_le_bytes()); // e_flags
    b.extend_from_slice(&(EHDR as u16).to_le_bytes()); // e_ehsize
    b.extend_from_slice(&(PHDR as u16).to_le_bytes()); // e_phentsize
    b.extend_from_slice(&1u16.to_le_bytes()); // e_phnum
    b.extend_from_slice(&[0; 6]); // e_shentsize, e_shnum, e_shstrndx
    b.extend_from_slice(&1u32.to_le_bytes()); // p_type: PT_LOAD
    b.extend_from_slice(&5u32.to_le_bytes()); // p_flags: R + X
    b.extend_from_slice(&0u64.to_le_bytes()); // p_offset
    b.extend_from_slice(&BASE.to_le_bytes()); // p_vaddr
    b.extend_from_slice(&BASE.to_le_bytes()); // p_paddr
    b.extend_from_slice(&total.to_le_bytes()); // p_filesz
    b.extend_from_slice(&total.to_le_bytes()); // p_memsz
    b.extend_from_slice(&0x1000u64.to_le_bytes()); // p_align
    b.extend_from_slice(&CODE);
    b
}

/// The init program in a sealed memfd of this process, made once.
fn init_fd() -> io::Result<RawFd> {
    static FD: OnceLock<OwnedFd> = OnceLock::new();
    if let Some(fd) = FD.get() {
        return Ok(fd.as_raw_fd());
    }
    const MFD_EXEC: libc::c_uint = 0x10;
    let name = CString::new(INIT_NAME).map_err(io::Error::other)?;
    let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    // SAFETY: memfd_create reads the name, ours; MFD_EXEC (Linux 6.3) asks
    // for an executable memfd where vm.memfd_noexec would refuse one, and
    // older kernels refuse the flag, so it is tried first.
    let mut raw = unsafe { libc::memfd_create(name.as_ptr(), flags | MFD_EXEC) };
    if raw < 0 {
        // SAFETY: as above.
        raw = unsafe { libc::memfd_create(name.as_ptr(), flags) };
    }
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just made, ours.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    File::from(fd.try_clone()?).write_all(&init_program())?;
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: fcntl on our descriptor.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(FD.get_or_init(|| fd).as_raw_fd())
}

/// Whether `pid` is an init made by this crate.
pub fn is_init(pid: i32) -> bool {
    std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|l| {
        l.as_os_str().as_bytes() == format!("/memfd:{INIT_NAME} (deleted)").as_bytes()
    })
}

/// A program to start in a namespace of its own.
#[derive(Debug, Default)]
pub struct Spawn {
    /// The program file (not looked up on `PATH`).
    pub program: PathBuf,
    /// Its arguments, `argv[0]` included (empty: the program's path).
    pub argv: Vec<OsString>,
    /// Its environment, `NAME=value` each.
    pub env: Vec<OsString>,
    /// Its working directory (the caller's if `None`).
    pub cwd: Option<PathBuf>,
    /// Its descriptors, on these numbers; it has no other.
    pub fds: BTreeMap<i32, OwnedFd>,
    /// The tree is killed (SIGKILL to its init) when the calling thread
    /// ends (`PR_SET_PDEATHSIG`).
    pub die_with_caller: bool,
    /// Files (a cgroup's `cgroup.procs`) the init writes `0` into before
    /// anything else, so that every process of the tree is born in that
    /// cgroup.
    pub join: Vec<RawFd>,
}

/// Where an init goes and how long it lives.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Place<'a> {
    /// SIGKILL when the calling thread ends.
    pub die_with_caller: bool,
    /// `cgroup.procs` files to write itself into.
    pub join: &'a [RawFd],
    /// A cgroup v2 directory to be born in (see `RestoreOptions::into`),
    /// and the `cgroup.procs` files written instead where the kernel
    /// cannot.
    pub into: Option<(RawFd, &'a [RawFd])>,
}

/// `struct clone_args` of `clone3` as of Linux 5.7
/// (`CLONE_ARGS_SIZE_VER2`), which the libc crate does not have.
#[repr(C)]
#[derive(Debug, Default)]
pub struct CloneArgs {
    /// `CLONE_*` flags.
    pub flags: u64,
    /// Where `CLONE_PIDFD` stores the pidfd.
    pub pidfd: u64,
    /// Where `CLONE_CHILD_SETTID` stores the child's tid.
    pub child_tid: u64,
    /// Where `CLONE_PARENT_SETTID` stores the child's tid.
    pub parent_tid: u64,
    /// The signal the parent gets when the child ends.
    pub exit_signal: u64,
    /// The lowest byte of the child's stack (0: the caller's, copied).
    pub stack: u64,
    /// Its size.
    pub stack_size: u64,
    /// With `CLONE_SETTLS`: the child's thread pointer.
    pub tls: u64,
    /// Pids to give the child in each pid namespace.
    pub set_tid: u64,
    /// How many.
    pub set_tid_size: u64,
    /// With `CLONE_INTO_CGROUP`: a descriptor of the cgroup v2 directory
    /// the child is born in.
    pub cgroup: u64,
}

/// `clone3`'s flag to be born in `CloneArgs::cgroup` (Linux 5.7).
pub const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Set once the kernel said it has no `clone3` or no `CLONE_INTO_CGROUP`.
static NO_CLONE_INTO: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A fork-like clone into a new pid namespace (no `CLONE_VM`, no new
/// stack: the child returns here too, with 0), born in the cgroup `into`
/// is open on if one is given: the pid or -1, and the error.
///
/// # Safety
/// As `fork`: in a multi-threaded caller the child may make only
/// async-signal-safe calls.
unsafe fn clone_ns(into: Option<RawFd>) -> (libc::c_long, io::Error) {
    let pid = match into {
        Some(dir) => {
            let args = CloneArgs {
                flags: libc::CLONE_NEWPID as u64 | CLONE_INTO_CGROUP,
                exit_signal: libc::SIGCHLD as u64,
                cgroup: dir as u64,
                ..CloneArgs::default()
            };
            // SAFETY: clone3 reads `args`, ours, of the size given; with
            // no stack the child runs on a copy of this one (the caller's
            // contract).
            unsafe {
                libc::syscall(
                    libc::SYS_clone3,
                    &args as *const CloneArgs,
                    std::mem::size_of::<CloneArgs>(),
                )
            }
        }
        // SAFETY: as above.
        None => unsafe {
            libc::syscall(
                libc::SYS_clone,
                (libc::CLONE_NEWPID | libc::SIGCHLD) as libc::c_ulong,
                0usize,
                0usize,
                0usize,
                0usize,
            )
        },
    };
    (pid, io::Error::last_os_error())
}

/// Why a namespace could not be made.
#[derive(Debug, thiserror::Error)]
pub enum NsError {
    /// A pid namespace needs `CAP_SYS_ADMIN`.
    #[error("making a pid namespace: {0} (it needs CAP_SYS_ADMIN; without it a tree cannot keep its pids)")]
    Namespace(#[source] io::Error),
    /// Starting init or the program failed.
    #[error("{what}: {source}")]
    Start {
        /// What.
        what: String,
        /// Why.
        #[source]
        source: io::Error,
    },
}

fn start_err(what: &str) -> impl Fn(io::Error) -> NsError + '_ {
    move |source| NsError::Start {
        what: what.into(),
        source,
    }
}

/// A tree of processes in a pid namespace of its own, under the crate's
/// init. The caller's child is the init ([`Tree::init`]); like a
/// [`std::process::Child`], dropping the handle neither kills nor reaps.
///
/// The caller signals the program with [`Tree::signal`], the whole tree
/// with [`Tree::signal_all`] (or `killpg` of the init's pid: init, the
/// program and every process that kept the group), stops it for a dump
/// with [`Tree::stop`] (every process, those in other groups too), and
/// reaps the init ([`Tree::wait`], or its own `waitpid` followed by
/// [`Tree::exit_status`]): the program's wait status comes through init.
#[derive(Debug)]
pub struct Tree {
    init: i32,
    program: Option<i32>,
    status: File,
}

impl Tree {
    /// The init's pid (the caller's child; its process group too).
    pub fn init(&self) -> i32 {
        self.init
    }

    /// The program's pid as the caller sees it, unless it had ended by the
    /// time the tree was made.
    pub fn program(&self) -> Option<i32> {
        self.program
    }

    /// The init and every process under it, parents first.
    pub fn processes(&self) -> io::Result<Vec<i32>> {
        descendants(self.init)
    }

    /// Stops every process of the tree ([`stop_tree`] of its init).
    pub fn stop(&self, limit: Duration) -> io::Result<()> {
        stop_tree(self.init, limit)
    }

    /// Continues every process of the tree.
    pub fn cont(&self) -> io::Result<()> {
        self.signal_all(libc::SIGCONT)
    }

    /// Sends `sig` to every process of the tree, init included (init dies
    /// only of SIGKILL and stops only on SIGSTOP).
    pub fn signal_all(&self, sig: i32) -> io::Result<()> {
        for p in self.processes()? {
            // SAFETY: kill takes integers only; a process gone is no error.
            unsafe { libc::kill(p, sig) };
        }
        Ok(())
    }

    /// Sends `sig` to the program (nothing if it has ended).
    pub fn signal(&self, sig: i32) -> io::Result<()> {
        if let Some(p) = self.program {
            // SAFETY: kill takes integers only.
            if unsafe { libc::kill(p, sig) } < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::ESRCH) {
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Kills the tree: SIGKILL to its init, whose end kills every process
    /// in the namespace.
    pub fn kill(&self) -> io::Result<()> {
        // SAFETY: kill takes integers only.
        if unsafe { libc::kill(self.init, libc::SIGKILL) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits for the tree's end (its init's) and gives the program's wait
    /// status.
    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        let mut status = 0;
        loop {
            // SAFETY: waitpid writes one int, ours.
            let r = unsafe { libc::waitpid(self.init, &mut status, 0) };
            if r == self.init {
                return Ok(self.exit_status(status));
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// The program's wait status, given the init's (as the caller's own
    /// `waitpid` of the init gave it): what init relayed, or the init's own
    /// when it was killed before (SIGKILL).
    pub fn exit_status(&self, init_status: i32) -> ExitStatus {
        let mut b = [0u8; 4];
        match (&self.status).read(&mut b) {
            Ok(4) => ExitStatus::from_raw(i32::from_le_bytes(b)),
            _ => ExitStatus::from_raw(init_status),
        }
    }
}

/// `root` and every process under it, parents first.
pub fn descendants(root: i32) -> io::Result<Vec<i32>> {
    Ok(family(root)?.into_iter().map(|(p, _)| p).collect())
}

/// `root` and every process under it, parents first, each with its parent
/// (`None` for the root).
fn family(root: i32) -> io::Result<Vec<(i32, Option<i32>)>> {
    let mut out = Vec::new();
    let mut queue = VecDeque::from([(root, None)]);
    while let Some((p, parent)) = queue.pop_front() {
        match proc::children(p) {
            Ok(c) => queue.extend(c.into_iter().map(|c| (c, Some(p)))),
            // Gone meanwhile.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        }
        out.push((p, parent));
    }
    Ok(out)
}

/// Stops `root` and every process under it for a dump: SIGSTOP to each
/// that is not stopped (or ended), again until all are, new ones included
/// (a process that changed its process group or session is reached too);
/// returns once they are, or gives up after `limit`. A child between
/// `vfork` and `exec` (its parent waits, uninterruptibly, until it has
/// `exec`'d) is let run, or continued if something stopped it, until it
/// has.
pub fn stop_tree(root: i32, limit: Duration) -> io::Result<()> {
    let until = Instant::now() + limit;
    loop {
        let mut running = Vec::new();
        for (p, parent) in family(root)? {
            let state = std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| proc::parse_stat(&s).ok())
                .and_then(|f| f.first().cloned())
                .unwrap_or_default();
            let stopped = matches!(state.as_str(), "T" | "t" | "Z" | "X" | "");
            let vforked = parent.is_some_and(|q| {
                state != "Z" && crate::sys::kcmp(q, p, crate::sys::Kcmp::Vm).unwrap_or(false)
            });
            if vforked {
                if stopped {
                    // SAFETY: kill takes integers only.
                    unsafe { libc::kill(p, libc::SIGCONT) };
                }
                running.push(format!("{p} (between vfork and exec)"));
            } else if !stopped {
                // SAFETY: kill takes integers only.
                unsafe { libc::kill(p, libc::SIGSTOP) };
                running.push(format!("{p} ({state})"));
            }
        }
        if running.is_empty() {
            return Ok(());
        }
        if Instant::now() > until {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the tree of pid {root} did not stop: {} still running",
                    running.join(", ")
                ),
            ));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Starts `s.program` in a new pid namespace, under the crate's init: the
/// caller's child is the init (pid 1 inside), the program its child (pid
/// 2), its own process group's (the init's), with only `s.fds`, every
/// signal at its default and none blocked. Returns once both have been
/// started (the program's `execve` failing makes it exit with 127 and
/// a message on its fd 2).
pub fn spawn_in_namespace(mut s: Spawn) -> Result<Tree, NsError> {
    let c = |b: &[u8]| CString::new(b).map_err(|e| start_err("an argument")(io::Error::other(e)));
    let path = c(s.program.as_os_str().as_bytes())?;
    let mut own = Vec::new();
    if s.argv.is_empty() {
        s.argv.push(s.program.clone().into_os_string());
    }
    for a in &s.argv {
        own.push(c(a.as_bytes())?);
    }
    let argc = own.len();
    for e in &s.env {
        own.push(c(e.as_bytes())?);
    }
    let ptrs: Vec<*const libc::c_char> = own.iter().map(|c| c.as_ptr()).collect();
    let mut argv = ptrs[..argc].to_vec();
    argv.push(std::ptr::null());
    let mut envp = ptrs[argc..].to_vec();
    envp.push(std::ptr::null());
    let cwd = s
        .cwd
        .as_ref()
        .map(|d| c(d.as_os_str().as_bytes()))
        .transpose()?;
    let pairs: Vec<(RawFd, RawFd)> = s.fds.iter().map(|(&n, f)| (f.as_raw_fd(), n)).collect();
    let program = Program {
        moved: vec![-1; pairs.len()],
        pairs,
        path: path.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        cwd: cwd.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
    };
    let place = Place {
        die_with_caller: s.die_with_caller,
        join: &s.join,
        into: None,
    };
    let (init, status) = start(Vec::new(), Some(program), false, place)?;
    drop(s.fds);
    let program = proc::children(init).ok().and_then(|c| c.first().copied());
    Ok(Tree {
        init,
        program,
        status,
    })
}

/// Starts an init for a restore: traced (`PTRACE_TRACEME`, so it stops at
/// its `execve`), with the caller's descriptors
/// `keep` on numbers from [`KEEP_FROM`] on, in order, for the processes
/// it will fork. Returns its pid and the read end of its status pipe.
pub(crate) fn start_init(keep: &[RawFd], place: Place) -> Result<(i32, File), NsError> {
    let pairs = keep
        .iter()
        .enumerate()
        .map(|(i, &fd)| (fd, KEEP_FROM + i as RawFd))
        .collect();
    start(pairs, None, true, place)
}

/// Where init keeps the descriptors a restore hands to the processes it
/// forks.
pub(crate) const KEEP_FROM: RawFd = 10;

/// The builder of a restored tree: the handle of its init.
pub(crate) fn tree(init: i32, program: Option<i32>, status: File) -> Tree {
    Tree {
        init,
        program,
        status,
    }
}

/// The program init forks at a spawn, prepared before the `clone`.
struct Program {
    pairs: Vec<(RawFd, RawFd)>,
    moved: Vec<RawFd>,
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
}

/// Init's descriptors: its status pipe, the init program (close-on-exec)
/// and the pipe that tells the caller whether init's `execve` failed
/// (close-on-exec).
const STATUS_AT: RawFd = 3;
const PROGRAM_AT: RawFd = 4;
const SYNC_AT: RawFd = 5;

/// Clones the caller into a new pid namespace and makes the child the init
/// (with `program` forked first, if given); returns the init's pid and the
/// read end of its status pipe once its `execve` is done.
fn start(
    mut keep: Vec<(RawFd, RawFd)>,
    mut program: Option<Program>,
    trace: bool,
    place: Place,
) -> Result<(i32, File), NsError> {
    let memfd = init_fd().map_err(start_err("making the init program"))?;
    let (status_r, status_w) = pipe().map_err(start_err("a status pipe"))?;
    let (sync_r, sync_w) = pipe().map_err(start_err("a pipe"))?;
    keep.extend([
        (status_w.as_raw_fd(), STATUS_AT),
        (memfd, PROGRAM_AT),
        (sync_w.as_raw_fd(), SYNC_AT),
    ]);
    let mut moved = vec![-1; keep.len()];
    let argv0 = CString::new(INIT_NAME).map_err(|e| start_err("init")(io::Error::other(e)))?;
    let argv = [argv0.as_ptr(), std::ptr::null()];
    let envp = [std::ptr::null::<libc::c_char>()];
    let empty = c"";
    // SAFETY: sigset_t is plain data, for which all zero bytes are a valid
    // (empty) set.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: the same.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: sigfillset and pthread_sigmask write only the sets given,
    // ours, which live until the end of this function.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    // Born in its cgroup if it can be: writing itself into `cgroup.procs`
    // takes the kernel's cgroup migration lock, whose first taker after a
    // quiet spell waits for an RCU grace period (5-20 ms here). Where the
    // kernel cannot, it writes itself in instead.
    let born_in = place
        .into
        .filter(|_| !NO_CLONE_INTO.load(std::sync::atomic::Ordering::Relaxed));
    let mut tries = born_in
        .map(|(dir, _)| Some(dir))
        .into_iter()
        .collect::<Vec<_>>();
    tries.push(None);
    let (mut pid, mut e) = (-1, io::Error::from_raw_os_error(libc::EINVAL));
    for into in tries {
        let mut place = place;
        let instead = place.into.take().map_or(&[][..], |(_, instead)| instead);
        let join: &[RawFd] = if into.is_some() { &[] } else { instead };
        // SAFETY: a fork-like clone (no CLONE_VM, no new stack): the child
        // runs on a copy of this thread's stack and memory and calls
        // `in_init`, which never returns and makes only async-signal-safe
        // calls on data prepared above; every signal is blocked until it
        // has reset them.
        (pid, e) = unsafe { clone_ns(into) };
        if pid == 0 {
            // SAFETY: in the child, see above.
            unsafe {
                in_init(
                    &keep,
                    &mut moved,
                    program.as_mut(),
                    trace,
                    (place, join),
                    argv.as_ptr(),
                    envp.as_ptr(),
                    empty.as_ptr(),
                )
            }
        }
        let refused = e.raw_os_error();
        if pid > 0 || into.is_none() || refused == Some(libc::EPERM) {
            break;
        }
        if matches!(refused, Some(libc::ENOSYS | libc::E2BIG)) {
            NO_CLONE_INTO.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    if pid < 0 {
        return Err(if e.raw_os_error() == Some(libc::EPERM) {
            NsError::Namespace(e)
        } else {
            NsError::Start {
                what: "cloning into a new pid namespace".into(),
                source: e,
            }
        });
    }
    let pid = pid as i32;
    // SAFETY: setpgid of our own child; it does the same (whichever runs
    // first, the group exists once this returns).
    unsafe { libc::setpgid(pid, pid) };
    drop(sync_w);
    drop(status_w);
    let mut errno = [0u8; 4];
    let n = File::from(sync_r).read(&mut errno).unwrap_or(0);
    if n == 4 {
        let mut st = 0;
        // SAFETY: reaps our child, which has exited or is exiting.
        unsafe { libc::waitpid(pid, &mut st, 0) };
        return Err(NsError::Start {
            what: "starting the namespace's init".into(),
            source: io::Error::from_raw_os_error(i32::from_le_bytes(errno)),
        });
    }
    let status = File::from(status_r);
    // SAFETY: fcntl on our descriptor: reads of the status never block.
    unsafe { libc::fcntl(status.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
    Ok((pid, status))
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut ends = [0; 2];
    // SAFETY: pipe2 writes two descriptors, which we then own.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just made, ours.
    Ok(unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) })
}

/// Places `pairs` (source, number) so that only they survive the next
/// `execve`: everything is marked close-on-exec, every source copied above
/// all numbers (so no placement lands on a source not yet placed), then
/// each copy `dup2`'d onto its number, which clears the flag there.
///
/// # Safety
/// Async-signal-safe; `moved` has one slot per pair.
unsafe fn place(pairs: &[(RawFd, RawFd)], moved: &mut [RawFd]) -> Result<(), i32> {
    // SAFETY: descriptor calls on integers; errno is this thread's.
    unsafe {
        let errno = || *libc::__errno_location();
        let above = pairs.iter().map(|&(s, d)| s.max(d)).max().unwrap_or(2) + 1;
        if libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 4u32) < 0 {
            return Err(errno());
        }
        for (i, &(src, _)) in pairs.iter().enumerate() {
            let t = libc::fcntl(src, libc::F_DUPFD_CLOEXEC, above);
            if t < 0 {
                return Err(errno());
            }
            moved[i] = t;
        }
        for (i, &(_, dst)) in pairs.iter().enumerate() {
            if libc::dup2(moved[i], dst) < 0 {
                return Err(errno());
            }
        }
        Ok(())
    }
}

/// The namespace's first process: signals to their defaults, its own
/// process group, into its cgroups, the program forked (at a spawn), its
/// descriptors placed, then the init program.
///
/// # Safety
/// Runs in the child of `start`'s clone: async-signal-safe calls only, on
/// data prepared before it.
#[allow(clippy::too_many_arguments)]
unsafe fn in_init(
    keep: &[(RawFd, RawFd)],
    moved: &mut [RawFd],
    program: Option<&mut Program>,
    trace: bool,
    (into, instead): (Place, &[RawFd]),
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    empty: *const libc::c_char,
) -> ! {
    // SAFETY: async-signal-safe calls on the data prepared by `start`
    // (the caller's contract); the closures never return.
    unsafe {
        let sync = keep.iter().find(|p| p.1 == SYNC_AT).map_or(-1, |p| p.0);
        let fail = |fd: RawFd| -> ! {
            let e = (*libc::__errno_location()).to_le_bytes();
            libc::write(fd, e.as_ptr().cast(), 4);
            libc::_exit(127)
        };
        for sig in 1..=64 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        libc::setpgid(0, 0);
        if into.die_with_caller {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        }
        for &fd in into.join.iter().chain(instead) {
            if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                fail(sync)
            }
        }
        if let Some(p) = program {
            let pid = libc::syscall(
                libc::SYS_clone,
                libc::SIGCHLD as libc::c_ulong,
                0usize,
                0usize,
                0usize,
                0usize,
            );
            if pid == 0 {
                in_program(p)
            }
            if pid < 0 {
                fail(sync)
            }
        }
        if let Err(e) = place(keep, moved) {
            *libc::__errno_location() = e;
            fail(sync)
        }
        libc::fcntl(PROGRAM_AT, libc::F_SETFD, libc::FD_CLOEXEC);
        libc::fcntl(SYNC_AT, libc::F_SETFD, libc::FD_CLOEXEC);
        if trace && libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) < 0 {
            fail(SYNC_AT)
        }
        // None blocked (a traced init must get the SIGTRAP of its exec).
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::syscall(
            libc::SYS_execveat,
            PROGRAM_AT,
            empty,
            argv,
            envp,
            libc::AT_EMPTY_PATH,
        );
        fail(SYNC_AT)
    }
}

/// The program's side: its descriptors, working directory, no signal
/// blocked, `execve`; on failure a line on its fd 2 and exit 127.
///
/// # Safety
/// As [`in_init`].
unsafe fn in_program(p: &mut Program) -> ! {
    // SAFETY: as in `in_init`; `p`'s pointers are to strings and arrays
    // the caller keeps alive across the clone.
    unsafe {
        let path = p.path;
        let say = |what: &[u8]| -> ! {
            libc::write(2, what.as_ptr().cast(), what.len());
            let path = std::ffi::CStr::from_ptr(path).to_bytes();
            libc::write(2, path.as_ptr().cast(), path.len());
            libc::write(2, b"\n".as_ptr().cast(), 1);
            libc::_exit(127)
        };
        if place(&p.pairs, &mut p.moved).is_err() {
            libc::_exit(127)
        }
        if !p.cwd.is_null() && libc::chdir(p.cwd) < 0 {
            say(b"cannot enter the working directory for ")
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::execve(p.path, p.argv, p.envp);
        say(b"cannot run ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_init_program_is_one_segment_entered_at_its_code() {
        let b = init_program();
        assert_eq!(&b[..4], b"\x7fELF");
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        assert_eq!(u64_at(24), BASE + 120, "entry");
        assert_eq!(u64_at(64 + 32), b.len() as u64, "p_filesz");
        assert_eq!(&b[120..], &CODE[..]);
    }
}
