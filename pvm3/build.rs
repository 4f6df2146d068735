//! The shared library answers to PVM's soname, so programs linked against
//! PVM 3.4's `libpvm3.so.3` load ours; `pvm_packf`/`pvm_unpackf`, being
//! variadic, are C (`src/packf.c`, reached through `packf.rs`).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libpvm3.so.3");
    println!("cargo:rerun-if-changed=src/packf.c");
    cc::Build::new().file("src/packf.c").compile("pvm3packf");
}
