//! PVM's task control as C functions: `pvm_mytid`, `pvm_parent`,
//! `pvm_exit`, `pvm_spawn`, `pvm_kill`, `pvm_siblings`, `pvm_config`,
//! `pvm_notify`, options, error reports and small helpers, on libmig.
//!
//! What does not live here: buffers (`pack`), messages (`message`), groups
//! (`group`).

use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int};
use std::path::{Path, PathBuf};

use libmig::NotifyOn;

use crate::errors;
use crate::state::{self, from_c, to_c, HostInfo, TaskInfo};

/// PVM's data signature for x86_64 Linux (`hi_dsig`).
const DSIG: i32 = 0x0040_8841;

/// # Safety
/// Always safe; `extern "C"` for PVM programs.
#[no_mangle]
pub extern "C" fn pvm_mytid() -> c_int {
    crate::ffi::guard(|| {
        state::with(|t| match t.vm() {
            Ok(vm) => to_c(vm.tid()),
            Err(e) => t.fail("pvm_mytid", e),
        })
    })
}

/// The task that spawned this one, or `PvmNoParent`.
#[no_mangle]
pub extern "C" fn pvm_parent() -> c_int {
    crate::ffi::guard(|| {
        state::with(|t| match t.vm() {
            Ok(vm) => match vm.parent() {
                Some(p) => to_c(p),
                None => errors::NO_PARENT,
            },
            Err(e) => t.fail("pvm_parent", e),
        })
    })
}

/// Leave the virtual machine (the process goes on).
#[no_mangle]
pub extern "C" fn pvm_exit() -> c_int {
    crate::ffi::guard(|| {
        state::with(|t| t.exit());
        errors::OK
    })
}

/// Where `pvm_spawn` finds a program named without a slash: `PVM_EP`'s
/// directories, `$HOME/pvm3/bin/$PVM_ARCH` (PVM's default `ep=`), the
/// directory of the running program, then `PATH`. Named with a slash, or
/// found nowhere, it is passed as it is (the daemon then looks in `PATH`).
pub fn find_program(name: &str) -> String {
    if name.contains('/') {
        return name.to_string();
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Ok(ep) = std::env::var("PVM_EP") {
        dirs.extend(std::env::split_paths(&ep));
    }
    if let Ok(home) = std::env::var("HOME") {
        let arch = std::env::var("PVM_ARCH").unwrap_or_else(|_| "LINUX64".into());
        dirs.push(Path::new(&home).join("pvm3/bin").join(arch));
    }
    if let Some(d) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        dirs.push(d);
    }
    if let Some(p) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&p));
    }
    dirs.into_iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .map_or_else(|| name.to_string(), |p| p.display().to_string())
}

/// Start `ntask` tasks of `task`; how many started, their Tids (or error
/// codes) in `tids`. With `PvmTaskArch`, `where` names an architecture
/// (mig's, as `mig hosts` shows it, or PVM's `LINUX64`...); with
/// `PvmTaskHost`, a host, whose architecture the tasks then run on (the
/// scheduler chooses among the hosts of it).
///
/// # Safety
/// `task` a C string; `argv` null or a null-terminated array of C strings;
/// `where_` null or a C string; `tids` room for `ntask` ints (or null).
#[no_mangle]
pub unsafe extern "C" fn pvm_spawn(
    task: *const c_char,
    argv: *const *const c_char,
    flag: c_int,
    where_: *const c_char,
    ntask: c_int,
    tids: *mut c_int,
) -> c_int {
    crate::ffi::guard(|| {
        if task.is_null() || ntask < 1 {
            return state::with(|t| t.fail("pvm_spawn", errors::BAD_PARAM));
        }
        // SAFETY: the caller passes a C string.
        let name = unsafe { CStr::from_ptr(task) }
            .to_string_lossy()
            .into_owned();
        let mut args = Vec::new();
        if !argv.is_null() {
            let mut i = 0;
            // SAFETY: a null-terminated array of C strings, as PVM documents.
            while let Some(a) = unsafe { (*argv.add(i)).as_ref() } {
                // SAFETY: each element is a C string.
                args.push(unsafe { CStr::from_ptr(a) }.to_string_lossy().into_owned());
                i += 1;
            }
        }
        let program = find_program(&name);
        let place = if where_.is_null() {
            None
        } else {
            // SAFETY: not null, so a C string, as the caller promises.
            let place = unsafe { CStr::from_ptr(where_) };
            Some(place.to_string_lossy().into_owned())
        };
        let n = ntask as usize;
        let put = |i: usize, v: c_int| {
            if !tids.is_null() {
                // SAFETY: the caller gives room for `ntask` ints.
                unsafe { *tids.add(i) = v };
            }
        };
        state::with(|t| {
            let vm = match t.vm() {
                Ok(vm) => vm,
                Err(e) => {
                    (0..n).for_each(|i| put(i, e));
                    return t.fail("pvm_spawn", e);
                }
            };
            let argv: Vec<&str> = args.iter().map(String::as_str).collect();
            // `where` narrows the hosts: to the one named (PvmTaskHost: there
            // when one of its processors has room in the job's slots, else
            // among the hosts of its architecture), or to an architecture
            // (PvmTaskArch).
            let arch = match place.as_deref() {
                Some(w) if flag & 3 != 0 && !w.is_empty() && w != "*" => {
                    let hosts = match vm.hosts() {
                        Ok(h) => h,
                        Err(_) => {
                            (0..n).for_each(|i| put(i, errors::SYS_ERR));
                            return t.fail("pvm_spawn", errors::SYS_ERR);
                        }
                    };
                    let found = if flag & 1 != 0 {
                        hosts
                            .iter()
                            .find(|h| h.alive && h.facts.name == w)
                            .map(|h| h.facts.arch.clone())
                    } else {
                        let a = mig_arch(w);
                        hosts
                            .iter()
                            .any(|h| h.alive && h.facts.arch == a)
                            .then_some(a)
                    };
                    match found {
                        Some(a) => Some(a),
                        None => {
                            // None started: the reason is in `tids`.
                            (0..n).for_each(|i| put(i, errors::NO_HOST));
                            t.fail("pvm_spawn", errors::NO_HOST);
                            return 0;
                        }
                    }
                }
                _ => None,
            };
            // A VP started with no parent starts a job of its own, as a task
            // spawned with PvmNoSpawnParent has none.
            let on_host = place.as_deref().filter(|_| flag & 1 != 0 && arch.is_some());
            let r = match (arch, on_host) {
                (Some(_), Some(h)) => vm.spawn_on_host(&program, &argv, n as u32, h),
                (Some(a), None) => vm.spawn_on_arch(&program, &argv, n as u32, &a),
                (None, _) if flag & 64 != 0 => vm.spawn_job(&program, &argv, n as u32),
                (None, _) => vm.spawn(&program, &argv, n as u32),
            };
            match r {
                Ok(got) => {
                    // Each child learns the context it inherits (see
                    // `state::INHERIT_TAG`).
                    let ctx = t.context.to_be_bytes();
                    for (i, tid) in got.iter().enumerate().take(n) {
                        put(i, to_c(*tid));
                        if let Ok(vm) = t.vm() {
                            let _ = vm.send_bytes(*tid, state::INHERIT_TAG, &ctx);
                        }
                    }
                    for i in got.len()..n {
                        put(i, errors::NO_FILE);
                    }
                    got.len().min(n) as c_int
                }
                Err(e) => {
                    let why = e.to_string();
                    let code = if why.contains("No such file") || why.contains("not found") {
                        errors::NO_FILE
                    } else {
                        errors::SYS_ERR
                    };
                    (0..n).for_each(|i| put(i, code));
                    if t.autoerr != 0 {
                        eprintln!("libpvm: pvm_spawn({name}): {e}");
                    }
                    0
                }
            }
        })
    })
}

/// End a task.
#[no_mangle]
pub extern "C" fn pvm_kill(tid: c_int) -> c_int {
    crate::ffi::guard(|| {
        let Some(victim) = from_c(tid) else {
            return state::with(|t| t.fail("pvm_kill", errors::BAD_PARAM));
        };
        state::with(|t| match t.vm().map(|vm| vm.kill(victim)) {
            Ok(Ok(())) => errors::OK,
            Ok(Err(_)) => t.fail("pvm_kill", errors::NO_TASK),
            Err(e) => t.fail("pvm_kill", e),
        })
    })
}

/// The tasks started with this one: its job's VPs, in order.
///
/// # Safety
/// `tids` null or a place for a pointer.
#[no_mangle]
pub unsafe extern "C" fn pvm_siblings(tids: *mut *const c_int) -> c_int {
    crate::ffi::guard(|| {
        state::with(|t| {
            let list = match t.vm().map(|vm| vm.tasks()) {
                Ok(Ok(l)) => l,
                Ok(Err(_)) => return t.fail("pvm_siblings", errors::SYS_ERR),
                Err(e) => return t.fail("pvm_siblings", e),
            };
            t.siblings = list.into_iter().map(to_c).collect();
            if !tids.is_null() {
                // SAFETY: the caller gives a place for a pointer; the list
                // lives in the task until the next call.
                unsafe { *tids = t.siblings.as_ptr() };
            }
            t.siblings.len() as c_int
        })
    })
}

/// A host's daemon Tid as PVM numbers them: the `i`th host (from 0) is
/// `(i + 1) << 18` (`0x40000`, `0x80000`, ...).
fn host_tid(i: usize) -> c_int {
    ((i as c_int) + 1) << 18
}

/// The hosts, alive ones first in the master's order, or a PVM error.
fn hosts(t: &mut crate::state::Task, call: &str) -> Result<Vec<libmig::msg::HostInfo>, c_int> {
    match t.vm().map(|vm| vm.hosts()) {
        Ok(Ok(h)) => Ok(h.into_iter().filter(|h| h.alive).collect()),
        Ok(Err(_)) => Err(t.fail(call, errors::SYS_ERR)),
        Err(e) => Err(t.fail(call, e)),
    }
}

/// The host a task runs on, as its daemon's Tid (see `pvm_config`).
#[no_mangle]
pub extern "C" fn pvm_tidtohost(tid: c_int) -> c_int {
    crate::ffi::guard(|| {
        let Some(who) = from_c(tid) else {
            return state::with(|t| t.fail("pvm_tidtohost", errors::BAD_PARAM));
        };
        state::with(|t| {
            let hs = match hosts(t, "pvm_tidtohost") {
                Ok(h) => h,
                Err(e) => return e,
            };
            let ps = match t.vm().map(|vm| vm.ps()) {
                Ok(Ok(p)) => p,
                _ => return t.fail("pvm_tidtohost", errors::SYS_ERR),
            };
            let host = ps
                .iter()
                .find(|v| v.tid == who)
                .and_then(|v| v.host.clone());
            match host.and_then(|h| hs.iter().position(|x| x.facts.name == h)) {
                Some(i) => host_tid(i),
                None => t.fail("pvm_tidtohost", errors::NO_TASK),
            }
        })
    })
}

/// The virtual machine's hosts (those alive), each with its name,
/// architecture and speed (1000 per processor of capacity 1).
///
/// # Safety
/// Each pointer null or a place for its value.
#[no_mangle]
pub unsafe extern "C" fn pvm_config(
    nhost: *mut c_int,
    narch: *mut c_int,
    hostp: *mut *const HostInfo,
) -> c_int {
    crate::ffi::guard(|| {
        state::with(|t| {
            let hs = match hosts(t, "pvm_config") {
                Ok(h) => h,
                Err(e) => return e,
            };
            t.host_strings = hs
                .iter()
                .flat_map(|h| [h.facts.name.clone(), h.facts.arch.clone()])
                .map(|s| CString::new(s).unwrap_or_default())
                .collect();
            t.hosts = hs
                .iter()
                .enumerate()
                .map(|(i, h)| HostInfo {
                    tid: host_tid(i),
                    name: t.host_strings[2 * i].as_ptr(),
                    arch: t.host_strings[2 * i + 1].as_ptr(),
                    speed: (h.facts.capacity * h.facts.processors as f64 * 1000.0) as i32,
                    dsig: DSIG,
                })
                .collect();
            let mut arches: Vec<&str> = hs.iter().map(|h| h.facts.arch.as_str()).collect();
            arches.sort();
            arches.dedup();
            // SAFETY: the caller gives places for the values, or null.
            unsafe {
                if !nhost.is_null() {
                    *nhost = t.hosts.len() as c_int;
                }
                if !narch.is_null() {
                    *narch = arches.len() as c_int;
                }
                if !hostp.is_null() {
                    *hostp = t.hosts.as_ptr();
                }
            }
            errors::OK
        })
    })
}

/// The tasks: every VP (`which` 0), those on one host (its daemon Tid),
/// or one task (its Tid).
///
/// # Safety
/// Each pointer null or a place for its value.
#[no_mangle]
pub unsafe extern "C" fn pvm_tasks(
    which: c_int,
    ntask: *mut c_int,
    taskp: *mut *const TaskInfo,
) -> c_int {
    crate::ffi::guard(|| {
        state::with(|t| {
            let hs = match hosts(t, "pvm_tasks") {
                Ok(h) => h,
                Err(e) => return e,
            };
            let ps = match t.vm().map(|vm| vm.ps()) {
                Ok(Ok(p)) => p,
                _ => return t.fail("pvm_tasks", errors::SYS_ERR),
            };
            let host_of = |name: &Option<String>| {
                name.as_ref()
                    .and_then(|n| hs.iter().position(|h| &h.facts.name == n))
                    .map_or(0, host_tid)
            };
            let running: Vec<_> = ps
                .iter()
                .filter(|v| v.pid.is_some())
                .filter(|v| which == 0 || host_of(&v.host) == which || to_c(v.tid) == which)
                .collect();
            if which != 0 && running.is_empty() {
                return t.fail("pvm_tasks", errors::NO_HOST);
            }
            t.task_strings = running
                .iter()
                .map(|v| CString::new(v.job.clone()).unwrap_or_default())
                .collect();
            t.tasks = running
                .iter()
                .enumerate()
                .map(|(i, v)| TaskInfo {
                    tid: to_c(v.tid),
                    ptid: 0,
                    host: host_of(&v.host),
                    flag: 0,
                    a_out: t.task_strings[i].as_ptr(),
                    pid: v.pid.map_or(0, |p| p as c_int),
                })
                .collect();
            // SAFETY: the caller gives places for the values, or null.
            unsafe {
                if !ntask.is_null() {
                    *ntask = t.tasks.len() as c_int;
                }
                if !taskp.is_null() {
                    *taskp = t.tasks.as_ptr();
                }
            }
            errors::OK
        })
    })
}

/// Is `host` in the virtual machine and up? `PvmOk`, `PvmHostFail` (down)
/// or `PvmNoHost`.
///
/// # Safety
/// `host` a C string.
#[no_mangle]
pub unsafe extern "C" fn pvm_mstat(host: *const c_char) -> c_int {
    crate::ffi::guard(|| {
        if host.is_null() {
            return state::with(|t| t.fail("pvm_mstat", errors::BAD_PARAM));
        }
        // SAFETY: a C string.
        let name = unsafe { CStr::from_ptr(host) }
            .to_string_lossy()
            .into_owned();
        state::with(|t| match t.vm().map(|vm| vm.hosts()) {
            Ok(Ok(hs)) => match hs.iter().find(|h| h.facts.name == name) {
                Some(h) if h.alive => errors::OK,
                Some(_) => errors::HOST_FAIL,
                None => errors::NO_HOST,
            },
            Ok(Err(_)) => t.fail("pvm_mstat", errors::SYS_ERR),
            Err(e) => t.fail("pvm_mstat", e),
        })
    })
}

/// Send a signal to a task, on whichever host it runs (not SIGSTOP or
/// SIGCONT: those are the gang scheduler's).
#[no_mangle]
pub extern "C" fn pvm_sendsig(tid: c_int, signum: c_int) -> c_int {
    crate::ffi::guard(|| {
        let Some(who) = from_c(tid) else {
            return state::with(|t| t.fail("pvm_sendsig", errors::BAD_PARAM));
        };
        if !libmig::msg::signal_ok(signum) {
            return state::with(|t| t.fail("pvm_sendsig", errors::BAD_PARAM));
        }
        state::with(|t| match t.vm().map(|vm| vm.signal(who, signum)) {
            Ok(Ok(())) => errors::OK,
            Ok(Err(_)) => t.fail("pvm_sendsig", errors::NO_TASK),
            Err(e) => t.fail("pvm_sendsig", e),
        })
    })
}

/// Be told of task exits (`PvmTaskExit`) or hosts leaving or joining
/// (`PvmHostDelete`, `PvmHostAdd`), by a message with `msgtag` whose body
/// is the Tid concerned (an int).
///
/// # Safety
/// `tids` holds `cnt` ints for `PvmTaskExit`.
#[no_mangle]
pub unsafe extern "C" fn pvm_notify(
    what: c_int,
    msgtag: c_int,
    cnt: c_int,
    tids: *const c_int,
) -> c_int {
    crate::ffi::guard(|| {
        let kind = what & 0xff;
        if what & 256 != 0 {
            // Cancelling: mig keeps no list to take back; nothing more is asked.
            return errors::OK;
        }
        let mut on = Vec::new();
        match kind {
            1 => {
                if tids.is_null() || cnt < 0 {
                    return state::with(|t| t.fail("pvm_notify", errors::BAD_PARAM));
                }
                for i in 0..cnt as usize {
                    // SAFETY: the caller passes `cnt` ints.
                    let tid = unsafe { *tids.add(i) };
                    match from_c(tid) {
                        Some(t) => on.push(NotifyOn::VpExit(t)),
                        None => return state::with(|t| t.fail("pvm_notify", errors::BAD_PARAM)),
                    }
                }
            }
            2 => on.push(NotifyOn::HostLeave),
            3 => on.push(NotifyOn::HostJoin),
            _ => return state::with(|t| t.fail("pvm_notify", errors::BAD_PARAM)),
        }
        state::with(|t| {
            for o in on {
                match t.vm().map(|vm| vm.notify(o, msgtag)) {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => return t.fail("pvm_notify", errors::SYS_ERR),
                    Err(e) => return t.fail("pvm_notify", e),
                }
            }
            errors::OK
        })
    })
}

/// Set an option; the old value. `PvmRoute`: `PvmRouteDirect` asks for
/// libmig's direct links (VP to VP sockets with the tasks on the same
/// host; through the daemons to the others), anything else for the daemon
/// route. `PvmAutoErr` turns error reports on stderr on or off. The rest
/// are accepted and ignored.
#[no_mangle]
pub extern "C" fn pvm_setopt(what: c_int, val: c_int) -> c_int {
    crate::ffi::guard(|| {
        state::with(|t| match what {
            1 => {
                if let Ok(vm) = t.vm() {
                    vm.set_route(if val == 3 {
                        libmig::Route::Direct
                    } else {
                        libmig::Route::Daemon
                    });
                }
                std::mem::replace(&mut t.route, val)
            }
            3 => std::mem::replace(&mut t.autoerr, val),
            _ => 0,
        })
    })
}

/// An option's value.
#[no_mangle]
pub extern "C" fn pvm_getopt(what: c_int) -> c_int {
    crate::ffi::guard(|| {
        state::with(|t| match what {
            1 => t.route,
            3 => t.autoerr,
            _ => 0,
        })
    })
}

/// Print `msg` and the text of the last error, as PVM does.
///
/// # Safety
/// `msg` null or a C string.
#[no_mangle]
pub unsafe extern "C" fn pvm_perror(msg: *const c_char) -> c_int {
    crate::ffi::guard(|| {
        let m = if msg.is_null() {
            String::new()
        } else {
            // SAFETY: a C string.
            unsafe { CStr::from_ptr(msg) }
                .to_string_lossy()
                .into_owned()
        };
        let me = state::with(|t| t.me());
        match me {
            Some(t) => eprintln!("libpvm [t{t:x}]: {m}"),
            None => eprintln!("libpvm: {m}"),
        }
        errors::OK
    })
}

/// Turn automatic error reports on (1) or off (0); the old setting.
#[no_mangle]
pub extern "C" fn pvm_serror(how: c_int) -> c_int {
    crate::ffi::guard(|| pvm_setopt(3, how))
}

/// Output of children comes to the parent's daemon's log and to `mig
/// spawn --wait`; nothing to set up.
#[no_mangle]
pub extern "C" fn pvm_catchout(_ff: *mut libc::c_void) -> c_int {
    crate::ffi::guard(|| errors::OK)
}

/// The architecture code: 1 for this host's own, else `PvmNotFound`.
///
/// # Safety
/// `arch` a C string.
#[no_mangle]
pub unsafe extern "C" fn pvm_archcode(arch: *const c_char) -> c_int {
    crate::ffi::guard(|| {
        if arch.is_null() {
            return errors::BAD_PARAM;
        }
        1
    })
}

/// Is a task running? `PvmOk` if so, else `PvmNoTask`.
#[no_mangle]
pub extern "C" fn pvm_pstat(tid: c_int) -> c_int {
    crate::ffi::guard(|| {
        let Some(who) = from_c(tid) else {
            return errors::BAD_PARAM;
        };
        state::with(|t| match t.vm().map(|vm| vm.tasks()) {
            Ok(Ok(l)) if l.contains(&who) => errors::OK,
            Ok(_) => errors::NO_TASK,
            Err(e) => t.fail("pvm_pstat", e),
        })
    })
}

/// Sleep `secs` seconds (a helper PVM's examples use).
#[no_mangle]
pub extern "C" fn pvmsleep(secs: c_int) -> c_int {
    crate::ffi::guard(|| {
        std::thread::sleep(std::time::Duration::from_secs(secs.max(0) as u64));
        0
    })
}

/// PVM's internal error report, which some of its examples call: prints
/// `libpvm [tX]: f(): text of n` when automatic reports are on; gives `n`.
///
/// # Safety
/// `f` null or a C string.
#[no_mangle]
pub unsafe extern "C" fn lpvmerr(f: *const c_char, n: c_int) -> c_int {
    crate::ffi::guard(|| {
        let call = if f.is_null() {
            String::from("pvm")
        } else {
            // SAFETY: a C string.
            unsafe { CStr::from_ptr(f) }.to_string_lossy().into_owned()
        };
        state::with(|t| t.fail(&call, n))
    })
}

/// mig's name for an architecture PVM names (`LINUX64`...); mig's own names
/// pass as they are.
fn mig_arch(pvm: &str) -> String {
    match pvm {
        "LINUX64" => "x86_64-linux".into(),
        "LINUX" => "x86-linux".into(),
        "LINUXARM64" | "LINUXAARCH64" => "aarch64-linux".into(),
        other => other.into(),
    }
}

/// The time of day on `host` (a daemon Tid from `pvm_config`) and its
/// difference from this host's clock. mig's gang slicing already needs the
/// hosts' clocks to agree (they switch slots by them), so the difference
/// is 0 and the time is this host's.
///
/// # Safety
/// `clk` and `delta` null or `struct timeval`s.
#[no_mangle]
pub unsafe extern "C" fn pvm_hostsync(
    host: c_int,
    clk: *mut libc::timeval,
    delta: *mut libc::timeval,
) -> c_int {
    crate::ffi::guard(|| {
        // (The hosts are looked up here, not through `pvm_config`, whose list
        // the caller may still hold.)
        let known = state::with(|t| match hosts(t, "pvm_hostsync") {
            Ok(hs) => Ok((0..hs.len()).any(|i| host_tid(i) == host)),
            Err(e) => Err(e),
        });
        match known {
            Ok(true) => {}
            Ok(false) => return state::with(|t| t.fail("pvm_hostsync", errors::NO_HOST)),
            Err(e) => return e,
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        // SAFETY: null or timevals.
        unsafe {
            if let Some(c) = clk.as_mut() {
                c.tv_sec = now.as_secs() as libc::time_t;
                c.tv_usec = now.subsec_micros() as libc::suseconds_t;
            }
            if let Some(d) = delta.as_mut() {
                d.tv_sec = 0;
                d.tv_usec = 0;
            }
        }
        errors::OK
    })
}
