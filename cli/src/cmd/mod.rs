//! The subcommands of `mig` and their dispatch: one module per subcommand.

pub mod add;
pub mod balance;
pub mod checkpoint;
pub mod completions;
pub mod demo;
pub mod halt;
pub mod hosts;
pub mod jobs;
pub mod kill;
pub mod map;
pub mod migrate;
pub mod owner;
pub mod ps;
pub mod reference;
pub mod sched;
pub mod sim;
pub mod spawn;
pub mod stats;
pub mod suspend;
pub mod token;
pub mod top;
pub mod up;
pub mod wait;

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::{Parser, Subcommand};
use libmig::control::Client;
use libmig::msg::{Request, Response};

/// mig: a virtual machine for networks of workstations that harvests idle
/// cycles and gets out of the owner's way.
///
/// Start a local virtual machine with `mig up`, run a parallel program on it
/// with `mig spawn -n 8 --wait -- ./program`, and stop it with `mig halt`.
#[derive(Debug, Parser)]
#[command(name = "mig", version, about, long_about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// `--daemon`, on the subcommands that talk to one.
#[derive(Debug, Clone, clap::Args)]
pub struct Daemon {
    /// Control socket of the daemon to talk to [default: $MIG_DAEMON, else
    /// the master of the virtual machine `mig up` started]. When no daemon
    /// answers there and the socket is one host's of a `mig up` machine
    /// (DIR/hK/control.sock), another live host of that machine is asked
    /// (said on stderr). A request not answered within MIG_TIMEOUT_S
    /// seconds (default 60) fails, naming the socket.
    #[arg(long = "daemon", value_name = "SOCKET")]
    socket: Option<PathBuf>,
}

impl Daemon {
    /// The socket named: `--daemon`, else `MIG_DAEMON`, else the master of
    /// the machine `mig up` started. (Not clap's `env`: a value from the
    /// environment would then show in the usage line of every error, as if
    /// the flag were required.)
    fn named(&self) -> PathBuf {
        self.socket
            .clone()
            .or_else(|| {
                std::env::var_os("MIG_DAEMON")
                    .filter(|v| !v.is_empty())
                    .map(PathBuf::from)
            })
            .unwrap_or_else(|| up::default_dir().join("h0").join("control.sock"))
    }

    /// The socket to talk to: the one named, or, when no daemon listens
    /// there, a live daemon of the same virtual machine (see [`sibling`]),
    /// which is said on stderr.
    pub fn path(&self) -> PathBuf {
        let named = self.named();
        if !gone(&named) {
            return named;
        }
        match sibling(&named) {
            Some((host, other)) => {
                eprintln!(
                    "mig: no daemon listens at {}: asking {host} at {}, a daemon of the same \
                     virtual machine",
                    named.display(),
                    other.display()
                );
                other
            }
            None => named,
        }
    }
}

/// Does no daemon listen at `sock` (no such socket, or nobody accepts on
/// it)? A socket that refuses us for another reason (another user's) is
/// not gone: the request then fails saying why.
pub fn gone(sock: &std::path::Path) -> bool {
    match std::os::unix::net::UnixStream::connect(sock) {
        Ok(_) => false,
        Err(e) => matches!(
            e.kind(),
            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
        ),
    }
}

/// Another host of the virtual machine whose host `sock` is: for a socket
/// `DIR/hK/control.sock` in a machine directory (`DIR/cluster.key`, as
/// `mig up` lays it out), the first other `DIR/hJ/control.sock` (by J) on
/// which a daemon listens, with its host's name. Any daemon of a machine
/// passes a request on to its master.
fn sibling(sock: &std::path::Path) -> Option<(String, PathBuf)> {
    let host_dir = sock.parent()?;
    let dir = host_dir.parent()?;
    let me = host_dir.file_name()?.to_str()?;
    let number = |name: &str| name.strip_prefix('h')?.parse::<u64>().ok();
    if sock.file_name()? != "control.sock" || number(me).is_none() {
        return None;
    }
    if !dir.join("cluster.key").is_file() {
        return None;
    }
    let mut hosts: Vec<(u64, String)> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            Some((number(&name)?, name))
        })
        .filter(|(_, name)| name != me)
        .collect();
    hosts.sort();
    hosts.into_iter().find_map(|(_, name)| {
        let other = dir.join(&name).join("control.sock");
        (!gone(&other)).then_some((name, other))
    })
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The quick start: a local virtual machine, a parallel job across it, the owner of one host coming back and its VPs moving off mid-run, the answer checked.
    Demo(demo::Args),
    /// Start a local virtual machine of N daemons on loopback.
    Up(up::Args),
    /// List the hosts of the virtual machine: which is the master, which
    /// vote for it (keep its replicated state), and VPs waiting on each.
    /// Warns when fewer than three voters keep the master's state.
    Hosts(hosts::Args),
    /// Start a parallel job: N VPs of a program.
    Spawn(spawn::Args),
    /// List every VP.
    Ps(ps::Args),
    /// List jobs: those running and those that ended (the master keeps the
    /// last 10,000, across restarts), with their state (running,
    /// suspended, exited, killed, or halted: it ran at `mig halt`), hosts,
    /// times and exit status.
    Jobs(jobs::Args),
    /// Show one job in full (and its VPs while it runs).
    Show(jobs::ShowArgs),
    /// Wait until a job ends (at once if it has) and exit with its status
    /// (as `mig spawn --wait` does: 75 when mig ended it because a VP was
    /// lost with its host).
    Wait(wait::Args),
    /// Print the output the master kept for a job (up to 16 MiB of it, for
    /// running jobs and the last 1,000 ended); -f follows it until the job
    /// ends.
    Logs(wait::LogsArgs),
    /// Kill a job (j1) or one VP (t40001).
    Kill(kill::Args),
    /// Suspend a job: its VPs stop where they are (their memory kept) and
    /// its processors go to other jobs until `mig resume`.
    Suspend(suspend::Args),
    /// Let a suspended job run again: it is placed as a waiting job is (on
    /// its own processors if they are free, else others if it can move).
    Resume(suspend::Args),
    /// Move a running VP to another host, with the same Tid and no message
    /// lost: a libmig program writes its image at its next safe point (one
    /// that misses it is saved by its daemon instead); any other program is
    /// saved by its daemon wherever it is.
    Migrate(migrate::Args),
    /// The owner's side: take a host back now, lend it again, or see what
    /// its owner monitor sees (owner reclaim|release|status).
    #[command(subcommand)]
    Owner(owner::OwnerCmd),
    /// Gang slicing: switch lateness per host, skew between hosts, time lost.
    Stats(stats::Args),
    /// Write a consistent checkpoint of a whole job (kept on the master and
    /// another host); with `checkpoint_interval_s` it happens periodically.
    Checkpoint(checkpoint::Args),
    /// Restart a job from its last good checkpoint (automatic when a host dies).
    Restart(checkpoint::Args),
    /// Draw the allocation map (processors x time slots), marking the slot running now.
    Map(map::Args),
    /// A live full-screen view: hosts and owners, the allocation map with
    /// the slot running now, jobs, moves in flight, recent events.
    Top(top::Args),
    /// Start a daemon on another machine over ssh and join it to the
    /// virtual machine (PVM's `add`).
    Add(add::AddArgs),
    /// Take a host out of the virtual machine: its VPs move off, then its
    /// daemon stops (PVM's `delete`).
    Delete(add::DeleteArgs),
    /// Stop every daemon and VP of the virtual machine (when none runs,
    /// says so and succeeds).
    Halt(halt::Args),
    /// Join tokens: let a new machine join without copying the key file
    /// (token create|list|revoke; then `migd --join ADDR --token TOKEN`).
    #[command(subcommand)]
    Token(token::TokenCmd),
    /// Run the scheduler's algorithms on given input and explain the result.
    #[command(subcommand)]
    Sched(sched::SchedCmd),
    /// The load-balancing papers' experiments, reproduced in simulation.
    #[command(subcommand)]
    Balance(balance::BalanceCmd),
    /// Replay a workload trace (SWF) through scheduling policies and compare them.
    #[command(after_long_help = sim::METRICS)]
    Sim(sim::Args),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(completions::Args),
    /// Write man pages (mig.1 and one per subcommand).
    Man(completions::ManArgs),
    /// Print the command-line reference of mig and migd as Markdown
    /// (docs/cli.md).
    #[command(hide = true)]
    HelpMarkdown(reference::Args),
}

/// Run one parsed command line.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Demo(a) => demo::run(a),
        Command::Up(a) => up::run(a),
        Command::Hosts(a) => hosts::run(&a.daemon.path(), a),
        Command::Spawn(a) => spawn::run(&a.daemon.path(), a),
        Command::Ps(a) => ps::run(&a.daemon.path(), a),
        Command::Jobs(a) => jobs::run(&a.daemon.path(), a),
        Command::Show(a) => jobs::show(&a.daemon.path(), a),
        Command::Wait(a) => wait::run(&a.daemon.path(), a),
        Command::Logs(a) => wait::logs(&a.daemon.path(), a),
        Command::Kill(a) => kill::run(&a.daemon.path(), a),
        Command::Suspend(a) => suspend::suspend(&a.daemon.path(), a),
        Command::Resume(a) => suspend::resume(&a.daemon.path(), a),
        Command::Migrate(a) => migrate::run(&a.daemon.path(), a),
        Command::Map(a) => map::run(&a.daemon.path(), a),
        Command::Top(a) => top::run(&a.daemon.path(), a),
        Command::Stats(a) => stats::run(&a.daemon.path(), a),
        Command::Checkpoint(a) => checkpoint::checkpoint(&a.daemon.path(), a),
        Command::Restart(a) => checkpoint::restart(&a.daemon.path(), a),
        Command::Owner(c) => owner::run(&c.daemon().path(), c),
        Command::Add(a) => add::add(&a.daemon.path(), a),
        Command::Delete(a) => add::delete(&a.daemon.path(), a),
        Command::Halt(a) => halt::run(&a.daemon.path(), a),
        Command::Token(c) => token::run(&c.daemon().path(), c),
        Command::Sched(c) => sched::run(c),
        Command::Sim(a) => sim::run(a),
        Command::Balance(c) => balance::run(c),
        Command::Completions(a) => completions::run(a),
        Command::Man(a) => completions::man(a),
        Command::HelpMarkdown(a) => reference::run(a),
    }
}

/// Ask the daemon; an `Error` reply becomes an error. A question that
/// changes nothing (hosts, ps, map, stats) asked while the master changes
/// is asked again, for up to `MASTER_CHANGE` (an election takes about a
/// second); anything else is asked once.
pub fn call(daemon: &std::path::Path, req: &Request) -> Result<Response> {
    let read_only = matches!(
        req,
        Request::Hosts
            | Request::Ps
            | Request::Map
            | Request::Stats
            | Request::TokenList
            | Request::Jobs
            | Request::Logs { .. }
    );
    let since = std::time::Instant::now();
    loop {
        let mut c = Client::connect(daemon)?;
        match c.call(req)? {
            Response::Error { message }
                if read_only && master_changing(&message) && since.elapsed() < MASTER_CHANGE =>
            {
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            Response::Error { message } => bail!("{message}"),
            r => return Ok(r),
        }
    }
}

/// `1 job`, `2 jobs`: a count and its noun, plural unless one.
pub fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// Say that a request was done: its message, or with `--json` one object
/// `{"ok": true, "message": ...}` (a failure is an error, on stderr).
pub fn done(message: &str, json: bool) {
    if json {
        println!("{}", serde_json::json!({"ok": true, "message": message}));
    } else {
        println!("{message}");
    }
}

/// How long a question that changes nothing is asked again while the
/// master changes.
const MASTER_CHANGE: std::time::Duration = std::time::Duration::from_secs(10);

/// Does a daemon's error say only that the master is changing?
fn master_changing(message: &str) -> bool {
    message.contains("stopped being the master before its answer was safe")
        || message.contains("the master went away before it answered")
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        // clap's own checks: defaults among a flag's values, no two flags
        // of one name, ...
        super::Cli::command().debug_assert();
    }
}
