//! `migd`: the mig daemon. Parses flags, reads the config file, runs.
//!
//! Exit codes: 0 halted cleanly, 1 could not start or failed, 2 bad usage.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use migd::config::FileConfig;
use migd::Config;

/// The mig daemon: one per workstation. The first daemon is the master; the
/// others join it with --join. When ready it prints its bound address on one
/// line (and writes it to STATE_DIR/addr); logs go to stderr.
#[derive(Debug, Parser)]
#[command(name = "migd", version)]
struct Flags {
    /// TCP address to listen on [default: port 0 (the OS picks it; it is
    /// printed) on 127.0.0.1, or with --join on the local address the
    /// master is reached from].
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Become a worker of the master at HOST:PORT (a name is resolved).
    #[arg(long, value_name = "HOST:PORT", value_parser = migd::config::resolve)]
    join: Option<SocketAddr>,
    /// State directory: control socket, address file (default ./migd-state).
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Cluster key file, created 0600 when absent (default STATE_DIR/cluster.key).
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// Processors to offer (default: the cores of this machine).
    #[arg(long)]
    processors: Option<u32>,
    /// Relative capacity of one processor; skips the start-up benchmark.
    #[arg(long)]
    capacity: Option<f64>,
    /// Memory to offer VPs, MB: a VP whose job asks for more (`mig spawn
    /// --mem`) is never placed here [default: the machine's; config
    /// memory_mb].
    #[arg(long, value_name = "MB")]
    memory_mb: Option<u64>,
    /// Architecture to report (default: this machine's, e.g. x86_64-linux).
    #[arg(long)]
    arch: Option<String>,
    /// Host name (default: the system host name).
    #[arg(long)]
    name: Option<String>,
    /// Whose CPU load counts as the owner's: machine (every process but the
    /// VPs and migd), none, or tree:PID (that process tree: for several
    /// daemons on one machine) [default: machine].
    #[arg(long, value_name = "SCOPE")]
    owner_scope: Option<String>,
    /// Niceness VPs run at, 0 (as other programs) to 19 (only when nothing
    /// else wants the processor) [default: 10; config vp_nice].
    #[arg(long, value_name = "N")]
    vp_nice: Option<i32>,
    /// How long (ms) a VP on a host whose owner is back is resumed, in the
    /// idle class, to reach its safe point for a move [default: 1000;
    /// config safe_point_timeout_ms].
    #[arg(long, value_name = "MS")]
    safe_point_timeout_ms: Option<u64>,
    /// On the master: how gang jobs are placed: mig (one slot each where
    /// they run fastest, waiting jobs oldest first, slots merged by moving
    /// jobs, free slots lent), mtat (seed 000 as the paper gives it) or
    /// mtat+repack; or how new work chooses its hosts before mig places it
    /// there: bidding (by program class, `mig spawn --class`: a cluster
    /// whole to the lowest bid, a group one VP to a host, a simple program
    /// stays unless 3x slower than alone; an idle host takes work from the
    /// busiest), nres (each VP to the host with
    /// the least room that has an idle processor, its `--mem` and its
    /// `--io`, fewest choices first) or roc (work starts where asked; a
    /// host running dry asks for the oldest tasks of a busy one, which
    /// move) [default: mig; config placement].
    #[arg(long, value_name = "POLICY")]
    placement: Option<String>,
    /// TOML config file with [daemon] and [owner] sections; flags override
    /// it; `none` for the built-in defaults only [default:
    /// $XDG_CONFIG_HOME/mig/migd.toml or ~/.config/mig/migd.toml, else
    /// /etc/mig/migd.toml, the first that exists].
    #[arg(long, env = "MIG_CONFIG")]
    config: Option<PathBuf>,
    /// Print the settings in force (the config file, the flags and the
    /// defaults together) as a config file, and exit.
    #[arg(long)]
    print_config: bool,
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
    token: Option<String>,
    /// Run detached (a session of its own, the log in STATE_DIR/migd.log):
    /// return once the daemon is ready, printing its address (how `mig add`
    /// starts one over ssh).
    #[arg(long)]
    background: bool,
}

fn main() {
    // The lease guardian a worker starts beside itself (not a user command).
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(migd::guardian::ARG) {
        migd::guardian::run(&args[1..]);
    }
    if let Err(e) = start() {
        eprintln!("migd: {e:#}");
        std::process::exit(1);
    }
}

fn start() -> anyhow::Result<()> {
    let mut f = Flags::parse();
    if f.token.as_deref() == Some("-") {
        let mut line = String::new();
        std::io::stdin()
            .read_line(&mut line)
            .context("reading the join token from stdin")?;
        f.token = Some(line.trim().to_string());
    }
    let mut cfg = Config::new(
        f.state_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from("migd-state")),
    );
    let file = match &f.config {
        Some(p) if p.as_os_str() == "none" => None,
        Some(p) => Some(p.clone()),
        None => Config::default_file(),
    };
    let mut listen_set = f.listen.is_some();
    if let Some(path) = file {
        let (daemon, owner) = Config::read_file(&path)?;
        listen_set |= daemon.listen.is_some();
        cfg.apply(daemon);
        cfg.apply_owner(owner).context("invalid configuration")?;
    }
    // Flags override the file: the same overlay, field by field.
    cfg.apply(FileConfig {
        name: f.name,
        listen: f.listen,
        join: f.join,
        state_dir: f.state_dir,
        key_file: f.key_file,
        processors: f.processors,
        capacity: f.capacity,
        memory_mb: f.memory_mb,
        arch: f.arch,
        safe_point_timeout_ms: f.safe_point_timeout_ms,
        vp_nice: f.vp_nice,
        placement: f.placement,
        ..Default::default()
    });
    cfg.apply_owner(migd::owner::OwnerFile {
        scope: f.owner_scope,
        ..Default::default()
    })
    .context("invalid configuration")?;
    if let (false, Some(master)) = (listen_set, cfg.join) {
        cfg.listen = SocketAddr::new(local_address_towards(master), 0);
    }
    cfg.validate().context("invalid configuration")?;
    if f.background && !f.print_config && cfg.join.is_none() {
        // A master reads the job history it finds; detached, its log is a
        // file: what is damaged there is said here too.
        let (_, damage) = migd::job_files::JobFiles::new(&cfg.state_dir).read_history();
        for what in damage {
            eprintln!("migd: {what}");
        }
    }
    if f.background && !f.print_config {
        let exe = std::env::current_exe().context("finding this program")?;
        let args: Vec<String> = std::env::args().skip(1).collect();
        let addr = migd::background::start(
            &exe,
            &migd::background::child_args(&args),
            &cfg.state_dir,
            f.token.as_deref(),
        )
        .map_err(anyhow::Error::msg)?;
        println!("{addr}");
        return Ok(());
    }
    if f.print_config {
        print!("{}", cfg.effective_toml());
        return Ok(());
    }
    migd::log::init(cfg.log.as_deref()).map_err(anyhow::Error::msg)?;
    if let Some(token) = &f.token {
        key_from_token(&cfg, token)?;
    }
    migd::run(cfg)?;
    Ok(())
}

/// The address of this machine that packets to `master` leave from
/// (nothing is sent: a UDP socket is only connected); 127.0.0.1 if there
/// is no route.
fn local_address_towards(master: SocketAddr) -> std::net::IpAddr {
    let unspecified: SocketAddr = if master.is_ipv4() {
        SocketAddr::from(([0, 0, 0, 0], 0))
    } else {
        SocketAddr::from(([0u16; 8], 0))
    };
    std::net::UdpSocket::bind(unspecified)
        .and_then(|s| s.connect(master).map(|()| s))
        .and_then(|s| s.local_addr())
        .map(|a| a.ip())
        .unwrap_or(std::net::IpAddr::from([127, 0, 0, 1]))
}

/// How long `--token` keeps trying while no master can answer.
const TOKEN_PATIENCE: std::time::Duration = std::time::Duration::from_secs(120);

/// `--token`: trade it at the master for the cluster key, kept in the key
/// file (which must not exist yet: a key already there is used as it is).
fn key_from_token(cfg: &Config, token: &str) -> anyhow::Result<()> {
    let Some(join) = cfg.join else {
        anyhow::bail!("--token is for joining: give --join HOST:PORT too");
    };
    let token = libmig::auth::JoinToken::parse(token).ok_or_else(|| {
        anyhow::anyhow!("--token: not a join token (mig-XXXXXXXX-... as `mig token create` prints)")
    })?;
    if cfg.key_file.exists() {
        migd::log!(
            "the key file {} exists: using it (the join token is not used)",
            cfg.key_file.display()
        );
        return Ok(());
    }
    migd::state_dir::ensure_private_dir(&cfg.state_dir).map_err(anyhow::Error::msg)?;
    // A master being elected, or not listening yet, is waited for.
    let key = migd::server::token::redeem_patiently(
        join,
        &token,
        TOKEN_PATIENCE,
        |tries, why, wait| {
            if tries == 1 || tries.is_power_of_two() {
                migd::warn!(
                    "cannot trade join token {} at {join} yet ({why}): trying again (try {tries}, next in {} ms)",
                    token.id,
                    wait.as_millis()
                );
            }
        },
    )
    .map_err(|why| anyhow::anyhow!("joining {join} with token {}: {why}", token.id))?;
    key.store_new(&cfg.key_file)
        .context("keeping the cluster key")?;
    migd::log!(
        "join token {} traded for the cluster key, kept in {}",
        token.id,
        cfg.key_file.display()
    );
    Ok(())
}
