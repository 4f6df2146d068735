//! `mig jobs` (like `sacct` or `condor_history`): running jobs and those
//! that ended, from the master's history; `mig show JOB` (like `scontrol
//! show job`): one job in full, with its VPs while it runs.

use std::path::Path;

use anyhow::{bail, Result};
use libmig::msg::{JobInfo, Request, Response, VpInfo};

/// Flags of `mig jobs`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub daemon: super::Daemon,
    /// Every ended job the master keeps (up to 10,000), not only the last 20.
    #[arg(long)]
    all: bool,
    /// Only jobs that have not ended (running or suspended).
    #[arg(long, conflicts_with = "all")]
    running: bool,
    /// Print JSON: one object per job.
    #[arg(long)]
    json: bool,
}

/// Flags of `mig show`.
#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    #[command(flatten)]
    pub daemon: super::Daemon,
    /// The job (j3).
    job: String,
    /// Print JSON: the job, and its VPs while it runs.
    #[arg(long)]
    json: bool,
}

/// Ended jobs `mig jobs` shows without `--all`.
const RECENT: usize = 20;

fn jobs(daemon: &Path) -> Result<Vec<JobInfo>> {
    let Response::Jobs(jobs) = super::call(daemon, &Request::Jobs)? else {
        bail!("unexpected reply")
    };
    Ok(jobs)
}

/// Now, in ms since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `2026-11-25 14:38:12`, local time.
pub fn local_time(ms: u64) -> String {
    let t = (ms / 1000) as libc::time_t;
    // SAFETY: localtime_r fills the struct it is given from a time value.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&t, &mut tm);
        tm
    };
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

/// `3.2s`, `4m05s`, `2h13m`.
pub fn span(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..=59 => format!("{:.1}s", ms as f64 / 1000.0),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

fn elapsed(j: &JobInfo) -> u64 {
    j.ended_ms
        .unwrap_or_else(now_ms)
        .saturating_sub(j.submitted_ms)
}

/// Who started a job: its user's name (or uid, if it has no name here).
/// A job the master notes no user for was started by the virtual
/// machine's own user: the one who owns the daemon's socket.
fn user(uid: Option<u32>, daemon: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let uid = uid.or_else(|| std::fs::metadata(daemon).ok().map(|m| m.uid()));
    match uid {
        Some(u) => nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(u))
            .ok()
            .flatten()
            .map_or_else(|| u.to_string(), |user| user.name),
        None => "-".to_string(),
    }
}

fn command_line(j: &JobInfo) -> String {
    std::iter::once(j.program.as_str())
        .chain(j.args.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" ")
}

fn json(j: &JobInfo) -> serde_json::Value {
    serde_json::json!({
        "job": j.job, "program": j.program, "args": j.args, "uid": j.uid, "vps": j.vps,
        "hosts": j.hosts, "state": j.state, "submitted_ms": j.submitted_ms,
        "ended_ms": j.ended_ms, "elapsed_ms": elapsed(j), "status": j.status,
        "cpu_ms": j.cpu_ms,
    })
}

/// Run `mig jobs`.
pub fn run(daemon: &Path, a: Args) -> Result<()> {
    let all = jobs(daemon)?;
    let ended: Vec<&JobInfo> = all.iter().filter(|j| j.ended_ms.is_some()).collect();
    let skip = if a.all {
        0
    } else {
        ended.len().saturating_sub(RECENT)
    };
    let shown: Vec<&JobInfo> = if a.running {
        all.iter().filter(|j| j.ended_ms.is_none()).collect()
    } else {
        ended
            .into_iter()
            .skip(skip)
            .chain(all.iter().filter(|j| j.ended_ms.is_none()))
            .collect()
    };
    if a.json {
        let v: Vec<serde_json::Value> = shown.iter().map(|j| json(j)).collect();
        println!("{}", serde_json::Value::Array(v));
        return Ok(());
    }
    use crate::table::{Align, Table};
    let mut t = Table::new(&[
        ("JOB", Align::Left),
        ("USER", Align::Left),
        ("STATE", Align::Left),
        ("VPS", Align::Right),
        ("HOSTS", Align::Left),
        ("SUBMITTED", Align::Left),
        ("ELAPSED", Align::Right),
        ("CPU", Align::Right),
        ("STATUS", Align::Right),
        ("COMMAND", Align::Left),
    ]);
    for j in &shown {
        let hosts = if j.hosts.len() > 2 {
            format!("{},+{}", j.hosts[0], j.hosts.len() - 1)
        } else {
            j.hosts.join(",")
        };
        t.row(vec![
            j.job.clone(),
            user(j.uid, daemon),
            j.state.clone(),
            j.vps.to_string(),
            if hosts.is_empty() { "-".into() } else { hosts },
            local_time(j.submitted_ms),
            span(elapsed(j)),
            span(j.cpu_ms),
            j.status.map_or("-".into(), |s| s.to_string()),
            command_line(j),
        ]);
    }
    print!("{}", t.render());
    if skip > 0 && !a.running {
        eprintln!("mig: {skip} earlier ended jobs not shown (--all lists them)");
    }
    Ok(())
}

/// Run `mig show JOB`.
pub fn show(daemon: &Path, a: ShowArgs) -> Result<()> {
    let all = jobs(daemon)?;
    let Some(j) = all.iter().rev().find(|j| j.job == a.job) else {
        bail!(
            "no job {} (running, or among the last ended ones the master keeps; `mig jobs --all` lists them)",
            a.job
        )
    };
    let vps: Vec<VpInfo> = if j.ended_ms.is_none() {
        match super::call(daemon, &Request::Ps)? {
            Response::Ps(v) => v.into_iter().filter(|v| v.job == j.job).collect(),
            other => bail!("unexpected reply {}", other.name()),
        }
    } else {
        Vec::new()
    };
    if a.json {
        let mut v = json(j);
        v["vp_list"] = vps
            .iter()
            .map(|v| {
                serde_json::json!({"tid": format!("t{:x}", v.tid), "vp": v.vp, "host": v.host,
                    "pid": v.pid, "state": v.state, "movable": v.movable})
            })
            .collect();
        println!("{v}");
        return Ok(());
    }
    println!(
        "JobId={} State={} User={}",
        j.job,
        j.state,
        user(j.uid, daemon)
    );
    println!("   Command={}", command_line(j));
    println!(
        "   VPs={} Hosts={}",
        j.vps,
        if j.hosts.is_empty() {
            "-".into()
        } else {
            j.hosts.join(",")
        }
    );
    println!(
        "   Submitted={} Ended={} Elapsed={}",
        local_time(j.submitted_ms),
        j.ended_ms.map_or("-".into(), local_time),
        span(elapsed(j))
    );
    match j.status {
        Some(s) => println!("   ExitStatus={s} CPU={}", span(j.cpu_ms)),
        None => println!("   CPU={} (so far)", span(j.cpu_ms)),
    }
    for v in &vps {
        println!(
            "   VP {} t{:x} on {} pid {} {}{}",
            v.vp,
            v.tid,
            v.host.as_deref().unwrap_or("-"),
            v.pid.map_or("-".into(), |p| p.to_string()),
            v.state,
            if v.movable { " (movable)" } else { "" }
        );
    }
    Ok(())
}
