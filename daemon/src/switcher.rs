//! The threads that carry out slot switches at their instants.
//!
//! What lives here: a small crew of threads, one pinned to each of a few
//! processors, that sleep to the instant of the switch armed next (an
//! absolute sleep on the real-time clock, with no timer slack) and race to
//! carry it out: the first awake takes it, stops the outgoing VPs, then
//! continues the incoming ones, and records how late it was. Why several:
//! a processor can be held for milliseconds by work the kernel does not
//! preempt (on some machines a kernel thread runs 1-7 ms at a stretch),
//! and a single thread waiting on that processor would switch that late;
//! a thread on another processor does not wait. What does not live here:
//! which VPs to switch (the slicer decides, the daemon's loop arms a switch
//! ahead of its instant and re-arms it as VPs end or move).
//!
//! Arming and carrying out share one lock, so a switch is either done
//! before the daemon takes it back (`disarm`, when the owner returns) or
//! not done at all.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use libmig::msg::Switch;
use nix::sys::signal::Signal;

/// A switch waiting for its instant: process groups to stop, then to
/// continue, and single processes with them (a VP's children that left
/// its process group, from its cgroup).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Armed {
    /// The instant (ns since the Unix epoch, real-time clock).
    pub ideal_ns: u64,
    /// The slot switched to and its table's generation (for the record).
    pub slot: u32,
    /// (See `slot`.)
    pub generation: u64,
    pub stop: Vec<i32>,
    pub cont: Vec<i32>,
    pub stop_one: Vec<i32>,
    pub cont_one: Vec<i32>,
}

#[derive(Default)]
struct State {
    armed: Option<Armed>,
    done: Vec<Switch>,
    quit: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A crew thread cannot panic while holding the lock (signals and
        // clock reads only); a poisoned lock still holds a sound state.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Switches kept until the daemon collects them.
const KEEP: usize = 512;

/// The crew; its threads end when it is dropped.
pub struct Switcher {
    shared: Arc<Shared>,
}

/// The real-time clock in ns since the Unix epoch.
pub fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Up to `n` processors this process may run on, spread over the ones it
/// may use (empty when that cannot be read: the threads then float).
fn processors(n: usize) -> Vec<usize> {
    let Ok(set) = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)) else {
        return Vec::new();
    };
    let all: Vec<usize> = (0..nix::sched::CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect();
    let step = all.len().div_ceil(n.max(1)).max(1);
    all.into_iter().step_by(step).take(n).collect()
}

/// How close to its instant a crew member stops waiting for a new switch
/// and sleeps to the instant itself.
const COARSE_NS: u64 = 2_000_000;

/// Sleep until `ideal_ns` on the real-time clock.
fn sleep_until(ideal_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (ideal_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ideal_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: plain system call on a valid timespec; EINTR is retried.
    while unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_REALTIME,
            libc::TIMER_ABSTIME,
            &ts,
            std::ptr::null_mut(),
        )
    } == libc::EINTR
    {}
}

fn crew_member(shared: Arc<Shared>, cpu: Option<usize>, ready: std::sync::mpsc::Sender<bool>) {
    if let Some(c) = cpu {
        let mut set = nix::sched::CpuSet::new();
        if set.set(c).is_ok() {
            let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
        }
    }
    // SAFETY: prctl on this thread; wake at the instant, not up to 50 us after.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    // The lowest real-time priority, where allowed (root, CAP_SYS_NICE or
    // RLIMIT_RTPRIO): the thread then preempts the VPs at once instead of
    // waiting its turn among them, and runs some 50 us per switch.
    let p = libc::sched_param { sched_priority: 1 };
    // SAFETY: this thread's own policy.
    let realtime = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) } == 0;
    let _ = ready.send(realtime);
    loop {
        let ideal = {
            let mut s = shared.lock();
            loop {
                if s.quit {
                    return;
                }
                let Some(ideal) = s.armed.as_ref().map(|a| a.ideal_ns) else {
                    s = shared.wake.wait(s).unwrap_or_else(|p| p.into_inner());
                    continue;
                };
                // Until shortly before the instant, a switch armed anew
                // (earlier, say) wakes the crew; the last stretch is slept
                // on the real-time clock, to the instant.
                let ahead = ideal.saturating_sub(wall_ns());
                if ahead <= COARSE_NS {
                    break ideal;
                }
                let wait = std::time::Duration::from_nanos(ahead - COARSE_NS);
                s = shared
                    .wake
                    .wait_timeout(s, wait)
                    .map(|(g, _)| g)
                    .unwrap_or_else(|p| p.into_inner().0);
            }
        };
        sleep_until(ideal);
        let mut s = shared.lock();
        if s.armed.as_ref().is_some_and(|a| a.ideal_ns <= wall_ns()) {
            let Some(a) = s.armed.take() else { continue };
            let start = wall_ns();
            for (groups, ones, sig) in [
                (&a.stop, &a.stop_one, Signal::SIGSTOP),
                (&a.cont, &a.cont_one, Signal::SIGCONT),
            ] {
                for &pid in groups {
                    crate::host::signal(pid, sig);
                }
                for &pid in ones {
                    crate::host::signal_one(pid, sig);
                }
            }
            let end = wall_ns();
            if s.done.len() < KEEP {
                s.done.push(Switch {
                    ideal_ns: a.ideal_ns,
                    late_ns: start.saturating_sub(a.ideal_ns),
                    took_ns: end.saturating_sub(start),
                    slot: a.slot,
                    generation: a.generation,
                });
            }
        }
    }
}

impl Switcher {
    /// Start the crew: a thread on each of up to `threads` processors. Also
    /// says whether the threads run in the real-time class (`SCHED_FIFO`,
    /// where this process may) or share the processors like any program.
    pub fn start(threads: usize) -> std::io::Result<(Switcher, bool)> {
        let shared = Arc::new(Shared::default());
        let cpus = processors(threads);
        let pins: Vec<Option<usize>> = if cpus.is_empty() {
            vec![None]
        } else {
            cpus.into_iter().map(Some).collect()
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let n = pins.len();
        for (i, cpu) in pins.into_iter().enumerate() {
            let (s, tx) = (shared.clone(), tx.clone());
            std::thread::Builder::new()
                .name(format!("switch-{i}"))
                .spawn(move || crew_member(s, cpu, tx))?;
        }
        let realtime = rx.iter().take(n).all(|r| r);
        Ok((Switcher { shared }, realtime))
    }

    /// Arm `a` (replacing what was armed): carried out at its instant.
    pub fn arm(&self, a: Armed) {
        let mut s = self.shared.lock();
        let new_instant = s.armed.as_ref().map(|x| x.ideal_ns) != Some(a.ideal_ns);
        s.armed = Some(a);
        if new_instant {
            self.shared.wake.notify_all();
        }
    }

    /// Take back what is armed and not yet carried out.
    pub fn disarm(&self) -> Option<Armed> {
        self.shared.lock().armed.take()
    }

    /// The instant of the switch armed and not yet carried out.
    pub fn armed(&self) -> Option<u64> {
        self.shared.lock().armed.as_ref().map(|a| a.ideal_ns)
    }

    /// The switches carried out since the last call.
    pub fn done(&self) -> Vec<Switch> {
        std::mem::take(&mut self.shared.lock().done)
    }
}

impl Drop for Switcher {
    fn drop(&mut self) {
        self.shared.lock().quit = true;
        self.shared.wake.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::time::{Duration, Instant};

    fn state(pid: u32) -> char {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .and_then(|(_, r)| r.trim().chars().next())
            })
            .unwrap_or('?')
    }

    fn wait_for(what: impl Fn() -> bool) -> bool {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(10) {
            if what() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    #[test]
    fn an_armed_switch_is_carried_out_once_at_its_instant_and_a_disarmed_one_never() {
        use std::os::unix::process::CommandExt;
        let mut a = Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let mut b = Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        // A process out of every listed group (a VP's child that called
        // setsid), signalled on its own.
        let mut c = Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let (crew, _) = Switcher::start(2).unwrap();
        let at = wall_ns() + 30_000_000;
        crew.arm(Armed {
            ideal_ns: at,
            stop: vec![a.id() as i32],
            stop_one: vec![c.id() as i32],
            ..Armed::default()
        });
        assert_eq!(crew.armed(), Some(at));
        assert!(wait_for(|| state(a.id()) == 'T'), "a stopped");
        assert!(wait_for(|| state(c.id()) == 'T'), "c stopped");
        assert!(wall_ns() >= at);
        assert_eq!(crew.armed(), None);
        let done = crew.done();
        assert_eq!(done.len(), 1, "carried out once: {done:?}");
        assert_eq!(done[0].ideal_ns, at);
        // Taken back before its instant (far enough ahead that a busy
        // machine cannot reach it first): nothing happens.
        crew.arm(Armed {
            ideal_ns: wall_ns() + 30_000_000_000,
            stop: vec![b.id() as i32],
            cont: vec![a.id() as i32],
            ..Armed::default()
        });
        assert!(crew.disarm().is_some());
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!((state(a.id()), state(b.id())), ('T', 'S'));
        assert!(crew.done().is_empty());
        // Re-armed: stop first, then continue.
        crew.arm(Armed {
            ideal_ns: wall_ns() + 10_000_000,
            stop: vec![b.id() as i32],
            cont: vec![a.id() as i32],
            cont_one: vec![c.id() as i32],
            ..Armed::default()
        });
        assert!(wait_for(|| state(a.id()) == 'S' && state(b.id()) == 'T'));
        assert!(wait_for(|| state(c.id()) == 'S'), "c continued");
        for c in [&mut a, &mut b, &mut c] {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    #[test]
    fn processors_are_spread_and_never_more_than_asked() {
        let one = processors(1);
        assert!(one.len() <= 1);
        let many = processors(4);
        assert!(many.len() <= 4);
        let mut sorted = many.clone();
        sorted.dedup();
        assert_eq!(sorted, many, "distinct, in order");
    }
}
