//! Real programs moved mid-run: stopped, dumped, killed, restored as a new
//! process with a fresh pipe on stdout; what they print is what a run
//! without a move prints.

mod common;

use std::process::Command;

use common::*;

/// Our heap program's answer without any move.
fn heap_answer(mib: &str, rounds: &str) -> Vec<u8> {
    let out = Command::new(program("heap"))
        .args([mib, rounds])
        .output()
        .expect("run");
    assert!(out.status.success());
    out.stdout
}

#[test]
fn heap_program_moved_once_prints_its_answer() {
    let want = heap_answer("32", "400");
    let mut cmd = Command::new(program("heap"));
    cmd.args(["32", "400"]);
    let r = Running::start(cmd);
    let_run(100);
    let (restored, before) = move_once(r, "heap-once.img");
    let (code, after) = restored.finish();
    assert_eq!(code, 0);
    let mut all = before;
    all.extend(after);
    assert_eq!(
        String::from_utf8_lossy(&all),
        String::from_utf8_lossy(&want)
    );
}
