//! `mig suspend` and `mig resume`: stop a job where it is and give its
//! processors to others, and let it run again.

use std::path::Path;

use anyhow::Result;
use libmig::msg::{Request, Response};

/// Flags of `mig suspend` and `mig resume`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub daemon: super::Daemon,
    /// The job (j1), as `mig jobs` shows it.
    job: String,
    /// Print the result as JSON ({"ok", "message"}).
    #[arg(long)]
    json: bool,
}

/// `mig suspend`.
pub fn suspend(daemon: &Path, a: Args) -> Result<()> {
    ask(daemon, Request::Suspend { job: a.job }, a.json)
}

/// `mig resume`.
pub fn resume(daemon: &Path, a: Args) -> Result<()> {
    ask(daemon, Request::Resume { job: a.job }, a.json)
}

fn ask(daemon: &Path, req: Request, json: bool) -> Result<()> {
    if let Response::Ok { message } = super::call(daemon, &req)? {
        super::done(&message, json);
    }
    Ok(())
}
