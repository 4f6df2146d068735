//! `mig completions` and `mig man`: generated from the command line's own
//! definition, so every subcommand and flag is in them.

use std::process::Command;

fn mig(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_mig"))
        .args(args)
        .output()
        .expect("run mig")
}

#[test]
fn completion_scripts_know_the_subcommands_and_their_flags() {
    for shell in ["bash", "zsh", "fish"] {
        let out = mig(&["completions", shell]);
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8_lossy(&out.stdout);
        for word in ["spawn", "migrate", "jobs", "no-input", "pause-signal"] {
            assert!(script.contains(word), "{shell} script lacks {word}");
        }
    }
    assert!(!mig(&["completions", "nosuchshell"]).status.success());
}

#[test]
fn man_pages_are_written_one_per_subcommand() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().display().to_string();
    let out = mig(&["man", "--dir", &d]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spawn = std::fs::read_to_string(dir.path().join("mig-spawn.1")).expect("mig-spawn.1");
    assert!(spawn.contains(".TH") && spawn.contains("wait"), "{spawn}");
    for page in ["mig.1", "mig-jobs.1", "mig-logs.1", "mig-sim.1"] {
        assert!(dir.path().join(page).is_file(), "{page}");
    }
    // Without --dir: mig.1 on standard output.
    let out = mig(&["man"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains(".TH mig"));
}

#[test]
fn daemon_is_offered_only_where_a_daemon_is_asked() {
    let help = |args: &[&str]| {
        let out = mig(args);
        assert!(out.status.success(), "{args:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for talks in [
        &["ps", "--help"][..],
        &["spawn", "--help"],
        &["owner", "status", "--help"],
        &["token", "create", "--help"],
        &["halt", "--help"],
    ] {
        let h = help(talks);
        assert!(h.contains("--daemon <SOCKET>"), "{talks:?}: {h}");
        assert_eq!(h.matches("MIG_DAEMON").count(), 1, "{talks:?}: {h}");
    }
    for local in [
        &["sim", "--help"][..],
        &["sched", "replay", "--help"],
        &["up", "--help"],
        &["demo", "--help"],
        &["completions", "--help"],
    ] {
        let h = help(local);
        assert!(!h.contains("--daemon"), "{local:?} offers --daemon: {h}");
    }
    // Given where it means nothing, it is refused.
    let out = mig(&["sim", "--daemon", "/nonexistent", "--trace", "x"]);
    assert!(!out.status.success());
}
