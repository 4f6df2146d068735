//! `migd` start-up: bad flags and config values are clear errors.

use std::process::Command;

fn migd(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_migd"))
        .args(args)
        .output()
        .expect("run migd")
}

#[test]
fn bad_values_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().to_str().unwrap();
    for (args, says) in [
        (vec!["--processors", "0"], "processors must be between"),
        (vec!["--capacity=-1"], "capacity must be a positive"),
        (vec!["--name", "a/b"], "host name"),
    ] {
        let mut full = vec!["--state-dir", state];
        full.extend(args);
        let out = migd(&full);
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{err:?} lacks {says:?}");
    }
    let conf = dir.path().join("migd.toml");
    std::fs::write(&conf, "[daemon]\nheartbeat_ms = 5\n").unwrap();
    let out = migd(&["--state-dir", state, "--config", conf.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("heartbeat_ms must be between"));
    std::fs::write(&conf, "[daemon]\nprocessors = \"many\"\n").unwrap();
    let out = migd(&["--state-dir", state, "--config", conf.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("migd.toml"));
}
