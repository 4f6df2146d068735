//! `mig checkpoint` and `mig restart`: a consistent checkpoint of a whole
//! job, and going back to it.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use libmig::msg::{Request, Response};

/// Flags of `mig checkpoint` and `mig restart`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub daemon: super::Daemon,
    /// The job (j1), as `mig ps` shows it.
    job: String,
    /// Print the result as JSON ({"ok", "message"}).
    #[arg(long)]
    json: bool,
}

/// `mig checkpoint JOB`: every VP stops at its next safe point, the
/// messages between them are taken in, each writes its image; the images
/// are kept on the master and on another host. Returns when it is done.
/// A job whose VPs are still starting or moving is asked again for up to
/// `NOT_YET` (a checkpoint typed right after a spawn or a move).
pub fn checkpoint(daemon: &Path, a: Args) -> Result<()> {
    let req = Request::Checkpoint { job: a.job };
    let since = Instant::now();
    loop {
        match super::call(daemon, &req) {
            Ok(Response::Ok { message }) => {
                super::done(&message, a.json);
                return Ok(());
            }
            Ok(other) => bail!("unexpected reply {}", other.name()),
            Err(e)
                if e.to_string().contains("not all of its VPs are running")
                    && since.elapsed() < NOT_YET =>
            {
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => return Err(e),
        }
    }
}

/// How long `mig checkpoint` waits for a job's VPs to be running.
const NOT_YET: Duration = Duration::from_secs(10);

/// `mig restart JOB`: end every VP of the job and start it again from the
/// job's last good checkpoint (as happens by itself when a host dies).
/// Returns once no VP of the job is still being restored (up to
/// `RESTART_WAIT`), so that what is typed next finds it running.
pub fn restart(daemon: &Path, a: Args) -> Result<()> {
    let Response::Ok { message } = super::call(daemon, &Request::Restart { job: a.job.clone() })?
    else {
        bail!("unexpected reply")
    };
    let since = Instant::now();
    loop {
        let Response::Ps(vps) = super::call(daemon, &Request::Ps)? else {
            bail!("unexpected reply")
        };
        let mine: Vec<_> = vps.iter().filter(|v| v.job == a.job).collect();
        if mine.is_empty() {
            bail!("{message}, but it ended before its VPs ran again (`mig jobs` shows how)");
        }
        // Back once none is still being restored or started (one on a
        // host whose owner came back meanwhile is back, stopped there).
        let back = !mine
            .iter()
            .any(|v| v.state.starts_with("restoring") || v.state == "starting");
        if back {
            let ms = since.elapsed().as_millis();
            let how = if mine.iter().all(|v| v.state == "running") {
                format!(
                    "{} again in {ms} ms",
                    libmig::words::count(mine.len() as u64, "VP runs", "VPs run")
                )
            } else {
                format!(
                    "its VPs are back in {ms} ms, not all running (`mig ps {}`)",
                    a.job
                )
            };
            super::done(&format!("{message}: {how}"), a.json);
            return Ok(());
        }
        if since.elapsed() > RESTART_WAIT {
            bail!(
                "{message}, and after {} s not every VP runs again; `mig ps {}` shows how it goes",
                RESTART_WAIT.as_secs(),
                a.job
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// How long `mig restart` waits for the job's VPs to run again.
const RESTART_WAIT: Duration = Duration::from_secs(120);
