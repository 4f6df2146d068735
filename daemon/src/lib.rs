//! migd: the mig daemon as a library.
//!
//! The `migd` binary only parses flags and calls `run`, so tests can start a
//! daemon as the real binary or in-process.
//!
//! * `server` — the event loop that owns all state;
//! * `conn` — one buffered non-blocking connection;
//! * `master` — hosts, jobs and Tids, and the scheduler's actions turned into messages (no I/O);
//! * `route` — where a message between VPs goes next (tables, no I/O);
//! * `groups` — named groups and barriers, kept by the master (no I/O);
//! * `mailbox` — PVM programs' message mailbox, kept by the master (no I/O);
//! * `host` — VP supervision on this host (fork/exec, pipes, reaping);
//! * `stdin_feed` — feeding a VP's standard input from `mig spawn --wait`;
//! * `job_files` — jobs' kept output and the history of ended jobs, on the master's disk;
//! * `contain` — each VP's whole process tree in a cgroup of its own;
//! * `store` — job checkpoints' images kept on this host (per job and generation);
//! * `keeper` — the slow work on images (sums, syncs) on a thread of its own;
//! * `disk` — how full the state directory is;
//! * `turns` — how long the daemon loop's turns take (for `mig stats`);
//! * `slicer` — the gang slicer: which local VPs run in the slot in force (no I/O);
//! * `owner` — the owner monitor: activity sources and the policy (when the host is offered);
//! * `config`, `facts`, `log` — configuration, host facts, the log;
//! * `sched` — the embedded scheduler (pure; shared with the simulator);
//! * `sim` — the trace-driven simulator (pure).
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod background;
pub mod balance;
pub mod clone_into;
pub mod config;
pub mod conn;
pub mod consensus;
pub mod contain;
pub mod discard;
pub mod disk;
pub mod facts;
pub mod flags;
pub mod flow;
pub mod groups;
pub mod guardian;
pub mod host;
pub mod image_check;
pub mod job_files;
pub mod keeper;
pub mod ledger;
pub mod log;
pub mod mailbox;
pub mod master;
pub mod metrics;
pub mod migrate;
pub mod owner;
pub mod route;
pub mod sched;
pub mod server;
pub mod sim;
pub mod slicer;
pub mod state_dir;
pub mod stdin_feed;
pub mod store;
pub mod switcher;
pub mod transparent;
pub mod turns;

pub use config::Config;
pub use server::{run, DaemonError};
