//! `mig migrate`: move a running VP to another host.

use std::path::Path;

use anyhow::Result;
use libmig::msg::{Request, Response};

/// Flags of `mig migrate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The VP's Tid (t40001), as `mig ps` shows it.
    tid: String,
    /// The host to move it to, as `mig hosts` shows it.
    #[arg(long)]
    to: String,
    /// Print the result as JSON ({"ok", "message"}).
    #[arg(long)]
    json: bool,
}

/// Run it. The VP checkpoints at its next safe point and goes on on the
/// target with the same Tid; messages for it are held meanwhile. `mig ps`
/// shows it as `moving` until it runs there.
pub fn run(daemon: &Path, a: Args) -> Result<()> {
    let req = Request::Migrate {
        tid: a.tid,
        to: a.to,
    };
    if let Response::Ok { message } = super::call(daemon, &req)? {
        super::done(&message, a.json);
    }
    Ok(())
}
