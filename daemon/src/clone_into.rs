//! Starting a process straight into a cgroup: `clone3` with
//! `CLONE_INTO_CGROUP`, sharing the caller's memory until the child execs
//! (`CLONE_VM | CLONE_VFORK`, as `posix_spawn` does).
//!
//! Why: a child that writes itself into its cell's `cgroup.procs` takes
//! the kernel's cgroup migration lock for writing, and the first such
//! write after a quiet spell waits for an RCU grace period (5-8 ms here),
//! during which the vfork'ed daemon waits too. A child born in its cell
//! takes no such lock.
//!
//! What lives here: the system call and its x86_64 trampoline (the child
//! runs a function on a stack of its own, then exits with what it
//! returns). What does not: what the child does (`host`), making the cells
//! (`contain`). Elsewhere, and where the kernel refuses (before 5.7, or a
//! cgroup v1 hierarchy), `clone_into` says so and the caller falls back to
//! the child joining its cell itself.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};

#[cfg(target_arch = "x86_64")]
use mig_ckpt::{CloneArgs, CLONE_INTO_CGROUP};

/// The child's side: called on its own stack, in the caller's memory.
pub type ChildFn = extern "C" fn(*mut libc::c_void) -> libc::c_int;

/// Set once the kernel has said it has no `clone3` or no
/// `CLONE_INTO_CGROUP`: not asked again.
static REFUSED: AtomicBool = AtomicBool::new(false);

/// Start `child(arg)` in a process born in the cgroup whose directory
/// `cgroup` is open on, on `stack` (its 16-byte aligned top is used),
/// sharing this process's memory and holding this thread until the child
/// has exec'd or exited; its exit signal is SIGCHLD. `Ok(pid)`, or
/// `Err(errno)` where it could not be done this way (then nothing started).
///
/// # Safety
/// As `libc::clone` with `CLONE_VM | CLONE_VFORK`: `child` may make only
/// async-signal-safe calls and must not return into anything of the
/// caller's, `arg` must stay valid until this returns, and signals should
/// be blocked around it.
pub unsafe fn clone_into(
    cgroup: RawFd,
    stack: &mut [u8],
    child: ChildFn,
    arg: *mut libc::c_void,
) -> Result<libc::pid_t, i32> {
    if REFUSED.load(Ordering::Relaxed) {
        return Err(libc::ENOSYS);
    }
    // SAFETY: the caller upholds `raw`'s contract, which is this
    // function's (see its `# Safety`).
    let r = unsafe { raw(cgroup, stack, child, arg) };
    if let Err(e) = r {
        if matches!(e, libc::ENOSYS | libc::E2BIG | libc::EINVAL) {
            REFUSED.store(true, Ordering::Relaxed);
        }
    }
    r
}

#[cfg(target_arch = "x86_64")]
unsafe fn raw(
    cgroup: RawFd,
    stack: &mut [u8],
    child: ChildFn,
    arg: *mut libc::c_void,
) -> Result<libc::pid_t, i32> {
    let lo = stack.as_mut_ptr() as u64;
    let top = (lo + stack.len() as u64) & !15;
    let args = CloneArgs {
        flags: (libc::CLONE_VM | libc::CLONE_VFORK) as u64 | CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        stack: lo,
        // The child starts with its stack pointer at stack + stack_size:
        // aligned, as a call wants it.
        stack_size: top - lo,
        cgroup: u64::try_from(cgroup).map_err(|_| libc::EBADF)?,
        ..CloneArgs::default()
    };
    let ret: i64;
    // SAFETY: the system call either fails, or returns the child's pid in
    // this thread and 0 in the child. The child, on its own stack, calls
    // `child(arg)` (registers r12 and r13 survive the call into both) and
    // exits with its result; it never comes back here.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "mov rdi, r13",
            "call r12",
            "mov edi, eax",
            "mov eax, 60",
            "syscall",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 => ret,
            in("rdi") &args as *const CloneArgs,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") child,
            in("r13") arg,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    if ret < 0 {
        Err(i32::try_from(-ret).unwrap_or(libc::EINVAL))
    } else {
        libc::pid_t::try_from(ret).map_err(|_| libc::EINVAL)
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn raw(
    _cgroup: RawFd,
    _stack: &mut [u8],
    _child: ChildFn,
    _arg: *mut libc::c_void,
) -> Result<libc::pid_t, i32> {
    Err(libc::ENOSYS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contain::{Containment, Flavour};

    /// The child: `/bin/sleep 5`, through what is at hand.
    extern "C" fn sleeper(_: *mut libc::c_void) -> libc::c_int {
        let argv = [c"sleep".as_ptr(), c"5".as_ptr(), std::ptr::null()];
        // SAFETY: static strings; execv replaces the process or fails.
        unsafe {
            libc::execv(c"/bin/sleep".as_ptr(), argv.as_ptr());
        }
        9
    }

    #[test]
    fn a_child_is_born_in_its_cell_or_nothing_starts() {
        let mut c = Containment::open("clone", std::process::id()).expect("no cgroup here");
        let cell = c
            .cell("t1", crate::contain::Limits::default())
            .expect("cell");
        let mut stack = vec![0u8; 64 * 1024];
        // A descriptor that is no cgroup: refused, nothing started.
        // SAFETY: `sleeper` only execs.
        let bad = unsafe { clone_into(-1, &mut stack, sleeper, std::ptr::null_mut()) };
        assert!(bad.is_err());
        let Some(dir) = cell.into_fd() else {
            // Only a v1 hierarchy has no directory to be born in.
            assert_eq!(c.flavour(), Flavour::V1);
            return c.close();
        };
        // SAFETY: as above.
        let pid = unsafe { clone_into(dir, &mut stack, sleeper, std::ptr::null_mut()) }
            .expect("clone3 with CLONE_INTO_CGROUP (Linux 5.7)");
        assert_eq!(cell.pids(), [pid]);
        let own = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("its cgroup");
        assert!(own.contains("/t1-"), "{own}");
        cell.kill();
        let mut status = 0;
        // SAFETY: our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFSIGNALED(status));
        c.retire(cell);
        c.close();
    }

    #[test]
    fn a_child_born_in_a_frozen_cell_holds_its_parent_until_killed_unborn() {
        let mut c = Containment::open("unborn", std::process::id()).expect("no cgroup here");
        if c.flavour() == Flavour::V1 {
            // (v1's freezer lets no kill through until it thaws.)
            return c.close();
        }
        let cell = c
            .cell("t1", crate::contain::Limits::default())
            .expect("cell");
        let dir = cell.into_fd().expect("a v2 cell's directory");
        crate::contain::freeze_tree(Flavour::V2, c.base(), true).expect("freeze");
        // The clone returns only once its child has exec'd or ended: a
        // frozen child does neither.
        let (tx, rx) = std::sync::mpsc::channel();
        let starter = std::thread::spawn(move || {
            let mut stack = vec![0u8; 64 * 1024];
            // SAFETY: `sleeper` only execs; the stack lives until the
            // clone returns.
            let pid = unsafe { clone_into(dir, &mut stack, sleeper, std::ptr::null_mut()) };
            let _ = tx.send(pid);
        });
        let mut killed = 0;
        let mut got = None;
        for _ in 0..500 {
            killed += crate::contain::kill_unborn(c.base(), std::process::id() as i32);
            if let Ok(r) = rx.recv_timeout(std::time::Duration::from_millis(20)) {
                got = Some(r);
                break;
            }
        }
        let pid = got
            .expect("the clone returned once its frozen child was killed")
            .expect("clone3 with CLONE_INTO_CGROUP (Linux 5.7)");
        starter.join().expect("starter");
        assert!(killed >= 1);
        let mut status = 0;
        // SAFETY: our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL);
        crate::contain::freeze_tree(Flavour::V2, c.base(), false).expect("thaw");
        c.retire(cell);
        c.close();
    }
}
