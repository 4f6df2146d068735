//! The owner policy: when a host is offered to mig and when its owner has it
//! back. Pure: observations and instants in, changes out.
//!
//! What lives here: the three states (offered, suspended, reclaimed), the
//! rules between them, and the changes the daemon must carry out. What does
//! not: reading the sources (`load`, `input`), stopping processes or telling
//! the master (the server).
//!
//! The rules, in the spirit of HTCondor's desktop policy (START after 15
//! minutes of keyboard idle with load ≤ 0.3, SUSPEND on a keystroke or load
//! > 0.5, PREEMPT after 10 minutes suspended), but moving work off at once:
//! * offered → taken back on any owner input, non-VP load above
//!   `reclaim_load`, or `mig owner reclaim`: every VP is stopped at once;
//!   after `move_after` still taken back, the host's processors leave the
//!   pool (`processor_exit`) and the scheduler moves its VPs;
//! * taken back → offered when the owner has been idle for
//!   `offer_after_idle`: no input and non-VP load at most `offer_max_load`
//!   all that time (the gap between the two loads is the hysteresis), or on
//!   `mig owner release`; a host taken back by `mig owner reclaim` stays so
//!   until `mig owner release`.

use std::time::{Duration, Instant};

use libmig::msg::OwnerState;

/// The policy's numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyConfig {
    /// Non-VP load (in cores) above which the owner takes the host back.
    pub reclaim_load: f64,
    /// Non-VP load (in cores) at most which the owner counts as idle.
    pub offer_max_load: f64,
    /// How long the owner must be idle before the host is offered.
    pub offer_after_idle: Duration,
    /// How long VPs stay stopped on a taken-back host before they are moved.
    pub move_after: Duration,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            reclaim_load: 0.5,
            offer_max_load: 0.3,
            offer_after_idle: Duration::from_secs(15 * 60),
            move_after: Duration::ZERO,
        }
    }
}

/// What the sources saw in one poll.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Seen {
    /// Owner input, with the source that saw it (e.g. `tty /dev/pts/3`).
    pub input: Option<String>,
    /// Non-VP load in cores over the load window, when measured.
    pub load: Option<f64>,
    /// `mig owner reclaim` (true) or `release` (false).
    pub explicit: Option<bool>,
}

/// Something the daemon must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Stop (SIGSTOP) every VP on this host, now.
    StopVps,
    /// Let them run again (SIGCONT).
    ResumeVps,
    /// The host's processors leave the pool (`processor_exit`).
    LeavePool,
    /// They join it again (`new_processor`).
    JoinPool,
}

/// The policy's state.
#[derive(Debug, Clone)]
pub struct Policy {
    cfg: PolicyConfig,
    state: OwnerState,
    since: Instant,
    decided_by: String,
    /// Last owner activity: input, or load above `offer_max_load`.
    last_activity: Option<Instant>,
    /// Taken back by `mig owner reclaim`: only `release` offers it again.
    held: bool,
}

impl Policy {
    /// A policy starting at `now`; `last_input` is the newest owner input
    /// the sources know of (e.g. a terminal's access time). The host starts
    /// offered unless the owner was active within `offer_after_idle`.
    pub fn new(cfg: PolicyConfig, now: Instant, last_input: Option<Instant>) -> Policy {
        let recent = last_input.is_some_and(|t| now.duration_since(t) < cfg.offer_after_idle);
        Policy {
            state: if recent {
                OwnerState::Reclaimed
            } else {
                OwnerState::Offered
            },
            since: now,
            decided_by: if recent {
                "owner input at start".into()
            } else {
                "owner idle at start".into()
            },
            last_activity: last_input,
            held: false,
            cfg,
        }
    }

    /// Now.
    pub fn state(&self) -> OwnerState {
        self.state
    }

    /// Since when.
    pub fn since(&self) -> Instant {
        self.since
    }

    /// Which source decided the state, and what it saw.
    pub fn decided_by(&self) -> &str {
        &self.decided_by
    }

    /// The last owner activity.
    pub fn last_activity(&self) -> Option<Instant> {
        self.last_activity
    }

    /// Is the host offered (its VPs may run)?
    pub fn offered(&self) -> bool {
        self.state == OwnerState::Offered
    }

    fn go(&mut self, state: OwnerState, now: Instant, by: String) {
        self.state = state;
        self.since = now;
        self.decided_by = by;
    }

    /// One poll's observations at `now`: the changes to carry out, in order.
    pub fn observe(&mut self, seen: &Seen, now: Instant) -> Vec<Change> {
        let over = seen.load.filter(|&l| l > self.cfg.reclaim_load);
        let busy = seen.load.is_some_and(|l| l > self.cfg.offer_max_load);
        if seen.input.is_some() || busy {
            self.last_activity = Some(now);
        }
        let mut out = Vec::new();
        match (self.state, seen.explicit) {
            (OwnerState::Offered, Some(true)) => {
                self.held = true;
                self.take_back(now, "mig owner reclaim".into(), &mut out);
            }
            (OwnerState::Offered, _) => {
                let why = match (&seen.input, over) {
                    (Some(input), _) => Some(format!("input: {input}")),
                    (None, Some(l)) => Some(format!(
                        "load: {l:.2} cores not ours > {}",
                        self.cfg.reclaim_load
                    )),
                    _ => None,
                };
                if let Some(why) = why {
                    self.take_back(now, why, &mut out);
                }
            }
            (OwnerState::Suspended | OwnerState::Reclaimed, Some(true)) => {
                self.held = true;
                self.decided_by = "mig owner reclaim".into();
            }
            (state @ (OwnerState::Suspended | OwnerState::Reclaimed), Some(false)) => {
                self.offer(state, now, "mig owner release".into(), &mut out)
            }
            (state @ (OwnerState::Suspended | OwnerState::Reclaimed), None) => {
                if state == OwnerState::Suspended
                    && now.duration_since(self.since) >= self.cfg.move_after
                {
                    let by = self.decided_by.clone();
                    self.go(OwnerState::Reclaimed, now, by);
                    out.push(Change::LeavePool);
                }
                let idle = self
                    .last_activity
                    .is_none_or(|t| now.duration_since(t) >= self.cfg.offer_after_idle);
                if !self.held && idle {
                    let by = format!(
                        "owner idle {} s, load ≤ {}",
                        self.cfg.offer_after_idle.as_secs_f64(),
                        self.cfg.offer_max_load
                    );
                    self.offer(self.state, now, by, &mut out);
                }
            }
        }
        out
    }

    fn take_back(&mut self, now: Instant, why: String, out: &mut Vec<Change>) {
        out.push(Change::StopVps);
        if self.cfg.move_after.is_zero() {
            self.go(OwnerState::Reclaimed, now, why);
            out.push(Change::LeavePool);
        } else {
            self.go(OwnerState::Suspended, now, why);
        }
    }

    fn offer(&mut self, from: OwnerState, now: Instant, why: String, out: &mut Vec<Change>) {
        self.held = false;
        match from {
            OwnerState::Offered => return,
            OwnerState::Suspended => out.push(Change::ResumeVps),
            OwnerState::Reclaimed => out.extend([Change::ResumeVps, Change::JoinPool]),
        }
        self.go(OwnerState::Offered, now, why);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(move_after_ms: u64) -> PolicyConfig {
        PolicyConfig {
            reclaim_load: 0.5,
            offer_max_load: 0.3,
            offer_after_idle: Duration::from_secs(10),
            move_after: Duration::from_millis(move_after_ms),
        }
    }

    fn load(l: f64) -> Seen {
        Seen {
            load: Some(l),
            ..Seen::default()
        }
    }

    #[test]
    fn starts_offered_unless_the_owner_was_just_active() {
        let t0 = Instant::now() + Duration::from_secs(100);
        assert!(Policy::new(cfg(0), t0, None).offered());
        assert!(Policy::new(cfg(0), t0, Some(t0 - Duration::from_secs(60))).offered());
        let p = Policy::new(cfg(0), t0, Some(t0 - Duration::from_secs(2)));
        assert_eq!(p.state(), OwnerState::Reclaimed);
    }

    #[test]
    fn load_takes_the_host_back_at_once_and_hysteresis_keeps_it() {
        let t0 = Instant::now();
        let mut p = Policy::new(cfg(0), t0, None);
        let s = Duration::from_secs(1);
        assert!(p.observe(&load(0.4), t0 + s).is_empty(), "0.4 is not > 0.5");
        assert_eq!(
            p.observe(&load(0.9), t0 + 2 * s),
            vec![Change::StopVps, Change::LeavePool]
        );
        assert!(p.decided_by().contains("load"), "{}", p.decided_by());
        // 0.4 is below the reclaim load but above the idle load: still busy.
        for i in 3..30 {
            assert!(p.observe(&load(0.4), t0 + i * s).is_empty());
        }
        // Last busy at 29 s: offered 10 s later, not before.
        for i in 30..39 {
            assert!(p.observe(&load(0.1), t0 + i * s).is_empty(), "at {i}s");
        }
        assert_eq!(
            p.observe(&load(0.1), t0 + 39 * s),
            vec![Change::ResumeVps, Change::JoinPool]
        );
        assert!(p.offered());
    }

    #[test]
    fn input_restarts_the_idle_clock() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut p = Policy::new(cfg(0), t0, None);
        let typed = Seen {
            input: Some("tty /dev/pts/3".into()),
            ..Seen::default()
        };
        assert_eq!(p.observe(&typed, t0 + s).len(), 2);
        assert!(p.observe(&typed, t0 + 8 * s).is_empty());
        assert!(p.observe(&Seen::default(), t0 + 17 * s).is_empty());
        assert_eq!(p.observe(&Seen::default(), t0 + 18 * s).len(), 2);
    }

    #[test]
    fn suspended_vps_move_only_after_move_after() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let mut p = Policy::new(cfg(500), t0, None);
        assert_eq!(p.observe(&load(2.0), t0 + ms), vec![Change::StopVps]);
        assert_eq!(p.state(), OwnerState::Suspended);
        assert!(p.observe(&load(2.0), t0 + 400 * ms).is_empty());
        assert_eq!(
            p.observe(&load(2.0), t0 + 501 * ms),
            vec![Change::LeavePool]
        );
        assert_eq!(p.state(), OwnerState::Reclaimed);
    }

    #[test]
    fn a_suspended_host_released_resumes_without_leaving_the_pool() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let mut p = Policy::new(cfg(500), t0, None);
        p.observe(&load(2.0), t0 + ms);
        let release = Seen {
            explicit: Some(false),
            ..Seen::default()
        };
        assert_eq!(p.observe(&release, t0 + 2 * ms), vec![Change::ResumeVps]);
        assert!(p.offered());
    }

    #[test]
    fn explicit_reclaim_holds_until_release() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut p = Policy::new(cfg(0), t0, None);
        let reclaim = Seen {
            explicit: Some(true),
            ..Seen::default()
        };
        assert_eq!(p.observe(&reclaim, t0 + s).len(), 2);
        assert_eq!(p.decided_by(), "mig owner reclaim");
        assert!(p.observe(&Seen::default(), t0 + 3600 * s).is_empty());
        let release = Seen {
            explicit: Some(false),
            ..Seen::default()
        };
        assert_eq!(
            p.observe(&release, t0 + 3601 * s),
            vec![Change::ResumeVps, Change::JoinPool]
        );
        // Released by hand although input was recent: offered, and the next
        // input takes it back again.
        assert!(p.offered());
        assert_eq!(p.observe(&release, t0 + 3602 * s), vec![]);
    }
}
