//! `mig kill`: kill a job or one VP.

use std::path::Path;

use anyhow::Result;
use libmig::msg::{Request, Response};

/// Flags of `mig kill`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub daemon: super::Daemon,
    /// A job id (j1) or a VP's Tid (t40001), as `mig ps` shows them.
    target: String,
    /// Print the result as JSON ({"ok", "message"}).
    #[arg(long)]
    json: bool,
}

/// Run it.
pub fn run(daemon: &Path, a: Args) -> Result<()> {
    if let Response::Ok { message } = super::call(daemon, &Request::Kill { target: a.target })? {
        super::done(&message, a.json);
    }
    Ok(())
}
