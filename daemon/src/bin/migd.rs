//! `migd`: the mig daemon. Parses flags, reads the config file, runs.
//!
//! Exit codes: 0 halted cleanly, 1 could not start or failed, 2 bad usage.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use migd::Config;

/// The mig daemon: one per workstation. The first daemon is the master; the
/// others join it with --join. When ready it prints its bound address on one
/// line (and writes it to STATE_DIR/addr); logs go to stderr.
#[derive(Debug, Parser)]
#[command(name = "migd", version, about)]
struct Flags {
    /// TCP address to listen on [default: 127.0.0.1:0, the OS picks the port and it is printed].
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Become a worker of the master at this address.
    #[arg(long)]
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
    /// Architecture to report (default: this machine's, e.g. x86_64-linux).
    #[arg(long)]
    arch: Option<String>,
    /// Host name (default: the system host name).
    #[arg(long)]
    name: Option<String>,
    /// TOML config file with a [daemon] section; flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let f = Flags::parse();
    let state_dir = f
        .state_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("migd-state"));
    let mut cfg = Config::new(state_dir.clone());
    if let Some(path) = &f.config {
        cfg.apply(Config::read_file(path)?);
    }
    if f.state_dir.is_some() {
        cfg.key_file = state_dir.join("cluster.key");
        cfg.state_dir = state_dir;
    }
    if let Some(v) = f.listen {
        cfg.listen = v;
    }
    if f.join.is_some() {
        cfg.join = f.join;
    }
    if let Some(v) = f.key_file {
        cfg.key_file = v;
    }
    if let Some(v) = f.processors {
        cfg.processors = v;
    }
    if f.capacity.is_some() {
        cfg.capacity = f.capacity;
    }
    if let Some(v) = f.arch {
        cfg.arch = v;
    }
    if let Some(v) = f.name {
        cfg.name = v;
    }
    cfg.validate().context("invalid configuration")?;
    migd::run(cfg).context("migd")?;
    Ok(())
}
