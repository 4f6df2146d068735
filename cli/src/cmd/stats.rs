//! `mig stats`: how well the hosts keep the gang schedule: how late each
//! slot switch was against its ideal instant, how far apart hosts switched
//! for the same boundary, and the time lost to switching; and how long each
//! daemon's loop takes a turn (a long one delays heartbeats and elections'
//! messages).

use std::path::Path;

use anyhow::{bail, Context, Result};
use libmig::msg::{Request, Response};

/// Flags of `mig stats`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub daemon: super::Daemon,
    /// Print JSON: quantum_ms, slots, hosts [{host, switches, late_ms [p50,
    /// p99, max], lost, installed}], skew_ms [p50, p99, max], boundaries,
    /// loop_turns [{host, master, turns {longest_us, turns, window_s,
    /// window_longest_us, window_p99_us, window_turns}}].
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
        // One slot a round: nothing switches, the slot runs until now.
        let now_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let until = (s.slots <= 1).then_some(now_ns);
        std::fs::write(file, crate::plot::slot_timeline(quantum_ns, &hosts, until))
            .with_context(|| format!("cannot write {}", file.display()))?;
        eprintln!("mig: wrote {}", file.display());
    }
    if a.json {
        println!("{}", serde_json::to_string(&s)?);
        return Ok(());
    }
    print_turns(&s.loop_turns);
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

/// Each daemon's loop turns: the longest in the recent window and since it
/// started, and the window's 99th percentile.
fn print_turns(hosts: &[libmig::msg::HostTurns]) {
    let Some(first) = hosts.first() else {
        return;
    };
    let ms = |us: u64| us as f64 / 1000.0;
    println!(
        "{:<14} {:>12} {:>12} {:>12} {:>10}",
        "LOOP TURNS",
        format!("LAST {}s max", first.turns.window_s),
        "p99",
        "SINCE START",
        "TURNS"
    );
    for h in hosts {
        let name = if h.master {
            format!("{} (master)", h.host)
        } else {
            h.host.clone()
        };
        println!(
            "{:<14} {:>10.1}ms {:>10.1}ms {:>10.1}ms {:>10}",
            name,
            ms(h.turns.window_longest_us),
            ms(h.turns.window_p99_us),
            ms(h.turns.longest_us),
            h.turns.turns
        );
    }
}
