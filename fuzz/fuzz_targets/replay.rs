//! Fuzz `mig_fuzz::replay_lines` (see `targets.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mig_fuzz::replay_lines(data));
