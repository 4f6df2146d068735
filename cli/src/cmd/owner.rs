//! `mig owner`: the owner's side: take a host back now, lend it again, or
//! see what the owner monitor sees.

use std::path::Path;

use anyhow::{bail, Result};
use libmig::msg::{OwnerAction, OwnerReport, Request, Response};

/// `mig owner` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum OwnerCmd {
    /// The owner wants the host now: its VPs stop at once and are moved to
    /// other hosts (or wait, stopped, until one is free). It stays taken
    /// back until `mig owner release`.
    Reclaim(Target),
    /// Lend the host to mig again: its VPs resume and the scheduler may use
    /// it at once, without waiting for the idle time.
    Release(Target),
    /// Per host: offered or taken back, since when, which source decided,
    /// and what each source (load, terminals, input devices, interrupts,
    /// explicit) sees now — to check that detection works on a machine.
    Status(Status),
}

impl OwnerCmd {
    /// The daemon to ask.
    pub fn daemon(&self) -> &super::Daemon {
        match self {
            OwnerCmd::Reclaim(t) | OwnerCmd::Release(t) => &t.daemon,
            OwnerCmd::Status(s) => &s.daemon,
        }
    }
}

/// Which host.
#[derive(Debug, clap::Args)]
pub struct Target {
    #[command(flatten)]
    pub daemon: super::Daemon,
    /// The host, as `mig hosts` shows it [default: the daemon talked to].
    #[arg(long)]
    host: Option<String>,
    /// Print the result as JSON ({"ok", "message"}).
    #[arg(long)]
    json: bool,
}

/// Flags of `mig owner status`.
#[derive(Debug, clap::Args)]
pub struct Status {
    #[command(flatten)]
    pub daemon: super::Daemon,
    /// Only this host [default: every host].
    #[arg(long)]
    host: Option<String>,
    /// Print JSON: an object per host, keyed by name.
    #[arg(long)]
    json: bool,
}

/// Run it.
pub fn run(daemon: &Path, c: OwnerCmd) -> Result<()> {
    let (action, host, json) = match c {
        OwnerCmd::Reclaim(t) => (OwnerAction::Reclaim, t.host, t.json),
        OwnerCmd::Release(t) => (OwnerAction::Release, t.host, t.json),
        OwnerCmd::Status(s) => (OwnerAction::Status, s.host, s.json),
    };
    match super::call(daemon, &Request::Owner { action, host })? {
        Response::Ok { message } => super::done(&message, json),
        Response::Owner(list) if json => {
            let m: serde_json::Map<String, serde_json::Value> = list
                .into_iter()
                .map(|(h, r)| Ok((h, serde_json::to_value(r)?)))
                .collect::<Result<_>>()?;
            println!("{}", serde_json::Value::Object(m));
        }
        Response::Owner(list) => {
            for (h, r) in list {
                print!("{}", describe(&h, &r));
            }
        }
        other => bail!("unexpected reply {}", other.name()),
    }
    Ok(())
}

/// A host's owner state on one line, for `mig hosts`.
pub fn summary(r: &OwnerReport) -> String {
    let idle = r
        .idle_s
        .map(|s| format!(", owner idle {}", ago(s)))
        .unwrap_or_default();
    format!("{} {}{idle} — {}", r.state, ago(r.for_s), r.decided_by)
}

fn ago(s: f64) -> String {
    match s {
        s if s < 120.0 => format!("{s:.1} s"),
        s if s < 7200.0 => format!("{:.0} min", s / 60.0),
        s => format!("{:.1} h", s / 3600.0),
    }
}

fn describe(host: &str, r: &OwnerReport) -> String {
    let mut out = format!("{host}: {}\n", summary(r));
    for s in &r.sources {
        let last = s
            .last_activity_s
            .map(|a| format!(" (last activity {} ago)", ago(a)))
            .unwrap_or_default();
        let mark = if s.active { "on " } else { "off" };
        out.push_str(&format!("  {mark} {:<14} {}{last}\n", s.name, s.sees));
    }
    if let Some(ms) = r.vp_cpu_ms {
        out.push_str(&format!(
            "  VPs used {ms} ms of CPU here since the owner came back\n"
        ));
    }
    out
}
