//! Fuzz `mig_fuzz::swf_log` (see `targets.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mig_fuzz::swf_log(data));
