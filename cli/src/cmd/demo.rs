//! `mig demo`: the quick start in one command. Starts a local virtual
//! machine of several daemons on loopback, runs the `pi` example across
//! them, moves one of its VPs to another host while it computes, checks the
//! answer, prints timings, and stops everything.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use libmig::control::Client;
use libmig::msg::{Request, Response, SpawnSpec};

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
    #[arg(long, default_value_t = 200_000_000)]
    samples: u64,
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

/// Run it.
pub fn run(a: Args) -> Result<()> {
    let pi = example("pi")?;
    let dir = std::env::temp_dir().join(format!("mig-demo-{}", std::process::id()));
    let t0 = Instant::now();
    let mut vm = Vm::start(&dir, &UpArgs::new(a.hosts, 1, vec![1.0; a.hosts]))?;
    let up = t0.elapsed();
    println!(
        "virtual machine: {} daemons on loopback, up in {:.1} ms (state in {})",
        a.hosts,
        up.as_secs_f64() * 1e3,
        dir.display()
    );
    let result = run_job(&vm, &pi, &a);
    let t1 = Instant::now();
    vm.halt();
    let _ = std::fs::remove_dir_all(&dir);
    println!("halted in {:.1} ms", t1.elapsed().as_secs_f64() * 1e3);
    result
}

/// Where a VP runs and in what state, as `mig ps` has it.
fn whereabouts(c: &mut Client, tid: u64) -> Result<Option<(String, String)>> {
    let Response::Ps(vps) = c.call(&Request::Ps)? else {
        bail!("the daemon did not list its VPs")
    };
    Ok(vps
        .into_iter()
        .find(|v| v.tid == tid)
        .map(|v| (v.host.unwrap_or_default(), v.state)))
}

/// Move one running VP of the job to another host while it computes, and
/// say how long it took until it ran there.
fn move_one(vm: &Vm, tid: u64) -> Result<()> {
    let mut c = Client::connect(&vm.master_sock)?;
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    let from = loop {
        match whereabouts(&mut c, tid)? {
            Some((h, s)) if s == "running" => break h,
            _ if Instant::now() > deadline => bail!("VP t{tid:x} never started"),
            _ => std::thread::sleep(std::time::Duration::from_millis(2)),
        }
    };
    let Response::Hosts(hosts) = c.call(&Request::Hosts)? else {
        bail!("the daemon did not list its hosts")
    };
    let Some(to) = hosts
        .iter()
        .map(|h| h.facts.name.clone())
        .find(|h| *h != from)
    else {
        return Ok(());
    };
    let t = Instant::now();
    match c.call(&Request::Migrate {
        tid: format!("t{tid:x}"),
        to: to.clone(),
    })? {
        Response::Ok { .. } => {}
        Response::Error { message } => bail!("moving t{tid:x}: {message}"),
        other => bail!("unexpected reply {other:?}"),
    }
    loop {
        match whereabouts(&mut c, tid)? {
            Some((h, s)) if h == to && s == "running" => break,
            // It finished before it could move: nothing to show.
            None => return Ok(()),
            _ if Instant::now() > deadline => bail!("VP t{tid:x} did not arrive on {to}"),
            _ => std::thread::sleep(std::time::Duration::from_millis(1)),
        }
    }
    println!(
        "migrated VP t{tid:x} from {from} to {to} while it computed: checkpoint, move, restart in {:.1} ms, no message lost",
        t.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}

fn run_job(vm: &Vm, pi: &std::path::Path, a: &Args) -> Result<()> {
    let mut c = Client::connect(&vm.master_sock)?;
    let spec = SpawnSpec {
        program: pi.display().to_string(),
        args: vec!["--samples".into(), a.samples.to_string()],
        n: a.vps,
        cwd: std::env::current_dir()?.display().to_string(),
        env: vec![],
        wait: true,
        parent: None,
    };
    let t = Instant::now();
    let Response::Spawned { job, tids } = c.call(&Request::Spawn(spec))? else {
        bail!("the job did not start")
    };
    println!(
        "job {job}: {} VPs of pi, {} Monte Carlo samples that VP 0 hands out in chunks to the others by message; placed by the master's gang scheduler (MTAT)",
        a.vps, a.samples
    );
    if let Some(&worker) = tids.get(1) {
        move_one(vm, worker)?;
    }
    let mut verdict = None;
    let mut per_host: BTreeMap<String, u32> = BTreeMap::new();
    let status = loop {
        match c.recv(None)? {
            Response::Output { line, .. } if line.starts_with("pi = ") => verdict = Some(line),
            Response::VpDone { host, .. } => *per_host.entry(host).or_default() += 1,
            Response::JobDone { status, .. } => break status,
            Response::Error { message } => bail!("{message}"),
            _ => {}
        }
    };
    let elapsed = t.elapsed();
    if status != 0 {
        bail!("job {job} failed with status {status}");
    }
    let hosts: Vec<String> = per_host.iter().map(|(h, n)| format!("{h}:{n}")).collect();
    println!("VPs per host: {}", hosts.join(" "));
    let Some(line) = verdict else {
        bail!("pi printed no answer")
    };
    println!("{line}  ({:.1} ms)", elapsed.as_secs_f64() * 1e3);
    let estimate: f64 = line
        .split_whitespace()
        .nth(2)
        .and_then(|v| v.parse().ok())
        .context("a malformed answer")?;
    if !line.ends_with(": ok") || (estimate - std::f64::consts::PI).abs() > 1e-3 {
        bail!("wrong answer: {line}");
    }
    println!("answer checked: OK");
    Ok(())
}
