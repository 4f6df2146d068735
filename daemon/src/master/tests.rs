//! The master as a pure function of events: what it answers (`Out`s) to
//! hosts, users and VPs.

use super::*;

#[test]
fn a_job_names_its_program_per_architecture() {
    assert_eq!(
        program_for("./heat", "aarch64-linux").as_deref(),
        Some("./heat")
    );
    assert_eq!(
        program_for("./heat-{arch}", "aarch64-linux").as_deref(),
        Some("./heat-aarch64-linux")
    );
    let map = "x86_64=./heat,aarch64-linux=./heat-arm";
    assert_eq!(program_for(map, "x86_64-linux").as_deref(), Some("./heat"));
    assert_eq!(
        program_for(map, "aarch64-linux").as_deref(),
        Some("./heat-arm")
    );
    assert_eq!(program_for(map, "riscv64-linux"), None);
    // A path with '=' in a directory is still one path.
    assert_eq!(
        program_for("/opt/a=b/prog", "x").as_deref(),
        Some("/opt/a=b/prog")
    );
}

fn facts(name: &str, procs: u32) -> HostFacts {
    HostFacts {
        name: name.into(),
        arch: "x86_64-linux".into(),
        processors: procs,
        capacity: 1.0,
        memory_mb: 1024,
        addr: "127.0.0.1:1".into(),
        pid: 1,
        offered: true,
    }
}

fn spec(n: u32) -> SpawnSpec {
    SpawnSpec {
        program: "/bin/true".into(),
        args: vec![],
        n,
        cwd: "/".into(),
        env: vec![],
        wait: true,
        parent: None,
        independent: false,
    }
}

fn starts(out: &[Out]) -> Vec<(String, Tid)> {
    out.iter()
        .filter_map(|o| match o {
            Out::ToHost(h, PeerMsg::Start(s)) => Some((h.clone(), s.tid)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_job_spreads_over_hosts_and_finishes_with_its_status() {
    let now = Instant::now();
    let (mut m, _) = Master::new(facts("h0", 1), now, Duration::ZERO);
    m.register(facts("h1", 1), now);
    let out = m.control(Requester::Local(7), "h0", Request::Spawn(spec(2)));
    let s = starts(&out);
    assert_eq!(s.len(), 2);
    assert_ne!(s[0].0, s[1].0, "one VP per host");
    for (h, tid) in &s {
        m.started(h, *tid, 100);
        let out = m.exited(
            h,
            *tid,
            ExitInfo {
                code: Some(if h == "h1" { 3 } else { 0 }),
                signal: None,
                error: None,
            },
        );
        if h == &s[1].0 {
            assert!(out.contains(&Out::Reply(
                Requester::Local(7),
                Response::JobDone {
                    job: "j1".into(),
                    status: 3
                }
            )));
        }
    }
    assert!(m.ps().is_empty());
}

#[test]
fn a_dead_host_leaves_the_map_and_its_vps_restart_elsewhere() {
    let now = Instant::now();
    let (mut m, _) = Master::new(facts("h0", 1), now, Duration::ZERO);
    m.register(facts("h1", 1), now);
    let out = m.control(Requester::Local(1), "h0", Request::Spawn(spec(2)));
    assert_eq!(starts(&out).len(), 2);
    let out = m.tick(now + Duration::from_secs(10), Duration::from_secs(3));
    let again = starts(&out);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].0, "h0");
    assert!(!m.is_alive("h1"));
    assert!(m.sched.map().processors().all(|(_, p)| &*p.host == "h0"));
    // It answers again on the same connection: back in the pool.
    m.heard_from("h1", now + Duration::from_secs(11));
    assert!(m.is_alive("h1"));
    assert_eq!(m.sched.map().processors().count(), 2);
    m.host_gone("h1", "connection lost");
    // Or it comes back under the same name.
    let (name, _) = m.register(facts("h1", 1), now);
    assert_eq!(name, "h1");
    assert!(m.is_alive("h1"));
}

#[test]
fn bad_requests_are_clear_errors() {
    let now = Instant::now();
    let (mut m, _) = Master::new(facts("h0", 1), now, Duration::ZERO);
    let mut s = spec(1);
    s.program = "./no-such-program".into();
    let out = m.control(Requester::Local(1), "h0", Request::Spawn(s));
    assert!(
        matches!(&out[0], Out::Reply(_, Response::Error { message }) if message.contains("not found"))
    );
    let mut s = spec(1);
    s.env.push(("MIG_TID".into(), "1".into()));
    let out = m.control(Requester::Local(1), "h0", Request::Spawn(s));
    assert!(
        matches!(&out[0], Out::Reply(_, Response::Error { message }) if message.contains("MIG_TID is set by the daemon"))
    );
    let out = m.control(
        Requester::Local(1),
        "h0",
        Request::Kill {
            target: "j99".into(),
        },
    );
    assert!(
        matches!(&out[0], Out::Reply(_, Response::Error { message }) if message.contains("no job or VP"))
    );
    let (name, _) = m.register(facts("h0", 1), now);
    assert_eq!(name, "h0-2");
}
