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
    // write fails; the VP says why and goes on).
    std::fs::write(h1.join("filler"), vec![0u8; 18 << 20]).expect("filler");
    let out = vm.mig(&["checkpoint", "j1"]);
    let said = text(&out);
    assert!(
        !out.status.success() && said.contains("No space left on device"),
        "{said}\n{}",
        vm.log(0)
    );
    assert!(
        wait_until(Duration::from_secs(10), || vm.log(1).lines().any(|l| l
            .contains(&format!("VP {vp1}: its image of checkpoint"))
            && l.contains("No space left on device"))),
        "{}",
        vm.log(1)
    );
    assert!(clean(&vm), "{}", left(&vm));

    // A move onto h1: it cannot take the image in; the VP runs on where it
    // was, and the answer says why.
    let out = vm.mig(&["migrate", &vp0, "--to", "h1"]);
    let said = text(&out);
    assert!(
        !out.status.success()
            && said.contains(&format!("VP {vp0} did not move to h1"))
            && said.contains("No space left on device")
            && said.contains("runs on h0"),
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
