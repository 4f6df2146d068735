//! `migd --metrics`: real daemons scraped over HTTP as a monitoring stack
//! would, while a real job passes messages, is checkpointed and has a VP
//! moved; the virtual machine's figures from the master only; a token
//! where one is set; hostile bytes on the port leave it serving.

use std::net::TcpStream;
use std::time::Duration;

use mig_tests::metrics::{http, metrics_addr, scrape, total, value};
use mig_tests::{bin, command, job_succeeds, wait_until, Vm};

#[test]
fn a_running_vm_shows_its_hosts_vps_messages_checkpoints_and_moves() {
    let vm = Vm::start_config(
        3,
        "[daemon]\nmetrics = \"127.0.0.1:0\"\ncheckpoint_interval_s = 0.3\n",
    );
    let job = vm.start_job(
        2,
        &bin("heat"),
        &["--rows", "48", "--cols", "48", "--iters", "30000"],
    );
    let running = || {
        vm.json(&["ps"])
            .as_array()
            .map(|a| a.iter().filter(|v| v["state"] == "running").count())
            .unwrap_or(0)
    };
    assert!(wait_until(Duration::from_secs(20), || running() == 2));

    // The master serves the machine's figures, as `mig hosts` and `ps` say.
    let master = scrape(&metrics_addr(&vm, 0));
    assert_eq!(value(&master, "mig_master"), Some(1.0), "{master}");
    assert_eq!(
        value(&master, "mig_hosts{state=\"alive\"}"),
        Some(3.0),
        "{master}"
    );
    assert_eq!(
        value(&master, "mig_host_up{host=\"h2\"}"),
        Some(1.0),
        "{master}"
    );
    assert_eq!(
        value(&master, "mig_processors_offered"),
        Some(3.0),
        "{master}"
    );
    assert!(
        value(&master, "mig_vps{state=\"running\"}").is_some_and(|v| v >= 1.0),
        "{master}"
    );
    assert_eq!(
        value(&master, "mig_jobs{state=\"running\"}"),
        Some(1.0),
        "{master}"
    );
    assert!(
        value(&master, "mig_consensus_leader") == Some(1.0),
        "{master}"
    );
    // Workers serve their own counters only: summed over every daemon,
    // nothing of the machine is counted twice.
    for i in [1, 2] {
        let page = scrape(&metrics_addr(&vm, i));
        assert_eq!(value(&page, "mig_master"), Some(0.0), "{page}");
        assert_eq!(value(&page, "mig_consensus_leader"), Some(0.0), "{page}");
        assert!(
            !page.lines().any(|l| l.starts_with("mig_hosts")),
            "h{i}:\n{page}"
        );
    }

    // The two VPs talk across hosts; the job is checkpointed.
    assert!(
        wait_until(Duration::from_secs(30), || {
            total(&vm, 3, "mig_messages_routed_total{route=\"remote\"}") > 0.0
                && total(&vm, 3, "mig_checkpoints_total") >= 2.0
        }),
        "{}",
        vm.all_logs()
    );
    assert!(total(&vm, 3, "mig_message_bytes_routed_total{route=\"remote\"}") > 0.0);
    assert!(total(&vm, 3, "mig_checkpoint_bytes_count") >= 2.0);

    // A VP moved to the host with none: counted out at its source, in at
    // its target.
    let ps = vm.json(&["ps"]);
    let vps = ps.as_array().expect("ps");
    let used: Vec<&str> = vps.iter().filter_map(|v| v["host"].as_str()).collect();
    let free = ["h0", "h1", "h2"]
        .into_iter()
        .find(|h| !used.contains(h))
        .expect("a host without a VP");
    let tid = vps[0]["tid"].as_str().expect("tid");
    let from = vps[0]["host"].as_str().expect("host").to_string();
    let out = vm.migrate(tid, free);
    assert!(out.status.success(), "{out:?}");
    let i = |h: &str| h[1..].parse::<usize>().expect("host index");
    let (src, dst) = (metrics_addr(&vm, i(&from)), metrics_addr(&vm, i(free)));
    assert!(
        wait_until(Duration::from_secs(30), || {
            value(&scrape(&src), "mig_moves_out_total").unwrap_or(0.0) >= 1.0
                && value(&scrape(&dst), "mig_moves_in_total").unwrap_or(0.0) >= 1.0
        }),
        "{}",
        vm.all_logs()
    );
    assert!(value(&scrape(&src), "mig_move_seconds_count").unwrap_or(0.0) >= 1.0);

    // The dashboard shipped in dist/ draws figures the master serves.
    let master = scrape(&metrics_addr(&vm, 0));
    let dashboard = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../dist/grafana/mig.json"),
    )
    .expect("dist/grafana/mig.json");
    let mut drawn: Vec<&str> = dashboard
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("mig_"))
        .collect();
    drawn.sort_unstable();
    drawn.dedup();
    assert!(drawn.len() > 10, "{drawn:?}");
    for name in drawn {
        assert!(
            master.lines().any(|l| l.starts_with(name)),
            "the dashboard draws {name}, which the master does not serve:\n{master}"
        );
    }

    let lines = job_succeeds(job, &vm.log(0));
    assert!(
        lines
            .iter()
            .any(|l| l.contains("identical to the serial run: ok")),
        "{lines:?}"
    );
}

#[test]
fn hostile_bytes_and_other_paths_are_refused_and_the_port_serves_on() {
    let dir = tempfile::tempdir().expect("dir");
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret-token\n").expect("token file");
    let vm = Vm::start_with(
        1,
        &[
            "--metrics",
            "127.0.0.1:0",
            "--metrics-token-file",
            token.to_str().expect("path"),
        ],
    );
    let addr = metrics_addr(&vm, 0);
    let get = b"GET /metrics HTTP/1.1\r\nHost: mig\r\n\r\n";
    let (status, _) = http(&addr, get);
    assert_eq!(status, "HTTP/1.1 401 Unauthorized");
    let (status, _) = http(
        &addr,
        b"GET /metrics HTTP/1.1\r\nAuthorization: Bearer wrong\r\n\r\n",
    );
    assert_eq!(status, "HTTP/1.1 401 Unauthorized");
    let (status, _) = http(&addr, b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 404 Not Found");
    let (status, _) = http(&addr, b"DELETE /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 405 Method Not Allowed");
    let (status, _) = http(
        &addr,
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
    );
    assert_eq!(status, "HTTP/1.1 400 Bad Request");
    // A head that never ends is cut off.
    let (status, _) = http(&addr, &[b'A'; 20_000]);
    assert_eq!(status, "HTTP/1.1 400 Bad Request");
    // A client that connects and says nothing holds nobody up for long,
    // and one that hangs up at once is nothing.
    let silent = TcpStream::connect(&addr).expect("connect");
    drop(TcpStream::connect(&addr).expect("connect"));
    let (status, body) = http(
        &addr,
        b"GET /metrics HTTP/1.1\r\nauthorization: Bearer s3cret-token\r\n\r\n",
    );
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    assert_eq!(value(&body, "mig_master"), Some(1.0), "{body}");
    drop(silent);
    // The daemon answers as before.
    let out = vm.mig_ok(&["hosts"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("h0"));
}

#[test]
fn metrics_beyond_the_loopback_without_a_token_is_refused_at_start() {
    let dir = tempfile::tempdir().expect("dir");
    let out = command("migd")
        .env("MIG_CONFIG", "none")
        .args(["--listen", "127.0.0.1:0", "--metrics", "0.0.0.0:0"])
        .arg("--state-dir")
        .arg(dir.path().join("s"))
        .output()
        .expect("run migd");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("metrics at 0.0.0.0:0") && err.contains("metrics_token_file"),
        "{err}"
    );
}
