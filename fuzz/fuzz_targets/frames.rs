//! Fuzz `mig_fuzz::frames` (see `targets.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mig_fuzz::frames(data));
