//! The one door from C into this library: every exported function runs its
//! body through `guard`, so that a Rust panic (a bug of ours) becomes PVM's
//! system error code for the call and never unwinds into, or aborts, the
//! user's program.
//!
//! What does not live here: the codes themselves (`errors`), what each call
//! does.

use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::errors;
use crate::state::MatchFn;

/// What a C entry answers when its body panicked.
pub trait OnPanic {
    /// The answer.
    fn on_panic() -> Self;
}

impl OnPanic for c_int {
    fn on_panic() -> Self {
        errors::SYS_ERR
    }
}

impl OnPanic for () {
    fn on_panic() -> Self {}
}

impl OnPanic for Option<MatchFn> {
    fn on_panic() -> Self {
        None
    }
}

/// Run a C entry's body; a panic (already reported on stderr by Rust's
/// hook) becomes `T::on_panic()`. The task's state stays usable: its lock
/// is taken back from a poisoned mutex (`state::task`).
pub fn guard<T: OnPanic>(body: impl FnOnce() -> T) -> T {
    // AssertUnwindSafe: after a panic the caller gets an error code and
    // the state is whatever the body left; every body keeps the task's
    // state consistent between its own steps, as it must for C callers
    // that go on after any error.
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|_| T::on_panic())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_the_system_error_and_the_library_goes_on() {
        let code: c_int = guard(|| panic!("a bug"));
        assert_eq!(code, errors::SYS_ERR);
        guard::<()>(|| panic!("in a void call"));
        assert_eq!(guard(|| -> c_int { 7 }), 7);
    }

    /// Every function the library exports (`#[no_mangle]`, those macros
    /// make too) starts by going through `guard`, read from the source;
    /// the naked `pvm_packf`/`pvm_unpackf` only jump into C.
    #[test]
    fn every_exported_function_goes_through_the_guard() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .expect("the source")
            .map(|e| e.expect("an entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "rs"))
            .collect();
        files.sort();
        let (mut guarded, mut unguarded) = (0, Vec::new());
        for path in files {
            let text = std::fs::read_to_string(&path).expect("a source file");
            for (at, _) in text.match_indices("extern \"C\" fn ") {
                // The item's attributes: back to the end of the one before.
                let head = &text[text[..at].rfind('}').map_or(0, |i| i + 1)..at];
                if !head.contains("#[no_mangle]") || head.contains("#[unsafe(naked)]") {
                    continue;
                }
                let rest = &text[at..];
                let body = rest.find('{').map_or("", |i| rest[i + 1..].trim_start());
                if body.starts_with("crate::ffi::guard(") {
                    guarded += 1;
                } else {
                    let name: String = rest["extern \"C\" fn ".len()..]
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || "_$".contains(*c))
                        .collect();
                    unguarded.push(format!("{}: {name}", path.display()));
                }
            }
        }
        assert!(
            unguarded.is_empty(),
            "not through the guard: {unguarded:#?}"
        );
        // (The scan finds them: PVM's C and Fortran calls, 100 and more.)
        assert!(guarded > 100, "only {guarded} exported functions found");
    }

    /// The next call on this thread panics inside, holding the task's lock.
    fn panic_in_next_call() {
        crate::state::PANIC_IN_NEXT_CALL.with(|p| p.set(true));
    }

    #[test]
    fn a_c_entry_that_panics_answers_the_system_error_and_the_next_call_works() {
        panic_in_next_call();
        assert_eq!(crate::pack::pvm_mkbuf(0), errors::SYS_ERR);
        // The lock the panic poisoned is taken back: the task goes on.
        let id = crate::pack::pvm_mkbuf(0);
        assert!(id > 0, "pvm_mkbuf after a panic: {id}");
        assert_eq!(crate::pack::pvm_freebuf(id), errors::OK);
    }

    #[test]
    fn a_fortran_call_that_panics_puts_the_system_error_in_its_result() {
        let mut bufid: c_int = 0;
        panic_in_next_call();
        // SAFETY: an int and a place for one, as gfortran passes them.
        unsafe { crate::fortran::pvmfinitsend_(&0, &mut bufid) };
        assert_eq!(bufid, errors::SYS_ERR);
        // SAFETY: as above.
        unsafe { crate::fortran::pvmfinitsend_(&0, &mut bufid) };
        assert!(bufid > 0, "pvmfinitsend after a panic: {bufid}");
    }

    #[test]
    fn pvm_recvf_that_panics_answers_null_and_keeps_the_matcher() {
        extern "C" fn take_all(_: c_int, _: c_int, _: c_int) -> c_int {
            1
        }
        let ours: MatchFn = take_all;
        let before = crate::message::pvm_recvf(Some(ours));
        assert!(
            before.is_some(),
            "pvm_recvf answers the function used before"
        );
        panic_in_next_call();
        assert!(crate::message::pvm_recvf(None).is_none());
        // The panic changed nothing: ours is still the one in use.
        let now = crate::message::pvm_recvf(before).map(|f| f as usize);
        assert_eq!(now, Some(ours as usize));
    }
}
