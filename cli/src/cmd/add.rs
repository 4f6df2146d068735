//! `mig add HOST` and `mig delete HOST`: host management from the console,
//! as PVM's `add` and `delete`. Add starts a daemon on HOST through a remote
//! shell (ssh) that joins with a join token, and waits until the master
//! lists it; delete takes the host back from the pool, waits until its VPs
//! have moved off, then has its daemon stop and the master forget it.
//!
//! What does not live here: the join itself (`migd --join --token`), the
//! moves (the master's owner handling).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use libmig::msg::{HostInfo, OwnerAction, Request, Response, Tid, VpInfo};

/// Flags of `mig add`.
#[derive(Debug, clap::Args)]
#[command(
    after_long_help = "Example:\n  mig add node7\n  mig add node7 -- --processors 4 \
                             --owner-scope machine\n\nThe master's address must be one node7 \
                             can reach: a master started with `--listen 127.0.0.1:0` (as by \
                             `mig up`) is reached from this machine only."
)]
pub struct AddArgs {
    #[command(flatten)]
    pub daemon: super::Daemon,
    /// The machine to start a daemon on, as the remote shell takes it
    /// (node7, user@node7).
    host: String,
    /// The remote shell: a command and its flags, given HOST and then the
    /// command line to run there (as ssh is).
    #[arg(long, env = "MIG_RSH", default_value = "ssh", value_name = "COMMAND")]
    rsh: String,
    /// The daemon program on HOST.
    #[arg(long, default_value = "migd", value_name = "PATH")]
    migd: String,
    /// The host's name in the virtual machine [default: HOST without user@].
    #[arg(long)]
    name: Option<String>,
    /// The daemon's state directory on HOST (relative: to the remote
    /// shell's working directory, the home directory for ssh).
    #[arg(long, default_value = ".local/state/mig", value_name = "DIR")]
    state_dir: String,
    /// How long to wait for the host to join, in seconds.
    #[arg(long, default_value_t = 60, value_name = "S")]
    timeout: u64,
    /// Print the result as JSON ({"ok", "message", "host", "address"}).
    #[arg(long)]
    json: bool,
    /// More flags for the daemon (after --), e.g. -- --processors 4.
    #[arg(last = true, value_name = "MIGD_FLAGS")]
    extra: Vec<String>,
}

/// Flags of `mig delete`.
#[derive(Debug, clap::Args)]
pub struct DeleteArgs {
    #[command(flatten)]
    pub daemon: super::Daemon,
    /// The host, as `mig hosts` names it.
    host: String,
    /// How long to wait for its VPs to move off, in seconds; past it the
    /// host stays taken back (`mig owner release HOST` lends it again).
    #[arg(long, default_value_t = 120, value_name = "S")]
    timeout: u64,
    /// Print the result as JSON ({"ok", "message"}).
    #[arg(long)]
    json: bool,
}

/// `mig add HOST`.
pub fn add(daemon: &Path, a: AddArgs) -> Result<()> {
    let name = a
        .name
        .clone()
        .unwrap_or_else(|| a.host.rsplit('@').next().unwrap_or(&a.host).to_string());
    if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        bail!("the host name {name:?} is not usable: give one with --name");
    }
    let known = hosts(daemon)?;
    if known.iter().any(|h| h.alive && h.facts.name == name) {
        bail!("the virtual machine already has a live host named {name}; `mig hosts` lists them");
    }
    let master = known
        .iter()
        .find(|h| h.master)
        .map(|h| h.facts.addr.clone())
        .context("the daemon named no master")?;
    let Response::Token { token, id, .. } =
        super::call(daemon, &Request::TokenCreate { ttl_s: 600 })?
    else {
        bail!("unexpected reply")
    };
    let mut words = vec![
        a.migd.clone(),
        "--background".into(),
        "--join".into(),
        master.clone(),
        "--token".into(),
        "-".into(),
        "--state-dir".into(),
        a.state_dir.clone(),
        "--name".into(),
        name.clone(),
    ];
    words.extend(a.extra.iter().cloned());
    let remote: Vec<String> = words.iter().map(|w| shell_quote(w)).collect();
    let started = run_remote(&a.rsh, &a.host, &remote.join(" "), &token);
    let address = match started {
        Ok(addr) => addr,
        Err(e) => {
            // The token is of no use to anyone now.
            let _ = super::call(daemon, &Request::TokenRevoke { id });
            return Err(e);
        }
    };
    if !a.json {
        eprintln!(
            "mig: a daemon started on {} at {address}; waiting for it to join",
            a.host
        );
    }
    let deadline = Instant::now() + Duration::from_secs(a.timeout);
    let joined = loop {
        if let Some(h) = hosts(daemon)?
            .into_iter()
            .find(|h| h.alive && h.facts.name == name)
        {
            break h;
        }
        if Instant::now() >= deadline {
            bail!(
                "the daemon on {} did not join within {} s; see its log, {}/migd.log there",
                a.host,
                a.timeout,
                a.state_dir
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let message = format!(
        "{name} joined: {} processor{} of {} (capacity {:.2}) at {}",
        joined.facts.processors,
        if joined.facts.processors == 1 {
            ""
        } else {
            "s"
        },
        joined.facts.arch,
        joined.facts.capacity,
        joined.facts.addr
    );
    if a.json {
        println!(
            "{}",
            serde_json::json!({"ok": true, "message": message, "host": name,
                "address": joined.facts.addr})
        );
    } else {
        println!("{message}");
    }
    Ok(())
}

/// `mig delete HOST`.
pub fn delete(daemon: &Path, a: DeleteArgs) -> Result<()> {
    let host = a.host.as_str();
    let mut on_host = Vec::new();
    match hosts(daemon)?.iter().find(|h| h.facts.name == host) {
        None => bail!("no host {host:?}; `mig hosts` lists them"),
        Some(h) if h.master => bail!(
            "{host} is the master's host: stop the whole virtual machine with `mig halt`, or \
             stop its daemon and let another host take over"
        ),
        Some(h) if !h.alive => {}
        Some(_) => {
            on_host = vps_on(daemon, host)?;
            // Out of the pool: nothing new goes there, and what is there moves.
            super::call(
                daemon,
                &Request::Owner {
                    action: OwnerAction::Reclaim,
                    host: Some(host.to_string()),
                },
            )?;
            drain(daemon, host, Duration::from_secs(a.timeout), a.json)?;
        }
    }
    let Response::Ok { message } = super::call(
        daemon,
        &Request::Delete {
            host: host.to_string(),
        },
    )?
    else {
        bail!("unexpected reply")
    };
    super::done(&with_fates(message, &on_host, &ps(daemon)?, host), a.json);
    Ok(())
}

/// The VPs on `host`: (Tid, job).
fn vps_on(daemon: &Path, host: &str) -> Result<Vec<(Tid, String)>> {
    Ok(ps(daemon)?
        .into_iter()
        .filter(|v| v.host.as_deref() == Some(host))
        .map(|v| (v.tid, v.job))
        .collect())
}

fn ps(daemon: &Path) -> Result<Vec<VpInfo>> {
    match super::call(daemon, &Request::Ps)? {
        Response::Ps(p) => Ok(p),
        other => bail!("unexpected reply {}", other.name()),
    }
}

/// `message`, and what became of the VPs that were on `host` when it was
/// taken back and did not move off (their host died meanwhile, or they
/// ended): a VP `ps` no longer lists went with its job.
fn with_fates(message: String, were: &[(Tid, String)], now: &[VpInfo], host: &str) -> String {
    let gone: Vec<String> = were
        .iter()
        .filter(|(tid, _)| {
            !now.iter()
                .any(|v| v.tid == *tid && v.host.as_deref() != Some(host) && v.state != "exited")
        })
        .map(|(tid, job)| format!("t{tid:x} of {job}"))
        .collect();
    if gone.is_empty() {
        return message;
    }
    format!(
        "{message}; {} did not move off and ended ({}): `mig show JOB` says why",
        libmig::words::count(gone.len() as u64, "VP", "VPs"),
        gone.join(", ")
    )
}

/// Wait until no VP is on `host` or waits there, saying how many are left
/// when that changes.
fn drain(daemon: &Path, host: &str, timeout: Duration, quiet: bool) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let mut said = None;
    loop {
        let Some(h) = hosts(daemon)?.into_iter().find(|h| h.facts.name == host) else {
            bail!("{host} left the virtual machine meanwhile");
        };
        let left = h.vps as usize + h.waiting.len();
        if left == 0 {
            return Ok(());
        }
        if said != Some(left) && !quiet {
            eprintln!(
                "mig: {host} is taken back from the pool; {left} VP{} still to move off",
                if left == 1 { "" } else { "s" }
            );
            said = Some(left);
        }
        if Instant::now() >= deadline {
            let why: Vec<String> = h
                .waiting
                .iter()
                .map(|(tid, why)| format!("t{tid:x}: {why}"))
                .collect();
            bail!(
                "{host} still holds {left} VP{} after {} s{}{}; it stays out of the pool \
                 (`mig owner release {host}` lends it again)",
                if left == 1 { "" } else { "s" },
                timeout.as_secs(),
                if why.is_empty() { "" } else { ": " },
                why.join("; ")
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn hosts(daemon: &Path) -> Result<Vec<HostInfo>> {
    match super::call(daemon, &Request::Hosts)? {
        Response::Hosts(h) => Ok(h),
        other => bail!("unexpected reply {}", other.name()),
    }
}

/// Run `command` on `host` through the remote shell `rsh` (split on
/// spaces), the join token on its stdin; the address the daemon printed.
fn run_remote(rsh: &str, host: &str, command: &str, token: &str) -> Result<String> {
    let mut parts = rsh.split_whitespace();
    let program = parts.next().context("--rsh is empty")?;
    let mut child = Command::new(program)
        .args(parts)
        .arg(host)
        .arg(command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting the remote shell {program:?} (see --rsh)"))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A daemon that fails before reading it closes the pipe: its
        // reason comes on stderr.
        let _ = writeln!(stdin, "{token}");
    }
    let out = child
        .wait_with_output()
        .with_context(|| format!("waiting for {program} {host}"))?;
    let address = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || address.is_empty() {
        let err = String::from_utf8_lossy(&out.stderr);
        bail!(
            "starting a daemon on {host} through `{rsh}` failed ({}):\n{}",
            out.status,
            err.trim_end()
        );
    }
    Ok(address.lines().last().unwrap_or_default().to_string())
}

/// `word` as one word for a POSIX shell.
fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@,+%".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_reach_the_remote_shell_as_they_were() {
        assert_eq!(shell_quote("--name"), "--name");
        assert_eq!(shell_quote("127.0.0.1:4000"), "127.0.0.1:4000");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's $HOME"), r"'it'\''s $HOME'");
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("printf %s {}", shell_quote("it's $HOME; `x`")))
            .output()
            .expect("sh");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "it's $HOME; `x`");
    }
}
