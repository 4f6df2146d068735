//! The shared library answers to PVM's soname, so programs linked against
//! PVM 3.4's `libpvm3.so.3` load ours.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libpvm3.so.3");
}
