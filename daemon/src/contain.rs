//! A VP is its whole process tree: each VP's processes are held in a cgroup
//! of their own, so that children that call `setsid` or double-fork are
//! stopped, resumed and killed with it, and so that the CPU the VPs use is
//! counted whoever forked what.
//!
//! What lives here: finding the host's cgroups (v2, else the v1 freezer
//! with the v1 cpuacct beside it), one directory per daemon under the
//! daemon's own cgroup and one per VP process under it, signalling every
//! process of a cell, killing a cell at once (v2 `cgroup.kill`; v1: frozen,
//! killed, thawed), CPU counters, a cell's limits (`Limits`: its memory
//! and its I/O weight, through v2's controllers where the daemon's
//! directory has them, else v1's `memory` and `blkio` hierarchies beside
//! it, where mounted; without either a limit is not enforced and the log
//! says so once), and clearing what a daemon that died left behind. What does not: which VPs to stop or kill (the server), starting
//! processes (`host`, whose child joins its cell through the descriptors
//! opened here). Without cgroups (no permission, none mounted) the daemon
//! falls back to process groups, and says so in its log.

use std::fs;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::Pid;

/// Which cgroup interface holds the cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavour {
    /// The unified hierarchy (`cgroup.kill`, `cpu.stat`).
    V2,
    /// The v1 freezer, with a v1 cpuacct cell beside it when mounted.
    V1,
}

/// What a cell holds its VP to (from `StartVp`'s `memory_mb` and `io`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// The most memory its processes may use together, in MB (swap
    /// included where the kernel counts it).
    pub memory_mb: Option<u64>,
    /// Its share of the host's disks, as a weight from 1 to 1000 (100 is
    /// the kernel's default for every cgroup).
    pub io_weight: Option<u16>,
}

impl Limits {
    /// A VP's, as it was started (`mig spawn --mem`, `--io`): its I/O
    /// class's share of the host's disks as a weight, below the 100 the
    /// owner's own processes have.
    pub fn of(start: &libmig::msg::StartVp) -> Limits {
        use libmig::msg::IoClass;
        Limits {
            memory_mb: start.memory_mb,
            io_weight: start.io.map(|c| match c {
                IoClass::Light => 25,
                IoClass::Heavy => 75,
            }),
        }
    }
}

/// Where a controller's files for the cells are.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Knob {
    /// In each cell's own (v2) directory.
    V2,
    /// In a twin of each cell under the daemon's directory of a v1
    /// hierarchy.
    V1(PathBuf),
}

/// The cgroups this daemon keeps its VPs in.
#[derive(Debug)]
pub struct Containment {
    flavour: Flavour,
    /// The daemon's directory (v2, or the v1 freezer hierarchy).
    base: PathBuf,
    /// The daemon's directory in the v1 cpuacct hierarchy.
    acct: Option<PathBuf>,
    /// The memory controller, if the host gives one.
    memory: Option<Knob>,
    /// The I/O controller, if the host gives one.
    io: Option<Knob>,
    /// Cells whose processes have not all gone yet, removed when they have.
    retired: Vec<Cell>,
    /// Cells made so far (each cell's name ends with its number).
    made: u64,
    /// CPU used by all VPs when the mark was set (the owner came back).
    mark: Option<Duration>,
}

/// One VP process's cgroup (and its cpuacct twin under v1).
#[derive(Debug)]
pub struct Cell {
    flavour: Flavour,
    dir: PathBuf,
    acct: Option<PathBuf>,
    /// Its twins in v1's memory and blkio hierarchies, when it has limits
    /// there.
    twins: Vec<PathBuf>,
    /// Where its memory counters are, if it has a memory limit.
    memory: Option<PathBuf>,
    /// `cgroup.procs` of each, open for the child to write itself into
    /// (the cell's, its cpuacct twin's, then its limits' twins').
    join: Vec<OwnedFd>,
    /// The (v2) directory, open for a child to be started in it.
    into: Option<OwnedFd>,
}

/// Where a cgroup hierarchy is mounted, from /proc/self/mountinfo: the
/// mount point of a `cgroup2` file system (`controller` None) or of a v1
/// one whose options name `controller`.
fn mount_point(mountinfo: &str, controller: Option<&str>) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let point = left.split_whitespace().nth(4)?;
        let mut r = right.split_whitespace();
        let fstype = r.next()?;
        let _source = r.next()?;
        let opts = r.next().unwrap_or("");
        let hit = match controller {
            None => fstype == "cgroup2",
            Some(c) => fstype == "cgroup" && opts.split(',').any(|o| o == c),
        };
        hit.then(|| PathBuf::from(point))
    })
}

/// This process's path in a hierarchy, from /proc/self/cgroup: the v2 line
/// (`0::/path`, `controller` None) or the v1 line naming `controller`.
fn own_path(cgroup: &str, controller: Option<&str>) -> Option<String> {
    cgroup.lines().find_map(|line| {
        let mut f = line.splitn(3, ':');
        let (_id, ctrls, path) = (f.next()?, f.next()?, f.next()?);
        let hit = match controller {
            None => ctrls.is_empty(),
            Some(c) => ctrls.split(',').any(|x| x == c),
        };
        hit.then(|| path.to_string())
    })
}

/// A directory name from a host name: letters, digits, `-`, `_`, `.`.
fn safe(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    s.trim_start_matches('.').to_string()
}

fn alive(pid: i32) -> bool {
    pid > 0
        && !matches!(
            nix::sys::signal::kill(Pid::from_raw(pid), None),
            Err(nix::errno::Errno::ESRCH)
        )
}

/// The processes listed in a cgroup directory.
fn procs(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// In the frozen cells under `base` (v2), kill every process the daemon
/// `daemon` started that has not exec'd yet (it still runs the daemon's
/// own program, whose file this process runs too): the daemon waits for
/// that exec (`CLONE_VFORK`) and, the child frozen, would wait for ever
/// and never renew its lease. Killed, it ends even frozen, and the daemon
/// hears that the VP could not start. How many were killed.
pub fn kill_unborn(base: &Path, daemon: i32) -> usize {
    let inode = |p: &Path| {
        use std::os::unix::fs::MetadataExt;
        fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
    };
    let Some(own) = inode(Path::new("/proc/self/exe")) else {
        return 0;
    };
    let mut dirs = vec![base.to_path_buf()];
    if let Ok(entries) = fs::read_dir(base) {
        dirs.extend(
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path()),
        );
    }
    let parent = |pid: i32| -> Option<i32> {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // (The name, in parentheses, may hold spaces: fields follow its end.)
        let rest = &stat[stat.rfind(')')? + 1..];
        rest.split_whitespace().nth(1)?.parse().ok()
    };
    let mut killed = 0;
    for dir in dirs {
        for pid in procs(&dir) {
            let unborn = parent(pid) == Some(daemon)
                && inode(&Path::new("/proc").join(pid.to_string()).join("exe")) == Some(own);
            if unborn && nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok() {
                killed += 1;
            }
        }
    }
    killed
}

fn write_file(path: &Path, what: &str) -> io::Result<()> {
    fs::OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all(what.as_bytes())
}

/// Send `sig` to every process in `dir`, again until no new one appears (a
/// process that forked as it was signalled has its child listed next time;
/// a stopped or killed process forks no more).
fn signal_all(dir: &Path, sig: Signal) -> usize {
    let mut done: Vec<i32> = Vec::new();
    for _ in 0..64 {
        let fresh: Vec<i32> = procs(dir)
            .into_iter()
            .filter(|p| !done.contains(p))
            .collect();
        if fresh.is_empty() {
            break;
        }
        for &p in &fresh {
            let _ = nix::sys::signal::kill(Pid::from_raw(p), sig);
        }
        done.extend(fresh);
    }
    done.len()
}

/// Kill everything in a cell directory at once.
fn kill_dir(flavour: Flavour, dir: &Path) {
    match flavour {
        Flavour::V2 => {
            if write_file(&dir.join("cgroup.kill"), "1").is_err() {
                signal_all(dir, Signal::SIGKILL);
            }
        }
        Flavour::V1 => {
            // Frozen, nothing in it can fork while it is killed.
            let frozen = write_file(&dir.join("freezer.state"), "FROZEN").is_ok();
            signal_all(dir, Signal::SIGKILL);
            if frozen {
                let _ = write_file(&dir.join("freezer.state"), "THAWED");
            }
        }
    }
}

/// Microseconds of CPU used by everything in a cgroup directory, ever.
fn cpu_us(flavour: Flavour, dir: &Path, acct: Option<&Path>) -> Option<u64> {
    match flavour {
        Flavour::V2 => fs::read_to_string(dir.join("cpu.stat"))
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("usage_usec "))?
            .trim()
            .parse()
            .ok(),
        Flavour::V1 => fs::read_to_string(acct?.join("cpuacct.usage"))
            .ok()?
            .trim()
            .parse::<u64>()
            .ok()
            .map(|ns| ns / 1000),
    }
}

/// Remove a cell's directory and any left under it; false while busy.
fn remove_tree(dir: &Path) -> bool {
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&e.path());
            }
        }
    }
    match fs::remove_dir(dir) {
        Ok(()) => true,
        Err(e) => e.kind() == io::ErrorKind::NotFound,
    }
}

/// Freeze (`on`) or thaw every cell under a daemon's directory at once:
/// the lease guardian's fence. Independent of the signals that stop and
/// continue VPs: a frozen VP stays frozen whatever it is sent.
pub fn freeze_tree(flavour: Flavour, base: &Path, on: bool) -> io::Result<()> {
    match flavour {
        Flavour::V2 => write_file(&base.join("cgroup.freeze"), if on { "1" } else { "0" }),
        Flavour::V1 => write_file(
            &base.join("freezer.state"),
            if on { "FROZEN" } else { "THAWED" },
        ),
    }
}

/// Kill every process of every cell under a daemon's directory (frozen or
/// not) and remove the directories.
pub fn clear_tree(flavour: Flavour, base: &Path) {
    Containment::clear(flavour, base);
    // (v1: killed processes in a frozen tree die once it thaws.)
    let _ = freeze_tree(flavour, base, false);
    for _ in 0..50 {
        if remove_tree(base) {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

impl Containment {
    /// The cgroups for daemon `name` (pid `pid`), made under this process's
    /// own cgroup: v2 when its hierarchy can be written, else the v1
    /// freezer. Directories a daemon that died left behind beside it are
    /// cleared first (their processes killed). `Err` says why there are
    /// none (the daemon then uses process groups only).
    pub fn open(name: &str, pid: u32) -> Result<Containment, String> {
        let mountinfo = fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
        let own = fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| format!("/proc/self/cgroup: {e}"))?;
        let leaf = format!("mig-{}-{pid}", safe(name));
        let place = |controller: Option<&str>| -> Option<PathBuf> {
            let mount = mount_point(&mountinfo, controller)?;
            let path = own_path(&own, controller)?;
            Some(mount.join(path.trim_start_matches('/')))
        };
        let mut why = Vec::new();
        // A controller in the daemon's v2 directory, given to the cells;
        // else the daemon's directory in the v1 hierarchy of `v1`.
        let knob = |base: Option<&Path>, v2: &str, v1: &str, file: &str| -> Option<Knob> {
            if let Some(b) = base {
                let offered = fs::read_to_string(b.join("cgroup.controllers"))
                    .is_ok_and(|c| c.split_whitespace().any(|x| x == v2));
                if offered
                    && write_file(&b.join("cgroup.subtree_control"), &format!("+{v2}")).is_ok()
                {
                    return Some(Knob::V2);
                }
            }
            let dir = place(Some(v1)).and_then(|p| Self::make(Flavour::V1, &p, &leaf).ok())?;
            if dir.join(file).exists() {
                Some(Knob::V1(dir))
            } else {
                let _ = fs::remove_dir(&dir);
                None
            }
        };
        if let Some(parent) = place(None) {
            match Self::make(Flavour::V2, &parent, &leaf) {
                Ok(base) => {
                    let mut c = Containment::new(Flavour::V2, base, None);
                    c.memory = knob(Some(&c.base), "memory", "memory", "memory.limit_in_bytes");
                    c.io = knob(Some(&c.base), "io", "blkio", "blkio.weight");
                    return Ok(c);
                }
                Err(e) => why.push(format!("cgroup v2 at {}: {e}", parent.display())),
            }
        } else {
            why.push("no cgroup v2 mounted".into());
        }
        if let Some(parent) = place(Some("freezer")) {
            match Self::make(Flavour::V1, &parent, &leaf) {
                Ok(base) => {
                    let acct = place(Some("cpuacct"))
                        .and_then(|p| Self::make(Flavour::V1, &p, &leaf).ok());
                    let mut c = Containment::new(Flavour::V1, base, acct);
                    c.memory = knob(None, "memory", "memory", "memory.limit_in_bytes");
                    c.io = knob(None, "io", "blkio", "blkio.weight");
                    return Ok(c);
                }
                Err(e) => why.push(format!("cgroup v1 freezer at {}: {e}", parent.display())),
            }
        } else {
            why.push("no cgroup v1 freezer mounted".into());
        }
        Err(why.join("; "))
    }

    fn new(flavour: Flavour, base: PathBuf, acct: Option<PathBuf>) -> Containment {
        Containment {
            flavour,
            base,
            acct,
            memory: None,
            io: None,
            retired: Vec::new(),
            made: 0,
            mark: None,
        }
    }

    /// Make `parent/leaf`, after clearing `parent/mig-*-PID` of dead daemons.
    fn make(flavour: Flavour, parent: &Path, leaf: &str) -> io::Result<PathBuf> {
        if let Ok(entries) = fs::read_dir(parent) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let Some(rest) = name.strip_prefix("mig-") else {
                    continue;
                };
                let pid = rest.rsplit('-').next().and_then(|p| p.parse::<i32>().ok());
                if pid.is_some_and(|p| !alive(p)) {
                    Self::clear(flavour, &e.path());
                }
            }
        }
        let base = parent.join(leaf);
        fs::create_dir_all(&base)?;
        // Prove a process can be placed here before relying on it.
        write_file(&base.join("cgroup.procs"), "").or_else(|e| {
            // An empty write is refused with EINVAL by some kernels: that
            // still shows the file is writable.
            if e.raw_os_error() == Some(libc::EINVAL) {
                Ok(())
            } else {
                Err(e)
            }
        })?;
        Ok(base)
    }

    /// Kill everything under a daemon's directory and remove it.
    fn clear(flavour: Flavour, dir: &Path) {
        if let Ok(entries) = fs::read_dir(dir) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    kill_dir(flavour, &e.path());
                }
            }
        }
        kill_dir(flavour, dir);
        for _ in 0..50 {
            if remove_tree(dir) {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// What holds the VPs, for the log.
    pub fn describe(&self) -> String {
        let held = match self.flavour {
            Flavour::V2 => format!("cgroup v2 {}", self.base.display()),
            Flavour::V1 => format!(
                "cgroup v1 freezer {}{}",
                self.base.display(),
                self.acct
                    .as_ref()
                    .map_or(String::new(), |a| format!(", cpuacct {}", a.display()))
            ),
        };
        let knob = |k: &Option<Knob>, what: &str| match k {
            Some(Knob::V2) => format!("{what} limits in v2"),
            Some(Knob::V1(d)) => format!("{what} limits in {}", d.display()),
            None => format!("no {what} controller: `mig spawn --{what}` is not enforced here"),
        };
        format!(
            "{held}; {}; {}",
            knob(&self.memory, "mem"),
            knob(&self.io, "io")
        )
    }

    /// The interface in use.
    pub fn flavour(&self) -> Flavour {
        self.flavour
    }

    /// The daemon's directory, holding every cell.
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// A new cell for a process of VP `label` (e.g. `t40001`), held to
    /// `limits` where this host has the controllers.
    pub fn cell(&mut self, label: &str, limits: Limits) -> io::Result<Cell> {
        self.made += 1;
        let name = format!("{}-{}", safe(label), self.made);
        let dir = self.base.join(&name);
        fs::create_dir_all(&dir)?;
        let acct = match &self.acct {
            Some(a) => {
                let d = a.join(&name);
                fs::create_dir_all(&d)?;
                Some(d)
            }
            None => None,
        };
        // The limits' files: in the cell, or in a twin of it.
        let mut twins = Vec::new();
        let mut at = |knob: &Option<Knob>| -> io::Result<Option<PathBuf>> {
            match knob {
                None => Ok(None),
                Some(Knob::V2) => Ok(Some(dir.clone())),
                Some(Knob::V1(base)) => {
                    let d = base.join(&name);
                    fs::create_dir_all(&d)?;
                    twins.push(d.clone());
                    Ok(Some(d))
                }
            }
        };
        let mut memory = None;
        if let Some(mb) = limits.memory_mb {
            if let Some(d) = at(&self.memory)? {
                let bytes = (mb << 20).to_string();
                match self.memory {
                    Some(Knob::V2) => {
                        write_file(&d.join("memory.max"), &bytes)?;
                        // Swapped out, it would hold no less of the host.
                        let _ = write_file(&d.join("memory.swap.max"), "0");
                    }
                    _ => {
                        write_file(&d.join("memory.limit_in_bytes"), &bytes)?;
                        let _ = write_file(&d.join("memory.memsw.limit_in_bytes"), &bytes);
                    }
                }
                memory = Some(d);
            }
        }
        if let Some(w) = limits.io_weight {
            if let Some(d) = at(&self.io)? {
                match self.io {
                    Some(Knob::V2) => write_file(&d.join("io.weight"), &format!("default {w}"))?,
                    _ => write_file(&d.join("blkio.weight"), &w.clamp(10, 1000).to_string())?,
                }
            }
        }
        let mut join = Vec::new();
        for d in std::iter::once(&dir).chain(acct.iter()).chain(twins.iter()) {
            let f = fs::OpenOptions::new()
                .write(true)
                .open(d.join("cgroup.procs"))?;
            join.push(OwnedFd::from(f));
        }
        let into = match self.flavour {
            Flavour::V2 => fs::File::open(&dir).ok().map(OwnedFd::from),
            Flavour::V1 => None,
        };
        Ok(Cell {
            flavour: self.flavour,
            dir,
            acct,
            twins,
            memory,
            join,
            into,
        })
    }

    /// CPU used by every VP this daemon has run, ever (ended ones too).
    pub fn cpu_used(&self) -> Option<Duration> {
        cpu_us(self.flavour, &self.base, self.acct.as_deref()).map(Duration::from_micros)
    }

    /// Count VPs' CPU from now on (`None`: stop counting).
    pub fn mark(&mut self, on: bool) {
        self.mark = if on { self.cpu_used() } else { None };
    }

    /// CPU all VPs used since the mark.
    pub fn used_since_mark(&self) -> Option<Duration> {
        Some(self.cpu_used()?.saturating_sub(self.mark?))
    }

    /// A cell whose VP ended: whatever is left in it is killed, and the
    /// directory removed once empty (now, or at a later `sweep`).
    pub fn retire(&mut self, cell: Cell) {
        cell.kill();
        if !cell.remove() {
            self.retired.push(cell);
        }
    }

    /// Remove retired cells that have emptied.
    pub fn sweep(&mut self) {
        self.retired.retain(|c| !c.remove());
    }

    /// Kill every process in every cell and remove the daemon's directories.
    pub fn close(&mut self) {
        Self::clear(self.flavour, &self.base);
        if let Some(a) = &self.acct {
            Self::clear(Flavour::V1, a);
        }
        for k in [&self.memory, &self.io] {
            if let Some(Knob::V1(d)) = k {
                Self::clear(Flavour::V1, d);
            }
        }
        self.retired.clear();
    }
}

impl Cell {
    /// Descriptors the child writes "0" into to join the cell (close-on-exec).
    pub fn join_fds(&self) -> Vec<RawFd> {
        self.join.iter().map(|f| f.as_raw_fd()).collect()
    }

    /// Of those, its limits' twins' (written even by a child born in the
    /// cell, which the twins' hierarchies know nothing of).
    pub fn twin_fds(&self) -> Vec<RawFd> {
        let n = self.twins.len().min(self.join.len());
        self.join[self.join.len() - n..]
            .iter()
            .map(|f| f.as_raw_fd())
            .collect()
    }

    /// Its directory, open for a child to be started in it
    /// (`clone_into`; cgroup v2 only).
    pub fn into_fd(&self) -> Option<RawFd> {
        self.into.as_ref().map(|f| f.as_raw_fd())
    }

    /// The child has started: the daemon's copies of those descriptors go.
    pub fn joined(&mut self) {
        self.join.clear();
        self.into = None;
    }

    /// Its processes.
    pub fn pids(&self) -> Vec<i32> {
        procs(&self.dir)
    }

    /// Send `sig` to every process in it; how many.
    pub fn signal(&self, sig: Signal) -> usize {
        signal_all(&self.dir, sig)
    }

    /// Kill every process in it at once.
    pub fn kill(&self) {
        kill_dir(self.flavour, &self.dir);
    }

    /// CPU its processes used, reaped children included.
    pub fn cpu_used(&self) -> Option<Duration> {
        cpu_us(self.flavour, &self.dir, self.acct.as_deref()).map(Duration::from_micros)
    }

    /// Did the kernel end a process of it for taking more memory than its
    /// limit?
    pub fn out_of_memory(&self) -> bool {
        let Some(d) = &self.memory else {
            return false;
        };
        let count = |file: &str| {
            fs::read_to_string(d.join(file)).ok().and_then(|s| {
                s.lines().find_map(|l| {
                    l.strip_prefix("oom_kill ")
                        .and_then(|n| n.trim().parse::<u64>().ok())
                })
            })
        };
        count("memory.events")
            .or_else(|| count("memory.oom_control"))
            .is_some_and(|n| n > 0)
    }

    /// Remove its directories; false while a process is still in it.
    fn remove(&self) -> bool {
        let main = remove_tree(&self.dir);
        let acct = self.acct.as_deref().is_none_or(remove_tree);
        let twins = self.twins.iter().all(|t| remove_tree(t));
        main && acct && twins
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const CGROUP: &str = "6:freezer:/a/b\n2:cpu,cpuacct:/\n0::/user.slice\n";

    #[test]
    fn mounts_and_own_paths_are_read_from_proc() {
        assert_eq!(
            mount_point(MOUNTINFO, None),
            Some("/sys/fs/cgroup/unified".into())
        );
        assert_eq!(
            mount_point(MOUNTINFO, Some("freezer")),
            Some("/sys/fs/cgroup/freezer".into())
        );
        assert_eq!(mount_point(MOUNTINFO, Some("memory")), None);
        assert_eq!(own_path(CGROUP, None), Some("/user.slice".into()));
        assert_eq!(own_path(CGROUP, Some("freezer")), Some("/a/b".into()));
        assert_eq!(own_path(CGROUP, Some("cpuacct")), Some("/".into()));
        assert_eq!(safe("../h1 x"), "_h1_x");
    }

    /// A shell in `cell` that starts a `setsid` child busy-looping, and
    /// the child's pid once it is in the cell.
    #[allow(clippy::zombie_processes)] // the caller waits for it
    fn tree_in(cell: &mut Cell) -> (std::process::Child, i32) {
        use std::os::unix::process::CommandExt;
        let fds = cell.join_fds();
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", "setsid sh -c 'while :; do :; done' & wait"]);
        // SAFETY: the closure only calls write(2) on descriptors opened
        // before the fork.
        unsafe {
            cmd.pre_exec(move || {
                for &fd in &fds {
                    libc::write(fd, b"0".as_ptr().cast(), 1);
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().expect("spawn sh");
        cell.joined();
        let t = std::time::Instant::now();
        loop {
            let pids = cell.pids();
            if let Some(&p) = pids.iter().find(|&&p| p != child.id() as i32) {
                return (child, p);
            }
            if t.elapsed() > Duration::from_secs(5) {
                cell.kill();
                let _ = child.wait();
                panic!("no child in {pids:?}");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn state(pid: i32) -> char {
        fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s[s.rfind(')')? + 1..].trim_start().chars().next())
            .unwrap_or('X')
    }

    fn wait_for(what: impl Fn() -> bool) -> bool {
        let t = std::time::Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if what() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    /// Both interfaces, where this machine has them: a `setsid` child is
    /// stopped, counted, resumed and killed with its cell, and the
    /// daemon's directory goes with `close`. This machine must have one of
    /// them (the Owner tests rely on it).
    #[test]
    fn a_setsid_child_is_stopped_and_killed_with_its_cell() {
        let c = Containment::open("unit", std::process::id()).expect("no cgroup here");
        let mut tried = vec![c];
        // The v1 freezer too, when the v2 hierarchy came first.
        let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap();
        let own = fs::read_to_string("/proc/self/cgroup").unwrap();
        if tried[0].flavour == Flavour::V2 {
            if let (Some(m), Some(p)) = (
                mount_point(&mountinfo, Some("freezer")),
                own_path(&own, Some("freezer")),
            ) {
                let parent = m.join(p.trim_start_matches('/'));
                let leaf = format!("mig-unit1-{}", std::process::id());
                if let Ok(base) = Containment::make(Flavour::V1, &parent, &leaf) {
                    let acct = mount_point(&mountinfo, Some("cpuacct")).and_then(|m| {
                        let p = own_path(&own, Some("cpuacct"))?;
                        Containment::make(Flavour::V1, &m.join(p.trim_start_matches('/')), &leaf)
                            .ok()
                    });
                    tried.push(Containment::new(Flavour::V1, base, acct));
                }
            }
        }
        for mut c in tried {
            let mut cell = c.cell("t1", Limits::default()).expect("cell");
            let (mut sh, kid) = tree_in(&mut cell);
            assert!(wait_for(|| state(kid) == 'R'), "{}", c.describe());
            assert_eq!(cell.signal(Signal::SIGSTOP), 2, "{}", c.describe());
            assert!(
                wait_for(|| state(kid) == 'T'),
                "{}: child not stopped",
                c.describe()
            );
            let before = cell.cpu_used();
            assert!(before.is_some(), "{}: no CPU counter", c.describe());
            std::thread::sleep(Duration::from_millis(100));
            assert!(
                cell.cpu_used() <= before.map(|b| b + Duration::from_millis(10)),
                "{}: a stopped tree used CPU",
                c.describe()
            );
            cell.signal(Signal::SIGCONT);
            assert!(
                wait_for(|| state(kid) == 'R'),
                "{}: not resumed",
                c.describe()
            );
            c.retire(cell);
            let _ = sh.wait();
            assert!(
                wait_for(|| matches!(state(kid), 'X' | 'Z')),
                "{}: child left running",
                c.describe()
            );
            assert!(c.cpu_used().is_some_and(|u| u > Duration::ZERO));
            let base = c.base.clone();
            c.sweep();
            c.close();
            assert!(!base.exists(), "{} left behind", base.display());
        }
    }
}
