//! `mig demo`: the quick start in one command. Starts a local virtual
//! machine of several daemons on loopback, runs the `pi` example across
//! them, has the owner of one host come back (a CPU-bound program starts on
//! their "desk") so that host's VPs stop and move to the others while the
//! job computes, checks the answer, prints timings, and stops everything.
//!
//! The daemons share this machine, so each host's owner is a process tree:
//! host h1's owner monitor counts the load of a desk shell's tree, and the
//! demo starts a busy loop there (`--owner-scope tree:PID`).

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use libmig::control::Client;
use libmig::msg::{JobEvent, Request, Response, SpawnSpec};

use super::up::{Args as UpArgs, Vm};

/// Flags of `mig demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Daemons (hosts) in the virtual machine.
    #[arg(short = 'n', long, default_value_t = 4)]
    hosts: usize,
    /// VPs of the example job.
    #[arg(long, default_value_t = 8)]
    vps: u32,
    /// Monte Carlo samples for pi (the job's size).
    #[arg(long, default_value_t = 2_000_000_000)]
    samples: u64,
    /// Print what happened as one JSON object on stdout (the story goes to
    /// stderr): {"hosts", "up_ms", "job", "vps", "samples", "owner":
    /// {"vps_on_h1", "stopped_ms", "moved_ms", "back_after_s",
    /// "moved_back"}, "vps_per_host", "pi", "job_ms", "answer_ok",
    /// "halt_ms"}.
    #[arg(long)]
    json: bool,
}

/// What the demo saw, for `--json`; the story as it goes, for people.
#[derive(Debug, Default, serde::Serialize)]
struct Report {
    #[serde(skip)]
    json: bool,
    hosts: usize,
    up_ms: f64,
    job: String,
    vps: u32,
    samples: u64,
    owner: OwnerReport,
    vps_per_host: BTreeMap<String, u32>,
    pi: Option<f64>,
    job_ms: f64,
    answer_ok: bool,
    halt_ms: f64,
}

/// h1's owner coming back and leaving again.
#[derive(Debug, Default, serde::Serialize)]
struct OwnerReport {
    vps_on_h1: usize,
    stopped_ms: Option<f64>,
    moved_ms: Option<f64>,
    back_after_s: Option<f64>,
    moved_back: usize,
}

impl Report {
    /// A line of the story: on stdout, or on stderr under `--json`.
    fn say(&self, line: std::fmt::Arguments) {
        if self.json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }
}

fn example(name: &str) -> Result<PathBuf> {
    let p = std::env::current_exe()?
        .parent()
        .map(|d| d.join(name))
        .context("locating the examples")?;
    if !p.is_file() {
        bail!(
            "example {} not found: build it with `cargo build --release --workspace`",
            p.display()
        );
    }
    Ok(p)
}

/// The owner policy of the demo's hosts: the desk's busy loop shares two
/// cores with the job's VPs, so a small load is the owner's return; the
/// owner counts as gone after 2 s idle (a real desk waits 15 minutes).
const DEMO_POLICY: &str =
    "[owner]\nreclaim_load = 0.1\noffer_max_load = 0.05\noffer_after_idle_s = 2\n";

/// The owner's desk on host h1: a shell whose process tree is theirs.
struct Desk {
    shell: Child,
}

impl Desk {
    fn open() -> Result<Desk> {
        let shell = Command::new("sh")
            .arg("-s")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()
            .context("starting the desk shell (sh)")?;
        Ok(Desk { shell })
    }

    fn type_line(&mut self, line: &str) -> Result<()> {
        let stdin = self.shell.stdin.as_mut().context("the desk's input")?;
        writeln!(stdin, "{line}").context("typing at the desk")?;
        stdin.flush().context("typing at the desk")
    }
}

impl Drop for Desk {
    fn drop(&mut self) {
        // The shell and anything it started: its own process group.
        let group = nix::unistd::Pid::from_raw(self.shell.id() as i32);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.shell.wait();
    }
}

/// Run it.
pub fn run(a: Args) -> Result<()> {
    let pi = example("pi")?;
    if a.hosts < 2 {
        bail!("the demo needs at least 2 hosts, so that VPs have somewhere to go");
    }
    let dir = std::env::temp_dir().join(format!("mig-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let policy = dir.join("owner.toml");
    std::fs::write(&policy, DEMO_POLICY).context("writing the demo's owner policy")?;
    let mut desk = Desk::open()?;
    let t0 = Instant::now();
    let up_args = UpArgs::new(a.hosts, 1, vec![1.0; a.hosts])
        .config(policy)
        .owner_desk(1, desk.shell.id())
        .tied();
    let mut vm = Vm::start(&dir, &up_args)?;
    let up = t0.elapsed();
    let mut r = Report {
        json: a.json,
        hosts: a.hosts,
        up_ms: up.as_secs_f64() * 1e3,
        vps: a.vps,
        samples: a.samples,
        ..Report::default()
    };
    r.say(format_args!(
        "virtual machine: {} daemons on loopback, up in {:.1} ms (state in {})",
        a.hosts,
        r.up_ms,
        dir.display()
    ));
    let result = run_job(&vm, &pi, &a, &mut desk, &mut r);
    let t1 = Instant::now();
    vm.halt();
    if result.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        eprintln!(
            "mig demo: the daemons' logs are kept in {}/h*/migd.log",
            dir.display()
        );
    }
    r.halt_ms = t1.elapsed().as_secs_f64() * 1e3;
    r.say(format_args!("halted in {:.1} ms", r.halt_ms));
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    }
    result
}

/// How long the demo's job may go without a word (an output line, a VP's
/// end) before the demo gives up on it, rather than wait for ever.
const STUCK: Duration = Duration::from_secs(120);

/// Wait until every VP runs and can be moved, then have h1's owner come back: a busy loop
/// starts on their desk. Time until h1's VPs are stopped and until h1 is
/// empty (its VPs moved); then the owner leaves again.
fn owner_returns(vm: &Vm, tids: &[u64], desk: &mut Desk, r: &mut Report) -> Result<()> {
    let mut c = Client::connect(&vm.master_sock)?;
    let deadline = Instant::now() + Duration::from_secs(20);
    let on_h1 = loop {
        let Response::Ps(vps) = c.call(&Request::Ps)? else {
            bail!("the daemon did not list its VPs")
        };
        // A VP that has not yet said it can be moved would stay on h1.
        if vps.iter().all(|v| v.state == "running" && v.movable) && vps.len() == tids.len() {
            break vps
                .into_iter()
                .filter(|v| v.host.as_deref() == Some("h1"))
                .filter_map(|v| Some((v.tid, v.pid?)))
                .collect::<Vec<_>>();
        }
        if Instant::now() > deadline {
            bail!("the job's VPs never all ran");
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    r.owner.vps_on_h1 = on_h1.len();
    if on_h1.is_empty() {
        r.say(format_args!("no VP on h1: nothing to show"));
        return Ok(());
    }
    let t = Instant::now();
    desk.type_line("while :; do :; done &")?;
    r.say(format_args!(
        "h1's owner is back: a busy loop started on their desk, with {} of the job on h1",
        libmig::words::count(on_h1.len() as u64, "VP", "VPs")
    ));
    let mut all_stopped = None;
    loop {
        if all_stopped.is_none() && on_h1.iter().all(|&(_, pid)| migd::host::is_stopped(pid)) {
            all_stopped = Some(t.elapsed());
        }
        let Response::Ps(vps) = c.call(&Request::Ps)? else {
            bail!("the daemon did not list its VPs")
        };
        let left = on_h1
            .iter()
            .filter(|(tid, _)| {
                vps.iter()
                    .any(|v| v.tid == *tid && v.host.as_deref() == Some("h1"))
            })
            .count();
        if left == 0 {
            break;
        }
        if Instant::now() > deadline {
            bail!("h1's VPs did not move off: {vps:?}");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let empty = t.elapsed();
    r.owner.stopped_ms = all_stopped.map(|s| s.as_secs_f64() * 1e3);
    r.owner.moved_ms = Some(empty.as_secs_f64() * 1e3);
    match all_stopped {
        Some(s) => r.say(format_args!(
            "h1's VPs stopped {:.1} ms after the owner came back; moved to other hosts (image written, sent, started again) {:.1} ms after, no message lost",
            s.as_secs_f64() * 1e3,
            empty.as_secs_f64() * 1e3
        )),
        None => r.say(format_args!(
            "h1's VPs moved to other hosts (image written, sent, started again) {:.1} ms after the owner came back, no message lost",
            empty.as_secs_f64() * 1e3
        )),
    }
    desk.type_line("kill $!")?;
    let t = Instant::now();
    r.say(format_args!(
        "h1's owner left again: h1 is offered after 2 s idle"
    ));
    // Back in the pool, h1 gets VPs again where MTAT says the job gains.
    while Instant::now() < t + Duration::from_secs(10) {
        let Response::Ps(vps) = c.call(&Request::Ps)? else {
            bail!("the daemon did not list its VPs")
        };
        if vps.iter().any(|v| v.state == "exited") {
            r.say(format_args!(
                "the job was finishing: nothing moved back to h1"
            ));
            break;
        }
        let back = vps
            .iter()
            .filter(|v| v.host.as_deref() == Some("h1") && v.state == "running")
            .count();
        if back > 0 {
            r.owner.back_after_s = Some(t.elapsed().as_secs_f64());
            r.owner.moved_back = back;
            r.say(format_args!(
                "h1 offered again {:.1} s later; the scheduler moved {} back onto it (MTAT: the job gets faster)",
                t.elapsed().as_secs_f64(),
                libmig::words::count(back as u64, "VP", "VPs")
            ));
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

fn run_job(vm: &Vm, pi: &std::path::Path, a: &Args, desk: &mut Desk, r: &mut Report) -> Result<()> {
    let mut c = Client::connect(&vm.master_sock)?;
    let args = vec!["--samples".into(), a.samples.to_string()];
    let spec = SpawnSpec::new(pi.display().to_string(), args)
        .n(a.vps)
        .cwd(std::env::current_dir()?.display().to_string())
        .wait(true);
    let t = Instant::now();
    let Response::Spawned { job, tids } = c.call(&Request::Spawn(spec))? else {
        bail!("the job did not start")
    };
    r.say(format_args!(
        "job {job}: {} VPs of pi, {} Monte Carlo samples that VP 0 hands out in chunks to the others by message; placed by the master's gang scheduler (MTAT)",
        a.vps, a.samples
    ));
    r.job = job.clone();
    owner_returns(vm, &tids, desk, r)?;
    let mut verdict = None;
    let mut per_host: BTreeMap<String, u32> = BTreeMap::new();
    let status = loop {
        let heard = match c.recv(Some(STUCK)) {
            Err(libmig::control::ControlError::Timeout { .. }) => bail!(
                "job {job} made no progress for {} s: a VP waits for what never comes",
                STUCK.as_secs()
            ),
            other => other?,
        };
        match heard.on_a_wait() {
            JobEvent::Output { line, .. } if line.starts_with("pi = ") => verdict = Some(line),
            JobEvent::VpDone { host, .. } => *per_host.entry(host).or_default() += 1,
            JobEvent::JobDone { status, .. } => break status,
            JobEvent::Error { message } => bail!("{message}"),
            JobEvent::Output { .. } | JobEvent::Skipped { .. } => {}
            // Replies to other requests: none comes on a wait.
            JobEvent::Other(_) => {}
        }
    };
    let elapsed = t.elapsed();
    if status != 0 {
        bail!("job {job} failed with status {status}");
    }
    let hosts: Vec<String> = per_host.iter().map(|(h, n)| format!("{h}:{n}")).collect();
    r.say(format_args!("VPs per host: {}", hosts.join(" ")));
    r.vps_per_host = per_host;
    let Some(line) = verdict else {
        bail!("pi printed no answer")
    };
    r.job_ms = elapsed.as_secs_f64() * 1e3;
    r.say(format_args!("{line}  ({:.1} ms)", r.job_ms));
    let estimate: f64 = line
        .split_whitespace()
        .nth(2)
        .and_then(|v| v.parse().ok())
        .context("a malformed answer")?;
    r.pi = Some(estimate);
    if !line.ends_with(": ok") || (estimate - std::f64::consts::PI).abs() > 1e-3 {
        bail!("wrong answer: {line}");
    }
    r.answer_ok = true;
    r.say(format_args!("answer checked: OK"));
    Ok(())
}
