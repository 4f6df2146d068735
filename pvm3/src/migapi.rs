//! `mig.h`: state that survives a move, for C programs. The program
//! registers its memory regions; `mig_start` enrols through libmig's
//! `init_or_restore` with the regions as the state, and `mig_safe_point`
//! is libmig's safe point, the regions serialized only when an image is
//! written (a safe point that is not asked for copies nothing).
//!
//! What does not live here: the checkpoint format and moves (libmig, the
//! daemons).

use std::os::raw::c_int;

use serde::ser::{Serialize, SerializeSeq, Serializer};

use crate::state;

/// The task's context and its registered regions, as `(context, [bytes])`
/// when serialized (see `state::Saved`).
struct Regions(i32, Vec<(usize, usize)>);

/// The regions' bytes.
struct Bytes<'a>(&'a [(usize, usize)]);

impl Serialize for Regions {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (self.0, Bytes(&self.1)).serialize(s)
    }
}

impl Serialize for Bytes<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for &(addr, len) in self.0 {
            // SAFETY: the program registered `len` bytes at `addr` and
            // keeps them alive while it runs (mig.h's contract).
            let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
            seq.serialize_element(serde_bytes::Bytes::new(bytes))?;
        }
        seq.end()
    }
}

/// Add memory to the state.
///
/// # Safety
/// `addr` points at `len` bytes the program keeps while it runs.
#[no_mangle]
pub unsafe extern "C" fn mig_register(addr: *mut libc::c_void, len: libc::size_t) -> c_int {
    crate::ffi::guard(|| {
        if addr.is_null() && len > 0 {
            return -1;
        }
        state::with(|t| t.regions.push((addr as usize, len)));
        0
    })
}

/// Enrol, restoring the registered memory if restarted.
#[no_mangle]
pub extern "C" fn mig_start() -> c_int {
    crate::ffi::guard(|| {
        state::with(|t| {
            let regions = t.regions.clone();
            match t.start_restoring() {
                Ok(Some(saved)) => {
                    if saved.len() != regions.len()
                        || saved.iter().zip(&regions).any(|(b, r)| b.len() != r.1)
                    {
                        eprintln!(
                        "libpvm: mig_start: the saved state does not match the memory registered"
                    );
                        return -1;
                    }
                    for (b, &(addr, len)) in saved.iter().zip(&regions) {
                        // SAFETY: `len` registered bytes at `addr`; `b` holds
                        // exactly `len`.
                        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), addr as *mut u8, len) };
                    }
                    1
                }
                Ok(None) => 0,
                Err(_) => -1,
            }
        })
    })
}

/// A safe point.
#[no_mangle]
pub extern "C" fn mig_safe_point() -> c_int {
    crate::ffi::guard(|| {
        state::with(|t| {
            let regions = Regions(t.context, t.regions.clone());
            match t.vm().map(|vm| vm.safe_point(&regions)) {
                Ok(Ok(())) => 0,
                Ok(Err(e)) => {
                    eprintln!("libpvm: mig_safe_point: {e}");
                    -1
                }
                Err(_) => -1,
            }
        })
    })
}

/// Was this VP restarted from saved state?
#[no_mangle]
pub extern "C" fn mig_restored() -> c_int {
    crate::ffi::guard(|| {
        state::with(|t| match t.vm() {
            Ok(vm) => c_int::from(vm.restored()),
            Err(_) => 0,
        })
    })
}
