//! Job checkpoints' images on real daemons, where hosts fail: a state
//! directory that fills up (a small tmpfs) fails checkpoints and moves with
//! a clear error, never the job, and leaves no file behind; a host keeping
//! a copy of an image that dies has another copy made at once, so that the
//! second death right after the first loses nothing; a large image
//! checkpointed while a job runs beside it never costs the master its
//! place.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use mig_tests::{bin, job_succeeds, wait_until, Vm};

fn running(vm: &Vm) -> usize {
    vm.json(&["ps"])
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|v| v["state"] == "running" && v["movable"] == true)
                .count()
        })
        .unwrap_or(0)
}

/// (Tid, host, pid) of each VP, as `mig ps --json` shows them.
fn vps(vm: &Vm) -> Vec<(String, String, u64)> {
    vm.json(&["ps"])
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| {
            (
                v["tid"].as_str().unwrap_or("").to_string(),
                v["host"].as_str().unwrap_or("").to_string(),
                v["pid"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The files under `dir`, every level down.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// The images, or parts of them, under host `h`'s state directory: a
/// VP's files, and anything kept of job checkpoints.
fn image_files(vm: &Vm, h: usize) -> Vec<PathBuf> {
    let dir = vm.dir.path().join(format!("h{h}"));
    files(&dir)
        .into_iter()
        .filter(|p| {
            let name = p
                .file_name()
                .map_or(String::new(), |n| n.to_string_lossy().into());
            migd::state_dir::is_vp_file(&name) || p.starts_with(dir.join("ckpt"))
        })
        .collect()
}

/// Is host `h`'s state directory full, as `mig hosts --json` says?
fn full(vm: &Vm, h: &str) -> bool {
    vm.json(&["hosts"])
        .as_array()
        .into_iter()
        .flatten()
        .any(|x| x["name"] == h && x["state_full"] == true)
}

#[test]
fn a_full_state_directory_fails_checkpoints_and_moves_not_the_job_and_is_left_clean() {
    // h1 keeps its state on 30 MB; the job's two VPs hold 24 MiB each.
    let vm = Vm::start_small_disks(2, "[daemon]\ncheckpoint_interval_s = 0\n", &[(1, "30m")]);
    let stop = vm.dir.path().join("stop");
    let job = vm.start_job(
        2,
        &bin("testvp"),
        &[Path::new("ballast"), Path::new("24"), &stop],
    );
    assert!(
        wait_until(Duration::from_secs(60), || running(&vm) == 2
            && vm.output("j1").matches("ballast ready").count() == 2),
        "{}",
        vm.log(0)
    );
    let before = vps(&vm);
    let on = |h: &str| {
        before
            .iter()
            .find(|v| v.1 == h)
            .map(|v| v.0.clone())
            .unwrap_or_else(|| panic!("no VP on {h}: {before:?}"))
    };
    let (vp0, vp1) = (on("h0"), on("h1"));
    let h1 = vm.dir.path().join("h1");
    let clean = |vm: &Vm| {
        wait_until(Duration::from_secs(20), || {
            image_files(vm, 1).is_empty() && image_files(vm, 0).is_empty()
        })
    };
    let left = |vm: &Vm| format!("{:?} {:?}", image_files(vm, 0), image_files(vm, 1));

    // A checkpoint: h1 keeps its own VP's image, but has no room for the
    // copy of h0's, and no other host can keep it. The checkpoint fails
    // saying so; the job goes on; nothing of it is left on either host.
    let out = vm.mig(&["checkpoint", "j1"]);
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("No space left on device")
            && said.contains("goes on as it was")
            && said.contains("state directory of h1 is full"),
        "{said}\n{}",
        vm.log(0)
    );
    assert!(full(&vm, "h1"), "{}", vm.log(1));
    assert!(clean(&vm), "{}", left(&vm));
    assert_eq!(vps(&vm), before, "a VP moved or was started again");

    // Less room still: the VP on h1 cannot write its own image (libmig's
    // write fails; the VP says why and goes on). (Or the round fails
    // before it tries: h0's image, written first, has no host to keep its
    // copy, h1 being full.)
    std::fs::write(h1.join("filler"), vec![0u8; 18 << 20]).expect("filler");
    let out = vm.mig(&["checkpoint", "j1"]);
    let said = text(&out);
    let own_write = said.contains("No space left on device");
    assert!(
        !out.status.success() && (own_write || said.contains("the state directory of h1 is full")),
        "{said}\n{}",
        vm.log(0)
    );
    if own_write {
        assert!(
            wait_until(Duration::from_secs(10), || vm.log(1).lines().any(|l| l
                .contains(&format!("VP {vp1}: its image of checkpoint"))
                && l.contains("No space left on device"))),
            "{}",
            vm.log(1)
        );
    }
    assert!(clean(&vm), "{}", left(&vm));

    // A move onto h1: it cannot take the image in; the VP runs on where it
    // was, and the answer says why.
    let out = vm.mig(&["migrate", &vp0, "--to", "h1"]);
    let said = text(&out);
    assert!(
        !out.status.success()
            && said.contains(&format!("VP {vp0} did not move to h1"))
            && said.contains("No space left on device")
            && said.contains("still on h0, running as before"),
        "{said}\n{}\n{}",
        vm.log(0),
        vm.log(1)
    );
    assert!(clean(&vm), "{}", left(&vm));

    // A move off h1: its VP cannot write the image it would move with; it
    // runs on where it was.
    let out = vm.mig(&["migrate", &vp1, "--to", "h0"]);
    let said = text(&out);
    assert!(
        !out.status.success()
            && said.contains(&format!("VP {vp1} did not move to h0"))
            && said.contains("could not write its image on h1")
            && said.contains("No space left on device"),
        "{said}\n{}\n{}",
        vm.log(0),
        vm.log(1)
    );
    assert!(clean(&vm), "{}", left(&vm));
    let mut now: Vec<(String, String)> = vps(&vm).into_iter().map(|v| (v.0, v.1)).collect();
    now.sort();
    let mut was = vec![
        (vp0.clone(), "h0".to_string()),
        (vp1.clone(), "h1".to_string()),
    ];
    was.sort();
    assert_eq!(now, was, "{}", vm.log(0));

    // Room made: h1 is no longer full. Every daemon still serves, and the
    // job finishes with every byte of its state right.
    std::fs::remove_file(h1.join("filler")).expect("filler");
    assert!(
        wait_until(Duration::from_secs(20), || !full(&vm, "h1")),
        "{}",
        vm.log(1)
    );
    std::fs::write(&stop, "").expect("stop");
    let lines = job_succeeds(job, &vm.log(0));
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("ballast intact: 25165824 bytes"))
            .count(),
        2,
        "{lines:?}"
    );
    assert!(clean(&vm), "{}", left(&vm));
}

/// Where each image of generation `g` of job j1 is kept: (image file name,
/// hosts).
fn holders(vm: &Vm, hosts: usize, g: u64) -> Vec<(String, Vec<String>)> {
    let mut out: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for h in 0..hosts {
        let dir = vm.dir.path().join(format!("h{h}/ckpt/j1/g{g}"));
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".img") {
                out.entry(name).or_default().push(format!("h{h}"));
            }
        }
    }
    out.into_iter().collect()
}

/// The generation a `mig checkpoint` answer names.
fn generation(said: &str) -> u64 {
    said.split("generation ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no generation in {said:?}"))
}

fn host_index(h: &str) -> usize {
    h.trim_start_matches('h').parse().expect("a host hK")
}

#[test]
fn a_second_death_right_after_the_first_loses_nothing() {
    // Numbered messages stream from VP 0 to VP 1, which checks that none
    // comes out of order or from a run its job went back on.
    let mut vm = Vm::start_config(4, "[daemon]\ncheckpoint_interval_s = 0\n");
    let stop = vm.dir.path().join("stop");
    let job = vm.start_job(2, &bin("testvp"), &[Path::new("sequence"), &stop]);
    assert!(wait_until(Duration::from_secs(20), || running(&vm) == 2));
    let out = vm.mig_ok(&["checkpoint", "j1"]);
    let said = text(&out);
    assert!(said.contains("2 copies each"), "{said}");
    let g = generation(&said);
    // Every image on two hosts.
    let kept = holders(&vm, 4, g);
    assert!(
        kept.len() == 2 && kept.iter().all(|(_, h)| h.len() == 2),
        "{kept:?}"
    );
    // An image of a VP on a worker (A); its other copy is on B.
    let on: Vec<(String, String, u64)> = vps(&vm);
    let (image, a, b) = kept
        .iter()
        .find_map(|(name, hosts)| {
            let tid = name.trim_end_matches(".img");
            let a = on.iter().find(|v| v.0 == tid)?.1.clone();
            let b = hosts.iter().find(|h| **h != a)?.clone();
            (a != "h0" && b != "h0").then(|| (name.clone(), a, b))
        })
        .unwrap_or_else(|| panic!("no image of a worker's VP copied to a worker: {kept:?} {on:?}"));
    let tid = image.trim_end_matches(".img").to_string();
    // B dies: a third copy is made at once from A's, and if B voted, a
    // host that did not takes its place. (Until that change is done, the
    // old voters must keep a majority: a second voter lost before then
    // stops the master's state, as it would any majority-replicated one.)
    let b_voted = vm
        .json(&["hosts"])
        .as_array()
        .into_iter()
        .flatten()
        .any(|h| h["name"] == b.as_str() && h["voter"] == true);
    let changes = |vm: &Vm| vm.all_logs().matches("voters changed:").count();
    let changed = changes(&vm);
    vm.signal(host_index(&b), nix::sys::signal::Signal::SIGKILL);
    let copied = format!("VP {tid}'s image of generation {g} of job j1: a new copy on");
    assert!(
        wait_until(Duration::from_secs(30), || vm.all_logs().contains(&copied)),
        "{}",
        vm.all_logs()
    );
    let c = holders(&vm, 4, g)
        .into_iter()
        .find(|(n, _)| *n == image)
        .and_then(|(_, hosts)| hosts.into_iter().find(|h| *h != a && *h != b))
        .expect("the new copy's host");
    if b_voted {
        assert!(
            wait_until(Duration::from_secs(30), || changes(&vm) > changed),
            "{}",
            vm.all_logs()
        );
    }
    // Then A dies, with the VP: the job goes back to the checkpoint, the
    // image coming from C.
    let restarts = |vm: &Vm| {
        vm.all_logs()
            .matches(&format!(
                "restarting job j1 from its checkpoint (generation {g})"
            ))
            .count()
    };
    let before = restarts(&vm);
    vm.signal(host_index(&a), nix::sys::signal::Signal::SIGKILL);
    assert!(
        wait_until(Duration::from_secs(30), || restarts(&vm) > before
            && running(&vm) == 2),
        "{}",
        vm.all_logs()
    );
    assert!(
        vm.json(&["ps"])
            .as_array()
            .into_iter()
            .flatten()
            .all(|v| v["host"] != a.as_str() && v["host"] != b.as_str()),
        "{}",
        vm.all_logs()
    );
    let _ = c;
    std::fs::write(&stop, "").expect("stop");
    let lines = job_succeeds(job, &vm.all_logs());
    let last: serde_json::Value = lines
        .iter()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no summary: {lines:?}"));
    assert_eq!(last["out_of_order"], 0, "{last}");
    assert_eq!(last["stale"], 0, "{last}");
    assert!(last["received"].as_u64().unwrap_or(0) > 0, "{last}");
    assert_eq!(
        last["lives"].as_u64(),
        Some(1 + restarts(&vm) as u64),
        "{last}\n{}",
        vm.all_logs()
    );
}

#[test]
fn a_256_mib_image_checkpointed_beside_a_running_job_costs_no_election_and_no_fence() {
    let vm = Vm::start_config(4, "[daemon]\ncheckpoint_interval_s = 0\n");
    vm.mig_ok(&[
        "spawn",
        "--",
        &bin("testvp").display().to_string(),
        "hold",
        "256",
    ]);
    assert!(wait_until(Duration::from_secs(60), || running(&vm) == 1
        && vm.output("j1").contains("ready")));
    let heat = vm.start_job(
        3,
        &bin("heat"),
        &["--rows", "48", "--cols", "48", "--iters", "40000"],
    );
    for _ in 0..3 {
        let out = vm.mig_ok(&["checkpoint", "j1"]);
        assert!(text(&out).contains("268435"), "{}", text(&out));
    }
    let lines = job_succeeds(heat, &vm.log(0));
    assert!(
        lines
            .iter()
            .any(|l| l.contains("identical to the serial run: ok")),
        "{lines:?}"
    );
    // One master throughout, and no host given up: nobody was elected
    // after the first, stepped down or was fenced.
    for i in 0..4 {
        let log = vm.log(i);
        for bad in [
            "elected master",
            "stepping down",
            "fenced by the master",
            "left the pool",
            "the master was busy",
        ] {
            assert!(!log.contains(bad), "h{i}: {bad}\n{log}");
        }
    }
    vm.mig_ok(&["kill", "j1"]);
}
