//! Hearing of a long pause before it comes (opt-in): when this VP's host is
//! taken back by its owner, the daemon signals the VP and lets it run on
//! for at most the host's `quiesce_ms` (or until it says it is ready)
//! before stopping it. Gang slices never wait for this; moves and job
//! checkpoints happen at safe points, inside libmig, and need no notice.

use std::sync::atomic::{AtomicBool, Ordering};

use super::{MigError, Vm};
use crate::msg::VpMsg;

/// Set by the pause notice signal when libmig handles it (`on_pause`).
static PAUSE_COMING: AtomicBool = AtomicBool::new(false);

extern "C" fn on_pause_signal(_: libc::c_int) {
    PAUSE_COMING.store(true, Ordering::Relaxed);
}

/// The signal libmig asks for in `on_pause`.
pub const PAUSE_SIGNAL: i32 = libc::SIGUSR1;

impl Vm {
    /// Hear of a long pause before it comes: from now on, when the owner
    /// takes this host back, `pause_coming()` turns true and the VP runs on
    /// for up to the host's `quiesce_ms` (0 by default: no notice, stopped
    /// at once) or until it calls `ready_to_pause()`, then it is stopped.
    /// libmig handles SIGUSR1 for this.
    pub fn on_pause(&mut self) -> Result<(), MigError> {
        // SAFETY: the handler only stores to an atomic (async-signal-safe);
        // SA_RESTART keeps blocking calls going.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_pause_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(PAUSE_SIGNAL, &sa, std::ptr::null_mut());
        }
        self.on_pause_signal(PAUSE_SIGNAL)
    }

    /// As `on_pause`, but the notice is `signal`, which the program handles
    /// itself (a program that knows nothing of libmig can name one with
    /// `mig spawn --pause-signal`). SIGKILL, SIGSTOP and SIGCONT cannot be
    /// asked for.
    pub fn on_pause_signal(&mut self, signal: i32) -> Result<(), MigError> {
        if !crate::msg::pause_signal_ok(signal) {
            return Err(MigError::Protocol(format!(
                "signal {signal} cannot be a pause notice"
            )));
        }
        self.tell(VpMsg::PauseNotice { signal })
    }

    /// Has a pause been announced (with `on_pause`) and not yet answered?
    pub fn pause_coming(&self) -> bool {
        PAUSE_COMING.load(Ordering::Relaxed)
    }

    /// Ready for the announced pause: the daemon stops this VP now instead
    /// of at the deadline.
    pub fn ready_to_pause(&mut self) -> Result<(), MigError> {
        PAUSE_COMING.store(false, Ordering::Relaxed);
        self.tell(VpMsg::Quiesced)
    }
}
