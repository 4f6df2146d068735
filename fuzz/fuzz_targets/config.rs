//! Fuzz `mig_fuzz::config` (see `targets.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mig_fuzz::config(data));
