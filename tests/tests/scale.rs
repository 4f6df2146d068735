//! A department's worth of hosts on one machine: 64 daemons whose master is
//! SIGKILLed three times in a row (each new master in turn) keep every
//! host, every VP and the answer of a job spread over them, and a daemon
//! joining a worker while a master is being elected gets in.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use mig_tests::{bin, job_succeeds, wait_until, Vm};
use nix::sys::signal::Signal;

/// Hosts of the machine.
const HOSTS: usize = 64;
/// VPs of the job.
const VPS: usize = 40;
/// How long a failover may take until every host has attached to the new
/// master: generous (a loaded machine), and far below the 12 s after
/// which a worker used to give up and stop.
const BACK_WITHIN: Duration = Duration::from_secs(60);

/// The job's VPs as `mig ps` shows them through daemon `i`: Tid -> (host,
/// pid, state).
fn vps(vm: &Vm, i: usize) -> Option<BTreeMap<String, (String, u64, String)>> {
    let out = vm.mig_at(i, &["ps", "--json"]);
    if !out.status.success() {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    Some(
        v.as_array()?
            .iter()
            .filter_map(|v| {
                Some((
                    v["tid"].as_str()?.to_string(),
                    (
                        v["host"].as_str().unwrap_or("").to_string(),
                        v["pid"].as_u64().unwrap_or(0),
                        v["state"].as_str().unwrap_or("").to_string(),
                    ),
                ))
            })
            .collect(),
    )
}

#[test]
fn sixty_four_hosts_keep_every_host_and_vp_through_three_kills_of_the_master_in_a_row() {
    let began = Instant::now();
    let mut vm = Vm::start(HOSTS);
    let started = began.elapsed();
    // Asked through the last host, which never votes.
    let steady = HOSTS - 1;
    let voters_whole = |vm: &Vm, killed: &[u32]| {
        vm.hosts_at(steady).is_some_and(|h| {
            h.iter()
                .filter(|h| {
                    h["voter"] == true
                        && h["alive"] == true
                        && !killed.iter().any(|&k| h["pid"] == k)
                })
                .count()
                == 5
        })
    };
    assert!(
        wait_until(Duration::from_secs(30), || voters_whole(&vm, &[])),
        "{:?}",
        vm.hosts_at(steady)
    );
    // The hosts that vote, and those that replace them (spares are taken
    // in the order of their names), run none of the job: a master's VPs
    // die with it, and the job is to keep all of its own.
    for h in (0..5).chain(10..15) {
        vm.mig_ok(&["owner", "reclaim", "--host", &format!("h{h}")]);
    }
    let stop = vm.dir.path().join("stop");
    let job = mig_tests::command("mig")
        .env("MIG_DAEMON", vm.sock_of(steady))
        .args(["spawn", "-n", &VPS.to_string(), "--wait", "--"])
        .arg(bin("testvp"))
        .arg("relay")
        .arg(&stop)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("mig spawn");
    let mut before = None;
    assert!(
        wait_until(Duration::from_secs(60), || {
            before = vps(&vm, steady);
            before.as_ref().is_some_and(|v| {
                v.len() == VPS && v.values().all(|(_, pid, s)| s == "running" && *pid > 0)
            })
        }),
        "the job did not start: {before:?}\n{}",
        vm.log(0)
    );
    let before = before.expect("the job's VPs");
    let mut killed: Vec<u32> = Vec::new();
    let mut took = Vec::new();
    for k in 0..3 {
        assert!(
            wait_until(Duration::from_secs(30), || voters_whole(&vm, &killed)),
            "kill {k}: the voters are not whole again: {:?}",
            vm.hosts_at(steady)
        );
        let m = vm.master_seen_by(steady).expect("a master");
        assert!(
            !before.values().any(|(h, _, _)| *h == format!("h{m}")),
            "kill {k}: the master h{m} runs VPs of the job (the test means to keep them all)"
        );
        killed.push(vm.pid(m));
        vm.signal(m, Signal::SIGKILL);
        let t = Instant::now();
        vm.wait(m, Duration::from_secs(5));
        // A new daemon joins a worker at once: during the election that
        // worker has no master, and the newcomer tries again until it has.
        let join = std::fs::read_to_string(vm.dir.path().join(format!("h{steady}/addr")))
            .expect("address file");
        let (c, _) = vm.daemon(HOSTS + k, Some(join.trim()), &[]);
        vm.daemons.push(Some(c));
        // Every live daemon follows the new master: it says so in its log,
        // and the master lists it alive (a host that had not attached in
        // time would have been given up, and fenced when it came).
        let mut last = String::new();
        let back = wait_until(BACK_WITHIN, || {
            let Some(new) = vm.master_seen_by(steady).filter(|&n| n != m) else {
                return false;
            };
            let name = format!("h{new}");
            let followed = format!("following the new master {name} (term");
            let live: Vec<usize> = (0..vm.daemons.len())
                .filter(|&i| vm.daemons[i].is_some())
                .collect();
            let behind: Vec<usize> = live
                .iter()
                .copied()
                .filter(|&i| i != new && i < HOSTS + k && !vm.log(i).contains(&followed))
                .collect();
            let hosts = vm.hosts_at(steady).unwrap_or_default();
            let alive = |i: usize| {
                hosts
                    .iter()
                    .any(|h| h["name"] == format!("h{i}").as_str() && h["alive"] == true)
            };
            let missing: Vec<usize> = live.iter().copied().filter(|&i| !alive(i)).collect();
            last =
                format!("new master {name}; not following it: {behind:?}; not alive: {missing:?}");
            behind.is_empty() && missing.is_empty()
        });
        assert!(back, "kill {k}: {last}\n{}", vm.log(steady));
        took.push(t.elapsed());
        // Not one VP of the job moved, restarted or ended.
        let now = vps(&vm, steady).expect("mig ps");
        assert_eq!(now, before, "kill {k}: the job's VPs changed");
    }
    std::fs::write(&stop, "").expect("stop file");
    let lines = job_succeeds(job, &vm.log(steady));
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&format!("of {VPS} VPs, every token once and in order: ok"))),
        "{lines:?}"
    );
    for i in 0..vm.daemons.len() {
        let log = vm.log(i);
        for bad in ["fenced by the master", "no master answered"] {
            assert!(!log.contains(bad), "h{i}: {bad}\n{log}");
        }
    }
    eprintln!(
        "{HOSTS} daemons up in {:.1} s; every host following the new master after each kill: \
         {took:?}; the whole test {:.1} s",
        started.as_secs_f64(),
        began.elapsed().as_secs_f64()
    );
}
