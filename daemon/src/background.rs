//! `migd --background`: start the daemon detached from the terminal (and
//! from the ssh session that started it: `mig add`), its log in
//! `STATE_DIR/migd.log`, and return once it is ready, printing its address,
//! or fail with the last lines of its log.
//!
//! What does not live here: the daemon itself (`crate::server`), reading
//! flags (the `migd` binary).

use std::io::{BufRead, BufReader};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// The environment variable a join token reaches the detached daemon in
/// (never its command line, which every local user can read).
pub const TOKEN_ENV: &str = "MIG_JOIN_TOKEN";

/// The arguments to start the detached daemon with: `args` (this process's,
/// without the program name) less `--background` and any `--token`.
pub fn child_args(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut skip_value = false;
    for a in args {
        if std::mem::take(&mut skip_value) {
            continue;
        }
        match a.as_str() {
            "--background" => {}
            "--token" => skip_value = true,
            _ if a.starts_with("--token=") => {}
            _ => out.push(a.clone()),
        }
    }
    out
}

/// Start `exe args` in a session of its own, stdin from /dev/null, stderr
/// appended to `state_dir/migd.log`, `token` in its environment; wait for
/// the address it prints when ready and return it.
pub fn start(
    exe: &Path,
    args: &[String],
    state_dir: &Path,
    token: Option<&str>,
) -> Result<String, String> {
    crate::state_dir::ensure_private_dir(state_dir)?;
    let log_path = state_dir.join("migd.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&log_path)
        .map_err(|e| format!("opening {}: {e}", log_path.display()))?;
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .env_remove(TOKEN_ENV);
    if let Some(t) = token {
        cmd.env(TOKEN_ENV, t);
    }
    // SAFETY: setsid is async-signal-safe; nothing else runs between fork
    // and exec.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()?;
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("starting {}: {e}", exe.display()))?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        // The first line is the address; the pipe is then let go (the
        // daemon writes nothing else there).
        let _ = BufReader::new(out).read_line(&mut line);
    }
    let addr = line.trim().to_string();
    if !addr.is_empty() {
        return Ok(addr);
    }
    let _ = child.wait();
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(5).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    Err(format!(
        "the daemon did not start (its log, {}):\n{}",
        log_path.display(),
        tail.join("\n")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_detached_daemon_is_started_without_background_or_a_token_on_its_command_line() {
        let args: Vec<String> = [
            "--background",
            "--join",
            "127.0.0.1:9",
            "--token",
            "mig-secret",
            "--name",
            "h4",
            "--token=mig-other",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(child_args(&args), ["--join", "127.0.0.1:9", "--name", "h4"]);
    }
}
