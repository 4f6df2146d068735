//! Simulator tests: the pyss peer's FCFS and EASY vectors, hand-computed
//! traces, and invariants on random traces.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::swf::{parse_pyss, Job};
use super::*;

/// `super::replay` with a throw-away progress counter.
fn replay(
    jobs: &[Job],
    caps: &[f64],
    policy: &str,
    max_slots: usize,
) -> Option<(Vec<Outcome>, metrics::Metrics)> {
    super::replay(jobs, caps, policy, max_slots, &AtomicUsize::new(0))
        .map(|r| (r.outcomes, r.metrics))
}

#[test]
fn the_progress_counter_counts_every_completed_job() {
    let jobs: Vec<Job> = (0..20)
        .map(|i| Job::new(&i.to_string(), f64::from(i), 5.0, 1 + i % 3))
        .collect();
    for policy in POLICIES {
        let done = AtomicUsize::new(0);
        let r = super::replay(&jobs, &[1.0; 4], policy, 4, &done).unwrap();
        assert_eq!(done.load(Ordering::Relaxed), r.outcomes.len(), "{policy}");
        // The timeline covers the replay and stays within the machine.
        assert!(!r.timeline.is_empty());
        assert!(
            r.timeline.windows(2).all(|w| w[0].t <= w[1].t),
            "{policy}: time runs forward"
        );
        assert!(
            r.timeline
                .iter()
                .all(|s| (0.0..=1.0 + 1e-9).contains(&s.utilization) && s.slots <= 4),
            "{policy}"
        );
    }
}

fn fixture(name: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pyss")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn check_vectors(policy: &str, files: &[String]) {
    for f in files {
        let w = parse_pyss(&fixture(f)).unwrap();
        let (out, _) = replay(&w.jobs, &[1.0; 100], policy, DEFAULT_MAX_SLOTS).unwrap();
        assert_eq!(out.len(), w.jobs.len(), "{f}: every job completes");
        for o in &out {
            let expect = o.id.parse::<f64>().unwrap().trunc();
            assert_eq!(
                o.end, expect,
                "{policy} {f}: job {} ends at {} not {expect}",
                o.id, o.end
            );
        }
    }
}

fn names(prefix: &str, range: std::ops::RangeInclusive<u32>) -> Vec<String> {
    range.map(|i| format!("{prefix}.{i}")).collect()
}

#[test]
fn fcfs_matches_the_pyss_vectors() {
    let mut files = names("fcfs_input", 0..=7);
    files.extend(names("basic_input", 0..=28));
    files.extend(names("extreme_input", 0..=1));
    check_vectors("fcfs", &files);
}

#[test]
fn easy_matches_the_pyss_vectors() {
    let mut files = names("bf_input", 0..=8);
    files.extend(names("easy_bf_input", 0..=3));
    files.extend(names("basic_input", 0..=28));
    files.extend(names("extreme_input", 0..=2));
    check_vectors("easy", &files);
}

#[test]
fn hand_computed_metrics() {
    // 2 processors: a (2 procs, 10 s) at 0, b (1 proc, 5 s) at 0. FCFS: a
    // 0-10, b 10-15. Responses 10 and 15; bounded slowdowns 1 and 15/10;
    // work 25 over 2 x 15.
    let jobs = [Job::new("a", 0.0, 10.0, 2), Job::new("b", 0.0, 5.0, 1)];
    let (_, m) = replay(&jobs, &[1.0; 2], "fcfs", DEFAULT_MAX_SLOTS).unwrap();
    assert_eq!(m.mean_response_time, 12.5);
    assert_eq!(m.median_response_time, 12.5);
    assert!((m.mean_bounded_slowdown - 1.25).abs() < 1e-12);
    assert!((m.median_bounded_slowdown - 1.25).abs() < 1e-12);
    assert!((m.p95_bounded_slowdown - 1.5).abs() < 1e-12);
    assert!((m.utilization - 25.0 / 30.0).abs() < 1e-12);
    assert_eq!(m.makespan, 15.0);
    // Gang: two slots would slow a; b fits in a's slot? No: a takes both
    // processors, so b gets a second slot: both at half speed until b ends.
    let (out, m) = replay(&jobs, &[1.0; 2], "mtat", DEFAULT_MAX_SLOTS).unwrap();
    let b = out.iter().find(|o| o.id == "b").unwrap();
    assert!(
        (b.end - 10.0).abs() < 1e-9,
        "b runs half the time: 5 s of work in 10 s"
    );
    let a = out.iter().find(|o| o.id == "a").unwrap();
    assert!(
        (a.end - 15.0).abs() < 1e-9,
        "a: 5 s of work by 10, alone after"
    );
    assert_eq!(m.max_slots, 2);
    assert!(replay(&jobs, &[1.0], "nope", DEFAULT_MAX_SLOTS).is_none());
}

fn random_jobs(seed: u64, n: usize, procs: u32) -> Vec<Job> {
    let mut s = seed;
    let mut next = move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        s >> 33
    };
    let mut t = 0.0;
    (0..n)
        .map(|i| {
            t += (next() % 50) as f64;
            Job::new(
                &i.to_string(),
                t,
                1.0 + (next() % 200) as f64,
                1 + (next() % u64::from(procs)) as u32,
            )
        })
        .collect()
}

/// A policy of the embedded scheduler, or one of the task policies (`roc`,
/// `nres`, `bidding`), whose tasks queue: the only ones that put more of a
/// job on a processor than one.
fn doubles_up(policy: &str) -> bool {
    crate::sched::Placement::by_name(policy).is_some()
        || matches!(policy, "roc" | "nres" | "bidding")
}

#[test]
fn invariants_on_random_traces() {
    for seed in 0..6 {
        let jobs = random_jobs(seed, 60, 8);
        for policy in POLICIES {
            let (out, m) = replay(&jobs, &[1.0; 8], policy, 3).unwrap();
            let (odd, _) = replay(&jobs, &[1.0; 7], policy, 3).unwrap();
            // Only those that double up run a job wider than the machine;
            // the others leave it out.
            let fit = if doubles_up(policy) {
                jobs.len()
            } else {
                jobs.iter().filter(|j| j.procs <= 7).count()
            };
            assert_eq!(odd.len(), fit, "{policy} on 7 processors");
            assert_eq!(out.len(), jobs.len(), "{policy}: every job completes");
            for o in &out {
                let j = jobs.iter().find(|j| j.id == o.id).unwrap();
                assert!(
                    o.end + 1e-6 >= o.submit + j.run,
                    "{policy}: job {} faster than its work allows",
                    o.id
                );
                assert!(o.start >= o.submit);
            }
            assert!(
                m.utilization <= 1.0 + 1e-9,
                "{policy}: utilisation {}",
                m.utilization
            );
            let again = replay(&jobs, &[1.0; 8], policy, 3).unwrap();
            assert_eq!(
                again.0, out,
                "{policy}: the same input gives the same output"
            );
        }
    }
}

#[test]
fn with_owners_every_policy_still_finishes_every_job() {
    // Owners come and go while jobs arrive; none may be lost, none may end
    // before its work allows, and the same seed gives the same replay.
    let cond = Conditions {
        owners: owners::Model::parse("synthetic:100/300").unwrap(),
        migration_cost: 1.0,
        ..Conditions::default()
    };
    for seed in 0..3 {
        let jobs = random_jobs(seed, 40, 8);
        for policy in POLICIES {
            let run =
                || replay_with(&jobs, &[1.0; 8], policy, 3, &cond, &AtomicUsize::new(0)).unwrap();
            let r = run();
            assert_eq!(
                r.outcomes.len(),
                jobs.len(),
                "{policy}: every job completes"
            );
            for o in &r.outcomes {
                let j = jobs.iter().find(|j| j.id == o.id).unwrap();
                assert!(o.end + 1e-6 >= o.submit + j.run, "{policy}: job {}", o.id);
            }
            assert!(r.metrics.utilization <= 1.0 + 1e-9, "{policy}");
            assert_eq!(run().outcomes, r.outcomes, "{policy}: repeatable");
        }
    }
}

#[test]
fn switching_costs_the_time_sharing_policies_only_with_several_slots() {
    // Two 4-VP jobs of 10 s on 4 processors share two slots: each runs half
    // the time, and with a switch as long as the quantum half of that is
    // lost: both end at 40 instead of 20. Alone, a job pays nothing.
    let jobs = [Job::new("a", 0.0, 10.0, 4), Job::new("b", 0.0, 10.0, 4)];
    let cond = Conditions {
        quantum: 0.1,
        switch_cost: 0.1,
        ..Conditions::default()
    };
    for policy in ["gang-firstfit", "gang-buddy", "mtat", "mtat+repack", "mig"] {
        let end = |jobs: &[Job], cond: &Conditions| -> Vec<f64> {
            replay_with(jobs, &[1.0; 4], policy, 4, cond, &AtomicUsize::new(0))
                .unwrap()
                .outcomes
                .iter()
                .map(|o| o.end)
                .collect()
        };
        let shared = end(&jobs, &cond);
        assert!(
            shared.iter().all(|e| (e - 40.0).abs() < 1e-6),
            "{policy}: {shared:?}"
        );
        let plain = end(&jobs, &Conditions::default());
        assert!(
            plain.iter().all(|e| (e - 20.0).abs() < 1e-6),
            "{policy}: {plain:?}"
        );
        let alone = end(&jobs[..1], &cond);
        assert!((alone[0] - 10.0).abs() < 1e-6, "{policy}: {alone:?}");
    }
    // Space sharing never switches.
    let easy = replay_with(&jobs, &[1.0; 4], "easy", 4, &cond, &AtomicUsize::new(0)).unwrap();
    let ends: Vec<f64> = easy.outcomes.iter().map(|o| o.end).collect();
    assert_eq!(ends, vec![10.0, 20.0]);
}

#[test]
fn a_move_costs_more_for_a_job_with_more_memory() {
    // 2 processors, a 2-VP job of 100 s; p1's owner is back 10..60, so two
    // VPs move (off at 10, back at 60). At 0.5 s per MB and 2 MB per
    // processor a move stalls the job 1 s: 1 s of work at full speed at 10,
    // 0.5 s at half speed at 60, so it ends at 125 + 1.5 (125 without cost).
    let owners = owners::Model::availability("10 1 leave\n60 1 return\n", 2).unwrap();
    let mut job = Job::new("a", 0.0, 100.0, 2);
    for (memory_kb, end) in [(0.0, 125.0), (2048.0, 126.5)] {
        job.memory_kb = memory_kb;
        let cond = Conditions {
            owners: owners.clone(),
            migration_cost_per_mb: 0.5,
            ..Conditions::default()
        };
        let r = replay_with(
            std::slice::from_ref(&job),
            &[1.0; 2],
            "mtat",
            4,
            &cond,
            &AtomicUsize::new(0),
        )
        .unwrap();
        assert!(
            (r.outcomes[0].end - end).abs() < 1e-6,
            "{memory_kb} KB: {:?}",
            r.outcomes
        );
    }
}

#[test]
fn jobs_run_only_on_processors_of_their_architecture() {
    // Three x86_64 processors and one aarch64. a (x86_64, 3 VPs, 10 s) fills
    // the x86_64 pool; b (aarch64, 2 VPs, 10 s) has one processor: mtat
    // doubles it up there (ends at 20, not 10 as on two processors), the
    // policies without doubling up cannot run it at all.
    let cond = Conditions {
        arch_names: vec!["x86_64".into(), "aarch64".into()],
        arches: vec![0, 0, 0, 1],
        ..Conditions::default()
    };
    let a = Job::new("a", 0.0, 10.0, 3);
    let b = Job {
        arch: 1,
        ..Job::new("b", 0.0, 10.0, 2)
    };
    for policy in POLICIES {
        let r = replay_with(
            &[a.clone(), b.clone()],
            &[1.0; 4],
            policy,
            4,
            &cond,
            &AtomicUsize::new(0),
        )
        .unwrap();
        let end = |id: &str| r.outcomes.iter().find(|o| o.id == id).map(|o| o.end);
        if matches!(*policy, "nres" | "bidding") {
            // Tasks may queue one after another on one processor (a burst
            // under nres's trigger line, a cluster kept whole); b runs on
            // its one processor.
            assert!(end("a").is_some_and(|e| e >= 10.0), "{policy}");
            assert!(end("b").is_some_and(|e| e >= 20.0), "{policy}");
            continue;
        }
        assert_eq!(end("a"), Some(10.0), "{policy}");
        let b_end = if doubles_up(policy) { Some(20.0) } else { None };
        assert_eq!(end("b"), b_end, "{policy}");
    }
    // On a machine of one architecture b spreads out and ends at 10 under
    // mtat (the names do not matter, the pools do).
    let r = replay(&[a, Job::new("b", 0.0, 10.0, 2)], &[1.0; 5], "mtat", 4).unwrap();
    assert!(r.0.iter().all(|o| o.end == 10.0), "{:?}", r.0);
}

#[test]
fn with_memory_a_limit_jobs_that_would_oversubscribe_a_node_wait_instead_of_sharing_it() {
    // Two nodes of 1024 MB; a and b each need both nodes, 600 MB a VP, for
    // 100 s. Without a limit both start at once, sharing the nodes in two
    // slots; with it b waits for a's end at 100. At 300 MB a VP, b fits
    // beside a.
    let mut jobs = vec![Job::new("a", 0.0, 100.0, 2), Job::new("b", 0.0, 100.0, 2)];
    for j in &mut jobs {
        j.need_kb = 600.0 * 1024.0;
    }
    for policy in ["mig", "mtat", "gang-firstfit", "gang-buddy"] {
        let start = |node: Option<u64>, jobs: &[Job]| -> Vec<(String, f64)> {
            let cond = Conditions {
                node_memory_mb: node,
                ..Conditions::default()
            };
            let r = super::replay_with(jobs, &[1.0; 2], policy, 4, &cond, &AtomicUsize::new(0))
                .unwrap();
            r.outcomes.iter().map(|o| (o.id.clone(), o.start)).collect()
        };
        let shared = start(None, &jobs);
        assert!(
            shared.iter().all(|(_, s)| *s == 0.0),
            "{policy}: {shared:?}"
        );
        let limited = start(Some(1024), &jobs);
        let b = limited.iter().find(|(id, _)| id == "b").unwrap().1;
        assert!((b - 100.0).abs() < 1e-6, "{policy}: {limited:?}");
        let mut small = jobs.clone();
        small[1].need_kb = 300.0 * 1024.0;
        let beside = start(Some(1024), &small);
        assert!(
            beside.iter().all(|(_, s)| *s == 0.0),
            "{policy}: {beside:?}"
        );
    }
    // A VP needing more than a node is left out by every policy.
    let mut big = vec![Job::new("x", 0.0, 10.0, 1)];
    big[0].need_kb = 2048.0 * 1024.0;
    let cond = Conditions {
        node_memory_mb: Some(1024),
        ..Conditions::default()
    };
    for policy in POLICIES.iter().take(7) {
        let r =
            super::replay_with(&big, &[1.0; 2], policy, 4, &cond, &AtomicUsize::new(0)).unwrap();
        assert!(r.outcomes.is_empty(), "{policy}");
    }
}

#[test]
fn offered_load_and_arrivals_scaled_to_it() {
    // 2 x 10 s of 2 processors, submitted 100 s apart, on 4: 40 / 400.
    let mut jobs = vec![Job::new("a", 5.0, 10.0, 2), Job::new("b", 105.0, 10.0, 2)];
    assert_eq!(offered_load(&jobs, 4), Some(0.1));
    spread_arrivals(&mut jobs, 0.25);
    assert_eq!((jobs[0].submit, jobs[1].submit), (5.0, 30.0));
    assert_eq!(offered_load(&jobs, 4), Some(0.4));
    // No span to scale.
    assert_eq!(offered_load(&jobs[..1], 4), None);
}

#[test]
fn replays_are_deterministic_and_the_digest_sees_every_job() {
    // Busy random jobs with memory a limit and the measured costs: every
    // policy gives the same digest twice; a job ending later changes it.
    let mut jobs = random_jobs(41, 300, 16);
    for (i, j) in jobs.iter_mut().enumerate() {
        j.need_kb = (64 * (1 + i % 8)) as f64 * 1024.0;
        j.memory_kb = j.need_kb;
        j.estimate = j.run * (1.0 + (i % 3) as f64);
    }
    let load = offered_load(&jobs, 16).unwrap();
    spread_arrivals(&mut jobs, load / 1.0);
    let cond = Conditions {
        node_memory_mb: Some(512),
        switch_cost: MEASURED_SWITCH_COST,
        migration_cost: MEASURED_MIGRATION_COST,
        migration_cost_per_mb: MEASURED_MIGRATION_COST_PER_MB,
        ..Conditions::default()
    };
    for policy in POLICIES {
        let run = || {
            super::replay_with(&jobs, &[1.0; 16], policy, 4, &cond, &AtomicUsize::new(0))
                .unwrap()
                .outcomes
        };
        let (first, second) = (run(), run());
        assert_eq!(first.len(), jobs.len(), "{policy}");
        let digest = metrics::digest(&first);
        assert_eq!(digest, metrics::digest(&second), "{policy}");
        let mut later = first.clone();
        later[150].end += 1e-6;
        assert_ne!(digest, metrics::digest(&later), "{policy}");
    }
}
