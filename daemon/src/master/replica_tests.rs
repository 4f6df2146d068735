//! A master rebuilt from its replicated state behaves as the live one:
//! random streams of what hosts and users say, fed to the live master and to
//! a master imported from the live one's state before each step.

use super::*;
use proptest::prelude::*;

use super::tests::{facts, spec};

#[derive(Debug, Clone)]
enum Step {
    Join(u8, u32),
    Spawn(u32),
    Start(u8),
    Exit(u8, i32),
    Movable(u8),
    HostGone(u8),
    Kill(u8),
    Checkpoint(u8),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (1u8..4, 1u32..3).prop_map(|(h, p)| Step::Join(h, p)),
        (1u32..5).prop_map(Step::Spawn),
        any::<u8>().prop_map(Step::Start),
        (any::<u8>(), 0i32..3).prop_map(|(v, c)| Step::Exit(v, c)),
        any::<u8>().prop_map(Step::Movable),
        (1u8..4).prop_map(Step::HostGone),
        any::<u8>().prop_map(Step::Kill),
        any::<u8>().prop_map(Step::Checkpoint),
    ]
}

/// The `k`-th VP (by Tid) that is not ended, with its host.
fn pick(m: &Master, k: u8, want: impl Fn(&VpRec) -> bool) -> Option<(String, Tid)> {
    let vps: Vec<(String, Tid)> = m
        .jobs
        .values()
        .flat_map(|j| j.vps.values())
        .filter(|v| want(v))
        .filter_map(|v| Some((v.host()?.to_string(), v.tid)))
        .collect();
    (!vps.is_empty()).then(|| vps[k as usize % vps.len()].clone())
}

fn apply(m: &mut Master, s: &Step, now: Instant) -> Vec<Out> {
    let from = Requester::Remote {
        host: "h1".into(),
        id: 9,
    };
    match *s {
        Step::Join(h, p) => m.register(facts(&format!("h{h}"), p), now).1,
        Step::Spawn(n) => m.control(from, "h0", Request::Spawn(spec(n))),
        Step::Start(k) => match pick(m, k, |v| matches!(v.state(), VpState::Starting { .. })) {
            Some((h, t)) => m.started(&h, t, 100 + (t as u32 & 0xffff)),
            None => Vec::new(),
        },
        Step::Exit(k, code) => match pick(m, k, |v| v.state().can_migrate()) {
            Some((h, t)) => m.exited(
                &h,
                t,
                ExitInfo {
                    code: Some(code),
                    signal: None,
                    error: None,
                    cpu_ms: None,
                },
            ),
            None => Vec::new(),
        },
        Step::Movable(k) => match pick(m, k, |v| v.state().can_migrate()) {
            Some((h, t)) => m.movable(&h, t),
            None => Vec::new(),
        },
        Step::HostGone(h) => m.host_gone(&format!("h{h}"), "test"),
        Step::Kill(k) => {
            let jobs: Vec<String> = m.jobs.keys().cloned().collect();
            match jobs.get(k as usize % jobs.len().max(1)) {
                Some(j) => m.control(
                    Requester::Local(1),
                    "h0",
                    Request::Kill { target: j.clone() },
                ),
                None => Vec::new(),
            }
        }
        Step::Checkpoint(k) => {
            let jobs: Vec<String> = m.jobs.keys().cloned().collect();
            match jobs.get(k as usize % jobs.len().max(1)) {
                Some(j) => m.checkpoint_job(j, None),
                None => Vec::new(),
            }
        }
    }
}

/// Outs but answers on the master's own connections (they die with it,
/// and a new master forgets requests made on them).
fn acts(out: Vec<Out>) -> Vec<Out> {
    out.into_iter()
        .filter(|o| !matches!(o, Out::Reply(Requester::Local(_), _)))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn a_master_rebuilt_from_its_replicated_state_acts_as_the_live_one(
        steps in proptest::collection::vec(step(), 1..40)
    ) {
        let now = Instant::now();
        let (mut live, _) = Master::new(facts("h0", 2), now, Duration::ZERO);
        for s in &steps {
            let bytes = live.export();
            let (mut rebuilt, _) = Master::import(&bytes, "h0", now).expect("own bytes");
            // The same state (hash maps order their bytes at random, so
            // compared by what they hold), the scheduler's whole...
            prop_assert_eq!(rebuilt.hosts_info(), live.hosts_info());
            prop_assert_eq!(rebuilt.sched.table(), live.sched.table());
            prop_assert_eq!(rebuilt.sched.job_ids(), live.sched.job_ids());
            prop_assert_eq!(rebuilt.ps(), live.ps());
            // ...and the same answer to what comes next (but where a
            // checkpoint was being taken: the new master gives it up, its
            // images being on the old one's disk).
            let taking = live.jobs.values().any(|j| j.ckpt.round.is_some());
            let a = apply(&mut live, s, now);
            let b = apply(&mut rebuilt, s, now);
            if !taking {
                prop_assert_eq!(acts(b), acts(a), "after {:?}", s);
            }
            prop_assert!(live.sched.check_invariants().is_ok());
        }
    }
}

#[test]
fn a_new_master_waits_for_the_hosts_and_gives_up_the_old_one() {
    let now = Instant::now();
    let (mut m, _) = Master::new(facts("h0", 1), now, Duration::ZERO);
    for h in ["h1", "h2"] {
        m.register(facts(h, 1), now);
    }
    let (mut n, out) = Master::import(&m.export(), "h1", now).expect("import");
    assert!(
        out.iter()
            .any(|o| matches!(o, Out::Log(l) if l.contains("took over as master from h0"))),
        "{out:?}"
    );
    assert_eq!(n.name(), "h1");
    let info = n.hosts_info();
    assert!(info.iter().any(|h| h.facts.name == "h1" && h.master));
    assert!(info.iter().all(|h| h.facts.name == "h1" || !h.master));
    // h2 attaches again; h0 (the old master) does not, and is given up once
    // its lease has surely lapsed.
    let mut t = now;
    for _ in 0..10 {
        t += Duration::from_millis(500);
        n.heard_from("h2", t);
        n.tick(t, Duration::from_secs(3));
    }
    assert!(n.is_alive("h2"));
    assert!(!n.is_alive("h0"));
    assert!(Master::import(b"\xff\xff garbage", "h1", now).is_err());
}
