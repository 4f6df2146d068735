//! `mig balance`: the load-balancing papers' experiments (seeds 002-004),
//! reproduced in simulation and printed as their tables.
//!
//! What does not live here: the simulations (`migd::sim::roc`) and the
//! policies' decisions (`migd::balance`).

use anyhow::{bail, Result};
use migd::balance::roc::Thresholds;
use migd::sim::roc::{self, Setup, Start};
use migd::sim::{nres, rommel};

/// `mig balance` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum BalanceCmd {
    /// Seed 003's Tables 2-4: Rate-of-Change against sender-initiated
    /// diffusion on 16 PEs (hypercube, fully connected, workstations), the
    /// tasks starting on every PE (Table 2, stable), on half of them
    /// (Table 3, unstable) or arriving as jobs on random PEs (Table 4) and
    /// spawning tasks as they end. Each PE samples its own load at its own
    /// adaptive interval, keeps its own source and sink tables from the
    /// messages it sees, and every message takes the network's delay;
    /// normalised performance NP = (T_noLB - T_bal) / (T_noLB - T_opt), 1
    /// the ideal, 0 no gain.
    Roc(RocArgs),
    /// Seed 002's Figures 6-8: mean response time of simple programs,
    /// clusters, distributed groups and all, five processor-sharing sites,
    /// against cluster size (1-15 tasks, 150 s a cluster, 60% busy), under
    /// workloads at their extremes, or against utilisation: no balancing
    /// (nlb), shortest queue first (sqf, sqf' paying for transfers) and the
    /// paper's bidding, whose requests for bids and bids take time.
    Rommel(RommelArgs),
    /// Seed 004's Figures 7-9: eta = (T_no - T_my) / (T_no - T_lb)
    /// against the nodes' mean capacity and against the network's mean
    /// latency, for three trigger lines (Max 25, 20, 15: the steepest
    /// slope first) and 1-, 2- and 3-resource nodes (4 with --network);
    /// T_my against the load for jobs declaring 1, 2 or 3 needs. 32
    /// nodes, jobs in bursts; status requests and jobs take the links'
    /// latency, and a node maps its burst when its own queue has drained
    /// (Time_IQ).
    Nres(NresArgs),
}

/// Flags of `mig balance nres`.
#[derive(Debug, clap::Args)]
pub struct NresArgs {
    /// Which figure: 7 (eta against capacity), 8 (against latency) or 9
    /// (T_my against load, 1-3 needs declared); all three without it.
    #[arg(long, value_parser = clap::value_parser!(u8).range(7..=9))]
    figure: Option<u8>,
    /// Grids to average over (seeds SEED.. SEED+N-1).
    #[arg(long, default_value_t = 5)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Work offered over what the grid can do while jobs arrive (Figures
    /// 7 and 8).
    #[arg(long, default_value_t = 0.8)]
    load: f64,
    /// Mean jobs a burst (bursts of 1 to twice it).
    #[arg(long, default_value_t = 10)]
    burst: usize,
    /// Figures 7 and 8 for 4-resource nodes too: the network as a fourth
    /// resource (each node's link throughput, each job's data rate; not
    /// in the paper).
    #[arg(long)]
    network: bool,
    /// Print JSON: {"setup", "capacity": [...], "latency": [...], "load": [...]}.
    #[arg(long)]
    json: bool,
}

/// Flags of `mig balance rommel`.
#[derive(Debug, clap::Args)]
pub struct RommelArgs {
    /// Which figure: 6 (against cluster size), 7 (workloads at their
    /// extremes) or 8 (against utilisation).
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u8).range(6..=8))]
    figure: u8,
    /// Subruns per point (seeds SEED.. SEED+N-1).
    #[arg(long, default_value_t = 10)]
    subruns: u64,
    /// Seconds each subrun lasts.
    #[arg(long, default_value_t = 10_000.0)]
    duration: f64,
    /// The first seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Extra work per remote task of a cluster (psi_C; 0.2 as the paper's
    /// section 3.2 uses).
    #[arg(long, default_value_t = 0.2)]
    psi: f64,
    /// Seconds a request for bids or a bid takes to arrive; decisions wait
    /// for the round trip.
    #[arg(long, default_value_t = 0.01)]
    latency: f64,
    /// CPU seconds a request for bids costs each site, bidding or deciding
    /// (the paper's delta_alg: 0 in its figures, 0.01 in its second
    /// experiment).
    #[arg(long, default_value_t = 0.0)]
    alg_cost: f64,
    /// Print JSON: {"figure", "setup", "rows": [...]}.
    #[arg(long)]
    json: bool,
}

/// Flags of `mig balance roc`.
#[derive(Debug, clap::Args)]
pub struct RocArgs {
    /// Which table: 2 (stable start), 3 (unstable) or 4 (arrivals); all
    /// three without it.
    #[arg(long, alias = "figure", value_parser = clap::value_parser!(u8).range(2..=4))]
    table: Option<u8>,
    /// Task trees to average over (seeds SEED.. SEED+N-1).
    #[arg(long, default_value_t = 10)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Tasks per PE (at the start, or arriving).
    #[arg(long, default_value_t = 16)]
    tasks_per_pe: usize,
    /// Slices one network hop takes (a task's mean work is 20 slices):
    /// every message and task takes it.
    #[arg(long, default_value_t = 2)]
    hop_steps: u64,
    /// Slices between samples: SID's, fixed Rate-of-Change's, adaptive
    /// Rate-of-Change's first.
    #[arg(long, default_value_t = 2)]
    interval: u64,
    /// Rate-of-Change's thresholds in tasks: critical, low, high.
    #[arg(long, value_delimiter = ',', default_values_t = [1.0, 2.0, 4.0])]
    thresholds: Vec<f64>,
    /// Of a slice, what handling a message costs its receiver (a sample
    /// costs as much).
    #[arg(long, default_value_t = 0.01)]
    msg_cost: f64,
    /// Print JSON: {"setup", "rows": [...]}.
    #[arg(long)]
    json: bool,
}

/// Run it.
pub fn run(c: BalanceCmd) -> Result<()> {
    match c {
        BalanceCmd::Roc(a) => roc_tables(a),
        BalanceCmd::Rommel(a) => rommel_figure(a),
        BalanceCmd::Nres(a) => nres_figures(a),
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
    if a.interval == 0 || a.interval > 1000 {
        bail!("--interval must be between 1 and 1000");
    }
    if !(a.msg_cost.is_finite() && (0.0..=1.0).contains(&a.msg_cost)) {
        bail!("--msg-cost must be between 0 and 1");
    }
    let [critical, low, high] = a.thresholds[..] else {
        bail!("--thresholds takes three numbers: critical,low,high");
    };
    let thresholds = Thresholds {
        critical,
        low,
        high,
    };
    if let Err(e) = thresholds.check() {
        bail!("--thresholds: {e}");
    }
    let setup = Setup {
        seed: a.seed,
        tasks_per_pe: a.tasks_per_pe,
        hop_steps: a.hop_steps,
        interval: a.interval,
        thresholds,
        msg_cost: a.msg_cost,
        sample_cost: a.msg_cost,
        ..Setup::default()
    };
    let rows: Vec<roc::Row> = Start::ALL
        .iter()
        .filter(|s| a.table.is_none_or(|t| t == s.table()))
        .flat_map(|&start| roc::table(&setup, start, a.seeds))
        .collect();
    if a.json {
        println!("{}", serde_json::json!({"setup": setup, "rows": rows}));
        return Ok(());
    }
    println!(
        "Rate-of-Change (RoC) against sender-initiated diffusion (SID), {} PEs, {} task trees, hop {} slices, thresholds {critical}/{low}/{high}",
        setup.pes, a.seeds, setup.hop_steps
    );
    println!(
        "{:<5} {:<9} {:<16} {:>7} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>7} {:>6} {:>6} {:>6}",
        "TABLE",
        "START",
        "NETWORK",
        "T_noLB",
        "T_opt",
        "NP SID",
        "NP RoC",
        "fixed",
        "MOVED",
        "RoC",
        "MSGS",
        "RoC",
        "SAMPL",
        "fixed"
    );
    for r in rows {
        println!(
            "{:<5} {:<9} {:<16} {:>7.0} {:>6.0} {:>6.3} {:>6.3} {:>6.3} {:>6.0} {:>6.0} {:>7.0} {:>6.0} {:>6.0} {:>6.0}",
            r.start.table(),
            r.start.name(),
            r.topology.name(),
            r.t_no_lb,
            r.t_opt,
            r.np_sid,
            r.np_roc,
            r.np_roc_fixed,
            r.moved_sid,
            r.moved_roc,
            r.messages_sid,
            r.messages_roc,
            r.samples_roc / setup.pes as f64,
            r.samples_roc_fixed / setup.pes as f64
        );
    }
    println!("MOVED, MSGS: SID / RoC; SAMPL: samples a PE, adaptive / fixed interval");
    Ok(())
}

fn rommel_figure(a: RommelArgs) -> Result<()> {
    if a.subruns == 0 || a.subruns > 100 {
        bail!("--subruns must be between 1 and 100");
    }
    if !(a.duration.is_finite() && (100.0..=1e6).contains(&a.duration)) {
        bail!("--duration must be between 100 and 1000000 seconds");
    }
    if !(a.psi.is_finite() && (0.0..=10.0).contains(&a.psi)) {
        bail!("--psi must be between 0 and 10");
    }
    if !(a.latency.is_finite() && (0.0..=1000.0).contains(&a.latency)) {
        bail!("--latency must be between 0 and 1000 seconds");
    }
    if !(a.alg_cost.is_finite() && (0.0..=10.0).contains(&a.alg_cost)) {
        bail!("--alg-cost must be between 0 and 10 seconds");
    }
    let setup = rommel::Setup {
        alg_cost: a.alg_cost,
        duration: a.duration,
        seed: a.seed,
        psi: a.psi,
        latency: a.latency,
        ..rommel::Setup::default()
    };
    let (rows, what) = match a.figure {
        6 => (rommel::figure6(&setup, a.subruns), "CLUSTER"),
        7 => (rommel::figure7(&setup, a.subruns), "WORKLOAD"),
        _ => (rommel::figure8(&setup, a.subruns), "RHO"),
    };
    if a.json {
        println!(
            "{}",
            serde_json::json!({"figure": a.figure, "setup": setup, "rows": rows})
        );
        return Ok(());
    }
    println!(
        "Figure {}: mean response time (s), {} sites{}, {} subruns of {} s, psi_C {}, messages {} s, delta_alg {} s",
        a.figure,
        setup.sites,
        if a.figure == 8 { String::new() } else { format!(" {}% busy", setup.utilisation * 100.0) },
        a.subruns,
        setup.duration,
        setup.psi,
        setup.latency,
        setup.alg_cost
    );
    println!(
        "{:>8}  {:>23}  {:>23}  {:>23}  {:>23}  {:>7}",
        what, "ALL nlb/sqf/bidding", "CLUSTERS", "GROUPS", "SIMPLE", "ALL sqf'"
    );
    let three = |f: &dyn Fn(&rommel::Responses) -> f64, r: &rommel::Row| {
        format!(
            "{:>7.0}/{:>7.0}/{:>7.0}",
            f(&r.nlb),
            f(&r.sqf),
            f(&r.bidding)
        )
    };
    for r in &rows {
        println!(
            "{:>8}  {}  {}  {}  {}  {:>7.0}",
            r.setting,
            three(&|x| x.all, r),
            three(&|x| x.cluster, r),
            three(&|x| x.group, r),
            three(&|x| x.simple, r),
            r.sqf_prime.all
        );
    }
    Ok(())
}

/// Figure 7's capacities, 8's latencies (steps; a job's mean work is 40)
/// and 9's loads.
const CAPACITIES: [f64; 5] = [2.0, 4.0, 8.0, 12.0, 16.0];
const LATENCIES: [f64; 5] = [2.0, 8.0, 32.0, 128.0, 512.0];
const LOADS: [f64; 5] = [0.2, 0.4, 0.6, 0.8, 1.0];

fn nres_figures(a: NresArgs) -> Result<()> {
    if a.seeds == 0 || a.seeds > 100 {
        bail!("--seeds must be between 1 and 100");
    }
    if !(a.load.is_finite() && (0.05..=4.0).contains(&a.load)) {
        bail!("--load must be between 0.05 and 4");
    }
    if a.burst == 0 || a.burst > 1000 {
        bail!("--burst must be between 1 and 1000");
    }
    let setup = nres::Setup {
        seed: a.seed,
        load: a.load,
        burst: a.burst,
        ..nres::Setup::default()
    };
    let want = |f: u8| a.figure.is_none_or(|x| x == f);
    let figure = |vary, values: &[f64]| nres::figure(&setup, vary, values, a.seeds, a.network);
    let capacity = want(7).then(|| figure(nres::Vary::Capacity, &CAPACITIES));
    let latency = want(8).then(|| figure(nres::Vary::Latency, &LATENCIES));
    let load = want(9).then(|| nres::figure9(&setup, &LOADS, a.seeds));
    if a.json {
        println!(
            "{}",
            serde_json::json!({"setup": setup, "capacity": capacity, "latency": latency, "load": load})
        );
        return Ok(());
    }
    println!(
        "{} nodes, {} neighbours each, {} jobs (mean work {} steps) in bursts of {} on average, mean of {} grids",
        setup.nodes, setup.degree, setup.jobs, setup.work, setup.burst, a.seeds
    );
    for (title, curves) in [
        (
            format!(
                "Figure 7: eta against mean node capacity (latency {}, load {})",
                setup.latency, setup.load
            ),
            &capacity,
        ),
        (
            format!(
                "Figure 8: eta against mean latency, steps (capacity {}, load {})",
                setup.capacity, setup.load
            ),
            &latency,
        ),
    ] {
        let Some(curves) = curves else { continue };
        println!("{title}");
        println!(
            "  {:>9} {:>8} {:>9} {:>9} {:>9} {:>9}",
            "RESOURCES", "VALUE", "Max 25", "Max 20", "Max 15", "none"
        );
        for c in curves {
            for r in &c.rows {
                println!(
                    "  {:>9} {:>8} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
                    c.resources, r.value, r.eta[0], r.eta[1], r.eta[2], r.eta_none
                );
            }
        }
    }
    if let Some(rows) = load {
        println!(
            "Figure 9: T_my (steps) against load, 3-resource nodes, jobs declaring 1, 2 or 3 needs (Max {})",
            setup.max
        );
        println!(
            "  {:>6} {:>9} {:>9} {:>9} {:>9}",
            "LOAD", "1 need", "2 needs", "3 needs", "T_lb"
        );
        for r in rows {
            println!(
                "  {:>6} {:>9.0} {:>9.0} {:>9.0} {:>9.0}",
                r.load, r.t_my[0], r.t_my[1], r.t_my[2], r.t_lb
            );
        }
    }
    Ok(())
}
