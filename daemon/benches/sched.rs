//! Scheduler speed: the cost of handling one event on maps of a given size,
//! and of replaying 100,000 random events. Prints percentiles; run with
//! `cargo bench -p mig-daemon --bench sched` (the daemons' placement, `mig`;
//! `MIG_BENCH_PLACEMENT=mtat+repack` for another; `MIG_BENCH_MEMORY=1` for
//! hosts that offer 1, 4 or 16 GB and jobs half of which ask for 2 or 8 GB
//! a VP).

use std::time::Instant;

use migd::sched::random::{Generator, Shape};
use migd::sched::{Event, Placement, SchedConfig, Scheduler};

/// The placement benchmarked (`MIG_BENCH_PLACEMENT`, default the daemons').
fn placement() -> Placement {
    std::env::var("MIG_BENCH_PLACEMENT")
        .ok()
        .and_then(|p| Placement::by_name(&p))
        .unwrap_or_default()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Warm a scheduler up to `slots` slots on `procs` processors (the slot cap
/// holds the map at that size once the load fills it), then time `n` more
/// events.
fn per_event(procs: usize, slots: usize, n: usize, capacities: &[f64]) {
    let shape = Shape {
        capacities: capacities.to_vec(),
        processors: procs,
        per_host: 4,
        arches: vec!["x86_64".into()],
        max_job: (procs / 8) as u32,
        target_jobs: slots * 8,
        memory: std::env::var_os("MIG_BENCH_MEMORY").is_some(),
        chosen: false,
        estimates: false,
    };
    let mut g = Generator::new(42, shape);
    let mut s = Scheduler::new(SchedConfig {
        max_slots: slots,
        ..placement().config()
    });
    for e in g.pool() {
        s.on_event(e).expect("legal event");
    }
    for _ in 0..(slots * 40) {
        s.on_event(g.event()).expect("legal event");
    }
    let mut times = Vec::with_capacity(n);
    let mut by_kind: std::collections::BTreeMap<&'static str, Vec<f64>> = Default::default();
    let mut slot_sum = 0usize;
    let mut max_slots = 0usize;
    for _ in 0..n {
        let e = g.event();
        let kind = kind(&e);
        let t = Instant::now();
        s.on_event(e).expect("legal event");
        let us = t.elapsed().as_secs_f64() * 1e6;
        times.push(us);
        by_kind.entry(kind).or_default().push(us);
        slot_sum += s.map().columns().len();
        max_slots = max_slots.max(s.map().columns().len());
    }
    times.sort_by(f64::total_cmp);
    let live = s.map().live().len();
    println!(
        "{procs:>5} processors, {:>5.1} slots mean ({max_slots} max), {live} live: per event p50 {:>8.1} µs  p99 {:>9.1} µs  max {:>9.1} µs",
        slot_sum as f64 / n as f64,
        percentile(&times, 0.5),
        percentile(&times, 0.99),
        times[times.len() - 1],
    );
    if std::env::var_os("MIG_BENCH_KINDS").is_some() {
        for (kind, mut t) in by_kind {
            t.sort_by(f64::total_cmp);
            println!(
                "      {kind:<15} {:>5} events: p50 {:>8.1} µs  p99 {:>9.1} µs",
                t.len(),
                percentile(&t, 0.5),
                percentile(&t, 0.99)
            );
        }
    }
}

fn kind(e: &Event) -> &'static str {
    match e {
        Event::NewProcessor { .. } => "new_processor",
        Event::ProcessorExit { .. } => "processor_exit",
        Event::Submit { .. } => "submit",
        Event::NewVp { .. } => "new_vp",
        Event::VpBack { .. } => "vp_back",
        Event::VpMoved { .. } => "vp_moved",
        Event::VpMovable { .. } => "vp_movable",
        Event::VpExit { .. } => "vp_exit",
        Event::JobExit { .. } => "job_exit",
        Event::Suspend { .. } => "suspend",
        Event::Resume { .. } => "resume",
    }
}

fn replay(n: usize) {
    let mut g = Generator::new(
        7,
        Shape {
            processors: 64,
            per_host: 4,
            max_job: 16,
            target_jobs: 16,
            ..Shape::default()
        },
    );
    let mut events = g.pool();
    events.extend((0..n).map(|_| g.event()));
    let mut s = Scheduler::new(placement().config());
    let t = Instant::now();
    for e in events {
        s.on_event(e).expect("legal event");
    }
    println!(
        "replay of {n} random events (64 processors): {:.2} s, {} migrations; at the end {} jobs, {} slots, {} processors",
        t.elapsed().as_secs_f64(),
        s.migrations(),
        s.job_ids().len(),
        s.map().columns().len(),
        s.map().live().len()
    );
}

/// A digest of every action the scheduler emits on fixed random streams (two
/// architectures, mixed capacities, several map sizes; with
/// `MIG_BENCH_MEMORY`, hosts offering memory and jobs asking for it): an
/// optimisation that must not change behaviour must not change this line.
fn digest() {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let mut events = 0usize;
    for (seed, procs, slots) in [(1u64, 16usize, 4usize), (2, 64, 8), (3, 256, 16)] {
        let mut g = Generator::new(
            seed,
            Shape {
                processors: procs,
                per_host: 4,
                arches: vec!["x86_64".into(), "aarch64".into()],
                max_job: (procs / 4) as u32,
                target_jobs: slots * 6,
                capacities: vec![1.0, 1.0, 2.0, 3.0, 4.0, 1.5],
                memory: std::env::var_os("MIG_BENCH_MEMORY").is_some(),
                chosen: false,
                estimates: false,
            },
        );
        let mut s = Scheduler::new(SchedConfig {
            max_slots: slots,
            ..placement().config()
        });
        let mut stream = g.pool();
        stream.extend((0..3000).map(|_| g.event()));
        for e in stream {
            let actions = s.on_event(e).expect("legal event");
            format!("{actions:?}").hash(&mut h);
            events += 1;
        }
    }
    println!("digest of {events} events' actions: {:016x}", h.finish());
}

fn main() {
    // `cargo test` runs benches with --bench absent: keep that quick.
    let quick = !std::env::args().any(|a| a == "--bench");
    let n = if quick { 50 } else { 2000 };
    if let Ok(p) = std::env::var("MIG_BENCH_PROCS") {
        let p: usize = p.parse().unwrap_or(256);
        let slots: usize = std::env::var("MIG_BENCH_SLOTS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(16);
        per_event(p, slots, 3_000, &[1.0, 1.0, 2.0, 3.0, 4.0, 1.5]);
        return;
    }
    if std::env::var_os("MIG_BENCH_DIGEST").is_some() {
        digest();
        return;
    }
    if let Ok(k) = std::env::var("MIG_BENCH_REPLAY") {
        replay(k.parse().unwrap_or(10_000));
        return;
    }
    println!("placement {}; equal capacities:", placement());
    for (procs, slots) in [(64, 4), (256, 16), (1024, 32), (4096, 64)] {
        per_event(procs, slots, n, &[1.0]);
    }
    println!("capacities 1..4:");
    for (procs, slots) in [(256, 16), (4096, 64)] {
        per_event(procs, slots, n, &[1.0, 1.0, 2.0, 3.0, 4.0, 1.5]);
    }
    replay(if quick { 1000 } else { 100_000 });
}
