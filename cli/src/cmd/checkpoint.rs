//! `mig checkpoint` and `mig restart`: a consistent checkpoint of a whole
//! job, and going back to it.

use std::path::Path;

use anyhow::{bail, Result};
use libmig::msg::{Request, Response};

/// Flags of `mig checkpoint` and `mig restart`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The job (j1), as `mig ps` shows it.
    job: String,
    /// Print the result as JSON ({"ok", "message"}).
    #[arg(long)]
    json: bool,
}

/// `mig checkpoint JOB`: every VP stops at its next safe point, the
/// messages between them are taken in, each writes its image; the images
/// are kept on the master and on another host. Returns when it is done.
pub fn checkpoint(daemon: &Path, a: Args) -> Result<()> {
    match super::call(daemon, &Request::Checkpoint { job: a.job })? {
        Response::Ok { message } => super::done(&message, a.json),
        _ => bail!("unexpected reply"),
    }
    Ok(())
}

/// `mig restart JOB`: end every VP of the job and start it again from the
/// job's last good checkpoint (as happens by itself when a host dies).
pub fn restart(daemon: &Path, a: Args) -> Result<()> {
    match super::call(daemon, &Request::Restart { job: a.job })? {
        Response::Ok { message } => super::done(&message, a.json),
        _ => bail!("unexpected reply"),
    }
    Ok(())
}
