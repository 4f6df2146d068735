//! `mig map`: the allocation map, drawn like Figure 1 of the scheduler's paper.

use std::path::Path;

use anyhow::{bail, Result};
use libmig::msg::{Request, Response};

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
    let hosts = if let Response::Hosts(h) = super::call(daemon, &Request::Hosts)? {
        h
    } else {
        Vec::new()
    };
    print!(
        "{}",
        crate::render::map_reply(&processors, &slots, now, &hosts)
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
