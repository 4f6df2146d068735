//! `mig sched` end to end: the real binary on real files.

use std::io::Write;
use std::process::{Command, Output};

fn mig(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mig"))
        .args(args)
        .output()
        .expect("run mig")
}

fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "mig failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON document")
}

fn file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().expect("temp file");
    f.write_all(text.as_bytes()).expect("write");
    f
}

#[test]
fn mtat_prints_the_papers_example_1() {
    let v = json(&mig(&[
        "sched",
        "mtat",
        "--vps",
        "20",
        "--capacities",
        "10,1,4,3",
        "--json",
    ]));
    assert_eq!(
        v,
        serde_json::json!({"t_min": 1.2, "assignment": [12, 1, 4, 3], "processors_used": 4})
    );
}

#[test]
fn compress_prints_figure_4b() {
    let v = json(&mig(&[
        "sched",
        "compress",
        "--vps",
        "9",
        "--capacities",
        "4,2,1",
        "--json",
    ]));
    assert_eq!(
        v,
        serde_json::json!({"t_min": 1.5, "assignment": [6, 3, 0], "processors_used": 2})
    );
}

#[test]
fn several_architectures_take_the_slowest_pool() {
    let v = json(&mig(&[
        "sched",
        "mtat",
        "--vps",
        "x86_64=20,aarch64=3",
        "--capacities",
        "x86_64:10,x86_64:1,aarch64:4",
        "--json",
    ]));
    assert_eq!(v["assignment"], serde_json::json!([19, 1, 3]));
    assert!((v["t_min"].as_f64().unwrap() - 1.9).abs() < 1e-12);
}

#[test]
fn bad_input_is_one_clear_sentence() {
    for (args, says) in [
        (vec!["--vps", "3", "--capacities", "1,0"], "positive finite"),
        (
            vec!["--vps", "3", "--capacities", "1,NaN"],
            "positive finite",
        ),
        (vec!["--vps", "3", "--capacities", "1,x"], "not a number"),
        (
            vec!["--vps", "arm=3", "--capacities", "x86:1"],
            "no processor of architecture",
        ),
        (
            vec!["--vps", "3", "--capacities", "a:1,b:1"],
            "per architecture",
        ),
    ] {
        let mut full = vec!["sched", "mtat"];
        full.extend(args);
        let out = mig(&full);
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{err:?} lacks {says:?}");
    }
}

#[test]
fn replay_prints_the_final_state() {
    let events = file(concat!(
        r#"{"event":"new_processor","id":"h1/0","arch":"x86_64","capacity":2.0}"#,
        "\n",
        r#"{"event":"new_processor","id":"h2/0","arch":"x86_64","capacity":1.0}"#,
        "\n",
        r#"{"event":"submit","job":"j1","vps":{"x86_64":3}}"#,
        "\n",
        r#"{"event":"submit","job":"j2","vps":{"aarch64":1}}"#,
        "\n",
        r#"{"event":"new_vp","job":"j1","arch":"x86_64"}"#,
        "\n",
        r#"{"event":"vp_exit","job":"j1","vp":3}"#,
        "\n",
    ));
    let path = events.path().to_str().unwrap();
    let actions = tempfile::NamedTempFile::new().expect("temp file");
    let actions_path = actions.path().to_str().unwrap();
    let v = json(&mig(&[
        "sched",
        "replay",
        path,
        "--json",
        "--actions-out",
        actions_path,
    ]));
    assert_eq!(v["processors"].as_array().unwrap().len(), 2);
    assert_eq!(v["slots"][0]["h1/0"]["job"], "j1");
    assert_eq!(v["jobs"]["j1"]["vps"]["0"], "x86_64");
    assert_eq!(v["jobs"]["j2"]["waiting"], serde_json::json!([0]));
    assert_eq!(v["events"], 6);
    // One line of actions per event, numbered by its line in the file.
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(actions.path())
        .expect("actions")
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(lines.len(), 6);
    assert_eq!(lines[2]["line"], 3);
    let started = lines
        .iter()
        .flat_map(|l| l["actions"].as_array().cloned().unwrap_or_default())
        .filter(|a| a["action"] == "start")
        .count() as u64;
    assert_eq!(v["action_counts"]["start"], started);
    assert_eq!(v["migrations"], 0);
    for exp in ["exhaustive", "regular"] {
        let out = mig(&["sched", "replay", path, "--expansion", exp, "--no-repack"]);
        assert!(out.status.success());
        assert!(String::from_utf8_lossy(&out.stdout).contains("6 events replayed"));
    }
}

#[test]
fn replay_names_the_bad_line() {
    let events = file(concat!(
        r#"{"event":"new_processor","id":"h1/0","arch":"x86_64","capacity":2.0}"#,
        "\n",
        r#"{"event":"new_processor","id":"h1/0","arch":"x86_64","capacity":2.0}"#,
        "\n",
    ));
    let out = mig(&["sched", "replay", events.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("line 2: processor \"h1/0\" is already in the pool"));
    let garbage = file("{\"event\":\"new_processor\"\n");
    let out = mig(&["sched", "replay", garbage.path().to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 1:"));
    let out = mig(&["sched", "replay", "/nonexistent/events.jsonl"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot open"));
}

#[test]
fn repack_keeps_processors_and_reaches_the_bound() {
    // Seed 001, Figure 2 after J' and J'' left: three slots become two.
    let m = file(
        r#"{"processors": 8, "slots": [[1,1,2,2,0,0,0,0],[0,0,0,0,3,3,0,0],[5,5,6,6,0,0,7,7]]}"#,
    );
    let v = json(&mig(&[
        "sched",
        "repack",
        m.path().to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(v["slots"], 2);
    let matrix: Vec<Vec<u64>> = serde_json::from_value(v["matrix"].clone()).unwrap();
    // Every job still on exactly its processors.
    for (job, procs) in [
        (1, vec![0, 1]),
        (2, vec![2, 3]),
        (3, vec![4, 5]),
        (5, vec![0, 1]),
        (6, vec![2, 3]),
        (7, vec![6, 7]),
    ] {
        let rows: Vec<&Vec<u64>> = matrix.iter().filter(|r| r.contains(&job)).collect();
        assert_eq!(rows.len(), 1);
        let at: Vec<usize> = (0..8).filter(|&p| rows[0][p] == job).collect();
        assert_eq!(at, procs);
    }
    let bad = file(r#"{"processors": 3, "slots": [[1,1]]}"#);
    let out = mig(&["sched", "repack", bad.path().to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("slot 0 has 2 entries, expected 3"));
}

#[test]
fn sim_compares_policies_on_a_trace_plain_or_gzipped() {
    let swf = "; MaxProcs: 4\n\
1 0 0 10 4 -1 -1 4 10 -1 1 1 1 1 1 -1 -1 -1\n\
2 0 0 5 1 -1 -1 1 5 -1 1 1 1 1 1 -1 -1 -1\n";
    let plain = file(swf);
    let jobs_out = tempfile::NamedTempFile::new().unwrap();
    let v = json(&mig(&[
        "sim",
        "--trace",
        plain.path().to_str().unwrap(),
        "--policy",
        "fcfs,mtat",
        "--json",
        "--jobs-out",
        jobs_out.path().to_str().unwrap(),
    ]));
    // FCFS: job 1 takes all 4 processors 0-10, job 2 runs 10-15.
    assert_eq!(v["policies"]["fcfs"]["mean_response_time"], 12.5);
    assert_eq!(v["policies"]["mtat"]["jobs"], 2);
    let lines = std::fs::read_to_string(jobs_out.path()).unwrap();
    let first: serde_json::Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
    assert_eq!(first["policy"], "fcfs");
    assert_eq!(lines.lines().count(), 4);
    let gz = tempfile::NamedTempFile::new().unwrap();
    let status = std::process::Command::new("gzip")
        .arg("-c")
        .arg(plain.path())
        .stdout(gz.reopen().unwrap())
        .status()
        .unwrap();
    assert!(status.success());
    let v = json(&mig(&[
        "sim",
        "--trace",
        gz.path().to_str().unwrap(),
        "--policy",
        "easy",
        "--json",
    ]));
    assert_eq!(v["jobs"], 2);
    let bad = file("1 0 0 x\n");
    let out = mig(&[
        "sim",
        "--trace",
        bad.path().to_str().unwrap(),
        "--processors",
        "4",
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 1:"));
    let out = mig(&[
        "sim",
        "--trace",
        plain.path().to_str().unwrap(),
        "--policy",
        "lottery",
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown policy"));
    for (flag, value, says) in [
        ("--quantum", "0", "--quantum must be a positive number"),
        (
            "--switch-cost",
            "-1",
            "--switch-cost must be a number of seconds",
        ),
        (
            "--migration-cost-per-mb",
            "NaN",
            "--migration-cost-per-mb must be",
        ),
    ] {
        let arg = format!("{flag}={value}");
        let out = mig(&["sim", "--trace", plain.path().to_str().unwrap(), &arg]);
        assert!(!out.status.success(), "{flag} {value}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(says),
            "{flag} {value}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn sim_holds_each_nodes_memory_and_says_what_it_assumed() {
    // Two nodes; a and b each need both, 600 MB a processor (field 10),
    // for 100 s, submitted together. Memory no limit: they share the nodes
    // in two slots. 1024 MB a node: b waits for a, so it starts at 100.
    let swf = "; MaxProcs: 2\n\
1 0 0 100 2 -1 -1 2 100 614400 1 1 1 1 1 -1 -1 -1\n\
2 0 0 100 2 -1 -1 2 100 614400 1 1 1 1 1 -1 -1 -1\n";
    let trace = file(swf);
    let path = trace.path().to_str().unwrap();
    let jobs_out = tempfile::NamedTempFile::new().unwrap();
    let out = mig(&[
        "sim",
        "--trace",
        path,
        "--policy",
        "mig,gang-firstfit",
        "--json",
        "--node-memory",
        "1024",
        "--jobs-out",
        jobs_out.path().to_str().unwrap(),
    ]);
    let v = json(&out);
    assert_eq!(v["node_memory_mb"], 1024);
    assert!(
        v["memory"].as_str().unwrap().contains("1024 MB a node"),
        "{v}"
    );
    // The measured costs are the defaults, and said.
    assert_eq!(v["switch_cost"], 12e-6);
    assert_eq!(v["migration_cost_per_mb"], 0.7e-3);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("costs: a slot switch 0.012 ms"), "{err}");
    let lines = std::fs::read_to_string(jobs_out.path()).unwrap();
    for l in lines.lines() {
        let o: serde_json::Value = serde_json::from_str(l).unwrap();
        let start = o["start"].as_f64().unwrap();
        let want = if o["id"] == "2" { 100.0 } else { 0.0 };
        assert!((start - want).abs() < 1e-6, "{o}");
    }
    let v = json(&mig(&["sim", "--trace", path, "--policy", "mig", "--json"]));
    assert_eq!(v["node_memory_mb"], serde_json::Value::Null);
    assert!(v["policies"]["mig"]["mean_response_time"].as_f64().unwrap() > 150.0);
    // Arrivals brought closer: the second job's submit time halves.
    let spaced = file(
        "; MaxProcs: 2\n\
1 0 0 10 2 -1 -1 2 10 -1 1 1 1 1 1 -1 -1 -1\n\
2 100 0 10 2 -1 -1 2 10 -1 1 1 1 1 1 -1 -1 -1\n",
    );
    let out_file = tempfile::NamedTempFile::new().unwrap();
    json(&mig(&[
        "sim",
        "--trace",
        spaced.path().to_str().unwrap(),
        "--policy",
        "easy",
        "--json",
        "--interarrival",
        "0.5",
        "--jobs-out",
        out_file.path().to_str().unwrap(),
    ]));
    let lines = std::fs::read_to_string(out_file.path()).unwrap();
    assert!(lines.contains("\"submit\":50.0"), "{lines}");
    // An offered load asked for: 2 x 10 s of 2 processors over 100 s on 2
    // is 0.2; 0.4 halves the time between the arrivals.
    let v = json(&mig(&[
        "sim",
        "--trace",
        spaced.path().to_str().unwrap(),
        "--policy",
        "easy",
        "--json",
        "--load",
        "0.4",
        "--jobs-out",
        out_file.path().to_str().unwrap(),
    ]));
    assert!(
        (v["offered_load"].as_f64().unwrap() - 0.4).abs() < 1e-9,
        "{v}"
    );
    assert!(
        (v["interarrival"].as_f64().unwrap() - 0.5).abs() < 1e-9,
        "{v}"
    );
    let lines = std::fs::read_to_string(out_file.path()).unwrap();
    assert!(lines.contains("\"submit\":50.0"), "{lines}");
    for (flag, says) in [
        ("--node-memory=0", "--node-memory must be at least 1 MB"),
        (
            "--interarrival=0",
            "--interarrival must be a positive factor",
        ),
        ("--load=-1", "--load must be a positive offered load"),
    ] {
        let out = mig(&["sim", "--trace", path, flag]);
        assert!(!out.status.success(), "{flag}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(says),
            "{flag}"
        );
    }
}

#[test]
fn sim_machines_of_several_architectures_and_drawn_capacities() {
    // Job 1 (partition 1) needs the first architecture, job 2 (partition 2)
    // the second. With 3 + 1 processors, job 1 (3 procs) and job 2 (1 proc)
    // run side by side under FCFS: both end at their run times.
    let swf = "; MaxProcs: 4\n\
1 0 0 10 3 -1 -1 3 10 -1 1 1 1 1 1 1 -1 -1\n\
2 0 0 5 1 -1 -1 1 5 -1 1 1 1 1 1 2 -1 -1\n";
    let trace = file(swf);
    let path = trace.path().to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["sim", "--trace", path, "--policy", "fcfs,mtat", "--json"];
        args.extend_from_slice(extra);
        json(&mig(&args))
    };
    let v = run(&[
        "--arches",
        "x86_64:3,aarch64:1",
        "--capacities",
        "uniform:1-4",
    ]);
    assert_eq!(v["policies"]["fcfs"]["jobs"], 2);
    assert_eq!(v["policies"]["fcfs"]["makespan"], 10.0);
    assert_eq!(v["policies"]["mtat"]["jobs"], 2);
    // Two processors of each: job 1 (3 procs) no longer fits its pool under
    // FCFS; mtat doubles it up.
    let v = run(&["--arches", "x86_64,aarch64"]);
    assert_eq!(v["policies"]["fcfs"]["jobs"], 1);
    assert_eq!(v["policies"]["mtat"]["jobs"], 2);
    for (flag, says) in [
        (
            "--arches=x86_64:3,aarch64:2",
            "add up to 5, the machine has 4",
        ),
        (
            "--arches=x86_64:3,aarch64",
            "a count for every architecture or for none",
        ),
        ("--arches=x86_64,x86_64", "each once"),
        ("--capacities=uniform:4-1", "LO is above HI"),
        ("--capacities=1,0", "not a positive number"),
    ] {
        let out = mig(&["sim", "--trace", path, flag]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{flag}: {err}");
    }
}

#[test]
fn sim_refuses_a_trace_with_no_job_and_says_how_many_jobs_a_limit_keeps() {
    // Empty, or nothing but garbage: an error, even with --lenient.
    for text in ["", "garbage\nmore garbage\n"] {
        let f = file(text);
        let path = f.path().display().to_string();
        let out = mig(&["sim", "--trace", &path, "--lenient", "--processors", "8"]);
        assert!(!out.status.success(), "{text:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("no job to replay"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The shipped excerpt of a real log, limited: the header says so.
    let trace = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/traces/KTH-SP2-1996-2.1-cln-first2000.swf.gz"
    );
    let out = mig(&[
        "sim", "--trace", trace, "--limit", "100", "--policy", "easy", "--json",
    ]);
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(said.contains("the first 100 of 2000 jobs"), "{said}");
    assert_eq!(json(&out)["jobs"], 100);
}

#[test]
fn the_daemons_policy_beats_easy_and_every_other_gang_policy_on_a_real_log() {
    // The shipped excerpt of a real log (KTH SP2's first 2,000 jobs), whole,
    // with default settings: mig's mean bounded slowdown is at most half
    // EASY's and below every other gang policy's, its median and 95th
    // percentile too, and no job is lost or runs faster than its work.
    let trace = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/traces/KTH-SP2-1996-2.1-cln-first2000.swf.gz"
    );
    let v = json(&mig(&[
        "sim",
        "--trace",
        trace,
        "--policy",
        "easy,gang-firstfit,gang-buddy,mtat,mtat+repack,mig",
        "--json",
    ]));
    let p = &v["policies"];
    let m = |policy: &str, key: &str| p[policy][key].as_f64().unwrap();
    let mig_bsld = m("mig", "mean_bounded_slowdown");
    assert_eq!(p["mig"]["jobs"], 2000);
    assert!(
        mig_bsld <= 0.5 * m("easy", "mean_bounded_slowdown"),
        "{mig_bsld} vs easy {}",
        p["easy"]
    );
    for other in ["gang-firstfit", "gang-buddy", "mtat", "mtat+repack"] {
        for key in [
            "mean_bounded_slowdown",
            "median_bounded_slowdown",
            "p95_bounded_slowdown",
        ] {
            assert!(
                m("mig", key) <= m(other, key),
                "{key}: mig {} vs {other} {}",
                m("mig", key),
                m(other, key)
            );
        }
    }
    assert!(m("mig", "mean_bounded_slowdown") >= 1.0);
}

#[test]
fn replay_takes_the_events_its_help_shows_with_comments_and_blank_lines() {
    let f = file(
        "# two architectures\n\
         {\"event\": \"new_processor\", \"id\": \"h1/0\", \"arch\": \"x86_64\", \"capacity\": 2.0}\n\
         {\"event\": \"new_processor\", \"id\": \"h2/0\", \"arch\": \"aarch64\", \"capacity\": 1.0}\n\
         \n\
         {\"event\": \"submit\", \"job\": \"j1\", \"vps\": {\"x86_64\": 4, \"aarch64\": 2}}\n\
         {\"event\": \"new_vp\", \"job\": \"j1\", \"arch\": \"x86_64\"}\n\
         {\"event\": \"vp_exit\", \"job\": \"j1\", \"vp\": 3}\n",
    );
    let path = f.path().display().to_string();
    let out = mig(&["sched", "replay", &path]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // Six VPs, then a seventh, less VP 3: six left.
    assert!(text.contains("job j1: 6 VPs"), "{text}");
    let help = String::from_utf8_lossy(&mig(&["sched", "replay", "--help"]).stdout).into_owned();
    assert!(help.contains("\"event\": \"submit\""), "{help}");
}

#[test]
fn the_readmes_scheduler_examples_run_on_the_files_that_ship() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/sched/");
    let v = json(&mig(&[
        "sched",
        "replay",
        &format!("{dir}events.jsonl"),
        "--json",
    ]));
    // j1 ended; j2's three VPs are placed, two on the processor twice as fast.
    assert_eq!(v["events"], 9, "{v}");
    let jobs = v["jobs"].as_object().expect("jobs");
    assert_eq!(jobs.keys().collect::<Vec<_>>(), ["j2"], "{v}");
    let placed: Vec<&str> = jobs["j2"]["placement"]
        .as_object()
        .expect("placement")
        .values()
        .filter_map(|p| p.as_str())
        .collect();
    assert_eq!(placed.len(), 3, "{v}");
    assert_eq!(placed.iter().filter(|p| **p == "h3/0").count(), 2, "{v}");
    let text =
        String::from_utf8_lossy(&mig(&["sched", "replay", &format!("{dir}events.jsonl")]).stdout)
            .into_owned();
    assert!(
        text.starts_with("9 events replayed; 0 migrations; 1 slot per round"),
        "{text}"
    );
    let out = mig(&["sched", "repack", &format!("{dir}matrix.json")]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("4 slots -> 2 slots"), "{text}");
}

#[test]
fn balance_roc_reproduces_seed_003s_tables_2_to_4_for_every_network() {
    let v = json(&mig(&["balance", "roc", "--seeds", "2", "--json"]));
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 9, "{v}");
    for r in rows {
        for np in ["np_sid", "np_roc", "np_roc_fixed"] {
            let x = r[np].as_f64().expect("NP");
            assert!(x > 0.0 && x <= 1.0, "{np} {r}");
        }
        assert!(r["t_no_lb"].as_f64() > r["t_opt"].as_f64(), "{r}");
        // On demand: a fraction of diffusion's messages.
        assert!(
            r["messages_roc"].as_f64() < r["messages_sid"].as_f64(),
            "{r}"
        );
    }
    // Half the machine idle at the start costs more without balancing.
    let t = |start: &str| {
        rows.iter()
            .find(|r| r["start"] == start)
            .and_then(|r| r["t_no_lb"].as_f64())
            .expect("row")
    };
    assert!(t("unstable") > t("stable"));
    let only4 = json(&mig(&[
        "balance", "roc", "--table", "4", "--seeds", "1", "--json",
    ]));
    let rows = only4["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 3, "{only4}");
    assert!(rows.iter().all(|r| r["start"] == "arrivals"), "{only4}");
    let text =
        String::from_utf8_lossy(&mig(&["balance", "roc", "--seeds", "1"]).stdout).into_owned();
    assert!(
        text.contains("NP RoC") && text.contains("workstations"),
        "{text}"
    );
    assert!(!mig(&["balance", "roc", "--seeds", "0"]).status.success());
    let bad = mig(&["balance", "roc", "--thresholds", "3,2,4"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("critical <= low < high"));
    assert!(!mig(&["balance", "roc", "--thresholds", "1,2"])
        .status
        .success());
    assert!(!mig(&["balance", "roc", "--table", "5"]).status.success());
}

#[test]
fn balance_rommel_reproduces_seed_002s_figure_6_rows() {
    let v = json(&mig(&[
        "balance",
        "rommel",
        "--subruns",
        "1",
        "--duration",
        "3000",
        "--json",
    ]));
    let rows = v["rows"].as_array().expect("rows");
    let sizes: Vec<&str> = rows.iter().filter_map(|r| r["setting"].as_str()).collect();
    assert_eq!(sizes, ["1", "3", "5", "10", "15"], "{v}");
    for r in rows {
        for p in ["nlb", "sqf", "sqf_prime", "bidding"] {
            assert!(r[p]["all"].as_f64().is_some_and(|x| x > 0.0), "{p} {r}");
            assert!(r[p]["programs"].as_u64().is_some_and(|n| n > 50), "{p} {r}");
        }
        assert_eq!(r["nlb"]["moved"], 0);
    }
    assert!(!mig(&["balance", "rommel", "--psi", "-1"]).status.success());
}

#[test]
fn balance_nres_reports_figures_7_to_9_for_three_trigger_lines_and_1_to_3_resources() {
    let v = json(&mig(&["balance", "nres", "--seeds", "1", "--json"]));
    for trend in ["capacity", "latency"] {
        let curves = v[trend].as_array().expect("curves");
        let resources: Vec<u64> = curves
            .iter()
            .filter_map(|c| c["resources"].as_u64())
            .collect();
        assert_eq!(resources, [1, 2, 3], "{v}");
        for c in curves {
            let rows = c["rows"].as_array().expect("rows");
            assert_eq!(rows.len(), 5, "{v}");
            for r in rows {
                let etas = r["eta"].as_array().expect("three lines");
                assert_eq!(etas.len(), 3);
                let none = r["eta_none"].as_f64().expect("eta none");
                for e in etas {
                    let e = e.as_f64().expect("eta");
                    assert!(e > 0.0 && e <= 1.0, "{r}");
                    assert!(e >= none - 0.02, "balancing does not lose: {r}");
                }
            }
        }
    }
    let load = v["load"].as_array().expect("figure 9");
    assert_eq!(load.len(), 5, "{v}");
    for r in load {
        let t_lb = r["t_lb"].as_f64().expect("t_lb");
        for t in r["t_my"].as_array().expect("three") {
            assert!(t.as_f64().is_some_and(|t| t >= t_lb), "{r}");
        }
    }
    let only9 = json(&mig(&[
        "balance", "nres", "--figure", "9", "--seeds", "1", "--json",
    ]));
    assert!(
        only9["capacity"].is_null() && only9["load"].is_array(),
        "{only9}"
    );
    assert!(!mig(&["balance", "nres", "--seeds", "0"]).status.success());
    assert!(!mig(&["balance", "nres", "--figure", "6"]).status.success());
}

#[test]
fn sim_replays_rate_of_change_on_a_real_log_beside_easy() {
    let trace = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/traces/KTH-SP2-1996-2.1-cln-first2000.swf.gz"
    );
    let v = json(&mig(&[
        "sim", "--trace", trace, "--limit", "300", "--policy", "easy,roc", "--json",
    ]));
    let roc = &v["policies"]["roc"];
    assert_eq!(roc["jobs"], 300, "{v}");
    assert!(
        roc["mean_bounded_slowdown"]
            .as_f64()
            .is_some_and(|x| x >= 1.0),
        "{v}"
    );
    assert!(
        roc["utilization"]
            .as_f64()
            .is_some_and(|u| u > 0.0 && u <= 1.0),
        "{v}"
    );
}
