//! Making a saved tree of processes again, each with its pid, in a pid
//! namespace of its own.
//!
//! The steps: plan the tree (`tree::plan`: who forks whom, who calls
//! `setsid`, who joins which group); open every open file and mapped file
//! in the caller and make the pipes, with their bytes; start the crate's
//! init in a new pid namespace, traced and stopped at its `execve`,
//! holding all those descriptors. Then, by calls injected (see `sys`):
//! every process is forked by its parent with its pid (`clone3` with
//! `set_tid`), parents first, into a bare copy of init (one page of code),
//! a session leader calling `setsid` between the forks of its children
//! that stay out of its session and the others; with all there, groups are
//! joined (leaders first); zombies end as they had (`exit_group`, or their
//! signal); every other bare process places its descriptors and `execve`s
//! its program, and is rebuilt as [`super::restore`] rebuilds one (its
//! threads with their tids). Init drops the descriptors, is told the
//! root's pid and let go, and every process is released at once. Any
//! failure kills the namespace (its init), so no half-built process is
//! left.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::{
    build, check_machine, handover, open_files, open_mapped, release, unexpected, Handover,
    RestoreError, RestoreOptions,
};
use crate::image::{Meta, ProcState, PAGE};
use crate::ns::{self, Tree, KEEP_FROM};
use crate::sys::{self, reg, Injector, Mem};
use crate::tree::Step;
use crate::ImageFile;

/// Restores the tree of `img` in a new pid namespace, every process with
/// its pid, parent, process group and session, as a child of the caller:
/// the namespace's init, whose first child is the tree's root. `fds`
/// gives the descriptors the dump left to the caller (the root's, by
/// number). Needs `CAP_SYS_ADMIN` (a pid namespace) and
/// `CAP_CHECKPOINT_RESTORE` (pids chosen).
pub fn restore_tree(
    img: &ImageFile,
    mut fds: BTreeMap<i32, OwnedFd>,
    opts: &RestoreOptions,
) -> Result<Tree, RestoreError> {
    let image = img.image();
    check_machine(image)?;
    let plan = crate::tree::plan(image)?;
    let memfds = super::make_memfds(img)?;
    let files = open_files(img, &mut fds, &memfds)?;
    let mapped = open_mapped(image, &memfds)?;
    // What init keeps for the bare processes it forks, and each process's
    // handover with its sources renumbered as init has them.
    let mut keep: Vec<RawFd> = Vec::new();
    let mut hands: Vec<Option<Handover>> = Vec::new();
    for p in &image.procs {
        let ProcState::Live(meta) = &p.state else {
            hands.push(None);
            continue;
        };
        let mut hand = handover(meta, &files, &mapped, img.file().as_raw_fd())?;
        for (src, _) in &mut hand.pairs {
            let at = match keep.iter().position(|k| k == src) {
                Some(i) => i,
                None => {
                    keep.push(*src);
                    keep.len() - 1
                }
            };
            *src = KEEP_FROM + at as RawFd;
        }
        hands.push(Some(hand));
    }
    let place = ns::Place {
        die_with_caller: opts.die_with_caller,
        join: &opts.join,
        into: opts.into.map(|dir| (dir, &opts.join_instead[..])),
    };
    let (init, status) = ns::start_init(&keep, place)?;
    drop(files);
    drop(mapped);
    let mut made = Made {
        init,
        traced: Vec::new(),
        done: false,
    };
    let program = build_tree(img, &plan, &hands, opts, &mut made)?;
    made.done = true;
    Ok(ns::tree(init, program, status))
}

/// The processes made so far, killed with their namespace unless `done`.
struct Made {
    init: i32,
    /// Every process and thread traced, as the caller sees them.
    traced: Vec<i32>,
    done: bool,
}

impl Drop for Made {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // SAFETY: kill and waitpid take integers and our own int; init's
        // end kills the namespace, and the traced processes must be waited
        // for by us, their tracer, before init can end.
        unsafe {
            libc::kill(self.init, libc::SIGKILL);
            for &t in &self.traced {
                libc::kill(t, libc::SIGKILL);
                let mut st = 0;
                libc::waitpid(t, &mut st, libc::__WALL);
            }
            let mut st = 0;
            libc::waitpid(self.init, &mut st, libc::__WALL);
        }
    }
}

/// A bare process: a fork of init (or of another bare one) waiting to
/// become a process of the tree.
struct Bare {
    /// As the caller sees it.
    pid: i32,
    inj: Injector,
    mem: Mem,
}

impl Bare {
    fn new(pid: i32, syscall_at: u64) -> Result<Bare, RestoreError> {
        Ok(Bare {
            pid,
            inj: Injector {
                tid: pid,
                syscall_at,
                base: sys::get_regs(pid)?,
            },
            mem: Mem::open(pid)?,
        })
    }

    /// Forks a child with pid `want` (in the namespace), stopped at birth.
    fn fork(&self, scratch: u64, want: i32) -> Result<i32, RestoreError> {
        let set_tid_at = scratch + 128;
        self.mem.write(set_tid_at, &want.to_le_bytes())?;
        self.mem.write(
            scratch,
            &sys::clone_args(0, libc::SIGCHLD as u64, set_tid_at),
        )?;
        let (got, outer) = self.inj.spawn(
            &format!("clone3 (pid {want})"),
            libc::SYS_clone3,
            &[scratch, 80],
        )?;
        if got != want as u64 {
            return Err(unexpected(
                self.pid,
                format!("clone3 gave pid {got}, not {want}"),
            ));
        }
        let s = sys::wait_stop(outer)?;
        if s.sig != libc::SIGSTOP {
            return Err(unexpected(
                outer,
                format!("new process stopped by signal {}", s.sig),
            ));
        }
        Ok(outer)
    }

    /// Places the handed-over descriptors (only they stay open) and
    /// `execve`s `exe`; returns at the exec's end, the new program not yet
    /// run.
    fn exec(&self, scratch: u64, exe: &str, hand: &Handover) -> Result<(), RestoreError> {
        let inj = &self.inj;
        inj.ok(
            "close_range (close-on-exec)",
            libc::SYS_close_range,
            &[0, u32::MAX as u64, libc::CLOSE_RANGE_CLOEXEC as u64],
        )?;
        let above = hand.pairs.iter().map(|&(s, d)| s.max(d)).max().unwrap_or(2) + 1;
        let mut moved = Vec::new();
        for &(src, _) in &hand.pairs {
            moved.push(inj.ok(
                "fcntl F_DUPFD_CLOEXEC",
                libc::SYS_fcntl,
                &[src as u64, libc::F_DUPFD_CLOEXEC as u64, above as u64],
            )?);
        }
        for (&m, &(_, dst)) in moved.iter().zip(&hand.pairs) {
            inj.ok("dup2", libc::SYS_dup2, &[m, dst as u64])?;
        }
        let mut path = exe.as_bytes().to_vec();
        path.push(0);
        if path.len() as u64 > PAGE - 256 {
            return Err(unexpected(self.pid, "program path too long"));
        }
        let (argv_at, path_at) = (scratch + 200, scratch + 256);
        self.mem.write(path_at, &path)?;
        // argv = { path, NULL }, envp = { NULL } (the saved stack has the
        // process's own).
        let mut v = path_at.to_le_bytes().to_vec();
        v.extend_from_slice(&[0; 8]);
        self.mem.write(argv_at, &v)?;
        let r = inj.call(libc::SYS_execve, &[path_at, argv_at, argv_at + 8])?;
        if r != 0 {
            return Err(unexpected(
                self.pid,
                format!(
                    "execve {exe}: {}",
                    std::io::Error::from_raw_os_error(-r as i32)
                ),
            ));
        }
        Ok(())
    }
}

/// A process rebuilt: its pid, its threads (as the caller sees them, as
/// it does), its state.
type Rebuilt<'a> = (i32, Vec<(i32, i32)>, &'a Meta);

/// Makes every process of `plan` under the stopped, traced `made.init`,
/// rebuilds them, lets init and them go; gives the root's pid (as the
/// caller sees it) if it is a live process.
fn build_tree(
    img: &ImageFile,
    plan: &crate::tree::TreePlan,
    hands: &[Option<Handover>],
    opts: &RestoreOptions,
    made: &mut Made,
) -> Result<Option<i32>, RestoreError> {
    let image = img.image();
    let init = made.init;
    let s = sys::wait_stop(init)?;
    if s.sig != libc::SIGTRAP {
        return Err(unexpected(
            init,
            format!("init stopped by signal {}", s.sig),
        ));
    }
    sys::set_options(
        init,
        libc::PTRACE_O_TRACESYSGOOD
            | libc::PTRACE_O_TRACEFORK
            | libc::PTRACE_O_TRACECLONE
            | libc::PTRACE_O_TRACEEXEC
            | libc::PTRACE_O_EXITKILL,
    )?;
    let entry = sys::get_regs(init)?;
    let maps =
        std::fs::read_to_string(format!("/proc/{init}/maps")).map_err(super::RestoreError::Read)?;
    let vdso = crate::proc::parse_maps(&maps)
        .map_err(|e| unexpected(init, e))?
        .into_iter()
        .find(|m| m.name == "[vdso]")
        .ok_or_else(|| unexpected(init, "init has no vDSO"))?;
    let syscall_at = crate::dump::find_syscall(
        &Mem::open(init)?,
        &crate::image::Special {
            name: vdso.name.clone(),
            start: vdso.start,
            end: vdso.end,
        },
        init,
    )?;
    let init_bare = Bare::new(init, syscall_at)?;
    // Every signal blocked in init and so in every fork of it: a SIGCHLD
    // from a zombie made stays pending (taken at the rebuild).
    sys::set_sigmask(init, u64::MAX)?;
    let scratch = init_bare.inj.ok(
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

    // Every process, forked by its parent, parents first; sessions made
    // between the forks that stay out of them and those that go in.
    let mut bare: Vec<Option<Bare>> = (0..image.procs.len()).map(|_| None).collect();
    for step in &plan.steps {
        match *step {
            Step::Fork { parent, child } => {
                let parent = match parent {
                    None => &init_bare,
                    Some(q) => bare[q]
                        .as_ref()
                        .ok_or_else(|| unexpected(init, "a parent made after its child"))?,
                };
                let pid = parent.fork(scratch, image.procs[child].pid)?;
                made.traced.push(pid);
                bare[child] = Some(Bare::new(pid, syscall_at)?);
            }
            Step::Setsid(i) => {
                bare[i]
                    .as_ref()
                    .ok_or_else(|| unexpected(init, "setsid before the fork"))?
                    .inj
                    .ok("setsid", libc::SYS_setsid, &[])?;
            }
        }
    }
    let get = |i: usize| {
        bare[i]
            .as_ref()
            .ok_or_else(|| unexpected(init, "a process was not made"))
    };
    for &(i, g) in &plan.setpgid {
        get(i)?
            .inj
            .ok(&format!("setpgid 0 {g}"), libc::SYS_setpgid, &[0, g as u64])?;
    }
    // Zombies end as they had; the others become their programs.
    for (i, p) in image.procs.iter().enumerate() {
        if let ProcState::Zombie { status } = p.state {
            let b = get(i)?;
            // No core file for a zombie that died of a signal that dumps.
            b.inj.ok(
                "prctl PR_SET_DUMPABLE",
                libc::SYS_prctl,
                &[libc::PR_SET_DUMPABLE as u64, 0],
            )?;
            b.inj.end_as(status)?;
            made.traced.retain(|&t| t != b.pid);
        }
    }
    // (pid, its threads, its state), each rebuilt and waiting to go.
    let mut rebuilt: Vec<Rebuilt> = Vec::new();
    for (i, p) in image.procs.iter().enumerate() {
        let (ProcState::Live(meta), Some(hand)) = (&p.state, &hands[i]) else {
            continue;
        };
        let b = get(i)?;
        b.exec(scratch, &meta.exe, hand)?;
        let tids = build(b.pid, p.pid, img, meta, hand, true)?;
        made.traced.extend(tids.iter().skip(1).map(|t| t.0));
        rebuilt.push((b.pid, tids, meta));
    }

    // Init: only its status pipe left, told the root, let go.
    init_bare.inj.ok(
        "close_range",
        libc::SYS_close_range,
        &[4, u32::MAX as u64, 0],
    )?;
    init_bare
        .inj
        .ok("munmap (scratch page)", libc::SYS_munmap, &[scratch, PAGE])?;
    let mut regs = entry;
    regs[reg::R12] = image.procs[0].pid as u64;
    sys::set_regs(init, &regs)?;
    sys::set_sigmask(init, 0)?;
    for (pid, tids, meta) in &rebuilt {
        release(*pid, tids, meta, opts.stopped)?;
    }
    sys::detach(init, 0)?;
    Ok(match image.procs[0].state {
        ProcState::Live(_) => bare[0].as_ref().map(|b| b.pid),
        ProcState::Zombie { .. } => None,
    })
}
