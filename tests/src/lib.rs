//! Test fixtures: real daemons on loopback.
