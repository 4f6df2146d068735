//! `mig sched`: run the scheduler's algorithms on given input and explain
//! the result (MTAT, Compression, a replay of events, re-packing a matrix).
//! Pure computation: no daemon is contacted.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use migd::sched::compress::compress_pools;
use migd::sched::map::BitSet;
use migd::sched::mtat::{mtat_paper, mtat_pools};
use migd::sched::repack::{lower_bound, repack, Piece};
use migd::sched::{expand, replay, Placement, SchedConfig, Scheduler};
use serde::Deserialize;
use serde_json::json;

use crate::render;

/// The `mig sched` subcommands.
#[derive(Debug, Subcommand)]
pub enum SchedCmd {
    /// Minimum turnaround time (seed 000, section 4.1) of VPs on processors.
    ///
    /// Example: mig sched mtat --vps 20 --capacities 10,1,4,3
    /// prints T_min = 1.2 with 12,1,4,3 VPs. With several architectures:
    /// --capacities x86_64:10,x86_64:1,aarch64:4 --vps x86_64=20,aarch64=3.
    Mtat(AlgoArgs),
    /// The smallest processor set that still reaches T_min (section 4.2).
    ///
    /// Takes the same input as `mtat` and prints the compressed assignment.
    Compress(AlgoArgs),
    /// Replay scheduler events (one JSON object a line) and print the final state.
    ///
    /// Each line is an object whose "event" names it, with its fields:
    ///   {"event": "new_processor", "id": "h1/0", "arch": "x86_64", "capacity": 2.0}
    ///   {"event": "processor_exit", "id": "h1/0"}
    ///   {"event": "submit", "job": "j1", "vps": {"x86_64": 4, "aarch64": 2}}
    ///   {"event": "new_vp", "job": "j1", "arch": "x86_64", "host": "h1"}   ("host" optional)
    ///   {"event": "vp_exit", "job": "j1", "vp": 3}
    ///   {"event": "job_exit", "job": "j1"}
    ///   {"event": "suspend", "job": "j1"}   (and "resume")
    /// (vp_back, vp_moved and vp_movable, which only migd sends, are
    /// refused: in a replay every VP may be moved). Unknown fields are
    /// refused. A processor's host is its id up to the first '/'
    /// ("host" may be given). A submit numbers its VPs from 0 architecture
    /// by architecture in name order: above, aarch64's are VPs 0-1 and
    /// x86_64's 2-5; new_vp gives the next number. Blank lines and lines
    /// starting with '#' are skipped.
    #[command(verbatim_doc_comment)]
    Replay(ReplayArgs),
    /// Re-pack a slot matrix (seed 001): fewest slots, no job changes processors.
    ///
    /// Input: {"processors": 8, "slots": [[1,1,2,2,0,3,3,3],[0,0,0,0,4,4,0,0]]},
    /// one row per slot, a job id per processor, 0 = free.
    Repack(RepackArgs),
}

/// Input of `mtat` and `compress`.
#[derive(Debug, Args)]
pub struct AlgoArgs {
    /// Number of VPs (`20`), or per architecture (`x86_64=20,aarch64=3`).
    #[arg(long)]
    vps: String,
    /// Relative capacities in order (`10,1,4,3`), or with architectures
    /// (`x86_64:10,x86_64:1,aarch64:4`).
    #[arg(long)]
    capacities: String,
    /// Print one JSON object instead of the explanation.
    #[arg(long)]
    json: bool,
}

/// Input of `replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The events file (`-` for standard input).
    file: PathBuf,
    /// Placement policy: mig (migd's default), mtat (seed 000 as the paper
    /// gives it) or mtat+repack (with seed 001's re-packing).
    #[arg(long, default_value = "mig")]
    placement: String,
    /// Expansion search of mtat and mtat+repack: regular (the paper's) or
    /// exhaustive (small maps).
    #[arg(long, default_value = "regular")]
    expansion: String,
    /// Do not re-pack jobs between slots after events that free space.
    #[arg(long)]
    no_repack: bool,
    /// Optional migrations allowed per event.
    #[arg(long, default_value_t = 16)]
    max_migrations: usize,
    /// Most slots per round; a job needing more waits [default: no limit].
    #[arg(long, default_value_t = usize::MAX, hide_default_value = true)]
    max_slots: usize,
    /// Print the final state as JSON (with the number of actions of each
    /// kind).
    #[arg(long)]
    json: bool,
    /// Write each event's actions to this file, one JSON object a line
    /// ({"line", "actions"}), as they come: the replay itself holds none,
    /// so its memory does not grow with the events.
    #[arg(long, value_name = "FILE")]
    actions_out: Option<PathBuf>,
}

/// Input of `repack`.
#[derive(Debug, Args)]
pub struct RepackArgs {
    /// The matrix file (`-` for standard input).
    file: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Run a `mig sched` subcommand.
pub fn run(cmd: SchedCmd) -> Result<()> {
    match cmd {
        SchedCmd::Mtat(a) => algo(&a, false),
        SchedCmd::Compress(a) => algo(&a, true),
        SchedCmd::Replay(a) => replay_cmd(&a),
        SchedCmd::Repack(a) => repack_cmd(&a),
    }
}

/// Processors (architecture, capacity) and VPs per architecture, validated.
struct Input {
    arches: Vec<String>,
    pool_of: Vec<usize>,
    caps: Vec<f64>,
    demand: Vec<u32>,
}

const ANY_ARCH: &str = "any";

fn parse_input(vps: &str, capacities: &str) -> Result<Input> {
    let mut named = Vec::new();
    for (i, item) in capacities.split(',').enumerate() {
        let item = item.trim();
        let (arch, value) = match item.split_once(':') {
            Some((a, v)) if !a.trim().is_empty() => (Some(a.trim().to_string()), v.trim()),
            Some(_) => bail!(
                "--capacities item {} ({item:?}): empty architecture before ':'",
                i + 1
            ),
            None => (None, item),
        };
        let c: f64 = value
            .parse()
            .with_context(|| format!("--capacities item {} ({item:?}) is not a number", i + 1))?;
        if !(c.is_finite() && c > 0.0) {
            bail!(
                "--capacities item {} ({item:?}): a capacity must be a positive finite number",
                i + 1
            );
        }
        named.push((arch, c));
    }
    if named.iter().any(|(a, _)| a.is_some()) && named.iter().any(|(a, _)| a.is_none()) {
        bail!("--capacities: give an architecture for every processor (ARCH:C) or for none");
    }
    let mut arches: Vec<String> = Vec::new();
    let mut pool_of = Vec::new();
    let mut caps = Vec::new();
    for (a, c) in named {
        let a = a.unwrap_or_else(|| ANY_ARCH.to_string());
        let z = match arches.iter().position(|x| *x == a) {
            Some(z) => z,
            None => {
                arches.push(a);
                arches.len() - 1
            }
        };
        pool_of.push(z);
        caps.push(c);
    }
    let mut demand = vec![0u32; arches.len()];
    if let Ok(n) = vps.trim().parse::<u32>() {
        if arches.len() > 1 {
            bail!("--vps: the processors have several architectures; give VPs per architecture, e.g. --vps {}=4", arches[0]);
        }
        demand[0] = n;
    } else {
        for item in vps.split(',') {
            let Some((a, n)) = item.split_once('=') else {
                bail!("--vps: {item:?} is neither a count nor ARCH=COUNT");
            };
            let n: u32 = n
                .trim()
                .parse()
                .with_context(|| format!("--vps: {item:?}: count is not a whole number"))?;
            let a = a.trim();
            let Some(z) = arches.iter().position(|x| x == a) else {
                bail!(
                    "--vps: no processor of architecture {a:?} in --capacities (it has: {})",
                    arches.join(", ")
                );
            };
            demand[z] += n;
        }
    }
    Ok(Input {
        arches,
        pool_of,
        caps,
        demand,
    })
}

fn algo(a: &AlgoArgs, compressed: bool) -> Result<()> {
    let input = parse_input(&a.vps, &a.capacities)?;
    let m = mtat_pools(&input.demand, &input.pool_of, &input.caps, &[]);
    let assignment = if compressed {
        compress_pools(
            &input.demand,
            &input.pool_of,
            &input.caps,
            m.t_min,
            &m.assignment,
        )
        .context("no assignment reaches T_min (this is a bug: please report the input)")?
    } else {
        m.assignment.clone()
    };
    let used = assignment.iter().filter(|&&n| n > 0).count();
    if a.json {
        println!(
            "{}",
            json!({"t_min": m.t_min, "assignment": assignment, "processors_used": used})
        );
        return Ok(());
    }
    let single = input.arches.len() == 1;
    if single && !compressed {
        let x = input.demand[0];
        let total: f64 = input.caps.iter().sum();
        let alpha = f64::from(x) / total;
        println!(
            "X = {x} VPs on {}, capacities {:?}",
            super::count(input.caps.len(), "processor"),
            input.caps
        );
        println!("alpha = X / sum(a) = {alpha:.4} (the ideal, fractional turnaround)");
        let shares: Vec<String> = input
            .caps
            .iter()
            .map(|c| format!("{:.3}", c * alpha))
            .collect();
        println!("ideal shares x_i = a_i * alpha: {}", shares.join(", "));
        let (paper, drag) = mtat_paper(x, &input.caps);
        let drag: Vec<String> = drag.iter().map(|d| format!("{d:.3}")).collect();
        println!(
            "paper's Drag_i = (ceil(x_i) - x_i) / a_i: {}",
            drag.join(", ")
        );
        println!(
            "paper's steps 1-5 give {:?}, T = {:.4}",
            paper.assignment, paper.t_min
        );
        if paper.t_min > m.t_min * (1.0 + 1e-9) {
            println!(
                "  (not optimal: the true minimum is lower; mig adds each remaining VP where it finishes first)"
            );
        }
    } else {
        for (z, arch) in input.arches.iter().enumerate() {
            let members: Vec<usize> = (0..input.caps.len())
                .filter(|&i| input.pool_of[i] == z)
                .collect();
            let caps: Vec<f64> = members.iter().map(|&i| input.caps[i]).collect();
            let t = migd::sched::mtat::mtat(input.demand[z], &caps, &[]).t_min;
            println!(
                "pool {arch}: {} on {}, T_z = {t:.4}",
                super::count(input.demand[z] as usize, "VP"),
                super::count(caps.len(), "processor")
            );
        }
    }
    if compressed {
        let limits: Vec<String> = input
            .caps
            .iter()
            .map(|&c| format!("{}", migd::sched::mtat::slots_at(m.t_min, c)))
            .collect();
        println!(
            "whole VPs each processor finishes by T_min, floor(T_min * a_i): {}",
            limits.join(", ")
        );
        println!("the fewest processors that cover every VP are kept (largest first); the rest are freed");
    }
    println!("assignment (VPs per processor, input order): {assignment:?}");
    println!(
        "T_min = {:.4} on {used} of {} processors",
        m.t_min,
        input.caps.len()
    );
    Ok(())
}

fn read_input(path: &PathBuf) -> Result<String> {
    const LIMIT: u64 = 256 << 20;
    let mut text = String::new();
    if path.as_os_str() == "-" {
        std::io::stdin()
            .take(LIMIT)
            .read_to_string(&mut text)
            .context("reading standard input")?;
    } else {
        let f =
            std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        f.take(LIMIT)
            .read_to_string(&mut text)
            .with_context(|| format!("cannot read {}", path.display()))?;
    }
    Ok(text)
}

fn replay_cmd(a: &ReplayArgs) -> Result<()> {
    let expansion = expand::by_name(&a.expansion).with_context(|| {
        format!(
            "unknown --expansion {:?}; choose one of: {}",
            a.expansion,
            expand::NAMES.join(", ")
        )
    })?;
    let name = a.file.display().to_string();
    let input: Box<dyn std::io::BufRead> = if a.file.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        let f = std::fs::File::open(&a.file).with_context(|| format!("cannot open {name}"))?;
        Box::new(std::io::BufReader::new(f))
    };
    let mut out = match &a.actions_out {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
        )),
        None => None,
    };
    let placement = Placement::by_name(&a.placement).with_context(|| {
        format!(
            "unknown --placement {:?}; choose one of: {}",
            a.placement,
            Placement::names()
        )
    })?;
    let mut sched = Scheduler::new(SchedConfig {
        expansion,
        repack: placement.config().repack && !a.no_repack,
        max_migrations_per_event: a.max_migrations,
        max_slots: a.max_slots,
        // In a replay every VP can be moved.
        pin_new_vps: false,
        ..placement.config()
    });
    let tally = replay::run(&mut sched, input, |line, actions| match &mut out {
        Some(w) => writeln!(
            w,
            "{}",
            serde_json::json!({"line": line, "actions": actions})
        ),
        None => Ok(()),
    })
    .with_context(|| name.clone())?;
    if let Some(w) = &mut out {
        w.flush().context("writing the actions")?;
    }
    let n = tally.events;
    let report = replay::report(&sched, &tally);
    if a.json {
        println!("{report}");
        return Ok(());
    }
    println!(
        "{} replayed; {}; {} per round",
        super::count(n, "event"),
        super::count(sched.migrations() as usize, "migration"),
        super::count(sched.map().columns().len(), "slot")
    );
    let procs: Vec<String> = sched
        .map()
        .processors()
        .map(|(_, p)| p.id.to_string())
        .collect();
    let caps: Vec<Option<f64>> = sched
        .map()
        .processors()
        .map(|(_, p)| Some(p.capacity))
        .collect();
    print!("{}", render::map(&procs, &caps, &sched.table(), None, &[]));
    for id in sched.job_ids() {
        if let Some(v) = sched.job_view(&id) {
            let waiting = if v.waiting.is_empty() {
                String::new()
            } else {
                format!(", waiting: {:?}", v.waiting)
            };
            println!(
                "job {id}: {} VPs, slots {:?}, T = {:.4}{waiting}",
                v.vps.len(),
                v.slots,
                v.t_min
            );
        }
    }
    Ok(())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Matrix {
    processors: usize,
    slots: Vec<Vec<u64>>,
}

fn repack_cmd(a: &RepackArgs) -> Result<()> {
    let text = read_input(&a.file)?;
    let m: Matrix = serde_json::from_str(&text).with_context(|| {
        format!(
            "{}: expected {{\"processors\": N, \"slots\": [[job ids...], ...]}}",
            a.file.display()
        )
    })?;
    if m.processors == 0 || m.processors > 1 << 20 {
        bail!(
            "{}: processors must be between 1 and {}",
            a.file.display(),
            1 << 20
        );
    }
    let mut pieces: Vec<Piece> = Vec::new();
    let mut slot_of = Vec::new();
    for (s, row) in m.slots.iter().enumerate() {
        if row.len() != m.processors {
            bail!(
                "{}: slot {s} has {} entries, expected {} (one per processor)",
                a.file.display(),
                row.len(),
                m.processors
            );
        }
        let mut jobs: BTreeMap<u64, BitSet> = BTreeMap::new();
        for (p, &job) in row.iter().enumerate() {
            if job != 0 {
                jobs.entry(job).or_default().insert(p);
            }
        }
        for (job, rows) in jobs {
            let job = u32::try_from(job).with_context(|| format!("job id {job} is too large"))?;
            pieces.push(Piece { job, rows });
            slot_of.push(s);
        }
    }
    let (new_slot, k) = repack(&pieces, &slot_of, m.slots.len(), true);
    let mut matrix = vec![vec![0u64; m.processors]; k];
    for (i, p) in pieces.iter().enumerate() {
        for r in p.rows.iter() {
            matrix[new_slot[i]][r] = u64::from(p.job);
        }
    }
    if a.json {
        println!(
            "{}",
            json!({"slots": k, "matrix": matrix, "lower_bound": lower_bound(&pieces)})
        );
        return Ok(());
    }
    println!(
        "{} slots -> {k} slots (no packing can use fewer than {})",
        m.slots.len(),
        lower_bound(&pieces)
    );
    for row in &matrix {
        let cells: Vec<String> = row
            .iter()
            .map(|&j| if j == 0 { ".".into() } else { j.to_string() })
            .collect();
        println!("  {}", cells.join(" "));
    }
    Ok(())
}
