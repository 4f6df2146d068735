//! migd: the mig daemon as a library.
//!
//! The `migd` binary only parses flags and calls into this crate, so tests
//! can start a daemon as the real binary or in-process. The scheduler
//! (`sched`) is pure and shared with the simulator.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod sched;
