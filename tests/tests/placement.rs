//! The placements that choose hosts, on real daemons (`migd --placement
//! bidding|nres|roc`, seeds 002-004): a small job of each class under
//! bidding, N-resource jobs that stay or search their neighbours, and a bag of
//! independent tasks that Rate-of-Change spreads, and spreads again when a
//! host runs dry; bids that travel between the daemons, a silent host left
//! out and forged bids refused.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use mig_tests::{bin, command, job_succeeds, metrics, wait_until, Vm};

/// The CPU-bound tests of this file share 2 cores: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// `mig spawn FLAGS --wait -- testvp spin STOP` in the background.
fn spin(vm: &Vm, flags: &[&str], stop: &Path) -> Child {
    command("mig")
        .env("MIG_DAEMON", vm.sock())
        .arg("spawn")
        .args(flags)
        .args(["--wait", "--"])
        .arg(bin("testvp"))
        .arg("spin")
        .arg(stop)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mig spawn")
}

/// Running VPs of `job`: VP index -> host.
fn running(vm: &Vm, job: &str) -> BTreeMap<u64, String> {
    vm.json(&["ps"])
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|v| v["job"] == job && v["state"] == "running")
                .filter_map(|v| Some((v["vp"].as_u64()?, v["host"].as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// Where `job`'s VPs run once `n` of them do (failing the test after 30 s).
fn placed(vm: &Vm, job: &str, n: usize) -> BTreeMap<u64, String> {
    let mut p = BTreeMap::new();
    assert!(
        wait_until(Duration::from_secs(30), || {
            p = running(vm, job);
            p.len() == n
        }),
        "{job}: {p:?}\n{}",
        vm.log(0)
    );
    p
}

fn on_hosts(placed: &BTreeMap<u64, String>) -> Vec<String> {
    let mut h: Vec<String> = placed.values().cloned().collect();
    h.sort();
    h.dedup();
    h
}

fn hosts_up(vm: &Vm, n: usize) -> bool {
    vm.json(&["hosts"])
        .as_array()
        .is_some_and(|a| a.iter().filter(|h| h["alive"] == true).count() == n)
}

#[test]
fn under_bidding_a_group_spreads_one_vp_a_host_and_a_cluster_shares_one() {
    let _one = serial();
    let vm = Vm::start_with(4, &["--placement", "bidding"]);
    assert!(wait_until(Duration::from_secs(20), || hosts_up(&vm, 4)));
    let stop = vm.dir.path().join("stop");
    // Four VPs on the master's one processor would each take four times
    // as long: over the task threshold, so one goes to each host.
    let group = spin(&vm, &["-n", "4", "--class", "group"], &stop);
    let spread = placed(&vm, "j1", 4);
    assert_eq!(on_hosts(&spread).len(), 4, "{spread:?}");
    // A cluster of three: every host holds one VP, so every bid is the
    // same and it stays where it was asked for, all of it together (the
    // gang scheduler alone would spread it).
    let cluster = spin(&vm, &["-n", "3", "--class", "cluster"], &stop);
    let together = placed(&vm, "j2", 3);
    assert_eq!(on_hosts(&together), vec!["h0".to_string()], "{together:?}");
    // Both were chosen by the bids the daemon they arrived at asked every
    // other host for, and every host bid.
    let log = vm.log(0);
    assert_eq!(
        log.matches("bidding: 3 of 3 hosts bid for").count(),
        2,
        "{log}"
    );
    assert!(log.contains("by the bids at h0, group job"), "{log}");
    assert!(log.contains("by the bids at h0, cluster job"), "{log}");
    std::fs::write(&stop, "").expect("stop");
    for (job, what) in [(group, "group"), (cluster, "cluster")] {
        let lines = job_succeeds(job, what);
        assert!(lines.iter().any(|l| l.contains("spin done")), "{lines:?}");
    }
}

#[test]
fn under_nres_a_job_that_fits_stays_and_the_others_search_the_neighbours_and_theirs() {
    let _one = serial();
    // One neighbour each, round the ring h0 -> h1 -> h2 -> h0: h0 asks h1,
    // which passes the request on to h2.
    let conf = tempfile::tempdir().expect("a directory");
    let file = conf.path().join("migd.toml");
    std::fs::write(&file, "[daemon]\nplacement = \"nres\"\nneighbours = 1\n").expect("config");
    let file = file.display().to_string();
    let mut vm = Vm::start_with(1, &["--config", &file, "--memory-mb", "4000"]);
    for (i, mb) in [(1, "1000"), (2, "2000")] {
        let extra = ["--config", file.as_str(), "--memory-mb", mb];
        let (c, _) = vm.daemon(i, Some(&vm.addr.clone()), &extra);
        vm.daemons.push(Some(c));
    }
    assert!(wait_until(Duration::from_secs(20), || hosts_up(&vm, 3)));
    let stop = vm.dir.path().join("stop");
    // 1500 MB fits h0, idle: a burst of one is within its trigger line, it
    // stays. Then h0's processor is busy: 500 MB and 1500 MB each look
    // for room, and Balance gives each the tightest host that holds it.
    let mut jobs = Vec::new();
    let mut went = Vec::new();
    for (k, mb) in ["1500M", "500M", "1500M"].into_iter().enumerate() {
        jobs.push(spin(&vm, &["--mem", mb], &stop));
        went.extend(placed(&vm, &format!("j{}", k + 1), 1).into_values());
    }
    assert_eq!(went, ["h0", "h1", "h2"], "{}", vm.log(0));
    let log = vm.log(0);
    assert!(
        log.contains("fits here within the trigger line: it stays"),
        "{log}"
    );
    // Asked: h1 only; heard: h1, and h2 through it.
    assert_eq!(log.matches("nres: asking h1 for").count(), 2, "{log}");
    assert_eq!(log.matches("nres: 2 of 2 hosts bid").count(), 2, "{log}");
    assert!(log.contains("nres placement by h0's search"), "{log}");
    // What each host has free and what the VPs there reserve, as the
    // hosts report it every couple of seconds.
    let mut hosts = serde_json::Value::Null;
    assert!(wait_until(Duration::from_secs(20), || {
        hosts = vm.json(&["hosts"]);
        hosts
            .as_array()
            .is_some_and(|a| a.iter().all(|h| h["free_memory_mb"].is_u64()))
    }));
    let reserved: BTreeMap<String, u64> = hosts
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|h| {
                    Some((
                        h["name"].as_str()?.to_string(),
                        h["reserved_memory_mb"].as_u64()?,
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        reserved,
        BTreeMap::from([
            ("h0".to_string(), 1500),
            ("h1".to_string(), 500),
            ("h2".to_string(), 1500)
        ])
    );
    let text = String::from_utf8_lossy(&vm.mig_ok(&["hosts"]).stdout).to_string();
    assert!(text.contains("FREE") && text.contains("IO%"), "{text}");
    std::fs::write(&stop, "").expect("stop");
    for job in jobs {
        job_succeeds(job, "nres job");
    }
}

#[test]
fn under_roc_a_bag_of_tasks_spreads_and_spreads_again_as_a_host_runs_dry() {
    let _one = serial();
    let vm = Vm::start_with(2, &["--placement", "roc"]);
    assert!(wait_until(Duration::from_secs(20), || hosts_up(&vm, 2)));
    let stop = vm.dir.path().join("stop");
    // Six independent tasks start where they were asked for: all on h0.
    let bag = spin(&vm, &["-n", "6", "--independent"], &stop);
    let mut placed = BTreeMap::new();
    assert!(wait_until(Duration::from_secs(30), || {
        placed = running(&vm, "j1");
        placed.len() == 6
    }));
    // h1 is idle, under the critical threshold (a task a processor): it
    // asks for one task, and h0, four over its high threshold of two,
    // sends its oldest. Then h1's processor is busy: it asks no more.
    let count = |p: &BTreeMap<u64, String>, h: &str| p.values().filter(|x| *x == h).count();
    assert!(
        wait_until(Duration::from_secs(60), || {
            placed = running(&vm, "j1");
            placed.len() == 6 && count(&placed, "h1") == 1
        }),
        "{placed:?}\n{}",
        vm.log(0)
    );
    // The request travelled between the daemons: h1 asked (its own
    // decision, from its own load), h0 gave from its own tasks, and the
    // master moved what h0 gave.
    assert!(
        vm.log(1)
            .contains("rate-of-change: load 0.00 a processor, asking h0 for 1 task(s)"),
        "{}",
        vm.log(1)
    );
    assert!(vm.log(0).contains("rate-of-change: giving VP"));
    assert!(vm.log(0).contains("rate-of-change: moving VP"));
    // h1's one ends: its load falls to nothing, it asks again and takes one
    // of h0's five.
    for (vp, h) in &placed {
        if h == "h1" {
            std::fs::write(format!("{}.{vp}", stop.display()), "").expect("stop one");
        }
    }
    assert!(
        wait_until(Duration::from_secs(60), || {
            placed = running(&vm, "j1");
            placed.len() == 5 && count(&placed, "h1") == 1 && count(&placed, "h0") == 4
        }),
        "{placed:?}\n{}",
        vm.log(0)
    );
    std::fs::write(&stop, "").expect("stop");
    let lines = job_succeeds(bag, "bag");
    // Nothing lost: all six ended their work; two of them ran on both hosts.
    let done: Vec<&String> = lines.iter().filter(|l| l.contains("spin done")).collect();
    assert_eq!(done.len(), 6, "{lines:?}");
    let moved = done.iter().filter(|l| l.contains("on 2 hosts")).count();
    assert_eq!(moved, 2, "{lines:?}");
    // Every move was Rate-of-Change's: the gang scheduler leaves a chosen
    // job's started VPs where they are. (On a loaded machine a VP may miss
    // its safe point and a request be made again: counted as begun.)
    let log = vm.log(0);
    let ours = log.matches("rate-of-change: moving VP").count();
    assert!(ours >= 2, "{log}");
    assert_eq!(log.matches("] moving VP").count(), ours, "{log}");
}

#[test]
fn under_roc_an_owner_coming_back_sends_the_tasks_away_and_none_is_lost() {
    let _one = serial();
    let vm = Vm::start_with(2, &["--placement", "roc"]);
    assert!(wait_until(Duration::from_secs(20), || hosts_up(&vm, 2)));
    let stop = vm.dir.path().join("stop");
    let bag = spin(&vm, &["-n", "4", "--independent"], &stop);
    let count = |p: &BTreeMap<u64, String>, h: &str| p.values().filter(|x| *x == h).count();
    let mut placed = BTreeMap::new();
    // Idle h1 takes one (a task a processor keeps it busy).
    assert!(
        wait_until(Duration::from_secs(60), || {
            placed = running(&vm, "j1");
            placed.len() == 4 && count(&placed, "h1") == 1
        }),
        "{placed:?}\n{}",
        vm.log(0)
    );
    // h1's owner comes back: its processor leaves the pool, and with it
    // the job's chosen processors; the gang scheduler moves its VPs home.
    vm.mig_ok(&["owner", "reclaim", "--host", "h1"]);
    assert!(
        wait_until(Duration::from_secs(60), || {
            placed = running(&vm, "j1");
            placed.len() == 4 && count(&placed, "h0") == 4
        }),
        "{placed:?}\n{}",
        vm.log(0)
    );
    std::fs::write(&stop, "").expect("stop");
    let lines = job_succeeds(bag, "bag");
    let done = lines.iter().filter(|l| l.contains("spin done")).count();
    assert_eq!(done, 4, "{lines:?}");
}

#[test]
fn under_bidding_simple_programs_stay_until_too_slow_and_an_idle_host_takes_work() {
    let _one = serial();
    let vm = Vm::start_with(2, &["--placement", "bidding"]);
    assert!(wait_until(Duration::from_secs(20), || hosts_up(&vm, 2)));
    // Four simple programs asked for at h0: each stays while it would run
    // at most 3x slower there than alone; the fourth (4x) goes to h1.
    let stops: Vec<std::path::PathBuf> = (1..=4)
        .map(|k| vm.dir.path().join(format!("stop{k}")))
        .collect();
    let mut jobs = Vec::new();
    let mut went = Vec::new();
    for (k, stop) in stops.iter().enumerate() {
        jobs.push(spin(&vm, &[], stop));
        went.extend(placed(&vm, &format!("j{}", k + 1), 1).into_values());
    }
    assert_eq!(went, ["h0", "h0", "h0", "h1"], "{}", vm.log(0));
    // h1's program ends: h1 holds nothing and takes from h0 while it holds
    // fewer than min(2, 3 / 2) tasks: two of them. (On a loaded machine a
    // VP may miss its safe point and stay: h1, no longer idle, takes no
    // more. What arrived is what is there.)
    std::fs::write(&stops[3], "").expect("stop j4");
    let on = |h: &str| {
        (1..=3)
            .filter(|k| running(&vm, &format!("j{k}")).values().any(|x| x == h))
            .count()
    };
    // Every move begun has ended (arrived, or the VP stayed), at least one
    // arrived, and the programs are where the moves left them.
    let arrived = |log: &str| log.matches("moved from h0 to h1").count();
    assert!(
        wait_until(Duration::from_secs(60), || {
            let log = vm.log(0);
            let n = arrived(&log);
            let ended = n + log.matches(" stays on h0:").count();
            log.matches("] moving VP").count() == ended
                && n >= 1
                && on("h1") == n
                && on("h0") == 3 - n
        }),
        "{}",
        vm.log(0)
    );
    let log = vm.log(0);
    assert_eq!(
        log.matches("bidding: h1 is idle and takes VP").count(),
        2,
        "{log}"
    );
    let taken = arrived(&log);
    for stop in &stops[..3] {
        std::fs::write(stop, "").expect("stop");
    }
    let mut moved = 0;
    for (k, job) in jobs.into_iter().enumerate() {
        let lines = job_succeeds(job, &format!("j{}", k + 1));
        assert!(lines.iter().any(|l| l.contains("spin done")), "{lines:?}");
        moved += lines.iter().filter(|l| l.contains("on 2 hosts")).count();
    }
    // Each move that arrived is a job's VP that ran on both hosts; one
    // that missed its safe point (a crowded machine) was saved from outside
    // and does not know it moved.
    let outside = vm.log(0).matches("saved from outside instead").count();
    assert!(
        moved <= taken && taken <= moved + outside,
        "{moved} jobs say they moved, {taken} moves arrived, {outside} saved from outside"
    );
}

#[test]
fn under_roc_a_host_killed_as_tasks_move_to_it_loses_none_of_them() {
    let _one = serial();
    let mut vm = Vm::start_with(3, &["--placement", "roc"]);
    assert!(wait_until(Duration::from_secs(20), || hosts_up(&vm, 3)));
    let stop = vm.dir.path().join("stop");
    let bag = spin(&vm, &["-n", "6", "--independent"], &stop);
    // The moment Rate-of-Change sends work to h2, h2 dies: its tasks are
    // on their way (short of their safe point, or their image sent).
    assert!(
        wait_until(Duration::from_secs(60), || vm.log(0).lines().any(|l| l
            .contains("rate-of-change: moving VP")
            && l.contains(" to h2,"))),
        "{}",
        vm.log(0)
    );
    vm.signal(2, nix::sys::signal::Signal::SIGKILL);
    let mut placed = BTreeMap::new();
    assert!(
        wait_until(Duration::from_secs(60), || {
            placed = running(&vm, "j1");
            placed.len() == 6 && placed.values().all(|h| h != "h2")
        }),
        "{placed:?}\n{}",
        vm.log(0)
    );
    // Each went through one of the two ways back: recalled mid-move to
    // its source, or, had it arrived, started again (its job says its
    // tasks are independent).
    let log = vm.log(0);
    assert!(
        log.contains("h2 is gone: recalled to h0") || log.contains("restarting VP"),
        "{log}"
    );
    std::fs::write(&stop, "").expect("stop");
    let lines = job_succeeds(bag, "bag");
    let done = lines.iter().filter(|l| l.contains("spin done")).count();
    assert_eq!(done, 6, "{lines:?}\n{}", vm.log(0));
}

#[test]
fn bids_travel_between_daemons_a_silent_host_is_left_out_and_forged_bids_refused() {
    use libmig::msg::{Bid, Bidding, Handshake, PeerMsg};
    use nix::sys::signal::Signal;

    let _one = serial();
    // A long wait for bids, so that forged ones arrive while it is open.
    let conf = tempfile::tempdir().expect("a directory");
    let file = conf.path().join("migd.toml");
    let toml = "[daemon]\nplacement = \"bidding\"\nbid_wait_ms = 4000\nmetrics = \"127.0.0.1:0\"\n";
    std::fs::write(&file, toml).expect("config");
    let mut vm = Vm::start_with(3, &["--config", &file.display().to_string()]);
    assert!(wait_until(Duration::from_secs(20), || hosts_up(&vm, 3)));
    let stop = vm.dir.path().join("stop");
    // h2's daemon stops answering: the spawn at h0 (four VPs on its one
    // processor, over the task threshold: it asks) waits for h2's bid no
    // longer than the wait, and goes to the hosts that bid.
    vm.signal(2, Signal::SIGSTOP);
    let group = spin(&vm, &["-n", "4", "--class", "group"], &stop);
    assert!(
        wait_until(Duration::from_secs(20), || vm
            .log(0)
            .contains("bidding: asking h1 h2 for a spawn")),
        "{}",
        vm.log(0)
    );
    // Meanwhile, forged bids for the open request (1): one from a daemon
    // that holds the key under a name no member has, one under h2's name
    // with a speed that is not a number.
    let key = libmig::auth::ClusterKey::load(&vm.key()).expect("the cluster key");
    let forged = Bid {
        processors: 4096,
        capacity: f64::NAN,
        vps: 0,
        free_memory_mb: None,
        free_io: 1.0,
        etc: 0.0,
    };
    let mut links = Vec::new();
    for name in ["ghost", "h2"] {
        let (mut s, mut seal) = mig_tests::authenticated(&vm.addr, &key);
        let hi = Handshake::Hi { name: name.into() };
        seal.write_frame(&mut s, &PeerMsg::from(hi)).expect("hi");
        let msg = PeerMsg::from(Bidding::Bid {
            id: 1,
            bid: forged,
            forwarded: Vec::new(),
        });
        seal.write_frame(&mut s, &msg).expect("bid");
        links.push(s);
    }
    let placed_on = placed(&vm, "j1", 4);
    vm.signal(2, Signal::SIGCONT);
    assert!(
        !on_hosts(&placed_on).contains(&"h2".to_string()),
        "{placed_on:?}"
    );
    let log = vm.log(0);
    assert!(
        log.contains("bidding: a bid from ghost refused: not a member"),
        "{log}"
    );
    assert!(
        log.contains("bidding: a bid from h2 refused: its capacity is not a number"),
        "{log}"
    );
    assert!(
        log.contains("bidding: 1 of 2 hosts bid for") && log.contains("(no bid in time from h2)"),
        "{log}"
    );
    assert!(log.contains("by the bids at h0, group job"), "{log}");
    // Each daemon counts what it sent: h0 two requests, h1 one bid.
    let sent = |i: usize, kind: &str| {
        let page = metrics::scrape(&metrics::metrics_addr(&vm, i));
        let name = format!("mig_placement_messages_total{{kind=\"{kind}\"}}");
        metrics::value(&page, &name).unwrap_or(0.0)
    };
    assert_eq!((sent(0, "ask"), sent(1, "bid")), (2.0, 1.0));
    std::fs::write(&stop, "").expect("stop");
    let lines = job_succeeds(group, "group");
    assert_eq!(
        lines.iter().filter(|l| l.contains("spin done")).count(),
        4,
        "{lines:?}"
    );
    assert!(hosts_up(&vm, 3));
}
