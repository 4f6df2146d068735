//! `mig hosts`: the hosts of the virtual machine, what each offers and has
//! free (memory, disk time, space in its state directory, and whether that
//! is full), which of them vote for the master (and a warning when too few
//! do for the master's machine to die safely), and the VPs each holds that
//! do not run, with why.

use std::path::Path;

use anyhow::{bail, Result};
use libmig::msg::{Request, Response};

/// Flags of `mig hosts`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub daemon: super::Daemon,
    /// Print JSON: one object per host.
    #[arg(long)]
    json: bool,
}

/// A host's part: master, voter, up (a worker) or gone.
pub fn state(h: &libmig::msg::HostInfo) -> &'static str {
    match (h.alive, h.master, h.voter) {
        (true, true, _) => "master",
        (true, false, true) => "voter",
        (true, false, false) => "up",
        (false, _, _) => "gone",
    }
}

/// The memory a new VP may still have on `h` (MB), or `-`.
fn free_memory(h: &libmig::msg::HostInfo) -> String {
    h.memory_for_new_vp()
        .map_or_else(|| "-".to_string(), |m| m.to_string())
}

/// Space free in `h`'s state directory (MiB), `FULL` when an image could
/// not be written there for lack of it, or `-`.
fn state_space(h: &libmig::msg::HostInfo) -> String {
    match (h.state_full, h.state_free_mb) {
        (true, _) => "FULL".to_string(),
        (false, Some(mb)) => mb.to_string(),
        (false, None) => "-".to_string(),
    }
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
                    "free_memory_mb": h.free_memory_mb,
                    "reserved_memory_mb": h.reserved_memory_mb, "io_busy": h.io_busy,
                    "state_free_mb": h.state_free_mb, "state_full": h.state_full,
                    "alive": h.alive, "master": h.master, "voter": h.voter, "vps": h.vps,
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
    let voters = hosts.iter().filter(|h| h.voter && h.alive).count();
    let full: Vec<String> = hosts
        .iter()
        .filter(|h| h.alive && h.state_full)
        .map(|h| h.facts.name.clone())
        .collect();
    println!(
        "{:<10} {:<22} {:<16} {:>5} {:>8} {:>8} {:>8} {:>4} {:>8} {:>4}  {:<7} OWNER",
        "HOST",
        "ADDRESS",
        "ARCH",
        "PROCS",
        "CAPACITY",
        "MEM(MB)",
        "FREE",
        "IO%",
        "DISK(MB)",
        "VPS",
        "STATE"
    );
    for h in hosts {
        let state = state(&h);
        let owner = h
            .owner
            .as_ref()
            .map_or_else(|| "-".to_string(), super::owner::summary);
        println!(
            "{:<10} {:<22} {:<16} {:>5} {:>8.2} {:>8} {:>8} {:>4} {:>8} {:>4}  {state:<7} {owner}",
            h.facts.name,
            h.facts.addr,
            h.facts.arch,
            h.facts.processors,
            h.facts.capacity,
            h.facts.memory_mb,
            free_memory(&h),
            h.io_busy
                .map_or_else(|| "-".to_string(), |b| format!("{:.0}", b * 100.0)),
            state_space(&h),
            h.vps
        );
        for (tid, why) in &h.waiting {
            println!("    t{tid:x} waits here: {why}");
        }
    }
    if !full.is_empty() {
        println!(
            "warning: the state directory of {} is full: checkpoints and moves that need room \
             there fail (their jobs go on) until space is freed there",
            full.join(", ")
        );
    }
    if voters < 3 {
        println!(
            "warning: {voters} voter{} keep{} the master's state: if the master's machine dies, \
             every job is lost. Three hosts or more give three voters, and any one of them may die.",
            if voters == 1 { "" } else { "s" },
            if voters == 1 { "s" } else { "" },
        );
    }
    Ok(())
}
