//! Test fixtures: real `migd` processes on 127.0.0.1 with ports from the OS
//! and their own state directories, readiness by reading the printed
//! address, conditions polled up to a deadline, and every child killed when
//! the fixture drops.
//!
//! The binaries are those `cargo test --workspace` builds next to the test
//! executable (`target/<profile>/migd`, `mig`, and the examples).
//!
//! Nothing a test starts outlives it: every process is started through
//! [`command`] (its own process group, killed by the kernel when the test's
//! thread ends, even if the test binary is killed), VPs die with their
//! daemon, and a virtual machine that has not been dropped after its
//! deadline ([`deadline`]) prints its daemons' logs and kills them, so the
//! test fails with the logs instead of hanging.

pub mod floor;

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// A binary of the workspace.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target directory");
    let p = dir.join(name);
    assert!(
        p.is_file(),
        "{} not built: run the tests with `cargo test --workspace`",
        p.display()
    );
    p
}

/// A command for a workspace binary, tied to the test: in its own process
/// group, and killed by the kernel (`PR_SET_PDEATHSIG`) when the thread that
/// started it ends, so nothing is left behind even when the test binary
/// is killed.
pub fn command(name: &str) -> Command {
    tied(Command::new(bin(name)))
}

/// `cmd`, tied to the test as [`command`] says.
pub fn tied(mut cmd: Command) -> Command {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    cmd.process_group(0);
    cmd
}

/// How long a test's virtual machine may live: `MIG_TEST_DEADLINE_S`
/// seconds, 240 by default (a test takes seconds; under heavy load, a
/// minute at most).
pub fn deadline() -> Duration {
    let s = std::env::var("MIG_TEST_DEADLINE_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(240);
    Duration::from_secs(s)
}

/// Watches a virtual machine: past the deadline it prints every daemon's
/// log and kills the daemons (a test waiting on them then fails); if the
/// test is still not done 30 s later, it ends the test binary.
struct Watchdog(Arc<(Mutex<bool>, Condvar)>);

impl Watchdog {
    fn start(dir: PathBuf, what: String, limit: Duration) -> Watchdog {
        let done = Arc::new((Mutex::new(false), Condvar::new()));
        let d = Arc::clone(&done);
        std::thread::spawn(move || {
            let wait = |limit: Duration| {
                let (lock, cv) = &*d;
                let guard = lock.lock().unwrap_or_else(|e| e.into_inner());
                let (guard, _) = cv
                    .wait_timeout_while(guard, limit, |done| !*done)
                    .unwrap_or_else(|e| e.into_inner());
                *guard
            };
            if wait(limit) {
                return;
            }
            eprintln!(
                "\n=== {what}: still running after {} s: its daemons' logs, then they are killed ===",
                limit.as_secs()
            );
            // First what is unfinished and how each log ends (a report
            // cut short keeps its beginning), then the logs whole.
            eprintln!("--- mig ps (through h0) ---\n{}", ps_of(&dir));
            let all = logs(&dir);
            for (name, log) in &all {
                let lines: Vec<&str> = log.lines().collect();
                let tail = lines[lines.len().saturating_sub(12)..].join("\n");
                eprintln!("--- {name}: its last lines ---\n{tail}");
            }
            for (name, log) in all {
                eprintln!("--- {name} ---\n{log}");
            }
            kill_daemons_of(&dir);
            if wait(Duration::from_secs(30)) {
                return;
            }
            eprintln!("=== {what}: the test is still not done: ending the test binary ===");
            std::process::exit(101);
        });
        Watchdog(done)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        let (lock, cv) = &*self.0;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
    }
}

/// What `mig ps` says through the daemon of `dir/h0`, within 5 s.
fn ps_of(dir: &Path) -> String {
    let child = command("mig")
        .env("MIG_DAEMON", dir.join("h0").join("control.sock"))
        .arg("ps")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        return "(mig ps did not start)".into();
    };
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        if let Ok(Some(_)) = child.try_wait() {
            return child.wait_with_output().map_or_else(
                |e| format!("(mig ps: {e})"),
                |o| {
                    format!(
                        "{}{}",
                        String::from_utf8_lossy(&o.stdout),
                        String::from_utf8_lossy(&o.stderr)
                    )
                },
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    "(mig ps did not answer within 5 s)".into()
}

/// Every `hK/migd.log` under `dir`, by host.
fn logs(dir: &Path) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let log = std::fs::read_to_string(e.path().join("migd.log")).ok()?;
            Some((e.file_name().to_string_lossy().into_owned(), log))
        })
        .collect();
    v.sort();
    v
}

/// SIGKILL every process whose command line names a state directory under
/// `dir` (the daemons; their VPs die with them).
fn kill_daemons_of(dir: &Path) {
    let needle = dir.as_os_str().as_encoded_bytes().to_vec();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if cmdline
            .windows(needle.len())
            .any(|w| w == needle.as_slice())
        {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Is this bench binary asked to measure? `cargo test` runs benches
/// without `--bench`, and they then do nothing.
pub fn bench_requested() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// The number in environment variable `name` (a bench's setting), else
/// `default`.
pub fn env_num<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Poll `f` every 5 ms until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    f()
}

/// Is a process alive (and not a zombie)?
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next())
            .is_some_and(|st| st != "Z"),
        Err(_) => false,
    }
}

/// The lines a job printed (`mig spawn --wait` prefixes each with
/// `[tTID HOST] `), without the prefix.
pub fn job_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| match l.split_once("] ") {
            Some((_, rest)) if l.starts_with("[t") => rest.to_string(),
            _ => l.to_string(),
        })
        .collect()
}

/// Wait for a `mig spawn --wait` job: it must succeed (else the panic shows
/// its output, its errors and `context`); the lines it printed.
pub fn job_succeeds(job: Child, context: &str) -> Vec<String> {
    let out = job.wait_with_output().expect("job");
    let lines = job_lines(&out);
    assert!(
        out.status.success(),
        "{lines:?}\n{}\n{context}",
        String::from_utf8_lossy(&out.stderr)
    );
    lines
}

/// Peak resident memory of a process in MiB (`VmHWM`).
pub fn peak_rss_mib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = s
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / 1024)
}

/// A local virtual machine of real daemons.
pub struct Vm {
    /// The daemons, master first (None once killed or reaped).
    pub daemons: Vec<Option<Child>>,
    /// The master's TCP address.
    pub addr: String,
    /// Fails the test with the logs if it runs past its deadline.
    _watchdog: Watchdog,
    /// Its state directory (removed on drop, after the daemons end).
    pub dir: tempfile::TempDir,
    /// Each daemon on a loopback address of its own, `127.A.B.(i+1)`
    /// (see `start_apart`); else all on 127.0.0.1.
    apart: Option<[u8; 2]>,
    /// Small file systems mounted as hosts' state directories (unmounted
    /// on drop, after the daemons end).
    mounts: Vec<Tmpfs>,
}

impl Vm {
    /// Start `n` daemons with one processor each.
    pub fn start(n: usize) -> Vm {
        Vm::start_with(n, &[])
    }

    /// Start `n` daemons, each with extra flags.
    pub fn start_with(n: usize, extra: &[&str]) -> Vm {
        Vm::start_procs(n, 1, extra)
    }

    /// Start `n` daemons of `procs` processors each, with extra flags.
    pub fn start_procs(n: usize, procs: u32, extra: &[&str]) -> Vm {
        Vm::start_until(n, procs, extra, deadline())
    }

    /// Start `n` daemons that read the config file `toml` (its text).
    pub fn start_config(n: usize, toml: &str) -> Vm {
        Vm::start_full(n, 1, &[], Some(toml), deadline(), false, &[])
    }

    /// `start_config` with `procs` processors each.
    pub fn start_procs_config(n: usize, procs: u32, toml: &str) -> Vm {
        Vm::start_full(n, procs, &[], Some(toml), deadline(), false, &[])
    }

    /// `start_config`, each daemon on a loopback address of its own
    /// (`ip(i)`; it dials other daemons from it too), so that a test can
    /// cut one daemon off from the others (`Partition`). The addresses
    /// are picked from this test process's id: another test machine on
    /// this computer is unlikely to use them.
    pub fn start_apart(n: usize, toml: &str) -> Vm {
        assert!(n < 254, "at most 253 daemons apart");
        Vm::start_full(n, 1, &[], Some(toml), deadline(), true, &[])
    }

    /// Daemon `i`'s IP address.
    pub fn ip(&self, i: usize) -> String {
        match self.apart {
            Some([a, b]) => format!("127.{a}.{b}.{}", i + 1),
            None => "127.0.0.1".into(),
        }
    }

    /// Start `n` daemons that read the config file `toml`, host `i`'s
    /// state directory a tmpfs of `size` (`mount -o size=`) for each
    /// `(i, size)` of `small`: a test of full disks. Needs root.
    pub fn start_small_disks(n: usize, toml: &str, small: &[(usize, &str)]) -> Vm {
        Vm::start_full(n, 1, &[], Some(toml), deadline(), false, small)
    }

    /// `start_procs`, failing the test if the machine is not dropped within
    /// `limit`.
    pub fn start_until(n: usize, procs: u32, extra: &[&str], limit: Duration) -> Vm {
        Vm::start_full(n, procs, extra, None, limit, false, &[])
    }

    fn start_full(
        n: usize,
        procs: u32,
        extra: &[&str],
        toml: Option<&str>,
        limit: Duration,
        apart: bool,
        small: &[(usize, &str)],
    ) -> Vm {
        let procs = procs.to_string();
        let mut flags = vec!["--processors", procs.as_str()];
        flags.extend_from_slice(extra);
        let dir = tempfile::tempdir().expect("temp dir");
        let conf = dir.path().join("migd.toml");
        if let Some(text) = toml {
            std::fs::write(&conf, text).expect("config file");
            flags.extend(["--config", conf.to_str().expect("utf-8 path")]);
        }
        // A VP resumed for a move on a reclaimed host runs in the idle
        // class: on a machine loaded by other work (other tests) it needs
        // more than the default second to reach its safe point.
        let given = toml.is_some_and(|t| t.contains("safe_point_timeout_ms"))
            || extra
                .iter()
                .any(|a| *a == "--config" || *a == "--safe-point-timeout-ms");
        if !given {
            flags.extend(["--safe-point-timeout-ms", "5000"]);
        }
        let extra = &flags[..];
        let what = std::thread::current()
            .name()
            .unwrap_or("a test")
            .to_string();
        let pid = std::process::id();
        let mut vm = Vm {
            _watchdog: Watchdog::start(dir.path().to_path_buf(), what, limit),
            dir,
            daemons: Vec::new(),
            addr: String::new(),
            apart: apart.then_some([64 + (pid % 128) as u8, (pid / 128 % 256) as u8]),
            mounts: Vec::new(),
        };
        for &(i, size) in small {
            let state = vm.dir.path().join(format!("h{i}"));
            vm.mounts.push(Tmpfs::mount(&state, size));
        }
        let (c, addr) = vm.daemon(0, None, extra);
        vm.daemons.push(Some(c));
        vm.addr = addr.clone();
        for i in 1..n {
            let (c, _) = vm.daemon(i, Some(&addr), extra);
            vm.daemons.push(Some(c));
        }
        vm
    }

    /// The key file every daemon of this machine uses.
    pub fn key(&self) -> PathBuf {
        self.dir.path().join("cluster.key")
    }

    /// Start daemon `i` (joining `join`) and wait until it prints its address.
    pub fn daemon(&self, i: usize, join: Option<&str>, extra: &[&str]) -> (Child, String) {
        let cmd = self.daemon_command(i, join, extra);
        self.spawn_daemon(i, cmd)
    }

    /// `daemon`, in a mount namespace of its own where each `(file, over)`
    /// of `binds` is bind-mounted over `over`: a host whose files differ
    /// from the others' (another program at the same path, say). Needs
    /// root.
    pub fn daemon_seeing(
        &self,
        i: usize,
        join: Option<&str>,
        extra: &[&str],
        binds: &[(&Path, &Path)],
    ) -> (Child, String) {
        let inner = self.daemon_command(i, join, extra);
        let mut script = String::new();
        for n in 0..binds.len() {
            script += &format!(
                "mount --bind \"${{{}}}\" \"${{{}}}\" || exit 1; ",
                2 * n + 1,
                2 * n + 2
            );
        }
        script += &format!("shift {}; exec \"$@\"", 2 * binds.len());
        let mut cmd = tied(Command::new("unshare"));
        cmd.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg(script)
            .arg("sh");
        for (file, over) in binds {
            cmd.arg(file).arg(over);
        }
        cmd.arg(inner.get_program()).args(inner.get_args());
        for (k, v) in inner.get_envs() {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        self.spawn_daemon(i, cmd)
    }

    /// The command that starts daemon `i` (joining `join`).
    fn daemon_command(&self, i: usize, join: Option<&str>, extra: &[&str]) -> Command {
        let state = self.dir.path().join(format!("h{i}"));
        std::fs::create_dir_all(&state).expect("state dir");
        let mut cmd = command("migd");
        // The test's settings only, not this machine's config files.
        cmd.env("MIG_CONFIG", "none");
        let procs = if extra.contains(&"--processors") {
            &[][..]
        } else {
            &["--processors", "1"][..]
        };
        // VPs at the priority of other programs: a test on a loaded machine
        // (other work beside it) checks what mig does, not how little CPU
        // a VP of niceness 10 gets there.
        let nice = if extra.contains(&"--vp-nice") {
            &[][..]
        } else {
            &["--vp-nice", "0"][..]
        };
        // Daemons sharing this machine: no owner's load unless a test says whose.
        let scope = if extra.contains(&"--owner-scope") {
            &[][..]
        } else {
            &["--owner-scope", "none"][..]
        };
        let capacity = if extra.contains(&"--capacity") {
            &[][..]
        } else {
            &["--capacity", "1"][..]
        };
        cmd.arg("--listen")
            .arg(format!("{}:0", self.ip(i)))
            .args(procs)
            .args(nice)
            .args(scope)
            .args(capacity)
            .arg("--name")
            .arg(format!("h{i}"))
            .arg("--state-dir")
            .arg(&state)
            .arg("--key-file")
            .arg(self.key())
            .args(extra);
        if let Some(a) = join {
            cmd.arg("--join").arg(a);
        }
        cmd
    }

    /// Start daemon `i` by `cmd`, its log in its state directory, and wait
    /// until it prints its address.
    fn spawn_daemon(&self, i: usize, mut cmd: Command) -> (Child, String) {
        let state = self.dir.path().join(format!("h{i}"));
        let log = std::fs::File::create(state.join("migd.log")).expect("log");
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log));
        let mut child = cmd.spawn().expect("start migd");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read address");
        assert!(
            !line.trim().is_empty(),
            "migd h{i} did not start:\n{}",
            self.log(i)
        );
        (child, line.trim().to_string())
    }

    /// The master's control socket.
    pub fn sock(&self) -> PathBuf {
        self.dir.path().join("h0").join("control.sock")
    }

    /// Daemon `i`'s log so far.
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("h{i}")).join("migd.log"))
            .unwrap_or_default()
    }

    /// Run `mig` against this machine and insist that it succeeds (failing
    /// with its stderr and the master's log).
    pub fn mig_ok(&self, args: &[&str]) -> Output {
        let out = self.mig(args);
        assert!(
            out.status.success(),
            "mig {}: {}\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr),
            self.log(0)
        );
        out
    }

    /// Run `mig` against this machine.
    pub fn mig(&self, args: &[&str]) -> Output {
        let out = command("mig")
            .env("MIG_DAEMON", self.sock())
            .args(args)
            .output()
            .expect("run mig");
        say_if_unanswered(args, &out, || self.hang_report());
        out
    }

    /// Each live daemon's threads' stacks (when gdb is installed) and its
    /// log: what a test prints when a daemon stops answering.
    pub fn hang_report(&self) -> String {
        let mut out = String::new();
        for (i, d) in self.daemons.iter().enumerate() {
            let Some(child) = d else { continue };
            out += &daemon_report(&format!("h{i}"), child.id(), &self.log(i));
        }
        out
    }

    /// Spawn `n` VPs of `/bin/true` through the master and wait for the
    /// job's end: milliseconds from the request to the `JobDone` reply.
    pub fn spawn_true_ms(&self, n: u32) -> f64 {
        use libmig::msg::{Request, Response, SpawnSpec};
        let mut c = libmig::control::Client::connect(&self.sock()).expect("connect");
        let spec = SpawnSpec::new("/bin/true", Vec::new()).n(n).wait(true);
        let t = Instant::now();
        c.send(&Request::Spawn(spec)).expect("send");
        loop {
            match c.recv(None).expect("reply") {
                Response::JobDone { status, .. } => {
                    assert_eq!(status, 0);
                    return t.elapsed().as_secs_f64() * 1e3;
                }
                Response::Error { message } => panic!("{message}"),
                _ => {}
            }
        }
    }

    /// Daemon `i`'s control socket.
    pub fn sock_of(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("h{i}")).join("control.sock")
    }

    /// What `job`'s VPs have printed so far (`mig logs JOB`: the output the
    /// master keeps; its log no longer holds it).
    pub fn output(&self, job: &str) -> String {
        String::from_utf8_lossy(&self.mig(&["logs", job]).stdout).into_owned()
    }

    /// Run `mig` through daemon `i` (any daemon forwards to the master).
    pub fn mig_at(&self, i: usize, args: &[&str]) -> Output {
        command("mig")
            .env("MIG_DAEMON", self.sock_of(i))
            .args(args)
            .output()
            .expect("run mig")
    }

    /// `mig migrate TID --to HOST --no-wait` (back once the move has begun),
    /// again for up to 10 s while the VP has not yet said that it can be
    /// moved (it says so as libmig starts, a moment after the VP shows as
    /// running).
    pub fn migrate(&self, tid: &str, to: &str) -> Output {
        let t = Instant::now();
        loop {
            let out = self.mig(&["migrate", tid, "--to", to, "--no-wait"]);
            let early = String::from_utf8_lossy(&out.stderr).contains("has not said it can");
            if !early || t.elapsed() > Duration::from_secs(10) {
                return out;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Run `mig ... --json` and parse its stdout.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut a = args.to_vec();
        a.push("--json");
        let out = self.mig(&a);
        assert!(
            out.status.success(),
            "mig {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("JSON")
    }

    /// `mig spawn -n N --wait -- PROGRAM ARGS...` in the background, its
    /// output piped.
    pub fn start_job<A: AsRef<std::ffi::OsStr>>(
        &self,
        n: u32,
        program: &Path,
        args: &[A],
    ) -> Child {
        command("mig")
            .env("MIG_DAEMON", self.sock())
            .args(["spawn", "-n", &n.to_string(), "--wait", "--"])
            .arg(program)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("mig spawn")
    }

    /// (host, state) of VP `tid` as `mig ps --json` shows it.
    pub fn where_is(&self, tid: &str) -> Option<(String, String)> {
        let ps = self.json(&["ps"]);
        ps.as_array()?.iter().find_map(|v| {
            (v["tid"].as_str()? == tid).then(|| {
                (
                    v["host"].as_str().unwrap_or("").to_string(),
                    v["state"].as_str().unwrap_or("").to_string(),
                )
            })
        })
    }

    /// `mig hosts --json` through daemon `i`, if it answers.
    pub fn hosts_at(&self, i: usize) -> Option<Vec<serde_json::Value>> {
        let out = self.mig_at(i, &["hosts", "--json"]);
        if !out.status.success() {
            return None;
        }
        serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .ok()?
            .as_array()
            .cloned()
    }

    /// The master's daemon index, as daemon `i` knows it.
    pub fn master_seen_by(&self, i: usize) -> Option<usize> {
        let hosts = self.hosts_at(i)?;
        let m = hosts.iter().find(|h| h["master"] == true)?;
        let name = m["name"].as_str()?;
        // Daemon i was started as "h{i}"; a restarted one may carry a suffix.
        name.trim_start_matches('h').split('-').next()?.parse().ok()
    }

    /// Every daemon's log, one after another.
    pub fn all_logs(&self) -> String {
        (0..self.daemons.len())
            .map(|i| self.log(i))
            .collect::<Vec<_>>()
            .join("\n-----\n")
    }

    /// Pid of daemon `i`.
    pub fn pid(&self, i: usize) -> u32 {
        self.daemons[i]
            .as_ref()
            .map(Child::id)
            .expect("daemon running")
    }

    /// Send `sig` to daemon `i`.
    pub fn signal(&mut self, i: usize, sig: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.pid(i) as i32);
        nix::sys::signal::kill(pid, sig).expect("signal");
    }

    /// Wait for daemon `i` to exit; its status.
    pub fn wait(&mut self, i: usize, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(c) = self.daemons[i].as_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    self.daemons[i] = None;
                    return Some(st);
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        for c in self.daemons.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.mounts.clear();
    }
}

/// A tmpfs mounted at a directory (as a host's small state directory),
/// unmounted when dropped. Mounting needs root: without it the test fails
/// saying so.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mount a tmpfs of `size` (`30m`) at `dir`, private to its owner.
    pub fn mount(dir: &Path, size: &str) -> Tmpfs {
        // SAFETY: a plain system call.
        let root = unsafe { libc::geteuid() } == 0;
        assert!(
            root,
            "this test needs root: it mounts a {size} tmpfs as a host's state directory to fill \
             it (run it as root, as CI does)"
        );
        std::fs::create_dir_all(dir).expect("mount point");
        let ok = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "mount -t tmpfs on {} failed", dir.display());
        Tmpfs(dir.to_path_buf())
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // (Lazily: whatever still has it open lets go of it when it ends.)
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// An owner's desk: a shell whose process tree is the owner's (a daemon
/// started with `--owner-scope tree:PID` of it counts its load), to start
/// and stop programs in. Dropped, it ends with all it started.
pub struct Desk(Child);

impl Desk {
    /// A shell reading commands from a pipe, in its own process group.
    pub fn open() -> Desk {
        Desk(
            tied(Command::new("sh"))
                .arg("-s")
                .stdin(Stdio::piped())
                .spawn()
                .expect("sh"),
        )
    }

    /// Its pid (the root of the owner's tree).
    pub fn pid(&self) -> u32 {
        self.0.id()
    }

    /// Type a command line at it.
    pub fn type_line(&mut self, line: &str) {
        use std::io::Write;
        let stdin = self.0.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{line}").expect("type");
        stdin.flush().expect("flush");
    }
}

impl Drop for Desk {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.0.wait();
    }
}

/// Every live process (not a zombie) whose environment has all of `vars`
/// (`NAME=value`): a VP's processes, children that left its process group
/// included, carry its `MIG_*` variables.
pub fn processes_with(vars: &[String]) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| {
            let Ok(env) = std::fs::read(format!("/proc/{p}/environ")) else {
                return false;
            };
            let entries: Vec<&[u8]> = env.split(|&b| b == 0).collect();
            vars.iter().all(|v| entries.contains(&v.as_bytes()))
        })
        .filter(|&p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| s.rfind(')').map(|i| s[i + 1..].trim_start().to_string()))
                .is_some_and(|rest| !rest.starts_with('Z') && !rest.starts_with('X'))
        })
        .collect()
}

impl Vm {
    /// The processes of job `job`'s VPs on host `host` of this machine.
    pub fn job_processes(&self, job: &str, host: &str) -> Vec<u32> {
        let socket = self.dir.path().join(host).join("control.sock");
        processes_with(&[
            format!("MIG_JOB={job}"),
            format!("MIG_HOST={host}"),
            format!("MIG_SOCKET={}", socket.display()),
        ])
    }
}

/// CPU ticks (user + system) a process has used.
pub fn ticks(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let f: Vec<&str> = s[s.rfind(')')? + 1..].split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// The processes of VP `tid` of the machine in `dir` (other tests' machines
/// number their VPs alike).
pub fn of_vp(dir: &Path, tid: u64) -> Vec<u32> {
    let socket = format!("MIG_SOCKET={}", dir.display());
    processes_with(&[format!("MIG_TID={tid}")])
        .into_iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/environ")).is_ok_and(|env| {
                env.split(|&b| b == 0)
                    .any(|v| v.starts_with(socket.as_bytes()))
            })
        })
        .collect()
}

/// The processes of VP `tid` that used CPU since `before` (pid -> ticks).
pub fn ran(dir: &Path, tid: u64, before: &mut std::collections::HashMap<u32, u64>) -> Vec<u32> {
    let mut out = Vec::new();
    for p in of_vp(dir, tid) {
        let Some(t) = ticks(p) else { continue };
        if before.get(&p).is_some_and(|&b| t > b) {
            out.push(p);
        }
        before.insert(p, t);
    }
    out
}

/// A `mig` call `args` that got no answer is a hang, not load: what each
/// daemon was doing (`report`) is printed with the test's output.
fn say_if_unanswered(args: &[&str], out: &Output, report: impl FnOnce() -> String) {
    if String::from_utf8_lossy(&out.stderr).contains("did not answer within") {
        eprintln!(
            "mig {}: a daemon did not answer\n{}",
            args.join(" "),
            report()
        );
    }
}

/// What a daemon was doing: its threads' stacks (when gdb is installed),
/// its process state and its log.
fn daemon_report(name: &str, pid: u32, log: &str) -> String {
    let pid = pid.to_string();
    let stacks = Command::new("timeout")
        .args([
            "20",
            "gdb",
            "-p",
            &pid,
            "-batch",
            "-ex",
            "thread apply all bt",
        ])
        .stdin(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_else(|e| format!("(no stacks: gdb: {e})"));
    let state = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("State:"))
        .unwrap_or("State: gone")
        .to_string();
    format!("===== {name} (pid {pid}, {state})\n{stacks}\n{log}\n")
}

/// Is process `pid` stopped (state T in /proc)?
pub fn stopped(pid: u32) -> bool {
    migd::host::is_stopped(pid)
}

/// A virtual machine started with `mig up --detach` in a directory, halted
/// when dropped.
pub struct Up(pub PathBuf);

impl Up {
    /// `mig ARGS` against it.
    pub fn mig(&self, args: &[&str]) -> Output {
        let out = command("mig")
            .env("MIG_DAEMON", self.0.join("h0/control.sock"))
            .args(args)
            .output()
            .expect("mig");
        say_if_unanswered(args, &out, || self.hang_report());
        out
    }

    /// What each of its daemons (found by their state directories) was
    /// doing, and their logs.
    pub fn hang_report(&self) -> String {
        let mut out = String::new();
        let procs: Vec<(u32, String)> = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let pid = e.file_name().to_str()?.parse().ok()?;
                let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
                Some((pid, String::from_utf8_lossy(&cmd).replace('\0', " ")))
            })
            .collect();
        for i in 0.. {
            let state = self.0.join(format!("h{i}"));
            if !state.is_dir() {
                break;
            }
            let log = std::fs::read_to_string(state.join("migd.log")).unwrap_or_default();
            let needle = format!("--state-dir {} ", state.display());
            match procs
                .iter()
                .find(|(_, c)| c.contains("migd") && c.contains(&needle))
            {
                Some((pid, _)) => out += &daemon_report(&format!("h{i}"), *pid, &log),
                None => out += &format!("===== h{i} (no process)\n{log}\n"),
            }
        }
        out
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.mig(&["halt"]);
        let sock = self.0.join("h0/control.sock");
        wait_until(Duration::from_secs(10), || !sock.exists());
    }
}

/// `mig up -n N --detach` in `dir` (wrap a success in `Up` to halt it).
pub fn up(dir: &Path, n: usize) -> Output {
    command("mig")
        .args(["up", "-n", &n.to_string(), "--detach", "--state-dir"])
        .arg(dir)
        .output()
        .expect("mig up")
}

/// Debian's `package`, installed when `present` says it is not: as root
/// (as CI runs), else the test fails saying what to install.
pub fn debian_package(package: &str, present: impl Fn() -> bool) {
    if present() {
        return;
    }
    // SAFETY: a plain system call.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(
        root,
        "{package} is not installed: apt-get install {package} (as root this test installs it)"
    );
    let ok = Command::new("sh")
        .args([
            "-c",
            &format!(
                "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq {package} >/dev/null"
            ),
        ])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok && present(), "apt-get install {package} failed");
}

/// A command from Debian's `package` (a name on PATH or a path),
/// installed if need be (see `debian_package`).
pub fn tool(cmd: &str, package: &str) {
    debian_package(package, || {
        Command::new("sh")
            .args(["-c", &format!("command -v {cmd}")])
            .output()
            .is_ok_and(|o| o.status.success())
    });
}

/// A daemon cut off from the others: every TCP packet from or to its
/// loopback address (`Vm::ip` of a machine started with `start_apart`)
/// is dropped, as a cable pulled would, until the partition is dropped
/// (its iptables rules go then, the test failing or not). Needs root, as
/// CI runs the tests; iptables is installed when missing (see `tool`).
pub struct Partition {
    ip: String,
}

impl Partition {
    /// Cut `ip` off.
    pub fn of(ip: &str) -> Partition {
        assert!(
            ip.starts_with("127.") && ip != "127.0.0.1",
            "only a test daemon's own loopback address is cut off, not {ip}"
        );
        tool("iptables", "iptables");
        let p = Partition { ip: ip.to_string() };
        for way in ["-s", "-d"] {
            let out = iptables(&["-I", "INPUT"], way, ip);
            assert!(
                out.status.success(),
                "iptables (as root: it changes the firewall): {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        p
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        for way in ["-s", "-d"] {
            let _ = iptables(&["-D", "INPUT"], way, &self.ip);
        }
    }
}

/// `iptables -w OP CHAIN -i lo -p tcp WAY IP -j DROP`.
fn iptables(op: &[&str], way: &str, ip: &str) -> Output {
    Command::new("iptables")
        .arg("-w")
        .args(op)
        .args(["-i", "lo", "-p", "tcp", way, ip, "-j", "DROP"])
        .output()
        .expect("run iptables")
}

/// Our `libpvm3.so` (beside the other binaries), built once per test run: `cargo test` builds the
/// crate's Rust library for the tests, not its shared library.
pub fn pvm_library() -> PathBuf {
    static BUILT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        let exe = std::env::current_exe().expect("test executable path");
        let release = exe.components().any(|c| c.as_os_str() == "release");
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "-p", "pvm3"])
            .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
        if release {
            cmd.arg("--release");
        }
        let out = cmd.output().expect("cargo build -p pvm3");
        assert!(
            out.status.success(),
            "cargo build -p pvm3: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
    bin("libpvm3.so")
}

/// The longest loop turn (ms) of the master and of any host in `mig stats
/// --json`'s answer (each host's figure covers its last 5-10 s).
pub fn longest_turns(stats: &serde_json::Value) -> (f64, f64) {
    let mut got = (0.0f64, 0.0f64);
    for h in stats["loop_turns"].as_array().into_iter().flatten() {
        let ms = h["turns"]["window_longest_us"].as_f64().unwrap_or(0.0) / 1e3;
        if h["master"] == true {
            got.0 = got.0.max(ms);
        }
        got.1 = got.1.max(ms);
    }
    got
}

/// Authenticate to the daemon at `addr` as a daemon does: the stream and
/// its sealer, ready for the first message after `Welcome`.
pub fn authenticated(
    addr: &str,
    key: &libmig::auth::ClusterKey,
) -> (std::net::TcpStream, Box<libmig::seal::Sealer>) {
    use libmig::frame;
    use libmig::handshake::{Answer, Client};
    use libmig::msg::PeerMsg;
    use libmig::seal::Sealer;
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    let (mut client, hello) = Client::start(key).expect("a client");
    frame::write_frame(&mut s, &PeerMsg::from(hello)).expect("send hello");
    let mut sealer: Option<Box<Sealer>> = None;
    loop {
        let got: Option<PeerMsg> = match &mut sealer {
            Some(seal) => seal.read_frame(&mut s),
            None => frame::read_frame(&mut s),
        }
        .expect("a frame");
        let msg = got
            .expect("an answer")
            .into_handshake()
            .expect("the handshake");
        match client.on(key, &msg) {
            Answer::Send(reply) => {
                frame::write_frame(&mut s, &PeerMsg::from(reply)).expect("send reply")
            }
            Answer::SendThenSeal(proof, seal) => {
                frame::write_frame(&mut s, &PeerMsg::from(proof)).expect("send proof");
                sealer = Some(seal);
            }
            Answer::Done(..) => return (s, sealer.expect("a sealed link")),
            Answer::Refuse(why) => panic!("refused: {why}"),
        }
    }
}

/// A daemon's `--metrics` page, scraped as a monitoring stack would.
pub mod metrics {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Duration;

    use super::{wait_until, Vm};

    /// Daemon `i`'s metrics address, once it has written it.
    pub fn metrics_addr(vm: &Vm, i: usize) -> String {
        let file = vm.dir.path().join(format!("h{i}")).join("metrics-addr");
        let mut addr = String::new();
        assert!(
            wait_until(Duration::from_secs(10), || {
                addr = std::fs::read_to_string(&file).unwrap_or_default();
                !addr.trim().is_empty()
            }),
            "no {}:\n{}",
            file.display(),
            vm.log(i)
        );
        addr.trim().to_string()
    }

    /// Send `request` as it is; the status line and the body.
    pub fn http(addr: &str, request: &[u8]) -> (String, String) {
        let mut s = TcpStream::connect(addr).expect("connect to the metrics port");
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        s.write_all(request).expect("send");
        let mut out = Vec::new();
        s.read_to_end(&mut out).expect("read the answer");
        let text = String::from_utf8_lossy(&out).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head.lines().next().unwrap_or("").to_string();
        (status, body.to_string())
    }

    /// `GET /metrics`, which must answer 200: the page.
    pub fn scrape(addr: &str) -> String {
        let (status, body) = http(addr, b"GET /metrics HTTP/1.1\r\nHost: mig\r\n\r\n");
        assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
        assert!(body.ends_with("# EOF\n"), "{body}");
        body
    }

    /// The value of the sample `name` (with its labels, as printed), if any.
    pub fn value(page: &str, name: &str) -> Option<f64> {
        page.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    }

    /// The sum of sample `name` over every daemon of `vm`.
    pub fn total(vm: &Vm, n: usize, name: &str) -> f64 {
        (0..n)
            .map(|i| value(&scrape(&metrics_addr(vm, i)), name).unwrap_or(0.0))
            .sum()
    }
}
