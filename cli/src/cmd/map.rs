//! `mig map`: the allocation map, drawn like Figure 1 of the scheduler's paper.

use std::path::Path;

use anyhow::{bail, Result};
use libmig::msg::{Request, Response};
use migd::sched::TableCell;

/// Flags of `mig map`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub daemon: super::Daemon,
    /// Print JSON: {"processors": [...], "slots": [[{processor, job, vps, independent}], ...], "now": slot}.
    #[arg(long)]
    json: bool,
}

/// Run it.
pub fn run(daemon: &Path, a: Args) -> Result<()> {
    let Response::Map {
        processors,
        slots,
        now,
    } = super::call(daemon, &Request::Map)?
    else {
        bail!("unexpected reply")
    };
    if a.json {
        println!(
            "{}",
            serde_json::json!({"processors": processors, "slots": slots, "now": now})
        );
        return Ok(());
    }
    let mut independent: Vec<String> = slots
        .iter()
        .flatten()
        .filter(|c| c.independent)
        .map(|c| c.job.clone())
        .collect();
    independent.sort();
    independent.dedup();
    let slots: Vec<Vec<TableCell>> = slots
        .into_iter()
        .map(|s| {
            s.into_iter()
                .map(|c| TableCell {
                    processor: c.processor,
                    job: c.job,
                    vps: c.vps,
                })
                .collect()
        })
        .collect();
    // Each processor's capacity, from its host's facts (`h1/0`: host h1).
    let hosts = match super::call(daemon, &Request::Hosts)? {
        Response::Hosts(h) => h,
        _ => Vec::new(),
    };
    let caps: Vec<Option<f64>> = processors
        .iter()
        .map(|p| {
            let host = p.split('/').next().unwrap_or(p);
            hosts
                .iter()
                .find(|h| h.facts.name == host)
                .map(|h| h.facts.capacity)
        })
        .collect();
    print!(
        "{}",
        crate::render::map(
            &processors,
            &caps,
            &slots,
            now.map(|n| n as usize),
            &independent
        )
    );
    if !processors.is_empty() {
        println!(
            "legend: a row per processor (×C its capacity: MTAT gives faster ones more VPs), \
             a column per time slot (T3* runs now);\n        \
             j2 a job's cell, j2×3 three of its VPs sharing the processor, \
             (j3) a free cell that --independent job j3's VP there fills, . free"
        );
    }
    Ok(())
}
