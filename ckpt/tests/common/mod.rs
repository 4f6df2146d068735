//! Helpers of the real-program tests: build our C programs, start a program
//! with its output on a pipe, stop it, move it (dump, kill, restore with a
//! fresh pipe on fd 1), collect what it printed.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::thread::JoinHandle;
use std::time::Duration;

use mig_ckpt::{dump, restore, DumpOptions, ImageFile, RestoreOptions};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// A directory for this test binary's programs and images.
pub fn scratch() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("tempdir"))
        .path()
}

/// Builds `tests/programs/NAME.c` (once) and returns the binary.
pub fn program(name: &str) -> PathBuf {
    static BUILT: OnceLock<std::sync::Mutex<BTreeMap<String, PathBuf>>> = OnceLock::new();
    let built = BUILT.get_or_init(Default::default);
    let mut built = built.lock().expect("lock");
    if let Some(p) = built.get(name) {
        return p.clone();
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/programs/{name}.c"));
    let out = scratch().join(name);
    let st = Command::new("gcc")
        .args(["-O1", "-pthread", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("gcc");
    assert!(st.success(), "gcc {name}");
    built.insert(name.into(), out.clone());
    out
}

/// A running program whose stdout the test reads.
pub struct Running {
    /// The process, our child.
    pub child: Child,
    /// Everything it printed so far, gathered by a thread until EOF.
    reader: Option<JoinHandle<Vec<u8>>>,
    /// Lines read before the gathering thread started.
    head: Vec<u8>,
}

impl Drop for Running {
    /// A test that fails leaves no process behind.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads a pipe to its end in a thread.
fn gather(mut r: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = r.read_to_end(&mut v);
        v
    })
}

impl Running {
    /// Starts `cmd` with stdout on a pipe and waits for its first line.
    pub fn start(mut cmd: Command) -> Running {
        cmd.stdin(Stdio::null());
        Running::start_keep_stdin(cmd)
    }

    /// As [`Running::start`], with the stdin `cmd` has.
    pub fn start_keep_stdin(mut cmd: Command) -> Running {
        // SAFETY: close_range is async-signal-safe and touches only the
        // child's descriptors: those the test runner leaked (a jobserver
        // pipe) must not follow the program, which would then be refused.
        unsafe {
            cmd.pre_exec(|| {
                libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
                Ok(())
            });
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut first = String::new();
        out.read_line(&mut first).expect("first line");
        assert!(!first.is_empty(), "the program printed nothing");
        Running {
            child,
            reader: Some(gather(out)),
            head: first.into_bytes(),
        }
    }

    /// The pid.
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Stops it (SIGSTOP) and waits until it is stopped.
    pub fn stop(&self) {
        stop(self.pid());
    }

    /// Kills it and returns all it printed.
    pub fn kill(mut self) -> Vec<u8> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.output()
    }

    /// Waits for its end: (exit code, all it printed).
    pub fn finish(mut self) -> (i32, Vec<u8>) {
        let st = self.child.wait().expect("wait");
        (st.code().unwrap_or(-1), self.output())
    }

    fn output(&mut self) -> Vec<u8> {
        let mut all = std::mem::take(&mut self.head);
        if let Some(r) = self.reader.take() {
            all.extend(r.join().expect("reader"));
        }
        all
    }
}

/// Stops `pid` and waits for the stop.
pub fn stop(pid: i32) {
    kill(Pid::from_raw(pid), Signal::SIGSTOP).expect("SIGSTOP");
    match waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WUNTRACED)).expect("waitpid") {
        WaitStatus::Stopped(_, _) => {}
        other => panic!("not stopped: {other:?}"),
    }
}

/// The state letter of `pid` in /proc.
pub fn state(pid: i32) -> String {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let after = &s[s.rfind(')').expect(")") + 2..];
    after[..1].to_string()
}

/// What the stdio of a moved process is given anew.
pub fn stdio_options() -> DumpOptions {
    DumpOptions {
        external_fds: [0, 1, 2].into(),
        ..Default::default()
    }
}

/// Dumps the stopped `pid` into a new file under the scratch directory.
pub fn dump_to_file(pid: i32, name: &str) -> PathBuf {
    let path = scratch().join(name);
    let mut f = File::create(&path).expect("create image");
    dump(pid, &stdio_options(), &mut f).expect("dump");
    path
}

/// Restores the image at `path` with stdin /dev/null, stdout a fresh pipe,
/// stderr the test's.
pub fn restore_from(path: &Path) -> Running {
    restore_with_stdin(path, File::open("/dev/null").expect("null").into())
}

/// Restores the image at `path` with stdin `stdin`, stdout a fresh pipe,
/// stderr the test's.
pub fn restore_with_stdin(path: &Path, stdin: OwnedFd) -> Running {
    restore_full(path, stdin, false)
}

/// Restores the image at `path`, left stopped when `stopped`, stdin
/// /dev/null.
pub fn restore_with(path: &Path, stopped: bool) -> Running {
    restore_full(path, File::open("/dev/null").expect("null").into(), stopped)
}

fn restore_full(path: &Path, stdin: OwnedFd, stopped: bool) -> Running {
    let img = ImageFile::open(File::open(path).expect("open image"), true).expect("image");
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
    let null = stdin;
    let err: OwnedFd = std::io::stderr().as_fd_owned();
    let fds = BTreeMap::from([(0, null), (1, w), (2, err)]);
    let restored = restore(
        &img,
        fds,
        &RestoreOptions {
            stopped,
            ..Default::default()
        },
    )
    .expect("restore");
    Running {
        child: restored.child,
        reader: Some(gather(File::from(r))),
        head: Vec::new(),
    }
}

trait AsFdOwned {
    fn as_fd_owned(&self) -> OwnedFd;
}

impl AsFdOwned for std::io::Stderr {
    fn as_fd_owned(&self) -> OwnedFd {
        use std::os::fd::AsFd;
        self.as_fd().try_clone_to_owned().expect("dup stderr")
    }
}

/// Moves a running program once: stop, dump, kill, restore. Returns the
/// restored program and what the original printed.
pub fn move_once(r: Running, name: &str) -> (Running, Vec<u8>) {
    r.stop();
    let img = dump_to_file(r.pid(), name);
    let before = r.kill();
    (restore_from(&img), before)
}

/// Lets a program run a little.
pub fn let_run(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}
