//! Placement and balancing beside the gang scheduler, from seeds 002-004:
//! pure decisions (no I/O, no clock), each checked against its paper's own
//! examples.
//!
//! * `nres` — Arora, Das and Biswas: N-resource nodes, when a node asks its
//!   neighbours for room, and the fewest-choices-first mapping (seed 004);
//! * `roc` — IPG-SaLaD's Rate-of-Change load balancing, receiver-initiated
//!   (seed 003).
//!
//! What does not live here: the gang scheduler (`crate::sched`), the
//! simulator's replay of traces (`crate::sim`).

pub mod nres;
pub mod roc;
