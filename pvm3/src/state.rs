//! The one PVM task this process is: its libmig `Vm`, its message buffers
//! and which are active, its options, and memory handed to C that must
//! outlive the call. Also how a program started from a shell becomes a VP.
//!
//! What does not live here: the C functions (`task`, `pack`, `message`,
//! `group`), the buffers' layout (`buffer`).

use std::collections::HashMap;
use std::ffi::{CString, OsString};
use std::os::raw::c_int;
use std::os::unix::process::CommandExt;
use std::sync::{Mutex, MutexGuard};

use libmig::{MigError, Tid, Vm};

use crate::buffer::{Buffer, Encoding};
use crate::errors;

/// Set in the environment of a program this library started again under
/// `mig spawn`, so that it never does so twice.
pub const ENROLLED: &str = "LIBPVM_ENROLLED";

/// The tag of the message a PVM task sends each child it spawns, holding
/// the context the child starts in (PVM's children inherit their parent's
/// context). Negative: no PVM program can send or receive it.
pub const INHERIT_TAG: i32 = -0x5056;

/// How long a spawned task waits for its parent's context message (a
/// parent that is not a PVM task sends none).
const INHERIT_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The context a task spawned by a PVM task starts in (0 for others).
fn inherited_context(vm: &mut Vm) -> i32 {
    let Some(parent) = vm.parent() else {
        return 0;
    };
    match vm.recv_timeout(Some(parent), Some(INHERIT_TAG), INHERIT_WAIT) {
        Ok(Some(m)) => m
            .data
            .get(..4)
            .and_then(|b| b.try_into().ok())
            .map_or(0, i32::from_be_bytes),
        _ => 0,
    }
}

/// What a C program's image holds (`mig.h`): its context and the bytes of
/// each region it registered.
pub type Saved = (i32, Vec<serde_bytes::ByteBuf>);

/// Variables a re-started program keeps (the library's own path first).
const KEEP_ENV: &[&str] = &[
    "LD_LIBRARY_PATH",
    "PVM_ROOT",
    "PVM_ARCH",
    "PVM_EP",
    "PVM_EXPORT",
];

/// The task's state.
pub struct Task {
    vm: Option<Vm>,
    exited: bool,
    bufs: HashMap<i32, Buffer>,
    next_buf: i32,
    /// The active send and receive buffers (0: none).
    pub sbuf: i32,
    /// See `sbuf`.
    pub rbuf: i32,
    /// `PvmAutoErr`: report failed calls on stderr.
    pub autoerr: i32,
    /// `PvmRoute`, as set (mig chooses the route itself).
    pub route: i32,
    /// Groups joined, with the instance got.
    pub groups: HashMap<String, i32>,
    /// The current message context (`pvm_setcontext`) and the last one
    /// made (`pvm_newcontext`).
    pub context: i32,
    /// See `context`.
    pub last_context: i32,
    /// Message handlers (`pvm_addmhf`), by id.
    pub handlers: Vec<Handler>,
    /// The last handler id given.
    pub last_handler: i32,
    /// Memory handed to C by `pvm_siblings`, `pvm_config`, `pvm_tasks`:
    /// kept until the next such call, as PVM does.
    pub siblings: Vec<i32>,
    /// See `siblings`.
    pub host_strings: Vec<CString>,
    /// See `siblings`.
    pub hosts: Vec<HostInfo>,
    /// See `siblings`.
    pub task_strings: Vec<CString>,
    /// See `siblings`.
    pub tasks: Vec<TaskInfo>,
    /// See `siblings` (`pvm_getmboxinfo`).
    pub mbox_names: Vec<CString>,
    /// See `mbox_names`: per class, its indices, owners and flags.
    pub mbox_ints: Vec<Vec<c_int>>,
    /// See `mbox_names`.
    pub mbox: Vec<MboxInfo>,
    /// Memory that makes up the state (`mig_register`): address, length.
    pub regions: Vec<(usize, usize)>,
    /// The host `pvmfconfig` gives next.
    pub config_next: usize,
    /// See `siblings` (`pvm_getfds`).
    pub fds: Vec<c_int>,
    /// A matching function of the program's own (`pvm_recvf`).
    pub matcher: Option<MatchFn>,
}

/// A message handler's C function: it gets the id of the buffer holding
/// the message.
pub type HandlerFn = unsafe extern "C" fn(c_int) -> c_int;

/// A matching function (`pvm_recvf`): given a message's buffer and the
/// receive's sender and tag, 0 to pass it by, more to take it (the highest
/// wins), less for an error.
pub type MatchFn = unsafe extern "C" fn(c_int, c_int, c_int) -> c_int;

/// A message handler: messages it matches are given to `func` as they are
/// received, never to a receive.
#[derive(Debug, Clone, Copy)]
pub struct Handler {
    /// Its id.
    pub id: i32,
    /// Sender, tag and context it takes (`None`: any).
    pub src: Option<Tid>,
    /// See `src`.
    pub tag: Option<i32>,
    /// See `src`.
    pub ctx: Option<i32>,
    /// What it calls.
    pub func: HandlerFn,
}

/// `struct pvmhostinfo`.
#[repr(C)]
#[derive(Debug)]
pub struct HostInfo {
    /// The host's daemon, as a Tid.
    pub tid: i32,
    /// Its name (memory in `Task::host_strings`).
    pub name: *const libc::c_char,
    /// Its architecture (likewise).
    pub arch: *const libc::c_char,
    /// Relative speed (1000 for a processor of capacity 1).
    pub speed: i32,
    /// Data signature (0x408841 on x86_64 Linux, as PVM's).
    pub dsig: i32,
}

// SAFETY: the pointers point into `Task::host_strings`, owned beside them
// and only read by C between calls; the task lives behind a mutex.
unsafe impl Send for HostInfo {}

/// `struct pvmtaskinfo`.
#[repr(C)]
#[derive(Debug)]
pub struct TaskInfo {
    /// The task.
    pub tid: i32,
    /// Its parent (0: not known).
    pub ptid: i32,
    /// Its host's daemon Tid.
    pub host: i32,
    /// Status flags (none).
    pub flag: i32,
    /// Its job's name (memory in `Task::task_strings`).
    pub a_out: *const libc::c_char,
    /// Its process id on its host.
    pub pid: i32,
}

// SAFETY: as for `HostInfo`.
unsafe impl Send for TaskInfo {}

/// `struct pvmmboxinfo`.
#[repr(C)]
#[derive(Debug)]
pub struct MboxInfo {
    /// The class's name (memory in `Task::mbox_names`).
    pub name: *const libc::c_char,
    /// How many entries.
    pub nentries: c_int,
    /// Their indices (memory in `Task::mbox_ints`).
    pub indices: *const c_int,
    /// Their owners.
    pub owners: *const c_int,
    /// Their flags.
    pub flags: *const c_int,
}

// SAFETY: as for `HostInfo`.
unsafe impl Send for MboxInfo {}

static TASK: Mutex<Option<Task>> = Mutex::new(None);

/// The task, created on first use.
pub fn task() -> MutexGuard<'static, Option<Task>> {
    let mut g = TASK.lock().unwrap_or_else(|e| e.into_inner());
    if g.is_none() {
        *g = Some(Task {
            vm: None,
            exited: false,
            bufs: HashMap::new(),
            next_buf: 1,
            sbuf: 0,
            rbuf: 0,
            autoerr: 1,
            route: 1,
            groups: HashMap::new(),
            context: 0,
            last_context: 0,
            handlers: Vec::new(),
            last_handler: 0,
            siblings: Vec::new(),
            host_strings: Vec::new(),
            hosts: Vec::new(),
            task_strings: Vec::new(),
            tasks: Vec::new(),
            mbox_names: Vec::new(),
            mbox_ints: Vec::new(),
            mbox: Vec::new(),
            regions: Vec::new(),
            config_next: 0,
            fds: Vec::new(),
            matcher: None,
        });
    }
    g
}

/// Run `f` on the task.
pub fn with<R>(f: impl FnOnce(&mut Task) -> R) -> R {
    let mut g = task();
    // (`task` fills it.)
    let t = g.as_mut().unwrap_or_else(|| unreachable!());
    #[cfg(test)]
    if PANIC_IN_NEXT_CALL.with(|p| p.replace(false)) {
        panic!("a bug inside the call, made by a test");
    }
    f(t)
}

#[cfg(test)]
thread_local! {
    /// Set by a test: the next `with` on this thread panics while it holds
    /// the task, as a bug of ours inside a C entry would.
    pub static PANIC_IN_NEXT_CALL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A Tid as PVM shows it (mig's Tids are small: `0x40001`).
pub fn to_c(t: Tid) -> i32 {
    i32::try_from(t).unwrap_or(i32::MAX)
}

/// A Tid from C: -1 (or any negative) is "any".
pub fn from_c(t: i32) -> Option<Tid> {
    u64::try_from(t).ok()
}

impl Task {
    /// The VM, enrolling first if need be: a program started by mig is a
    /// VP already; one started from a shell is started again as a job of
    /// one VP (`mig spawn -n 1 --wait`), which takes its place. Errors are
    /// PVM codes.
    pub fn vm(&mut self) -> Result<&mut Vm, i32> {
        if self.exited {
            return Err(errors::SYS_ERR);
        }
        if self.vm.is_none() {
            match Vm::init() {
                Ok(mut vm) => {
                    self.context = inherited_context(&mut vm);
                    self.vm = Some(vm);
                }
                Err(MigError::NotAVp(_)) if std::env::var_os(ENROLLED).is_none() => {
                    let e = enrol_again();
                    eprintln!("libpvm: cannot start this program under mig: {e}");
                    return Err(errors::SYS_ERR);
                }
                Err(e) => {
                    eprintln!("libpvm: {e}");
                    return Err(errors::SYS_ERR);
                }
            }
        }
        self.vm.as_mut().ok_or(errors::SYS_ERR)
    }

    /// Enrol through libmig's `init_or_restore` (`mig_start`): the saved
    /// regions if this VP was restarted. Errors are PVM codes.
    pub fn start_restoring(&mut self) -> Result<Option<Vec<serde_bytes::ByteBuf>>, i32> {
        if self.vm.is_some() || self.exited {
            eprintln!("libpvm: mig_start: call it once, before any PVM call");
            return Err(errors::SYS_ERR);
        }
        match Vm::init_or_restore::<Saved>(|| (0, Vec::new())) {
            Ok((mut vm, (context, regions))) => {
                let restored = vm.restored();
                self.context = if restored {
                    context
                } else {
                    inherited_context(&mut vm)
                };
                self.vm = Some(vm);
                Ok(restored.then_some(regions))
            }
            Err(MigError::NotAVp(_)) if std::env::var_os(ENROLLED).is_none() => {
                let e = enrol_again();
                eprintln!("libpvm: cannot start this program under mig: {e}");
                Err(errors::SYS_ERR)
            }
            Err(e) => {
                eprintln!("libpvm: {e}");
                Err(errors::SYS_ERR)
            }
        }
    }

    /// This task's Tid if enrolled.
    pub fn me(&self) -> Option<Tid> {
        self.vm.as_ref().map(|v| v.tid())
    }

    /// Leave the VM (`pvm_exit`).
    pub fn exit(&mut self) {
        if let Some(vm) = self.vm.take() {
            vm.exit();
        }
        self.exited = true;
    }

    /// A new empty buffer; its id.
    pub fn make(&mut self, enc: Encoding) -> i32 {
        self.insert(Buffer::new(enc))
    }

    /// Keep `b`; its id.
    pub fn insert(&mut self, b: Buffer) -> i32 {
        let id = self.next_buf;
        self.next_buf = self.next_buf.checked_add(1).unwrap_or(1);
        self.bufs.insert(id, b);
        id
    }

    /// A buffer by id.
    pub fn buf(&mut self, id: i32) -> Option<&mut Buffer> {
        self.bufs.get_mut(&id)
    }

    /// Take a buffer out of the table (to send it while the VM is
    /// borrowed); `put_buf` gives it back.
    pub fn take_buf(&mut self, id: i32) -> Option<Buffer> {
        self.bufs.remove(&id)
    }

    /// Give back a buffer `take_buf` took.
    pub fn put_buf(&mut self, id: i32, b: Buffer) {
        self.bufs.insert(id, b);
    }

    /// Free a buffer (it stops being active).
    pub fn free(&mut self, id: i32) -> bool {
        if self.sbuf == id {
            self.sbuf = 0;
        }
        if self.rbuf == id {
            self.rbuf = 0;
        }
        self.bufs.remove(&id).is_some()
    }

    /// Report a failed call as PVM does, when asked to.
    pub fn fail(&self, call: &str, code: i32) -> i32 {
        if code < 0 && self.autoerr != 0 {
            eprintln!("{}", errors::report_line(self.me(), call, code));
        }
        code
    }
}

/// Start this program again under `mig spawn -n 1 --wait --bare` (it
/// returns only on failure). The copy started prints again what this one
/// printed before its first PVM call, so what C's stdio still holds of
/// that is dropped, not written (lines already on a terminal show twice).
fn enrol_again() -> std::io::Error {
    extern "C" {
        static mut stdout: *mut libc::FILE;
        fn __fpurge(stream: *mut libc::FILE);
    }
    // SAFETY: glibc's `stdout` is valid for the process's life; __fpurge
    // discards its buffer.
    unsafe { __fpurge(stdout) };
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return e,
    };
    let mig = std::env::var_os("MIG_BIN").unwrap_or_else(|| OsString::from("mig"));
    let mut cmd = std::process::Command::new(mig);
    cmd.args(["spawn", "-n", "1", "--wait", "--bare"]);
    for k in KEEP_ENV {
        if let Ok(v) = std::env::var(k) {
            cmd.arg("-e").arg(format!("{k}={v}"));
        }
    }
    cmd.arg("-e").arg(format!("{ENROLLED}=1"));
    cmd.arg("--").arg(exe).args(std::env::args_os().skip(1));
    cmd.exec()
}
