//! `mig stats`: how well the hosts keep the gang schedule: how late each
//! slot switch was against its ideal instant, how far apart hosts switched
//! for the same boundary, and the time lost to switching.

use std::path::Path;

use anyhow::{bail, Context, Result};
use libmig::msg::{Request, Response};

/// Flags of `mig stats`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub daemon: super::Daemon,
    /// Print JSON: quantum_ms, slots, hosts [{host, switches, late_ms [p50,
    /// p99, max], lost, installed}], skew_ms [p50, p99, max], boundaries.
    #[arg(long)]
    json: bool,
    /// Also draw each host's recent slot timeline into this SVG file: which
    /// job ran in each slot, and how late each switch was.
    #[arg(long, value_name = "FILE")]
    plot: Option<std::path::PathBuf>,
}

/// Run it.
pub fn run(daemon: &Path, a: Args) -> Result<()> {
    let Response::Stats(s) = super::call(daemon, &Request::Stats)? else {
        bail!("unexpected reply")
    };
    if let Some(file) = &a.plot {
        let Response::Timeline { quantum_ns, hosts } = super::call(daemon, &Request::Timeline)?
        else {
            bail!("unexpected reply")
        };
        if quantum_ns == 0 || hosts.iter().all(|h| h.switches.is_empty()) {
            bail!("nothing to draw: no slot switch yet (one slot, or slicing off)");
        }
        std::fs::write(file, crate::plot::slot_timeline(quantum_ns, &hosts))
            .with_context(|| format!("cannot write {}", file.display()))?;
        eprintln!("mig: wrote {}", file.display());
    }
    if a.json {
        println!("{}", serde_json::to_string(&s)?);
        return Ok(());
    }
    if s.quantum_ms == 0.0 {
        println!("gang slicing is off (quantum_ms = 0)");
        return Ok(());
    }
    println!(
        "quantum {} ms, {} per round",
        s.quantum_ms,
        libmig::words::count(s.slots, "slot", "slots")
    );
    println!(
        "{:<10} {:>9} {:>10} {:>10} {:>10} {:>8}",
        "HOST", "SWITCHES", "LATE p50", "p99", "max", "LOST"
    );
    for h in &s.hosts {
        println!(
            "{:<10} {:>9} {:>8.3}ms {:>8.3}ms {:>8.3}ms {:>7.3}%",
            h.host,
            h.switches,
            h.late_ms[0],
            h.late_ms[1],
            h.late_ms[2],
            h.lost * 100.0
        );
    }
    println!(
        "skew between hosts for the same boundary ({}): p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        libmig::words::count(s.boundaries, "boundary", "boundaries"),
        s.skew_ms[0],
        s.skew_ms[1],
        s.skew_ms[2]
    );
    Ok(())
}
