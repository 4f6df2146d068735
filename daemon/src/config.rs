//! The daemon's configuration: command-line flags over an optional TOML file.
//!
//! What lives here: the `Config` type, loading and validating the file, and
//! the defaults. What does not: parsing flags (the `migd` binary does, with
//! clap, and overlays them here).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use thiserror::Error;

use crate::owner::{OwnerConfig, OwnerFile};

/// A config file or value that cannot be used.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// Unreadable file.
    #[error("config file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Not valid TOML for this config.
    #[error("config file {path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// What is wrong (with line and column).
        message: String,
    },
    /// A value out of range.
    #[error("{0}")]
    Invalid(String),
}

/// The default slot length (ms). A switch costs a few tens of
/// microseconds per host (`cargo bench -p mig-tests --bench gang`), so at
/// 100 ms under 0.1% of the time goes to switching, while a job waits at
/// most (slots - 1) x 100 ms for its turn; Slurm's gang scheduler switches
/// every 30 s.
pub const DEFAULT_QUANTUM_MS: u64 = 100;

/// `HOST:PORT` as an address: an IP address as it is, a host name resolved
/// (its first IPv4 address, else its first).
pub fn resolve(text: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    if let Ok(a) = text.parse::<SocketAddr>() {
        return Ok(a);
    }
    if !text.contains(':') {
        return Err(format!("{text:?}: expected HOST:PORT"));
    }
    let all: Vec<SocketAddr> = text
        .to_socket_addrs()
        .map_err(|e| format!("{text:?}: cannot resolve it ({e})"))?
        .collect();
    all.iter()
        .find(|a| a.is_ipv4())
        .or(all.first())
        .copied()
        .ok_or_else(|| format!("{text:?}: the name has no address"))
}

fn host_port<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    let text: Option<String> = Option::deserialize(d)?;
    text.map(|t| resolve(&t).map_err(serde::de::Error::custom))
        .transpose()
}

/// The `[daemon]` section of the config file; every field optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Host name.
    pub name: Option<String>,
    /// Listen address.
    pub listen: Option<SocketAddr>,
    /// Master to join: `HOST:PORT` (a name is resolved).
    #[serde(default, deserialize_with = "host_port")]
    pub join: Option<SocketAddr>,
    /// State directory.
    pub state_dir: Option<PathBuf>,
    /// Cluster key file.
    pub key_file: Option<PathBuf>,
    /// Processors offered.
    pub processors: Option<u32>,
    /// Relative capacity of one processor.
    pub capacity: Option<f64>,
    /// Memory offered to VPs (MB).
    pub memory_mb: Option<u64>,
    /// Architecture override.
    pub arch: Option<String>,
    /// Heartbeat interval in milliseconds.
    pub heartbeat_ms: Option<u64>,
    /// A worker silent this long (ms) is taken out of the pool.
    pub dead_after_ms: Option<u64>,
    /// A VP asked to move off a host whose owner is back is resumed in the
    /// SCHED_IDLE class for at most this (ms, default 1000) to reach its
    /// safe point, then stopped again.
    pub safe_point_timeout_ms: Option<u64>,
    /// How long (ms, default 10000) a VP asked to move off a host still
    /// offered (it runs anyway) may take to reach its safe point before the
    /// move is called off, and every VP of a job checkpoint round.
    pub move_timeout_ms: Option<u64>,
    /// Gang slicing: the length of a time slot (ms) on the master; 0 turns
    /// slicing off (the kernel shares processors among slots' VPs).
    pub quantum_ms: Option<u64>,
    /// Niceness of VPs (0..19; default 10, as HTCondor renices jobs): they
    /// yield to the owner's programs and to migd's slot switches.
    pub vp_nice: Option<i32>,
    /// Run VPs in the SCHED_IDLE class (default false): they get a core
    /// only when nothing else on the machine wants it, and any other
    /// program preempts them at once. Strict: a VP then also waits for the
    /// daemons' own work, so message-heavy jobs slow down on a busy host.
    pub vp_idle_class: Option<bool>,
    /// Let VPs' C library back large allocations with 2 MiB pages (default
    /// true; `GLIBC_TUNABLES=glibc.malloc.hugetlb=1` unless the job sets
    /// GLIBC_TUNABLES itself): a restored VP takes in a 256 MiB state in
    /// about a quarter of the time.
    pub vp_huge_pages: Option<bool>,
    /// On the master: checkpoint every job whose VPs can all be moved this
    /// often (s; default 3), stretched to 50 times what the job's last
    /// checkpoint took, so that they cost it at most about 2% of its time;
    /// the first 3 s after it starts (or this long, if shorter); 0: only
    /// on `mig checkpoint`.
    pub checkpoint_interval_s: Option<f64>,
    /// On the master: at most this many voters keep its replicated state
    /// (1, 3 or 5; default 5). 1: nothing is replicated, and the master's
    /// machine must not die; with more, a majority of them must answer
    /// before the master acts.
    pub voters: Option<u32>,
    /// Which log lines are written: a level (error, warn, info, debug) or
    /// `LEVEL,MODULE=LEVEL,...` (default info; `MIG_LOG` or `RUST_LOG`
    /// override it).
    pub log: Option<String>,
    /// `STATE_DIR/migd.log` is rotated past this size (MiB, default 16);
    /// the disk holds at most twice that.
    pub log_max_mb: Option<u64>,
    /// On the master: how gang jobs are placed (`mig`, the default;
    /// `mtat`, seed 000 as the paper gives it; `mtat+repack`, with seed
    /// 001's re-packing), or how new work chooses its hosts before `mig`
    /// places it (`bidding`, seed 002; `nres`, seed 004; `roc`, start
    /// where asked and Rate-of-Change balancing, seed 003). `mig sim
    /// --policy` compares them on a trace.
    pub placement: Option<String>,
    /// Under `placement = "bidding"`, how long (ms) the daemon where a
    /// spawn arrives waits for the other hosts' bids before it chooses
    /// among those in (default 300).
    pub bid_wait_ms: Option<u64>,
    /// Under `placement = "nres"`, how many neighbours each host asks for
    /// room (the next hosts by name, round the ring; they ask theirs once
    /// more); default 2.
    pub neighbours: Option<u32>,
    /// Serve every local user, not only this daemon's (default false): the
    /// control socket is open to all, each user controls only the jobs they
    /// started, and this daemon's user and root control everything. A
    /// daemon running as root then runs no other user's programs.
    pub shared: Option<bool>,
    /// Serve figures for a monitoring stack at `http://ADDR/metrics`
    /// (Prometheus's text format; see docs/metrics.md). Off by default.
    pub metrics: Option<SocketAddr>,
    /// A file holding the token scrapes must give (`Authorization: Bearer
    /// TOKEN`); needed when `metrics` listens beyond the loopback.
    pub metrics_token_file: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    daemon: FileConfig,
    #[serde(default)]
    owner: OwnerFile,
}

/// Everything the daemon needs to start.
#[derive(Debug, Clone)]
pub struct Config {
    /// Host name (default: the system host name).
    pub name: String,
    /// TCP address to listen on (port 0: the OS picks).
    pub listen: SocketAddr,
    /// Master to join; `None` makes this daemon the master.
    pub join: Option<SocketAddr>,
    /// State directory (control socket, address file, logs).
    pub state_dir: PathBuf,
    /// Cluster key file (created 0600 when absent).
    pub key_file: PathBuf,
    /// Processors offered (default: cores).
    pub processors: u32,
    /// Relative capacity per processor (default: measured).
    pub capacity: Option<f64>,
    /// Memory offered to VPs, MB (default: the machine's).
    pub memory_mb: Option<u64>,
    /// Architecture (default: this machine's).
    pub arch: String,
    /// Heartbeat interval.
    pub heartbeat: Duration,
    /// Silence after which a worker is taken out of the pool.
    pub dead_after: Duration,
    /// How long a VP asked to move may take to reach a safe point.
    pub safe_point_timeout: Duration,
    /// How long a move off an offered host, or a checkpoint round, waits.
    pub move_timeout: Duration,
    /// Slot length for gang slicing (zero: off).
    pub quantum: Duration,
    /// Niceness VPs run at.
    pub vp_nice: i32,
    /// VPs in the SCHED_IDLE class.
    pub vp_idle_class: bool,
    /// VPs' large allocations in huge pages.
    pub vp_huge_pages: bool,
    /// Periodic job checkpoints (none: on request only).
    pub checkpoint_interval: Option<Duration>,
    /// Most voters (1, 3 or 5).
    pub voters: u32,
    /// The log filter (`log::Filter` syntax), if configured.
    pub log: Option<String>,
    /// Rotate `STATE_DIR/migd.log` past this many bytes.
    pub log_max: u64,
    /// Serve every local user (see `FileConfig::shared`).
    pub shared: bool,
    /// Where figures are served (see `FileConfig::metrics`).
    pub metrics: Option<SocketAddr>,
    /// The token scrapes must give (see `FileConfig::metrics_token_file`).
    pub metrics_token_file: Option<PathBuf>,
    /// How the master places gang jobs (a `sched::Placement` name) or
    /// chooses hosts (a `balance::choice::Policy` name), checked by
    /// `validate`.
    pub placement: String,
    /// Under the bidding placement, how long a spawn waits for bids.
    pub bid_wait: Duration,
    /// Under the nres placement, each host's neighbours.
    pub neighbours: u32,
    /// The owner monitor.
    pub owner: OwnerConfig,
}

/// Periodic job checkpoints by default: this long apart, stretched to 50
/// times what a job's last one took, so that they cost it about 2% of its
/// time; a host that dies then costs a job seconds of work (see
/// docs/failover-and-checkpoints.md).
pub const DEFAULT_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(3);

impl Config {
    /// Defaults for a daemon with state in `state_dir`.
    pub fn new(state_dir: PathBuf) -> Config {
        Config {
            name: crate::facts::hostname(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            join: None,
            key_file: state_dir.join("cluster.key"),
            state_dir,
            processors: crate::facts::cores(),
            capacity: None,
            memory_mb: None,
            arch: crate::facts::arch(),
            heartbeat: Duration::from_millis(500),
            dead_after: Duration::from_millis(3000),
            safe_point_timeout: Duration::from_millis(1000),
            move_timeout: Duration::from_secs(10),
            quantum: Duration::from_millis(DEFAULT_QUANTUM_MS),
            vp_nice: 10,
            vp_idle_class: false,
            vp_huge_pages: true,
            checkpoint_interval: Some(DEFAULT_CHECKPOINT_INTERVAL),
            voters: 5,
            log: None,
            log_max: crate::log::DEFAULT_MAX_MB << 20,
            shared: false,
            metrics: None,
            metrics_token_file: None,
            placement: crate::sched::Placement::default().name().to_string(),
            bid_wait: Duration::from_millis(300),
            neighbours: 2,
            owner: OwnerConfig::default(),
        }
    }

    /// The settings in force, as a config file would give them
    /// (`migd --print-config`): every `[daemon]` and `[owner]` key.
    pub fn effective_toml(&self) -> String {
        use crate::owner::activity::Terminals;
        let ms = |d: Duration| d.as_millis();
        let secs = |d: Duration| d.as_secs_f64();
        let q = |s: &str| format!("{s:?}");
        let mut t = String::from("[daemon]\n");
        let mut kv = |k: &str, v: String| t.push_str(&format!("{k} = {v}\n"));
        kv("name", q(&self.name));
        kv("listen", q(&self.listen.to_string()));
        if let Some(j) = self.join {
            kv("join", q(&j.to_string()));
        }
        kv("state_dir", q(&self.state_dir.display().to_string()));
        kv("key_file", q(&self.key_file.display().to_string()));
        kv("processors", self.processors.to_string());
        if let Some(c) = self.capacity {
            kv("capacity", c.to_string());
        }
        if let Some(m) = self.memory_mb {
            kv("memory_mb", m.to_string());
        }
        kv("arch", q(&self.arch));
        kv("heartbeat_ms", ms(self.heartbeat).to_string());
        kv("dead_after_ms", ms(self.dead_after).to_string());
        kv(
            "safe_point_timeout_ms",
            ms(self.safe_point_timeout).to_string(),
        );
        kv("move_timeout_ms", ms(self.move_timeout).to_string());
        kv("quantum_ms", ms(self.quantum).to_string());
        kv("vp_nice", self.vp_nice.to_string());
        kv("vp_idle_class", self.vp_idle_class.to_string());
        kv("vp_huge_pages", self.vp_huge_pages.to_string());
        kv(
            "checkpoint_interval_s",
            self.checkpoint_interval.map_or(0.0, secs).to_string(),
        );
        kv("voters", self.voters.to_string());
        if let Some(l) = &self.log {
            kv("log", q(l));
        }
        kv("log_max_mb", (self.log_max >> 20).to_string());
        kv("shared", self.shared.to_string());
        if let Some(a) = self.metrics {
            kv("metrics", q(&a.to_string()));
        }
        if let Some(p) = &self.metrics_token_file {
            kv("metrics_token_file", q(&p.display().to_string()));
        }
        kv("placement", q(&self.placement));
        kv("bid_wait_ms", ms(self.bid_wait).to_string());
        kv("neighbours", self.neighbours.to_string());
        let o = &self.owner;
        t.push_str("\n[owner]\n");
        let mut kv = |k: &str, v: String| t.push_str(&format!("{k} = {v}\n"));
        kv("poll_ms", ms(o.poll).to_string());
        kv("scope", q(&o.scope.to_string()));
        kv("load_window_ms", ms(o.load_window).to_string());
        kv("reclaim_load", o.policy.reclaim_load.to_string());
        kv("offer_max_load", o.policy.offer_max_load.to_string());
        kv(
            "offer_after_idle_s",
            secs(o.policy.offer_after_idle).to_string(),
        );
        kv("move_after_s", secs(o.policy.move_after).to_string());
        match &o.terminals {
            Some(Terminals::LoggedIn) => kv("terminals", q("logged-in")),
            Some(Terminals::List(l)) => kv(
                "terminals",
                format!(
                    "[{}]",
                    l.iter()
                        .map(|p| q(&p.display().to_string()))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ),
            None => {}
        }
        for (k, v) in [
            ("input_devices", o.input_devices),
            ("interrupts", o.interrupts),
            ("logind", o.logind),
        ] {
            if let Some(v) = v {
                kv(k, v.to_string());
            }
        }
        if let Some(d) = o.park_after {
            kv("park_after_s", secs(d).to_string());
        }
        if let Some(d) = o.vacate_after {
            kv("vacate_after_s", secs(d).to_string());
        }
        kv("quiesce_ms", ms(o.quiesce).to_string());
        t
    }

    /// Where a config file is looked for when `--config` is not given:
    /// `$XDG_CONFIG_HOME/mig/migd.toml` (else `~/.config/mig/migd.toml`),
    /// then `/etc/mig/migd.toml`; the first that exists.
    pub fn default_file() -> Option<PathBuf> {
        let user = std::env::var_os("XDG_CONFIG_HOME")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
            .map(|d| d.join("mig").join("migd.toml"));
        user.into_iter()
            .chain(std::iter::once(PathBuf::from("/etc/mig/migd.toml")))
            .find(|p| p.is_file())
    }

    /// Read a config file: its `[daemon]` and `[owner]` sections.
    pub fn read_file(path: &Path) -> Result<(FileConfig, OwnerFile), ConfigError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: p.clone(),
            source,
        })?;
        Config::parse_text(&text, &p)
    }

    /// A config file's text (from `origin`, named in errors): its
    /// `[daemon]` and `[owner]` sections.
    pub fn parse_text(text: &str, origin: &str) -> Result<(FileConfig, OwnerFile), ConfigError> {
        let f: File = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_string(),
            message: e.to_string(),
        })?;
        Ok((f.daemon, f.owner))
    }

    /// Overlay the `[owner]` section, checking each value.
    pub fn apply_owner(&mut self, f: OwnerFile) -> Result<(), ConfigError> {
        self.owner.apply(f).map_err(ConfigError::Invalid)
    }

    /// Overlay the values a file sets.
    pub fn apply(&mut self, f: FileConfig) {
        if let Some(v) = f.name {
            self.name = v;
        }
        if let Some(v) = f.listen {
            self.listen = v;
        }
        if f.join.is_some() {
            self.join = f.join;
        }
        if let Some(v) = f.state_dir {
            self.key_file = v.join("cluster.key");
            self.state_dir = v;
        }
        if let Some(v) = f.key_file {
            self.key_file = v;
        }
        if let Some(v) = f.processors {
            self.processors = v;
        }
        if f.capacity.is_some() {
            self.capacity = f.capacity;
        }
        if f.memory_mb.is_some() {
            self.memory_mb = f.memory_mb;
        }
        if let Some(v) = f.arch {
            self.arch = v;
        }
        if let Some(v) = f.heartbeat_ms {
            self.heartbeat = Duration::from_millis(v);
        }
        if let Some(v) = f.dead_after_ms {
            self.dead_after = Duration::from_millis(v);
        }
        if let Some(v) = f.move_timeout_ms {
            self.move_timeout = Duration::from_millis(v);
        }
        if let Some(v) = f.safe_point_timeout_ms {
            self.safe_point_timeout = Duration::from_millis(v);
        }
        if let Some(v) = f.quantum_ms {
            self.quantum = Duration::from_millis(v);
        }
        if let Some(v) = f.vp_nice {
            self.vp_nice = v;
        }
        if let Some(v) = f.vp_huge_pages {
            self.vp_huge_pages = v;
        }
        if let Some(v) = f.vp_idle_class {
            self.vp_idle_class = v;
        }
        if let Some(v) = f.voters {
            self.voters = v;
        }
        if f.log.is_some() {
            self.log = f.log;
        }
        if let Some(v) = f.shared {
            self.shared = v;
        }
        if let Some(v) = f.bid_wait_ms {
            self.bid_wait = Duration::from_millis(v);
        }
        if let Some(v) = f.neighbours {
            self.neighbours = v;
        }
        if let Some(v) = f.placement {
            self.placement = v;
        }
        if f.metrics.is_some() {
            self.metrics = f.metrics;
        }
        if f.metrics_token_file.is_some() {
            self.metrics_token_file = f.metrics_token_file;
        }
        if let Some(v) = f.log_max_mb {
            // Out of range: zero, which `validate` refuses.
            self.log_max = v.checked_mul(1 << 20).filter(|_| v <= 1 << 20).unwrap_or(0);
        }
        if let Some(v) = f.checkpoint_interval_s {
            // Out of range (negative, not a number, huge): zero, which
            // `validate` refuses with the allowed range.
            self.checkpoint_interval = match v {
                0.0 => None,
                v if v.is_finite() && v > 0.0 && v < 1e9 => Some(Duration::from_secs_f64(v)),
                _ => Some(Duration::ZERO),
            };
        }
    }

    /// The gang placement policy (the default if `placement` names none,
    /// or names a policy that chooses hosts).
    pub fn placement(&self) -> crate::sched::Placement {
        crate::sched::Placement::by_name(&self.placement).unwrap_or_default()
    }

    /// The policy that chooses hosts for new work, if `placement` names one.
    pub fn balance(&self) -> Option<crate::balance::choice::Policy> {
        crate::balance::choice::Policy::by_name(&self.placement)
    }

    /// Every name `placement` takes.
    pub fn placement_names() -> String {
        let mut names = vec![crate::sched::Placement::names()];
        names.extend(crate::balance::choice::Policy::ALL.map(|p| p.name().to_string()));
        names.join(", ")
    }

    /// Check every value; the first bad one is a clear error.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if self.name.is_empty() || self.name.contains(['/', ' ']) {
            return bad(format!(
                "host name {:?} must be non-empty, without '/' or spaces",
                self.name
            ));
        }
        if self.processors == 0 || self.processors > 4096 {
            return bad(format!(
                "processors must be between 1 and 4096, got {}",
                self.processors
            ));
        }
        if let Some(c) = self.capacity {
            if !(c.is_finite() && c > 0.0) {
                return bad(format!("capacity must be a positive number, got {c}"));
            }
        }
        if self.memory_mb == Some(0) {
            return bad("memory_mb must be at least 1".into());
        }
        if self.arch.is_empty() {
            return bad("architecture must not be empty".into());
        }
        if self.bid_wait < Duration::from_millis(1) || self.bid_wait > Duration::from_secs(10) {
            return bad("bid_wait_ms must be between 1 and 10000".into());
        }
        if !(1..=64).contains(&self.neighbours) {
            return bad("neighbours must be between 1 and 64".into());
        }
        if self.heartbeat < Duration::from_millis(10) || self.heartbeat > Duration::from_secs(60) {
            return bad("heartbeat_ms must be between 10 and 60000".into());
        }
        if self.safe_point_timeout < Duration::from_millis(10)
            || self.safe_point_timeout > Duration::from_secs(3600)
        {
            return bad("safe_point_timeout_ms must be between 10 and 3600000".into());
        }
        if self.move_timeout < Duration::from_millis(10)
            || self.move_timeout > Duration::from_secs(3600)
        {
            return bad("move_timeout_ms must be between 10 and 3600000".into());
        }
        if !self.quantum.is_zero()
            && (self.quantum < Duration::from_millis(5) || self.quantum > Duration::from_secs(600))
        {
            return bad("quantum_ms must be 0 (no slicing) or between 5 and 600000".into());
        }
        if self
            .checkpoint_interval
            .is_some_and(|d| d < Duration::from_millis(100) || d > Duration::from_secs(7 * 86400))
        {
            return bad("checkpoint_interval_s must be 0 (off) or between 0.1 and 604800".into());
        }
        if self.log_max < 1 << 20 {
            return bad("log_max_mb must be between 1 and 1048576".into());
        }
        if let Some(spec) = &self.log {
            crate::log::Filter::parse(spec).map_err(ConfigError::Invalid)?;
        }
        if crate::sched::Placement::by_name(&self.placement).is_none() && self.balance().is_none() {
            return bad(format!(
                "placement must be one of {}, got {:?}",
                Self::placement_names(),
                self.placement
            ));
        }
        if ![1, 3, 5].contains(&self.voters) {
            return bad(format!("voters must be 1, 3 or 5, got {}", self.voters));
        }
        if !(0..=19).contains(&self.vp_nice) {
            return bad(format!(
                "vp_nice must be between 0 and 19, got {}",
                self.vp_nice
            ));
        }
        if self.dead_after < self.heartbeat * 3 {
            return bad(
                "dead_after_ms must be at least three times heartbeat_ms (a worker's lease on \
                 its VPs lasts dead_after_ms less one heartbeat, and is renewed every heartbeat)"
                    .into(),
            );
        }
        if let (Some(a), None) = (self.metrics, &self.metrics_token_file) {
            if !a.ip().is_loopback() {
                return bad(format!(
                    "metrics at {a} would be open to every machine that reaches it: give \
                     metrics_token_file (--metrics-token-file FILE), or listen on 127.0.0.1"
                ));
            }
        }
        Ok(())
    }

    /// Where and for whom figures are served, if they are: the token read
    /// from its file (one line; empty is refused).
    pub fn metrics_serve(&self) -> Result<Option<crate::metrics::Serve>, ConfigError> {
        let Some(addr) = self.metrics else {
            return Ok(None);
        };
        let token = match &self.metrics_token_file {
            None => None,
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
                    path: p.display().to_string(),
                    source,
                })?;
                let t = text.trim();
                if t.is_empty() || t.contains(char::is_whitespace) {
                    return Err(ConfigError::Invalid(format!(
                        "metrics_token_file {}: the token must be one word on one line",
                        p.display()
                    )));
                }
                Some(t.to_string())
            }
        };
        Ok(Some(crate::metrics::Serve { addr, token }))
    }

    /// How long a worker's lease on its VPs lasts from its ask: shorter
    /// than `dead_after` by a heartbeat, so that its VPs are frozen (by its
    /// guardian) before the master takes it for dead and starts them
    /// elsewhere.
    pub fn lease(&self) -> Duration {
        self.dead_after.saturating_sub(self.heartbeat)
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_master_is_named_by_address_or_by_host_name() {
        assert_eq!(
            resolve("10.1.2.3:7070"),
            Ok(SocketAddr::from(([10, 1, 2, 3], 7070)))
        );
        assert_eq!(
            resolve("localhost:7070").map(|a| (a.ip().is_loopback(), a.port())),
            Ok((true, 7070))
        );
        assert!(resolve("7070").is_err_and(|e| e.contains("HOST:PORT")));
        assert!(resolve("no-such-host.invalid:1").is_err_and(|e| e.contains("cannot resolve")));
        let (d, _) =
            Config::parse_text("[daemon]\njoin = \"localhost:7070\"\n", "t").expect("parses");
        assert_eq!(d.join.map(|a| a.port()), Some(7070));
        assert!(Config::parse_text("[daemon]\njoin = \"nocolon\"\n", "t").is_err());
    }

    use super::*;

    #[test]
    fn placement_names_a_gang_policy_or_one_that_chooses_hosts() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Config::new(dir.path().into());
        for (name, gang, hosts) in [
            ("mig", "mig", None),
            ("mtat+repack", "mtat+repack", None),
            ("roc", "mig", Some("roc")),
            ("nres", "mig", Some("nres")),
            ("bidding", "mig", Some("bidding")),
        ] {
            c.placement = name.into();
            c.validate().unwrap();
            assert_eq!(c.placement().name(), gang);
            assert_eq!(c.balance().map(|p| p.name()), hosts);
        }
        c.placement = "rommel".into();
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("mig, mtat, mtat+repack, bidding, nres, roc"),
            "{e}"
        );
    }

    #[test]
    fn file_values_overlay_defaults_and_bad_ones_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("migd.toml");
        std::fs::write(
            &p,
            "[daemon]\nprocessors = 3\nheartbeat_ms = 100\ndead_after_ms = 500\n",
        )
        .unwrap();
        let mut c = Config::new(dir.path().into());
        c.apply(Config::read_file(&p).unwrap().0);
        assert_eq!(c.processors, 3);
        c.validate().unwrap();
        std::fs::write(
            &p,
            "[owner]\nscope = \"tree:1\"\nreclaim_load = 0.2\noffer_max_load = 0.1\n",
        )
        .unwrap();
        let (_, owner) = Config::read_file(&p).unwrap();
        c.apply_owner(owner).unwrap();
        assert_eq!(c.owner.policy.reclaim_load, 0.2);
        std::fs::write(&p, "[owner]\nreclaim_load = 2.0\noffer_max_load = 3.0\n").unwrap();
        let (_, owner) = Config::read_file(&p).unwrap();
        let e = c.apply_owner(owner).unwrap_err().to_string();
        assert!(e.contains("offer_max_load"), "{e}");
        for bad in ["-1", "nan", "1e300", "0.01"] {
            std::fs::write(&p, format!("[daemon]\ncheckpoint_interval_s = {bad}\n")).unwrap();
            let mut c = Config::new(dir.path().into());
            c.apply(Config::read_file(&p).unwrap().0);
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains("checkpoint_interval_s"), "{bad}: {e}");
        }
        std::fs::write(&p, "[daemon]\nprocesors = 3\n").unwrap();
        let e = Config::read_file(&p).unwrap_err().to_string();
        assert!(
            e.contains("unknown field") && e.contains("procesors"),
            "{e}"
        );
        c.capacity = Some(f64::NAN);
        assert!(c.validate().unwrap_err().to_string().contains("capacity"));
        c.capacity = Some(1.0);
        c.dead_after = Duration::from_millis(250);
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("dead_after_ms"));
    }

    #[test]
    fn the_settings_in_force_read_back_as_a_config_file_give_the_same_settings() {
        let text = "[daemon]\nquantum_ms = 250\nvoters = 3\nlog = \"warn\"\n\
                    [owner]\nquiesce_ms = 1234\nterminals = [\"/dev/pts/9\"]\npark_after_s = 60\n";
        let mut cfg = Config::new(PathBuf::from("/var/lib/migd"));
        let (d, o) = Config::parse_text(text, "test").expect("parses");
        cfg.apply(d);
        cfg.apply_owner(o).expect("valid");
        let shown = cfg.effective_toml();
        for want in [
            "quantum_ms = 250",
            "voters = 3",
            "log = \"warn\"",
            "quiesce_ms = 1234",
            "terminals = [\"/dev/pts/9\"]",
            "park_after_s = 60",
            "state_dir = \"/var/lib/migd\"",
        ] {
            assert!(shown.contains(want), "{want} in\n{shown}");
        }
        let mut again = Config::new(PathBuf::from("elsewhere"));
        let (d, o) = Config::parse_text(&shown, "shown").expect("what it shows parses");
        again.apply(d);
        again.apply_owner(o).expect("valid");
        assert_eq!(again.effective_toml(), shown);
    }
}
