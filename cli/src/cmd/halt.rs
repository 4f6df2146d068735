//! `mig halt`: stop every daemon and VP of the virtual machine.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use libmig::msg::{Request, Response};

/// Flags of `mig halt`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub daemon: super::Daemon,
    /// Print the result as JSON ({"ok", "message"}) on stdout.
    #[arg(long)]
    json: bool,
}

/// Run it: ask, then wait (up to 5 s) until the daemon's socket is gone.
/// With no daemon there (nor another of its machine, see
/// `Daemon::path`), there is nothing to halt: it says so and succeeds.
pub fn run(daemon: &Path, a: Args) -> Result<()> {
    if super::gone(daemon) {
        let message = format!(
            "no virtual machine runs at {}: nothing to halt",
            daemon.display()
        );
        if a.json {
            super::done(&message, true);
        } else {
            eprintln!("mig: {message}");
        }
        return Ok(());
    }
    let Response::Ok { message } = super::call(daemon, &Request::Halt)? else {
        bail!("unexpected reply")
    };
    if a.json {
        super::done(&message, true);
    } else {
        eprintln!("{message}");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while daemon.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if daemon.exists() {
        bail!("the daemon did not stop within 5 s; see its log");
    }
    Ok(())
}
