//! Placement and balancing beside the gang scheduler, from seeds 002-004:
//! pure decisions (no I/O, no clock), each checked against its paper's own
//! examples.
//!
//! * `bidding` — Rommel and Stankovic: estimates under processor sharing
//!   and bids for simple programs, distributed groups and clusters, and
//!   idle sites taking work (seed 002);
//! * `nres` — Arora, Das and Biswas: N-resource nodes, when a node asks its
//!   neighbours for room, and the fewest-choices-first mapping (seed 004);
//! * `rate` — Rate-of-Change as one daemon runs it: its samples, its
//!   requests, its tables, its answers;
//! * `roc` — IPG-SaLaD's Rate-of-Change load balancing, receiver-initiated
//!   (seed 003);
//! * `auction` — seed 002's request for bids as the daemon where a job
//!   arrives runs it: who was asked, the bids in, the decision;
//! * `choice` — which processors a new job may use when the daemons run
//!   one of these (`migd --placement bidding|nres|roc`);
//!
//! What does not live here: the gang scheduler (`crate::sched`), the
//! simulator's replay of traces (`crate::sim`).

pub mod auction;
pub mod bidding;
pub mod choice;
pub mod nres;
pub mod rate;
pub mod roc;
