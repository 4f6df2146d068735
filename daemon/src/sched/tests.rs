//! Scheduler tests: the paper's examples and Figure 1 through the event
//! interface, and properties over random event streams.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::random::{Generator, Shape};
use super::*;

fn proc_event(id: &str, arch: &str, capacity: f64) -> Event {
    Event::NewProcessor {
        id: id.into(),
        host: id.split('/').next().unwrap_or(id).into(),
        arch: arch.into(),
        capacity,
        memory_mb: None,
    }
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

fn pool(caps: &[f64]) -> Scheduler {
    let mut s = Scheduler::default();
    for (i, &c) in caps.iter().enumerate() {
        s.on_event(proc_event(&format!("p{}/0", i + 1), "x86_64", c))
            .unwrap();
    }
    s
}

/// VPs per processor id of one job.
fn counts(s: &Scheduler, job: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for p in s.job_view(job).unwrap().placement.values() {
        *out.entry(p.clone()).or_default() += 1;
    }
    out
}

fn by_proc(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|&(p, n)| (p.to_string(), n)).collect()
}

#[test]
fn example_1_submission_places_the_mtat_assignment() {
    let mut s = pool(&[10.0, 1.0, 4.0, 3.0]);
    let actions = s.on_event(submit("j", 20)).unwrap();
    assert_eq!(
        counts(&s, "j"),
        by_proc(&[("p1/0", 12), ("p2/0", 1), ("p3/0", 4), ("p4/0", 3)])
    );
    assert!((s.job_view("j").unwrap().t_min - 1.2).abs() < 1e-12);
    assert_eq!(
        actions
            .iter()
            .filter(|a| matches!(a, Action::Start { .. }))
            .count(),
        20
    );
    assert!(matches!(
        actions.last(),
        Some(Action::SlotTables { slots: 1, .. })
    ));
    s.check_invariants().unwrap();
}

#[test]
fn example_2_submission_is_compressed_to_two_processors() {
    let mut s = pool(&[1.0, 1.0, 1.0]);
    s.on_event(submit("j", 4)).unwrap();
    assert_eq!(counts(&s, "j"), by_proc(&[("p1/0", 2), ("p2/0", 2)]));
    // The freed processor is offered to the next job in the same slot.
    s.on_event(submit("k", 1)).unwrap();
    assert_eq!(counts(&s, "k"), by_proc(&[("p3/0", 1)]));
    assert_eq!(s.map().columns().len(), 1);
    s.check_invariants().unwrap();
}

#[test]
fn example_3_submission_matches_figure_4b() {
    let mut s = pool(&[4.0, 2.0, 1.0]);
    s.on_event(submit("j", 9)).unwrap();
    assert_eq!(counts(&s, "j"), by_proc(&[("p1/0", 6), ("p2/0", 3)]));
    assert!((s.job_view("j").unwrap().t_min - 1.5).abs() < 1e-12);
}

/// Figure 1: six processors, eight jobs in five slots.
fn figure_1() -> Scheduler {
    let mut s = pool(&[1.0; 6]);
    let p = |i: usize| format!("p{i}/0");
    let place = |s: &mut Scheduler, job: &str, slot: usize, procs: &[usize]| {
        let ids: Vec<String> = procs.iter().map(|&i| p(i)).collect();
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        s.restore_job(job, &[slot], &refs).unwrap();
    };
    place(&mut s, "J1", 0, &[1, 2, 3, 4, 5, 6]);
    place(&mut s, "J2", 1, &[1, 2]);
    place(&mut s, "J3", 1, &[3, 4, 5, 6]);
    place(&mut s, "J4", 2, &[1]);
    place(&mut s, "J5", 2, &[2]);
    place(&mut s, "J6", 2, &[3, 4]);
    place(&mut s, "J7", 3, &[1, 2, 3, 4]);
    place(&mut s, "J8", 4, &[1, 2, 3, 4, 5, 6]);
    s.check_invariants().unwrap();
    s
}

#[test]
fn figure_1_processor_exit_doubles_up_and_compresses() {
    let mut s = figure_1();
    let actions = s
        .on_event(Event::ProcessorExit { id: "p1/0".into() })
        .unwrap();
    s.check_invariants().unwrap();
    // The paper: J1 doubles up and is compressed onto P2, P3, P4, freeing P5
    // and P6 in slot T1 without slowing J1 further.
    assert_eq!(
        counts(&s, "J1"),
        by_proc(&[("p2/0", 2), ("p3/0", 2), ("p4/0", 2)])
    );
    let t1 = &s.table()[0];
    assert!(t1.iter().all(|c| c.job == "J1"));
    assert_eq!(t1.len(), 3);
    // J2 has no free cell in T2: its VP doubles up on P2.
    assert_eq!(counts(&s, "J2"), by_proc(&[("p2/0", 2)]));
    // J4 and J7 move into the free cells of their slots.
    assert_eq!(counts(&s, "J4"), by_proc(&[("p5/0", 1)]));
    assert_eq!(
        counts(&s, "J7"),
        by_proc(&[("p2/0", 1), ("p3/0", 1), ("p4/0", 1), ("p5/0", 1)])
    );
    // J8 is compressed like J1.
    assert_eq!(
        counts(&s, "J8"),
        by_proc(&[("p2/0", 2), ("p3/0", 2), ("p4/0", 2)])
    );
    // Every VP that was on P1 migrated; J1 and J8 each also moved two VPs to compress.
    let migrations = actions
        .iter()
        .filter(|a| matches!(a, Action::Migrate { .. }))
        .count();
    assert_eq!(migrations, 1 + 2 + 1 + 1 + 1 + 1 + 2);
    assert!(actions.iter().any(
        |a| matches!(a, Action::Migrate { job, from, .. } if &**job == "J4" && &**from == "p1/0")
    ));
    assert_eq!(s.map().columns().len(), 5);
}

#[test]
fn new_processor_expands_a_doubled_up_job_only_when_it_gets_faster() {
    let mut s = pool(&[1.0, 1.0]);
    s.on_event(submit("j", 4)).unwrap();
    assert!((s.job_view("j").unwrap().t_min - 2.0).abs() < 1e-12);
    let actions = s.on_event(proc_event("p3/0", "x86_64", 1.0)).unwrap();
    // 4 VPs on 3 processors still take 2 time units: no migration.
    assert!(!actions.iter().any(|a| matches!(a, Action::Migrate { .. })));
    let actions = s.on_event(proc_event("p4/0", "x86_64", 1.0)).unwrap();
    assert_eq!(
        actions
            .iter()
            .filter(|a| matches!(a, Action::Migrate { .. }))
            .count(),
        2
    );
    assert!((s.job_view("j").unwrap().t_min - 1.0).abs() < 1e-12);
    s.check_invariants().unwrap();
}

#[test]
fn a_second_job_uses_free_space_before_adding_a_slot() {
    let mut s = pool(&[1.0; 4]);
    s.on_event(submit("a", 2)).unwrap();
    // a needs 2 processors at T = 1 (Compression), leaving two free cells.
    s.on_event(submit("b", 2)).unwrap();
    assert_eq!(s.map().columns().len(), 1);
    // A third job can only get T = 1 in a new slot.
    s.on_event(submit("c", 4)).unwrap();
    assert_eq!(s.map().columns().len(), 2);
    s.check_invariants().unwrap();
}

#[test]
fn vps_without_a_processor_of_their_architecture_wait_and_are_never_lost() {
    let mut s = pool(&[1.0, 1.0]);
    let actions = s
        .on_event(Event::Submit {
            job: "j".into(),
            vps: BTreeMap::from([("x86_64".to_string(), 2), ("aarch64".to_string(), 1)]),
            memory_mb: None,
            only: None,
            estimate: None,
        })
        .unwrap();
    // VP 0 is aarch64 (architectures in name order), VPs 1 and 2 are x86_64.
    assert!(actions.iter().any(|a| matches!(
        a,
        Action::Hold {
            vp: 0,
            processor: None,
            ..
        }
    )));
    assert_eq!(s.job_view("j").unwrap().waiting, vec![0]);
    let actions = s.on_event(proc_event("arm/0", "aarch64", 1.0)).unwrap();
    assert!(actions
        .iter()
        .any(|a| matches!(a, Action::Start { vp: 0, processor, .. } if &**processor == "arm/0")));
    assert!(s.job_view("j").unwrap().waiting.is_empty());
    // The aarch64 processor leaves: VP 0 is held where it is, then moves back
    // when another aarch64 processor arrives.
    let actions = s
        .on_event(Event::ProcessorExit { id: "arm/0".into() })
        .unwrap();
    assert!(actions
        .iter()
        .any(|a| matches!(a, Action::Hold { vp: 0, processor: Some(p), .. } if &**p == "arm/0")));
    let actions = s.on_event(proc_event("arm2/0", "aarch64", 1.0)).unwrap();
    assert!(actions
        .iter()
        .any(|a| matches!(a, Action::Migrate { vp: 0, from, to, .. } if &**from == "arm/0" && &**to == "arm2/0")));
    s.check_invariants().unwrap();
}

#[test]
fn last_vp_exit_removes_the_job_and_its_slot() {
    let mut s = pool(&[1.0; 2]);
    s.on_event(submit("a", 2)).unwrap();
    s.on_event(submit("b", 2)).unwrap();
    assert_eq!(s.map().columns().len(), 2);
    s.on_event(Event::VpExit {
        job: "a".into(),
        vp: 0,
    })
    .unwrap();
    let actions = s
        .on_event(Event::VpExit {
            job: "a".into(),
            vp: 1,
        })
        .unwrap();
    assert!(s.job_view("a").is_none());
    assert_eq!(s.map().columns().len(), 1);
    assert!(matches!(
        actions.last(),
        Some(Action::SlotTables { slots: 1, .. })
    ));
    s.check_invariants().unwrap();
}

#[test]
fn a_vp_back_from_a_checkpoint_is_placed_again_under_its_own_index() {
    let mut s = pool(&[1.0; 2]);
    s.on_event(submit("a", 2)).unwrap();
    s.on_event(Event::VpExit {
        job: "a".into(),
        vp: 1,
    })
    .unwrap();
    assert_eq!(s.job_view("a").unwrap().placement.len(), 1);
    let back = |vp| Event::VpBack {
        job: "a".into(),
        vp,
        arch: "x86_64".into(),
    };
    let actions = s.on_event(back(1)).unwrap();
    let view = s.job_view("a").unwrap();
    assert_eq!(
        view.placement.keys().copied().collect::<Vec<_>>(),
        vec![0, 1]
    );
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::Start { vp: 1, .. })),
        "{actions:?}"
    );
    // Only an index the job had and has no longer comes back.
    for vp in [1, 2] {
        let err = s.on_event(back(vp)).unwrap_err();
        assert!(err.to_string().contains("cannot come back"), "{err}");
    }
    // A VP spawned later still gets a new index.
    s.on_event(Event::NewVp {
        job: "a".into(),
        arch: "x86_64".into(),
        host: None,
    })
    .unwrap();
    assert!(s.job_view("a").unwrap().placement.contains_key(&2));
    s.check_invariants().unwrap();
}

#[test]
fn a_new_vp_asked_on_a_host_goes_there_when_the_job_may_use_it() {
    // Three processors of capacity 1; a job of 2 on two of them. A new VP
    // asked on each host in turn lands on that host, the gang invariant
    // holding; on a host the scheduler does not know it is placed as any.
    for want in ["p1", "p2", "p3"] {
        let mut s = pool(&[1.0; 3]);
        s.on_event(submit("a", 2)).unwrap();
        s.on_event(Event::NewVp {
            job: "a".into(),
            arch: "x86_64".into(),
            host: Some(want.into()),
        })
        .unwrap();
        let at = s.job_view("a").unwrap().placement[&2].clone();
        assert!(at.starts_with(&format!("{want}/")), "{want}: VP 2 on {at}");
        s.check_invariants().unwrap();
    }
    let mut s = pool(&[1.0; 3]);
    s.on_event(submit("a", 2)).unwrap();
    s.on_event(Event::NewVp {
        job: "a".into(),
        arch: "x86_64".into(),
        host: Some("nowhere".into()),
    })
    .unwrap();
    assert!(s.job_view("a").unwrap().placement.contains_key(&2));
    s.check_invariants().unwrap();
}

#[test]
fn a_vp_moved_by_hand_takes_its_place_in_the_map_with_it() {
    let mut s = pool(&[1.0; 3]);
    s.on_event(submit("a", 2)).unwrap();
    let at = |s: &Scheduler, vp: u32| s.job_view("a").unwrap().placement[&vp].clone();
    let (p0, p1) = (at(&s, 0), at(&s, 1));
    let spare = ["p1/0", "p2/0", "p3/0"]
        .into_iter()
        .find(|p| *p != p0 && *p != p1)
        .unwrap();
    let host = |p: &str| p.split('/').next().unwrap().to_string();
    let moved = |vp, h: &str| Event::VpMoved {
        job: "a".into(),
        vp,
        host: h.to_string(),
    };
    // To a free processor: the old one is freed, the host's table changes.
    let actions = s.on_event(moved(0, &host(spare))).unwrap();
    assert_eq!(at(&s, 0), spare);
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::SlotTables { hosts, .. } if hosts.contains(&host(spare)))),
        "{actions:?}"
    );
    s.check_invariants().unwrap();
    // To the host of its partner, whose only processor the job holds: the
    // two share it.
    s.on_event(moved(0, &host(&p1))).unwrap();
    assert_eq!((at(&s, 0), at(&s, 1)), (p1.clone(), p1.clone()));
    s.check_invariants().unwrap();
    // Where it already is: nothing changes.
    let gen = s.generation();
    s.on_event(moved(0, &host(&p1))).unwrap();
    assert_eq!(s.generation(), gen);
    // Nowhere to go, or no such VP: refused, nothing changed.
    for (e, msg) in [
        (moved(0, "nowhere"), "no processor of nowhere"),
        (moved(9, &host(spare)), "has no VP 9"),
    ] {
        let err = s.on_event(e).unwrap_err();
        assert!(err.to_string().contains(msg), "{err}");
    }
    assert_eq!(at(&s, 0), p1);
    s.check_invariants().unwrap();
}

#[test]
fn job_exit_kills_its_vps_and_repacking_deletes_a_slot() {
    // Slot 0: a on p1, b on p2; slot 1: c on p1, d on p2... built by hand so
    // that after c leaves, d can shift into slot 0 only if b is gone.
    let mut s = pool(&[1.0; 2]);
    s.restore_job("a", &[0], &["p1/0"]).unwrap();
    s.restore_job("b", &[1], &["p2/0"]).unwrap();
    s.restore_job("c", &[1], &["p1/0"]).unwrap();
    s.restore_job("d", &[2], &["p2/0"]).unwrap();
    s.restore_job("e", &[2], &["p1/0"]).unwrap();
    let actions = s.on_event(Event::JobExit { job: "c".into() }).unwrap();
    assert!(actions
        .iter()
        .any(|a| matches!(a, Action::Kill { job, .. } if &**job == "c")));
    // Rows: p1 holds a, e; p2 holds b, d: two slots suffice, and no VP moved.
    assert_eq!(s.map().columns().len(), 2);
    assert!(!actions.iter().any(|a| matches!(a, Action::Migrate { .. })));
    s.check_invariants().unwrap();
}

#[test]
fn repacking_can_be_switched_off() {
    let mut s = Scheduler::new(SchedConfig {
        repack: false,
        ..SchedConfig::default()
    });
    for i in 1..=2 {
        s.on_event(proc_event(&format!("p{i}/0"), "x86_64", 1.0))
            .unwrap();
    }
    s.restore_job("a", &[0], &["p1/0"]).unwrap();
    s.restore_job("b", &[1], &["p2/0"]).unwrap();
    s.restore_job("c", &[1], &["p1/0"]).unwrap();
    s.restore_job("d", &[2], &["p2/0"]).unwrap();
    s.restore_job("e", &[2], &["p1/0"]).unwrap();
    s.on_event(Event::JobExit { job: "c".into() }).unwrap();
    assert_eq!(s.map().columns().len(), 3);
}

#[test]
fn the_fairness_queue_starts_from_a_different_job_each_event() {
    let mut s = pool(&[1.0; 2]);
    s.on_event(submit("a", 1)).unwrap();
    s.on_event(submit("b", 1)).unwrap();
    s.on_event(submit("c", 1)).unwrap();
    let first = s.job_ids()[0].clone();
    s.on_event(proc_event("p9/0", "x86_64", 1.0)).unwrap();
    assert_ne!(s.job_ids()[0], first);
}

#[test]
fn bad_events_are_refused_and_change_nothing() {
    let mut s = pool(&[1.0]);
    s.on_event(submit("a", 1)).unwrap();
    let gen = s.generation();
    for (e, msg) in [
        (proc_event("p1/0", "x86_64", 1.0), "already in the pool"),
        (proc_event("z", "x86_64", 0.0), "capacity must be"),
        (proc_event("z", "x86_64", f64::NAN), "capacity must be"),
        (proc_event("z", "x86_64", f64::INFINITY), "capacity must be"),
        (proc_event("", "x86_64", 1.0), "must not be empty"),
        (
            Event::ProcessorExit { id: "nope".into() },
            "unknown processor",
        ),
        (submit("a", 1), "already exists"),
        (submit("b", 0), "has no VPs"),
        (submit("b", u32::MAX), "more than"),
        (
            Event::VpExit {
                job: "a".into(),
                vp: 7,
            },
            "has no VP 7",
        ),
        (Event::JobExit { job: "zz".into() }, "unknown job"),
        (
            Event::NewVp {
                job: "zz".into(),
                arch: "x86_64".into(),
                host: None,
            },
            "unknown job",
        ),
    ] {
        let err = s.on_event(e).unwrap_err();
        assert!(err.to_string().contains(msg), "{err} lacks {msg}");
    }
    assert_eq!(s.generation(), gen);
    s.check_invariants().unwrap();
}

fn replay_random(
    seed: u64,
    n: usize,
    shape: Shape,
    budget: usize,
    placement: Placement,
) -> (Vec<Vec<Action>>, Scheduler, Generator) {
    let mut g = Generator::new(seed, shape);
    let mut s = Scheduler::new(SchedConfig {
        max_migrations_per_event: budget,
        compact_moves: budget,
        max_slots: 3 + (seed % 4) as usize,
        ..placement.config()
    });
    let mut out = Vec::new();
    for e in g.pool() {
        out.push(s.on_event(e).unwrap());
    }
    for _ in 0..n {
        let e = g.event();
        out.push(
            s.on_event(e.clone())
                .unwrap_or_else(|err| panic!("{e:?}: {err}")),
        );
        if let Err(why) = s.check_invariants() {
            panic!("after {e:?}: {why}");
        }
        assert_eq!(s.vp_count(), g.vp_count(), "a VP was lost after {e:?}");
    }
    (out, s, g)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_event_streams_keep_every_invariant(seed in any::<u64>(), two_arch in any::<bool>(), budget in 0usize..6, policy in 0usize..3) {
        let placement = Placement::ALL[policy];
        let shape = Shape {
            processors: 6,
            per_host: 2,
            arches: if two_arch { vec!["x86_64".into(), "aarch64".into()] } else { vec!["x86_64".into()] },
            max_job: 6,
            target_jobs: 4,
            memory: true,
            chosen: true,
            ..Shape::default()
        };
        let mut g = Generator::new(seed, shape.clone());
        let mut events = g.pool();
        events.extend((0..120).map(|_| g.event()));
        let (actions, _, _) = replay_random(seed, 120, shape, budget, placement);
        // Optional migrations (whose source processor is still in the pool)
        // stay within the per-event budget (and as much again for `mig`'s
        // compaction). With several architectures a job that loses its last
        // processor of one architecture is re-placed whole, which may move
        // more of its VPs, so the bound is checked on one. A job once
        // suspended, or held whole with started VPs (the hosts' memory
        // held it nowhere once it lost a processor), is placed again
        // wherever there is room: its VPs' moves are that placement, not
        // optional.
        let budget = if placement == Placement::Mig { 2 * budget } else { budget };
        if !two_arch {
            let mut live = std::collections::BTreeSet::new();
            let mut suspended = std::collections::BTreeSet::new();
            for (e, acts) in events.iter().zip(&actions) {
                match e {
                    Event::NewProcessor { id, .. } => { live.insert(id.clone()); }
                    Event::ProcessorExit { id } => { live.remove(id); }
                    Event::Suspend { job } => { suspended.insert(job.clone()); }
                    _ => {}
                }
                for a in acts {
                    if let Action::Hold { job, processor: Some(_), .. } = a {
                        suspended.insert(job.to_string());
                    }
                }
                let optional = acts.iter().filter(|a| matches!(a, Action::Migrate { from, job, .. } if live.contains(&**from) && !suspended.contains(&**job))).count();
                prop_assert!(optional <= budget, "{optional} optional migrations > {budget} after {e:?}");
            }
        }
    }

    #[test]
    fn the_same_events_give_the_same_actions(seed in any::<u64>(), policy in 0usize..3) {
        let placement = Placement::ALL[policy];
        let (a, sa, _) = replay_random(seed, 60, Shape::default(), 16, placement);
        let (b, sb, _) = replay_random(seed, 60, Shape::default(), 16, placement);
        prop_assert_eq!(a, b);
        prop_assert_eq!(sa.table(), sb.table());
    }
}

#[test]
fn beyond_the_slot_cap_a_job_waits_until_space_appears() {
    let mut s = Scheduler::new(SchedConfig {
        max_slots: 1,
        ..SchedConfig::default()
    });
    for i in 1..=2 {
        s.on_event(proc_event(&format!("p{i}/0"), "x86_64", 1.0))
            .unwrap();
    }
    s.on_event(submit("a", 2)).unwrap();
    s.on_event(submit("b", 2)).unwrap();
    assert_eq!(s.map().columns().len(), 1);
    assert_eq!(s.job_view("b").unwrap().waiting, vec![0, 1]);
    let actions = s.on_event(Event::JobExit { job: "a".into() }).unwrap();
    assert_eq!(
        actions
            .iter()
            .filter(|a| matches!(a, Action::Start { job, .. } if &**job == "b"))
            .count(),
        2
    );
    assert!(s.job_view("b").unwrap().waiting.is_empty());
    s.check_invariants().unwrap();
}

fn pinned_pool(n: usize) -> Scheduler {
    let mut s = Scheduler::new(SchedConfig {
        pin_new_vps: true,
        ..SchedConfig::default()
    });
    for i in 1..=n {
        s.on_event(proc_event(&format!("p{i}/0"), "x86_64", 1.0))
            .unwrap();
    }
    s
}

fn migrates(actions: &[Action], job: &str, vp: u32) -> bool {
    actions
        .iter()
        .any(|a| matches!(a, Action::Migrate { job: j, vp: v, .. } if &**j == job && *v == vp))
}

#[test]
fn a_vp_that_cannot_be_moved_is_held_while_its_processor_is_away_and_goes_back_to_it() {
    let mut s = pinned_pool(3);
    s.on_event(submit("j1", 2)).unwrap();
    let on = |s: &Scheduler| -> BTreeMap<u32, String> {
        s.table()
            .iter()
            .flatten()
            .filter(|c| c.job == "j1")
            .flat_map(|c| c.vps.iter().map(|&v| (v, c.processor.clone())))
            .collect()
    };
    let before = on(&s);
    assert_eq!(before.len(), 2);
    let gone = before[&0].clone();
    // Its processor leaves: VP 0 is held (never migrated), VP 1 stays.
    let acts = s
        .on_event(Event::ProcessorExit { id: gone.clone() })
        .unwrap();
    s.check_invariants().unwrap();
    assert!(!migrates(&acts, "j1", 0), "{acts:?}");
    assert!(
        acts.iter()
            .any(|a| matches!(a, Action::Hold { vp: 0, processor: Some(p), .. } if **p == *gone)),
        "{acts:?}"
    );
    assert_eq!(on(&s).get(&1), before.get(&1));
    assert!(!on(&s).contains_key(&0));
    // Other events come and go: it stays held, nowhere else.
    s.on_event(submit("j2", 1)).unwrap();
    s.on_event(Event::JobExit { job: "j2".into() }).unwrap();
    assert!(!on(&s).contains_key(&0));
    // Its processor is back: it resumes there.
    let acts = s.on_event(proc_event(&gone, "x86_64", 1.0)).unwrap();
    s.check_invariants().unwrap();
    assert!(
        acts.iter()
            .any(|a| matches!(a, Action::Start { vp: 0, processor, .. } if **processor == *gone)),
        "{acts:?}"
    );
    assert_eq!(on(&s).get(&0), Some(&gone));
    // Once it says it can be moved, it moves like any VP.
    s.on_event(Event::VpMovable {
        job: "j1".into(),
        vp: 0,
    })
    .unwrap();
    let acts = s
        .on_event(Event::ProcessorExit { id: gone.clone() })
        .unwrap();
    assert!(migrates(&acts, "j1", 0), "{acts:?}");
}

#[test]
fn a_held_vp_that_may_now_be_moved_is_placed_at_once() {
    let mut s = pinned_pool(2);
    s.on_event(submit("j1", 2)).unwrap();
    let acts = s
        .on_event(Event::ProcessorExit { id: "p1/0".into() })
        .unwrap();
    let held: Vec<u32> = acts
        .iter()
        .filter_map(|a| match a {
            Action::Hold { vp, .. } => Some(*vp),
            _ => None,
        })
        .collect();
    assert_eq!(held.len(), 1, "{acts:?}");
    // (A restartable job's VP whose host's owner stayed: it may go.)
    let acts = s
        .on_event(Event::VpMovable {
            job: "j1".into(),
            vp: held[0],
        })
        .unwrap();
    s.check_invariants().unwrap();
    assert!(migrates(&acts, "j1", held[0]), "{acts:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn a_pinned_vp_is_never_migrated_and_never_lost(seed in any::<u64>(), every in 2usize..9, policy in 0usize..3) {
        let mut g = Generator::new(seed, Shape {
            processors: 6,
            per_host: 2,
            max_job: 5,
            target_jobs: 4,
            memory: true,
            chosen: true,
            ..Shape::default()
        });
        let mut s = Scheduler::new(SchedConfig { pin_new_vps: true, ..Placement::ALL[policy].config() });
        for e in g.pool() {
            s.on_event(e).unwrap();
        }
        let mut movable = std::collections::BTreeSet::new();
        let mut jobs: Vec<(String, u32)> = Vec::new();
        for n in 0..150usize {
            let e = g.event();
            if let Event::Submit { job, vps, .. } = &e {
                jobs.push((job.clone(), vps.values().sum()));
            }
            let acts = s.on_event(e.clone()).unwrap_or_else(|err| panic!("{e:?}: {err}"));
            for a in &acts {
                if let Action::Migrate { job, vp, .. } = a {
                    prop_assert!(movable.contains(&(job.to_string(), *vp)), "pinned {job}/{vp} migrated after {e:?}");
                }
            }
            if let Err(why) = s.check_invariants() {
                panic!("after {e:?}: {why}");
            }
            prop_assert_eq!(s.vp_count(), g.vp_count());
            // Now and then one VP says it can be moved.
            if n % every == 0 && !jobs.is_empty() {
                let (job, nvps) = jobs[n % jobs.len()].clone();
                let vp = (n as u32) % nvps.max(1);
                let e = Event::VpMovable { job: job.clone(), vp };
                if let Ok(acts) = s.on_event(e) {
                    movable.insert((job, vp));
                    for a in &acts {
                        if let Action::Migrate { job, vp, .. } = a {
                            prop_assert!(movable.contains(&(job.to_string(), *vp)));
                        }
                    }
                    s.check_invariants().unwrap();
                }
            }
        }
    }
}

/// A copy of `s` (its replicated state) under `cfg`.
fn copy_with(s: &Scheduler, cfg: SchedConfig) -> Scheduler {
    let bytes = serde_json::to_vec(s).expect("a scheduler serializes");
    serde_json::from_slice::<Scheduler>(&bytes)
        .expect("and reads back")
        .with_config(cfg)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Repair in place gives a job that lost a processor a turnaround at
    /// least as good as planning it again gives (MTAT and Compression within its columns,
    /// moving only what must move: no migration budget), holds no more of
    /// its VPs and moves no more: the same map, each processor exit that
    /// touches one job applied to two copies of it. (With several jobs
    /// touched, the order they take free processors in may favour another.)
    #[test]
    fn repair_in_place_reaches_what_planning_again_reaches(seed in any::<u64>(), memory in any::<bool>()) {
        let mut g = Generator::new(seed, Shape {
            processors: 10,
            per_host: 2,
            arches: vec!["x86_64".into(), "aarch64".into()],
            max_job: 6,
            target_jobs: 6,
            memory,
            ..Shape::default()
        });
        let cfg = |repair| SchedConfig {
            repair_in_place: repair,
            max_migrations_per_event: 0,
            ..Placement::Mtat.config()
        };
        let mut s = Scheduler::new(cfg(true));
        for e in g.pool() {
            s.on_event(e).unwrap();
        }
        let mut compared = 0;
        for _ in 0..300 {
            let e = g.event();
            let touched: Vec<String> = match &e {
                Event::ProcessorExit { id } => s
                    .job_ids()
                    .into_iter()
                    .filter(|j| s.job_view(j).is_some_and(|v| v.placement.values().any(|p| p == id)))
                    .collect(),
                _ => Vec::new(),
            };
            if let [job] = touched.as_slice() {
                compared += 1;
                let mut planned = copy_with(&s, cfg(false));
                let by_repair = s.on_event(e.clone()).unwrap();
                let by_planning = planned.on_event(e.clone()).unwrap();
                let moves = |acts: &[Action]| acts.iter().filter(|a| matches!(a, Action::Migrate { .. })).count();
                let holds = |acts: &[Action]| acts.iter().filter(|a| matches!(a, Action::Hold { .. })).count();
                prop_assert!(holds(&by_repair) <= holds(&by_planning), "{e:?}: {by_repair:?} / {by_planning:?}");
                let (a, b) = (s.job_view(job).unwrap(), planned.job_view(job).unwrap());
                prop_assert!(a.waiting.len() <= b.waiting.len(), "{} after {:?}", job, e);
                // Holding fewer VPs is better whatever it takes: a move
                // more (seed 1629465759769313363, with memory: repair moves
                // one VP where planning again holds three, whose job then
                // has no turnaround to compare).
                if holds(&by_repair) == holds(&by_planning) {
                    prop_assert!(moves(&by_repair) <= moves(&by_planning), "{e:?}: {by_repair:?} / {by_planning:?}");
                    // No worse: with memory a requirement, planning anew may
                    // find a placement slower than the one repaired in place
                    // (seed 1357507654199335075: 1 against 1.5).
                    prop_assert!(a.t_min <= b.t_min + 1e-9 * b.t_min.max(1.0), "{} after {:?}: {} / {}", job, e, a.t_min, b.t_min);
                }
            } else {
                s.on_event(e).unwrap();
            }
            if let Err(why) = s.check_invariants() {
                panic!("{why}");
            }
        }
        prop_assert!(compared > 0);
    }
}

/// FNV-1a over bytes: a digest that stays the same from one toolchain to
/// the next (the standard library's hasher is not promised to).
fn fnv1a(h: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *h ^= u64::from(b);
        *h = h.wrapping_mul(0x0100_0000_01b3);
    }
}

/// Every action of each placement on fixed random streams (two
/// architectures, mixed capacities, jobs wider than a slot's free cells,
/// memory, chosen processors and estimates on one of them, time passing),
/// digested.
fn decisions_digest(placement: Placement) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for (seed, memory) in [(11u64, false), (12, true)] {
        let mut g = Generator::new(
            seed,
            Shape {
                processors: 24,
                per_host: 4,
                arches: vec!["x86_64".into(), "aarch64".into()],
                max_job: 10,
                target_jobs: 12,
                memory,
                chosen: memory,
                estimates: memory,
                ..Shape::default()
            },
        );
        let mut s = Scheduler::new(SchedConfig {
            max_slots: 6,
            ..placement.config()
        });
        let mut now = 0.0;
        let mut stream = g.pool();
        stream.extend((0..1500).map(|_| g.event()));
        for e in stream {
            now += g.pause();
            let actions = s.on_event_at(now, e).expect("legal event");
            fnv1a(&mut h, format!("{actions:?}").as_bytes());
        }
    }
    h
}

/// What the scheduler decides is pinned: these digests were taken before
/// the scheduler's data structures were last made faster, and a change
/// meant only to be faster must leave them as they are. (A change meant to
/// decide differently takes the new values, and says so.)
#[test]
fn the_decisions_on_fixed_streams_are_what_they_were() {
    let got: Vec<(Placement, String)> = Placement::ALL
        .iter()
        .map(|&p| (p, format!("{:016x}", decisions_digest(p))))
        .collect();
    let want = [
        (Placement::Mig, "acde258a17d99875"),
        (Placement::Mtat, "a7ff1c9f324b50f1"),
        (Placement::MtatRepack, "a856ffbf5d9b9445"),
    ];
    let want: Vec<(Placement, String)> = want.iter().map(|&(p, d)| (p, d.to_string())).collect();
    assert_eq!(got, want, "the actions changed");
}
