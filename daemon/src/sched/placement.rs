//! The gang placement policies the daemons and the simulator can run, by
//! name, and the scheduler config each one is.
//!
//! What lives here: `Placement` (`mig`, the default; `mtat`, seed 000 as the
//! paper gives it; `mtat+repack`, with seed 001's re-packing) and its
//! `SchedConfig`. What does not: the algorithms (`scheduler`), or the
//! policies without time slicing that only the simulator replays (`sim`).

use serde::{Deserialize, Serialize};

use super::SchedConfig;

/// How gang jobs are placed and the map kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Placement {
    /// Seed 000's MTAT and Compression place each job in one slot where it
    /// runs at its best turnaround (the fullest such slot); waiting jobs
    /// start oldest first wherever they fit, and the first that fits
    /// nowhere is promised a slot and a time that younger jobs (tried in
    /// order of expansion factor) may not delay (EASY's rule), unless
    /// moving jobs between slots lets it start now; slots are deleted by
    /// moving jobs (seed 001's shifts, then migrations); and every job
    /// also runs in each other slot where its processors are free.
    #[default]
    Mig,
    /// Seed 000 as the paper gives it: Expansion's pattern against a new
    /// slot, held jobs in fairness order.
    Mtat,
    /// `Mtat` with seed 001's re-packing after events that free cells.
    MtatRepack,
}

impl Placement {
    /// Every policy, the default first.
    pub const ALL: [Placement; 3] = [Placement::Mig, Placement::Mtat, Placement::MtatRepack];

    /// The name on the command line and in configs.
    pub fn name(self) -> &'static str {
        match self {
            Placement::Mig => "mig",
            Placement::Mtat => "mtat",
            Placement::MtatRepack => "mtat+repack",
        }
    }

    /// The policy called `name`.
    pub fn by_name(name: &str) -> Option<Placement> {
        Placement::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The names, comma-separated (for help and errors).
    pub fn names() -> String {
        Placement::ALL.map(Placement::name).join(", ")
    }

    /// The scheduler config of this policy (every other setting default).
    pub fn config(self) -> SchedConfig {
        let paper = SchedConfig::default();
        match self {
            Placement::Mig => SchedConfig {
                repack: true,
                backfill: true,
                compact: true,
                repair_in_place: true,
                align: true,
                ..paper
            },
            Placement::Mtat => SchedConfig {
                repack: false,
                ..paper
            },
            Placement::MtatRepack => SchedConfig {
                repack: true,
                ..paper
            },
        }
    }
}

impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back() {
        for p in Placement::ALL {
            assert_eq!(Placement::by_name(p.name()), Some(p));
        }
        assert_eq!(Placement::by_name("rommel"), None);
        assert_eq!(Placement::default(), Placement::Mig);
        assert_eq!(Placement::names(), "mig, mtat, mtat+repack");
        let c = Placement::Mig.config();
        assert!(c.backfill && c.compact && c.repack);
        assert!(!Placement::Mtat.config().repack && !Placement::Mtat.config().backfill);
    }
}
