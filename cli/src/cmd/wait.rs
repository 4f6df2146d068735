//! `mig wait JOB`: wait until a job ends (at once if it has) and exit with
//! its status; `mig logs JOB [-f]`: the output the master kept for it,
//! followed as it comes with `-f` (like `pueue log` and `pueue follow`).

use std::io::Write;
use std::path::Path;

use anyhow::{bail, Result};
use libmig::control::Client;
use libmig::msg::{JobEvent, Request, Response};

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
    /// Print one JSON object a line: {"tid", "host", "stream", "line"}
    /// (stream: stdout or stderr; a line mig itself wrote has only "line").
    #[arg(long)]
    json: bool,
}

/// Run `mig wait`.
pub fn run(daemon: &Path, a: Args) -> Result<()> {
    let mut c = Client::connect(daemon)?;
    c.send(&Request::Wait { job: a.job.clone() })?;
    loop {
        match c.recv(None)?.on_a_wait() {
            JobEvent::JobDone { job, status } => {
                if a.json {
                    println!("{}", serde_json::json!({"job": job, "status": status}));
                } else {
                    eprintln!("mig: job {job} finished with status {status}");
                }
                std::process::exit(status);
            }
            JobEvent::Error { message } => bail!("{message}"),
            // Its output and VP ends, as to `spawn --wait`: `mig logs` shows them.
            JobEvent::Output { .. } | JobEvent::Skipped { .. } | JobEvent::VpDone { .. } => {}
            // Replies to other requests: none comes on a wait.
            JobEvent::Other(_) => {}
        }
    }
}

/// Run `mig logs`.
pub fn logs(daemon: &Path, a: LogsArgs) -> Result<()> {
    let mut offset = 0;
    let stdout = std::io::stdout();
    // With --json, the part of a line whose end has not come yet.
    let mut partial: Vec<u8> = Vec::new();
    loop {
        let req = Request::Logs {
            job: a.job.clone(),
            offset,
        };
        let Response::Log { data, next, ended } = super::call(daemon, &req)? else {
            bail!("unexpected reply")
        };
        if a.json {
            partial.extend_from_slice(&data);
            let whole = partial
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1);
            let mut out = stdout.lock();
            for line in partial
                .drain(..whole)
                .collect::<Vec<u8>>()
                .split(|&b| b == b'\n')
            {
                if !line.is_empty() {
                    writeln!(out, "{}", line_json(&String::from_utf8_lossy(line)))?;
                }
            }
            out.flush()?;
        } else {
            stdout.lock().write_all(&data)?;
            stdout.lock().flush()?;
        }
        offset = next;
        if ended || (!a.follow && data.is_empty()) {
            return Ok(());
        }
        if data.is_empty() {
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
    }
}

/// A kept output line, `[t40001 h0] text` or `[t40001 h0 stderr] text`, as
/// JSON.
fn line_json(line: &str) -> serde_json::Value {
    let parsed = line.strip_prefix('[').and_then(|rest| {
        let (head, text) = rest.split_once("] ")?;
        let mut words = head.split(' ');
        let tid = words.next().filter(|t| t.starts_with('t'))?;
        let host = words.next()?;
        let stream = match words.next() {
            None => "stdout",
            Some("stderr") => "stderr",
            Some(_) => return None,
        };
        Some(serde_json::json!({"tid": tid, "host": host, "stream": stream, "line": text}))
    });
    parsed.unwrap_or_else(|| serde_json::json!({ "line": line }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_lines_become_json_with_their_vp_host_and_stream() {
        assert_eq!(
            line_json("[t40001 h0] out 0"),
            serde_json::json!({"tid": "t40001", "host": "h0", "stream": "stdout", "line": "out 0"})
        );
        assert_eq!(
            line_json("[t40002 h1 stderr] err] 1"),
            serde_json::json!({"tid": "t40002", "host": "h1", "stream": "stderr", "line": "err] 1"})
        );
        assert_eq!(
            line_json("[mig: output past 16 MiB is not kept]"),
            serde_json::json!({"line": "[mig: output past 16 MiB is not kept]"})
        );
    }
}
