//! `mig map`: the allocation map, drawn like Figure 1 of the scheduler's paper.

use std::path::Path;

use anyhow::{bail, Result};
use libmig::msg::{Request, Response};
use migd::sched::TableCell;

/// Flags of `mig map`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print JSON: {"processors": [...], "slots": [[{processor, job, vps}], ...], "now": slot}.
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
    print!(
        "{}",
        crate::render::map(&processors, &slots, now.map(|n| n as usize))
    );
    Ok(())
}
