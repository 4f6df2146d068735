//! `mig hosts`: the hosts of the virtual machine, and the VPs each holds
//! that do not run, with why.

use std::path::Path;

use anyhow::{bail, Result};
use libmig::msg::{Request, Response};

/// Flags of `mig hosts`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print JSON: one object per host.
    #[arg(long)]
    json: bool,
}

/// Run it.
pub fn run(daemon: &Path, a: Args) -> Result<()> {
    let Response::Hosts(hosts) = super::call(daemon, &Request::Hosts)? else {
        bail!("unexpected reply")
    };
    if a.json {
        let v: Vec<serde_json::Value> = hosts
            .iter()
            .map(|h| {
                serde_json::json!({
                    "name": h.facts.name, "address": h.facts.addr, "arch": h.facts.arch,
                    "processors": h.facts.processors, "capacity": h.facts.capacity,
                    "memory_mb": h.facts.memory_mb, "pid": h.facts.pid,
                    "alive": h.alive, "master": h.master, "vps": h.vps,
                    "owner": h.owner,
                    "waiting": h.waiting.iter().map(|(tid, why)| serde_json::json!({
                        "tid": format!("t{tid:x}"), "why": why,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(v));
        return Ok(());
    }
    println!(
        "{:<10} {:<22} {:<16} {:>5} {:>8} {:>8} {:>4}  {:<7} OWNER",
        "HOST", "ADDRESS", "ARCH", "PROCS", "CAPACITY", "MEM(MB)", "VPS", "STATE"
    );
    for h in hosts {
        let state = match (h.alive, h.master) {
            (true, true) => "master",
            (true, false) => "up",
            (false, _) => "gone",
        };
        let owner = h
            .owner
            .as_ref()
            .map_or_else(|| "-".to_string(), super::owner::summary);
        println!(
            "{:<10} {:<22} {:<16} {:>5} {:>8.2} {:>8} {:>4}  {state:<7} {owner}",
            h.facts.name,
            h.facts.addr,
            h.facts.arch,
            h.facts.processors,
            h.facts.capacity,
            h.facts.memory_mb,
            h.vps
        );
        for (tid, why) in &h.waiting {
            println!("    t{tid:x} waits here: {why}");
        }
    }
    Ok(())
}
