//! `mig wait JOB`: wait until a job ends (at once if it has) and exit with
//! its status; `mig logs JOB [-f]`: the output the master kept for it,
//! followed as it comes with `-f` (like `pueue log` and `pueue follow`).

use std::io::Write;
use std::path::Path;

use anyhow::{bail, Result};
use libmig::control::Client;
use libmig::msg::{Request, Response};

/// Flags of `mig wait`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub daemon: super::Daemon,
    /// The job (j3).
    job: String,
    /// Print the end as JSON: {"job", "status"}.
    #[arg(long)]
    json: bool,
}

/// Flags of `mig logs`.
#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    #[command(flatten)]
    pub daemon: super::Daemon,
    /// The job (j3).
    job: String,
    /// Follow: print what comes until the job ends.
    #[arg(short, long)]
    follow: bool,
}

/// Run `mig wait`.
pub fn run(daemon: &Path, a: Args) -> Result<()> {
    let mut c = Client::connect(daemon)?;
    c.send(&Request::Wait { job: a.job.clone() })?;
    loop {
        match c.recv(None)? {
            Response::JobDone { job, status } => {
                if a.json {
                    println!("{}", serde_json::json!({"job": job, "status": status}));
                } else {
                    eprintln!("mig: job {job} finished with status {status}");
                }
                std::process::exit(status);
            }
            Response::Error { message } => bail!("{message}"),
            // Its output and VP ends, as to `spawn --wait`: `mig logs` shows them.
            _ => {}
        }
    }
}

/// Run `mig logs`.
pub fn logs(daemon: &Path, a: LogsArgs) -> Result<()> {
    let mut offset = 0;
    let stdout = std::io::stdout();
    loop {
        let req = Request::Logs {
            job: a.job.clone(),
            offset,
        };
        let Response::Log { data, next, ended } = super::call(daemon, &req)? else {
            bail!("unexpected reply")
        };
        stdout.lock().write_all(&data)?;
        stdout.lock().flush()?;
        offset = next;
        if ended || (!a.follow && data.is_empty()) {
            return Ok(());
        }
        if data.is_empty() {
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
    }
}
