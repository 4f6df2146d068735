//! `mig up`: the embedded default — a local virtual machine of N daemons on
//! loopback, with its own state directory and cluster key.
//!
//! Daemon `h0` is the master; `h1..` join it. Each daemon's log is
//! `DIR/hK/migd.log`. Without `--detach` it stays in the foreground and
//! halts everything on Ctrl-C.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use libmig::msg::Request;

/// Flags of `mig up`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Number of daemons (hosts).
    #[arg(short = 'n', long = "hosts", value_name = "N", default_value_t = 4)]
    n: usize,
    /// Processors each daemon offers.
    #[arg(long, default_value_t = 1)]
    processors: u32,
    /// Relative capacity of each daemon's processors, e.g. 1,1,2,4 (default all 1).
    #[arg(long, value_delimiter = ',')]
    capacities: Vec<f64>,
    /// State directory [default: $XDG_RUNTIME_DIR/mig, else /tmp/mig-UID].
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Return once the machine is up, leaving the daemons running.
    #[arg(long)]
    detach: bool,
    /// Config file (TOML, [daemon] and [owner] sections) for every daemon.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Whose CPU load counts as each host's owner's, per host: none (the
    /// default: the hosts share this machine, so only `mig owner reclaim`
    /// takes one back) or tree:PID (that process tree is the owner's desk).
    #[arg(long, value_delimiter = ',')]
    owner_scopes: Vec<String>,
    /// Print where the machine is as JSON on stdout ({"daemon", "master",
    /// "hosts", "state_dir"}) instead of an `export` line.
    #[arg(long)]
    json: bool,
    /// The daemons end with this process (the kernel kills them if it dies):
    /// a machine in the foreground (`mig demo`, `mig up` without --detach).
    #[arg(skip)]
    tied: bool,
}

/// Where `mig up` keeps its virtual machine by default.
pub fn default_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("mig"),
        _ => PathBuf::from(format!("/tmp/mig-{}", nix::unistd::getuid())),
    }
}

/// The `migd` binary: next to this `mig`, else on PATH.
pub fn migd_path() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("migd")))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("migd"))
}

/// A running local virtual machine: its daemons and the master's socket.
pub struct Vm {
    /// The daemons, master first.
    pub children: Vec<Child>,
    /// The master's control socket.
    pub master_sock: PathBuf,
    /// The master's TCP address.
    pub addr: String,
}

impl Vm {
    /// Start `a.n` daemons in `dir` (master first) and wait until each is ready.
    pub fn start(dir: &Path, a: &Args) -> Result<Vm> {
        migd::state_dir::ensure_private_dir(dir).map_err(anyhow::Error::msg)?;
        let master_sock = dir.join("h0").join("control.sock");
        if let Some((hosts, jobs)) = earlier_state(dir) {
            let images = if jobs.is_empty() {
                String::new()
            } else {
                // (Each daemon removes them as it starts: no master counts
                // them any more.)
                format!(
                    "; the checkpoints of {} it left, of jobs that ended with it, are removed",
                    jobs.join(", ")
                )
            };
            eprintln!(
                "mig: {} holds an earlier virtual machine's state: the logs of {hosts} are \
                 added to{images}",
                dir.display()
            );
        }
        // What the master will find damaged, said here too: its log is a
        // file.
        let (_, damage) = migd::job_files::JobFiles::new(&dir.join("h0")).read_history();
        for what in damage {
            eprintln!("mig: {what}");
        }
        let (master, addr) = start_daemon(dir, 0, None, a)?;
        let mut vm = Vm {
            children: vec![master],
            master_sock,
            addr,
        };
        for i in 1..a.n {
            match start_daemon(dir, i, Some(&vm.addr), a) {
                Ok((c, _)) => vm.children.push(c),
                Err(e) => {
                    vm.halt();
                    return Err(e);
                }
            }
        }
        Ok(vm)
    }

    /// Halt every daemon and wait for them.
    pub fn halt(&mut self) {
        let _ = super::call(&self.master_sock, &Request::Halt);
        for c in &mut self.children {
            let _ = c.wait();
        }
    }
}

/// Settings of a virtual machine (the flags of `mig up`).
impl Args {
    /// `n` daemons with `processors` each and the given capacities.
    pub fn new(n: usize, processors: u32, capacities: Vec<f64>) -> Args {
        Args {
            n,
            processors,
            capacities,
            state_dir: None,
            detach: true,
            config: None,
            owner_scopes: Vec::new(),
            json: false,
            tied: false,
        }
    }

    /// Every daemon reads this config file.
    pub fn config(mut self, path: PathBuf) -> Args {
        self.config = Some(path);
        self
    }

    /// The daemons end with this process (see `tied`).
    pub fn tied(mut self) -> Args {
        self.tied = true;
        self
    }

    /// Host `i` counts the load of the process tree of `pid` as its owner's.
    pub fn owner_desk(mut self, i: usize, pid: u32) -> Args {
        if self.owner_scopes.len() <= i {
            self.owner_scopes.resize(i + 1, "none".into());
        }
        self.owner_scopes[i] = format!("tree:{pid}");
        self
    }
}

/// What an earlier virtual machine left in `dir`, if anything: how many
/// hosts' logs, and the jobs whose checkpoints it kept.
fn earlier_state(dir: &Path) -> Option<(String, Vec<String>)> {
    let hosts: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("migd.log").is_file())
        .collect();
    if hosts.is_empty() {
        return None;
    }
    let mut jobs: Vec<String> = hosts
        .iter()
        .flat_map(|h| {
            std::fs::read_dir(h.join("ckpt"))
                .into_iter()
                .flatten()
                .flatten()
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    jobs.sort();
    jobs.dedup();
    let hosts = libmig::words::count(hosts.len() as u64, "host", "hosts");
    Some((hosts, jobs))
}

fn start_daemon(dir: &Path, i: usize, join: Option<&str>, a: &Args) -> Result<(Child, String)> {
    let state = dir.join(format!("h{i}"));
    migd::state_dir::ensure_private_dir(&state).map_err(anyhow::Error::msg)?;
    // An earlier machine's log is added to, never truncated.
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(state.join("migd.log"))
        .context("opening the daemon log")?;
    if log.metadata().is_ok_and(|m| m.len() > 0) {
        use std::io::Write;
        let _ = writeln!(log, "---- mig up: a new virtual machine starts here ----");
    }
    let capacity = a.capacities.get(i).copied().unwrap_or(1.0);
    let mut cmd = Command::new(migd_path());
    cmd.arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--state-dir")
        .arg(&state)
        .arg("--key-file")
        .arg(dir.join("cluster.key"))
        .arg("--name")
        .arg(format!("h{i}"))
        .arg("--processors")
        .arg(a.processors.to_string())
        .arg("--capacity")
        .arg(capacity.to_string())
        .arg("--owner-scope")
        .arg(a.owner_scopes.get(i).map_or("none", String::as_str))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        // Its own process group: a Ctrl-C meant for `mig up` reaches the
        // daemons only through `mig halt`.
        .process_group(0);
    if let Some(addr) = join {
        cmd.arg("--join").arg(addr);
    }
    if a.tied {
        let parent = std::process::id();
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)?;
                if nix::unistd::getppid().as_raw() as u32 != parent {
                    return Err(std::io::Error::other("mig ended before its daemon started"));
                }
                Ok(())
            });
        }
    }
    // A machine of its own: not the settings of this host's daemon
    // (/etc/mig/migd.toml) unless asked for.
    cmd.arg("--config")
        .arg(a.config.as_deref().unwrap_or(Path::new("none")));
    let mut child = cmd.spawn().with_context(|| {
        format!(
            "starting {} (build it with cargo build)",
            migd_path().display()
        )
    })?;
    let out = child.stdout.take().context("no stdout")?;
    let mut line = String::new();
    BufReader::new(out)
        .read_line(&mut line)
        .context("reading the daemon's address")?;
    let addr = line.trim().to_string();
    if addr.is_empty() {
        let log = std::fs::read_to_string(state.join("migd.log")).unwrap_or_default();
        bail!(
            "daemon h{i} did not start:\n{}",
            log.lines().rev().take(5).collect::<Vec<_>>().join("\n")
        );
    }
    Ok((child, addr))
}

/// Wait (up to 5 s) until the master has the voters it wants among `n`
/// hosts, so that the machine handed over survives the loss of a host and
/// `mig hosts` does not warn that it would not.
fn wait_for_voters(master: &Path, n: usize) {
    let wanted = migd::master::voters_wanted(n, 5);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::time::Instant::now() < deadline {
        if let Ok(libmig::msg::Response::Hosts(h)) = super::call(master, &Request::Hosts) {
            if h.iter().filter(|h| h.voter).count() >= wanted {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Memory each daemon of a local virtual machine is given room for (it
/// uses 6 to 10 MiB idle with its lease guardian; a master more with many
/// hosts, a worker more with VPs' messages in flight).
const DAEMON_MB: u64 = 32;
/// Descriptors the master needs for each host (its link, data links both
/// ways, room for its VPs), and for itself.
const FDS_PER_HOST: u64 = 4;
const FDS_OWN: u64 = 64;

/// The most daemons this machine can hold, and what bounds it: the memory
/// available now and the descriptors the master may open (its hard limit:
/// it raises its soft limit to it).
fn most_daemons() -> (usize, String) {
    let mem = migd::facts::free_memory_mb().unwrap_or(u64::MAX);
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct given.
    let fds = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0 {
        r.rlim_max
    } else {
        1024
    };
    let by_mem = mem / DAEMON_MB;
    let by_fds = fds.saturating_sub(FDS_OWN) / FDS_PER_HOST;
    let (most, bound) = if by_mem <= by_fds {
        (
            by_mem,
            format!("{mem} MiB of memory available, {DAEMON_MB} MiB a daemon"),
        )
    } else {
        (
            by_fds,
            format!("{fds} open files allowed, {FDS_PER_HOST} a host on the master"),
        )
    };
    (most.clamp(1, usize::MAX as u64) as usize, bound)
}

/// Run it.
pub fn run(a: Args) -> Result<()> {
    if a.n == 0 {
        bail!("-n must be at least 1");
    }
    let (most, bound) = most_daemons();
    if a.n > most {
        bail!(
            "-n {}: this machine holds at most {most} daemons ({bound})",
            a.n
        );
    }
    if let Some(c) = a.capacities.iter().find(|c| !(c.is_finite() && **c > 0.0)) {
        bail!("--capacities: {c} is not a positive number");
    }
    let dir = a.state_dir.clone().unwrap_or_else(default_dir);
    let master_sock = dir.join("h0").join("control.sock");
    if libmig::control::Client::connect(&master_sock).is_ok() {
        bail!(
            "a virtual machine is already running at {}; stop it with `mig halt` first",
            dir.display()
        );
    }
    let a = Args {
        tied: !a.detach,
        ..a
    };
    let mut vm = Vm::start(&dir, &a)?;
    wait_for_voters(&vm.master_sock, a.n);
    let addr = vm.addr.clone();
    let hosts = if a.n == 1 { "1 host" } else { "hosts" };
    let count = if a.n == 1 {
        String::new()
    } else {
        format!("{} ", a.n)
    };
    eprintln!("mig: virtual machine up: {count}{hosts} on loopback, master h0 at {addr}");
    if a.n == 1 {
        eprintln!("mig: its log is {}/h0/migd.log", dir.display());
    } else {
        eprintln!(
            "mig: logs in {}/h0/migd.log .. h{}/migd.log",
            dir.display(),
            a.n - 1
        );
    }
    if a.json {
        println!(
            "{}",
            serde_json::json!({"daemon": master_sock, "master": addr, "hosts": a.n,
                "state_dir": dir})
        );
    } else {
        println!("export MIG_DAEMON={}", master_sock.display());
    }
    if a.detach {
        return Ok(());
    }
    eprintln!("mig: press Ctrl-C to halt it");
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .context("installing a signal handler")?;
    }
    while !stop.load(Ordering::Relaxed) {
        if vm.children[0].try_wait().ok().flatten().is_some() {
            eprintln!("mig: the master stopped");
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    vm.halt();
    Ok(())
}
