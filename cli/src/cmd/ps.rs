//! `mig ps`: every VP (or a job's, or a host's) with its Tid, job, host,
//! pid, elapsed and CPU time, state and command.

use std::path::Path;

use anyhow::{bail, Result};
use libmig::msg::{Request, Response};

/// Flags of `mig ps`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub daemon: super::Daemon,
    /// Only the VPs of this job (j3) or on this host (h1).
    filter: Option<String>,
    /// Print JSON: one object per VP.
    #[arg(long)]
    json: bool,
}

/// Run it.
pub fn run(daemon: &Path, a: Args) -> Result<()> {
    let Response::Ps(mut vps) = super::call(daemon, &Request::Ps)? else {
        bail!("unexpected reply")
    };
    if let Some(f) = &a.filter {
        vps.retain(|v| &v.job == f || v.host.as_deref() == Some(f.as_str()));
    }
    if a.json {
        let v: Vec<serde_json::Value> = vps
            .iter()
            .map(|v| {
                serde_json::json!({"tid": format!("t{:x}", v.tid), "job": v.job, "vp": v.vp,
                    "host": v.host, "pid": v.pid, "state": v.state, "movable": v.movable,
                    "command": v.command, "started_ms": v.started_ms, "cpu_ms": v.cpu_ms,
                    "move_failed": v.move_failed})
            })
            .collect();
        println!("{}", serde_json::Value::Array(v));
        return Ok(());
    }
    println!(
        "{:<10} {:<6} {:>4} {:<10} {:>8} {:>8} {:>7}  {:<10} COMMAND",
        "TID", "JOB", "VP", "HOST", "PID", "ELAPSED", "CPU", "STATE"
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    for v in vps {
        let pid = v.pid.map_or("-".into(), |p| p.to_string());
        let elapsed = v
            .started_ms
            .map_or("-".into(), |t| super::jobs::span(now.saturating_sub(t)));
        let mut command = v.command.clone();
        if command.chars().count() > 40 {
            command = command.chars().take(39).collect::<String>() + "…";
        }
        let cpu = v.cpu_ms.map_or("-".into(), super::jobs::span);
        println!(
            "t{:<9x} {:<6} {:>4} {:<10} {:>8} {:>8} {:>7}  {:<10} {}",
            v.tid,
            v.job,
            v.vp,
            v.host.as_deref().unwrap_or("-"),
            pid,
            elapsed,
            cpu,
            v.state,
            command
        );
    }
    Ok(())
}
