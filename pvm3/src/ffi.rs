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
}
