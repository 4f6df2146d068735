//! migd's command line: its flags, their help, and what each defaults
//! to. What does not live here: reading the config file and overlaying
//! the flags on it (`config`, the binary), running the daemon.
//!
//! (A library type, not the binary's own, so that `mig help-markdown`
//! writes migd's reference from it too.)

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

/// The mig daemon: one per workstation. The first daemon is the master; the
/// others join it with --join. When ready it prints its bound address on one
/// line (and writes it to STATE_DIR/addr); logs go to stderr.
#[derive(Debug, Parser)]
#[command(name = "migd", version)]
pub struct Flags {
    /// TCP address to listen on [default: port 0 (the OS picks it; it is
    /// printed) on 127.0.0.1, or with --join on the local address the
    /// master is reached from].
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Become a worker of the master at HOST:PORT (a name is resolved).
    #[arg(long, value_name = "HOST:PORT", value_parser = crate::config::resolve)]
    pub join: Option<SocketAddr>,
    /// State directory: control socket, address file (default ./migd-state).
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Cluster key file, created 0600 when absent (default STATE_DIR/cluster.key).
    #[arg(long)]
    pub key_file: Option<PathBuf>,
    /// Processors to offer (default: the cores of this machine).
    #[arg(long)]
    pub processors: Option<u32>,
    /// Relative capacity of one processor; skips the start-up benchmark.
    #[arg(long)]
    pub capacity: Option<f64>,
    /// Memory to offer VPs, MB: a VP whose job asks for more (`mig spawn
    /// --mem`) is never placed here [default: the machine's; config
    /// memory_mb].
    #[arg(long, value_name = "MB")]
    pub memory_mb: Option<u64>,
    /// Architecture to report (default: this machine's, e.g. x86_64-linux).
    #[arg(long)]
    pub arch: Option<String>,
    /// Host name (default: the system host name).
    #[arg(long)]
    pub name: Option<String>,
    /// Whose CPU load counts as the owner's: machine (every process but the
    /// VPs and migd), none, or tree:PID (that process tree: for several
    /// daemons on one machine) [default: machine].
    #[arg(long, value_name = "SCOPE")]
    pub owner_scope: Option<String>,
    /// Niceness VPs run at, 0 (as other programs) to 19 (only when nothing
    /// else wants the processor) [default: 10; config vp_nice].
    #[arg(long, value_name = "N")]
    pub vp_nice: Option<i32>,
    /// How long (ms) a VP on a host whose owner is back is resumed, in the
    /// idle class, to reach its safe point for a move [default: 1000;
    /// config safe_point_timeout_ms].
    #[arg(long, value_name = "MS")]
    pub safe_point_timeout_ms: Option<u64>,
    /// On the master: how gang jobs are placed: mig (one slot each where
    /// they run fastest, waiting jobs oldest first, slots merged by moving
    /// jobs, free slots lent), mtat (seed 000 as the paper gives it) or
    /// mtat+repack; or how new work chooses its hosts before mig places it
    /// there: bidding (the daemon where a spawn arrives asks every host for
    /// a bid, by program class, `mig spawn --class`: a cluster whole to the
    /// lowest bid, a group one VP to a host, a simple program stays unless
    /// 3x slower than alone; an idle host takes work from the busiest),
    /// nres (a job that fits where it arrived stays; else the host asks its
    /// neighbours, and they theirs, and each VP goes to the host with the
    /// least room that has an idle processor, its `--mem` and its `--io`,
    /// fewest choices first) or roc
    /// (work starts where asked; a daemon whose host runs dry asks a busy
    /// one for its oldest tasks, which move) [default: mig; config
    /// placement].
    #[arg(long, value_name = "POLICY")]
    pub placement: Option<String>,
    /// TOML config file with [daemon] and [owner] sections; flags override
    /// it; `none` for the built-in defaults only [default:
    /// $XDG_CONFIG_HOME/mig/migd.toml or ~/.config/mig/migd.toml, else
    /// /etc/mig/migd.toml, the first that exists].
    #[arg(long, env = "MIG_CONFIG")]
    pub config: Option<PathBuf>,
    /// Print the settings in force (the config file, the flags and the
    /// defaults together) as a config file, and exit.
    #[arg(long)]
    pub print_config: bool,
    /// With --join and no key file yet: a join token (`mig token create` on
    /// a member prints one) to trade for the cluster key, which is then
    /// kept in the key file. Used once; refused once expired or revoked.
    /// `-` reads it from the first line of stdin.
    #[arg(
        long,
        env = "MIG_JOIN_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,
    /// Run detached (a session of its own, the log in STATE_DIR/migd.log):
    /// return once the daemon is ready, printing its address (how `mig add`
    /// starts one over ssh).
    #[arg(long)]
    pub background: bool,
    /// Serve figures for a monitoring stack (Prometheus's text format) at
    /// http://ADDR/metrics, e.g. 127.0.0.1:9464 [default: off; config
    /// metrics]. Beyond the loopback it needs --metrics-token-file.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
    /// A file holding the token scrapes must give (Authorization: Bearer
    /// TOKEN) [config metrics_token_file].
    #[arg(long, value_name = "FILE")]
    pub metrics_token_file: Option<PathBuf>,
}
