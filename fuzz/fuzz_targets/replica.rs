//! Fuzz `mig_fuzz::replica` (see `targets.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mig_fuzz::replica(data));
