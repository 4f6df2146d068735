//! `mig balance`: the load-balancing papers' experiments (seeds 002-004),
//! reproduced in simulation and printed as their tables.
//!
//! What does not live here: the simulations (`migd::sim::roc`) and the
//! policies' decisions (`migd::balance`).

use anyhow::{bail, Result};
use migd::sim::roc::{self, Setup, Start};

/// `mig balance` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum BalanceCmd {
    /// Seed 003's Tables 2 and 3: Rate-of-Change against sender-initiated
    /// diffusion on 16 PEs (hypercube, fully connected, workstations), the
    /// tasks starting on every PE (stable) or on half of them (unstable)
    /// and spawning tasks as they end; normalised performance NP =
    /// (T_noLB - T_bal) / (T_noLB - T_opt), 1 the ideal, 0 no gain.
    Roc(RocArgs),
}

/// Flags of `mig balance roc`.
#[derive(Debug, clap::Args)]
pub struct RocArgs {
    /// Task trees to average over (seeds SEED.. SEED+N-1).
    #[arg(long, default_value_t = 10)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Tasks at the start per PE.
    #[arg(long, default_value_t = 16)]
    tasks_per_pe: usize,
    /// Steps one network hop takes (a task's mean work is 20 steps).
    #[arg(long, default_value_t = 2)]
    hop_steps: u64,
    /// Print JSON: {"setup", "rows": [...]}.
    #[arg(long)]
    json: bool,
}

/// Run it.
pub fn run(c: BalanceCmd) -> Result<()> {
    match c {
        BalanceCmd::Roc(a) => roc_tables(a),
    }
}

fn roc_tables(a: RocArgs) -> Result<()> {
    if a.seeds == 0 || a.seeds > 1000 {
        bail!("--seeds must be between 1 and 1000");
    }
    if a.tasks_per_pe == 0 || a.tasks_per_pe > 1000 {
        bail!("--tasks-per-pe must be between 1 and 1000");
    }
    if a.hop_steps > 1000 {
        bail!("--hop-steps must be at most 1000");
    }
    let setup = Setup {
        seed: a.seed,
        tasks_per_pe: a.tasks_per_pe,
        hop_steps: a.hop_steps,
        ..Setup::default()
    };
    let rows = roc::reproduce(&setup, a.seeds);
    if a.json {
        println!("{}", serde_json::json!({"setup": setup, "rows": rows}));
        return Ok(());
    }
    println!(
        "Rate-of-Change (RoC) against sender-initiated diffusion (SID), {} PEs, {} task trees",
        setup.pes, a.seeds
    );
    println!(
        "{:<9} {:<16} {:>8} {:>8} {:>7} {:>7} {:>10} {:>10}",
        "START", "NETWORK", "T_noLB", "T_opt", "NP SID", "NP RoC", "MOVED SID", "MOVED RoC"
    );
    for r in rows {
        println!(
            "{:<9} {:<16} {:>8.0} {:>8.0} {:>7.3} {:>7.3} {:>10.0} {:>10.0}",
            match r.start {
                Start::Stable => "stable",
                Start::Unstable => "unstable",
            },
            r.topology.name(),
            r.t_no_lb,
            r.t_opt,
            r.np_sid,
            r.np_roc,
            r.moved_sid,
            r.moved_roc
        );
    }
    Ok(())
}
