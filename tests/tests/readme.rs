//! The README's ten-minute tour, run as a newcomer types it: every block
//! that follows a `<!-- tour -->` line in README.md, in order, in one
//! bash (`set -euo pipefail`: a command that fails fails the test, with
//! all that the shell printed and the daemons' logs). The README's own
//! build step is the test's: the tour runs with the binaries this test
//! run built (`bin` is their directory), a home and a runtime directory
//! of its own (so `mig up`'s machine and `~/mig-pvm` are private), and
//! PVM's examples installed (as root) when missing.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use mig_tests::{command, deadline, debian_package, pvm_library, tied};

/// The tour's blocks: the body of each fenced block that follows a
/// `<!-- tour -->` line.
fn tour_blocks(readme: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut lines = readme.lines();
    while let Some(l) = lines.next() {
        if l.trim() != "<!-- tour -->" {
            continue;
        }
        let fence = lines.next().unwrap_or_default();
        assert!(
            fence.starts_with("```"),
            "README.md: a `<!-- tour -->` line must be followed by a code block, not {fence:?}"
        );
        let body: Vec<&str> = lines
            .by_ref()
            .take_while(|l| !l.starts_with("```"))
            .collect();
        blocks.push(body.join("\n"));
    }
    blocks
}

/// Halts the tour's machine, however the test ends.
struct Halt(PathBuf);

impl Drop for Halt {
    fn drop(&mut self) {
        let _ = command("mig")
            .arg("halt")
            .env("MIG_DAEMON", self.0.join("mig/h0/control.sock"))
            .output();
    }
}

/// Every `migd.log` of the tour's machine.
fn logs(run: &Path) -> String {
    let mut all = String::new();
    for e in std::fs::read_dir(run.join("mig"))
        .into_iter()
        .flatten()
        .flatten()
    {
        if let Ok(log) = std::fs::read_to_string(e.path().join("migd.log")) {
            all.push_str(&format!("--- {} ---\n{log}\n", e.path().display()));
        }
    }
    all
}

#[test]
fn every_command_of_the_readmes_tour_runs() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .expect("README.md");
    let blocks = tour_blocks(&readme);
    assert!(blocks.len() >= 5, "the tour's blocks: {blocks:?}");
    let tour = blocks.join("\n");
    for shown in [
        "mig up",
        "mig spawn",
        "mig migrate",
        "mig owner reclaim",
        "hello.pvm",
        "mig halt",
    ] {
        assert!(tour.contains(shown), "the tour shows {shown}");
    }
    debian_package("pvm-examples", || Path::new("/usr/bin/hello.pvm").is_file());
    let lib = pvm_library();
    let dir = lib.parent().expect("the binaries' directory").to_path_buf();
    let home = tempfile::tempdir().expect("tempdir");
    let run = home.path().join("run");
    std::fs::create_dir(&run).expect("runtime dir");
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let _halt = Halt(run.clone());
    let script = format!(
        "set -euxo pipefail\nbin={}\nexport PATH=$bin:$PATH\n{tour}\n",
        dir.display()
    );
    let out = home.path().join("out");
    let file = std::fs::File::create(&out).expect("output file");
    let mut shell = tied(std::process::Command::new("bash"));
    shell
        .arg("-c")
        .arg(&script)
        .current_dir(home.path())
        .env("HOME", home.path())
        .env("XDG_RUNTIME_DIR", &run)
        .env_remove("MIG_DAEMON")
        .env_remove("LD_LIBRARY_PATH")
        .stdin(Stdio::null())
        .stdout(file.try_clone().expect("dup"))
        .stderr(file);
    let mut child = shell.spawn().expect("bash");
    let limit = Instant::now() + deadline();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break Some(s);
        }
        if Instant::now() > limit {
            // Its process group: the shell and what it started.
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let said = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(
        status.is_some_and(|s| s.success()),
        "the tour {}:\n{said}\n{}",
        if status.is_none() {
            "did not end in time"
        } else {
            "failed"
        },
        logs(&run)
    );
    // It did what it says: the right answers, a VP moved, PVM's greeting,
    // the machine halted.
    for seen in [
        "vps 8: ok",
        "identical to the serial run: ok",
        "moved to h3",
        "hello, world from",
        "halting 4 hosts",
    ] {
        assert!(said.contains(seen), "{seen:?} in\n{said}");
    }
    assert!(!run.join("mig/h0/control.sock").exists(), "halted");
}
