//! CPU load that is not ours: every process in the owner's scope except the
//! VPs (and their children), migd itself and its lease guardian.
//!
//! What lives here: reading /proc cheaply enough to poll every few tens of
//! milliseconds, and the load (in cores) over a short window. What does not:
//! deciding what the load means (`policy`).
//!
//! Two ways to count, by scope:
//! * `machine` (a real deployment, one daemon per machine): the machine's
//!   busy time from /proc/stat (one file) minus ours: each VP's process tree
//!   from /proc/PID/stat, migd's own and its reaped children's times from
//!   getrusage. A full /proc scan every poll would cost the owner more than
//!   the work it protects.
//! * `tree:PID` (several daemons on one machine, tests): the processes of
//!   the tree rooted at PID, found through /proc/PID/task/TID/children.
//!
//! Per-process times are summed as deltas keyed by (pid, start time), so a
//! process that ends between polls or a reused pid never makes a spike.

use std::collections::{HashMap, VecDeque};
use std::fs;
use std::time::{Duration, Instant};

/// Whose load counts as the owner's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every process on the machine that is not ours.
    Machine,
    /// The process tree rooted at this pid.
    Tree(u32),
    /// No load source (explicit and input sources only).
    None,
}

impl std::str::FromStr for Scope {
    type Err = String;
    fn from_str(s: &str) -> Result<Scope, String> {
        match s {
            "machine" => Ok(Scope::Machine),
            "none" => Ok(Scope::None),
            _ => {
                let pid = s
                    .strip_prefix("tree:")
                    .and_then(|p| p.parse::<u32>().ok())
                    .filter(|&p| p > 0);
                pid.map(Scope::Tree)
                    .ok_or_else(|| format!("owner scope {s:?}: expected machine, none or tree:PID"))
            }
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scope::Machine => write!(f, "machine"),
            Scope::Tree(p) => write!(f, "tree:{p}"),
            Scope::None => write!(f, "none"),
        }
    }
}

/// Clock ticks per second of /proc's times (USER_HZ).
fn ticks_per_s() -> f64 {
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as f64
    } else {
        100.0
    }
}

/// A process's (start time, utime + stime) in ticks, from /proc/PID/stat;
/// with `waits`, plus the time its main thread waited for a processor
/// (from /proc/PID/schedstat): what it wanted, not only what it got.
fn proc_times(pid: u32, waits: bool) -> Option<(u64, u64)> {
    let f = stat_fields(pid)?;
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    let start: u64 = f.get(19)?.parse().ok()?;
    let waited = if waits { waited_ticks(pid) } else { 0 };
    Some((start, utime + stime + waited))
}

/// The fields of /proc/PID/stat after the command name (which is in
/// parentheses and may hold anything: fields are counted from the last
/// ')'), the state first.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// CPU time (ms, user and system) process `pid` has used, with that of
/// the children it has waited for.
pub fn cpu_ms(pid: u32) -> Option<u64> {
    let f = stat_fields(pid)?;
    let ticks: u64 = (11..=14)
        .map(|i| f.get(i)?.parse::<u64>().ok())
        .sum::<Option<u64>>()?;
    Some((ticks as f64 * 1000.0 / ticks_per_s()) as u64)
}

/// Ticks process `pid`'s main thread spent runnable but waiting for a
/// processor (0 where the kernel keeps no schedstat).
fn waited_ticks(pid: u32) -> u64 {
    let ns: u64 = fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .ok()
        .and_then(|t| t.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0);
    (ns as f64 * ticks_per_s() / 1e9) as u64
}

/// `pid` and all its descendants.
pub fn tree(pid: u32) -> Vec<u32> {
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() && out.len() < 100_000 {
        let p = out[i];
        i += 1;
        let Ok(tasks) = fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let Ok(kids) = fs::read_to_string(t.path().join("children")) else {
                continue;
            };
            out.extend(
                kids.split_whitespace()
                    .filter_map(|k| k.parse::<u32>().ok()),
            );
        }
    }
    out
}

/// Busy ticks of the whole machine (all cores) from /proc/stat.
fn machine_busy() -> Option<u64> {
    let text = fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest is in user).
    let busy = [0, 1, 2, 5, 6, 7].iter().filter_map(|&i| v.get(i)).sum();
    Some(busy)
}

/// CPU seconds of this process (`RUSAGE_SELF`) or its reaped children.
fn rusage_s(who: libc::c_int) -> f64 {
    // SAFETY: getrusage fills the struct it is given and nothing else.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `ru` is ours.
    if unsafe { libc::getrusage(who, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Per-process tick deltas across polls.
#[derive(Debug, Default)]
struct Deltas {
    seen: HashMap<u32, (u64, u64)>,
    /// Count time spent waiting for a processor too (demand, not use).
    waits: bool,
}

impl Deltas {
    /// Ticks the processes `pids` used since the last call (a process new
    /// since then counts in full, except on the first call), and the last
    /// totals of those that are gone.
    fn step(&mut self, pids: &[u32], first: bool) -> (u64, HashMap<u32, u64>) {
        let mut now = HashMap::with_capacity(pids.len());
        let mut used = 0;
        for &p in pids {
            let Some((start, t)) = proc_times(p, self.waits) else {
                continue;
            };
            used += match self.seen.get(&p) {
                Some(&(s, before)) if s == start => t.saturating_sub(before),
                _ if first => 0,
                _ => t,
            };
            now.insert(p, (start, t));
        }
        let gone = self
            .seen
            .iter()
            .filter(|(p, _)| !now.contains_key(p))
            .map(|(&p, &(_, t))| (p, t))
            .collect();
        self.seen = now;
        (used, gone)
    }
}

/// The owner's CPU load, polled.
#[derive(Debug)]
pub struct LoadMeter {
    scope: Scope,
    window: Duration,
    hz: f64,
    /// (when, owner CPU seconds so far).
    samples: VecDeque<(Instant, f64)>,
    total: f64,
    ours: Deltas,
    theirs: Deltas,
    busy: Option<u64>,
    self_s: f64,
    children_s: f64,
    last: Option<f64>,
}

impl LoadMeter {
    /// A meter for `scope`, averaging over `window`.
    pub fn new(scope: Scope, window: Duration) -> LoadMeter {
        LoadMeter {
            scope,
            window,
            hz: ticks_per_s(),
            samples: VecDeque::new(),
            total: 0.0,
            ours: Deltas::default(),
            // The owner's programs count with the time they waited: on a
            // machine busy with other work a CPU hog on the desk gets only
            // part of a core, but wants all of it.
            theirs: Deltas {
                seen: HashMap::new(),
                waits: true,
            },
            busy: None,
            self_s: rusage_s(libc::RUSAGE_SELF),
            children_s: rusage_s(libc::RUSAGE_CHILDREN),
            last: None,
        }
    }

    /// Its scope.
    pub fn scope(&self) -> Scope {
        self.scope
    }

    /// The load last measured, in cores.
    pub fn last(&self) -> Option<f64> {
        self.last
    }

    /// Measure at `now`; `vps` are the pids of this host's VPs (and of the
    /// daemon's own helpers). Returns the load in cores over the window,
    /// once the samples span it: /proc counts in ticks (10 ms), so over a
    /// span of one 20 ms poll a single tick of any process read as half a
    /// core (a daemon just started took its host back on it).
    pub fn poll(&mut self, now: Instant, vps: &[u32]) -> Option<f64> {
        if self.scope == Scope::None {
            // (Nothing to measure: not even the VPs' process trees.)
            return None;
        }
        let first = self.samples.is_empty();
        let mut ours_pids: Vec<u32> = vps.iter().flat_map(|&v| tree(v)).collect();
        ours_pids.sort_unstable();
        ours_pids.dedup();
        let used = match self.scope {
            Scope::None => return None,
            Scope::Tree(root) => {
                let me = std::process::id();
                let pids: Vec<u32> = tree(root)
                    .into_iter()
                    .filter(|p| *p != me && !ours_pids.contains(p))
                    .collect();
                self.theirs.step(&pids, first).0 as f64 / self.hz
            }
            Scope::Machine => {
                let busy = machine_busy()?;
                let (ours, gone) = self.ours.step(&ours_pids, first);
                let self_s = rusage_s(libc::RUSAGE_SELF);
                let children_s = rusage_s(libc::RUSAGE_CHILDREN);
                // A VP reaped since the last poll shows up in our children's
                // times in full; what we had counted of it already is not new.
                let gone_vps: u64 = vps.iter().filter_map(|p| gone.get(p)).sum::<u64>()
                    + gone
                        .iter()
                        .filter(|(p, _)| !vps.contains(p))
                        .map(|(_, t)| t)
                        .sum::<u64>();
                let reaped = (children_s - self.children_s - gone_vps as f64 / self.hz).max(0.0);
                let ours_s = ours as f64 / self.hz + (self_s - self.self_s) + reaped;
                let all_s = self
                    .busy
                    .map_or(0.0, |b| busy.saturating_sub(b) as f64 / self.hz);
                self.busy = Some(busy);
                self.self_s = self_s;
                self.children_s = children_s;
                (all_s - ours_s).max(0.0)
            }
        };
        self.total += used;
        self.samples.push_back((now, self.total));
        // Keep the newest sample at least a window old, drop older ones.
        while self.samples.len() > 2
            && self
                .samples
                .get(1)
                .is_some_and(|(t, _)| now.duration_since(*t) >= self.window)
        {
            self.samples.pop_front();
        }
        let (t0, c0) = *self.samples.front()?;
        let span = now.duration_since(t0);
        self.last = (span >= self.window && !span.is_zero())
            .then(|| (self.total - c0) / span.as_secs_f64());
        self.last
    }

    /// What it sees, for `mig owner status`.
    pub fn describe(&self) -> String {
        let what = match self.scope {
            Scope::Machine => "every process but the VPs and migd".to_string(),
            Scope::Tree(p) => format!("the process tree of pid {p}"),
            Scope::None => return "off (scope none)".into(),
        };
        match self.last {
            Some(l) => format!(
                "{l:.2} cores over {} ms, counting {what}",
                self.window.as_millis()
            ),
            None => format!("measuring {what}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child killed and reaped however the test ends.
    struct Reaped(std::process::Child);
    impl Drop for Reaped {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    impl std::ops::Deref for Reaped {
        type Target = std::process::Child;
        fn deref(&self) -> &std::process::Child {
            &self.0
        }
    }

    #[test]
    fn scopes_parse_and_bad_ones_are_clear() {
        assert_eq!("machine".parse::<Scope>(), Ok(Scope::Machine));
        assert_eq!("tree:42".parse::<Scope>(), Ok(Scope::Tree(42)));
        assert_eq!("none".parse::<Scope>(), Ok(Scope::None));
        for bad in ["tree:", "tree:0", "tree:x", "cgroup"] {
            let e = bad.parse::<Scope>().unwrap_err();
            assert!(e.contains("machine, none or tree:PID"), "{e}");
        }
    }

    #[test]
    fn a_busy_child_in_the_tree_is_load_and_an_idle_one_is_not() {
        let me = std::process::id();
        let mut idle = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        assert!(tree(me).contains(&idle.id()));
        let mut m = LoadMeter::new(Scope::Tree(idle.id()), Duration::from_millis(200));
        let t0 = Instant::now();
        m.poll(t0, &[]);
        std::thread::sleep(Duration::from_millis(250));
        let l = m.poll(Instant::now(), &[]).unwrap();
        assert!(l < 0.2, "a sleeping tree has load {l}");
        idle.kill().unwrap();
        idle.wait().unwrap();

        let busy = || {
            Reaped(
                std::process::Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .spawn()
                    .unwrap(),
            )
        };
        // Other work keeps every processor of the machine busy, twice over.
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let _others: Vec<Reaped> = (0..2 * cores).map(|_| busy()).collect();
        let hog = busy();
        let mut m = LoadMeter::new(Scope::Tree(hog.id()), Duration::from_millis(300));
        m.poll(Instant::now(), &[]);
        // It gets a third of a core or less, but it wants a whole one: the
        // time it waits for a processor counts. (A window can fall where
        // the shell was still starting or the machine busier still: the
        // loop is load in some window of the next few seconds.)
        let mut seen = Vec::new();
        for _ in 0..20 {
            std::thread::sleep(Duration::from_millis(400));
            let l = m.poll(Instant::now(), &[]).unwrap();
            seen.push(l);
            if l > 0.7 {
                break;
            }
        }
        assert!(
            seen.iter().any(|&l| l > 0.7),
            "a busy loop on a busy machine has load {seen:?}"
        );
        // The same process as one of our VPs does not count.
        let mut ours = LoadMeter::new(Scope::Tree(hog.id()), Duration::from_millis(300));
        ours.poll(Instant::now(), &[hog.id()]);
        std::thread::sleep(Duration::from_millis(400));
        let l = ours.poll(Instant::now(), &[hog.id()]).unwrap();
        assert_eq!(l, 0.0, "a VP's load counted as the owner's");
    }

    #[test]
    fn no_load_is_read_before_the_samples_span_the_window() {
        let window = Duration::from_millis(300);
        let mut m = LoadMeter::new(Scope::Tree(std::process::id()), window);
        let t0 = Instant::now();
        assert_eq!(m.poll(t0, &[]), None);
        // A poll later, the span is far shorter than the window: a tick of
        // anything in it would read as a large part of a core.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(m.poll(Instant::now(), &[]), None);
        assert!(m.describe().contains("measuring"), "{}", m.describe());
        std::thread::sleep(window);
        assert!(
            m.poll(Instant::now(), &[]).is_some(),
            "the window is spanned"
        );
    }

    #[test]
    fn machine_load_excludes_our_vps() {
        let hog = Reaped(
            std::process::Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .spawn()
                .unwrap(),
        );
        // The busy loop's own processor time, in seconds (utime + stime).
        let pid = hog.id();
        let hz = LoadMeter::new(Scope::Machine, Duration::ZERO).hz;
        let cpu_s = || {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            let after = &stat[stat.rfind(')').unwrap() + 2..];
            let f: Vec<u64> = after
                .split_whitespace()
                .skip(11)
                .take(2)
                .map(|x| x.parse().unwrap())
                .collect();
            (f[0] + f[1]) as f64 / hz
        };
        // Two meters over the same intervals: one told the busy loop is a
        // VP. (The window is shorter than an interval: each poll's load is
        // over the last interval.)
        let vps = [pid];
        let window = Duration::from_millis(400);
        let mut with = LoadMeter::new(Scope::Machine, window);
        let mut without = LoadMeter::new(Scope::Machine, window);
        let mut t = Instant::now();
        let mut before = cpu_s();
        with.poll(t, &vps);
        without.poll(t, &[]);
        // However crowded the machine, the loop gets some processor time
        // over some interval: the meter told of it counts exactly that
        // much less (within a few clock ticks), whatever the share was.
        // (The meters count this process as ours: over an interval where
        // the other tests of this binary, in its threads, took more than
        // the rest of the machine did, both read nothing; such an interval
        // tells nothing and the next is taken.)
        let (mut counted, mut excluded, mut share) = (0.0, 0.0, 0.0);
        for _ in 0..40 {
            std::thread::sleep(Duration::from_millis(500));
            let t1 = Instant::now();
            let after = cpu_s();
            counted = without.poll(t1, &[]).unwrap();
            excluded = with.poll(t1, &vps).unwrap();
            share = (after - before) / t1.duration_since(t).as_secs_f64();
            (t, before) = (t1, after);
            if share > 0.05 && counted + 0.08 >= share {
                break;
            }
        }
        drop(hog);
        assert!(share > 0.05, "the busy loop never ran: {share:.2} cores");
        assert!(
            (counted - excluded - share).abs() < 0.08,
            "a VP's busy loop at {share:.2} cores: {counted:.2} counted without it excluded, \
             {excluded:.2} with"
        );
        assert!(
            with.describe().contains("cores over 400 ms"),
            "{}",
            with.describe()
        );
    }
}
