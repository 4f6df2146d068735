//! Transparent checkpoint and restore of unmodified Linux processes
//! (x86-64): one process, or a whole tree of them (a shell and its
//! children, pipes between them), taken from outside by their parent and
//! rebuilt elsewhere as new children, with no help from the programs.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::collections::BTreeMap;
//! use std::time::Duration;
//! use mig_ckpt::{dump_tree, restore_tree, spawn_in_namespace, DumpOptions, ImageFile};
//! use mig_ckpt::{RestoreOptions, Spawn};
//! // A VP started in a pid namespace of its own, under the crate's init.
//! let tree = spawn_in_namespace(Spawn {
//!     program: "/bin/sh".into(),
//!     argv: vec!["sh".into(), "-c".into(), "seq 1 100000 | md5sum".into()],
//!     ..Default::default()
//! })?;
//! // Later: every process stopped, the tree saved, the old one killed.
//! tree.stop(Duration::from_secs(5))?;
//! let mut out = std::fs::File::create("/tmp/t.img")?;
//! dump_tree(tree.init(), &DumpOptions::default(), &mut out)?;
//! tree.kill()?;
//! // Elsewhere: the same processes, with their pids, in a new namespace.
//! let img = ImageFile::open(std::fs::File::open("/tmp/t.img")?, true)?;
//! let mut moved = restore_tree(&img, BTreeMap::new(), &RestoreOptions::default())?;
//! let status = moved.wait()?;
//! # let _ = status; Ok(()) }
//! ```
//!
//! # Design
//!
//! **Dump** (`dump`, `dump_tree`): the processes are already group-stopped
//! by the caller. Every thread is seized with `PTRACE_SEIZE` and trapped
//! with `PTRACE_INTERRUPT`; registers (with `fs_base`/`gs_base`), the XSAVE
//! state, masks, pending signals and rseq come from ptrace requests; what
//! only a process can tell (dispositions, brk, itimers, sigaltstack,
//! `clear_child_tid`) is asked by system calls injected into it, as CRIU's
//! compel does (`sys`). Pages come from `process_vm_readv` (or
//! `/proc/PID/mem` for pages the process may not read) straight into the
//! output, a few MiB at a time; `/proc/PID/pagemap` leaves out pages never
//! touched, and of a private file mapping only the pages the process
//! changed are taken. After a dump the processes are exactly as they were:
//! stopped, detached, registers and masks as found, the scratch page each
//! was lent unmapped, the bytes in their pipes still there.
//!
//! **Restore** (`restore`, `restore_tree`) is driven from outside by
//! ptrace, not by an in-process restorer. Each program's own file is
//! `exec`'d under ptrace, so the kernel stops it at the exec with
//! `/proc/PID/exe` right and nothing of the program run, and every step
//! after is a system call injected into it. Why not a small static restorer
//! binary (DMTCP's `mtcp_restart`, CRIU's restorer blob): such a restorer
//! must be built for and shipped with every install, must move itself out
//! of the way of the layout it rebuilds, and has no way to set another
//! thread's registers without ptrace or a signal frame trick; from outside
//! every register of every thread is settable with `PTRACE_SETREGSET`, the
//! code stays safe Rust in one process, and it is tested like any other
//! Rust. The cost is one ptrace round trip (two stops) per injected call, a
//! few microseconds; a restore needs a few per region and a few dozen for
//! the rest, so it costs milliseconds (see the bench), while the pages cost
//! nothing:
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
//! **Trees keep their pids** in a pid namespace of their own (`ns`). A
//! shell waits for its children by pid, so a tree is only movable if every
//! pid comes back; a fresh pid namespace has every pid free, and `clone3`
//! with `set_tid` gives a new process the pid asked for. Who is pid 1: the
//! crate's init, a static program of 114 bytes of code run from a sealed
//! memfd, which reaps what is left to it and, when the tree's root ends,
//! passes the root's wait status to the caller (a pipe, and its own exit
//! code). Not the VP's own program: a namespace's pid 1 gets from outside
//! only SIGKILL and SIGSTOP (SIGCONT still continues it) and from inside
//! only the signals it has handlers for, so a `SIGTERM` or a `pvm_sendsig`
//! to a program without a handler would do nothing, and a shell as pid 1
//! would inherit every orphan. Under the crate's init the program is pid 2
//! and gets signals as anywhere. Not a fork of the caller either: it would
//! keep the caller's memory alive (copy on write) for the tree's life. The
//! init is not saved: a restore makes a new one.
//!
//! **A tree's dump** (`dump_tree`) takes the root and every descendant (or,
//! given the crate's init, everything under it): each process's pid,
//! parent, process group and session as the processes see them, each with
//! its threads as above. Descriptors are saved as open files (file
//! descriptions): descriptors of any processes that share one (`dup`,
//! inheritance) are found with `kcmp` and share one again at restore,
//! offset and flags included. Pipes between processes of the tree are made
//! again, both ends wherever they were, with the bytes in flight: those are
//! read with `tee(2)` from the pipe opened anew through `/proc`, which
//! copies them without taking them (a dumped tree that is continued finds
//! them still there). Zombies (children ended and not yet waited for) are
//! saved with their wait status and made again as zombies of the same
//! parent, so its `waitpid` by pid gets the same answer. Refused, with the
//! reason: processes sharing memory, descriptor table, working directory or
//! signal handlers (`CLONE_VM`/`FILES`/`FS`/`SIGHAND` without
//! `CLONE_THREAD`), a process group or session whose leader has exited
//! (its id cannot be made again), a process traced by another, and all
//! that a single process's dump refuses. The root's `external_fds` are
//! given anew at restore, and so is any descriptor of another process that
//! is one of them (stdout inherited).
//!
//! **What was on its way to the root** through what the caller gives anew
//! goes into the image for the caller to write first into the new
//! descriptor: the bytes its stdin pipe held (`tee`, as above) and, for a
//! stream socket whose other end the caller holds (`DumpOptions::sockets`:
//! a VP's socket to its daemon), the bytes that socket held, looked at with
//! `MSG_PEEK` through a duplicate of the root's descriptor
//! (`pidfd_getfd(2)`), not taken; each followed by what the caller still
//! held. The other way, the caller reads what the stopped root wrote before
//! the dump, and hands in the start of a write the root had not finished
//! (`SocketState::unfinished`), for its new reader to take first. A socket
//! with descriptors on their way through it is refused.
//!
//! **A tree's restore** (`restore_tree`) plans the order (`tree`): every
//! process is forked by its saved parent (only a parent can wait for its
//! child), parents first; a session leader calls `setsid` between the
//! forks of its children born before it (which stay out of its session)
//! and those born after; process groups are joined once every process
//! exists, leaders first. A new init is started in a new pid namespace,
//! traced and stopped at its exec, holding every descriptor the tree needs;
//! each process is then forked from its parent, still a bare copy of init,
//! by an injected `clone3` with its pid (`PTRACE_O_TRACEFORK`: born traced
//! and stopped); zombies end as they had (`exit_group`, or their signal);
//! every other process places its descriptors, `exec`s its program and is
//! rebuilt as a single process is, its threads made with their tids too (so
//! glibc's cached tids are right as they are). Init drops the descriptors
//! and is let go, then every process is released at once. Any failure
//! kills the namespace, so nothing half-built is left.
//!
//! **One process without a namespace** (`dump`, `restore`) keeps the first
//! path: the restored process and its threads have new ids, which needs no
//! privilege. glibc caches each thread's tid in its `struct pthread`
//! (`fs_base + 0x2d0` in glibc 2.26 to at least 2.36) and uses it in
//! `raise`, `pthread_kill` and recursive mutexes: the dump records that
//! address when the word there is the thread's tid, and the restore writes
//! the new tid there. A process with children is refused (`dump_tree`
//! saves it), as is a pipe whose other end is not in the process.
//!
//! **The vDSO** is the kernel's, not saved: the image records its hash, the
//! restore refuses another kernel's and moves this one (with `[vvar]` and,
//! since Linux 6.13, `[vvar_vclock]`) to the saved addresses with `mremap`,
//! through a free range when targets and current places overlap.
//!
//! **Memfds and links to peers that stay.** A memfd the processes hold or
//! map shared (`memfd_create`: libmig's rings and pooled buffers) is saved
//! with its bytes, name, size and seals (`Image::memfds`) and made anew at
//! restore: its descriptors and mappings share the new one, as they shared
//! the old; whoever else held it keeps the old one, and from then on the
//! two are apart. Its bytes (and those of memfds on their way through a
//! socket) are a run of the image's data after the pages, streamed from
//! the memfd (or, for one only mapped, from the process's memory) a piece
//! at a time at the dump and copied from the file into the new memfd at
//! the restore, so neither holds a memfd whole in memory; a memfd of more
//! than `memfd::MAX_SIZE` (1 GiB) is refused. A stream socket the caller
//! names (`DumpOptions::cut`: a direct link to a VP that stays) is saved
//! with the bytes it held and restored with its other end closed: the
//! process reads them, then the end of the stream, and its writes fail
//! (`EPIPE`). So that whoever stays stops writing into memory the process
//! no longer reads, the caller may have bits set in it first
//! (`DumpOptions::set_bits`), atomically against the other processes that
//! map it: a futex operation injected into the process (`FUTEX_WAKE_OP`,
//! the kernel's atomic OR, waking no one).
//!
//! **Refusals** name what cannot be saved and leave the processes as they
//! were: sockets the caller does not name (with their addresses), pipes to
//! outside the tree not given anew by the caller, FIFOs, epoll, timerfd,
//! signalfd, eventfd, inotify, io_uring, devices other than `/dev/null`,
//! `zero`, `random`, `urandom`, deleted files, POSIX timers, shared memory
//! that is neither a file nor a memfd.
//!
//! **Threads**: every thread is seized and saved; at restore the main
//! thread `clone`s the others (with `PTRACE_O_TRACECLONE` they are born
//! traced and stopped), each gets its registers and TLS (`fs_base`), its
//! rseq area, robust list, `clear_child_tid` (so `pthread_join` still
//! wakes), sigaltstack, mask and pending signals.
//!
//! # The caller's part
//!
//! - **Starting a VP so that its tree can move**: [`spawn_in_namespace`]
//!   (program, argv, env, cwd, descriptors by number): the caller's child
//!   is the namespace's init ([`Tree::init`], the process group of the
//!   tree), the program its child ([`Tree::program`], pid 2 inside). A VP
//!   started the usual way (its own process group) can be saved as a tree
//!   too (`dump_tree` of its pid) and is restored into a namespace with
//!   every pid as it was; but its orphans leave the tree (they go to the
//!   system's init), and its parent's pid changes from the caller's to 1.
//!   [`Spawn::join`] and [`RestoreOptions::join`] put the init, and so
//!   every process it forks, in the caller's cgroup (a VP's cell) first.
//! - **Signals**: to the program, [`Tree::signal`] (or `kill` of
//!   [`Tree::program`]); to every process, `killpg` of [`Tree::init`] (it
//!   reaches those that kept the group; init itself stops on SIGSTOP, dies
//!   only of SIGKILL, ignores the rest) or [`Tree::signal_all`]. **Stop**
//!   for a dump with [`Tree::stop`] (or [`stop_tree`] for a tree outside a
//!   namespace): SIGSTOP to every process, again until all are stopped, so
//!   that those that left the group are caught too; [`Tree::cont`]
//!   continues them. **Kill**: [`Tree::kill`] (SIGKILL to init ends the
//!   namespace). **Reap**: the init is the caller's child: [`Tree::wait`],
//!   or the caller's own `waitpid` of the init followed by
//!   [`Tree::exit_status`], which gives the program's wait status (exit
//!   code or signal) that init passed on.
//! - `dump` and `dump_tree` leave the processes stopped; `restore` and
//!   `restore_tree` make children of the caller, running (or stopped, with
//!   [`RestoreOptions::stopped`]).
//! - **Privileges**: a pid namespace needs `CAP_SYS_ADMIN` and `set_tid`
//!   `CAP_CHECKPOINT_RESTORE` (or `CAP_SYS_ADMIN`) in the user namespace
//!   owning the pid namespace: [`spawn_in_namespace`] and [`restore_tree`]
//!   need root (as the daemon is in CI); without, they fail with a clear
//!   [`NsError::Namespace`]. Dumps need no privilege (ptrace of one's own
//!   descendants). An unprivileged daemon has two ways: refuse trees (start
//!   VPs as today; `dump` of a process with children is refused and
//!   `restore` needs nothing), or a user namespace with the pid namespace
//!   (measured on Linux 6.18: a process of uid 65534 makes both with one
//!   `clone3`, writes its own uid and gid maps, and the new namespace's
//!   first process forks with `set_tid` as asked; not built here, since
//!   injecting that `clone3` after init's `exec` needs init to keep
//!   `CAP_CHECKPOINT_RESTORE` as an ambient capability, which the restored
//!   programs must drop before their own `exec`).
//! - ptrace ties a tracee to the tracing *thread*: call each dump or
//!   restore on one thread from start to end, and do not wait for those
//!   pids from another thread meanwhile (a ptrace stop would be taken from
//!   under it). A SIGCHLD handler that only flags is fine.
//!   [`Spawn::die_with_caller`] and [`RestoreOptions::die_with_caller`] tie
//!   a tree's life to the calling thread's.
//! - Descriptors the caller gives anew (stdio pipes, the control socket)
//!   are named in [`DumpOptions::external_fds`] at the dump (the root's
//!   numbers) and given, by number, at the restore.
//! - A dump records the source's [`Fingerprint`] in the image
//!   (`Image::needs`: its files' hashes, vDSO, CPU features); the
//!   restores compare this machine's with it ([`mismatch`]) and refuse,
//!   saying why, before they start anything. [`ImageFile::open`]
//!   validates an image.
//!
//! # Where things live
//!
//! - `image`: the image's bytes and state, validation (pure); `image::v1`
//!   reads the first format.
//! - `plan`: which pages to save, what to map where at restore (pure).
//! - `tree`: the order that makes a tree again (pure).
//! - `proc`: `/proc` parsers (pure) and readers.
//! - `fds`: which descriptors can be saved, and why not, and which share an
//!   open file (pure decisions).
//! - `compat`: what a target needs, and why one does not match.
//! - `sys`: the unsafe edge: ptrace, injected calls, another process's
//!   memory, `kcmp`, reading a pipe with `tee`.
//! - `ns`: the namespace: the init program, starting a VP under it, the
//!   [`Tree`] handle (its `clone` child side is the other unsafe edge).
//! - `dump`, `restore` (and `restore::tree`): the procedures over those.
//!
//! # Limits
//!
//! x86-64 only. A tree's processes run with the caller's credentials; its
//! root's process group and session (when not its own) are the restored
//! init's (the caller's session). A controlling terminal is not kept. An
//! end of a pipe held by a process outside the tree (not given anew) is
//! lost: the restored pipe has that end closed. A descriptor given anew is
//! known by the root's number: a shell saved while a builtin has its
//! stdout redirected (dash keeps the caller's pipe on fd 10 meanwhile) is
//! given the caller's new pipe on fd 1 and a pipe with no reader on fd 10.
//! A zombie that died of a
//! signal that dumps core is made again without the core flag in its
//! status. A shared file mapping or an open file is reopened by path, so
//! its content is the target's. The image file must not be truncated or
//! rewritten while a process restored from it runs (deleting it is fine).
//! A system call restarted through `restart_syscall` (a sleep) returns
//! `EINTR` in the restored process. Outside a namespace, other things glibc
//! or a program keeps of a tid (the owner of a locked error-checking or
//! recursive mutex) keep the old one. A region's pages mapped from the
//! image are file pages to the kernel: `mremap` growing a part of such a
//! region past its first page maps the image's following bytes (or past
//! its end, SIGBUS).

pub mod compat;
mod dump;
pub mod fds;
pub mod image;
pub mod memfd;
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
pub use image::{Image, ImageError, Meta, SocketState};
pub use ns::{
    descendants, spawn_in_namespace, stop_tree, CloneArgs, NsError, Spawn, Tree, CLONE_INTO_CGROUP,
    INIT_NAME,
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
    /// and trailer checksums, and with `verify_pages` every run's checksum
    /// too, pages and memfds' bytes (which reads the whole file). The
    /// memfds on their way through the caller's sockets
    /// (`SocketState::passed`, which the caller makes anew with
    /// [`memfd::make`]) are read into memory here, their runs checked.
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
        let mut meta = image::decode_meta(header.version, &mb)?;
        meta.check_runs(&header)?;
        let mut tb = vec![0u8; (total - header.trailer_offset()) as usize];
        file.read_exact_at(&mut tb, header.trailer_offset())
            .map_err(io)?;
        let crcs = image::decode_trailer(&tb, header.runs as usize)?;
        let check = |i: usize, (start, len, name): (u64, u64, image::RunName<'_>)| {
            let mut buf = vec![0u8; (4 << 20).min(len as usize)];
            let mut crc = 0;
            let mut done = 0;
            while done < len {
                let n = (len - done).min(buf.len() as u64) as usize;
                file.read_exact_at(&mut buf[..n], header.data_offset + start + done)
                    .map_err(io)?;
                crc = crc32c::crc32c_append(crc, &buf[..n]);
                done += n as u64;
            }
            if Some(&crc) != crcs.get(i) {
                return Err(name.damaged(i));
            }
            Ok(())
        };
        if verify_pages {
            for (i, run) in meta.all_runs().enumerate() {
                check(i, run)?;
            }
        }
        // The caller's sockets' memfds: checked (unless just done) and read.
        let first = meta.all_runs().count()
            - meta
                .sockets
                .iter()
                .flat_map(|s| &s.passed)
                .filter(|m| m.data.run().is_some())
                .count();
        let held: u64 = meta
            .sockets
            .iter()
            .flat_map(|s| &s.passed)
            .map(|m| m.data.len())
            .fold(0, u64::saturating_add);
        if held > memfd::MAX_SIZE {
            return Err(ImageError::Meta(format!(
                "{held} bytes of memfds on their way through its sockets (most {})",
                memfd::MAX_SIZE
            )));
        }
        let mut i = first;
        for m in meta.sockets.iter_mut().flat_map(|s| s.passed.iter_mut()) {
            if let image::MemfdBytes::Image { offset, len } = m.data {
                if len > 0 {
                    if !verify_pages {
                        check(
                            i,
                            (offset, image::page_up(len), image::RunName::Memfd(&m.name)),
                        )?;
                    }
                    i += 1;
                }
                let mut b =
                    vec![0u8; usize::try_from(len).map_err(|e| ImageError::Io(e.to_string()))?];
                file.read_exact_at(&mut b, header.data_offset + offset)
                    .map_err(io)?;
                m.data = image::MemfdBytes::Held(b);
            }
        }
        Ok(ImageFile {
            file,
            header,
            image: meta,
        })
    }

    /// A new memfd as `m` (one of the image's) says, its bytes copied from
    /// the file.
    pub fn make_memfd(&self, m: &image::Memfd) -> std::io::Result<std::os::fd::OwnedFd> {
        memfd::make_from(m, Some((&self.file, self.header.data_offset)))
    }

    /// The bytes of `m` (one of the image's), read into memory (trailing
    /// zeros left out).
    pub fn memfd_bytes(&self, m: &image::Memfd) -> std::io::Result<Vec<u8>> {
        match &m.data {
            image::MemfdBytes::Held(b) => Ok(b.clone()),
            image::MemfdBytes::Image { offset, len } => {
                let mut b = vec![0u8; usize::try_from(*len).map_err(std::io::Error::other)?];
                self.file
                    .read_exact_at(&mut b, self.header.data_offset + offset)?;
                Ok(b)
            }
        }
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
