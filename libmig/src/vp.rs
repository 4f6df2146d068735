//! A VP's identity, as its daemon started it: read from the environment.

use thiserror::Error;

use crate::msg::Tid;

/// Environment variables a daemon sets for every VP.
pub mod env {
    /// The VP's Tid.
    pub const TID: &str = "MIG_TID";
    /// Its job id.
    pub const JOB: &str = "MIG_JOB";
    /// Its index in the job.
    pub const VP: &str = "MIG_VP";
    /// VPs in the job at start.
    pub const NVPS: &str = "MIG_NVPS";
    /// The local daemon's socket.
    pub const SOCKET: &str = "MIG_SOCKET";
    /// The host it runs on.
    pub const HOST: &str = "MIG_HOST";
    /// The descriptor of its socket to the daemon.
    pub const FD: &str = "MIG_FD";
    /// The Tid of the VP that spawned it, if one did.
    pub const PARENT: &str = "MIG_PARENT";
    /// The checkpoint image a VP is restarted from (after a migration).
    pub const RESTORE: &str = "MIG_RESTORE";
    /// Set (to 1) by the daemon when it has checked that image's checksum
    /// itself: the VP then checks only its shape (size, magic, version).
    pub const RESTORE_SUMMED: &str = "MIG_RESTORE_SUMMED";
    /// How many microseconds a VP looks for a message before it sleeps
    /// (default 50; 0: never).
    pub const SPIN_US: &str = "MIG_SPIN_US";
    /// Its job's incarnation: restarts from a checkpoint so far (0 if unset).
    pub const INCARNATION: &str = "MIG_INCARNATION";
    /// A signal (number) the VP's program wants before a long pause, set
    /// by `mig spawn --pause-signal` for programs that know nothing of
    /// libmig (see `Vm::on_pause_signal`).
    pub const PAUSE_SIGNAL: &str = "MIG_PAUSE_SIGNAL";
}

/// Not running as a VP.
#[derive(Debug, Error)]
#[error(
    "not running inside a mig VP ({0} is not set or invalid): start the program with `mig spawn`"
)]
pub struct NotAVp(pub &'static str);

/// Who this VP is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// Its Tid.
    pub tid: Tid,
    /// Its job.
    pub job: String,
    /// Its index in the job.
    pub vp: u32,
    /// VPs in the job at start.
    pub nvps: u32,
    /// Host it runs on.
    pub host: String,
    /// Its job's incarnation (see `Envelope::incarnation`).
    pub incarnation: u32,
}

impl Identity {
    /// Read the identity from the environment.
    pub fn from_env() -> Result<Identity, NotAVp> {
        fn get<T: std::str::FromStr>(k: &'static str) -> Result<T, NotAVp> {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse().ok())
                .ok_or(NotAVp(k))
        }
        Ok(Identity {
            tid: get(env::TID)?,
            job: get(env::JOB)?,
            vp: get(env::VP)?,
            nvps: get(env::NVPS)?,
            host: get(env::HOST)?,
            incarnation: std::env::var(env::INCARNATION)
                .map_or(Ok(0), |v| v.parse())
                .map_err(|_| NotAVp(env::INCARNATION))?,
        })
    }
}
