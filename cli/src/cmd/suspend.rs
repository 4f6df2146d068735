//! `mig suspend` and `mig resume`: stop a job where it is and give its
//! processors to others, and let it run again.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
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

/// Ask; a job whose VPs are moving or being restored, or that is being
/// checkpointed, is asked again for up to `BUSY` (a suspend typed right
/// after a move or a restart).
fn ask(daemon: &Path, req: Request, json: bool) -> Result<()> {
    let since = Instant::now();
    loop {
        match super::call(daemon, &req) {
            Ok(Response::Ok { message }) => {
                super::done(&message, json);
                return Ok(());
            }
            Ok(other) => bail!("unexpected reply {}", other.name()),
            Err(e) if busy(&e.to_string()) && since.elapsed() < BUSY => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Does the master say the job will be free in a moment?
fn busy(message: &str) -> bool {
    message.contains("try again when it has moved") || message.contains("try again when it is done")
}

/// How long `mig suspend` waits for a job's moves or checkpoint to end.
const BUSY: Duration = Duration::from_secs(10);
