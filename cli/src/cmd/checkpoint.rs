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
            Ok(_) => bail!("unexpected reply"),
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
pub fn restart(daemon: &Path, a: Args) -> Result<()> {
    match super::call(daemon, &Request::Restart { job: a.job })? {
        Response::Ok { message } => super::done(&message, a.json),
        _ => bail!("unexpected reply"),
    }
    Ok(())
}
