//! `migd`: the mig daemon. Parses flags, reads the config file, runs.
//!
//! Exit codes: 0 halted cleanly, 1 could not start or failed, 2 bad usage.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use migd::config::FileConfig;
use migd::flags::Flags;
use migd::Config;

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
        metrics: f.metrics,
        metrics_token_file: f.metrics_token_file,
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
