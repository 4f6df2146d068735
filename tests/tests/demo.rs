//! The quick start's `mig demo` keeps working: the owner of h1 comes back,
//! h1's VPs move off while the job runs, and the answer is right.

#[test]
fn the_demo_moves_vps_off_a_reclaimed_host_and_checks_its_answer() {
    let out = mig_tests::command("mig")
        .args([
            "demo",
            "--hosts",
            "3",
            "--vps",
            "6",
            "--samples",
            "200000000",
        ])
        .output()
        .expect("mig demo");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("h1's owner is back"), "{text}");
    assert!(text.contains("moved to other hosts"), "{text}");
    assert!(text.contains("answer checked: OK"), "{text}");
}
