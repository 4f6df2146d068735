//! Transparent checkpoint and restore of an unmodified Linux process
//! (x86-64), taken from outside by its parent and rebuilt elsewhere as a new
//! child, with no help from the program.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let pid = 1;
//! use std::collections::BTreeMap;
//! use mig_ckpt::{dump, restore, DumpOptions, ImageFile, RestoreOptions};
//! // `pid` is our child, stopped with SIGSTOP.
//! let mut out = std::fs::File::create("/tmp/p.img")?;
//! dump(pid, &DumpOptions::default(), &mut out)?;
//! let img = ImageFile::open(std::fs::File::open("/tmp/p.img")?, true)?;
//! let restored = restore(&img, BTreeMap::new(), &RestoreOptions::default())?;
//! # let _ = restored; Ok(()) }
//! ```
//!
//! # Design
//!
//! **Dump** (`dump`): the process is already group-stopped by the caller.
//! Every thread is seized with `PTRACE_SEIZE` and trapped with
//! `PTRACE_INTERRUPT`; registers (with `fs_base`/`gs_base`), the XSAVE
//! state, masks, pending signals and rseq come from ptrace requests; what
//! only the process can tell (dispositions, brk, itimers, sigaltstack,
//! `clear_child_tid`) is asked by system calls injected into it, as CRIU's
//! compel does (`sys`). Pages come from `process_vm_readv` (or
//! `/proc/PID/mem` for pages the process may not read) straight into the
//! output, a few MiB at a time; `/proc/PID/pagemap` leaves out pages never
//! touched, and of a private file mapping only the pages the process
//! changed are taken. After a dump the process is exactly as it was:
//! stopped, detached, registers and mask as found, the scratch page it was
//! lent unmapped.
//!
//! **Restore** (`restore`) is driven from outside by ptrace, not by an
//! in-process restorer. The program's own file is started with
//! `PTRACE_TRACEME`, so the kernel stops it at the exec with `/proc/PID/exe`
//! right and nothing of the program run, and every step after is a system
//! call injected into it. Why not a small static restorer binary (DMTCP's
//! `mtcp_restart`, CRIU's restorer blob): such a restorer must be built for
//! and shipped with every install, must move itself out of the way of the
//! layout it rebuilds, and has no way to set another thread's registers
//! without ptrace or a signal frame trick; from outside every register of
//! every thread is settable with `PTRACE_SETREGSET`, the code stays safe
//! Rust in one process, and it is tested like any other Rust. The cost is
//! one ptrace round trip (two stops) per injected call, a few microseconds;
//! a restore needs a few per region and a few dozen for the rest, so it
//! costs milliseconds (see the bench), while the pages cost nothing:
//!
//! **Pages are mapped, not copied.** The image keeps its page data page
//! aligned, and a restore maps each run of 16 pages or more straight from
//! the image file, `MAP_PRIVATE` (copy on write); only small runs and the
//! stack are copied. A region's first page is always copied into memory of
//! its own, so that a region spans two mappings: `mremap` of a whole block
//! (glibc's `realloc` of a large allocation) then fails and the caller
//! falls back to copying, rather than growing a mapping of the image into
//! the bytes that follow it. A restored process's regions are then backed
//! by the image file; a dump recognises such a file by its magic (and any
//! deleted or memfd file likewise) and saves every page of those regions as
//! the process's own memory, so a restored process can be dumped and
//! restored again, any number of times.
//!
//! **Pid and tids are not kept.** The restored process and its threads have
//! new ids. Keeping them needs `clone3` with `set_tid`, which needs
//! `CAP_CHECKPOINT_RESTORE` and the ids free on the target host, which
//! nothing guarantees (a pid namespace per process would, and needs
//! privileges the daemon should not need). glibc caches each thread's tid in
//! its `struct pthread` (`fs_base + 0x2d0` in glibc 2.26 to at least 2.36)
//! and uses it in `raise`, `pthread_kill` and recursive mutexes: the dump
//! records that address when the word there is the thread's tid, and the
//! restore writes the new tid there.
//!
//! **The vDSO** is the kernel's, not saved: the image records its hash, the
//! restore refuses another kernel's and moves this one (with `[vvar]` and,
//! since Linux 6.13, `[vvar_vclock]`) to the saved addresses with `mremap`,
//! through a free range when targets and current places overlap.
//!
//! **Refusals** name what cannot be saved and leave the process as it was:
//! sockets (with their addresses), pipes not given anew by the caller,
//! epoll, timerfd, signalfd, eventfd, inotify, io_uring, devices other than
//! `/dev/null`, `zero`, `random`, `urandom`, deleted files, POSIX timers,
//! shared memory that is not a file, child processes.
//!
//! **Threads**: every thread is seized and saved; at restore the main
//! thread `clone`s the others (with `PTRACE_O_TRACECLONE` they are born
//! traced and stopped), each gets its registers and TLS (`fs_base`), its
//! rseq area, robust list, `clear_child_tid` (so `pthread_join` still
//! wakes), sigaltstack, mask and pending signals.
//!
//! # The caller's part
//!
//! - `dump` takes our child, stopped with SIGSTOP (or any group stop), and
//!   leaves it so. `restore` makes a child of the caller, running (or
//!   stopped, with [`RestoreOptions::stopped`]).
//! - ptrace ties a tracee to the tracing *thread*: call each `dump` or
//!   `restore` on one thread from start to end, and do not wait for that
//!   pid from another thread meanwhile (a ptrace stop would be taken from
//!   under it). A SIGCHLD handler that only flags is fine.
//! - Descriptors the caller gives anew (stdio pipes, the control socket)
//!   are named in [`DumpOptions::external_fds`] at the dump and given, by
//!   number, at the restore.
//! - Before a move, compare [`Fingerprint::here`] on both machines with
//!   [`mismatch`]; [`ImageFile::open`] validates an image, `restore` checks
//!   the vDSO itself.
//!
//! # Where things live
//!
//! - `image`: the image's bytes and state, validation (pure).
//! - `plan`: which pages to save, what to map where at restore (pure).
//! - `proc`: `/proc` parsers (pure) and readers.
//! - `fds`: which descriptors can be saved, and why not (pure decision).
//! - `compat`: what a target needs, and why one does not match.
//! - `sys`: the unsafe edge: ptrace, injected calls, another process's
//!   memory.
//! - `dump`, `restore`: the two procedures over those.
//!
//! # Limits
//!
//! x86-64 only. One process (its threads included), not a tree: a process
//! with children is refused. A shell waits for its children by pid, so
//! trees need the pids kept (a pid namespace per process, or `clone3`
//! with `set_tid` and `CAP_CHECKPOINT_RESTORE`). The restored process runs
//! with the caller's credentials, session and process group; a shared file
//! mapping or an open file is reopened by path, so its content is the
//! target's, and two descriptors that shared one open file no longer share
//! its offset. The image file must not be truncated or rewritten while a
//! process restored from it runs (deleting it is fine). A system call
//! restarted through `restart_syscall` (a sleep) returns `EINTR` in the
//! restored process. Other things glibc or a program keeps of a tid (the
//! owner of a locked error-checking or recursive mutex) keep the old one. A
//! region's pages mapped from the image are file pages to the kernel:
//! `mremap` growing a part of such a region past its first page maps the
//! image's following bytes (or past its end, SIGBUS).

pub mod compat;
mod dump;
pub mod fds;
pub mod image;
mod ns;
pub mod plan;
pub mod proc;
mod restore;
mod sys;
pub mod tree;

use std::fs::File;
use std::os::unix::fs::FileExt;

pub use compat::{mismatch, Fingerprint};
pub use dump::{dump, dump_tree, DumpError, DumpOptions, DumpStats, GLIBC_TID_OFFSET};
pub use image::{Image, ImageError, Meta};
pub use ns::{
    descendants, init_program, spawn_in_namespace, stop_tree, NsError, Spawn, Tree, INIT_NAME,
};
pub use restore::{restore, restore_tree, RestoreError, RestoreOptions, Restored};
pub use sys::SysError;

/// A validated image in a file, ready to restore from.
#[derive(Debug)]
pub struct ImageFile {
    file: File,
    header: image::Header,
    image: Image,
}

impl ImageFile {
    /// Reads and checks an image: size, magic, version, header, metadata
    /// and trailer checksums, and with `verify_pages` every page run's
    /// checksum too (which reads the whole file).
    pub fn open(file: File, verify_pages: bool) -> Result<ImageFile, ImageError> {
        let io = |e: std::io::Error| ImageError::Io(e.to_string());
        let total = file.metadata().map_err(io)?.len();
        let mut head = [0u8; image::HEADER_LEN];
        let n = (total as usize).min(image::HEADER_LEN);
        file.read_exact_at(&mut head[..n], 0).map_err(io)?;
        let header = image::Header::decode(&head[..n], total)?;
        let mut mb = vec![0u8; header.meta_len as usize];
        file.read_exact_at(&mut mb, image::HEADER_LEN as u64)
            .map_err(io)?;
        if crc32c::crc32c(&mb) != header.meta_crc {
            return Err(ImageError::MetaChecksum);
        }
        let meta = image::decode_meta(header.version, &mb)?;
        meta.check_runs(&header)?;
        let mut tb = vec![0u8; (total - header.trailer_offset()) as usize];
        file.read_exact_at(&mut tb, header.trailer_offset())
            .map_err(io)?;
        let crcs = image::decode_trailer(&tb, header.runs as usize)?;
        if verify_pages {
            let mut buf = vec![0u8; 4 << 20];
            for (i, (run, want)) in meta.runs().zip(&crcs).enumerate() {
                let mut crc = 0;
                let mut done = 0;
                let len = run.pages * image::PAGE;
                while done < len {
                    let n = (len - done).min(buf.len() as u64) as usize;
                    file.read_exact_at(&mut buf[..n], header.data_offset + run.offset + done)
                        .map_err(io)?;
                    crc = crc32c::crc32c_append(crc, &buf[..n]);
                    done += n as u64;
                }
                if crc != *want {
                    return Err(ImageError::RunChecksum {
                        index: i,
                        addr: run.addr,
                    });
                }
            }
        }
        Ok(ImageFile {
            file,
            header,
            image: meta,
        })
    }

    /// The state it holds.
    pub fn image(&self) -> &Image {
        &self.image
    }

    /// The file.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Where the page data starts in the file.
    pub fn data_offset(&self) -> u64 {
        self.header.data_offset
    }
}
