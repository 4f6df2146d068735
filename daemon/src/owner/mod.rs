//! The owner monitor: is this workstation its owner's right now?
//!
//! What lives here: `OwnerConfig` (the `[owner]` section of the config
//! file), and `Monitor`, which polls every source, feeds the policy and
//! returns what the daemon must do (stop or resume its VPs, leave or join
//! the pool). What does not: signalling processes or talking to the master
//! (the server), the rules themselves (`policy`), reading /proc and devices
//! (`load`, `activity`).

pub mod activity;
pub mod load;
pub mod policy;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use libmig::msg::{OwnerReport, SourceReport};
use serde::Deserialize;

pub use activity::Terminals;
pub use load::Scope;
pub use policy::{Change, PolicyConfig, Seen};

use activity::{DeviceSource, InterruptSource, LogindSource, Status, TerminalSource};
use load::LoadMeter;
use policy::Policy;

/// The `[owner]` section of the config file; every field optional.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OwnerFile {
    /// How often the sources are read (ms).
    pub poll_ms: Option<u64>,
    /// Whose load counts: `machine`, `none` or `tree:PID`.
    pub scope: Option<String>,
    /// The window the load is averaged over (ms).
    pub load_window_ms: Option<u64>,
    /// Non-VP load (cores) above which the owner takes the host back.
    pub reclaim_load: Option<f64>,
    /// Non-VP load (cores) at most which the owner counts as idle.
    pub offer_max_load: Option<f64>,
    /// Owner idle this long (s) before the host is offered.
    pub offer_after_idle_s: Option<f64>,
    /// VPs stay stopped this long (s) on a taken-back host before they move.
    pub move_after_s: Option<f64>,
    /// `"logged-in"` (from utmp) or a list of terminal paths; `[]` for none.
    pub terminals: Option<TerminalsFile>,
    /// Read /dev/input event devices.
    pub input_devices: Option<bool>,
    /// Watch the i8042 keyboard/mouse interrupt counters.
    pub interrupts: Option<bool>,
    /// Read logind's idle hints of graphical sessions.
    pub logind: Option<bool>,
    /// VPs waiting on a taken-back host this long (s) are parked: their
    /// images written to disk and their processes ended; unset, they wait stopped.
    pub park_after_s: Option<f64>,
    /// VPs of `--restartable` jobs that cannot be moved, stopped here while
    /// the owner stays this long (s), are ended and started again elsewhere
    /// from the beginning; unset, they stay stopped.
    pub vacate_after_s: Option<f64>,
    /// A VP that asked for a pause notice (`Vm::on_pause`, `mig spawn
    /// --pause-signal`) runs on this long (ms) after it, at most, when the
    /// owner comes back; 0 (the default): no notice, stopped at once.
    pub quiesce_ms: Option<u64>,
}

/// The longest pause notice grace a host may give (`quiesce_ms`).
pub const MAX_QUIESCE_MS: u64 = 60_000;

/// `terminals = "logged-in"` or `terminals = ["/dev/pts/3"]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum TerminalsFile {
    /// A keyword.
    Word(String),
    /// Paths.
    List(Vec<PathBuf>),
}

/// The owner monitor's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnerConfig {
    /// Poll interval.
    pub poll: Duration,
    /// Whose load counts.
    pub scope: Scope,
    /// Load averaging window.
    pub load_window: Duration,
    /// Terminals to watch. These three sources see the whole machine: unset,
    /// they are on with scope `machine` only (several daemons sharing a
    /// machine cannot tell whose owner typed).
    pub terminals: Option<Terminals>,
    /// Read input devices.
    pub input_devices: Option<bool>,
    /// Watch keyboard/mouse interrupts.
    pub interrupts: Option<bool>,
    /// Read logind's idle hints.
    pub logind: Option<bool>,
    /// VPs waiting on a taken-back host this long are parked (their images
    /// written to disk) and their processes ended (`None`: they wait stopped).
    pub park_after: Option<Duration>,
    /// See `OwnerFile::vacate_after_s`.
    pub vacate_after: Option<Duration>,
    /// See `OwnerFile::quiesce_ms`.
    pub quiesce: Duration,
    /// The policy.
    pub policy: PolicyConfig,
    /// Where utmp, input devices and interrupts are (tests point elsewhere).
    pub utmp: PathBuf,
    /// The input devices' directory.
    pub input_dir: PathBuf,
    /// The interrupt counters.
    pub interrupts_file: PathBuf,
    /// logind's session files.
    pub logind_dir: PathBuf,
}

impl Default for OwnerConfig {
    /// A real desk: poll every 50 ms, the whole machine, logged-in users'
    /// terminals, input devices and interrupts; offered after 15 minutes idle.
    fn default() -> Self {
        OwnerConfig {
            poll: Duration::from_millis(50),
            scope: Scope::Machine,
            load_window: Duration::from_millis(100),
            terminals: None,
            input_devices: None,
            interrupts: None,
            logind: None,
            park_after: None,
            vacate_after: None,
            quiesce: Duration::ZERO,
            policy: PolicyConfig::default(),
            utmp: "/var/run/utmp".into(),
            input_dir: "/dev/input".into(),
            interrupts_file: "/proc/interrupts".into(),
            logind_dir: "/run/systemd/sessions".into(),
        }
    }
}

fn secs(what: &str, v: f64, max: f64) -> Result<Duration, String> {
    if v.is_finite() && (0.0..=max).contains(&v) {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(format!(
            "owner.{what} must be between 0 and {max} seconds, got {v}"
        ))
    }
}

impl OwnerConfig {
    /// Overlay what a file sets, checking each value.
    pub fn apply(&mut self, f: OwnerFile) -> Result<(), String> {
        if let Some(v) = f.poll_ms {
            if !(5..=10_000).contains(&v) {
                return Err(format!(
                    "owner.poll_ms must be between 5 and 10000, got {v}"
                ));
            }
            self.poll = Duration::from_millis(v);
        }
        if let Some(v) = f.scope {
            self.scope = v.parse()?;
        }
        if let Some(v) = f.load_window_ms {
            if !(10..=600_000).contains(&v) {
                return Err(format!(
                    "owner.load_window_ms must be between 10 and 600000, got {v}"
                ));
            }
            self.load_window = Duration::from_millis(v);
        }
        for (name, v, slot) in [
            (
                "reclaim_load",
                f.reclaim_load,
                &mut self.policy.reclaim_load,
            ),
            (
                "offer_max_load",
                f.offer_max_load,
                &mut self.policy.offer_max_load,
            ),
        ] {
            if let Some(v) = v {
                if !(v.is_finite() && (0.0..=4096.0).contains(&v)) {
                    return Err(format!(
                        "owner.{name} must be a load in cores (0 to 4096), got {v}"
                    ));
                }
                *slot = v;
            }
        }
        if self.policy.offer_max_load > self.policy.reclaim_load {
            return Err(format!(
                "owner.offer_max_load ({}) must not exceed owner.reclaim_load ({}): a host would be offered while loaded enough to be taken back",
                self.policy.offer_max_load, self.policy.reclaim_load
            ));
        }
        if let Some(v) = f.offer_after_idle_s {
            self.policy.offer_after_idle = secs("offer_after_idle_s", v, 7.0 * 86400.0)?;
        }
        if let Some(v) = f.move_after_s {
            self.policy.move_after = secs("move_after_s", v, 7.0 * 86400.0)?;
        }
        match f.terminals {
            None => {}
            Some(TerminalsFile::Word(w)) if w == "logged-in" => {
                self.terminals = Some(Terminals::LoggedIn)
            }
            Some(TerminalsFile::Word(w)) => {
                return Err(format!(
                    "owner.terminals: expected \"logged-in\" or a list of paths, got {w:?}"
                ))
            }
            Some(TerminalsFile::List(l)) => self.terminals = Some(Terminals::List(l)),
        }
        if f.input_devices.is_some() {
            self.input_devices = f.input_devices;
        }
        if f.interrupts.is_some() {
            self.interrupts = f.interrupts;
        }
        if f.logind.is_some() {
            self.logind = f.logind;
        }
        if let Some(v) = f.park_after_s {
            self.park_after = Some(secs("park_after_s", v, 7.0 * 86400.0)?);
        }
        if let Some(v) = f.vacate_after_s {
            self.vacate_after = Some(secs("vacate_after_s", v, 7.0 * 86400.0)?);
        }
        if let Some(v) = f.quiesce_ms {
            if v > MAX_QUIESCE_MS {
                return Err(format!(
                    "owner.quiesce_ms must be at most {MAX_QUIESCE_MS} (a minute), got {v}"
                ));
            }
            self.quiesce = Duration::from_millis(v);
        }
        Ok(())
    }

    /// Does this daemon watch the whole machine?
    fn whole_machine(&self) -> bool {
        self.scope == Scope::Machine
    }
}

/// The monitor: sources, policy, and what the owner asked by hand.
#[derive(Debug)]
pub struct Monitor {
    cfg: OwnerConfig,
    load: LoadMeter,
    terminals: TerminalSource,
    devices: Option<DeviceSource>,
    interrupts: Option<InterruptSource>,
    logind: Option<LogindSource>,
    policy: Policy,
    explicit: Option<bool>,
    explicit_at: Option<Instant>,
    next: Instant,
}

impl Monitor {
    /// Start watching at `now`.
    pub fn new(cfg: OwnerConfig, now: Instant) -> Monitor {
        let whole = cfg.whole_machine();
        let which = cfg.terminals.clone().unwrap_or(if whole {
            Terminals::LoggedIn
        } else {
            Terminals::List(Vec::new())
        });
        let terminals = TerminalSource::new(which, cfg.utmp.clone(), now);
        let policy = Policy::new(cfg.policy.clone(), now, terminals.status().last_input);
        Monitor {
            load: LoadMeter::new(cfg.scope, cfg.load_window),
            devices: cfg
                .input_devices
                .unwrap_or(whole)
                .then(|| DeviceSource::new(cfg.input_dir.clone(), now)),
            interrupts: cfg
                .interrupts
                .unwrap_or(whole)
                .then(|| InterruptSource::new(cfg.interrupts_file.clone())),
            logind: cfg
                .logind
                .unwrap_or(whole)
                .then(|| LogindSource::new(cfg.logind_dir.clone(), now)),
            terminals,
            policy,
            explicit: None,
            explicit_at: None,
            next: now,
            cfg,
        }
    }

    /// Is the host offered now (may its VPs run)?
    pub fn offered(&self) -> bool {
        self.policy.offered()
    }

    /// Have the VPs waiting here been taken back long enough to be
    /// parked on disk (when the config says so)?
    pub fn park_due(&self, now: Instant) -> bool {
        self.policy.state() == libmig::msg::OwnerState::Reclaimed
            && self
                .cfg
                .park_after
                .is_some_and(|d| now.duration_since(self.policy.since()) >= d)
    }

    /// How long a VP that asked for a pause notice runs on after it.
    pub fn quiesce(&self) -> Duration {
        self.cfg.quiesce
    }

    /// When the next poll is due.
    pub fn due(&self) -> Instant {
        self.next
    }

    /// `mig owner reclaim` (true) or `release` (false): acted on at the
    /// next `poll`, which the caller makes at once.
    pub fn request(&mut self, reclaim: bool, now: Instant) {
        self.explicit = Some(reclaim);
        self.explicit_at = Some(now);
    }

    /// Does the load source count (and so need the VPs' pids, whose load
    /// is never the owner's)?
    pub fn counts_load(&self) -> bool {
        self.load.scope() != Scope::None
    }

    /// Read every source and apply the policy; `vps` are the pids of this
    /// host's VPs and of the daemon's own helpers (their load is never the
    /// owner's).
    pub fn poll(&mut self, now: Instant, vps: &[u32]) -> Vec<Change> {
        self.next = now + self.cfg.poll;
        let mut input = self.terminals.poll(now);
        if let Some(d) = &mut self.devices {
            input = d.poll(now).or(input);
        }
        if let Some(i) = &mut self.interrupts {
            input = i.poll(now).or(input);
        }
        if let Some(l) = &mut self.logind {
            input = l.poll(now).or(input);
        }
        let seen = Seen {
            input,
            load: self.load.poll(now, vps),
            explicit: self.explicit.take(),
        };
        self.policy.observe(&seen, now)
    }

    /// What it sees, for `mig owner status` and `mig hosts`.
    pub fn report(&self, now: Instant) -> OwnerReport {
        let ago = |t: Option<Instant>| t.map(|t| now.duration_since(t).as_secs_f64());
        let mut sources = vec![SourceReport {
            name: "load".into(),
            active: self.load.scope() != Scope::None,
            sees: self.load.describe(),
            last_activity_s: None,
        }];
        let mut add = |s: Status| {
            sources.push(SourceReport {
                name: s.name.into(),
                active: s.active,
                sees: s.sees,
                last_activity_s: ago(s.last_input),
            })
        };
        add(self.terminals.status());
        match &self.devices {
            Some(d) => add(d.status()),
            None => add(off("input devices", self.cfg.input_devices.is_some())),
        }
        match &self.interrupts {
            Some(i) => add(i.status()),
            None => add(off("interrupts", self.cfg.interrupts.is_some())),
        }
        match &self.logind {
            Some(l) => add(l.status()),
            None => add(off("logind", self.cfg.logind.is_some())),
        }
        sources.push(SourceReport {
            name: "explicit".into(),
            active: true,
            sees: "mig owner reclaim / release".into(),
            last_activity_s: ago(self.explicit_at),
        });
        OwnerReport {
            state: self.policy.state(),
            for_s: now.duration_since(self.policy.since()).as_secs_f64(),
            decided_by: self.policy.decided_by().to_string(),
            idle_s: ago(self.policy.last_activity()),
            load: self.load.last(),
            sources,
            vp_cpu_ms: None,
            vacate_after_s: self.cfg.vacate_after.map(|d| d.as_secs_f64()),
        }
    }
}

fn off(name: &'static str, by_config: bool) -> Status {
    Status {
        name,
        active: false,
        sees: if by_config {
            "off in the config".into()
        } else {
            "off: the owner scope is not the whole machine".into()
        },
        last_input: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> Result<OwnerConfig, String> {
        let f: OwnerFile = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut c = OwnerConfig::default();
        c.apply(f)?;
        Ok(c)
    }

    #[test]
    fn config_values_apply_and_bad_ones_are_named() {
        let c = file(
            "poll_ms = 20\nscope = \"tree:7\"\nterminals = []\nmove_after_s = 1.5\npark_after_s = 60\nquiesce_ms = 250\n",
        )
        .unwrap();
        assert_eq!(c.quiesce, Duration::from_millis(250));
        assert_eq!(c.park_after, Some(Duration::from_secs(60)));
        assert_eq!(c.poll, Duration::from_millis(20));
        assert_eq!(c.scope, Scope::Tree(7));
        assert_eq!(c.terminals, Some(Terminals::List(vec![])));
        assert_eq!(c.policy.move_after, Duration::from_millis(1500));
        for (bad, says) in [
            ("poll_ms = 0", "owner.poll_ms"),
            ("scope = \"everything\"", "machine, none or tree:PID"),
            ("reclaim_load = -1.0", "owner.reclaim_load"),
            (
                "reclaim_load = 0.2\noffer_max_load = 0.4",
                "must not exceed",
            ),
            ("offer_after_idle_s = nan", "owner.offer_after_idle_s"),
            ("park_after_s = -1", "owner.park_after_s"),
            ("quiesce_ms = 600000", "owner.quiesce_ms"),
            ("terminals = \"all\"", "owner.terminals"),
            ("pol_ms = 3", "unknown field"),
        ] {
            let e = file(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn an_explicit_reclaim_is_acted_on_at_the_next_poll() {
        // Scope none: the machine-wide sources are off unless asked for.
        let cfg = OwnerConfig {
            scope: Scope::None,
            ..OwnerConfig::default()
        };
        let t0 = Instant::now();
        let mut m = Monitor::new(cfg, t0);
        assert!(m.offered());
        assert!(m.poll(t0, &[]).is_empty());
        m.request(true, t0);
        assert_eq!(m.poll(t0, &[]), vec![Change::StopVps, Change::LeavePool]);
        let r = m.report(t0);
        assert_eq!(r.decided_by, "mig owner reclaim");
        assert_eq!(r.sources.len(), 6);
        assert!(
            r.sources.iter().all(|s| !s.active || s.name == "explicit"),
            "{r:?}"
        );
        assert!(r
            .sources
            .iter()
            .any(|s| s.name == "explicit" && s.last_activity_s == Some(0.0)));
        m.request(false, t0);
        assert_eq!(m.poll(t0, &[]), vec![Change::ResumeVps, Change::JoinPool]);
        assert!(m.offered());
    }
}
