//! `mig sim`: replay a Standard Workload Format trace (plain or gzip'd)
//! through scheduling policies with a virtual clock and compare them.

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use migd::sim::{self, swf};
use serde_json::json;

/// What the table's rows mean (`mig sim --help`).
pub const METRICS: &str = "\
The table, one column per policy:
  jobs completed             jobs that ran (a job wider than its pool is left out by the
                             policies that cannot double up processors)
  mean / median response     submit to end, seconds
  mean bounded slowdown      mean of max(1, response / max(run, 10 s)): the usual
                             bounded slowdown, tau = 10 s
  median / 95th pct slowdown the same bounded slowdown's median and 95th percentile
  utilisation                processor-seconds of work done over processors x makespan
  makespan                   first submit to last end, seconds
  migrations                 VP moves the policy made (owners, expansion, compaction)
  mean / max slots per round time-weighted mean and largest number of gang time slots
                             (1 without time sharing)
  normalized perf. eta       mean over jobs of dedicated run time / response time, in
                             (0, 1]; 1 means every job ran as if alone
  digest                     a digest of every job's submit, start and end, processors and
                             moves: two replays agree on it only when they agree on every job
--json gives the same figures per policy, and --jobs-out each job's.";

/// Flags of `mig sim`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The trace (.swf or .swf.gz).
    #[arg(long)]
    trace: PathBuf,
    /// Policies to compare, comma-separated: fcfs, easy (backfilling, no
    /// time sharing), gang-firstfit, gang-buddy (Ousterhout matrices),
    /// mtat, mtat+repack (seed 000 as the paper gives it, and with seed
    /// 001's re-packing), mig (what migd runs by default: one slot each
    /// where a job runs fastest, EASY backfilling over the slots on the
    /// trace's requested times, slots merged by moving jobs, free slots
    /// lent), roc (seed 003: a job as a bag of
    /// independent tasks, each queued where the fewest are, Rate-of-Change
    /// moving them), nres (seed 004: the tasks mapped fewest-choices-first
    /// onto processors meeting their CPU, memory and I/O needs) and bidding
    /// (seed 002: simple programs, clusters and groups placed by estimates
    /// and bids); the last three are not in the default list.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "fcfs,easy,gang-firstfit,gang-buddy,mtat,mtat+repack,mig"
    )]
    policy: Vec<String>,
    /// Processors (default: the trace's MaxProcs, else MaxNodes).
    #[arg(long)]
    processors: Option<u32>,
    /// Relative capacities of the processors: a list cycled over them
    /// (`1,2,4`), or `uniform:LO-HI` drawn per processor from a fixed seed
    /// (default all 1).
    #[arg(long)]
    capacities: Option<String>,
    /// Architectures of the processors: `NAME:COUNT,...` (counts adding up
    /// to the processors) or `NAME,...` cycled over them. A job needs the
    /// architecture its partition (SWF field 16) names: partition p takes
    /// the p-th in the list, cycling; unknown takes the first.
    #[arg(long)]
    arches: Option<String>,
    /// Most slots per round for the time-sharing policies (the multiprogramming
    /// level); jobs needing more wait in submission order.
    #[arg(long, default_value_t = sim::DEFAULT_MAX_SLOTS)]
    max_slots: usize,
    /// Owners taking processors back: none, or synthetic:BUSY/IDLE (mean
    /// seconds an owner is at the desk / away, exponential, seeded; owners
    /// come and go until the last job is submitted). mig, mtat and
    /// mtat+repack move the VPs off a processor taken back; the other
    /// policies cannot, so the jobs on it stop until the owner leaves.
    #[arg(long, default_value = "none")]
    owners: String,
    /// Owners from a file instead: `TIME PROCESSOR leave|return` per line
    /// (followed exactly).
    #[arg(long, conflicts_with = "owners")]
    availability: Option<PathBuf>,
    /// Seconds a job stalls each time one of its VPs moves. The default is
    /// what `mig migrate` of a VP with no state took on the development
    /// machine (the migrate benchmark: 1.7 ms).
    #[arg(long, default_value_t = sim::MEASURED_MIGRATION_COST)]
    migration_cost: f64,
    /// Seconds more per MB of the moving VP's state: the job's memory per
    /// processor in the trace (used, else requested). The default is the
    /// migrate benchmark's on the development machine (256 MiB moved in
    /// 185 ms: 0.7 ms a MB).
    #[arg(long, default_value_t = sim::MEASURED_MIGRATION_COST_PER_MB)]
    migration_cost_per_mb: f64,
    /// The gang quantum (length of a slot), seconds.
    #[arg(long, default_value_t = sim::DEFAULT_QUANTUM)]
    quantum: f64,
    /// Seconds each slot switch costs the time-sharing policies (with more
    /// than one slot a round does quantum / (quantum + switch cost) of its
    /// work). The default is what `mig stats` measured on the development
    /// machine (0.012% of a 100 ms quantum: 12 µs); measure yours with it.
    #[arg(long, default_value_t = sim::MEASURED_SWITCH_COST)]
    switch_cost: f64,
    /// Memory of each processor's node, MB: the VPs resident on a node
    /// (in every slot: a stopped VP keeps its memory) need at most this
    /// together, so memory limits the multiprogramming level. A job's
    /// need is its requested memory per processor (SWF field 10), else its
    /// used memory (field 7); jobs that state neither need none, and a job
    /// that fits no node is left out. Default: memory is no limit.
    #[arg(long, value_name = "MB")]
    node_memory: Option<u64>,
    /// Multiply the time between arrivals by F (0.9: every job submitted
    /// sooner, arrivals 10% closer together, a busier machine).
    #[arg(long, value_name = "F", default_value_t = 1.0)]
    interarrival: f64,
    /// Scale the times between arrivals so that the offered load (the
    /// jobs' work over the machine's capacity between the first and the
    /// last submission) is L: 0.9 and 1.0 make busy logs of quiet ones,
    /// and a log offered more than L quieter. Replaces --interarrival.
    #[arg(long, value_name = "L", conflicts_with = "interarrival")]
    load: Option<f64>,
    /// Replay only the first N jobs.
    #[arg(long)]
    limit: Option<usize>,
    /// Skip and count malformed lines instead of stopping at the first.
    #[arg(long)]
    lenient: bool,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Write SVG charts into this directory: response-time CDF, utilisation
    /// and slots per round over time, one line per policy.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Write one JSON line per job and policy (id, submit, start, end, processors, migrations).
    #[arg(long)]
    jobs_out: Option<PathBuf>,
}

/// `--capacities`: a list cycled over `n` processors, or `uniform:LO-HI`.
fn capacities(spec: Option<&str>, n: usize) -> Result<Vec<f64>> {
    let Some(spec) = spec else {
        return Ok(vec![1.0; n]);
    };
    let positive = |v: &str| -> Result<f64> {
        v.trim()
            .parse::<f64>()
            .ok()
            .filter(|c| c.is_finite() && *c > 0.0)
            .with_context(|| format!("--capacities: {v:?} is not a positive number"))
    };
    if let Some(range) = spec.strip_prefix("uniform:") {
        let (lo, hi) = range
            .split_once('-')
            .context("--capacities uniform:LO-HI, e.g. uniform:1-4")?;
        let (lo, hi) = (positive(lo)?, positive(hi)?);
        if lo > hi {
            bail!("--capacities uniform:{lo}-{hi}: LO is above HI");
        }
        // A fixed seed: the same machine every run (SplitMix64).
        let mut state: u64 = 0x5eed;
        return Ok((0..n)
            .map(|_| {
                state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = state;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                let u = ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64;
                lo + (hi - lo) * u
            })
            .collect());
    }
    let list: Vec<f64> = spec.split(',').map(positive).collect::<Result<_>>()?;
    Ok((0..n).map(|i| list[i % list.len()]).collect())
}

/// `--arches`: the architecture names and each processor's, from
/// `NAME:COUNT,...` or `NAME,...` (cycled). None given: one architecture.
fn architectures(spec: Option<&str>, n: usize) -> Result<(Vec<String>, Vec<u32>)> {
    let Some(spec) = spec else {
        return Ok((Vec::new(), Vec::new()));
    };
    let mut names: Vec<String> = Vec::new();
    let mut counts: Vec<Option<usize>> = Vec::new();
    for part in spec.split(',') {
        let (name, count) = match part.split_once(':') {
            Some((name, c)) => (
                name.trim(),
                Some(c.trim().parse::<usize>().with_context(|| {
                    format!("--arches: {c:?} in {part:?} is not a processor count")
                })?),
            ),
            None => (part.trim(), None),
        };
        if name.is_empty() || names.iter().any(|x| x == name) {
            bail!("--arches: {part:?}: names must be given, each once");
        }
        names.push(name.to_string());
        counts.push(count);
    }
    let arches: Vec<u32> = if counts.iter().all(Option::is_none) {
        (0..n).map(|i| (i % names.len()) as u32).collect()
    } else if counts.iter().all(Option::is_some) {
        let total: usize = counts.iter().flatten().sum();
        if total != n {
            bail!("--arches: the counts add up to {total}, the machine has {n} processors");
        }
        counts
            .iter()
            .enumerate()
            .flat_map(|(a, c)| std::iter::repeat_n(a as u32, c.unwrap_or(0)))
            .collect()
    } else {
        bail!("--arches: give a count for every architecture or for none");
    };
    Ok((names, arches))
}

/// What memory is in this replay, said in the output.
fn memory_line(jobs: &[swf::Job], cond: &sim::Conditions) -> String {
    let Some(node) = cond.node_memory_mb else {
        return "memory: no limit (--node-memory MB makes it one)".into();
    };
    let stating = jobs.iter().filter(|j| j.need_kb > 0.0).count();
    let too_big = jobs.iter().filter(|j| !cond.fits_a_node(j)).count();
    format!(
        "memory: {node} MB a node, shared by the VPs resident there in every slot; {stating} of {} jobs state theirs (requested per processor, else used), the others need none; {too_big} need more than a node and are left out",
        jobs.len()
    )
}

fn read_trace(path: &PathBuf) -> Result<String> {
    let mut raw = Vec::new();
    std::fs::File::open(path)
        .with_context(|| format!("cannot open {}", path.display()))?
        .read_to_end(&mut raw)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let mut text = String::new();
    if raw.starts_with(&[0x1f, 0x8b]) {
        flate2::read::GzDecoder::new(&raw[..])
            .read_to_string(&mut text)
            .with_context(|| format!("{}: not a valid gzip'd text file", path.display()))?;
    } else {
        text = String::from_utf8(raw)
            .with_context(|| format!("{}: not UTF-8 text", path.display()))?;
    }
    Ok(text)
}

/// Run it: the flags and the trace checked, what is assumed said, each
/// policy replayed, then the charts and the table (or JSON).
pub fn run(a: Args) -> Result<()> {
    check_policies(&a.policy)?;
    let (mut w, usable) = read_jobs(&a)?;
    if a.node_memory == Some(0) {
        bail!("--node-memory must be at least 1 MB");
    }
    check_some_left(&a, &w)?;
    let procs = match a.processors.or(w.max_procs) {
        Some(p) if p > 0 => p,
        _ => bail!("the trace has no MaxProcs/MaxNodes header: give --processors"),
    };
    let caps = capacities(a.capacities.as_deref(), procs as usize)?;
    let arrivals = spread_arrivals(&a, &mut w.jobs, procs)?;
    let cond = conditions(&a, &mut w.jobs, procs)?;
    let memory = say_what_is_replayed(&a, &w, usable, procs, &cond, &arrivals);
    let replays = replay_each(&a, &w.jobs, &caps, &cond)?;
    if let Some(dir) = &a.plot {
        write_charts(dir, &a.trace, &replays)?;
    }
    if a.json {
        print_json(
            &a,
            procs,
            w.jobs.len(),
            &memory,
            &arrivals,
            &replays.results,
        );
    } else {
        print_table(&replays.results);
    }
    Ok(())
}

/// `--policy`: every name one the simulator knows.
fn check_policies(policies: &[String]) -> Result<()> {
    for p in policies {
        if !sim::POLICIES.contains(&p.as_str()) {
            bail!(
                "unknown policy {p:?}; choose from {}",
                sim::POLICIES.join(", ")
            );
        }
    }
    Ok(())
}

/// The trace's jobs, the first `--limit` of them, with their arrivals
/// spread by `--interarrival`; and how many the whole file has.
fn read_jobs(a: &Args) -> Result<(swf::Workload, usize)> {
    let text = read_trace(&a.trace)?;
    let mut w = swf::parse_swf(&text, a.lenient).with_context(|| a.trace.display().to_string())?;
    let usable = w.jobs.len();
    if let Some(n) = a.limit {
        w.jobs.truncate(n);
    }
    if !(a.interarrival.is_finite() && a.interarrival > 0.0) {
        bail!(
            "--interarrival must be a positive factor (got {})",
            a.interarrival
        );
    }
    if let Some(l) = a.load {
        if !(l.is_finite() && l > 0.0) {
            bail!("--load must be a positive offered load (got {l})");
        }
    }
    Ok((w, usable))
}

/// The factor `--interarrival` or `--load` multiplies the times between
/// arrivals by, applied to `jobs`; and the offered load it leaves.
fn spread_arrivals(a: &Args, jobs: &mut [swf::Job], procs: u32) -> Result<Arrivals> {
    let factor = match a.load {
        None => a.interarrival,
        Some(l) => {
            let Some(now) = sim::offered_load(jobs, procs) else {
                bail!("--load: the jobs are all submitted at once, so their load cannot be scaled");
            };
            now / l
        }
    };
    sim::spread_arrivals(jobs, factor);
    Ok(Arrivals {
        factor,
        load: sim::offered_load(jobs, procs),
    })
}

/// How arrivals were spread, and the offered load that made.
struct Arrivals {
    /// The times between arrivals multiplied by this.
    factor: f64,
    /// The offered load after (`None`: every job submitted at once).
    load: Option<f64>,
}

/// A clear error when no job is left to replay, saying why.
fn check_some_left(a: &Args, w: &swf::Workload) -> Result<()> {
    if w.jobs.is_empty() {
        bail!(
            "{}: no job to replay ({} malformed, {} without processors, {} without run time){}",
            a.trace.display(),
            super::count(w.skipped_malformed, "line"),
            super::count(w.skipped_no_procs, "job"),
            w.skipped_no_runtime,
            if a.limit == Some(0) {
                "; --limit 0 keeps none"
            } else {
                ""
            }
        );
    }
    Ok(())
}

/// The machine and costs the replays share, from the flags: the
/// architectures (each job's set on it too), the owners, the costs, node
/// memory.
fn conditions(a: &Args, jobs: &mut [swf::Job], procs: u32) -> Result<sim::Conditions> {
    let (arch_names, arches) = architectures(a.arches.as_deref(), procs as usize)?;
    for j in jobs.iter_mut() {
        j.arch = match (j.partition, arch_names.len()) {
            (p, n) if p >= 1 && n > 0 => ((p - 1) as usize % n) as u32,
            _ => 0,
        };
    }
    for (flag, v) in [
        ("--migration-cost", a.migration_cost),
        ("--migration-cost-per-mb", a.migration_cost_per_mb),
        ("--switch-cost", a.switch_cost),
    ] {
        if !(v.is_finite() && v >= 0.0) {
            bail!("{flag} must be a number of seconds, at least 0 (got {v})");
        }
    }
    if !(a.quantum.is_finite() && a.quantum > 0.0) {
        bail!(
            "--quantum must be a positive number of seconds (got {})",
            a.quantum
        );
    }
    let owners = match &a.availability {
        Some(f) => sim::owners::Model::availability(
            &std::fs::read_to_string(f).with_context(|| format!("cannot read {}", f.display()))?,
            procs as usize,
        )
        .map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?,
        None => sim::owners::Model::parse(&a.owners).map_err(|e| anyhow::anyhow!(e))?,
    };
    Ok(sim::Conditions {
        arches,
        arch_names,
        owners,
        migration_cost: a.migration_cost,
        migration_cost_per_mb: a.migration_cost_per_mb,
        quantum: a.quantum,
        switch_cost: a.switch_cost,
        node_memory_mb: a.node_memory,
    })
}

/// Say on stderr which jobs are replayed on what, what memory is and what
/// things cost; the memory line, which `--json` repeats.
fn say_what_is_replayed(
    a: &Args,
    w: &swf::Workload,
    usable: usize,
    procs: u32,
    cond: &sim::Conditions,
    arrivals: &Arrivals,
) -> String {
    let wide = w.jobs.iter().filter(|j| j.procs > procs).count();
    let which = if w.jobs.len() < usable {
        format!("the first {} of {usable} jobs", w.jobs.len())
    } else {
        super::count(w.jobs.len(), "job")
    };
    eprintln!(
        "mig: {which} on {} (in the whole file, skipped: {} without processors, {} without run time, {} malformed; {} estimates raised to the run time; {wide} of these wider than the machine)",
        super::count(procs as usize, "processor"),
        w.skipped_no_procs,
        w.skipped_no_runtime,
        w.skipped_malformed,
        w.raised_estimates
    );
    let memory = memory_line(&w.jobs, cond);
    eprintln!("mig: {memory}");
    eprintln!(
        "mig: costs: a slot switch {} ms, a VP's move {} ms + {} ms a MB of its state",
        a.switch_cost * 1e3,
        a.migration_cost * 1e3,
        a.migration_cost_per_mb * 1e3
    );
    let load = arrivals
        .load
        .map_or("none (one submit time)".into(), |l| format!("{l:.3}"));
    if arrivals.factor == 1.0 {
        eprintln!("mig: offered load {load}");
    } else {
        eprintln!(
            "mig: times between arrivals multiplied by {:.4}: offered load {load}",
            arrivals.factor
        );
    }
    memory
}

/// A series per policy: its name and its points.
type Series<T> = Vec<(String, Vec<T>)>;

/// What the replays gave, a policy at a time in `--policy`'s order.
#[derive(Default)]
struct Replays {
    /// Each policy, its figures and the seconds its replay took.
    results: Vec<(String, sim::metrics::Metrics, String, f64)>,
    /// With `--plot`: each policy's response times.
    responses: Series<f64>,
    /// With `--plot`: utilisation over time.
    utilisation: Series<(f64, f64)>,
    /// With `--plot`: slots per round over time.
    slots: Series<(f64, f64)>,
}

/// Replay the jobs under each policy, writing `--jobs-out` as they end.
fn replay_each(
    a: &Args,
    jobs: &[swf::Job],
    caps: &[f64],
    cond: &sim::Conditions,
) -> Result<Replays> {
    let mut jobs_out = match &a.jobs_out {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
        )),
        None => None,
    };
    let mut r = Replays::default();
    for p in &a.policy {
        let t = Instant::now();
        let Some(sim::Replay {
            outcomes,
            metrics: m,
            timeline,
        }) = replay_showing_progress(p, jobs, caps, a.max_slots.max(1), cond)
        else {
            continue;
        };
        let secs = t.elapsed().as_secs_f64();
        eprintln!("mig: {p} replayed in {secs:.2} s");
        if let Some(f) = jobs_out.as_mut() {
            for o in &outcomes {
                writeln!(
                    f,
                    "{}",
                    json!({"policy": p, "id": o.id, "submit": o.submit, "start": o.start, "end": o.end, "processors": o.procs, "migrations": o.migrations})
                )?;
            }
        }
        if a.plot.is_some() {
            r.responses.push((
                p.clone(),
                outcomes.iter().map(|o| o.end - o.submit).collect(),
            ));
            r.utilisation.push((
                p.clone(),
                timeline.iter().map(|s| (s.t, s.utilization)).collect(),
            ));
            r.slots.push((
                p.clone(),
                timeline.iter().map(|s| (s.t, s.slots as f64)).collect(),
            ));
        }
        r.results
            .push((p.clone(), m, sim::metrics::digest(&outcomes), secs));
    }
    if let Some(mut f) = jobs_out {
        f.flush()?;
    }
    Ok(r)
}

/// One policy's replay (`None`: the policy cannot run these jobs), with a
/// progress line on stderr while it runs when stderr is a terminal.
fn replay_showing_progress(
    p: &str,
    jobs: &[swf::Job],
    caps: &[f64],
    max_slots: usize,
    cond: &sim::Conditions,
) -> Option<sim::Replay> {
    let done = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let total = jobs.len();
    let show = std::io::stderr().is_terminal();
    std::thread::scope(|scope| {
        let bar = scope.spawn(|| {
            // A progress line on a terminal only; redraw every 200 ms.
            while show && !stop.load(Ordering::Relaxed) {
                let n = done.load(Ordering::Relaxed);
                let filled = (n * 30).checked_div(total).unwrap_or(30).min(30);
                eprint!(
                    "\rmig: {p:<14} [{}{}] {n}/{total} jobs",
                    "#".repeat(filled),
                    " ".repeat(30 - filled.min(30))
                );
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            if show {
                eprint!("\r{}\r", " ".repeat(80));
            }
        });
        let r = sim::replay_with(jobs, caps, p, max_slots, cond, &done);
        stop.store(true, Ordering::Relaxed);
        let _ = bar.join();
        r
    })
}

/// `--plot DIR`: the response-time CDF, utilisation and slots per round
/// over time, an SVG each.
fn write_charts(dir: &Path, trace: &Path, r: &Replays) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let name = trace
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let charts = [
        (
            "response_cdf.svg",
            crate::plot::response_cdf(&format!("response time, {name}"), &r.responses),
        ),
        (
            "utilisation.svg",
            crate::plot::over_time(
                &format!("utilisation, {name} (mean over 5% of the time)"),
                "utilisation",
                &r.utilisation,
                15,
            ),
        ),
        (
            "slots.svg",
            crate::plot::over_time(&format!("slots per round, {name}"), "slots", &r.slots, 1),
        ),
    ];
    for (file, svg) in charts {
        let path = dir.join(file);
        std::fs::write(&path, svg).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let path = dir.join("*.svg");
    eprintln!("mig: wrote {}", path.display());
    Ok(())
}

/// `--json`: the replay's assumptions and each policy's figures, one
/// object.
fn print_json(
    a: &Args,
    procs: u32,
    jobs: usize,
    memory: &str,
    arrivals: &Arrivals,
    results: &[(String, sim::metrics::Metrics, String, f64)],
) {
    let policies: serde_json::Map<String, serde_json::Value> = results
        .iter()
        .map(|(p, m, digest, secs)| {
            let mut v = serde_json::to_value(m).unwrap_or_default();
            v["digest"] = json!(digest);
            v["replay_seconds"] = json!(secs);
            (p.clone(), v)
        })
        .collect();
    println!(
        "{}",
        json!({"trace": a.trace.display().to_string(), "processors": procs, "jobs": jobs,
            "node_memory_mb": a.node_memory, "memory": memory, "interarrival": arrivals.factor,
            "offered_load": arrivals.load,
            "switch_cost": a.switch_cost, "migration_cost": a.migration_cost,
            "migration_cost_per_mb": a.migration_cost_per_mb,
            "policies": policies})
    );
}

/// The table: a row per metric (see `METRICS`), a column per policy.
fn print_table(results: &[(String, sim::metrics::Metrics, String, f64)]) {
    print!("{:<26}", "metric");
    for (p, _, _, _) in results {
        print!("{p:>14}");
    }
    println!();
    type Row = (&'static str, fn(&sim::metrics::Metrics) -> String);
    let rows: [Row; 12] = [
        ("jobs completed", |m| m.jobs.to_string()),
        ("mean response time (s)", |m| {
            format!("{:.0}", m.mean_response_time)
        }),
        ("median response time (s)", |m| {
            format!("{:.0}", m.median_response_time)
        }),
        ("mean bounded slowdown", |m| {
            format!("{:.2}", m.mean_bounded_slowdown)
        }),
        ("median bounded slowdown", |m| {
            format!("{:.2}", m.median_bounded_slowdown)
        }),
        ("95th pct bounded slowdown", |m| {
            format!("{:.2}", m.p95_bounded_slowdown)
        }),
        ("utilisation", |m| format!("{:.3}", m.utilization)),
        ("makespan (s)", |m| format!("{:.0}", m.makespan)),
        ("migrations", |m| m.migrations.to_string()),
        ("mean slots per round", |m| format!("{:.2}", m.mean_slots)),
        ("max slots per round", |m| m.max_slots.to_string()),
        ("normalized perf. eta", |m| format!("{:.3}", m.eta)),
    ];
    for (name, f) in rows {
        print!("{name:<26}");
        for (_, m, _, _) in results {
            print!("{:>14}", f(m));
        }
        println!();
    }
    // The digest of every job's outcome (16 hex digits, too wide for a
    // column): two runs agree on it only when they agree on every job.
    for (p, _, digest, _) in results {
        println!("{:<26}{p} {digest}", "digest");
    }
}
