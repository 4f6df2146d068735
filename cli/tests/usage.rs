//! What `--help` and usage errors say is true: defaults are values the
//! flag takes, and a flag given through the environment is not shown as
//! required.

use std::process::Command;

fn mig(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_mig"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run mig")
}

#[test]
fn a_flag_with_named_values_shows_one_of_them_as_its_default() {
    let out = mig(&["spawn", "--help"], &[]);
    let help = String::from_utf8_lossy(&out.stdout);
    let io = help
        .split("--io <CLASS>")
        .nth(1)
        .and_then(|rest| rest.split("\n      --").next())
        .expect("--io in mig spawn --help");
    let default = io
        .split("[default: ")
        .nth(1)
        .and_then(|d| d.split(']').next())
        .expect("a default");
    let values = io
        .split("[possible values: ")
        .nth(1)
        .and_then(|v| v.split(']').next())
        .expect("its values");
    assert!(
        values.split(", ").any(|v| v == default),
        "default {default:?} is not among {values:?}"
    );
    // And it is taken.
    let out = mig(&["spawn", "--io", default, "--help"], &[]);
    assert!(out.status.success());
}

#[test]
fn mig_daemon_in_the_environment_does_not_make_daemon_look_required() {
    let out = mig(&["spawn"], &[("MIG_DAEMON", "/nonexistent/control.sock")]);
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("Usage: mig spawn"), "{said}");
    assert!(!said.contains("--daemon"), "{said}");
}
