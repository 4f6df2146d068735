//! `pi`: each VP integrates 4/(1+x²) over its share of [0, 1) with the
//! midpoint rule and prints `partial VP N VALUE`; the sum of the partials
//! is π. `mig demo` adds them up and checks the answer.
//!
//! Usage: pi [INTERVALS]   (default 20,000,000 in all, split across VPs)

fn main() {
    let me = mig_examples::identity_or_solo();
    let total: u64 = match std::env::args().nth(1).map(|s| s.parse()) {
        None => 20_000_000,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("pi: INTERVALS must be a positive whole number");
            std::process::exit(2);
        }
    };
    let n = u64::from(me.nvps.max(1));
    let vp = u64::from(me.vp);
    let (lo, hi) = (total * vp / n, total * (vp + 1) / n);
    let h = 1.0 / total as f64;
    let mut sum = 0.0f64;
    for i in lo..hi {
        let x = (i as f64 + 0.5) * h;
        sum += 4.0 / (1.0 + x * x);
    }
    println!("partial {} {} {:.17e}", me.vp, me.nvps, sum * h);
}
