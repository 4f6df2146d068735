//! `pvm_packf` and `pvm_unpackf`. They are variadic, which stable Rust
//! cannot define, so `packf.c` implements them (as `mig_pvm_packf` and
//! `mig_pvm_unpackf`, calling our `pvm_pk*`/`pvm_upk*`), and the exported
//! symbols here are one jump each into it: every register and the stack
//! stay as the caller left them, so the C function sees the caller's
//! arguments. (A C function linked into a Rust shared library is not
//! exported by it; these are.)
//!
//! What does not live here: the packing itself (`pack`).

extern "C" {
    fn mig_pvm_packf();
    fn mig_pvm_unpackf();
}

/// `int pvm_packf(const char *fmt, ...)`.
///
/// # Safety
/// As PVM documents: `fmt` a format whose conversions match the arguments.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn pvm_packf() {
    core::arch::naked_asm!("jmp {f}", f = sym mig_pvm_packf)
}

/// `int pvm_unpackf(const char *fmt, ...)`.
///
/// # Safety
/// As PVM documents: `fmt` a format whose conversions match the arguments
/// (all pointers).
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn pvm_unpackf() {
    core::arch::naked_asm!("jmp {f}", f = sym mig_pvm_unpackf)
}

/// See the x86_64 `pvm_packf`.
///
/// # Safety
/// As PVM documents.
#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn pvm_packf() {
    core::arch::naked_asm!("b {f}", f = sym mig_pvm_packf)
}

/// See the x86_64 `pvm_unpackf`.
///
/// # Safety
/// As PVM documents.
#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn pvm_unpackf() {
    core::arch::naked_asm!("b {f}", f = sym mig_pvm_unpackf)
}
