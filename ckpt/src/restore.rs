//! Rebuilding saved processes as new children of the caller.
//!
//! [`restore`] makes the one process of an image whose pid need not be
//! kept; [`restore_tree`] (in `restore::tree`) makes a whole tree, each
//! process with its pid, in a pid namespace of its own. Both rebuild each
//! process the same way ([`build`]), from a process that has just
//! `exec`'d the program's own file under ptrace, so that nothing of the
//! program has run and `/proc/PID/exe` is right.
//!
//! The steps for one process: check that this kernel's vDSO is the
//! image's; open here, in the caller, every open file of the image (by
//! path, with its flags, at its offset; pipes made anew with the bytes
//! that were in flight) and every file the processes had mapped, so that a
//! missing one is an error before any process exists; start the program's
//! own file with `PTRACE_TRACEME`, those descriptors placed on their
//! numbers before the exec (the caller's stdio pipes and control socket
//! among them), so the kernel stops it at the exec. Then, by system calls
//! injected into it (see `sys`): unmap all it has but the kernel's vDSO and
//! data pages, move those to the image's addresses (`mremap`), map every
//! region at its address (`MAP_FIXED_NOREPLACE`), the page runs straight
//! from the image file (`MAP_PRIVATE`: copy on write, never copied), copy
//! in the few small runs, set the `mm` fields and auxv (`PR_SET_MM_MAP`),
//! cwd, umask, signal dispositions, itimers, close-on-exec flags; drop any
//! signal left pending and queue the saved ones; create the other threads
//! (`clone`, or `clone3` with their tids when pids are kept, followed by
//! `PTRACE_O_TRACECLONE`); give each thread its rseq, robust list,
//! `clear_child_tid`, sigaltstack, name and pending signals; unmap the
//! scratch page; then set every thread's registers, vector state and mask,
//! write each thread's tid where glibc caches it, set the resource limits,
//! and detach.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

use sha2::{Digest, Sha256};

use crate::image::{Image, Meta, OpenFile, ProcState, RegionKind, Special, Thread, PAGE};
use crate::plan::{self, Current, PlanError, Source};
use crate::proc;
use crate::sys::{self, reg, Injector, Mem, Regs, SysError};
use crate::tree::TreeError;
use crate::ImageFile;

mod tree;

pub use tree::restore_tree;

/// What the caller says of a restore.
#[derive(Debug, Clone, Default)]
pub struct RestoreOptions {
    /// Leave the processes group-stopped (the caller sends SIGCONT) rather
    /// than running.
    pub stopped: bool,
    /// A restored tree is killed (SIGKILL to its init) when the calling
    /// thread ends (`PR_SET_PDEATHSIG`).
    pub die_with_caller: bool,
    /// Files (a cgroup's `cgroup.procs`) a restored tree's init writes `0`
    /// into first, so that every process of the tree is born in that
    /// cgroup.
    pub join: Vec<RawFd>,
    /// A cgroup v2 directory a restored tree's init is born in (`clone3`
    /// with `CLONE_INTO_CGROUP`, Linux 5.7), rather than writing itself
    /// into its `cgroup.procs`, which takes the kernel's cgroup migration
    /// lock and may wait for an RCU grace period. Where the kernel cannot,
    /// the init writes itself into `join_instead` (as into `join`).
    pub into: Option<RawFd>,
    /// See `into`.
    pub join_instead: Vec<RawFd>,
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
    /// A memfd could not be made again.
    #[error("making memfd {index} again: {source}")]
    Memfd {
        /// Its index in the image.
        index: u32,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A socket whose other end stayed behind could not be made again.
    #[error("making a socket cut from its other end: {0}")]
    Cut(#[source] io::Error),
    /// A pipe could not be made again.
    #[error("making pipe {index} again: {source}")]
    Pipe {
        /// Its index in the image.
        index: u32,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// This machine cannot hold the layout.
    #[error("the image's layout cannot be rebuilt here: {0}")]
    Plan(#[from] PlanError),
    /// The tree cannot be made again.
    #[error(transparent)]
    Tree(#[from] TreeError),
    /// The image is not of the kind this call restores.
    #[error("{0}")]
    Kind(String),
    /// The tree's namespace could not be made.
    #[error(transparent)]
    Namespace(#[from] crate::ns::NsError),
    /// This kernel's vDSO is not the image's.
    #[error("this kernel's vDSO differs from the image's (another kernel version)")]
    Vdso,
    /// This machine lacks what the image relies on (see `Image::needs`).
    #[error("this machine cannot take the image: {0}")]
    Machine(String),
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

/// The descriptors and files a restore hands one new process before exec.
struct Handover {
    /// (source in the caller, number in the new process).
    pairs: Vec<(RawFd, RawFd)>,
    /// Number in the new process of the image file.
    image_fd: RawFd,
    /// Number in the new process of each mapped file, by (path, write).
    map_fds: BTreeMap<(String, bool), RawFd>,
    /// Numbers to close once the mappings are made.
    temporary: Vec<RawFd>,
}

/// Restores the one process of `img` as a child of the caller, with a new
/// pid; `fds` gives the descriptors the dump left to the caller, by
/// number.
pub fn restore(
    img: &ImageFile,
    mut fds: BTreeMap<i32, OwnedFd>,
    opts: &RestoreOptions,
) -> Result<Restored, RestoreError> {
    let image = img.image();
    let meta = match image.procs.as_slice() {
        [p] if !image.keep_pids => match &p.state {
            ProcState::Live(m) => m,
            ProcState::Zombie { .. } => return Err(RestoreError::Kind("the image's process had ended".into())),
        },
        _ => {
            return Err(RestoreError::Kind(format!(
                "the image holds a tree of {} process(es) whose pids must be kept: restore it with restore_tree",
                image.procs.len()
            )))
        }
    };
    check_machine(image)?;
    let memfds = make_memfds(img)?;
    let files = open_files(img, &mut fds, &memfds)?;
    let mapped = open_mapped(image, &memfds)?;
    let hand = handover(meta, &files, &mapped, img.file().as_raw_fd())?;
    let mut child = spawn_traced(&meta.exe, &hand)?;
    let pid = child.id() as i32;
    let built = (|| {
        let s = sys::wait_stop(pid)?;
        if s.sig != libc::SIGTRAP {
            return Err(unexpected(
                pid,
                format!("stopped by signal {} at exec", s.sig),
            ));
        }
        let tids = build(pid, pid, img, meta, &hand, false)?;
        release(pid, &tids, meta, opts.stopped)?;
        Ok(())
    })();
    match built {
        Ok(()) => Ok(Restored { child, pid }),
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
    }
}

/// Checks that this machine has what the image relies on (the files it
/// maps with the content they had, CPU features), and that this kernel's
/// vDSO is every process's.
pub(crate) fn check_machine(image: &Image) -> Result<(), RestoreError> {
    if let Some(needs) = &image.needs {
        let here = crate::compat::Fingerprint::here(image).map_err(RestoreError::Read)?;
        if let Some(why) = crate::compat::mismatch(needs, &here) {
            return Err(RestoreError::Machine(why));
        }
    }
    check_vdso(image)
}

/// Checks that this kernel's vDSO is every process's.
fn check_vdso(image: &Image) -> Result<(), RestoreError> {
    let mut here = None;
    for m in image.live() {
        if m.vdso_hash.is_empty() {
            continue;
        }
        if here.is_none() {
            here = Some(local_vdso_hash().map_err(RestoreError::Read)?);
        }
        if here.as_ref() != Some(&m.vdso_hash) {
            return Err(RestoreError::Vdso);
        }
    }
    Ok(())
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

/// One descriptor in the caller for each open file of the image: the
/// caller's own for the external ones, files reopened, pipes made anew
/// (at their size, with their bytes; the caller's ends of a pipe are
/// dropped with the returned list, so an end no process holds is closed).
fn open_files(
    img: &ImageFile,
    given: &mut BTreeMap<i32, OwnedFd>,
    memfds: &[OwnedFd],
) -> Result<Vec<OwnedFd>, RestoreError> {
    let image = img.image();
    // The descriptors that refer to each external file, for the error.
    let mut pipes: BTreeMap<u32, (OwnedFd, OwnedFd)> = BTreeMap::new();
    let mut taken: BTreeMap<(u32, bool), ()> = BTreeMap::new();
    let mut memfds_taken = std::collections::BTreeSet::new();
    let mut out = Vec::with_capacity(image.files.len());
    for f in &image.files {
        let owned: OwnedFd = match f {
            OpenFile::External { fd } => given.remove(fd).ok_or(RestoreError::MissingFd(*fd))?,
            OpenFile::Path { path, flags, pos } => {
                let fd = image
                    .live()
                    .flat_map(|m| m.fds.iter())
                    .find(|d| image.files.get(d.file as usize) == Some(f))
                    .map_or(-1, |d| d.fd);
                let reopen = |source| RestoreError::Reopen {
                    fd,
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
            OpenFile::Pipe { pipe, write, flags } => {
                let err = |source| RestoreError::Pipe {
                    index: *pipe,
                    source,
                };
                if !pipes.contains_key(pipe) {
                    let saved = image
                        .pipes
                        .get(*pipe as usize)
                        .ok_or_else(|| err(io::Error::other("not in the image")))?;
                    pipes.insert(*pipe, make_pipe(saved.size, &saved.data).map_err(err)?);
                }
                let (r, w) = &pipes[pipe];
                let end = if *write { w } else { r };
                // A second open file of the same end: a description of its
                // own, as opening the pipe through /proc gives.
                let fd = if taken.insert((*pipe, *write), ()).is_none() {
                    end.try_clone().map_err(err)?
                } else {
                    OpenOptions::new()
                        .read(!*write)
                        .write(*write)
                        .custom_flags(libc::O_CLOEXEC)
                        .open(format!("/proc/self/fd/{}", end.as_raw_fd()))
                        .map_err(err)?
                        .into()
                };
                // SAFETY: fcntl on our descriptor.
                if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, *flags) } < 0 {
                    return Err(err(io::Error::last_os_error()));
                }
                fd
            }
            OpenFile::Memfd { memfd, flags, pos } => {
                let err = |source| RestoreError::Memfd {
                    index: *memfd,
                    source,
                };
                let of = memfds
                    .get(*memfd as usize)
                    .ok_or_else(|| err(io::Error::other("not in the image")))?;
                // A second open file of it: a description of its own.
                let fd: OwnedFd = if memfds_taken.insert(*memfd) {
                    of.try_clone().map_err(err)?
                } else {
                    OpenOptions::new()
                        .read(true)
                        .write(true)
                        .custom_flags(libc::O_CLOEXEC)
                        .open(format!("/proc/self/fd/{}", of.as_raw_fd()))
                        .map_err(err)?
                        .into()
                };
                // SAFETY: lseek and fcntl on our descriptor.
                let ok = unsafe {
                    libc::lseek(fd.as_raw_fd(), *pos as libc::off_t, libc::SEEK_SET) >= 0
                        && libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, *flags) >= 0
                };
                if !ok {
                    return Err(err(io::Error::last_os_error()));
                }
                fd
            }
            OpenFile::Cut {
                unread,
                flags,
                passed,
            } => cut_socket(img, unread, *flags, passed).map_err(RestoreError::Cut)?,
        };
        out.push(owned);
    }
    Ok(out)
}

/// A pipe of capacity `size` holding `data`: (read end, write end).
fn make_pipe(size: u32, data: &[u8]) -> io::Result<(OwnedFd, OwnedFd)> {
    let mut ends = [0; 2];
    // SAFETY: pipe2 writes two descriptors, which we then own; fcntl on
    // the write end, ours.
    let (r, w) = unsafe {
        if libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) < 0 {
            return Err(io::Error::last_os_error());
        }
        let (r, w) = (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1]));
        if libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, size as libc::c_int) < 0 {
            return Err(io::Error::last_os_error());
        }
        (r, w)
    };
    if !data.is_empty() {
        if data.len() > size as usize {
            return Err(io::Error::other(format!(
                "{} bytes in a pipe of {size}",
                data.len()
            )));
        }
        File::from(w.try_clone()?).write_all(data)?;
    }
    Ok((r, w))
}

/// A stream socket holding `unread`, whose other end is closed (see
/// `OpenFile::Cut`), with status flags `flags`.
fn cut_socket(
    img: &ImageFile,
    unread: &[u8],
    flags: i32,
    passed: &[crate::image::Memfd],
) -> io::Result<OwnedFd> {
    let mut ends = [0; 2];
    // SAFETY: socketpair writes two descriptors, which we then own.
    let (keep, other) = unsafe {
        if libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            ends.as_mut_ptr(),
        ) < 0
        {
            return Err(io::Error::last_os_error());
        }
        (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1]))
    };
    if !unread.is_empty() {
        // Room for them all (they were in a socket of the same kind),
        // each descriptor in a message of its own: never less than a
        // socket's own room. Forced where the caller may (a daemon run as
        // root), asked for otherwise.
        let room = (unread.len() * 2 + passed.len() * 4096 + (256 << 10)).min(i32::MAX as usize)
            as libc::c_int;
        for (fd, force, ask) in [
            (&other, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
            (&keep, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        ] {
            let set = |opt| {
                // SAFETY: setsockopt reads one int of ours. (A smaller
                // buffer than asked shows below, as bytes that do not go
                // in.)
                unsafe {
                    libc::setsockopt(
                        fd.as_raw_fd(),
                        libc::SOL_SOCKET,
                        opt,
                        (&room as *const libc::c_int).cast(),
                        std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                    )
                }
            };
            if set(force) < 0 {
                set(ask);
            }
        }
        // Each memfd with a byte of its own, in order (a reader may take
        // only a few descriptors a message: libmig takes four).
        let mut done = 0;
        for m in passed {
            let fd = img.make_memfd(m)?;
            let Some(byte) = unread.get(done..done + 1) else {
                return Err(io::Error::other("more descriptors passed than bytes"));
            };
            done += send_fds(&other, byte, std::slice::from_ref(&fd))?;
        }
        while done < unread.len() {
            let rest = &unread[done..];
            // SAFETY: send reads `rest`, ours, for its length.
            let n = unsafe {
                libc::send(
                    other.as_raw_fd(),
                    rest.as_ptr().cast(),
                    rest.len(),
                    libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(io::Error::other(format!(
                    "{done} of its {} unread bytes went in: {e}",
                    unread.len()
                )));
            }
            done += n as usize;
        }
    }
    drop(other);
    // SAFETY: fcntl on our descriptor.
    if unsafe { libc::fcntl(keep.as_raw_fd(), libc::F_SETFL, flags) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(keep)
}

/// Sends `bytes` on `sock` with `fds` (`SCM_RIGHTS`, at most 253); how
/// many bytes went.
fn send_fds(sock: &OwnedFd, bytes: &[u8], fds: &[OwnedFd]) -> io::Result<usize> {
    let raw: Vec<libc::c_int> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let len = std::mem::size_of_val(&raw[..]) as u32;
    // SAFETY: CMSG_SPACE computes a size from an integer.
    let space = unsafe { libc::CMSG_SPACE(len) } as usize;
    let mut control = vec![0u8; space];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: a zeroed msghdr is valid; its pointers are set below, to
    // `bytes` (only read) and `control`, which the CMSG_* macros fill
    // with one SCM_RIGHTS header and the descriptors, inside its length.
    let n = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(len) as usize;
        std::ptr::copy_nonoverlapping(raw.as_ptr(), libc::CMSG_DATA(c).cast(), raw.len());
        libc::sendmsg(
            sock.as_raw_fd(),
            &msg,
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Each memfd of the image made anew: its name, size and bytes (copied
/// from the image file a piece at a time), then its seals.
fn make_memfds(img: &ImageFile) -> Result<Vec<OwnedFd>, RestoreError> {
    let image = img.image();
    let mut out = Vec::with_capacity(image.memfds.len());
    for (i, m) in image.memfds.iter().enumerate() {
        out.push(img.make_memfd(m).map_err(|source| RestoreError::Memfd {
            index: i as u32,
            source,
        })?);
    }
    Ok(out)
}

/// What a region is mapped from, as `open_mapped` keys it: (path, opened
/// for writing), a memfd as `memfd:N` (no path looks so).
fn mapped_key(kind: &RegionKind) -> Option<(String, bool)> {
    match kind {
        RegionKind::FilePrivate { path, .. } => Some((path.clone(), false)),
        RegionKind::FileShared {
            path, may_write, ..
        } => Some((path.clone(), *may_write)),
        RegionKind::Memfd { memfd, .. } => Some((memfd_key(*memfd), true)),
        RegionKind::Anon | RegionKind::Stack => None,
    }
}

fn memfd_key(i: u32) -> String {
    format!("memfd:{i}")
}

/// Every file the image's processes had mapped, opened once by (path,
/// write), and the memfds they had mapped.
fn open_mapped(
    image: &Image,
    memfds: &[OwnedFd],
) -> Result<BTreeMap<(String, bool), OwnedFd>, RestoreError> {
    let mut out = BTreeMap::new();
    for r in image.live().flat_map(|m| m.regions.iter()) {
        let Some((path, write)) = mapped_key(&r.kind) else {
            continue;
        };
        if out.contains_key(&(path.clone(), write)) {
            continue;
        }
        if let RegionKind::Memfd { memfd, .. } = r.kind {
            let err = |source| RestoreError::Memfd {
                index: memfd,
                source,
            };
            let fd = memfds
                .get(memfd as usize)
                .ok_or_else(|| err(io::Error::other("not in the image")))?
                .try_clone()
                .map_err(err)?;
            out.insert((path, write), fd);
            continue;
        }
        let path = &path;
        let file = OpenOptions::new()
            .read(true)
            .write(write)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(|source| RestoreError::MappedFile {
                path: path.clone(),
                source,
            })?;
        out.insert((path.clone(), write), file.into());
    }
    Ok(out)
}

/// Where each of `meta`'s descriptors, the image and its mapped files come
/// from in the caller (`files`, `mapped`, `image_fd`) and go in the
/// process: the saved numbers, then the others above them.
fn handover(
    meta: &Meta,
    files: &[OwnedFd],
    mapped: &BTreeMap<(String, bool), OwnedFd>,
    image_fd: RawFd,
) -> Result<Handover, RestoreError> {
    let mut pairs = Vec::new();
    for f in &meta.fds {
        let src = files
            .get(f.file as usize)
            .ok_or_else(|| RestoreError::Kind(format!("fd {} names no open file", f.fd)))?;
        pairs.push((src.as_raw_fd(), f.fd));
    }
    let mut next = meta.fds.iter().map(|f| f.fd).max().unwrap_or(2).max(2) + 1;
    let image_at = next;
    next += 1;
    pairs.push((image_fd, image_at));
    let mut temporary = vec![image_at];
    let mut map_fds = BTreeMap::new();
    for r in &meta.regions {
        let Some(key) = mapped_key(&r.kind) else {
            continue;
        };
        if map_fds.contains_key(&key) {
            continue;
        }
        let src = mapped.get(&key).ok_or_else(|| RestoreError::MappedFile {
            path: key.0.clone(),
            source: io::Error::other("not opened"),
        })?;
        pairs.push((src.as_raw_fd(), next));
        map_fds.insert(key, next);
        temporary.push(next);
        next += 1;
    }
    Ok(Handover {
        pairs,
        image_fd: image_at,
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

/// Rebuilds `pid`, stopped under ptrace right after its `execve`, into
/// the process `meta` of `img`; `inner` is its pid as it sees itself. With
/// `keep_tids`, the other threads get their saved tids (in a pid namespace
/// of the restore's). Returns every thread (as the caller sees them, the
/// main one first), still stopped and traced.
fn build(
    pid: i32,
    inner: i32,
    img: &ImageFile,
    meta: &Meta,
    hand: &Handover,
    keep_tids: bool,
) -> Result<Vec<(i32, i32)>, RestoreError> {
    sys::set_options(
        pid,
        libc::PTRACE_O_TRACESYSGOOD
            | libc::PTRACE_O_TRACECLONE
            | libc::PTRACE_O_TRACEFORK
            | libc::PTRACE_O_TRACEEXEC
            | libc::PTRACE_O_EXITKILL,
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
            Source::Memfd { memfd, offset } => {
                let fd = hand
                    .map_fds
                    .get(&(memfd_key(*memfd), true))
                    .copied()
                    .ok_or_else(|| unexpected(pid, format!("memfd {memfd} not made")))?;
                (libc::MAP_SHARED, fd, *offset)
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
    process_state(&main, &mem, meta, scratch, hand, inner)?;

    // The other threads, created by the main one and stopped at birth:
    // (as the caller sees them, as the process does).
    let mut tids = vec![(pid, inner)];
    for t in meta.threads.iter().skip(1) {
        let flags = (libc::CLONE_VM
            | libc::CLONE_FS
            | libc::CLONE_FILES
            | libc::CLONE_SIGHAND
            | libc::CLONE_THREAD
            | libc::CLONE_SYSVSEM) as u64;
        let (tid, outer) = if keep_tids {
            let set_tid_at = scratch + 128;
            mem.write(set_tid_at, &t.tid.to_le_bytes())?;
            mem.write(scratch, &sys::clone_args(flags, 0, set_tid_at))?;
            main.spawn("clone3 (thread)", libc::SYS_clone3, &[scratch, 80])?
        } else {
            main.spawn("clone (thread)", libc::SYS_clone, &[flags, 0, 0, 0, 0])?
        };
        let s = sys::wait_stop(outer)?;
        if s.sig != libc::SIGSTOP {
            return Err(unexpected(
                outer,
                format!("new thread stopped by signal {}", s.sig),
            ));
        }
        tids.push((outer, tid as i32));
    }
    for (t, &(tid, tid_in)) in meta.threads.iter().zip(&tids) {
        let inj = Injector {
            tid,
            syscall_at: main.syscall_at,
            base: sys::get_regs(tid)?,
        };
        thread_state(&inj, &mem, inner, tid_in, t, scratch)?;
    }
    main.ok("munmap (scratch page)", libc::SYS_munmap, &[scratch, PAGE])?;

    for (t, &(tid, tid_in)) in meta.threads.iter().zip(&tids) {
        let mut regs: Regs = [0; reg::COUNT];
        if t.regs.len() != reg::COUNT {
            return Err(unexpected(pid, "registers of another size in the image"));
        }
        regs.copy_from_slice(&t.regs);
        sys::set_regs(tid, &regs)?;
        sys::set_xstate(tid, &t.xstate)?;
        if let Some(at) = t.cached_tid_at {
            // glibc's cached tid (raise, pthread_kill, recursive mutexes).
            mem.write(at, &(tid_in as u32).to_le_bytes())?;
        }
        sys::set_sigmask(tid, t.sigmask)?;
    }
    Ok(tids)
}

/// Gives `pid` (rebuilt, its threads `tids`) its resource limits and lets
/// it go: detached, running or (`stopped`) group-stopped.
fn release(pid: i32, tids: &[(i32, i32)], meta: &Meta, stopped: bool) -> Result<(), RestoreError> {
    for &(res, soft, hard) in &meta.rlimits {
        if sys::set_rlimit(pid, res, soft, hard).is_err() {
            // Not allowed to raise the hard limit: keep this one's, lower
            // the soft limit to it.
            let (_, h) = sys::get_rlimit(pid, res)?;
            sys::set_rlimit(pid, res, soft.min(h), h)?;
        }
    }
    if stopped {
        sys::kill(pid, libc::SIGSTOP)?;
    }
    for &(tid, _) in tids {
        sys::detach(tid, 0)?;
    }
    if stopped {
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
    inner: i32,
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
    // Signals pending since before the exec (a SIGCHLD from a child made
    // and ended for the tree) are not the process's: taken, then the
    // saved ones queued.
    mem.write(scratch, &[0xff; 8])?;
    mem.write(scratch + 16, &[0; 16])?;
    for _ in 0..130 {
        let r = main.call(libc::SYS_rt_sigtimedwait, &[scratch, 0, scratch + 16, 8])?;
        if r < 0 {
            break;
        }
    }
    for si in &meta.shared_pending {
        let signo = i32::from_le_bytes(si.0[0..4].try_into().unwrap_or_default());
        mem.write(scratch, &si.0)?;
        main.ok(
            "rt_sigqueueinfo",
            libc::SYS_rt_sigqueueinfo,
            &[inner as u64, signo as u64, scratch],
        )?;
    }
    Ok(())
}

/// One thread's own state, by calls injected into it; `pid` and `tid` as
/// the process sees them.
fn thread_state(
    inj: &Injector,
    mem: &Mem,
    pid: i32,
    tid: i32,
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
            &[pid as u64, tid as u64, signo as u64, scratch],
        )?;
    }
    Ok(())
}
