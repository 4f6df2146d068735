//! The embedded scheduler of seed 000 (Al-Saqabi, Otto, Walpole), pure:
//! no sockets, no processes, no clock. Events go in, actions come out; the
//! daemon and the simulator run the same code.
//!
//! * `mtat` — Minimum Turn Around Time (section 4.1), per-architecture pools;
//! * `compress` — the smallest processor set reaching `T_min` (section 4.2);
//! * `expand` — the replaceable search for free space (section 4.3);
//! * `repack` — shifting whole jobs between slots (seed 001);
//! * `map` — the allocation map (Figure 1);
//! * `scheduler` — the four events plus submission and job exit (section 4.4);
//! * `placement` — the policies by name (`mig`, `mtat`, `mtat+repack`);
//! * `replay` — the JSON event format of `mig sched replay` and its output.
//!
//! Where the paper's formulas fall short of its own theorems (MTAT's Drag,
//! Compression's bookkeeping and its per-pool bound), the theorem wins; the
//! module docs of `mtat` and `compress` give the counterexamples, each kept as
//! a regression test.

pub mod compress;
pub mod event;
pub mod expand;
pub mod map;
pub mod mtat;
pub mod placement;
pub mod random;
pub mod repack;
pub mod replay;
pub mod scheduler;

#[cfg(test)]
mod mig_tests;
#[cfg(test)]
mod tests;

pub use expand::{by_name as expansion_by_name, Demand, Expansion, Pattern};
pub use map::{AllocationMap, Processor};
pub use mtat::{mtat, mtat_pools, Mtat};
pub use placement::Placement;
pub use scheduler::{Action, Event, JobView, SchedConfig, SchedError, Scheduler, TableCell};
