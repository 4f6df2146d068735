//! The `migd` binary: parses flags, sets up logging, runs the daemon.
fn main() {}
