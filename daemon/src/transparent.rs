//! Moving a VP whose program does not help: its processes saved and rebuilt
//! from outside (`mig_ckpt`), with no change to its code, on a thread of
//! their own.
//!
//! A dump reads every page of the VP's processes and a restore maps them
//! again: hundreds of milliseconds for a large VP, which the daemon's loop
//! cannot spend (it owes heartbeats, leases and the consensus's messages).
//! One thread, the checkpointer, takes the tasks in order and answers
//! through a channel that wakes the loop. ptrace ties a tracee to the
//! thread that traces it, so every dump and restore is made on that one
//! thread, and the loop must not wait for a process the thread is working
//! on: it reaps by pid, leaving out those [`Checkpointer::busy`] names (a
//! `wait` for any child would take the tracee's ptrace stops from under the
//! thread). A restored VP is a child of the checkpointer thread, which
//! lives as long as the daemon: its parent-death signal (`die_with_caller`)
//! then ends it with the daemon, as every VP does.
//!
//! As root the VP's whole tree is saved (`dump_tree`: a shell and its
//! children, pipes between them) and restored in a pid namespace of its
//! own with every pid as it was, under the crate's init (the VP's pid on
//! its new host is that init's; its exit status is the program's, which
//! [`Restored::exit`] reads). Without the privileges a namespace needs, a
//! VP of one process is saved alone and restored with a new pid; one with
//! children is refused, and says why.
//!
//! A dump for a move says how far its file is written every
//! [`PROGRESS_STEP`] bytes ([`Done::Progress`]), so that its daemon sends
//! the image on as it is written (the file is written in order, each byte
//! once: see `mig_ckpt::image`).
//!
//! What lives here: the thread, its tasks and what comes of them. What
//! does not: which VP moves where, its messages, telling the master (the
//! server), the mechanism itself (`mig_ckpt`).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use libmig::msg::{ExitInfo, Tid};
use mig_ckpt::{DumpOptions, DumpStats, ImageFile, RestoreOptions, SocketState};

/// Descriptors a VP is given by its daemon, made anew on its new host:
/// stdin, stdout, stderr and its socket to the daemon.
pub const GIVEN_FDS: [i32; 4] = [0, 1, 2, crate::host::VP_FD];

/// How long the processes of a VP being saved may take to stop.
const STOP_LIMIT: Duration = Duration::from_secs(5);

/// How often, in bytes written, a dump for a move says how far it is: an
/// image's part (`migrate::IMAGE_PART`), which is what its daemon sends on.
pub const PROGRESS_STEP: u64 = crate::migrate::IMAGE_PART as u64;

/// The file an image for `to` is written into before it is renamed there.
pub fn dumping_path(to: &std::path::Path) -> PathBuf {
    to.with_extension("dumping")
}

/// The first bytes of an image this module writes (and `mig_ckpt` reads).
pub fn is_image(first: &[u8]) -> bool {
    first.starts_with(&mig_ckpt::image::MAGIC)
}

/// Is the file at `path` such an image (by its first bytes)?
pub fn is_image_file(path: &std::path::Path) -> bool {
    use std::io::Read;
    let mut b = [0u8; 8];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok_and(|()| is_image(&b))
}

/// May this daemon save and restore whole trees (in pid namespaces)?
pub fn trees() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Work for the checkpointer thread.
#[derive(Debug)]
pub enum Task {
    /// Wait until every process of VP `tid` (its process `pid` and those
    /// it started), which its daemon has sent SIGSTOP, is stopped: from
    /// then on it writes nothing more to its socket.
    Stop {
        /// The VP.
        tid: Tid,
        /// Its process (the root of its tree).
        pid: i32,
        /// For a job checkpoint (its generation), not a move.
        snap: Option<u64>,
    },
    /// Save VP `tid`, whose process `pid` (and those it started) its
    /// daemon has stopped, to the file `to`.
    Dump {
        /// The VP.
        tid: Tid,
        /// Its process (the root of its tree).
        pid: i32,
        /// The image's file (written under a temporary name first).
        to: PathBuf,
        /// For a job checkpoint (its generation), not a move.
        snap: Option<u64>,
        /// Every process of the VP its daemon knows of (its cell's): a
        /// process outside the tree saved would be lost.
        all: Vec<i32>,
        /// Its stdin as its daemon feeds it, if it has a pipe: the bytes
        /// the daemon still holds for it, and whether their end came. The
        /// image keeps them after those the pipe holds.
        input: Option<(Vec<u8>, bool)>,
        /// Its socket to its daemon, if it has one, as the daemon holds it
        /// (see `mig_ckpt::DumpOptions::sockets`): the bytes for the VP
        /// still queued in the daemon, the start of a frame the VP was
        /// writing, and whether it ever spoke. The image keeps them, and
        /// the bytes the socket holds for the VP before the daemon's.
        socket: Option<SocketState>,
        /// The inodes of its ends of its direct links to VPs of this host:
        /// cut (see `mig_ckpt::DumpOptions::cut`), and every ring of
        /// libmig in its memory marked closed (`libmig::ring`): for a move
        /// in its memory too, so that peers stop writing into it (they go
        /// through the daemons, which hold messages for a moving VP); for
        /// a job checkpoint in the image only (it runs on, its links with
        /// it, and when restored from the image its rings are closed).
        links: BTreeSet<u64>,
    },
    /// Rebuild VP `tid` from the image at `image`, given `fds` by number
    /// (see [`GIVEN_FDS`]), born in its cell (`cell`).
    Restore {
        /// The VP.
        tid: Tid,
        /// Its image.
        image: PathBuf,
        /// Read every page run's checksum first (an image that was not
        /// checked as it arrived).
        verify: bool,
        /// Its descriptors from its new daemon.
        fds: BTreeMap<i32, OwnedFd>,
        /// Its cell.
        cell: CellFds,
        /// Leave it stopped (its daemon continues it when it may run).
        stopped: bool,
    },
}

/// A VP's cell, as a restored tree is born in it: its cgroup v2 directory
/// (`into`) with the `cgroup.procs` files written `instead` where the
/// kernel cannot, and those written in any case (`join`).
#[derive(Debug, Default)]
pub struct CellFds {
    /// Its directory, to be born in.
    pub into: Option<OwnedFd>,
    /// Its `cgroup.procs` files written where it cannot be born in `into`.
    pub instead: Vec<OwnedFd>,
    /// The `cgroup.procs` files written in any case.
    pub join: Vec<OwnedFd>,
}

/// A restored VP's process.
#[derive(Debug)]
pub struct Restored {
    /// Its pid here (its tree's init, in a namespace).
    pub pid: i32,
    /// Its tree, when restored in a namespace: its init passes the
    /// program's exit status on.
    tree: Option<mig_ckpt::Tree>,
    /// Input it had not read when it was saved (its stdin's): its daemon
    /// writes it first into its new pipe.
    pub inputs: Vec<mig_ckpt::image::PendingInput>,
    /// What was on its way through its socket to its daemon each way when
    /// it was saved: its new daemon writes the one first into the new
    /// socket and takes the other as read first.
    pub sockets: Vec<SocketState>,
}

impl Restored {
    /// Its program's process (the root of its tree, not the init above
    /// it), as this host's processes see it.
    pub fn program(&self) -> i32 {
        self.tree
            .as_ref()
            .and_then(mig_ckpt::Tree::program)
            .unwrap_or(self.pid)
    }

    /// Its exit, from the wait status of its process (`status`, as
    /// `wait4` gave it).
    pub fn exit(&self, status: i32, cpu_ms: Option<u64>) -> ExitInfo {
        let st = match &self.tree {
            Some(t) => t.exit_status(status),
            None => std::process::ExitStatus::from_raw(status),
        };
        ExitInfo {
            code: st.code(),
            signal: st.signal(),
            error: None,
            cpu_ms,
        }
    }
}

/// What came of a task.
#[derive(Debug)]
pub enum Done {
    /// A dump of VP `tid` for a move (not yet done) has written the first
    /// `upto` bytes of its image into its file (`dumping_path` of the
    /// task's `to`), and will not write them again.
    Progress {
        /// The VP.
        tid: Tid,
        /// Its process.
        pid: i32,
        /// Bytes written so far.
        upto: u64,
    },
    /// Every process of VP `tid` is stopped, or why not.
    Stopped {
        /// The VP.
        tid: Tid,
        /// Its process.
        pid: i32,
        /// For a job checkpoint (its generation), not a move.
        snap: Option<u64>,
        /// Stopped, or why not.
        result: Result<(), String>,
    },
    /// VP `tid` is saved (its image at the task's `to`), or why not: its
    /// processes are as they were, stopped.
    Dumped {
        /// The VP.
        tid: Tid,
        /// Its process.
        pid: i32,
        /// For a job checkpoint (its generation), not a move.
        snap: Option<u64>,
        /// What was written, or why nothing was.
        result: Result<DumpStats, String>,
        /// How long it took.
        took: Duration,
    },
    /// VP `tid` runs again (or is stopped, as asked), or why not: nothing
    /// of it is left.
    Restored {
        /// The VP.
        tid: Tid,
        /// Its process, or why there is none.
        result: Result<Restored, String>,
        /// How long it took.
        took: Duration,
    },
}

/// The checkpointer thread's handle: tasks in, results out.
#[derive(Debug)]
pub struct Checkpointer {
    tasks: Sender<Task>,
    done: Receiver<Done>,
    /// Processes a dump works on: the loop does not wait for them.
    busy: HashSet<i32>,
}

impl Checkpointer {
    /// Start the thread; `wake` is called with each result.
    pub fn start(wake: Arc<dyn Fn() + Send + Sync>) -> io::Result<Checkpointer> {
        let (tasks, todo) = channel::<Task>();
        let (tell, done) = channel();
        std::thread::Builder::new()
            .name("checkpointer".into())
            .spawn(move || {
                for task in todo {
                    let progress = |tid, pid, upto| {
                        if tell.send(Done::Progress { tid, pid, upto }).is_ok() {
                            wake();
                        }
                    };
                    let d = run(task, &progress);
                    if tell.send(d).is_err() {
                        return;
                    }
                    wake();
                }
            })?;
        Ok(Checkpointer {
            tasks,
            done,
            busy: HashSet::new(),
        })
    }

    /// Hand a task to the thread.
    pub fn submit(&mut self, task: Task) {
        if let Task::Dump { pid, .. } = &task {
            self.busy.insert(*pid);
        }
        if let Err(e) = self.tasks.send(task) {
            crate::warn!("the checkpointer thread is gone: {e}");
        }
    }

    /// The results so far.
    pub fn results(&mut self) -> Vec<Done> {
        let done: Vec<Done> = self.done.try_iter().collect();
        for d in &done {
            if let Done::Dumped { pid, .. } = d {
                self.busy.remove(pid);
            }
        }
        done
    }

    /// Is process `pid` being saved (the loop must not wait for it)?
    pub fn busy(&self, pid: i32) -> bool {
        self.busy.contains(&pid)
    }
}

/// Carry out `task`; a dump for a move says how far it is through
/// `progress` (VP, process, bytes written).
fn run(task: Task, progress: &dyn Fn(Tid, i32, u64)) -> Done {
    let began = Instant::now();
    match task {
        Task::Stop { tid, pid, snap } => Done::Stopped {
            tid,
            pid,
            snap,
            result: mig_ckpt::stop_tree(pid, STOP_LIMIT)
                .map_err(|e| format!("its processes did not all stop: {e}")),
        },
        Task::Dump {
            tid,
            pid,
            to,
            snap,
            all,
            input,
            socket,
            links,
        } => {
            let told = |upto| progress(tid, pid, upto);
            let tell: Option<&dyn Fn(u64)> = snap.is_none().then_some(&told);
            let saved = Saved {
                input,
                socket,
                links,
                moving: snap.is_none(),
            };
            Done::Dumped {
                tid,
                pid,
                snap,
                result: dump(pid, &all, &to, saved, tell),
                took: began.elapsed(),
            }
        }
        Task::Restore {
            tid,
            image,
            verify,
            fds,
            cell,
            stopped,
        } => Done::Restored {
            tid,
            result: restore(&image, verify, fds, cell, stopped),
            took: began.elapsed(),
        },
    }
}

/// Is every process of `all` still there in `pid`'s tree? One that left
/// it (a double fork and `setsid`) would not be saved, and would be lost.
/// (One that ended since `all` was read, a `sleep` the shell waited for,
/// is no loss.)
fn whole(pid: i32, all: &[i32]) -> Result<(), String> {
    let mut tree = mig_ckpt::descendants(pid).map_err(|e| format!("its processes: {e}"))?;
    tree.push(pid);
    let alive = |p: &i32| std::path::Path::new(&format!("/proc/{p}")).exists();
    match all.iter().find(|p| !tree.contains(p) && alive(p)) {
        None => Ok(()),
        Some(p) => Err(format!(
            "process {p} of it left its process tree (a double fork, setsid): it cannot be \
             saved whole"
        )),
    }
}

/// A file being written that says how far it is, every [`PROGRESS_STEP`]
/// bytes, once they are in it.
struct Told<'a> {
    file: File,
    written: u64,
    next: u64,
    tell: Option<&'a dyn Fn(u64)>,
}

impl Write for Told<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.written += n as u64;
        if let Some(tell) = self.tell.filter(|_| self.written >= self.next) {
            tell(self.written);
            self.next = (self.written / PROGRESS_STEP + 1) * PROGRESS_STEP;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// Save `pid` (and, with the privileges, its tree) to `to`, once every
/// process of it is stopped and none of `all` is outside the tree; `tell`
/// hears how far its file is written.
/// What a dump keeps besides the processes (see `Task::Dump`).
struct Saved {
    input: Option<(Vec<u8>, bool)>,
    socket: Option<SocketState>,
    links: BTreeSet<u64>,
    /// A move (else a job checkpoint).
    moving: bool,
}

/// The closed flag of every ring of libmig mapped in the processes of the
/// tree of `pid` (stopped), by process: their rings are shared memory
/// with a peer on this host (see `libmig::ring`).
fn ring_flags(pid: i32) -> BTreeMap<i32, Vec<(u64, u32)>> {
    let mut pids = mig_ckpt::descendants(pid).unwrap_or_default();
    pids.push(pid);
    let (at, bit) = libmig::ring::CLOSED_FLAG;
    let name = format!("/memfd:{}", libmig::ring::MEMFD_NAME);
    let mut out = BTreeMap::new();
    for p in pids {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{p}/maps")) else {
            continue;
        };
        let Ok(maps) = mig_ckpt::proc::parse_maps(&text) else {
            continue;
        };
        let flags: Vec<(u64, u32)> = maps
            .iter()
            .filter(|m| m.shared && m.offset == 0 && m.name.starts_with(&name))
            .map(|m| (m.start + at, bit))
            .collect();
        if !flags.is_empty() {
            out.insert(p, flags);
        }
    }
    out
}

fn dump(
    pid: i32,
    all: &[i32],
    to: &std::path::Path,
    saved: Saved,
    tell: Option<&dyn Fn(u64)>,
) -> Result<DumpStats, String> {
    let Saved {
        input,
        socket,
        links,
        moving,
    } = saved;
    let trees = trees();
    if trees {
        mig_ckpt::stop_tree(pid, STOP_LIMIT)
            .map_err(|e| format!("its processes did not all stop: {e}"))?;
    }
    whole(pid, all)?;
    let tmp = dumping_path(to);
    let file = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| format!("{}: {e}", tmp.display()))?
    };
    let mut out = BufWriter::with_capacity(
        1 << 20,
        Told {
            file,
            written: 0,
            next: PROGRESS_STEP,
            tell,
        },
    );
    let opts = DumpOptions {
        external_fds: GIVEN_FDS.into_iter().collect::<BTreeSet<i32>>(),
        inputs: input.map(|i| (0, i)).into_iter().collect(),
        sockets: socket.into_iter().collect(),
        set_bits: ring_flags(pid),
        checkpoint_only: !moving,
        cut: links,
        // Rings offered to it and not yet mapped (on their way through a
        // link, or taken in and not yet looked at) are closed too.
        mark_memfds: vec![(
            libmig::ring::MEMFD_NAME.to_string(),
            libmig::ring::CLOSED_FLAG.0,
            libmig::ring::CLOSED_FLAG.1,
        )],
    };
    let saved = if trees {
        mig_ckpt::dump_tree(pid, &opts, &mut out)
    } else {
        mig_ckpt::dump(pid, &opts, &mut out)
    };
    let written = saved
        .map_err(|e| {
            if !trees && matches!(e, mig_ckpt::DumpError::Unsupported { .. }) {
                format!("{e} (a VP's whole tree is saved only by a daemon running as root)")
            } else {
                e.to_string()
            }
        })
        .and_then(|s| out.flush().map(|()| s).map_err(|e| e.to_string()))
        .and_then(|s| {
            std::fs::rename(&tmp, to)
                .map(|()| s)
                .map_err(|e| e.to_string())
        });
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

fn restore(
    image: &std::path::Path,
    verify: bool,
    fds: BTreeMap<i32, OwnedFd>,
    cell: CellFds,
    stopped: bool,
) -> Result<Restored, String> {
    use std::os::fd::AsRawFd;
    let file = File::open(image).map_err(|e| format!("{}: {e}", image.display()))?;
    let img = ImageFile::open(file, verify).map_err(|e| format!("its image: {e}"))?;
    let opts = RestoreOptions {
        stopped,
        die_with_caller: true,
        join: cell.join.iter().map(AsRawFd::as_raw_fd).collect(),
        into: cell.into.as_ref().map(AsRawFd::as_raw_fd),
        join_instead: cell.instead.iter().map(AsRawFd::as_raw_fd).collect(),
    };
    let inputs = img.image().inputs.clone();
    let sockets = img.image().sockets.clone();
    if trees() {
        let tree = mig_ckpt::restore_tree(&img, fds, &opts).map_err(|e| e.to_string())?;
        Ok(Restored {
            pid: tree.init(),
            tree: Some(tree),
            inputs,
            sockets,
        })
    } else {
        let r = mig_ckpt::restore(&img, fds, &opts).map_err(|e| e.to_string())?;
        Ok(Restored {
            pid: r.pid,
            tree: None,
            inputs,
            sockets,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};

    /// The next result but progress, and the progress before it.
    fn wait_with_progress(done: &mut Checkpointer) -> (Done, Vec<u64>) {
        let until = Instant::now() + Duration::from_secs(60);
        let mut told = Vec::new();
        loop {
            for d in done.results() {
                match d {
                    Done::Progress { upto, .. } => told.push(upto),
                    d => return (d, told),
                }
            }
            assert!(Instant::now() < until, "no result");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn wait_for(done: &mut Checkpointer) -> Done {
        wait_with_progress(done).0
    }

    fn given(out: OwnedFd) -> BTreeMap<i32, OwnedFd> {
        let null = |w: bool| {
            OwnedFd::from(
                std::fs::OpenOptions::new()
                    .read(!w)
                    .write(w)
                    .open("/dev/null")
                    .expect("/dev/null"),
            )
        };
        let mut fds = BTreeMap::new();
        fds.insert(0, null(false));
        fds.insert(1, out);
        fds.insert(2, null(true));
        fds.insert(crate::host::VP_FD, null(true));
        fds
    }

    /// A shell counting, saved mid-count, killed, restored from its image
    /// on the checkpointer thread: its output goes on from where it was,
    /// with nothing lost or said twice, and its exit status is its own.
    #[test]
    fn a_counting_shell_saved_and_restored_counts_on_and_ends_with_its_status() {
        let dir = tempfile::tempdir().expect("dir");
        let image = dir.path().join("t1.ckpt");
        let cloexec = nix::fcntl::OFlag::O_CLOEXEC;
        let (r, w) = nix::unistd::pipe2(cloexec).expect("pipe");
        let mut cmd = Command::new("/bin/sh");
        cmd.args([
            "-c",
            "i=0; while [ $i -lt 400 ]; do i=$((i+1)); echo $i; \
             sleep 0.005; done; exit 7",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::from(w.try_clone().expect("dup")))
        .stderr(Stdio::null())
        .process_group(0);
        // The daemon's socket, given on its number.
        let null = File::open("/dev/null").expect("null");
        let vp_fd = crate::host::VP_FD;
        let raw = std::os::fd::AsRawFd::as_raw_fd(&null);
        // SAFETY: dup2 in the child, between fork and exec, of a
        // descriptor that stays open in the parent until the spawn returns.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(raw, vp_fd) < 0 {
                    return Err(io::Error::last_os_error());
                }
                // Nothing else the test harness left open (a build
                // jobserver's pipe) goes with it.
                libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 0u32);
                Ok(())
            });
        }
        let mut child = cmd.spawn().expect("sh");
        // (The command keeps its copy of the pipe's write end until it goes.)
        drop(cmd);
        drop(w);
        let pid = child.id() as i32;
        let mut reader = io::BufReader::new(File::from(r));
        let mut lines = Vec::new();
        use std::io::BufRead;
        while lines.len() < 50 {
            let mut l = String::new();
            reader.read_line(&mut l).expect("read");
            lines.push(l.trim().to_string());
        }
        // SAFETY: kill takes integers only.
        unsafe { libc::kill(-pid, libc::SIGSTOP) };
        let wake: Arc<dyn Fn() + Send + Sync> = Arc::new(|| {});
        let mut c = Checkpointer::start(wake).expect("thread");
        c.submit(Task::Dump {
            tid: 1,
            pid,
            to: image.clone(),
            snap: None,
            all: vec![pid],
            input: None,
            socket: None,
            links: Default::default(),
        });
        assert!(c.busy(pid));
        let Done::Dumped { result, .. } = wait_for(&mut c) else {
            panic!("not a dump")
        };
        let stats = result.expect("dumped");
        assert!(stats.bytes > 0 && !c.busy(pid));
        assert!(is_image_file(&image));
        // SAFETY: as above.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        let _ = child.wait();
        // What it wrote before it stopped, not yet read.
        let (r2, w2) = nix::unistd::pipe2(cloexec).expect("pipe");
        c.submit(Task::Restore {
            tid: 1,
            image,
            verify: true,
            fds: given(w2),
            cell: CellFds::default(),
            stopped: false,
        });
        let Done::Restored { result, .. } = wait_for(&mut c) else {
            panic!("not a restore")
        };
        let restored = result.expect("restored");
        loop {
            let mut l = String::new();
            if reader.read_line(&mut l).expect("read") == 0 {
                break;
            }
            lines.push(l.trim().to_string());
        }
        let mut reader = io::BufReader::new(File::from(r2));
        loop {
            let mut l = String::new();
            if reader.read_line(&mut l).expect("read") == 0 {
                break;
            }
            lines.push(l.trim().to_string());
        }
        let want: Vec<String> = (1..=400).map(|i| i.to_string()).collect();
        assert_eq!(lines, want);
        let mut status = 0;
        // SAFETY: waitpid writes one int, ours; the restored process is a
        // child of this process (of the checkpointer thread).
        let got = unsafe { libc::waitpid(restored.pid, &mut status, 0) };
        assert_eq!(got, restored.pid);
        assert_eq!(restored.exit(status, None).code, Some(7));
    }

    /// A dump for a move says how far its file is written, in whole steps
    /// (the parts its daemon sends on while the rest is written), each
    /// already in the file; one for a job checkpoint says nothing.
    #[test]
    fn a_dump_for_a_move_says_how_far_it_is_and_one_for_a_checkpoint_does_not() {
        let dir = tempfile::tempdir().expect("dir");
        let mut cmd = Command::new("python3");
        // SAFETY: close_range in the child between fork and exec touches
        // only the child's descriptors (what the test harness left open).
        unsafe {
            cmd.pre_exec(|| {
                libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
                Ok(())
            });
        }
        let mut child = cmd
            .args([
                "-c",
                "import sys,time\nb=bytearray(b'x'*(20<<20))\nprint('ready',flush=True)\n\
                 time.sleep(60)",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("python3");
        let mut ready = String::new();
        use std::io::BufRead;
        io::BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut ready)
            .expect("ready");
        assert_eq!(ready.trim(), "ready");
        let pid = child.id() as i32;
        // SAFETY: kill takes integers only.
        unsafe { libc::kill(-pid, libc::SIGSTOP) };
        let mut c = Checkpointer::start(Arc::new(|| {})).expect("thread");
        let to = dir.path().join("t3.ckpt");
        let task = |snap| Task::Dump {
            tid: 3,
            pid,
            to: to.clone(),
            snap,
            all: vec![pid],
            input: None,
            socket: None,
            links: Default::default(),
        };
        c.submit(task(None));
        let (Done::Dumped { result, .. }, told) = wait_with_progress(&mut c) else {
            panic!("not a dump")
        };
        let bytes = result.expect("dumped").bytes;
        assert!(bytes > 20 << 20, "{bytes}");
        assert!(
            told.len() as u64 >= bytes / PROGRESS_STEP,
            "{told:?} of {bytes}"
        );
        for (i, upto) in told.iter().enumerate() {
            assert!(*upto >= (i as u64 + 1) * PROGRESS_STEP, "{told:?}");
            assert!(*upto <= bytes, "{told:?} of {bytes}");
        }
        c.submit(task(Some(1)));
        let (Done::Dumped { result, .. }, told) = wait_with_progress(&mut c) else {
            panic!("not a dump")
        };
        assert_eq!(result.expect("dumped").bytes, bytes);
        assert!(told.is_empty(), "{told:?}");
        // SAFETY: as above.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        let _ = child.wait();
    }

    #[test]
    fn a_process_with_a_socket_to_outside_is_refused_and_left_as_it_was() {
        let dir = tempfile::tempdir().expect("dir");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
        let addr = listener.local_addr().expect("addr");
        let mut cmd = Command::new("python3");
        // SAFETY: close_range in the child between fork and exec touches
        // only the child's descriptors (what the test harness left open).
        unsafe {
            cmd.pre_exec(|| {
                libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
                Ok(())
            });
        }
        let mut child = cmd
            .args([
                "-c",
                &format!(
                    "import socket,time\nkeep=[open('/dev/null') for _ in range(4)]\n\
                     s=socket.create_connection(('127.0.0.1',{}))\ntime.sleep(60)",
                    addr.port()
                ),
            ])
            .process_group(0)
            .spawn()
            .expect("python3");
        let _peer = listener.accept().expect("accept");
        let pid = child.id() as i32;
        // SAFETY: kill takes integers only.
        unsafe { libc::kill(-pid, libc::SIGSTOP) };
        let mut c = Checkpointer::start(Arc::new(|| {})).expect("thread");
        let to = dir.path().join("t2.ckpt");
        c.submit(Task::Dump {
            tid: 2,
            pid,
            to: to.clone(),
            snap: None,
            all: vec![pid],
            input: None,
            socket: None,
            links: Default::default(),
        });
        let Done::Dumped { result, .. } = wait_for(&mut c) else {
            panic!("not a dump")
        };
        let why = result.expect_err("a TCP socket cannot be saved");
        assert!(why.contains("socket"), "{why}");
        assert!(!to.exists() && !to.with_extension("dumping").exists());
        // Still there, stopped; it runs on when continued.
        assert!(crate::host::is_stopped(pid as u32));
        // SAFETY: as above.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        let _ = child.wait();
    }
}
