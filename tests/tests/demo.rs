//! The quick start's `mig demo` keeps working: the owner of h1 comes back,
//! h1's VPs move off while the job runs, and the answer is right; with
//! `--json` the story goes to stderr and what it saw to stdout as JSON.

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
            "--json",
        ])
        .output()
        .expect("mig demo");
    let story = String::from_utf8_lossy(&out.stderr);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{story}");
    assert!(story.contains("h1's owner is back"), "{story}");
    assert!(story.contains("moved to other hosts"), "{story}");
    assert!(story.contains("answer checked: OK"), "{story}");
    let v: serde_json::Value = serde_json::from_str(text.trim()).expect("one JSON object");
    assert_eq!(v["hosts"], 3);
    assert_eq!(v["vps"], 6);
    assert_eq!(v["answer_ok"], true);
    let pi = v["pi"].as_f64().expect("pi");
    assert!((pi - std::f64::consts::PI).abs() < 1e-3, "{v}");
    let on_h1 = v["owner"]["vps_on_h1"].as_u64().expect("VPs on h1");
    assert!(on_h1 > 0, "{v}");
    assert!(
        v["owner"]["moved_ms"].as_f64().is_some_and(|ms| ms > 0.0),
        "{v}"
    );
    let placed: u64 = v["vps_per_host"]
        .as_object()
        .expect("per host")
        .values()
        .filter_map(serde_json::Value::as_u64)
        .sum();
    assert_eq!(placed, 6, "{v}");
}
