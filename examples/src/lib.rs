//! Shared helpers of the example programs: reading the VP's identity (with a
//! fallback for running an example by hand outside a virtual machine).

use libmig::vp::Identity;

/// This VP's identity, or a single-VP identity when run by hand.
pub fn identity_or_solo() -> Identity {
    Identity::from_env().unwrap_or(Identity {
        tid: 0,
        job: "solo".into(),
        vp: 0,
        nvps: 1,
        host: "local".into(),
    })
}
