//! Gang slicing on real daemons (this machine has 2 cores, so jobs are
//! sized to 2 hosts of 1 processor): the scheduler's slots are carried out
//! with SIGSTOP/SIGCONT on every host at the same instants.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use mig_tests::{bin, job_lines, job_succeeds, wait_until, Vm};

/// (job, host, pid) of every running VP.
fn vps(vm: &Vm) -> Vec<(String, String, u32)> {
    vm.json(&["ps"])
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|v| v["state"] == "running")
                .map(|v| {
                    (
                        v["job"].as_str().unwrap_or("").to_string(),
                        v["host"].as_str().unwrap_or("").to_string(),
                        v["pid"].as_u64().unwrap_or(0) as u32,
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The CPU-bound tests of this file share 2 cores: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Time a process has spent on a CPU (ns, from /proc/PID/schedstat).
fn on_cpu_ns(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// (state letter, CPU ticks) of a process.
fn proc_stat(pid: u32) -> Option<(char, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let state = f.first()?.chars().next()?;
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some((state, ticks))
}

struct Sampled {
    /// Per host: sample intervals in which VPs of two different jobs both
    /// got CPU time.
    overlaps: HashMap<String, usize>,
    samples: usize,
    /// CPU ticks used per job over the window.
    ticks: HashMap<String, u64>,
    /// Samples in which each pid was stopped.
    stopped: HashMap<u32, usize>,
}

/// Sample every VP's state from /proc every 2 ms for `window`.
fn sample(vps: &[(String, String, u32)], window: Duration) -> Sampled {
    let start: HashMap<u32, u64> = vps
        .iter()
        .filter_map(|v| Some((v.2, proc_stat(v.2)?.1)))
        .collect();
    let mut s = Sampled {
        overlaps: HashMap::new(),
        samples: 0,
        ticks: HashMap::new(),
        stopped: HashMap::new(),
    };
    let t = Instant::now();
    let mut cpu: HashMap<u32, u64> = vps
        .iter()
        .filter_map(|v| Some((v.2, on_cpu_ns(v.2)?)))
        .collect();
    while t.elapsed() < window {
        std::thread::sleep(Duration::from_millis(2));
        let mut running: HashMap<&str, Vec<&str>> = HashMap::new();
        for (job, host, pid) in vps {
            if let Some(('T', _)) = proc_stat(*pid) {
                *s.stopped.entry(*pid).or_default() += 1;
            }
            let Some(now) = on_cpu_ns(*pid) else { continue };
            if cpu.insert(*pid, now).is_some_and(|before| now > before) {
                running.entry(host).or_default().push(job);
            }
        }
        for (host, jobs) in running {
            if jobs.iter().any(|j| *j != jobs[0]) {
                *s.overlaps.entry(host.to_string()).or_default() += 1;
            }
        }
        s.samples += 1;
    }
    for (job, _, pid) in vps {
        if let (Some(a), Some((_, b))) = (start.get(pid), proc_stat(*pid)) {
            *s.ticks.entry(job.clone()).or_default() += b - a;
        }
    }
    s
}

fn spin(vm: &Vm, n: u32, stop: &Path, independent: bool) -> Child {
    let mut args: Vec<PathBuf> = vec!["spin".into(), stop.into()];
    if independent {
        // `mig spawn --independent -n N -- testvp spin FILE`
        let out = mig_tests::command("mig")
            .env("MIG_DAEMON", vm.sock())
            .args([
                "spawn",
                "--independent",
                "--wait",
                "-n",
                &n.to_string(),
                "--",
            ])
            .arg(bin("testvp"))
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("mig spawn");
        return out;
    }
    vm.start_job(n, &bin("testvp"), &std::mem::take(&mut args))
}

fn done(job: Child, what: &str) {
    job_succeeds(job, what);
}

#[test]
fn two_gang_jobs_alternate_share_the_cpu_and_one_leaving_frees_the_other() {
    let _one = serial();
    let vm = Vm::start_config(2, "[daemon]\nquantum_ms = 50\n");
    let (stop_a, stop_b) = (vm.dir.path().join("a"), vm.dir.path().join("b"));
    let a = spin(&vm, 2, &stop_a, false);
    let b = spin(&vm, 2, &stop_b, false);
    assert!(wait_until(Duration::from_secs(10), || vps(&vm).len() == 4));
    // Two slots: j1 in one, j2 in the other, on both hosts.
    let map = vm.json(&["map"]);
    assert_eq!(map["slots"].as_array().map(Vec::len), Some(2), "{map}");
    std::thread::sleep(Duration::from_millis(300));
    let all = vps(&vm);
    let s = sample(&all, Duration::from_secs(2));
    // A switch every 50 ms: 40 in the window; an interval holding one may
    // see both slots' VPs (the outgoing one until it stops, then the other).
    for (host, n) in &s.overlaps {
        assert!(
            *n <= 2 * 40,
            "on {host} two jobs ran together in {n} of {} intervals of 2 ms",
            s.samples
        );
    }
    let (ta, tb) = (s.ticks["j1"] as f64, s.ticks["j2"] as f64);
    let share = ta / (ta + tb);
    assert!(
        (0.3..=0.7).contains(&share),
        "j1 got {share:.2} of the CPU (j1 {ta} ticks, j2 {tb})"
    );
    assert!(s.stopped.values().all(|&n| n > 0), "a VP was never stopped");
    let stats = vm.json(&["stats"]);
    assert!(
        stats["hosts"][0]["switches"].as_u64().unwrap_or(0) > 10,
        "{stats}"
    );
    assert!(stats["boundaries"].as_u64().unwrap_or(0) > 10, "{stats}");

    // j2 ends: its slot goes, and j1 runs all the time.
    std::fs::write(&stop_b, "").expect("stop b");
    done(b, "j2");
    assert!(wait_until(Duration::from_secs(5), || {
        vm.json(&["map"])["slots"].as_array().map(Vec::len) == Some(1)
    }));
    std::thread::sleep(Duration::from_millis(200));
    let s = sample(&vps(&vm), Duration::from_secs(1));
    assert!(s.stopped.is_empty(), "j1 stopped alone: {:?}", s.stopped);
    std::fs::write(&stop_a, "").expect("stop a");
    done(a, "j1");
}

#[test]
fn an_independent_task_fills_an_empty_cell() {
    let _one = serial();
    let vm = Vm::start_config(2, "[daemon]\nquantum_ms = 50\n");
    let (stop_a, stop_i) = (vm.dir.path().join("a"), vm.dir.path().join("i"));
    let a = spin(&vm, 2, &stop_a, false);
    assert!(wait_until(Duration::from_secs(10), || vps(&vm).len() == 2));
    let i = spin(&vm, 2, &stop_i, true);
    assert!(wait_until(Duration::from_secs(10), || vps(&vm).len() == 4));
    // j1's VP 1 ends: its cell in j1's slot is empty on its host.
    let gone_host = vps(&vm)
        .into_iter()
        .find(|v| v.0 == "j1")
        .map(|_| ())
        .and_then(|()| {
            let ps = vm.json(&["ps"]);
            ps.as_array()?
                .iter()
                .find(|v| v["job"] == "j1" && v["vp"] == 1)
                .and_then(|v| v["host"].as_str().map(str::to_string))
        })
        .expect("j1's VP 1");
    std::fs::write(format!("{}.1", stop_a.display()), "").expect("stop a.1");
    assert!(wait_until(Duration::from_secs(5), || vps(&vm).len() == 3));
    std::thread::sleep(Duration::from_millis(300));
    let now = vps(&vm);
    let map = vm.json(&["map"]);
    let filler = now
        .iter()
        .find(|v| v.0 == "j2" && v.1 == gone_host)
        .expect("j2 has a VP where j1's VP 1 was");
    let s = sample(&now, Duration::from_secs(1));
    assert_eq!(
        s.stopped.get(&filler.2).copied().unwrap_or(0),
        0,
        "the independent VP on {gone_host} waited although its processor had nothing else to run; map {map}, stopped {:?}",
        s.stopped
    );
    // The other independent VP shares its processor with j1's VP 0: it
    // waits for its slot.
    let other = now
        .iter()
        .find(|v| v.0 == "j2" && v.1 != gone_host)
        .expect("j2's other VP");
    assert!(
        s.stopped.get(&other.2).copied().unwrap_or(0) > 0,
        "map {map}"
    );
    std::fs::write(&stop_a, "").expect("stop");
    std::fs::write(&stop_i, "").expect("stop");
    done(a, "j1");
    done(i, "j2");
}

#[test]
fn a_new_table_takes_effect_at_the_next_boundary_on_both_hosts() {
    let _one = serial();
    let vm = Vm::start_config(2, "[daemon]\nquantum_ms = 100\n");
    let (stop_a, stop_b) = (vm.dir.path().join("a"), vm.dir.path().join("b"));
    let a = spin(&vm, 2, &stop_a, false);
    assert!(wait_until(Duration::from_secs(10), || vps(&vm).len() == 2));
    // Mid-round, a second job: a new table for both hosts.
    std::thread::sleep(Duration::from_millis(250));
    let b = spin(&vm, 2, &stop_b, false);
    assert!(wait_until(Duration::from_secs(10), || vps(&vm).len() == 4));
    let installs = || {
        let stats = vm.json(&["stats"]);
        let per_host: Vec<Vec<(u64, u64, u64)>> = stats["hosts"]
            .as_array()
            .map(|hs| {
                hs.iter()
                    .filter(|h| h["host"] != "all")
                    .map(|h| serde_json::from_value(h["installed"].clone()).unwrap_or_default())
                    .collect()
            })
            .unwrap_or_default();
        per_host
    };
    assert!(wait_until(Duration::from_secs(5), || {
        let i = installs();
        i.len() == 2
            && i.iter().all(|h| !h.is_empty())
            && i[0].last().map(|x| x.0) == i[1].last().map(|x| x.0)
    }));
    let i = installs();
    let (h0, h1) = (
        i[0].last().copied().expect("h0"),
        i[1].last().copied().expect("h1"),
    );
    // The same table, from the same boundary, on both hosts...
    assert_eq!((h0.0, h0.1), (h1.0, h1.1), "{i:?}");
    // ...applied at it, never before. (How late, on a busy machine, is a
    // figure: the gang bench and `mig stats` report the lateness.)
    for (_, from, applied) in [h0, h1] {
        assert!(applied >= from, "applied {} ns early", from - applied);
    }
    std::fs::write(&stop_a, "").expect("stop");
    std::fs::write(&stop_b, "").expect("stop");
    done(a, "j1");
    done(b, "j2");
}

#[test]
fn a_stencil_sliced_with_a_competitor_stops_many_times_and_still_gets_the_serial_answer() {
    // Stopped VPs are not dead ones: halos sent to a VP outside its slot
    // wait in its socket, and nothing times out.
    let _one = serial();
    let vm = Vm::start_config(2, "[daemon]\nquantum_ms = 20\n");
    let stop = vm.dir.path().join("stop");
    let competitor = spin(&vm, 2, &stop, false);
    assert!(wait_until(Duration::from_secs(10), || vps(&vm).len() == 2));
    let heat = vm.start_job(
        2,
        &bin("heat"),
        &["--rows", "32", "--cols", "32", "--iters", "3000"],
    );
    let out = heat.wait_with_output().expect("heat");
    let lines = job_lines(&out);
    std::fs::write(&stop, "").expect("stop");
    done(competitor, "competitor");
    assert!(
        out.status.success()
            && lines
                .iter()
                .any(|l| l.contains("identical to the serial run: ok")),
        "{lines:?}"
    );
    let stats = vm.json(&["stats"]);
    assert!(
        stats["hosts"][0]["switches"].as_u64().unwrap_or(0) > 10,
        "heat was never sliced: {stats}"
    );
}

#[test]
fn a_vps_children_that_left_its_process_group_are_sliced_with_it() {
    // Two jobs of one VP each on one host of one processor: two slots. Each
    // VP starts a busy grandchild in a session of its own (setsid, double
    // fork); it must be stopped in the other job's slot like its parent.
    let _one = serial();
    let vm = Vm::start_config(1, "[daemon]\nquantum_ms = 50\n");
    let escaping = "(setsid sh -c 'while :; do :; done' &); while :; do :; done";
    for _ in 0..2 {
        vm.mig_ok(&["spawn", "--", "/bin/sh", "-c", escaping]);
    }
    let grandchildren = |job: &str| -> Vec<u32> {
        let vp: Vec<u32> = vps(&vm)
            .into_iter()
            .filter(|(j, _, _)| j == job)
            .map(|(_, _, p)| p)
            .collect();
        vm.job_processes(job, "h0")
            .into_iter()
            .filter(|p| !vp.contains(p))
            .collect()
    };
    assert!(
        wait_until(Duration::from_secs(10), || ["j1", "j2"]
            .iter()
            .all(|j| !grandchildren(j).is_empty())),
        "no grandchildren: {:?}",
        vps(&vm)
    );
    let watched: Vec<u32> = ["j1", "j2"].iter().flat_map(|j| grandchildren(j)).collect();
    // Each is stopped again and again, with its parent, in the other job's
    // slot (about half the time on a quiet machine; less on a crowded one,
    // whose switches run late: what counts is that it is sliced at all).
    // One that escaped the slicing would never be seen stopped.
    let mut stopped = vec![0u32; watched.len()];
    let mut samples = 0u32;
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(30) && stopped.iter().any(|&n| n < 5) {
        for (i, &p) in watched.iter().enumerate() {
            if proc_stat(p).is_some_and(|(s, _)| s == 'T') {
                stopped[i] += 1;
            }
        }
        samples += 1;
        std::thread::sleep(Duration::from_millis(7));
    }
    for (i, &p) in watched.iter().enumerate() {
        assert!(
            stopped[i] >= 5,
            "grandchild {p} stopped in {} of {samples} samples: it runs outside its slot",
            stopped[i]
        );
    }
    vm.mig_ok(&["kill", "j1"]);
    vm.mig_ok(&["kill", "j2"]);
}

#[test]
fn stats_plot_draws_which_job_ran_in_each_slot_and_how_late_each_switch_was() {
    let vm = Vm::start(1);
    let svg = vm.dir.path().join("slots.svg");
    let path = svg.to_str().expect("utf-8 path");
    // One slot: nothing switches, nothing to draw.
    let out = vm.mig(&["stats", "--plot", path]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to draw"));
    // Two jobs on one processor: two slots, switching every 100 ms.
    for _ in 0..2 {
        vm.mig_ok(&["spawn", "--", "/bin/sleep", "30"]);
    }
    assert!(
        wait_until(Duration::from_secs(20), || {
            vm.mig(&["stats", "--plot", path]).status.success()
                && std::fs::read_to_string(&svg)
                    .is_ok_and(|s| s.contains(">j1<") && s.contains(">j2<"))
        }),
        "{}",
        std::fs::read_to_string(&svg).unwrap_or_default()
    );
    let text = std::fs::read_to_string(&svg).expect("svg");
    assert!(text.starts_with("<svg") && text.trim_end().ends_with("</svg>"));
    assert!(text.contains(">h0<"), "a row for the host");
    assert!(text.contains("ms late"), "each switch's lateness");
    for j in ["j1", "j2"] {
        vm.mig_ok(&["kill", j]);
    }
}
