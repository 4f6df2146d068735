//! The examples run by hand (outside a virtual machine) check themselves,
//! and those that need a virtual machine say so clearly.

use std::process::Command;

#[test]
fn pi_alone_estimates_pi_and_checks_it() {
    let out = Command::new(env!("CARGO_BIN_EXE_pi"))
        .args(["--samples", "200000", "--chunk", "30000"])
        .output()
        .expect("run pi");
    assert!(out.status.success(), "{out:?}");
    let line = String::from_utf8_lossy(&out.stdout);
    assert!(line.contains("chunks 7 vps 1: ok"), "{line}");
    let v: f64 = line.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!((v - std::f64::consts::PI).abs() < 0.05, "{line}");
    let out = Command::new(env!("CARGO_BIN_EXE_pi"))
        .args(["--samples", "zero"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
