//! Tests of the `mig` placement (`Placement::Mig`): compaction by moving
//! jobs, slots lent to jobs whose processors are free there, admission
//! oldest first with backfilling under EASY's rule (what the oldest waiting
//! job is promised, and who may pass it). The properties over random event
//! streams are in `tests`.

use std::collections::BTreeMap;

use super::*;

fn processors(n: usize) -> Vec<Event> {
    (1..=n)
        .map(|i| Event::NewProcessor {
            id: format!("p{i}/0"),
            host: format!("p{i}"),
            arch: "x86_64".into(),
            capacity: 1.0,
            memory_mb: None,
        })
        .collect()
}

fn mig(n: usize, cfg: SchedConfig) -> Scheduler {
    let mut s = Scheduler::new(cfg);
    for e in processors(n) {
        s.on_event(e).unwrap();
    }
    s
}

fn submit(job: &str, n: u32) -> Event {
    Event::Submit {
        job: job.into(),
        vps: BTreeMap::from([("x86_64".to_string(), n)]),
        memory_mb: None,
        only: None,
        estimate: None,
    }
}

fn exit(job: &str) -> Event {
    Event::JobExit { job: job.into() }
}

fn slots_of(s: &Scheduler, job: &str) -> Vec<usize> {
    s.job_view(job).unwrap().slots
}

fn waiting(s: &Scheduler, job: &str) -> bool {
    !s.job_view(job).unwrap().waiting.is_empty()
}

fn migrations(actions: &[Action]) -> usize {
    actions
        .iter()
        .filter(|a| matches!(a, Action::Migrate { .. }))
        .count()
}

/// Two jobs on the same two processors, each in a slot of its own, two
/// processors free in both: what seed 001's shifts cannot merge.
fn same_rows_in_two_slots(cfg: SchedConfig) -> Scheduler {
    let mut s = mig(4, cfg);
    s.restore_job("a", &[0], &["p1/0", "p2/0"]).unwrap();
    s.restore_job("b", &[1], &["p1/0", "p2/0"]).unwrap();
    s.check_invariants().unwrap();
    s
}

#[test]
fn compaction_moves_a_job_to_free_processors_and_deletes_a_slot() {
    let mut s = same_rows_in_two_slots(Placement::Mig.config());
    assert_eq!(s.map().columns().len(), 2);
    // Any event ends with the pass that compacts (here a processor joins).
    let acts = s.on_event(processors(5).pop().unwrap()).unwrap();
    s.check_invariants().unwrap();
    assert_eq!(s.map().columns().len(), 1, "{acts:?}");
    assert_eq!(migrations(&acts), 2, "{acts:?}");
    assert_eq!(s.vp_count(), 4);
    // The paper's scheduler keeps both slots: re-packing never moves a VP.
    let mut paper = same_rows_in_two_slots(Placement::MtatRepack.config());
    let acts = paper.on_event(processors(5).pop().unwrap()).unwrap();
    assert_eq!(paper.map().columns().len(), 2);
    assert_eq!(migrations(&acts), 0);
}

#[test]
fn compaction_never_moves_a_vp_that_cannot_be_moved() {
    let mut s = same_rows_in_two_slots(SchedConfig {
        pin_new_vps: true,
        ..Placement::Mig.config()
    });
    let acts = s.on_event(processors(5).pop().unwrap()).unwrap();
    s.check_invariants().unwrap();
    assert_eq!(migrations(&acts), 0, "{acts:?}");
    assert_eq!(s.map().columns().len(), 2);
}

#[test]
fn compaction_stays_within_its_budget_of_moves() {
    let mut s = same_rows_in_two_slots(SchedConfig {
        compact_moves: 1,
        ..Placement::Mig.config()
    });
    let acts = s.on_event(processors(5).pop().unwrap()).unwrap();
    assert_eq!(
        migrations(&acts),
        0,
        "two moves needed, one allowed: {acts:?}"
    );
    assert_eq!(s.map().columns().len(), 2);
}

#[test]
fn a_job_runs_in_every_slot_where_its_processors_are_free_until_they_are_wanted() {
    let mut s = mig(6, Placement::Mig.config());
    // a (4) opens slot 0; b (5) would run three times slower doubled up on
    // the two free processors there, so it opens slot 1; c (1) goes where it
    // fits best, the one free cell of slot 1, and is lent slot 0 as well,
    // where its processor is free: it runs all the time.
    for (job, n) in [("a", 4), ("b", 5), ("c", 1)] {
        s.on_event(submit(job, n)).unwrap();
        s.check_invariants().unwrap();
    }
    assert_eq!(s.map().columns().len(), 2);
    assert_eq!(slots_of(&s, "a"), vec![0]);
    assert_eq!(slots_of(&s, "b"), vec![1]);
    assert_eq!(slots_of(&s, "c"), vec![0, 1]);
    // d (2) needs slot 0's two free cells, one of them lent to c: c gives
    // it back and d starts there, with no slot added.
    s.on_event(submit("d", 2)).unwrap();
    s.check_invariants().unwrap();
    assert!(!waiting(&s, "d"));
    assert_eq!(slots_of(&s, "d"), vec![0]);
    assert_eq!(slots_of(&s, "c"), vec![1]);
    assert_eq!(s.map().columns().len(), 2);
}

#[test]
fn waiting_jobs_start_oldest_first_and_younger_ones_fill_in_behind() {
    let mut s = mig(
        2,
        SchedConfig {
            max_slots: 1,
            ..Placement::Mig.config()
        },
    );
    s.on_event(submit("a", 2)).unwrap();
    for (job, n) in [("b", 2), ("c", 1), ("d", 1)] {
        s.on_event(submit(job, n)).unwrap();
        assert!(waiting(&s, job), "{job} waits at the slot cap");
    }
    // a ends: b, the oldest, takes the machine, though c and d were many.
    s.on_event(exit("a")).unwrap();
    assert!(!waiting(&s, "b") && waiting(&s, "c") && waiting(&s, "d"));
    s.on_event(exit("b")).unwrap();
    assert!(!waiting(&s, "c") && !waiting(&s, "d"));
    s.check_invariants().unwrap();
}

fn submit_est(job: &str, n: u32, estimate: f64) -> Event {
    match submit(job, n) {
        Event::Submit {
            job,
            vps,
            memory_mb,
            only,
            ..
        } => Event::Submit {
            job,
            vps,
            memory_mb,
            only,
            estimate: Some(estimate),
        },
        e => e,
    }
}

#[test]
fn backfilling_starts_a_job_only_where_it_keeps_the_promise_to_the_oldest() {
    let mut s = mig(
        8,
        SchedConfig {
            max_slots: 1,
            ..Placement::Mig.config()
        },
    );
    // a holds 5 of the 8 processors until 100; b needs 6: it is promised
    // the slot at 100, when a's processors are free.
    s.on_event_at(0.0, submit_est("a", 5, 100.0)).unwrap();
    s.on_event_at(0.0, submit_est("b", 6, 10.0)).unwrap();
    assert!(waiting(&s, "b"));
    assert_eq!(s.reservation(), Some(("b", 0, 100.0)));
    // c runs long, but on 2 of the 8 cells b leaves free even then.
    s.on_event_at(0.0, submit_est("c", 2, 1000.0)).unwrap();
    assert!(!waiting(&s, "c"), "c takes cells b does not need");
    // d, as long, would take a cell b needs at 100: it waits, though one
    // is free now.
    s.on_event_at(0.0, submit_est("d", 1, 1000.0)).unwrap();
    assert!(waiting(&s, "d"), "d would delay b");
    // e ends by 100: it takes that cell.
    s.on_event_at(0.0, submit_est("e", 1, 50.0)).unwrap();
    assert!(!waiting(&s, "e"), "e ends before b's turn");
    s.check_invariants().unwrap();
    // e ends at 50: d still may not take its cell; the promise holds.
    s.on_event_at(50.0, exit("e")).unwrap();
    assert!(waiting(&s, "d"));
    assert_eq!(s.reservation(), Some(("b", 0, 100.0)));
    // a ends at 100: b starts as promised; d waits behind it.
    s.on_event_at(100.0, exit("a")).unwrap();
    assert!(!waiting(&s, "b") && waiting(&s, "d"));
    // d is the oldest waiting now: promised b's cells when b ends.
    assert_eq!(s.reservation(), Some(("d", 0, 110.0)));
    s.check_invariants().unwrap();
}

#[test]
fn without_estimates_no_younger_job_takes_a_cell_the_oldest_waits_for() {
    // What migd does (users give no estimates): the slot where the oldest
    // waiting job would fit first takes no younger job on the cells it
    // needs, however short, so a wide job is never passed for ever.
    let mut s = mig(
        4,
        SchedConfig {
            max_slots: 1,
            ..Placement::Mig.config()
        },
    );
    s.on_event(submit("a", 3)).unwrap();
    s.on_event(submit("wide", 4)).unwrap();
    let (job, slot, at) = s.reservation().unwrap();
    assert_eq!((job, slot), ("wide", 0));
    assert!(at.is_infinite());
    for job in ["x", "y"] {
        s.on_event(submit_est(job, 1, 1.0)).unwrap();
        assert!(waiting(&s, job), "{job} would take wide's cell");
    }
    s.on_event(exit("a")).unwrap();
    assert!(!waiting(&s, "wide"));
    assert!(waiting(&s, "x") && waiting(&s, "y"));
    s.on_event(exit("wide")).unwrap();
    assert!(!waiting(&s, "x") && !waiting(&s, "y"));
    s.check_invariants().unwrap();
}

#[test]
fn a_job_backfills_into_another_slot_than_the_promised_one() {
    // Two slots: a fills slot 0, b three of slot 1's four cells. wide (4)
    // is promised slot 0 (both are projected to empty at 200, each job
    // running half the round; slot 0 comes first). x, however long,
    // takes slot 1's free cell: nothing promised is there.
    let mut s = mig(
        4,
        SchedConfig {
            max_slots: 2,
            ..Placement::Mig.config()
        },
    );
    s.on_event_at(0.0, submit_est("a", 4, 100.0)).unwrap();
    s.on_event_at(0.0, submit_est("b", 3, 100.0)).unwrap();
    s.on_event_at(0.0, submit_est("wide", 4, 100.0)).unwrap();
    assert_eq!(s.reservation(), Some(("wide", 0, 200.0)));
    s.on_event_at(0.0, submit_est("x", 1, 10_000.0)).unwrap();
    assert!(!waiting(&s, "x"));
    assert_eq!(slots_of(&s, "x"), vec![1]);
    assert_eq!(s.reservation(), Some(("wide", 0, 200.0)));
    s.check_invariants().unwrap();
}

#[test]
fn jobs_that_may_pass_the_oldest_go_in_order_of_expansion_factor() {
    let mut s = mig(
        4,
        SchedConfig {
            max_slots: 1,
            ..Placement::Mig.config()
        },
    );
    s.on_event_at(0.0, submit_est("a", 2, 100.0)).unwrap();
    s.on_event_at(0.0, submit_est("b", 2, 20.0)).unwrap();
    s.on_event_at(0.0, submit_est("wide", 4, 100.0)).unwrap();
    s.on_event_at(0.0, submit_est("c1", 2, 50.0)).unwrap();
    s.on_event_at(10.0, submit_est("c2", 2, 10.0)).unwrap();
    assert_eq!(s.reservation(), Some(("wide", 0, 100.0)));
    // b ends at 20: both c1 and c2 would end before wide's turn at 100.
    // c2 has waited 10 s for 10 s of work (factor 2), c1 20 s for 50 s
    // (1.4): c2, the younger, gets the two cells.
    s.on_event_at(20.0, exit("b")).unwrap();
    assert!(!waiting(&s, "c2") && waiting(&s, "c1"));
    assert!(waiting(&s, "wide"));
    s.check_invariants().unwrap();
}

#[test]
fn a_job_moved_out_of_a_slot_lets_the_oldest_start_now() {
    // Three slots of four processors: slot 2 holds only d on p1. The wide
    // job (4) fits in no slot; moving d into slot 1's free cell (p3)
    // empties slot 2, and the wide job starts at once instead of being
    // promised a later start (Zhang et al.'s migration).
    let mut s = mig(
        4,
        SchedConfig {
            max_slots: 3,
            ..Placement::Mig.config()
        },
    );
    s.restore_job("a", &[0], &["p1/0", "p2/0"]).unwrap();
    s.restore_job("c", &[0], &["p3/0", "p4/0"]).unwrap();
    s.restore_job("b", &[1], &["p1/0", "p2/0"]).unwrap();
    s.restore_job("d", &[2], &["p1/0"]).unwrap();
    s.check_invariants().unwrap();
    let acts = s.on_event(submit("wide", 4)).unwrap();
    s.check_invariants().unwrap();
    assert!(!waiting(&s, "wide"), "{acts:?}");
    assert_eq!(migrations(&acts), 1, "{acts:?}");
    assert!(s.reservation().is_none());
    assert_eq!(s.vp_count(), 11);
    // Without moving jobs between slots it waits, with a promise.
    let mut s = mig(
        4,
        SchedConfig {
            max_slots: 3,
            compact: false,
            ..Placement::Mig.config()
        },
    );
    s.restore_job("a", &[0], &["p1/0", "p2/0"]).unwrap();
    s.restore_job("c", &[0], &["p3/0", "p4/0"]).unwrap();
    s.restore_job("b", &[1], &["p1/0", "p2/0"]).unwrap();
    s.restore_job("d", &[2], &["p1/0"]).unwrap();
    s.on_event(submit("wide", 4)).unwrap();
    assert!(waiting(&s, "wide"));
    assert_eq!(s.reservation().map(|r| r.0), Some("wide"));
}

#[test]
fn a_host_holds_in_all_its_slots_no_more_than_its_memory() {
    // Two hosts of 4 GB each. a's VPs take 3 GB on each: b, as big, finds
    // free cells in a second slot but no memory, and waits; c (500 MB a
    // VP) fits in what is left. a's end lets b start, and c beside it.
    for placement in Placement::ALL {
        let mut s = Scheduler::new(placement.config());
        for i in 1..=2 {
            s.on_event(Event::NewProcessor {
                id: format!("p{i}/0"),
                host: format!("p{i}"),
                arch: "x86_64".into(),
                capacity: 1.0,
                memory_mb: Some(4000),
            })
            .unwrap();
        }
        let with_memory = |job: &str, mb: u64| match submit(job, 2) {
            Event::Submit {
                job,
                vps,
                only,
                estimate,
                ..
            } => Event::Submit {
                job,
                vps,
                memory_mb: Some(mb),
                only,
                estimate,
            },
            e => e,
        };
        s.on_event(with_memory("a", 3000)).unwrap();
        s.on_event(with_memory("b", 3000)).unwrap();
        s.on_event(with_memory("c", 500)).unwrap();
        s.check_invariants().unwrap();
        assert!(!waiting(&s, "a"), "{placement}");
        assert!(
            waiting(&s, "b"),
            "{placement}: b would oversubscribe memory"
        );
        // Under mig, c may not take memory b waits for: no estimate says
        // it would give it back in time.
        assert_eq!(waiting(&s, "c"), placement == Placement::Mig, "{placement}");
        s.on_event(exit("a")).unwrap();
        s.check_invariants().unwrap();
        assert!(!waiting(&s, "b") && !waiting(&s, "c"), "{placement}");
    }
}

#[test]
fn an_estimate_that_is_not_a_number_of_seconds_is_refused() {
    let mut s = mig(2, Placement::Mig.config());
    for bad in [-1.0, f64::NAN, f64::INFINITY] {
        let e = s.on_event(submit_est("a", 1, bad)).unwrap_err();
        assert!(matches!(e, SchedError::BadEstimate { .. }), "{e}");
    }
    assert!(s.job_view("a").is_none());
}

#[test]
fn the_papers_example_1_places_the_same_under_mig() {
    // Seed 000's Example 1: 20 VPs on capacities 10, 1, 4, 3 take MTAT's
    // assignment 12, 1, 4, 3 (T = 1.2) however the map is kept.
    let mut s = Scheduler::new(Placement::Mig.config());
    for (i, c) in [10.0, 1.0, 4.0, 3.0].into_iter().enumerate() {
        s.on_event(Event::NewProcessor {
            id: format!("p{}/0", i + 1),
            host: format!("p{}", i + 1),
            arch: "x86_64".into(),
            capacity: c,
            memory_mb: None,
        })
        .unwrap();
    }
    s.on_event(submit("j", 20)).unwrap();
    let v = s.job_view("j").unwrap();
    let mut per: BTreeMap<String, usize> = BTreeMap::new();
    for p in v.placement.values() {
        *per.entry(p.clone()).or_default() += 1;
    }
    let want: BTreeMap<String, usize> = [("p1/0", 12), ("p2/0", 1), ("p3/0", 4), ("p4/0", 3)]
        .into_iter()
        .map(|(p, n)| (p.to_string(), n))
        .collect();
    assert_eq!(per, want);
    assert!((v.t_min - 1.2).abs() < 1e-12);
    s.check_invariants().unwrap();
}

#[test]
fn a_vp_moved_by_hand_stays_where_it_was_put() {
    // j1's two VPs on h0 and h1; VP 1 moved by hand onto h0, beside VP 0:
    // the map follows it there and the scheduler does not move it back to
    // the processor it left, though the job would be faster there.
    let mut s = Scheduler::new(SchedConfig {
        pin_new_vps: true,
        ..Placement::Mig.config()
    });
    for e in processors(3) {
        s.on_event(e).unwrap();
    }
    s.on_event(submit("j1", 2)).unwrap();
    for vp in 0..2 {
        s.on_event(Event::VpMovable {
            job: "j1".into(),
            vp,
        })
        .unwrap();
    }
    let v = s.job_view("j1").unwrap();
    let there = v.placement[&0].split('/').next().unwrap().to_string();
    let acts = s
        .on_event(Event::VpMoved {
            job: "j1".into(),
            vp: 1,
            host: there.clone(),
        })
        .unwrap();
    s.check_invariants().unwrap();
    assert_eq!(migrations(&acts), 0, "{acts:?}");
    let v = s.job_view("j1").unwrap();
    assert!(v.placement[&1].starts_with(&there), "{v:?}");
}

#[test]
fn a_suspended_job_gives_its_cells_to_others_and_is_placed_again_when_resumed() {
    for placement in Placement::ALL {
        let mut s = Scheduler::new(SchedConfig {
            max_slots: 1,
            ..placement.config()
        });
        for e in processors(2) {
            s.on_event(e).unwrap();
        }
        s.on_event(submit("a", 2)).unwrap();
        s.on_event(submit("b", 2)).unwrap();
        assert!(waiting(&s, "b"), "{placement}: one slot, b waits");
        // a is suspended: its VPs are held where they are, b takes its place.
        let acts = s.on_event(Event::Suspend { job: "a".into() }).unwrap();
        s.check_invariants().unwrap();
        let held = acts
            .iter()
            .filter(|x| matches!(x, Action::Hold { job, .. } if &**job == "a"))
            .count();
        assert_eq!(held, 2, "{placement}: {acts:?}");
        assert!(s.job_view("a").unwrap().suspended);
        assert!(!waiting(&s, "b"), "{placement}: b runs in a's cells");
        // Suspended twice, or resumed while running: refused, nothing changes.
        let err = s.on_event(Event::Suspend { job: "a".into() }).unwrap_err();
        assert!(err.to_string().contains("already suspended"), "{err}");
        let err = s.on_event(Event::Resume { job: "b".into() }).unwrap_err();
        assert!(err.to_string().contains("not suspended"), "{err}");
        // Resumed while b holds the only slot: a waits, then runs when b ends.
        s.on_event(Event::Resume { job: "a".into() }).unwrap();
        assert!(!s.job_view("a").unwrap().suspended);
        assert!(waiting(&s, "a"), "{placement}");
        let acts = s.on_event(exit("b")).unwrap();
        s.check_invariants().unwrap();
        assert!(!waiting(&s, "a"), "{placement}: {acts:?}");
        assert_eq!(s.vp_count(), 2);
    }
}

#[test]
fn a_vp_goes_only_where_its_host_offers_the_memory_it_needs() {
    for policy in Placement::ALL {
        let mut s = Scheduler::new(policy.config());
        for (i, mem) in [Some(1000), Some(8000), None, Some(2000)]
            .into_iter()
            .enumerate()
        {
            s.on_event(Event::NewProcessor {
                id: format!("p{i}/0"),
                host: format!("p{i}"),
                arch: "x86_64".into(),
                capacity: 1.0,
                memory_mb: mem,
            })
            .unwrap();
        }
        // 4 GB a VP: only p1 (8 GB) and p2 (unknown) may hold them, so the
        // four VPs double up there.
        s.on_event(Event::Submit {
            job: "big".into(),
            vps: BTreeMap::from([("x86_64".to_string(), 4)]),
            memory_mb: Some(4000),
            only: None,
            estimate: None,
        })
        .unwrap();
        let v = s.job_view("big").unwrap();
        let mut on: Vec<&str> = v.placement.values().map(String::as_str).collect();
        on.sort_unstable();
        assert_eq!(on, ["p1/0", "p1/0", "p2/0", "p2/0"], "{policy:?}");
        // The host that does not say leaves: no host offers 64 GB, so that
        // job's VP waits while the rest goes on.
        s.on_event(Event::ProcessorExit { id: "p2/0".into() })
            .unwrap();
        s.on_event(Event::Submit {
            job: "huge".into(),
            vps: BTreeMap::from([("x86_64".to_string(), 1)]),
            memory_mb: Some(64_000),
            only: None,
            estimate: None,
        })
        .unwrap();
        assert!(waiting(&s, "huge"), "{policy:?}");
        let v = s.job_view("big").unwrap();
        assert!(
            v.placement.values().all(|p| p == "p1/0"),
            "{policy:?} {v:?}"
        );
        s.check_invariants().unwrap();
    }
}

#[test]
fn a_job_with_chosen_processors_runs_only_there_until_one_leaves() {
    for policy in Placement::ALL {
        // p1/0 .. p4/0.
        let mut s = mig(4, policy.config());
        // Three VPs on one chosen processor (a cluster kept together)
        // share it, though three others are free.
        s.on_event(Event::Submit {
            job: "c".into(),
            vps: BTreeMap::from([("x86_64".to_string(), 3)]),
            memory_mb: None,
            only: Some(vec!["p2/0".into(), "nowhere/0".into()]),
            estimate: None,
        })
        .unwrap();
        s.check_invariants().unwrap();
        let on = |s: &Scheduler| {
            let mut on: Vec<String> = s.job_view("c").unwrap().placement.into_values().collect();
            on.sort_unstable();
            on
        };
        assert_eq!(on(&s), ["p2/0", "p2/0", "p2/0"], "{policy:?}");
        // Another job's arrivals and exits do not free it.
        s.on_event(submit("d", 2)).unwrap();
        s.on_event(exit("d")).unwrap();
        assert_eq!(on(&s), ["p2/0", "p2/0", "p2/0"], "{policy:?}");
        // Its processor leaves: the job goes anywhere.
        s.on_event(Event::ProcessorExit { id: "p2/0".into() })
            .unwrap();
        s.check_invariants().unwrap();
        let now = on(&s);
        assert_eq!(now.len(), 3, "{policy:?}");
        assert!(now.iter().all(|p| p != "p2/0"));
        let distinct: std::collections::BTreeSet<&String> = now.iter().collect();
        assert!(distinct.len() > 1, "{policy:?}: {now:?}");
    }
}

#[test]
fn a_choice_that_leaves_the_job_nowhere_is_ignored() {
    let mut s = mig(1, Placement::Mig.config());
    s.on_event(Event::Submit {
        job: "c".into(),
        vps: BTreeMap::from([("x86_64".to_string(), 1)]),
        memory_mb: None,
        only: Some(vec!["gone/0".into()]),
        estimate: None,
    })
    .unwrap();
    assert_eq!(
        s.job_view("c")
            .unwrap()
            .placement
            .into_values()
            .collect::<Vec<_>>(),
        ["p1/0"]
    );
}

#[test]
fn the_scheduler_never_moves_a_started_vp_of_a_chosen_job_by_choice() {
    for policy in Placement::ALL {
        let mut s = mig(3, policy.config());
        s.on_event(Event::Submit {
            job: "bag".into(),
            vps: BTreeMap::from([("x86_64".to_string(), 4)]),
            memory_mb: None,
            only: Some(vec!["p1/0".into(), "p2/0".into()]),
            estimate: None,
        })
        .unwrap();
        let v = s.job_view("bag").unwrap();
        let on_p1: Vec<u32> = v
            .placement
            .iter()
            .filter(|(_, p)| *p == "p1/0")
            .map(|(&i, _)| i)
            .collect();
        assert_eq!(on_p1.len(), 2, "{policy:?} {v:?}");
        // p1's two end: MTAT would now spread the rest 1/1; the choice
        // keeps them where they are (a placement policy moves them).
        for vp in on_p1 {
            let acts = s
                .on_event(Event::VpExit {
                    job: "bag".into(),
                    vp,
                })
                .unwrap();
            assert!(
                !acts.iter().any(|a| matches!(a, Action::Migrate { .. })),
                "{policy:?} {acts:?}"
            );
        }
        s.check_invariants().unwrap();
        let v = s.job_view("bag").unwrap();
        assert!(
            v.placement.values().all(|p| p == "p2/0"),
            "{policy:?} {v:?}"
        );
    }
}

#[test]
fn a_job_that_loses_a_processor_moves_only_the_vps_it_had_there() {
    for repair in [true, false] {
        let mut s = mig(
            6,
            SchedConfig {
                repair_in_place: repair,
                ..Placement::Mig.config()
            },
        );
        s.on_event(submit("a", 4)).unwrap();
        let before = s.job_view("a").unwrap();
        let gone = before.placement[&1].clone();
        let acts = s
            .on_event(Event::ProcessorExit { id: gone.clone() })
            .unwrap();
        s.check_invariants().unwrap();
        let after = s.job_view("a").unwrap();
        // The VP that was there moved; every other stayed where it was.
        assert_eq!(migrations(&acts), 1, "repair {repair}: {acts:?}");
        assert!(
            acts.iter()
                .any(|a| matches!(a, Action::Migrate { vp: 1, from, .. } if **from == *gone)),
            "{acts:?}"
        );
        for (vp, p) in &before.placement {
            if *vp != 1 {
                assert_eq!(after.placement[vp], *p, "repair {repair}");
            }
        }
        assert_ne!(after.placement[&1], gone);
        // As fast as before: one VP a processor.
        assert_eq!(after.t_min, before.t_min);
        assert!(after.waiting.is_empty());
    }
}

#[test]
fn a_job_left_without_room_for_its_vps_by_its_best_turnaround_is_planned_again() {
    // Four VPs on four processors, none free: the VP of the one that
    // leaves doubles up, and the job runs at half its pace.
    let mut s = mig(4, Placement::Mig.config());
    s.on_event(submit("a", 4)).unwrap();
    assert_eq!(s.job_view("a").unwrap().t_min, 1.0);
    let acts = s
        .on_event(Event::ProcessorExit { id: "p3/0".into() })
        .unwrap();
    s.check_invariants().unwrap();
    let v = s.job_view("a").unwrap();
    assert_eq!(v.placement.len(), 4, "{acts:?}");
    assert_eq!(v.t_min, 2.0);
    assert!(v.placement.values().all(|p| p != "p3/0"));
    // Its last processor of an architecture gone, a VP is held, not lost.
    let mut s = mig(2, Placement::Mig.config());
    s.on_event(Event::NewProcessor {
        id: "arm/0".into(),
        host: "arm".into(),
        arch: "aarch64".into(),
        capacity: 1.0,
        memory_mb: None,
    })
    .unwrap();
    s.on_event(Event::Submit {
        job: "m".into(),
        vps: BTreeMap::from([("x86_64".to_string(), 2), ("aarch64".to_string(), 1)]),
        memory_mb: None,
        only: None,
        estimate: None,
    })
    .unwrap();
    let acts = s
        .on_event(Event::ProcessorExit { id: "arm/0".into() })
        .unwrap();
    s.check_invariants().unwrap();
    assert!(
        acts.iter().any(|a| matches!(a, Action::Hold { .. })),
        "{acts:?}"
    );
    assert_eq!(s.job_view("m").unwrap().waiting.len(), 1);
}

/// Two jobs on p1-p2 and p3-p4 in one slot, and in the other a job on p2
/// and p3: no job can be lent the other's slot.
fn straddled(cfg: SchedConfig) -> Scheduler {
    let mut s = mig(4, cfg);
    s.restore_job("x", &[0], &["p1/0", "p2/0"]).unwrap();
    s.restore_job("z", &[0], &["p3/0", "p4/0"]).unwrap();
    s.restore_job("y", &[1], &["p2/0", "p3/0"]).unwrap();
    s.check_invariants().unwrap();
    s
}

fn processors_of(s: &Scheduler, job: &str) -> Vec<String> {
    let mut p: Vec<String> = s.job_view(job).unwrap().placement.into_values().collect();
    p.sort();
    p
}

#[test]
fn alignment_puts_a_job_on_another_slots_job_so_that_the_rest_is_lent() {
    let mut s = straddled(Placement::Mig.config());
    // Any event ends with the pass that aligns and lends.
    let acts = s
        .on_event(Event::VpMovable {
            job: "y".into(),
            vp: 0,
        })
        .unwrap();
    s.check_invariants().unwrap();
    let y = processors_of(&s, "y");
    assert!(
        y == ["p1/0", "p2/0"] || y == ["p3/0", "p4/0"],
        "{y:?}: {acts:?}"
    );
    // The job it no longer sits on runs in both slots; nobody got slower.
    let free = if y[0] == "p1/0" { "z" } else { "x" };
    assert_eq!(slots_of(&s, free).len(), 2, "{acts:?}");
    for job in ["x", "y", "z"] {
        assert_eq!(s.job_view(job).unwrap().t_min, 1.0);
    }
    assert_eq!(s.map().columns().len(), 2);
    // Without alignment nothing moves and nobody is lent a slot.
    let mut plain = straddled(SchedConfig {
        align: false,
        ..Placement::Mig.config()
    });
    let acts = plain
        .on_event(Event::VpMovable {
            job: "y".into(),
            vp: 0,
        })
        .unwrap();
    assert_eq!(migrations(&acts), 0);
    assert_eq!(processors_of(&plain, "y"), ["p2/0", "p3/0"]);
    assert!(["x", "z"].iter().all(|j| slots_of(&plain, j).len() == 1));
}

#[test]
fn alignment_never_moves_a_vp_that_cannot_be_moved() {
    let mut s = straddled(SchedConfig {
        pin_new_vps: true,
        ..Placement::Mig.config()
    });
    let acts = s
        .on_event(Event::VpMovable {
            job: "x".into(),
            vp: 0,
        })
        .unwrap();
    s.check_invariants().unwrap();
    assert_eq!(migrations(&acts), 0, "{acts:?}");
    assert_eq!(processors_of(&s, "y"), ["p2/0", "p3/0"]);
}
