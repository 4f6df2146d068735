//! `mig migrate`: move a running VP to another host.

use std::path::Path;

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use libmig::msg::{Request, Response, Tid};

/// Flags of `mig migrate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub daemon: super::Daemon,
    /// The VP's Tid (t40001), as `mig ps` shows it.
    tid: String,
    /// The host to move it to, as `mig hosts` shows it.
    #[arg(long)]
    to: String,
    /// Return once the move has begun, without waiting for it to end.
    #[arg(long)]
    no_wait: bool,
    /// Print the result as JSON ({"ok", "message"}).
    #[arg(long)]
    json: bool,
}

/// Run it. The VP writes its image at its next safe point and continues on the
/// target with the same Tid; messages for it are held meanwhile. Unless
/// `--no-wait`, this waits (up to `MOVE_WAIT`) until the VP runs there, or
/// until it runs on where it was (the move failed: the master's log says
/// why).
pub fn run(daemon: &Path, a: Args) -> Result<()> {
    let req = Request::Migrate {
        tid: a.tid.clone(),
        to: a.to.clone(),
    };
    let Response::Ok { message } = super::call(daemon, &req)? else {
        bail!("unexpected reply")
    };
    if a.no_wait {
        super::done(&message, a.json);
        return Ok(());
    }
    let started = Instant::now();
    let mut seen_moving = false;
    let tid = a.tid.trim_start_matches('t').trim_start_matches("0x");
    let tid = Tid::from_str_radix(tid, 16).unwrap_or_default();
    loop {
        let Response::Ps(vps) = super::call(daemon, &Request::Ps)? else {
            bail!("unexpected reply")
        };
        let Some(v) = vps.iter().find(|v| v.tid == tid) else {
            bail!(
                "VP {} ended while it moved (`mig jobs` shows how its job ended)",
                a.tid
            )
        };
        let at = v.host.as_deref().unwrap_or("-");
        if v.state == "running" && at == a.to {
            let ms = started.elapsed().as_millis();
            super::done(
                &format!("VP {} moved to {} in {ms} ms", a.tid, a.to),
                a.json,
            );
            return Ok(());
        }
        seen_moving |= v.state.starts_with("moving");
        if v.state == "running" && (seen_moving || started.elapsed() > SETTLE) {
            match &v.move_failed {
                Some(why) => bail!(
                    "VP {} did not move to {}: {why}; it is still on {at}, running as before",
                    a.tid,
                    a.to
                ),
                None => bail!(
                    "VP {} did not move: it is still on {at}, running as before (the master's log, migd.log, \
                     says why)",
                    a.tid
                ),
            }
        }
        if started.elapsed() > MOVE_WAIT {
            bail!(
                "VP {} is still {} after {} s; `mig ps` shows how it ends",
                a.tid,
                v.state,
                MOVE_WAIT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// How long a move may take before `mig migrate` stops waiting.
const MOVE_WAIT: Duration = Duration::from_secs(120);

/// A VP running where it was, after it showed as moving or this long after
/// the move began, did not move.
const SETTLE: Duration = Duration::from_millis(1500);
