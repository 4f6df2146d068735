//! The examples run by hand (outside a virtual machine) and check themselves.

use std::process::Command;

#[test]
fn pi_alone_computes_pi() {
    let out = Command::new(env!("CARGO_BIN_EXE_pi"))
        .arg("1000000")
        .output()
        .expect("run pi");
    assert!(out.status.success());
    let line = String::from_utf8_lossy(&out.stdout);
    let v: f64 = line.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert!((v - std::f64::consts::PI).abs() < 1e-9, "{line}");
    let out = Command::new(env!("CARGO_BIN_EXE_pi"))
        .arg("zero")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
