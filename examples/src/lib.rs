//! Shared helpers of the example programs: joining the virtual machine
//! (fresh or restored after a move) with a clear message when run by hand,
//! flags, a seeded random generator, and percentiles.

use libmig::{MigError, Vm};
use serde::de::DeserializeOwned;

fn not_a_vp(name: &str, e: &MigError) -> ! {
    eprintln!("{name}: {e}");
    eprintln!(
        "{name}: run it on a virtual machine, e.g. `mig up` then `mig spawn -n 4 --wait {name}`"
    );
    std::process::exit(2);
}

/// Join the virtual machine, or say how to run the example and exit 2.
pub fn init_or_exit(name: &str) -> Vm {
    Vm::init().unwrap_or_else(|e| not_a_vp(name, &e))
}

/// Join the virtual machine fresh or, after a move, with the state saved
/// at the last safe point (`Vm::init_or_restore`); outside a VP, say how to
/// run the example and exit 2.
pub fn init_or_restore_or_exit<S: DeserializeOwned>(
    name: &str,
    fresh: impl FnOnce() -> S,
) -> (Vm, S) {
    match Vm::init_or_restore(fresh) {
        Ok(v) => v,
        Err(e @ MigError::NotAVp(_)) => not_a_vp(name, &e),
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::exit(1)
        }
    }
}

/// Is the program running as a VP?
pub fn in_vm() -> bool {
    std::env::var_os(libmig::vp::env::TID).is_some()
}

/// The value after `--name` (or `--name=value`) in the arguments.
pub fn flag(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let long = format!("--{name}");
    let eq = format!("--{name}=");
    args.iter().enumerate().find_map(|(i, a)| {
        if *a == long {
            args.get(i + 1).cloned()
        } else {
            a.strip_prefix(&eq).map(str::to_string)
        }
    })
}

/// Is `--name` given?
pub fn switch(name: &str) -> bool {
    let long = format!("--{name}");
    std::env::args().any(|a| a == long)
}

/// A numeric flag with a default; a bad value exits 2 with a message.
pub fn num_flag<T: std::str::FromStr>(prog: &str, name: &str, default: T) -> T {
    match flag(name) {
        None => default,
        Some(v) => v.parse().unwrap_or_else(|_| {
            eprintln!("{prog}: --{name} {v:?} is not a valid number");
            std::process::exit(2)
        }),
    }
}

/// Exit with a message on a message-passing error.
pub fn or_die<T>(prog: &str, r: Result<T, MigError>) -> T {
    r.unwrap_or_else(|e| {
        eprintln!("{prog}: {e}");
        std::process::exit(1)
    })
}

/// SplitMix64: a small seeded generator, the same on every host.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Nearest-rank percentile `p` (0..100) of sorted samples.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 100.0), 100.0);
        assert_eq!(percentile(&[7.0], 50.0), 7.0);
    }

    #[test]
    fn the_generator_is_uniform_enough_and_reproducible() {
        let mut a = Rng::new(1);
        let mut b = Rng::new(1);
        let xs: Vec<f64> = (0..10_000).map(|_| a.unit()).collect();
        assert!(xs
            .iter()
            .zip((0..10_000).map(|_| b.unit()))
            .all(|(x, y)| *x == y));
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        assert!((mean - 0.5).abs() < 0.02, "{mean}");
        assert!(xs.iter().all(|x| (0.0..1.0).contains(x)));
    }
}
