//! `ballast`: a plain program that holds memory and nothing of mig: it
//! never calls libmig and never speaks to its daemon, so its daemon can
//! move it only from outside (saving its pages as they stand). The
//! transparent-move benchmark (`tests/benches/transparent.rs`) moves it.
//!
//! Usage: ballast --mib N [--until FILE]
//!
//! It fills N MiB with a pattern (every page written), prints
//! `ballast: N MiB touched`, then sleeps 20 ms at a time, checking one MiB
//! of the pattern after each sleep, round and round. When FILE exists it
//! checks every byte and prints `ballast: N MiB checked, P passes: ok`
//! (P: full rounds of the slow check) and exits 0; a byte that is not
//! what it wrote ends it with exit status 1 and the offset. Without
//! `--until` it runs until it is killed.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use mig_examples::{flag, num_flag};

const PROG: &str = "ballast";
const MIB: usize = 1 << 20;

/// The byte at offset `i`: a hash of it, so no page looks like another.
fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8
}

/// The first offset in `mem[at..]` whose byte is not the pattern's.
fn wrong(mem: &[u8], at: usize) -> Option<usize> {
    mem.iter()
        .enumerate()
        .find(|&(i, &b)| b != pattern(at + i))
        .map(|(i, _)| at + i)
}

fn main() {
    let mib: usize = num_flag(PROG, "mib", 0);
    if mib == 0 {
        eprintln!("{PROG}: usage: ballast --mib N [--until FILE]");
        std::process::exit(2);
    }
    let until = flag("until").map(PathBuf::from);
    let mut mem = vec![0u8; mib * MIB];
    for (i, b) in mem.iter_mut().enumerate() {
        *b = pattern(i);
    }
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{PROG}: {mib} MiB touched");
    let _ = out.flush();
    let (mut next, mut passes) = (0usize, 0u64);
    loop {
        if until.as_ref().is_some_and(|f| f.exists()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        let at = next * MIB;
        if let Some(bad) = wrong(&mem[at..at + MIB], at) {
            eprintln!("{PROG}: byte {bad} is not what was written");
            std::process::exit(1);
        }
        next += 1;
        if next == mib {
            next = 0;
            passes += 1;
        }
    }
    if let Some(bad) = wrong(&mem, 0) {
        eprintln!("{PROG}: byte {bad} is not what was written");
        std::process::exit(1);
    }
    let _ = writeln!(out, "{PROG}: {mib} MiB checked, {passes} passes: ok");
}
