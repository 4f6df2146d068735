//! Fuzz `mig_fuzz::handshake` (see `targets.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mig_fuzz::handshake(data));
