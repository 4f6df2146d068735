//! Taking stopped processes' state from outside and writing their image.
//!
//! [`dump`] saves one process (its children refused) whose pid need not be
//! kept; [`dump_tree`] saves a process and all its descendants (or every
//! process under the crate's init of a pid namespace, see `ns`), their
//! pids, parents, process groups and sessions, zombies, the open files
//! they share and the pipes between them with the bytes in flight (read
//! with `tee(2)`, which leaves them in the pipe), and what was on its way
//! to the root through the stdin pipe and the socket its caller gives anew
//! (`Image::inputs`, `Image::sockets`).
//!
//! The steps, with every process group-stopped (SIGSTOP) by the caller:
//! find the processes and refuse what cannot be saved before touching any
//! (processes sharing memory, descriptor table, cwd or signal handlers,
//! POSIX timers, descriptors that are not files, memfds, pipes of the tree
//! or sockets the caller names, shared memory that is neither a file nor a
//! memfd, a process traced by another); decide the open files of
//! all of them at once (which descriptors share one, `kcmp`); then for each
//! process in turn: seize every thread (`PTRACE_SEIZE` +
//! `PTRACE_INTERRUPT`), read registers, vector state, masks, pending
//! signals, rseq and the robust list through ptrace; ask the process what
//! only it can say by injected system calls (signal dispositions, brk,
//! itimers, each thread's sigaltstack and `clear_child_tid`), with every
//! signal blocked meanwhile and a scratch page mapped for the answers and
//! unmapped after; read the memory map and pagemap; put every register and
//! mask back. Then stream the pages straight from each process into the
//! image, then each memfd's bytes (from a descriptor of it, or from the
//! memory of a process that only maps it, a piece at a time, with the
//! bits the caller names set on the way), and detach all. The group stop is still in force, so the kernel
//! stops each thread again at the detach and the caller can still continue
//! the processes if the move is called off. Any failure leaves them the
//! same way.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;

use sha2::{Digest, Sha256};

use crate::fds::{self, FdsError, Holder};
use crate::image::{
    self, Cpu, Header, Image, ImageError, Memfd, MemfdBytes, Meta, MmFields, OpenFile,
    PendingInput, Pipe, Proc, ProcState, Prot, Region, RegionKind, Run, SigAction, SigInfo,
    SocketState, Special, Thread, PAGE,
};
use crate::plan::{is_special, runs_to_save, Take};
use crate::proc::{self, Ids, MapsEntry};
use crate::sys::{self, reg, Injector, Kcmp, Mem, Regs, SysError};

/// Where glibc 2.26 and later (2.36 here) keep a thread's tid: `struct
/// pthread`'s `tid`, after the 704-byte `tcbhead_t` and a 16-byte list head,
/// from the thread pointer (`fs_base`). A dump records the address only if
/// the word there is the thread's tid.
pub const GLIBC_TID_OFFSET: u64 = 0x2d0;

/// The resource limits saved (all of them).
const RLIMITS: u32 = 16;

/// What the caller says of a dump.
#[derive(Debug, Clone, Default)]
pub struct DumpOptions {
    /// Descriptors of the root process the caller will give anew at
    /// restore (stdio pipes, the control socket): saved as their numbers
    /// only. A descriptor of another process of the tree that is one of
    /// these (inherited) is given the same.
    pub external_fds: BTreeSet<i32>,
    /// Of `external_fds`, those that are the read end of a pipe the
    /// caller writes (stdin): the bytes the caller still holds for the
    /// process and whether it closed its end. The image keeps what the
    /// pipe held, then these (`Image::inputs`), for the caller to write
    /// into the new pipe first. The pipe is only looked at, not read.
    pub inputs: BTreeMap<i32, (Vec<u8>, bool)>,
    /// Of `external_fds`, those that are the root's end of a stream
    /// socket whose other end the caller holds (a VP's socket to its
    /// daemon), each with what the caller says of it: `unread`, the bytes
    /// it still holds for the root, not yet written into the socket;
    /// `unfinished` and `notes`, as they go into the image. The image's
    /// [`SocketState`] keeps what the socket held for the root, then
    /// `unread`. The socket is only looked at (a duplicate of the root's
    /// descriptor, `pidfd_getfd(2)`, read with `MSG_PEEK`), not read; one
    /// with descriptors on their way to the root is refused.
    pub sockets: Vec<SocketState>,
    /// The inodes of stream sockets that may be cut from their other end
    /// (which stays behind): saved with the bytes they held, restored as
    /// sockets whose other end is closed (`OpenFile::Cut`). Any other
    /// socket is refused. One with descriptors on their way is refused.
    pub cut: BTreeSet<u64>,
    /// Bits to set in the memory of processes (by pid, as the caller sees
    /// them) before they are saved, each (address of an aligned 32-bit
    /// word, bit 0-31), atomically against any other process that shares
    /// the page, as if the process did it itself: the caller's word to
    /// whoever shares memory with it (a flag saying it has gone).
    pub set_bits: BTreeMap<i32, Vec<(u64, u32)>>,
    /// A checkpoint, not a move: the processes run on, sharing what they
    /// shared, so `set_bits` are set in the image only (each must then lie
    /// in a shared mapping of a memfd) and `cut` sockets are cut in the
    /// image only. For a move, a cut socket is first shut for reading
    /// (its peer's writes fail from then on, and it sends by other means
    /// what it would have written), then looked at.
    pub checkpoint_only: bool,
    /// Bits to set in every memfd of a name the processes hold, or that is
    /// on its way to them through a socket whose bytes are saved (not yet
    /// mapped: `set_bits` cannot name it), or that they map: (name, byte
    /// offset of an aligned 32-bit word, bit). As `set_bits`: in the
    /// memfd itself, atomically, before its bytes are read, unless
    /// `checkpoint_only`; in the image always.
    pub mark_memfds: Vec<(String, u64, u32)>,
}

/// What a dump wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DumpStats {
    /// Image bytes.
    pub bytes: u64,
    /// Pages saved.
    pub pages: u64,
    /// Processes saved (zombies included).
    pub processes: usize,
    /// Threads saved.
    pub threads: usize,
}

/// Why a dump failed. The processes are left stopped and detached.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    /// A process is not in a group stop.
    #[error("pid {pid} is not stopped (state {state}): stop it with SIGSTOP first")]
    NotStopped {
        /// The process.
        pid: i32,
        /// Its state letter.
        state: String,
    },
    /// Something of the processes cannot be saved; every reason is named.
    #[error("pid {pid} cannot be saved: {what}")]
    Unsupported {
        /// The process (the root, for a tree).
        pid: i32,
        /// What and why.
        what: String,
    },
    /// A system call or ptrace request failed.
    #[error(transparent)]
    Sys(#[from] SysError),
    /// `/proc` could not be read.
    #[error("pid {pid}: reading {what}: {detail}")]
    Proc {
        /// The process.
        pid: i32,
        /// Which file.
        what: String,
        /// What went wrong.
        detail: String,
    },
    /// The image could not be written.
    #[error("writing the image of pid {pid}: {source}")]
    Write {
        /// The process.
        pid: i32,
        /// The writer's error.
        #[source]
        source: io::Error,
    },
    /// The metadata could not be encoded.
    #[error(transparent)]
    Image(#[from] ImageError),
}

fn proc_err(pid: i32, what: &str, e: impl std::fmt::Display) -> DumpError {
    DumpError::Proc {
        pid,
        what: what.into(),
        detail: e.to_string(),
    }
}

fn read_proc(pid: i32, name: &str) -> Result<String, DumpError> {
    fs::read_to_string(format!("/proc/{pid}/{name}")).map_err(|e| proc_err(pid, name, e))
}

/// Saves the stopped process `pid` (a child of the caller, without
/// children of its own) into `out`. Its pid is not kept: the image
/// restores with [`crate::restore`] as a new process with a new pid, or
/// with [`crate::restore_tree`] in a pid namespace of its own, with its pid.
pub fn dump(pid: i32, opts: &DumpOptions, out: &mut dyn Write) -> Result<DumpStats, DumpError> {
    let p = Found::read(pid)?;
    let children = proc::children(pid).map_err(|e| proc_err(pid, "children", e))?;
    if !children.is_empty() {
        let list: Vec<String> = children.iter().map(i32::to_string).collect();
        return Err(DumpError::Unsupported {
            pid,
            what: format!(
                "it has child processes ({}): save it with its tree (dump_tree)",
                list.join(" ")
            ),
        });
    }
    save(vec![p], false, opts, out)
}

/// Saves the stopped process `root` and all its descendants into `out`,
/// each with its pid, to be restored by [`crate::restore_tree`]. When
/// `root` is the init of a pid namespace made by this crate
/// ([`crate::spawn_in_namespace`], [`crate::restore_tree`]), the processes
/// saved are everything under it and the init is not saved (a restore
/// makes a new one). Every process must be stopped ([`crate::Tree::stop`]);
/// `opts.external_fds` are the root's (for a namespace, the program's:
/// its first child).
pub fn dump_tree(
    root: i32,
    opts: &DumpOptions,
    out: &mut dyn Write,
) -> Result<DumpStats, DumpError> {
    let top = if crate::ns::is_init(root) {
        let mut kids = proc::children(root).map_err(|e| proc_err(root, "children", e))?;
        // The program (pid 2 inside) first: it is the root.
        let mut ids = Vec::new();
        for &k in &kids {
            ids.push((Found::read(k)?.ids.pid != 2, k));
        }
        ids.sort_unstable();
        kids = ids.into_iter().map(|(_, k)| k).collect();
        if kids.is_empty() {
            return Err(DumpError::Unsupported {
                pid: root,
                what: "its namespace holds no process (the program has ended)".into(),
            });
        }
        kids
    } else {
        vec![root]
    };
    let mut found: Vec<Found> = Vec::new();
    let mut queue: std::collections::VecDeque<i32> = top.into();
    while let Some(pid) = queue.pop_front() {
        if found.iter().any(|f| f.outer == pid) {
            continue;
        }
        let f = Found::read(pid)?;
        if f.state != "Z" {
            queue.extend(proc::children(pid).map_err(|e| proc_err(pid, "children", e))?);
        }
        found.push(f);
    }
    save(found, true, opts, out)
}

/// A process found for a dump, as `/proc` shows it.
#[derive(Debug, Clone)]
struct Found {
    /// Its pid in the caller's namespace.
    outer: i32,
    /// Its ids (pid, process group, session in its own namespace).
    ids: Ids,
    /// Its state letter.
    state: String,
    /// Its wait status, for a zombie (`stat` field 52).
    exit_code: i32,
}

impl Found {
    fn read(pid: i32) -> Result<Found, DumpError> {
        let stat =
            proc::parse_stat(&read_proc(pid, "stat")?).map_err(|e| proc_err(pid, "stat", e))?;
        let state = stat.first().cloned().unwrap_or_default();
        let ids = proc::parse_ids(&read_proc(pid, "status")?)
            .ok_or_else(|| proc_err(pid, "status", "no NSpid/NSpgid/NSsid lines"))?;
        let exit_code = if state == "Z" {
            proc::stat_field(&stat, 52).map_err(|e| proc_err(pid, "stat", e))? as i32
        } else {
            0
        };
        Ok(Found {
            outer: pid,
            ids,
            state,
            exit_code,
        })
    }
}

/// Saves the processes `found` (each after its parent, the root first).
fn save(
    found: Vec<Found>,
    keep_pids: bool,
    opts: &DumpOptions,
    out: &mut dyn Write,
) -> Result<DumpStats, DumpError> {
    let root = found.first().map_or(0, |f| f.outer);
    for f in &found {
        if f.state != "T" && f.state != "Z" {
            return Err(DumpError::NotStopped {
                pid: f.outer,
                state: f.state.clone(),
            });
        }
    }
    let procs = tree_places(&found, keep_pids)
        .map_err(|what| DumpError::Unsupported { pid: root, what })?;
    refuse_what_cannot_be_saved(&found)?;
    let live: Vec<&Found> = found.iter().filter(|f| f.state != "Z").collect();
    let mut holders = Vec::new();
    for f in &live {
        let fds = fds::facts(f.outer).map_err(|e| match e {
            FdsError::Proc(d) => proc_err(f.outer, "fd", d),
            FdsError::Refused(what) => DumpError::Unsupported { pid: f.outer, what },
        })?;
        holders.push(Holder { pid: f.outer, fds });
    }
    let same = |a: (i32, i32), b: (i32, i32)| {
        a == b || sys::kcmp(a.0, b.0, Kcmp::File(a.1, b.1)).unwrap_or(false)
    };
    let mut open = fds::open_files(&holders, &opts.external_fds, &opts.cut, true, same).map_err(
        |e| match e {
            FdsError::Proc(d) => proc_err(root, "fd", d),
            FdsError::Refused(what) => DumpError::Unsupported { pid: root, what },
        },
    )?;
    if !keep_pids {
        // One process: its pipes must have both ends in it.
        let ends = |pipe: u32, write: bool| {
            open.files.iter().any(|f| {
                matches!(f, OpenFile::Pipe { pipe: p, write: w, .. } if *p == pipe && *w == write)
            })
        };
        for (i, &(_, fd)) in open.pipes.iter().enumerate() {
            if !ends(i as u32, false) || !ends(i as u32, true) {
                return Err(DumpError::Unsupported {
                    pid: root,
                    what: format!(
                        "fd {fd} is a pipe whose other end is not in the process (save it with its tree, or give it anew)"
                    ),
                });
            }
        }
    }
    let mut pipes = Vec::new();
    for &(pid, fd) in &open.pipes {
        let (size, data) = sys::peek_pipe(pid, fd)?;
        pipes.push(Pipe { size, data });
    }
    let mut inputs = Vec::new();
    for (&fd, (held, closed)) in &opts.inputs {
        // (A descriptor that is no pipe now, the program having closed or
        // replaced it, holds nothing of the caller's.)
        let mut data = sys::peek_pipe(root, fd).map_or_else(|_| Vec::new(), |(_, d)| d);
        data.extend_from_slice(held);
        if !data.is_empty() || *closed {
            inputs.push(PendingInput {
                fd,
                data,
                closed: *closed,
            });
        }
    }

    let mut sockets = Vec::new();
    // (A root that closed or replaced the socket has nothing on its way
    // through it: what the caller held for it can never be read.)
    let root_fds = holders.iter().find(|h| h.pid == root).map(|h| &h.fds);
    let has_socket = |fd: i32| {
        root_fds.is_some_and(|fds| {
            fds.iter()
                .any(|f| f.fd == fd && matches!(f.kind, fds::FileKind::Socket))
        })
    };
    // Where the bytes of each memfd on its way through them come from.
    let mut socket_outs: Vec<Vec<MemfdOut>> = Vec::new();
    for held in opts.sockets.iter().filter(|s| has_socket(s.fd)) {
        let (mut unread, fds) = sys::peek_socket(root, held.fd)?;
        let (mut passed, mut outs): (Vec<_>, Vec<_>) =
            passed_memfds(root, held.fd, fds, opts)?.into_iter().unzip();
        unread.extend_from_slice(&held.unread);
        for m in &held.passed {
            let MemfdBytes::Held(b) = &m.data else {
                return Err(DumpError::Unsupported {
                    pid: root,
                    what: format!(
                        "memfd {:?} the caller holds for fd {} has no bytes in memory",
                        m.name, held.fd
                    ),
                });
            };
            outs.push(MemfdOut {
                source: MemfdSource::Held(b.clone()),
                marks: Vec::new(),
            });
            passed.push(m.clone());
        }
        sockets.push(SocketState {
            unread,
            passed,
            ..held.clone()
        });
        socket_outs.push(outs);
    }

    // By the index of the cut socket's open file.
    let mut cut_outs: BTreeMap<usize, Vec<MemfdOut>> = BTreeMap::new();
    for &(at, pid, fd) in &open.cuts {
        if !opts.checkpoint_only {
            sys::shut_reading(pid, fd)?;
        }
        let (data, fds) = sys::peek_socket(pid, fd)?;
        let (memfds, outs): (Vec<_>, Vec<_>) =
            passed_memfds(pid, fd, fds, opts)?.into_iter().unzip();
        if let Some(OpenFile::Cut { unread, passed, .. }) = open.files.get_mut(at) {
            *unread = data;
            *passed = memfds;
            cut_outs.insert(at, outs);
        }
    }
    // The memfds held (their sizes and seals are read once the bits are
    // set, below), then those only mapped, as each process is taken.
    let mut memfds: Vec<Memfd> = open
        .memfds
        .iter()
        .map(|&(_, pid, fd)| Memfd {
            name: fds::memfd_name(
                &holders
                    .iter()
                    .find(|h| h.pid == pid)
                    .and_then(|h| h.fds.iter().find(|f| f.fd == fd))
                    .map_or(String::new(), |f| f.link.clone()),
            ),
            size: 0,
            seals: 0,
            data: MemfdBytes::Held(Vec::new()),
        })
        .collect();
    let mut memfd_outs: Vec<MemfdOut> = open
        .memfds
        .iter()
        .map(|_| MemfdOut {
            source: MemfdSource::Held(Vec::new()),
            marks: Vec::new(),
        })
        .collect();
    let mut memfd_inodes: Vec<u64> = open.memfds.iter().map(|m| m.0).collect();

    let mut captured: Vec<Captured> = Vec::new();
    let mut offset = 0;
    let mut image_procs = Vec::new();
    let mut fds_of = std::mem::take(&mut open.fds).into_iter();
    for (f, place) in found.iter().zip(procs) {
        let state = if f.state == "Z" {
            ProcState::Zombie {
                status: f.exit_code,
            }
        } else {
            let fds = fds_of.next().unwrap_or_default();
            let bits = opts
                .set_bits
                .get(&f.outer)
                .filter(|_| !opts.checkpoint_only)
                .map_or(&[][..], |b| &b[..]);
            let mut c = Captured::take(f, fds, offset, bits)?;
            offset += c.data_len();
            c.memfds(
                captured.len(),
                &mut memfd_inodes,
                &mut memfds,
                &mut memfd_outs,
            )?;
            let meta = c.meta.clone();
            captured.push(c);
            ProcState::Live(Box::new(meta))
        };
        image_procs.push(Proc { state, ..place });
    }
    // Those only mapped are read from the memory, after `set_bits`: the
    // image has their marks too.
    for (m, o) in memfds.iter().zip(&mut memfd_outs).skip(open.memfds.len()) {
        for (_, at, bit) in opts.mark_memfds.iter().filter(|(n, _, _)| *n == m.name) {
            crate::memfd::check_bit(&m.name, m.size, *at, *bit).map_err(|e| {
                DumpError::Unsupported {
                    pid: root,
                    what: e.to_string(),
                }
            })?;
            o.marks.push((*at, *bit));
        }
    }
    for ((m, o), &(_, pid, fd)) in memfds.iter_mut().zip(&mut memfd_outs).zip(&open.memfds) {
        let dup = sys::borrow_fd(pid, fd)?;
        let (got, out) = marked(dup, opts).map_err(|e| DumpError::Unsupported {
            pid,
            what: format!("fd {fd}: {e}"),
        })?;
        (m.size, m.seals) = (got.size, got.seals);
        *o = out;
    }
    if opts.checkpoint_only {
        for c in &captured {
            for &(addr, bit) in opts.set_bits.get(&c.pid).into_iter().flatten() {
                set_bit_in_image(c.pid, &c.meta, &memfds, &mut memfd_outs, addr, bit)?;
            }
        }
    }
    let mut image = Image {
        keep_pids,
        procs: image_procs,
        files: open.files,
        pipes,
        needs: None,
        inputs,
        sockets,
        memfds,
    };
    // What a target must have to take it (hashed once a file, then from a
    // cache); a source that cannot tell leaves it unknown.
    image.needs = crate::compat::Fingerprint::here(&image).ok();
    // Every memfd's bytes in the data after the pages, in the image's
    // order: how far each goes is found now (its bytes are read as the
    // image is written).
    let outs: Vec<MemfdOut> = memfd_outs
        .into_iter()
        .chain(cut_outs.into_values().flatten())
        .chain(socket_outs.into_iter().flatten())
        .collect();
    if outs.len() != image.memfds_in_order().count() {
        return Err(DumpError::Unsupported {
            pid: root,
            what: format!(
                "{} memfds' bytes found for {} memfds",
                outs.len(),
                image.memfds_in_order().count()
            ),
        });
    }
    let mut next: u64 = captured.iter().map(Captured::data_len).sum();
    for (m, o) in image.memfds_in_order_mut().zip(&outs) {
        let len = o.used_len(&m.name, m.size, &captured)?;
        m.data = MemfdBytes::Image { offset: next, len };
        next += image::page_up(len);
    }
    let stats = write_image(root, &image, &captured, &outs, out)?;
    for c in captured {
        c.attached.detach();
    }
    Ok(stats)
}

/// The memfds `fds`, lent by a peek at `pid`'s socket on `fd`: each with
/// its size and seals, and where its bytes come from; any other descriptor
/// is refused, named.
fn passed_memfds(
    pid: i32,
    fd: i32,
    fds: Vec<std::os::fd::OwnedFd>,
    opts: &DumpOptions,
) -> Result<Vec<(Memfd, MemfdOut)>, DumpError> {
    fds.into_iter()
        .map(|d| {
            marked(d, opts).map_err(|e| DumpError::Unsupported {
                pid,
                what: format!(
                    "a descriptor on its way to it through the socket on fd {fd} cannot be \
                     saved: {e}"
                ),
            })
        })
        .collect()
}

/// The memfd on `fd` (ours), with the bits `opts.mark_memfds` names for
/// it set (in it first, unless a checkpoint only, then in the image's
/// bytes as they are written): its name, size and seals, its bytes to be
/// read from `fd`.
fn marked(fd: std::os::fd::OwnedFd, opts: &DumpOptions) -> io::Result<(Memfd, MemfdOut)> {
    use std::os::fd::AsFd;
    let (name, size, seals) = crate::memfd::facts(fd.as_fd())?;
    let marks: Vec<(u64, u32)> = opts
        .mark_memfds
        .iter()
        .filter(|(n, _, _)| *n == name)
        .map(|&(_, at, bit)| (at, bit))
        .collect();
    for &(at, bit) in &marks {
        crate::memfd::check_bit(&name, size, at, bit)?;
        if !opts.checkpoint_only {
            crate::memfd::set_bit(fd.as_fd(), at, bit)?;
        }
    }
    Ok((
        Memfd {
            name,
            size,
            seals,
            data: MemfdBytes::Held(Vec::new()),
        },
        MemfdOut {
            source: MemfdSource::Fd(File::from(fd)),
            marks,
        },
    ))
}

/// Where the bytes of a memfd the image carries come from as the image is
/// written.
enum MemfdSource {
    /// A descriptor of it (ours, a duplicate).
    Fd(File),
    /// Only mapped: process `captured[proc]`'s mappings of it, each
    /// (offset in the memfd, address, length); what none maps is zero.
    Mapped {
        proc: usize,
        maps: Vec<(u64, u64, u64)>,
    },
    /// Held in memory (the caller's own).
    Held(Vec<u8>),
}

/// A memfd's bytes on their way into the image.
struct MemfdOut {
    source: MemfdSource,
    /// Bits set in the image's bytes: (byte offset of a 32-bit word, bit).
    marks: Vec<(u64, u32)>,
}

impl MemfdOut {
    /// Reads its bytes from `at` into `buf` (zeros past what it has),
    /// marks not set.
    fn read(&self, captured: &[Captured], at: u64, buf: &mut [u8]) -> io::Result<()> {
        let end = at + buf.len() as u64;
        match &self.source {
            MemfdSource::Fd(f) => f.read_exact_at(buf, at),
            MemfdSource::Held(b) => {
                buf.fill(0);
                let from = (at as usize).min(b.len());
                let to = (end as usize).min(b.len());
                buf[..to - from].copy_from_slice(&b[from..to]);
                Ok(())
            }
            MemfdSource::Mapped { proc, maps } => {
                buf.fill(0);
                let c = captured
                    .get(*proc)
                    .ok_or_else(|| io::Error::other("no such process"))?;
                for &(off, addr, len) in maps {
                    let (s, e) = (off.max(at), (off + len).min(end));
                    if s < e {
                        c.mem
                            .read(
                                addr + (s - off),
                                &mut buf[(s - at) as usize..(e - at) as usize],
                            )
                            .map_err(io::Error::other)?;
                    }
                }
                Ok(())
            }
        }
    }

    /// How far its bytes of `size` go: to its last byte not zero, or its
    /// last mark.
    fn used_len(&self, name: &str, size: u64, captured: &[Captured]) -> Result<u64, DumpError> {
        let refuse = |e: io::Error| DumpError::Unsupported {
            pid: captured.first().map_or(0, |c| c.pid),
            what: format!("memfd {name:?}: reading its bytes: {e}"),
        };
        let used = match &self.source {
            MemfdSource::Fd(f) => {
                crate::memfd::used_len(std::os::fd::AsFd::as_fd(f), size).map_err(refuse)?
            }
            MemfdSource::Held(b) => b.iter().rposition(|&x| x != 0).map_or(0, |i| i as u64 + 1),
            MemfdSource::Mapped { .. } => {
                let mut buf = vec![0u8; crate::memfd::PIECE.min(size as usize)];
                let mut end = size;
                let mut used = 0;
                while end > 0 {
                    let n = (end as usize).min(buf.len());
                    let from = end - n as u64;
                    self.read(captured, from, &mut buf[..n]).map_err(refuse)?;
                    if let Some(i) = buf[..n].iter().rposition(|&b| b != 0) {
                        used = from + i as u64 + 1;
                        break;
                    }
                    end = from;
                }
                used
            }
        };
        let marked = self.marks.iter().map(|&(at, _)| at + 4).max().unwrap_or(0);
        Ok(used.max(marked).min(size))
    }
}

/// Sets bit `bit` of the 32-bit word at `addr` of process `pid` (whose
/// state is `meta`) in the image's bytes of the memfd mapped there.
fn set_bit_in_image(
    pid: i32,
    meta: &Meta,
    memfds: &[Memfd],
    outs: &mut [MemfdOut],
    addr: u64,
    bit: u32,
) -> Result<(), DumpError> {
    let refuse = |what: String| DumpError::Unsupported { pid, what };
    let found = meta
        .regions
        .iter()
        .find(|r| r.start <= addr && addr + 4 <= r.end);
    let Some((memfd, at)) = found.and_then(|r| match r.kind {
        RegionKind::Memfd { memfd, offset, .. } => Some((memfd, offset + (addr - r.start))),
        RegionKind::Anon
        | RegionKind::Stack
        | RegionKind::FilePrivate { .. }
        | RegionKind::FileShared { .. } => None,
    }) else {
        return Err(refuse(format!(
            "the word at {addr:#x} to mark is not in a shared mapping of a memfd"
        )));
    };
    let (Some(m), Some(o)) = (memfds.get(memfd as usize), outs.get_mut(memfd as usize)) else {
        return Err(refuse(format!("memfd {memfd} is not saved")));
    };
    crate::memfd::check_bit(&m.name, m.size, at, bit)
        .map_err(|e| refuse(format!("the word at {addr:#x} cannot be marked: {e}")))?;
    o.marks.push((at, bit));
    Ok(())
}

/// Each process's place in the tree (pids as the processes see them), or
/// why the tree cannot be re-made: a process group or session whose leader
/// is not in the tree and that is not the one the root was in (its leader
/// exited).
fn tree_places(found: &[Found], keep_pids: bool) -> Result<Vec<Proc>, String> {
    let zombie = ProcState::Zombie { status: 0 };
    if !keep_pids {
        return Ok(found
            .iter()
            .map(|f| Proc {
                pid: f.ids.pid,
                ppid: 0,
                pgid: 0,
                sid: 0,
                state: zombie.clone(),
            })
            .collect());
    }
    let pids: BTreeMap<i32, i32> = found.iter().map(|f| (f.outer, f.ids.pid)).collect();
    let inside: BTreeSet<i32> = pids.values().copied().collect();
    // The group and session the root was given from outside (the init's,
    // the caller's), which the restored tree is given again.
    let mut outside_groups = BTreeSet::new();
    let mut outside_sessions = BTreeSet::new();
    if let Some(root) = found.first() {
        if !inside.contains(&root.ids.pgid) {
            outside_groups.insert(root.ids.pgid);
        }
        if !inside.contains(&root.ids.sid) {
            outside_sessions.insert(root.ids.sid);
        }
    }
    let mut why = Vec::new();
    let mut out = Vec::new();
    for f in found {
        let keep = |id: i32, outside: &BTreeSet<i32>, what: &str, why: &mut Vec<String>| {
            if inside.contains(&id) {
                id
            } else {
                if !outside.contains(&id) {
                    why.push(format!(
                        "pid {} is in {what} {id}, whose leader has exited",
                        f.ids.pid
                    ));
                }
                0
            }
        };
        out.push(Proc {
            pid: f.ids.pid,
            ppid: pids.get(&f.ids.ppid).copied().unwrap_or(0),
            pgid: keep(f.ids.pgid, &outside_groups, "process group", &mut why),
            sid: keep(f.ids.sid, &outside_sessions, "session", &mut why),
            state: zombie.clone(),
        });
    }
    if why.is_empty() {
        Ok(out)
    } else {
        Err(why.join("; "))
    }
}

/// Refuses, naming every reason, what cannot be saved of the processes:
/// one traced by another, a main thread gone while others run, POSIX
/// timers, and processes that share memory, descriptor table, working
/// directory or signal handlers.
fn refuse_what_cannot_be_saved(found: &[Found]) -> Result<(), DumpError> {
    let mut why = Vec::new();
    let live: Vec<&Found> = found.iter().filter(|f| f.state != "Z").collect();
    for f in found {
        let pid = f.ids.pid;
        if f.ids.tracer != 0 {
            why.push(format!("pid {pid} is traced by pid {}", f.ids.tracer));
        }
        if f.state == "Z" && f.ids.threads > 1 {
            why.push(format!(
                "pid {pid}'s main thread has exited while {} other(s) run",
                f.ids.threads - 1
            ));
        }
    }
    for f in &live {
        let timers = read_proc(f.outer, "timers")?;
        let n = timers.lines().filter(|l| l.starts_with("ID:")).count();
        if n > 0 {
            why.push(format!("pid {} has {n} POSIX timer(s)", f.ids.pid));
        }
    }
    for (i, a) in live.iter().enumerate() {
        for b in &live[i + 1..] {
            for (what, k) in [
                ("its memory (CLONE_VM)", Kcmp::Vm),
                ("its descriptor table (CLONE_FILES)", Kcmp::Files),
                ("its working directory and umask (CLONE_FS)", Kcmp::Fs),
                ("its signal handlers (CLONE_SIGHAND)", Kcmp::Sighand),
            ] {
                if sys::kcmp(a.outer, b.outer, k)? {
                    why.push(format!(
                        "pid {} shares {what} with pid {}",
                        b.ids.pid, a.ids.pid
                    ));
                }
            }
        }
    }
    if why.is_empty() {
        Ok(())
    } else {
        Err(DumpError::Unsupported {
            pid: found.first().map_or(0, |f| f.outer),
            what: why.join("; "),
        })
    }
}

/// One process's state taken, its threads still seized.
struct Captured {
    pid: i32,
    meta: Meta,
    mem: Mem,
    layout: Layout,
    attached: Attached,
}

impl Captured {
    /// Takes the state of the stopped process `f` whose descriptors are
    /// `fds`; its page runs start at `offset` in the image's data.
    fn take(
        f: &Found,
        fds: Vec<image::Fd>,
        offset: u64,
        bits: &[(u64, u32)],
    ) -> Result<Captured, DumpError> {
        let pid = f.outer;
        let stat =
            proc::parse_stat(&read_proc(pid, "stat")?).map_err(|e| proc_err(pid, "stat", e))?;
        let tids = threads(pid)?;
        let maps =
            proc::parse_maps(&read_proc(pid, "maps")?).map_err(|e| proc_err(pid, "maps", e))?;
        let vmflags = proc::parse_smaps_flags(&read_proc(pid, "smaps")?);
        let layout = classify(pid, &maps, &vmflags)?;
        let mut attached = Attached::seize(&tids)?;
        let mem = Mem::open(pid)?;
        let mut meta = collect(pid, &stat, &attached, &mem, &layout, fds)?;
        inject_queries(pid, &mut attached, &mem, &layout, &mut meta, bits)?;
        attached.put_back()?;
        meta.regions = take_runs(pid, &layout, offset)?;
        Ok(Captured {
            pid,
            meta,
            mem,
            layout,
            attached,
        })
    }

    /// Its shared mappings of memfds given their memfd's index in the
    /// image: one of `inodes` (the memfds known so far, each in `memfds`
    /// with where its bytes come from in `outs`), or a new one whose bytes
    /// are read from this process's mappings of it (no descriptor of it was
    /// found) as the image is written; `me` is its index among the
    /// processes captured.
    fn memfds(
        &mut self,
        me: usize,
        inodes: &mut Vec<u64>,
        memfds: &mut Vec<Memfd>,
        outs: &mut Vec<MemfdOut>,
    ) -> Result<(), DumpError> {
        let pid = self.pid;
        let mut fresh: Vec<usize> = Vec::new();
        for (p, r) in self.layout.regions.iter().zip(self.meta.regions.iter_mut()) {
            let RegionKind::Memfd { memfd, offset, .. } = &mut r.kind else {
                continue;
            };
            let i = match inodes.iter().position(|&n| n == p.inode) {
                Some(i) => i,
                None => {
                    inodes.push(p.inode);
                    memfds.push(Memfd {
                        name: p.name.clone(),
                        size: 0,
                        seals: 0,
                        data: MemfdBytes::Held(Vec::new()),
                    });
                    outs.push(MemfdOut {
                        source: MemfdSource::Mapped {
                            proc: me,
                            maps: Vec::new(),
                        },
                        marks: Vec::new(),
                    });
                    fresh.push(memfds.len() - 1);
                    memfds.len() - 1
                }
            };
            *memfd = i as u32;
            if fresh.contains(&i) {
                // Only mapped: its bytes are what the mappings show.
                let len = r.end - r.start;
                let m = &mut memfds[i];
                let end = *offset + len;
                m.size = m.size.max(end);
                if !r.prot.r {
                    return Err(DumpError::Unsupported {
                        pid,
                        what: format!(
                            "memfd {} is mapped at {:#x}-{:#x} without read access",
                            m.name, r.start, r.end
                        ),
                    });
                }
                crate::memfd::check_size(&m.name, end).map_err(|e| DumpError::Unsupported {
                    pid,
                    what: e.to_string(),
                })?;
                if let Some(MemfdOut {
                    source: MemfdSource::Mapped { maps, .. },
                    ..
                }) = outs.get_mut(i)
                {
                    maps.push((*offset, r.start, len));
                }
            }
        }
        Ok(())
    }

    /// Bytes of page data.
    fn data_len(&self) -> u64 {
        self.meta
            .regions
            .iter()
            .flat_map(|r| &r.runs)
            .map(|r| r.pages * PAGE)
            .sum()
    }
}

/// The threads of `pid` as the caller sees them, the main one first, each
/// with its tid in its own namespace.
fn threads(pid: i32) -> Result<Vec<(i32, i32)>, DumpError> {
    let dir = format!("/proc/{pid}/task");
    let mut tids: Vec<i32> = fs::read_dir(&dir)
        .map_err(|e| proc_err(pid, "task", e))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable_by_key(|&t| (t != pid, t));
    let mut out = Vec::new();
    for t in tids {
        let ids = proc::parse_ids(&read_proc(pid, &format!("task/{t}/status"))?)
            .ok_or_else(|| proc_err(pid, "task status", "no NSpid line"))?;
        out.push((t, ids.pid));
    }
    Ok(out)
}

/// A region of the process and how its pages are taken.
struct Planned {
    region: Region,
    take: Take,
    /// The inode of the file mapped (0 when anonymous).
    inode: u64,
    /// The name of a memfd mapped (empty otherwise).
    name: String,
}

/// The process's memory split into what is saved, moved or left.
struct Layout {
    regions: Vec<Planned>,
    specials: Vec<Special>,
}

/// Decides, per mapping, how it is saved; refuses shared memory that is not
/// a file.
fn classify(
    pid: i32,
    maps: &[MapsEntry],
    vmflags: &BTreeMap<u64, Vec<String>>,
) -> Result<Layout, DumpError> {
    let mut regions = Vec::new();
    let mut specials = Vec::new();
    let mut refused = Vec::new();
    let mut images: HashMap<String, bool> = HashMap::new();
    for m in maps {
        if is_special(&m.name) {
            specials.push(Special {
                name: m.name.clone(),
                start: m.start,
                end: m.end,
            });
            continue;
        }
        if m.name == "[vsyscall]" {
            continue;
        }
        let flags = vmflags.get(&m.start).cloned().unwrap_or_default();
        let reopenable = m.name.starts_with('/')
            && !m.name.ends_with(" (deleted)")
            && !m.name.starts_with("/memfd:")
            && fs::metadata(&m.name).is_ok_and(|md| md.is_file());
        let memfd = m.name.starts_with("/memfd:");
        let (kind, take) = if m.shared && memfd {
            // Its index is given once every process is read.
            let kind = RegionKind::Memfd {
                memfd: u32::MAX,
                offset: m.offset,
                may_write: flags.iter().any(|f| f == "mw"),
            };
            (kind, None)
        } else if m.shared {
            if !reopenable {
                refused.push(format!(
                    "shared memory {:#x}-{:#x} ({}) may be shared with another process",
                    m.start,
                    m.end,
                    if m.name.is_empty() {
                        "anonymous"
                    } else {
                        &m.name
                    }
                ));
                continue;
            }
            let kind = RegionKind::FileShared {
                path: m.name.clone(),
                offset: m.offset,
                may_write: flags.iter().any(|f| f == "mw"),
            };
            (kind, None)
        } else if m.name == "[stack]" {
            (RegionKind::Stack, Some(Take::Touched))
        } else if m.name.is_empty() || m.name.starts_with('[') {
            (RegionKind::Anon, Some(Take::Touched))
        } else if reopenable
            && !*images
                .entry(m.name.clone())
                .or_insert_with(|| is_image(&m.name))
        {
            let kind = RegionKind::FilePrivate {
                path: m.name.clone(),
                offset: m.offset,
            };
            (kind, Some(Take::Changed))
        } else {
            // A deleted file, a memfd, or the image an earlier restore
            // mapped: the pages are the process's own, all of them.
            (RegionKind::Anon, Some(Take::All))
        };
        let advice = flags
            .iter()
            .filter_map(|f| match f.as_str() {
                "dd" => Some(libc::MADV_DONTDUMP),
                "dc" => Some(libc::MADV_DONTFORK),
                "wf" => Some(libc::MADV_WIPEONFORK),
                "hg" => Some(libc::MADV_HUGEPAGE),
                "nh" => Some(libc::MADV_NOHUGEPAGE),
                _ => None,
            })
            .collect();
        regions.push(Planned {
            region: Region {
                start: m.start,
                end: m.end,
                prot: Prot {
                    r: m.r,
                    w: m.w,
                    x: m.x,
                },
                kind,
                advice,
                runs: Vec::new(),
            },
            // Nothing of a shared file mapping is in the image.
            take: take.unwrap_or(Take::Changed),
            inode: m.inode,
            name: if memfd {
                fds::memfd_name(&m.name)
            } else {
                String::new()
            },
        });
    }
    if !refused.is_empty() {
        return Err(DumpError::Unsupported {
            pid,
            what: refused.join("; "),
        });
    }
    Ok(Layout { regions, specials })
}

/// Whether the file at `path` is a process image (a restored process maps
/// its pages from one; they are its own memory, not the file's).
fn is_image(path: &str) -> bool {
    let mut magic = [0u8; 8];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == image::MAGIC
}

/// Threads seized and stopped, with what to put back.
struct Attached {
    /// As the caller sees them.
    tids: Vec<i32>,
    /// As the process sees them.
    inner: Vec<i32>,
    /// (registers, mask) as found.
    found: Vec<(Regs, u64)>,
    /// Registers and masks were changed and not yet put back.
    dirty: bool,
}

impl Attached {
    fn seize(tids: &[(i32, i32)]) -> Result<Attached, DumpError> {
        let mut a = Attached {
            tids: Vec::new(),
            inner: Vec::new(),
            found: Vec::new(),
            dirty: false,
        };
        for &(t, inner) in tids {
            sys::seize(t, libc::PTRACE_O_TRACESYSGOOD)?;
            a.tids.push(t);
            a.inner.push(inner);
            sys::interrupt(t)?;
            // The group stop is reported as a PTRACE_EVENT_STOP.
            loop {
                let s = sys::wait_stop(t)?;
                if s.event == libc::PTRACE_EVENT_STOP {
                    break;
                }
                if s.event == 0 && s.sig != libc::SIGSTOP {
                    return Err(DumpError::Unsupported {
                        pid: t,
                        what: format!("signal {} arrived during the dump", s.sig),
                    });
                }
            }
            a.found.push((sys::get_regs(t)?, sys::get_sigmask(t)?));
        }
        Ok(a)
    }

    /// Puts registers and masks back as they were found.
    fn put_back(&mut self) -> Result<(), SysError> {
        if self.dirty {
            for (t, (r, m)) in self.tids.iter().zip(&self.found) {
                sys::set_regs(*t, r)?;
                sys::set_sigmask(*t, *m)?;
            }
            self.dirty = false;
        }
        Ok(())
    }

    fn detach(mut self) {
        self.release();
    }

    fn release(&mut self) {
        let _ = self.put_back();
        // The group stop is still in force (only SIGCONT ends it): at the
        // detach the kernel puts each thread back into it.
        let pid = self.tids.first().copied();
        for t in self.tids.drain(..) {
            let _ = sys::detach(t, 0);
        }
        if let Some(pid) = pid {
            wait_stopped(pid);
        }
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        self.release();
    }
}

/// Waits (a few seconds at most) until `pid` is in a group stop: after a
/// detach the stop happens when the process next runs, and the caller must
/// find it stopped. Its wait status is not taken.
pub(crate) fn wait_stopped(pid: i32) {
    for _ in 0..20_000 {
        match read_proc(pid, "stat").map(|s| proc::parse_stat(&s)) {
            Ok(Ok(f)) if f.first().is_some_and(|s| s != "T") => {
                std::thread::sleep(std::time::Duration::from_micros(100))
            }
            _ => break,
        }
    }
}

/// Reads what ptrace and `/proc` tell without running the process.
fn collect(
    pid: i32,
    stat: &[String],
    attached: &Attached,
    mem: &Mem,
    layout: &Layout,
    fds: Vec<image::Fd>,
) -> Result<Meta, DumpError> {
    let field = |n| proc::stat_field(stat, n).map_err(|e| proc_err(pid, "stat", e));
    let mm = MmFields {
        start_code: field(26)?,
        end_code: field(27)?,
        start_stack: field(28)?,
        // proc(5) numbers these 45 to 51.
        start_data: field(45)?,
        end_data: field(46)?,
        start_brk: field(47)?,
        brk: 0,
        arg_start: field(48)?,
        arg_end: field(49)?,
        env_start: field(50)?,
        env_end: field(51)?,
    };
    let mut threads = Vec::new();
    for ((&tid, &inner), (regs, sigmask)) in attached
        .tids
        .iter()
        .zip(&attached.inner)
        .zip(&attached.found)
    {
        let mut regs = *regs;
        rewind_interrupted_call(&mut regs);
        let fs_base = regs[reg::FS_BASE];
        let cached_tid_at = if fs_base != 0 {
            let at = fs_base + GLIBC_TID_OFFSET;
            match mem.read_u64(at) {
                Ok(w) if w as u32 as i32 == inner => Some(at),
                _ => None,
            }
        } else {
            None
        };
        threads.push(Thread {
            tid: inner,
            regs: regs.to_vec(),
            xstate: sys::get_xstate(tid)?,
            sigmask: *sigmask,
            pending: kept_pending(sys::pending(tid, false)?),
            rseq: sys::rseq(tid)?,
            robust_list: sys::robust_list(tid)?,
            clear_child_tid: 0,
            altstack: (0, libc::SS_DISABLE, 0),
            comm: read_proc(pid, &format!("task/{tid}/comm"))?
                .trim_end()
                .to_string(),
            cached_tid_at,
        });
    }
    let mut rlimits = Vec::new();
    for res in 0..RLIMITS {
        let (soft, hard) = sys::get_rlimit(pid, res)?;
        rlimits.push((res, soft, hard));
    }
    let vdso = layout.specials.iter().find(|s| s.name == "[vdso]");
    let vdso_hash = match vdso {
        Some(v) => {
            let mut b = vec![0u8; (v.end - v.start) as usize];
            mem.read(v.start, &mut b)?;
            Sha256::digest(&b).to_vec()
        }
        None => Vec::new(),
    };
    let link = |name: &str| {
        fs::read_link(format!("/proc/{pid}/{name}"))
            .map(|p| p.to_string_lossy().into_owned())
            .map_err(|e| proc_err(pid, name, e))
    };
    let auxv = fs::read(format!("/proc/{pid}/auxv")).map_err(|e| proc_err(pid, "auxv", e))?;
    Ok(Meta {
        exe: link("exe")?,
        regions: Vec::new(),
        specials: layout.specials.clone(),
        vdso_hash,
        threads,
        sigactions: Vec::new(),
        shared_pending: kept_pending(sys::pending(pid, true)?),
        fds,
        cwd: link("cwd")?,
        umask: proc::parse_umask(&read_proc(pid, "status")?).unwrap_or(0o022),
        rlimits,
        mm,
        auxv,
        itimers: Vec::new(),
        cpu: Cpu {
            flags: proc::cpu_flags().map_err(|e| proc_err(pid, "/proc/cpuinfo", e))?,
            xstate_len: attached
                .tids
                .first()
                .map(|&t| sys::get_xstate(t).map(|x| x.len() as u32))
                .transpose()?
                .unwrap_or(0),
        },
    })
}

/// The pending signals a restored process gets again: all but a stop or a
/// continue, which belong to the stop the caller made for the dump.
fn kept_pending(infos: Vec<Vec<u8>>) -> Vec<SigInfo> {
    infos
        .into_iter()
        .filter(|i| {
            let signo = i32::from_le_bytes([i[0], i[1], i[2], i[3]]);
            !matches!(signo, libc::SIGSTOP | libc::SIGCONT)
        })
        .map(SigInfo)
        .collect()
}

/// A thread stopped inside a system call that the kernel would restart on
/// resumption has `rax` = -ERESTART* and `rip` past the `syscall`: saved as
/// the kernel would resume it, on the instruction with the call's number.
/// A call restarted through `restart_syscall` (sleeps) depends on kernel
/// state a new process does not have: it returns `EINTR` instead, as CRIU
/// does.
fn rewind_interrupted_call(r: &mut Regs) {
    const ERESTARTSYS: i64 = 512;
    const ERESTARTNOINTR: i64 = 513;
    const ERESTARTNOHAND: i64 = 514;
    const ERESTART_RESTARTBLOCK: i64 = 516;
    if r[reg::ORIG_RAX] as i64 >= 0 {
        match -(r[reg::RAX] as i64) {
            ERESTARTSYS | ERESTARTNOINTR | ERESTARTNOHAND => {
                r[reg::RAX] = r[reg::ORIG_RAX];
                r[reg::RIP] -= 2;
            }
            ERESTART_RESTARTBLOCK => r[reg::RAX] = (-libc::EINTR) as u64,
            _ => {}
        }
    }
    r[reg::ORIG_RAX] = u64::MAX;
}

/// The address of a `syscall` instruction (0f 05) in the vDSO.
pub(crate) fn find_syscall(mem: &Mem, vdso: &Special, pid: i32) -> Result<u64, SysError> {
    let mut b = vec![0u8; (vdso.end - vdso.start) as usize];
    mem.read(vdso.start, &mut b)?;
    b.windows(2)
        .position(|w| w == [0x0f, 0x05])
        .map(|i| vdso.start + i as u64)
        .ok_or_else(|| SysError {
            call: "finding a syscall instruction in the vDSO".into(),
            pid,
            source: io::Error::other("none there"),
        })
}

/// Asks the process, by injected calls, what only it can say.
fn inject_queries(
    pid: i32,
    attached: &mut Attached,
    mem: &Mem,
    layout: &Layout,
    meta: &mut Meta,
    bits: &[(u64, u32)],
) -> Result<(), DumpError> {
    let vdso = layout
        .specials
        .iter()
        .find(|s| s.name == "[vdso]")
        .ok_or_else(|| DumpError::Unsupported {
            pid,
            what: "it has no vDSO".into(),
        })?;
    let syscall_at = find_syscall(mem, vdso, pid)?;
    // Signals stay pending while the calls run: none is delivered.
    attached.dirty = true;
    for &t in &attached.tids {
        sys::set_sigmask(t, u64::MAX)?;
    }
    let main = Injector {
        tid: pid,
        syscall_at,
        base: attached.found[0].0,
    };
    // Before anything of its memory is read.
    for &(addr, bit) in bits {
        sys::set_bit(&main, addr, bit)?;
    }
    let scratch = main.ok(
        "mmap (scratch page)",
        libc::SYS_mmap,
        &[
            0,
            PAGE,
            (libc::PROT_READ | libc::PROT_WRITE) as u64,
            (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64,
            u64::MAX,
            0,
        ],
    )?;
    let result = queries(pid, attached, mem, &main, scratch, meta);
    let unmapped = main.ok("munmap (scratch page)", libc::SYS_munmap, &[scratch, PAGE]);
    result?;
    unmapped?;
    Ok(())
}

fn queries(
    pid: i32,
    attached: &Attached,
    mem: &Mem,
    main: &Injector,
    scratch: u64,
    meta: &mut Meta,
) -> Result<(), DumpError> {
    // Only signals not at their default are asked about (and SIGCHLD,
    // whose SA_NOCLDWAIT matters even at the default).
    let handled =
        proc::parse_handled_signals(&read_proc(pid, "status")?) | 1 << (libc::SIGCHLD - 1);
    for signo in 1..=64 {
        if signo == libc::SIGKILL || signo == libc::SIGSTOP || handled & (1 << (signo - 1)) == 0 {
            continue;
        }
        main.ok(
            "rt_sigaction (get)",
            libc::SYS_rt_sigaction,
            &[signo as u64, 0, scratch, 8],
        )?;
        let mut b = [0u8; 32];
        mem.read(scratch, &mut b)?;
        let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or_default());
        if w(0) != 0 || w(1) != 0 {
            meta.sigactions.push(SigAction {
                signo,
                handler: w(0),
                flags: w(1),
                restorer: w(2),
                mask: w(3),
            });
        }
    }
    meta.mm.brk = main.ok("brk", libc::SYS_brk, &[0])?;
    for which in 0..3u64 {
        main.ok("getitimer", libc::SYS_getitimer, &[which, scratch])?;
        let mut b = [0u8; 32];
        mem.read(scratch, &mut b)?;
        let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or_default());
        meta.itimers
            .push((w(0) * 1_000_000 + w(1), w(2) * 1_000_000 + w(3)));
    }
    for (i, &t) in attached.tids.iter().enumerate() {
        let inj = Injector {
            tid: t,
            syscall_at: main.syscall_at,
            base: attached.found[i].0,
        };
        inj.ok("sigaltstack (get)", libc::SYS_sigaltstack, &[0, scratch])?;
        let mut b = [0u8; 24];
        mem.read(scratch, &mut b)?;
        let sp = u64::from_le_bytes(b[0..8].try_into().unwrap_or_default());
        let flags = i32::from_le_bytes(b[8..12].try_into().unwrap_or_default());
        let size = u64::from_le_bytes(b[16..24].try_into().unwrap_or_default());
        meta.threads[i].altstack = (sp, flags & !libc::SS_ONSTACK, size);
        inj.ok(
            "prctl PR_GET_TID_ADDRESS",
            libc::SYS_prctl,
            &[libc::PR_GET_TID_ADDRESS as u64, scratch],
        )?;
        meta.threads[i].clear_child_tid = mem.read_u64(scratch)?;
    }
    Ok(())
}

/// The page runs of every region, from pagemap, the first at `offset` in
/// the image's data.
fn take_runs(pid: i32, layout: &Layout, mut offset: u64) -> Result<Vec<Region>, DumpError> {
    let pagemap =
        File::open(format!("/proc/{pid}/pagemap")).map_err(|e| proc_err(pid, "pagemap", e))?;
    let mut out = Vec::new();
    for p in &layout.regions {
        let mut region = p.region.clone();
        if !matches!(
            region.kind,
            RegionKind::FileShared { .. } | RegionKind::Memfd { .. }
        ) {
            // A chunk of pagemap at a time: reserved regions can be huge.
            const CHUNK: u64 = 1 << 16;
            let pages = (region.end - region.start) / PAGE;
            let mut done = 0;
            let mut runs: Vec<(u64, u64)> = Vec::new();
            while done < pages {
                let n = CHUNK.min(pages - done);
                let start = region.start + done * PAGE;
                let words = if p.take == Take::All {
                    vec![0u64; n as usize]
                } else {
                    let mut b = vec![0u8; (n * 8) as usize];
                    pagemap
                        .read_exact_at(&mut b, start / PAGE * 8)
                        .map_err(|e| proc_err(pid, "pagemap", e))?;
                    b.chunks_exact(8)
                        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
                        .collect()
                };
                for (a, k) in runs_to_save(start, &words, p.take) {
                    match runs.last_mut() {
                        Some((la, lk)) if *la + *lk * PAGE == a => *lk += k,
                        _ => runs.push((a, k)),
                    }
                }
                done += n;
            }
            for (addr, pages) in runs {
                region.runs.push(Run {
                    addr,
                    pages,
                    offset,
                });
                offset += pages * PAGE;
            }
        }
        out.push(region);
    }
    Ok(out)
}

/// Writes header, metadata and then the pages of each process in turn,
/// read straight from it a piece at a time.
fn write_image(
    root: i32,
    image: &Image,
    captured: &[Captured],
    memfds: &[MemfdOut],
    out: &mut dyn Write,
) -> Result<DumpStats, DumpError> {
    let w = |e| DumpError::Write {
        pid: root,
        source: e,
    };
    let meta_bytes = image::encode_meta(image)?;
    let pages: u64 = image.runs().map(|r| r.pages).sum();
    let data_len: u64 = image.all_runs().map(|r| r.1).sum();
    let runs = image.all_runs().count() as u64;
    let h = Header::new(
        meta_bytes.len() as u64,
        data_len,
        runs,
        crc32c::crc32c(&meta_bytes),
    );
    image.check_runs(&h)?;
    out.write_all(&h.encode()).map_err(w)?;
    out.write_all(&meta_bytes).map_err(w)?;
    let pad = h.data_offset as usize - image::HEADER_LEN - meta_bytes.len();
    out.write_all(&vec![0u8; pad]).map_err(w)?;
    const PIECE: u64 = 4 << 20;
    let mut buf = vec![0u8; PIECE as usize];
    let mut crcs = Vec::with_capacity(runs as usize);
    for c in captured {
        for (region, p) in c.meta.regions.iter().zip(&c.layout.regions) {
            debug_assert_eq!(region.start, p.region.start);
            for run in &region.runs {
                let mut crc = 0u32;
                let mut at = run.addr;
                let end = run.addr + run.pages * PAGE;
                while at < end {
                    let n = PIECE.min(end - at) as usize;
                    if region.prot.r {
                        sys::vm_read(c.pid, at, &mut buf[..n])?;
                    } else {
                        c.mem.read(at, &mut buf[..n])?;
                    }
                    crc = crc32c::crc32c_append(crc, &buf[..n]);
                    out.write_all(&buf[..n]).map_err(w)?;
                    at += n as u64;
                }
                crcs.push(crc);
            }
        }
    }
    // Each memfd's bytes, a piece at a time from where they are, marked,
    // then zeros to the page.
    for (m, o) in image.memfds_in_order().zip(memfds) {
        let Some((_, whole)) = m.data.run() else {
            continue;
        };
        let len = m.data.len();
        let mut crc = 0u32;
        let mut at = 0;
        while at < whole {
            let n = PIECE.min(whole - at) as usize;
            let have = len.saturating_sub(at).min(n as u64) as usize;
            o.read(captured, at, &mut buf[..have])
                .map_err(|e| DumpError::Unsupported {
                    pid: root,
                    what: format!("memfd {:?}: reading its bytes: {e}", m.name),
                })?;
            buf[have..n].fill(0);
            crate::memfd::mark_piece(&mut buf[..have], at, &o.marks);
            crc = crc32c::crc32c_append(crc, &buf[..n]);
            out.write_all(&buf[..n]).map_err(w)?;
            at += n as u64;
        }
        crcs.push(crc);
    }
    out.write_all(&image::encode_trailer(&crcs)).map_err(w)?;
    out.flush().map_err(w)?;
    Ok(DumpStats {
        bytes: h.total_len(),
        pages,
        processes: image.procs.len(),
        threads: image.live().map(|m| m.threads.len()).sum(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regs(orig: i64, rax: i64, rip: u64) -> Regs {
        let mut r = [0u64; reg::COUNT];
        r[reg::ORIG_RAX] = orig as u64;
        r[reg::RAX] = rax as u64;
        r[reg::RIP] = rip;
        r
    }

    #[test]
    fn an_interrupted_call_is_saved_to_run_again() {
        // read(2) stopped: -ERESTARTSYS, rip past the syscall.
        let mut r = regs(0, -512, 0x1002);
        rewind_interrupted_call(&mut r);
        assert_eq!((r[reg::RAX], r[reg::RIP]), (0, 0x1000));
        assert_eq!(r[reg::ORIG_RAX], u64::MAX);
        // A sleep (restart_syscall) returns EINTR instead.
        let mut r = regs(230, -516, 0x1002);
        rewind_interrupted_call(&mut r);
        assert_eq!(
            (r[reg::RAX] as i64, r[reg::RIP]),
            (-(libc::EINTR as i64), 0x1002)
        );
        // A call that finished, or no call: left alone.
        let mut r = regs(1, 5, 0x1002);
        rewind_interrupted_call(&mut r);
        assert_eq!((r[reg::RAX], r[reg::RIP]), (5, 0x1002));
        let mut r = regs(-1, -512, 0x1002);
        rewind_interrupted_call(&mut r);
        assert_eq!((r[reg::RAX] as i64, r[reg::RIP]), (-512, 0x1002));
    }
}
