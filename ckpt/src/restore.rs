//! Rebuilding a saved process as a new child of the caller.
//!
//! The steps: check that this kernel's vDSO is the image's; open here, in
//! the caller, every file the process had open (by path, with its flags, at
//! its offset) and every file it had mapped, so that a missing one is an
//! error before any process exists; start the program's own file with
//! `PTRACE_TRACEME`, those descriptors placed on their numbers before the
//! exec (the caller's stdio pipes and control socket among them), so the
//! kernel stops it at the exec, before one instruction of it runs, with
//! `/proc/PID/exe` right. Then, by system calls injected into it (see
//! `sys`): unmap all it has but the kernel's vDSO and data pages, move
//! those to the image's addresses (`mremap`), map every region at its
//! address (`MAP_FIXED_NOREPLACE`), the page runs straight from the image
//! file (`MAP_PRIVATE`: copy on write, never copied), copy in the few small
//! runs, set the `mm` fields and auxv (`PR_SET_MM_MAP`), cwd, umask, signal
//! dispositions, itimers, close-on-exec flags; create the other threads
//! (`clone`, followed by `PTRACE_O_TRACECLONE`); give each thread its rseq,
//! robust list, `clear_child_tid`, sigaltstack, name and pending signals;
//! unmap the scratch page; then set every thread's registers, vector state
//! and mask, write each thread's new tid where glibc caches it, set the
//! resource limits, and detach.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

use sha2::{Digest, Sha256};

use crate::image::{FdKind, Meta, Special, Thread, PAGE};
use crate::plan::{self, Current, PlanError, Source};
use crate::proc;
use crate::sys::{self, reg, Injector, Mem, Regs, SysError};
use crate::ImageFile;

/// What the caller says of a restore.
#[derive(Debug, Clone, Default)]
pub struct RestoreOptions {
    /// Leave the process group-stopped (the caller sends SIGCONT) rather
    /// than running.
    pub stopped: bool,
}

/// A restored process.
#[derive(Debug)]
pub struct Restored {
    /// The child.
    pub child: Child,
    /// Its pid (the old pid is not kept).
    pub pid: i32,
}

/// Why a restore failed. No half-built process is left: it is killed.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// A descriptor the image expects from the caller was not given.
    #[error("fd {0} was left to the caller at the dump and none was given")]
    MissingFd(i32),
    /// A file the process had mapped (its program, a library) could not
    /// be reopened.
    #[error("reopening {path}, which the process had mapped: {source}")]
    MappedFile {
        /// The path.
        path: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A file could not be reopened.
    #[error("reopening {path} for fd {fd}: {source}")]
    Reopen {
        /// The descriptor.
        fd: i32,
        /// The path.
        path: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// This machine cannot hold the layout.
    #[error("the image's layout cannot be rebuilt here: {0}")]
    Plan(#[from] PlanError),
    /// This kernel's vDSO is not the image's.
    #[error("this kernel's vDSO differs from the image's (another kernel version)")]
    Vdso,
    /// The program could not be started.
    #[error("starting {exe}: {source}")]
    Spawn {
        /// The program.
        exe: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A system call or ptrace request failed.
    #[error(transparent)]
    Sys(#[from] SysError),
    /// The image could not be read.
    #[error("reading the image: {0}")]
    Read(#[source] io::Error),
    /// An injected call answered something else than asked.
    #[error("pid {pid}: {what}")]
    Unexpected {
        /// The new process.
        pid: i32,
        /// What happened.
        what: String,
    },
}

/// The descriptors and files a restore hands the new process before exec.
struct Handover {
    /// (source in the caller, number in the new process).
    pairs: Vec<(RawFd, RawFd)>,
    /// Kept open until the exec is done.
    _held: Vec<OwnedFd>,
    /// Number in the new process of the image file.
    image_fd: RawFd,
    /// Number in the new process of each mapped file, by (path, write).
    map_fds: BTreeMap<(String, bool), RawFd>,
    /// Numbers to close once the mappings are made.
    temporary: Vec<RawFd>,
}

/// Restores the process of `img` as a child of the caller; `fds` gives the
/// descriptors the dump left to the caller, by number.
pub fn restore(
    img: &ImageFile,
    mut fds: BTreeMap<i32, OwnedFd>,
    opts: &RestoreOptions,
) -> Result<Restored, RestoreError> {
    let meta = img.meta();
    if !meta.vdso_hash.is_empty()
        && local_vdso_hash().map_err(RestoreError::Read)? != meta.vdso_hash
    {
        return Err(RestoreError::Vdso);
    }
    let hand = handover(meta, img, &mut fds)?;
    let mut child = spawn_traced(&meta.exe, &hand)?;
    let pid = child.id() as i32;
    match build(pid, img, &hand, opts) {
        Ok(()) => Ok(Restored { child, pid }),
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
    }
}

/// sha256 of this kernel's vDSO.
pub fn local_vdso_hash() -> io::Result<Vec<u8>> {
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let entries = proc::parse_maps(&maps).map_err(io::Error::other)?;
    let v = entries
        .iter()
        .find(|m| m.name == "[vdso]")
        .ok_or_else(|| io::Error::other("no vDSO here"))?;
    let mut b = vec![0u8; (v.end - v.start) as usize];
    File::open("/proc/self/mem")?.read_exact_at(&mut b, v.start)?;
    Ok(Sha256::digest(&b).to_vec())
}

fn handover(
    meta: &Meta,
    img: &ImageFile,
    given: &mut BTreeMap<i32, OwnedFd>,
) -> Result<Handover, RestoreError> {
    let mut held: Vec<OwnedFd> = Vec::new();
    let mut pairs = Vec::new();
    for f in &meta.fds {
        let owned: OwnedFd = match &f.kind {
            FdKind::External => given.remove(&f.fd).ok_or(RestoreError::MissingFd(f.fd))?,
            FdKind::Path { path, flags, pos } => {
                let reopen = |source| RestoreError::Reopen {
                    fd: f.fd,
                    path: path.clone(),
                    source,
                };
                let acc = flags & libc::O_ACCMODE;
                let mut file = OpenOptions::new()
                    .read(acc == libc::O_RDONLY || acc == libc::O_RDWR)
                    .write(acc == libc::O_WRONLY || acc == libc::O_RDWR)
                    .custom_flags(flags & !libc::O_ACCMODE & !libc::O_CREAT & !libc::O_TRUNC)
                    .open(path)
                    .map_err(reopen)?;
                if *pos != 0 {
                    file.seek(SeekFrom::Start(*pos)).map_err(reopen)?;
                }
                file.into()
            }
        };
        pairs.push((owned.as_raw_fd(), f.fd));
        held.push(owned);
    }
    let mut next = meta.fds.iter().map(|f| f.fd).max().unwrap_or(2).max(2) + 1;
    let image_fd = next;
    next += 1;
    pairs.push((img.file().as_raw_fd(), image_fd));
    let mut temporary = vec![image_fd];
    let mut map_fds = BTreeMap::new();
    for r in &meta.regions {
        let (path, write) = match &r.kind {
            crate::image::RegionKind::FilePrivate { path, .. } => (path, false),
            crate::image::RegionKind::FileShared {
                path, may_write, ..
            } => (path, *may_write),
            _ => continue,
        };
        if map_fds.contains_key(&(path.clone(), write)) {
            continue;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(write)
            .open(path)
            .map_err(|source| RestoreError::MappedFile {
                path: path.clone(),
                source,
            })?;
        let owned: OwnedFd = file.into();
        pairs.push((owned.as_raw_fd(), next));
        held.push(owned);
        map_fds.insert((path.clone(), write), next);
        temporary.push(next);
        next += 1;
    }
    Ok(Handover {
        pairs,
        _held: held,
        image_fd,
        map_fds,
        temporary,
    })
}

/// Starts `exe` traced, with the handed-over descriptors on their numbers
/// and nothing else open; it stops at the exec.
fn spawn_traced(exe: &str, hand: &Handover) -> Result<Child, RestoreError> {
    let pairs = hand.pairs.clone();
    let above = pairs.iter().map(|&(s, d)| s.max(d)).max().unwrap_or(2) + 1;
    let mut moved: Vec<RawFd> = vec![-1; pairs.len()];
    let mut cmd = Command::new(exe);
    cmd.env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: the closure runs in the child between fork and exec and makes
    // only async-signal-safe system calls, with no allocation (`moved` is
    // sized before the fork).
    unsafe {
        cmd.pre_exec(move || {
            // Every descriptor inherited closes at the exec unless placed
            // again below (dup2 clears close-on-exec on its target).
            if libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 4u32) < 0 {
                return Err(io::Error::last_os_error());
            }
            // Out of the way of every target first, so no dup2 lands on a
            // source not yet placed.
            for (i, &(src, _)) in pairs.iter().enumerate() {
                let t = libc::fcntl(src, libc::F_DUPFD_CLOEXEC, above);
                if t < 0 {
                    return Err(io::Error::last_os_error());
                }
                moved[i] = t;
            }
            for (i, &(_, dst)) in pairs.iter().enumerate() {
                if libc::dup2(moved[i], dst) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            if libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn().map_err(|source| RestoreError::Spawn {
        exe: exe.into(),
        source,
    })
}

fn unexpected(pid: i32, what: impl Into<String>) -> RestoreError {
    RestoreError::Unexpected {
        pid,
        what: what.into(),
    }
}

/// Reads the current mappings of `pid`.
fn current_maps(pid: i32) -> Result<Vec<Current>, RestoreError> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(RestoreError::Read)?;
    let maps = proc::parse_maps(&text).map_err(|e| unexpected(pid, e))?;
    Ok(maps
        .into_iter()
        .map(|m| Current {
            start: m.start,
            end: m.end,
            name: m.name,
        })
        .collect())
}

/// Rebuilds the stopped, freshly exec'd `pid` into the image's process.
fn build(
    pid: i32,
    img: &ImageFile,
    hand: &Handover,
    opts: &RestoreOptions,
) -> Result<(), RestoreError> {
    let meta = img.meta();
    let s = sys::wait_stop(pid)?;
    if s.sig != libc::SIGTRAP {
        return Err(unexpected(
            pid,
            format!("stopped by signal {} at exec", s.sig),
        ));
    }
    sys::set_options(
        pid,
        libc::PTRACE_O_TRACESYSGOOD | libc::PTRACE_O_TRACECLONE | libc::PTRACE_O_EXITKILL,
    )?;
    sys::set_sigmask(pid, u64::MAX)?;
    let current = current_maps(pid)?;
    let plan = plan::restore_plan(&meta.regions, &meta.specials, &current, plan::MIN_MAP_PAGES)?;
    let mem = Mem::open(pid)?;
    let vdso_here = current
        .iter()
        .find(|c| c.name == "[vdso]")
        .ok_or_else(|| unexpected(pid, "no vDSO"))?;
    let vdso = Special {
        name: vdso_here.name.clone(),
        start: vdso_here.start,
        end: vdso_here.end,
    };
    let mut main = Injector {
        tid: pid,
        syscall_at: crate::dump::find_syscall(&mem, &vdso, pid)?,
        base: sys::get_regs(pid)?,
    };

    for &(start, end) in &plan.unmap {
        main.ok("munmap", libc::SYS_munmap, &[start, end - start])?;
    }
    for m in &plan.moves {
        let at = main.ok(
            &format!("mremap {}", m.name),
            libc::SYS_mremap,
            &[
                m.from,
                m.len,
                m.len,
                (libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED) as u64,
                m.to,
            ],
        )?;
        if at != m.to {
            return Err(unexpected(pid, format!("{} moved to {at:#x}", m.name)));
        }
        if m.name == "[vdso]" {
            main.syscall_at = main.syscall_at - m.from + m.to;
        }
    }
    let scratch = plan.scratch;
    map(
        &main,
        scratch,
        PAGE,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
        -1,
        0,
    )?;
    for m in &plan.maps {
        let prot = (if m.prot.r { libc::PROT_READ } else { 0 })
            | (if m.prot.w { libc::PROT_WRITE } else { 0 })
            | (if m.prot.x { libc::PROT_EXEC } else { 0 });
        let (flags, fd, offset) = match &m.source {
            Source::Anon { stack } => (
                libc::MAP_PRIVATE
                    | libc::MAP_ANONYMOUS
                    | if *stack { libc::MAP_GROWSDOWN } else { 0 },
                -1,
                0,
            ),
            Source::File {
                path,
                offset,
                shared,
                write,
            } => {
                let fd = hand
                    .map_fds
                    .get(&(path.clone(), *write))
                    .copied()
                    .ok_or_else(|| unexpected(pid, format!("{path} not opened")))?;
                let flags = if *shared {
                    libc::MAP_SHARED
                } else {
                    libc::MAP_PRIVATE
                };
                (flags, fd, *offset)
            }
            Source::Image { offset } => {
                (libc::MAP_PRIVATE, hand.image_fd, img.data_offset() + offset)
            }
        };
        map(&main, m.addr, m.len, prot, flags, fd, offset)?;
    }
    copy_runs(img, &mem, &plan.copies)?;
    for r in &meta.regions {
        for &advice in &r.advice {
            main.ok(
                "madvise",
                libc::SYS_madvise,
                &[r.start, r.end - r.start, advice as u64],
            )?;
        }
    }
    process_state(&main, &mem, meta, scratch, hand)?;

    // The other threads, created by the main one and stopped at birth.
    let mut tids = vec![pid];
    for _ in meta.threads.iter().skip(1) {
        let flags = libc::CLONE_VM
            | libc::CLONE_FS
            | libc::CLONE_FILES
            | libc::CLONE_SIGHAND
            | libc::CLONE_THREAD
            | libc::CLONE_SYSVSEM;
        let tid = main.ok(
            "clone (thread)",
            libc::SYS_clone,
            &[flags as u64, 0, 0, 0, 0],
        )? as i32;
        let s = sys::wait_stop(tid)?;
        if s.sig != libc::SIGSTOP {
            return Err(unexpected(
                tid,
                format!("new thread stopped by signal {}", s.sig),
            ));
        }
        tids.push(tid);
    }
    for (t, &tid) in meta.threads.iter().zip(&tids) {
        let inj = Injector {
            tid,
            syscall_at: main.syscall_at,
            base: sys::get_regs(tid)?,
        };
        thread_state(&inj, &mem, pid, t, scratch)?;
    }
    main.ok("munmap (scratch page)", libc::SYS_munmap, &[scratch, PAGE])?;

    for (t, &tid) in meta.threads.iter().zip(&tids) {
        let mut regs: Regs = [0; reg::COUNT];
        if t.regs.len() != reg::COUNT {
            return Err(unexpected(pid, "registers of another size in the image"));
        }
        regs.copy_from_slice(&t.regs);
        sys::set_regs(tid, &regs)?;
        sys::set_xstate(tid, &t.xstate)?;
        if let Some(at) = t.cached_tid_at {
            // glibc's cached tid (raise, pthread_kill, recursive mutexes).
            mem.write(at, &(tid as u32).to_le_bytes())?;
        }
        sys::set_sigmask(tid, t.sigmask)?;
    }
    for &(res, soft, hard) in &meta.rlimits {
        if sys::set_rlimit(pid, res, soft, hard).is_err() {
            // Not allowed to raise the hard limit: keep this one's, lower
            // the soft limit to it.
            let (_, h) = sys::get_rlimit(pid, res)?;
            sys::set_rlimit(pid, res, soft.min(h), h)?;
        }
    }
    if opts.stopped {
        sys::kill(pid, libc::SIGSTOP)?;
    }
    for &tid in &tids {
        sys::detach(tid, 0)?;
    }
    if opts.stopped {
        crate::dump::wait_stopped(pid);
    }
    Ok(())
}

fn map(
    inj: &Injector,
    addr: u64,
    len: u64,
    prot: i32,
    flags: i32,
    fd: RawFd,
    offset: u64,
) -> Result<(), RestoreError> {
    let at = inj.ok(
        &format!("mmap {addr:#x}+{len:#x}"),
        libc::SYS_mmap,
        &[
            addr,
            len,
            prot as u64,
            (flags | libc::MAP_FIXED_NOREPLACE) as u64,
            fd as i64 as u64,
            offset,
        ],
    )?;
    if at != addr {
        return Err(unexpected(
            inj.tid,
            format!("mmap at {addr:#x} gave {at:#x}"),
        ));
    }
    Ok(())
}

fn copy_runs(img: &ImageFile, mem: &Mem, copies: &[plan::CopyStep]) -> Result<(), RestoreError> {
    let mut buf = Vec::new();
    for c in copies {
        buf.resize(c.len as usize, 0);
        img.file()
            .read_exact_at(&mut buf, img.data_offset() + c.offset)
            .map_err(RestoreError::Read)?;
        mem.write(c.addr, &buf)?;
    }
    Ok(())
}

/// Process-wide state, by calls injected into the main thread.
fn process_state(
    main: &Injector,
    mem: &Mem,
    meta: &Meta,
    scratch: u64,
    hand: &Handover,
) -> Result<(), RestoreError> {
    let mm = &meta.mm;
    let auxv_at = scratch + 128;
    if meta.auxv.len() > (PAGE - 128) as usize {
        return Err(unexpected(main.tid, "auxv too long"));
    }
    let words = [
        mm.start_code,
        mm.end_code,
        mm.start_data,
        mm.end_data,
        mm.start_brk,
        mm.brk,
        mm.start_stack,
        mm.arg_start,
        mm.arg_end,
        mm.env_start,
        mm.env_end,
        auxv_at,
    ];
    let mut b: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    b.extend_from_slice(&(meta.auxv.len() as u32).to_le_bytes());
    b.extend_from_slice(&u32::MAX.to_le_bytes()); // exe_fd: keep
    mem.write(scratch, &b)?;
    mem.write(auxv_at, &meta.auxv)?;
    main.ok(
        "prctl PR_SET_MM_MAP",
        libc::SYS_prctl,
        &[
            libc::PR_SET_MM as u64,
            libc::PR_SET_MM_MAP as u64,
            scratch,
            b.len() as u64,
            0,
        ],
    )?;
    let mut path = meta.cwd.as_bytes().to_vec();
    path.push(0);
    if path.len() as u64 > PAGE {
        return Err(unexpected(main.tid, "cwd too long"));
    }
    mem.write(scratch, &path)?;
    main.ok("chdir", libc::SYS_chdir, &[scratch])?;
    main.ok("umask", libc::SYS_umask, &[meta.umask as u64])?;
    for a in &meta.sigactions {
        let b: Vec<u8> = [a.handler, a.flags, a.restorer, a.mask]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        mem.write(scratch, &b)?;
        main.ok(
            &format!("rt_sigaction {}", a.signo),
            libc::SYS_rt_sigaction,
            &[a.signo as u64, scratch, 0, 8],
        )?;
    }
    for (which, &(interval, value)) in meta.itimers.iter().enumerate() {
        if value == 0 {
            continue;
        }
        let b: Vec<u8> = [
            interval / 1_000_000,
            interval % 1_000_000,
            value / 1_000_000,
            value % 1_000_000,
        ]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
        mem.write(scratch, &b)?;
        main.ok(
            "setitimer",
            libc::SYS_setitimer,
            &[which as u64, scratch, 0],
        )?;
    }
    for &fd in &hand.temporary {
        main.ok("close", libc::SYS_close, &[fd as u64])?;
    }
    for f in meta.fds.iter().filter(|f| f.cloexec) {
        main.ok(
            "fcntl F_SETFD",
            libc::SYS_fcntl,
            &[f.fd as u64, libc::F_SETFD as u64, libc::FD_CLOEXEC as u64],
        )?;
    }
    for si in &meta.shared_pending {
        let signo = i32::from_le_bytes(si.0[0..4].try_into().unwrap_or_default());
        mem.write(scratch, &si.0)?;
        main.ok(
            "rt_sigqueueinfo",
            libc::SYS_rt_sigqueueinfo,
            &[main.tid as u64, signo as u64, scratch],
        )?;
    }
    Ok(())
}

/// One thread's own state, by calls injected into it.
fn thread_state(
    inj: &Injector,
    mem: &Mem,
    pid: i32,
    t: &Thread,
    scratch: u64,
) -> Result<(), RestoreError> {
    if let Some((at, len, sig)) = t.rseq {
        inj.ok("rseq", libc::SYS_rseq, &[at, len as u64, 0, sig as u64])?;
    }
    let (head, len) = t.robust_list;
    if head != 0 {
        inj.ok("set_robust_list", libc::SYS_set_robust_list, &[head, len])?;
    }
    inj.ok(
        "set_tid_address",
        libc::SYS_set_tid_address,
        &[t.clear_child_tid],
    )?;
    let (sp, flags, size) = t.altstack;
    if flags & libc::SS_DISABLE == 0 {
        let mut b = sp.to_le_bytes().to_vec();
        b.extend_from_slice(&(flags as i64).to_le_bytes());
        b.extend_from_slice(&size.to_le_bytes());
        mem.write(scratch, &b)?;
        inj.ok("sigaltstack", libc::SYS_sigaltstack, &[scratch, 0])?;
    }
    let mut name = [0u8; 16];
    let n = t.comm.len().min(15);
    name[..n].copy_from_slice(&t.comm.as_bytes()[..n]);
    mem.write(scratch, &name)?;
    inj.ok(
        "prctl PR_SET_NAME",
        libc::SYS_prctl,
        &[libc::PR_SET_NAME as u64, scratch],
    )?;
    for si in &t.pending {
        let signo = i32::from_le_bytes(si.0[0..4].try_into().unwrap_or_default());
        mem.write(scratch, &si.0)?;
        inj.ok(
            "rt_tgsigqueueinfo",
            libc::SYS_rt_tgsigqueueinfo,
            &[pid as u64, inj.tid as u64, signo as u64, scratch],
        )?;
    }
    Ok(())
}
