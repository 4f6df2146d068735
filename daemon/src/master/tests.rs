//! The master as a pure function of events: what it answers (`Out`s) to
//! hosts, users and VPs.

use libmig::msg::{HostUsage, ImageId, OwnerReport, OwnerState, SnapOrder, VpCall};

use super::*;
use crate::master::moves::MAX_MOVE_ATTEMPTS;

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

pub(super) fn facts(name: &str, procs: u32) -> HostFacts {
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

pub(super) fn spec(n: u32) -> SpawnSpec {
    SpawnSpec {
        program: "/bin/true".into(),
        args: vec![],
        n,
        cwd: "/".into(),
        env: vec![],
        wait: true,
        parent: None,
        independent: false,
        restartable: false,
        memory_mb: None,
        class: None,
        io: None,
        bid_hosts: Vec::new(),
    }
}

fn starts(out: &[Out]) -> Vec<(String, Tid)> {
    out.iter()
        .filter_map(|o| match o {
            Out::ToHost(h, ToHost::Start(s)) => Some((h.clone(), s.tid)),
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
                cpu_ms: None,
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
    let out = tick_through(&mut m, now, 10);
    let again = starts(&out);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].0, "h0");
    assert!(!m.is_alive("h1"));
    assert!(m.sched.map().processors().all(|(_, p)| &*p.host == "h0"));
    // It answers again on the same connection: its VP runs elsewhere, so
    // it is told it is fenced (it ends its VPs and leaves), and stays out;
    // it asks for a lease in vain.
    let out = m.heard_from("h1", now + Duration::from_secs(11));
    assert!(
        out.iter()
            .any(|o| matches!(o, Out::ToHost(h, ToHost::Fenced { .. }) if h == "h1")),
        "{out:?}"
    );
    assert!(!m.is_alive("h1"));
    assert_eq!(m.sched.map().processors().count(), 1);
    assert!(m.from_host("h1", ToMaster::LeaseAsk { n: 9 }).is_empty());
    // It comes back under the same name, started again.
    let (name, _) = m.register(facts("h1", 1), now);
    assert_eq!(name, "h1");
    assert!(m.is_alive("h1"));
}

#[test]
fn bad_requests_are_clear_errors() {
    let now = Instant::now();
    let (mut m, _) = Master::new(facts("h0", 1), now, Duration::ZERO);
    let mut s = spec(1);
    s.program = String::new();
    let out = m.control(Requester::Local(1), "h0", Request::Spawn(s));
    assert!(
        matches!(&out[0], Out::Reply(_, Response::Error { message }) if message.contains("no program given"))
    );
    let mut s = spec(1);
    s.program = "aarch64=./heat-arm".into();
    let out = m.control(Requester::Local(1), "h0", Request::Spawn(s));
    assert!(
        matches!(&out[0], Out::Reply(_, Response::Error { message }) if message.contains("names no program for x86_64-linux"))
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

// ----- moves, checkpoint rounds, restarts, owners, lost hosts ---------------

/// A master with hosts `h0..hN` of one processor each, at time `t0`.
pub(super) struct Cluster {
    pub(super) m: Master,
    t0: Instant,
}

impl Cluster {
    pub(super) fn new(hosts: usize) -> Cluster {
        let t0 = Instant::now();
        let (mut m, _) = Master::new(facts("h0", 1), t0, Duration::ZERO);
        for i in 1..hosts {
            m.register(facts(&format!("h{i}"), 1), t0);
        }
        Cluster { m, t0 }
    }

    /// Spawn a job of `n` VPs of a migration-aware program and start each
    /// where it was placed: its (host, Tid) pairs.
    fn running_job(&mut self, n: u32) -> Vec<(String, Tid)> {
        let placed = self.running_plain_job(n);
        for (h, tid) in &placed {
            self.m.from_host(h, ToMaster::Movable { tid: *tid });
        }
        placed
    }

    /// The same, of a program that never says it can be moved.
    fn running_plain_job(&mut self, n: u32) -> Vec<(String, Tid)> {
        let out = self
            .m
            .control(Requester::Local(1), "h0", Request::Spawn(spec(n)));
        let placed = starts(&out);
        assert_eq!(placed.len(), n as usize, "{out:?}");
        for (h, tid) in &placed {
            self.m.started(h, *tid, 100 + *tid as u32);
        }
        placed
    }

    fn state(&self, tid: Tid) -> (Option<String>, String) {
        let v = self
            .m
            .ps()
            .into_iter()
            .find(|v| v.tid == tid)
            .expect("VP in ps");
        (v.host, v.state)
    }

    fn at(&self, secs: u64) -> Instant {
        self.t0 + Duration::from_secs(secs)
    }
}

fn move_out_orders(out: &[Out]) -> Vec<(String, Tid, String)> {
    out.iter()
        .filter_map(|o| match o {
            Out::ToHost(h, ToHost::MoveOut { to, start }) => {
                Some((h.clone(), start.tid, to.clone()))
            }
            _ => None,
        })
        .collect()
}

fn snaps(out: &[Out]) -> Vec<(String, Tid, SnapOrder)> {
    out.iter()
        .filter_map(|o| match o {
            Out::ToHost(h, ToHost::Snap { tid, step }) => Some((h.clone(), *tid, step.clone())),
            _ => None,
        })
        .collect()
}

fn replies(out: &[Out]) -> Vec<&Response> {
    out.iter()
        .filter_map(|o| match o {
            Out::Reply(_, r) => Some(r),
            _ => None,
        })
        .collect()
}

fn error_says(out: &[Out], words: &str) -> bool {
    replies(out)
        .iter()
        .any(|r| matches!(r, Response::Error { message } if message.contains(words)))
}

fn dir_entries(out: &[Out]) -> Vec<(Tid, Loc)> {
    out.iter()
        .filter_map(|o| match o {
            Out::Broadcast(ToHost::Directory(d)) => Some(d.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

fn other(h: &str) -> String {
    if h == "h0" { "h1" } else { "h0" }.to_string()
}

fn report(state: OwnerState) -> OwnerReport {
    OwnerReport {
        state,
        for_s: 0.0,
        decided_by: "test".into(),
        idle_s: None,
        load: None,
        sources: vec![],
        vp_cpu_ms: None,
        vacate_after_s: None,
    }
}

fn migrate(c: &mut Cluster, tid: Tid, to: &str) -> Vec<Out> {
    c.m.control(
        Requester::Local(2),
        "h0",
        Request::Migrate {
            tid: format!("t{tid:x}"),
            to: to.into(),
        },
    )
}

#[test]
fn mig_migrate_asks_the_source_for_the_image_and_has_messages_held() {
    let mut c = Cluster::new(2);
    let (src, tid) = c.running_job(1)[0].clone();
    let to = other(&src);
    let out = migrate(&mut c, tid, &to);
    assert_eq!(move_out_orders(&out), vec![(src.clone(), tid, to.clone())]);
    assert_eq!(
        dir_entries(&out),
        vec![(tid, Loc::Waiting)],
        "held everywhere"
    );
    assert!(matches!(replies(&out)[..], [Response::Ok { .. }]));
    assert_eq!(c.state(tid), (Some(src), format!("moving to {to}")));
}

#[test]
fn a_move_is_over_when_the_target_starts_the_vp() {
    let mut c = Cluster::new(2);
    let (src, tid) = c.running_job(1)[0].clone();
    let to = other(&src);
    migrate(&mut c, tid, &to);
    let out = c.m.started(&to, tid, 4242);
    assert_eq!(dir_entries(&out), vec![(tid, Loc::At(to.clone()))]);
    assert_eq!(c.state(tid), (Some(to.clone()), "running".into()));
    // Its place in the allocation map followed it.
    let placed = c.m.sched.job_view("j1").expect("job").placement;
    assert!(
        placed.values().all(|p| p.starts_with(&format!("{to}/"))),
        "{placed:?}"
    );
}

#[test]
fn a_failed_move_leaves_the_vp_running_where_it_was() {
    let mut c = Cluster::new(2);
    let (src, tid) = c.running_job(1)[0].clone();
    migrate(&mut c, tid, &other(&src));
    let out = c.m.migrate_failed(tid, "no safe point within 1000 ms");
    assert_eq!(dir_entries(&out), vec![(tid, Loc::At(src.clone()))]);
    assert_eq!(c.state(tid), (Some(src), "running".into()));
    // Its end reported late by the target is stale.
    let late = c.m.exited(
        &other(&c.state(tid).0.unwrap_or_default()),
        tid,
        ExitInfo {
            code: Some(0),
            signal: None,
            error: None,
            cpu_ms: None,
        },
    );
    assert!(late.is_empty(), "{late:?}");
}

#[test]
fn moving_what_cannot_move_is_a_clear_error() {
    let mut c = Cluster::new(2);
    let (src, tid) = c.running_job(1)[0].clone();
    assert!(error_says(&migrate(&mut c, tid, "h9"), "no live host"));
    assert!(error_says(&migrate(&mut c, tid, &src), "already runs on"));
    assert!(error_says(&migrate(&mut c, 0x999, "h1"), "no VP"));
    migrate(&mut c, tid, &other(&src));
    assert!(error_says(&migrate(&mut c, tid, &src), "is not running"));
}

#[test]
fn a_host_takes_vps_only_while_its_memory_holds_them_in_all_slots() {
    // Two hosts of 1024 MB, one processor each; VPs of 600 MB. The second
    // job goes to the other host (not beside the first in another slot),
    // a third finds no host with the memory and waits, and a move onto a
    // host whose VPs already need its memory is refused, saying so.
    let mut c = Cluster::new(2);
    let run = |c: &mut Cluster| {
        let mut s = spec(1);
        s.memory_mb = Some(600);
        let out = c.m.control(Requester::Local(1), "h0", Request::Spawn(s));
        let placed = starts(&out);
        for (h, tid) in &placed {
            c.m.started(h, *tid, 100 + *tid as u32);
            c.m.from_host(h, ToMaster::Movable { tid: *tid });
        }
        placed
    };
    let a = run(&mut c);
    let b = run(&mut c);
    assert_eq!((a.len(), b.len()), (1, 1));
    assert_ne!(a[0].0, b[0].0, "600 + 600 MB on a host of 1024");
    assert!(run(&mut c).is_empty(), "no host has 600 MB left");
    let out = migrate(&mut c, a[0].1, &b[0].0);
    assert!(
        error_says(
            &out,
            &format!(
                "needs 600 MB of memory and {} offers 1024 MB, 600 MB of it needed by the VPs there",
                b[0].0
            )
        ),
        "{out:?}"
    );
}

#[test]
fn a_start_reported_for_a_vp_not_placed_or_ended_ends_that_process() {
    let mut c = Cluster::new(2);
    let kill = |h: &str, tid| Out::ToHost(h.to_string(), ToHost::Kill { tid });
    // A job of two VPs of 600 MB on hosts of 1024; another of 600 MB waits
    // for memory.
    let mut s = spec(2);
    s.memory_mb = Some(600);
    let out =
        c.m.control(Requester::Local(1), "h0", Request::Spawn(s.clone()));
    let placed = starts(&out);
    for (h, tid) in &placed {
        c.m.started(h, *tid, 100);
    }
    s.n = 1;
    let out = c.m.control(Requester::Local(1), "h0", Request::Spawn(s));
    assert!(starts(&out).is_empty(), "{out:?}");
    let waiting = c.m.ps().into_iter().find(|v| v.job == "j2").expect("j2");
    assert_eq!(c.state(waiting.tid), (None, "waiting".into()));
    // A host says it started it (a report of an older run, say): no
    // process of it belongs anywhere yet.
    let out = c.m.started("h1", waiting.tid, 5);
    assert!(out.contains(&kill("h1", waiting.tid)), "{out:?}");
    assert_eq!(c.state(waiting.tid), (None, "waiting".into()));
    // Nor is one that ended brought back by a start.
    let (h, tid) = placed[0].clone();
    c.m.exited(&h, tid, ExitInfo::ended_by_mig(0, "done".into()));
    let out = c.m.started(&h, tid, 6);
    assert!(out.contains(&kill(&h, tid)), "{out:?}");
    assert_eq!(c.state(tid), (Some(h), "exited".into()));
}

#[test]
fn an_owner_back_moves_its_vps_where_there_is_room() {
    let mut c = Cluster::new(3);
    let placed = c.running_job(2);
    let idle = ["h0", "h1", "h2"]
        .into_iter()
        .find(|h| placed.iter().all(|(p, _)| p != h))
        .expect("a free host");
    let (busy, tid) = placed[0].clone();
    let out = c.m.owner_report(&busy, report(OwnerState::Reclaimed));
    assert_eq!(
        move_out_orders(&out),
        vec![(busy.clone(), tid, idle.to_string())],
        "{out:?}"
    );
    assert!(c.state(tid).1.starts_with("moving to"));
}

#[test]
fn an_owner_back_with_nowhere_to_go_keeps_the_vp_stopped_where_it_is() {
    let mut c = Cluster::new(1);
    let (h, tid) = c.running_job(1)[0].clone();
    let out = c.m.owner_report(&h, report(OwnerState::Reclaimed));
    assert!(move_out_orders(&out).is_empty(), "{out:?}");
    assert!(starts(&out).is_empty());
    assert_eq!(
        c.state(tid),
        (Some(h.clone()), "stopped (owner back)".into())
    );
    // Parked on disk while the owner stays; started there again when the
    // host is offered again.
    c.m.parked(&h, tid);
    assert_eq!(c.state(tid).1, "parked on disk (owner back)");
    let out = c.m.owner_report(&h, report(OwnerState::Offered));
    assert!(
        out.contains(&Out::ToHost(h.clone(), ToHost::Unpark { tid })),
        "{out:?}"
    );
}

#[test]
fn a_scheduler_move_that_fails_is_tried_again_later_then_given_up() {
    let mut c = Cluster::new(3);
    let placed = c.running_job(2);
    let (busy, tid) = placed[0].clone();
    let out = c.m.owner_report(&busy, report(OwnerState::Reclaimed));
    let target = move_out_orders(&out)[0].2.clone();
    for attempt in 1..MAX_MOVE_ATTEMPTS {
        let out = c.m.migrate_failed(tid, "its checkpoint is unusable");
        assert!(
            out.iter()
                .any(|o| matches!(o, Out::Log(l) if l.contains("trying again"))),
            "{out:?}"
        );
        let backoff = 5u64 << (attempt - 1);
        let early = c.m.now + Duration::from_secs(backoff - 1);
        let before = c.m.tick(early, Duration::from_secs(3600));
        assert!(
            move_out_orders(&before).is_empty(),
            "attempt {attempt}: too early"
        );
        let when = c.m.now + Duration::from_secs(backoff);
        let again = c.m.tick(when, Duration::from_secs(3600));
        assert_eq!(
            move_out_orders(&again),
            vec![(busy.clone(), tid, target.clone())],
            "attempt {attempt}"
        );
    }
    let out = c.m.migrate_failed(tid, "its checkpoint is unusable");
    assert!(out
        .iter()
        .any(|o| matches!(o, Out::Log(l) if l.contains("gave up"))));
    let later = c.m.tick(c.at(10_000), Duration::from_secs(100_000));
    assert!(move_out_orders(&later).is_empty());
}

/// Take checkpoint `n` of job j1 whose VPs are `placed`, to the end; its id.
/// The master's ticks every half second (as the daemon makes them) from
/// `from` for `secs` seconds, hosts silent for more than 3 s given up;
/// everything they said.
fn tick_through(m: &mut Master, from: Instant, secs: u64) -> Vec<Out> {
    (1..=secs * 2)
        .flat_map(|k| {
            m.tick(
                from + Duration::from_millis(500 * k),
                Duration::from_secs(3),
            )
        })
        .collect()
}

/// The images a restart asks hosts to read through: (host, image).
fn checks(out: &[Out]) -> Vec<(String, ImageId)> {
    out.iter()
        .filter_map(|o| match o {
            Out::ToHost(h, ToHost::CheckImage { image }) => Some((h.clone(), image.clone())),
            _ => None,
        })
        .collect()
}

/// Every image asked for is found intact where it was asked: what follows.
fn all_intact(c: &mut Cluster, out: &[Out]) -> Vec<Out> {
    let mut next = Vec::new();
    for (h, image) in checks(out) {
        let result = Ok(());
        next.extend(c.m.from_host(&h, ToMaster::ImageChecked { image, result }));
    }
    next
}

/// No image asked for is intact anywhere (each holder asked in turn says
/// so): everything that follows.
fn none_intact(c: &mut Cluster, out: &[Out]) -> Vec<Out> {
    let mut all = Vec::new();
    let mut asks = checks(out);
    while !asks.is_empty() {
        let mut next = Vec::new();
        for (h, image) in asks {
            let result = Err("checkpoint is corrupted".to_string());
            next.extend(c.m.from_host(&h, ToMaster::ImageChecked { image, result }));
        }
        asks = checks(&next);
        all.extend(next);
    }
    all
}

/// The copies the master orders: (from, image, to, to start the VP from).
fn copies(out: &[Out]) -> Vec<(String, ImageId, String, bool)> {
    out.iter()
        .filter_map(|o| match o {
            Out::ToHost(h, ToHost::CopyImage { image, to, start }) => {
                Some((h.clone(), image.clone(), to.clone(), start.is_some()))
            }
            _ => None,
        })
        .collect()
}

/// The VPs a restart restores: (host keeping the image, VP, where).
fn restores(out: &[Out]) -> Vec<(String, Tid, String)> {
    copies(out)
        .into_iter()
        .filter(|c| c.3)
        .map(|(h, i, to, _)| (h, i.tid, to))
        .collect()
}

/// `host` says it keeps `image`.
fn kept(c: &mut Cluster, host: &str, image: &ImageId) -> Vec<Out> {
    c.m.from_host(
        host,
        ToMaster::ImageKept {
            image: image.clone(),
            size: 8,
            crc: 7,
        },
    )
}

fn image_of(id: u64, tid: Tid) -> ImageId {
    ImageId {
        job: "j1".into(),
        gen: id,
        tid,
    }
}

/// Begin a checkpoint of job j1, whose VPs are `placed`, and bring every
/// VP to its safe point: its generation.
fn pause_all(c: &mut Cluster, placed: &[(String, Tid)]) -> u64 {
    let out = c.m.control(
        Requester::Local(3),
        "h0",
        Request::Checkpoint { job: "j1".into() },
    );
    let begins = snaps(&out);
    assert_eq!(begins.len(), placed.len(), "{out:?}");
    let SnapOrder::Begin { id, .. } = begins[0].2 else {
        panic!("{begins:?}")
    };
    for (i, (_, tid)) in placed.iter().enumerate() {
        let sent = placed
            .iter()
            .filter(|(_, t)| t != tid)
            .map(|(_, t)| (*t, 10 + i as u64))
            .collect();
        let out = c.m.snap_paused(*tid, id, sent);
        if i + 1 < placed.len() {
            assert!(out.is_empty());
        } else {
            // Once all are paused, each hears what its peers sent it.
            let now = snaps(&out);
            assert_eq!(now.len(), placed.len());
            for (_, _, step) in &now {
                assert!(
                    matches!(step, SnapOrder::Now { expect, .. } if expect.len() == placed.len() - 1)
                );
            }
        }
    }
    id
}

/// Every VP of `placed` wrote its image of generation `id`: they go on
/// once all have.
fn all_taken(c: &mut Cluster, placed: &[(String, Tid)], id: u64) {
    for (i, (h, tid)) in placed.iter().enumerate() {
        let step = SnapReport::Taken { id };
        let out = c.m.from_host(h, ToMaster::Snap { tid: *tid, step });
        let resumed = snaps(&out);
        if i + 1 < placed.len() {
            assert!(resumed.is_empty(), "{out:?}");
        } else {
            assert_eq!(resumed.len(), placed.len(), "{out:?}");
            assert!(resumed
                .iter()
                .all(|(_, _, s)| matches!(s, SnapOrder::Resume { .. })));
        }
    }
}

/// Take a checkpoint of job j1 whose VPs are `placed`, to the end: each
/// VP's host keeps its image, the master has a copy of each sent to
/// another host, and the checkpoint is complete once every copy is kept.
/// Its generation, and each image's copy: (image, host).
fn take_checkpoint_copies(
    c: &mut Cluster,
    placed: &[(String, Tid)],
) -> (u64, Vec<(ImageId, String)>) {
    let id = pause_all(c, placed);
    all_taken(c, placed, id);
    let mut ordered = Vec::new();
    for (h, tid) in placed {
        let image = image_of(id, *tid);
        let out = kept(c, h, &image);
        let cs = copies(&out);
        assert_eq!(cs.len(), 1, "{out:?}");
        let (from, copy, to, restore) = cs[0].clone();
        assert_eq!((&from, &copy, restore), (h, &image, false));
        assert_ne!(&to, h, "a copy on another host");
        assert!(
            replies(&out).is_empty(),
            "not complete with one copy: {out:?}"
        );
        ordered.push((image, to));
    }
    for (i, (image, to)) in ordered.iter().enumerate() {
        let out = kept(c, to, image);
        if i + 1 < ordered.len() {
            assert!(replies(&out).is_empty(), "{out:?}");
        } else {
            assert!(out.iter().any(
                |o| matches!(o, Out::Broadcast(ToHost::PruneImages { keep, .. }) if keep.contains(&id))
            ));
            assert!(
                matches!(replies(&out)[..], [Response::Ok { message }] if message.contains("2 copies each")),
                "{out:?}"
            );
        }
    }
    (id, ordered)
}

fn take_checkpoint(c: &mut Cluster, placed: &[(String, Tid)]) -> u64 {
    take_checkpoint_copies(c, placed).0
}

#[test]
fn a_move_asked_by_hand_while_the_vps_pause_for_a_checkpoint_is_made_once_they_go_on() {
    let mut c = Cluster::new(3);
    let placed = c.running_job(2);
    let id = pause_all(&mut c, &placed);
    let (src, tid) = placed[0].clone();
    let to = ["h0", "h1", "h2"]
        .into_iter()
        .find(|h| placed.iter().all(|(p, _)| p != h))
        .expect("a free host");
    // No refusal, no move yet: the VPs wait for their images to be taken.
    let out = migrate(&mut c, tid, to);
    assert!(replies(&out).is_empty(), "{out:?}");
    assert!(move_out_orders(&out).is_empty(), "{out:?}");
    // The last image taken: the VPs go on, and the move begins.
    let step = SnapReport::Taken { id };
    let (h1, t1) = placed[1].clone();
    let out = c.m.from_host(
        &placed[0].0,
        ToMaster::Snap {
            tid,
            step: step.clone(),
        },
    );
    assert!(move_out_orders(&out).is_empty(), "{out:?}");
    let out = c.m.from_host(&h1, ToMaster::Snap { tid: t1, step });
    assert_eq!(
        move_out_orders(&out),
        vec![(src, tid, to.to_string())],
        "{out:?}"
    );
    assert!(
        matches!(&replies(&out)[..], [Response::Ok { message }] if message.contains("moving")),
        "{out:?}"
    );
}

#[test]
fn a_checkpoint_round_pauses_every_vp_then_keeps_every_image() {
    let mut c = Cluster::new(2);
    let placed = c.running_job(2);
    let id = take_checkpoint(&mut c, &placed);
    assert!(id >= 1);
    // A second round gets the next generation.
    assert_eq!(take_checkpoint(&mut c, &placed), id + 1);
}

#[test]
fn each_image_is_copied_to_another_host_and_not_to_the_master_where_another_will_do() {
    let mut c = Cluster::new(3);
    let placed = c.running_job(2);
    let (_, copies) = take_checkpoint_copies(&mut c, &placed);
    for ((h, _), (_, to)) in placed.iter().zip(&copies) {
        assert_ne!(to, h);
        assert_ne!(to, "h0", "the master's loop serves the whole machine");
    }
}

#[test]
fn a_checkpoint_is_refused_unless_every_vp_runs_and_given_up_when_too_slow() {
    let mut c = Cluster::new(2);
    let placed = c.running_job(2);
    let ckpt = |c: &mut Cluster| {
        c.m.control(
            Requester::Local(3),
            "h0",
            Request::Checkpoint { job: "j1".into() },
        )
    };
    assert!(error_says(
        &c.m.control(
            Requester::Local(3),
            "h0",
            Request::Checkpoint { job: "j9".into() }
        ),
        "no job"
    ));
    migrate(&mut c, placed[0].1, &other(&placed[0].0));
    assert!(error_says(&ckpt(&mut c), "not all of its VPs are running"));
    c.m.migrate_failed(placed[0].1, "test");
    c.m.set_checkpointing(None, Duration::from_secs(5));
    assert_eq!(snaps(&ckpt(&mut c)).len(), 2);
    let out = c.m.tick(c.at(6), Duration::from_secs(3600));
    let aborts = snaps(&out);
    assert_eq!(aborts.len(), 2, "{out:?}");
    assert!(aborts
        .iter()
        .all(|(_, _, s)| matches!(s, SnapOrder::Abort { .. })));
    assert!(error_says(
        &out,
        "failed: not every VP reached a safe point"
    ));
}

#[test]
fn periodic_checkpoints_begin_by_themselves() {
    let mut c = Cluster::new(2);
    c.running_job(2);
    c.m.set_checkpointing(Some(Duration::from_secs(60)), Duration::from_secs(30));
    assert!(snaps(&c.m.tick(c.at(2), Duration::from_secs(3600))).is_empty());
    let first = c.m.tick(c.at(4), Duration::from_secs(3600));
    assert_eq!(
        snaps(&first).len(),
        2,
        "the first one FIRST_CHECKPOINT after the start"
    );
}

#[test]
fn no_periodic_checkpoint_waits_for_a_vp_stopped_by_its_owner() {
    // One host, nowhere to move: the VP waits there, stopped, and reaches
    // no safe point. A round would wait for it in vain (and hold its move
    // back): none begins until the owner leaves.
    let mut c = Cluster::new(1);
    let (h, _) = c.running_job(1)[0].clone();
    c.m.set_checkpointing(Some(Duration::from_secs(3)), Duration::from_secs(30));
    c.m.owner_report(&h, report(OwnerState::Reclaimed));
    assert!(snaps(&c.m.tick(c.at(10), Duration::from_secs(3600))).is_empty());
    c.m.owner_report(&h, report(OwnerState::Offered));
    let out = c.m.tick(c.at(20), Duration::from_secs(3600));
    assert_eq!(snaps(&out).len(), 1, "{out:?}");
}

#[test]
fn after_a_failed_round_the_next_comes_an_interval_later() {
    let mut c = Cluster::new(2);
    c.running_job(2);
    c.m.set_checkpointing(Some(Duration::from_secs(3)), Duration::from_secs(10));
    assert_eq!(
        snaps(&c.m.tick(c.at(4), Duration::from_secs(3600))).len(),
        2
    );
    // Nobody answers: the round is given up at 15 s ...
    let out = c.m.tick(c.at(15), Duration::from_secs(3600));
    assert!(
        out.iter()
            .any(|o| matches!(o, Out::Log(l) if l.contains("failed"))),
        "{out:?}"
    );
    // ... and the next is not begun at once.
    let begins = |out: &[Out]| {
        snaps(out)
            .iter()
            .filter(|(_, _, s)| matches!(s, SnapOrder::Begin { .. }))
            .count()
    };
    assert_eq!(begins(&c.m.tick(c.at(16), Duration::from_secs(3600))), 0);
    // The 11 s the job lost count as a round's: the next comes 50 times
    // that later.
    assert_eq!(begins(&c.m.tick(c.at(300), Duration::from_secs(3600))), 0);
    assert_eq!(
        begins(&c.m.tick(c.at(15 + 551), Duration::from_secs(3600))),
        2
    );
}

#[test]
fn later_periodic_checkpoints_come_one_interval_apart() {
    let mut c = Cluster::new(2);
    let placed = c.running_job(2);
    c.m.set_checkpointing(Some(Duration::from_secs(60)), Duration::from_secs(30));
    // A generation taken by hand counts as the first.
    take_checkpoint(&mut c, &placed);
    assert!(snaps(&c.m.tick(c.at(30), Duration::from_secs(3600))).is_empty());
    let next = c.m.tick(c.at(62), Duration::from_secs(3600));
    assert_eq!(snaps(&next).len(), 2, "one interval after the last");
}

#[test]
fn a_job_of_vps_that_cannot_be_moved_is_not_checkpointed_by_itself() {
    let mut c = Cluster::new(2);
    c.running_plain_job(2);
    c.m.set_checkpointing(Some(Duration::from_secs(60)), Duration::from_secs(30));
    assert!(snaps(&c.m.tick(c.at(61), Duration::from_secs(3600))).is_empty());
}

#[test]
fn a_restart_ends_every_vp_and_restores_from_the_newest_generation_or_an_older_one() {
    let mut c = Cluster::new(3);
    let placed = c.running_job(2);
    let g1 = take_checkpoint(&mut c, &placed);
    let g2 = take_checkpoint(&mut c, &placed);
    let out = c.m.control(
        Requester::Local(4),
        "h0",
        Request::Restart { job: "j1".into() },
    );
    // Nothing is stopped before its images are found: a host keeping each
    // image of the newest generation is asked to read it through.
    assert!(kills(&out).is_empty(), "{out:?}");
    let asked = checks(&out);
    assert_eq!(asked.len(), 2, "{out:?}");
    assert!(asked.iter().all(|(_, i)| i.gen == g2), "{asked:?}");
    for (_, tid) in &placed {
        assert_eq!(c.state(*tid).1, "running");
    }
    // One image of it is damaged on both its hosts: the other host is
    // asked, then the generation before is looked for.
    let (h, bad) = asked[0].clone();
    let damaged = |c: &mut Cluster, h: &str, image: &ImageId| {
        let result = Err("checkpoint is corrupted".to_string());
        c.m.from_host(
            h,
            ToMaster::ImageChecked {
                image: image.clone(),
                result,
            },
        )
    };
    let out = damaged(&mut c, &h, &bad);
    let second = checks(&out);
    assert_eq!(second.len(), 1, "{out:?}");
    assert_eq!(second[0].1, bad);
    assert_ne!(second[0].0, h, "its other copy");
    let out = damaged(&mut c, &second[0].0.clone(), &bad);
    let older = checks(&out);
    assert!(
        older.len() == 2 && older.iter().all(|(_, i)| i.gen == g1),
        "{out:?}"
    );
    let out = all_intact(&mut c, &out);
    assert!(out.iter().any(|o| matches!(
        o,
        Out::Broadcast(ToHost::Fence { incarnation: 1, tids }) if tids.len() == 2
    )));
    // Each image goes from where it was found intact to the VP's host.
    let r = restores(&out);
    assert_eq!(r.len(), 2, "{out:?}");
    for (h, tid) in &placed {
        assert!(r.iter().any(|(_, t, to)| t == tid && to == h), "{r:?}");
    }
    assert!(out.iter().any(|o| matches!(
        o,
        Out::Reply(Requester::Local(4), Response::Ok { message }) if message.contains(&format!("generation {g1}"))
    )), "{out:?}");
    for (_, tid) in &placed {
        assert_eq!(c.state(*tid).1, "restoring from the job's checkpoint");
    }
    // The killed processes' ends are no exits; the restored ones run.
    for (h, tid) in &placed {
        let end = c.m.exited(
            h,
            *tid,
            ExitInfo {
                code: None,
                signal: Some(9),
                error: None,
                cpu_ms: None,
            },
        );
        assert!(end.is_empty(), "{end:?}");
        c.m.started(h, *tid, 7);
        assert_eq!(c.state(*tid).1, "running");
    }
}

#[test]
fn a_restart_without_a_checkpoint_is_a_clear_error_and_changes_nothing() {
    let mut c = Cluster::new(2);
    let placed = c.running_job(2);
    let out = c.m.control(
        Requester::Local(4),
        "h0",
        Request::Restart { job: "j1".into() },
    );
    assert!(error_says(&out, "has no checkpoint yet"));
    assert!(!out
        .iter()
        .any(|o| matches!(o, Out::ToHost(_, ToHost::Kill { .. }))));
    for (h, tid) in &placed {
        assert_eq!(c.state(*tid), (Some(h.clone()), "running".into()));
    }
}

#[test]
fn a_host_lost_with_a_job_that_has_a_checkpoint_restarts_the_job_from_it() {
    let mut c = Cluster::new(3);
    let placed = c.running_job(2);
    take_checkpoint(&mut c, &placed);
    let (lost, _) = placed
        .iter()
        .find(|(h, _)| h != "h0")
        .cloned()
        .expect("a VP on a worker");
    let out = c.m.host_gone(&lost, "connection lost");
    let asked = checks(&out);
    assert_eq!(asked.len(), 2, "{out:?}");
    assert!(asked.iter().all(|(h, _)| *h != lost), "{asked:?}");
    let out = all_intact(&mut c, &out);
    let r = restores(&out);
    assert_eq!(r.len(), 2, "the job restarts from its checkpoint: {out:?}");
    assert!(r.iter().all(|(from, _, to)| *from != lost && *to != lost));
}

#[test]
fn a_copy_no_other_host_can_keep_fails_the_checkpoint_and_the_job_goes_on() {
    let mut c = Cluster::new(2);
    let placed = c.running_job(2);
    let id = pause_all(&mut c, &placed);
    all_taken(&mut c, &placed, id);
    let (h0_vp, h1_vp) = (
        placed
            .iter()
            .find(|(h, _)| h == "h0")
            .expect("a VP on h0")
            .1,
        placed
            .iter()
            .find(|(h, _)| h == "h1")
            .expect("a VP on h1")
            .1,
    );
    kept(&mut c, "h1", &image_of(id, h1_vp));
    let out = kept(&mut c, "h0", &image_of(id, h0_vp));
    assert_eq!(copies(&out)[0].2, "h1", "{out:?}");
    // h1's state directory is full: it cannot keep the copy, says so, and
    // no other host can.
    c.m.from_host(
        "h1",
        ToMaster::Usage(HostUsage {
            vps: vec![],
            free_memory_mb: None,
            io_busy: None,
            state_free_mb: Some(6),
            state_full: true,
            turns: Default::default(),
        }),
    );
    let out = c.m.from_host(
        "h1",
        ToMaster::ImageFailed {
            image: image_of(id, h0_vp),
            host: "h1".into(),
            reason: "No space left on device (os error 28)".into(),
        },
    );
    assert!(
        error_says(&out, "No space left on device")
            && error_says(&out, "goes on as it was")
            && error_says(&out, "state directory of h1 is full"),
        "{out:?}"
    );
    // Every copy of that generation goes, wherever it is.
    assert!(
        out.iter().any(
            |o| matches!(o, Out::Broadcast(ToHost::PruneImages { keep, .. }) if keep.is_empty())
        ),
        "{out:?}"
    );
    for (h, tid) in &placed {
        assert_eq!(c.state(*tid), (Some(h.clone()), "running".into()));
    }
    assert!(c
        .m
        .hosts_info()
        .iter()
        .any(|h| h.facts.name == "h1" && h.state_full));
    // A VP that cannot write its image fails the next one: every VP goes on.
    let id = pause_all(&mut c, &placed);
    let step = SnapReport::Failed {
        id,
        reason: "checkpoint /s/t40002.snap: No space left on device (os error 28)".into(),
    };
    let out = c.m.from_host("h1", ToMaster::Snap { tid: h1_vp, step });
    let aborts = snaps(&out);
    assert_eq!(aborts.len(), 2, "{out:?}");
    assert!(aborts
        .iter()
        .all(|(_, _, s)| matches!(s, SnapOrder::Abort { .. })));
    assert!(
        error_says(&out, "could not write its image on h1"),
        "{out:?}"
    );
}

#[test]
fn a_host_holding_a_copy_dies_and_another_is_made_at_once_so_a_second_death_loses_nothing() {
    let mut c = Cluster::new(4);
    let placed = c.running_job(2);
    let (id, copies_made) = take_checkpoint_copies(&mut c, &placed);
    // A VP's image whose copy is on a host without a VP of the job.
    let vp_hosts: Vec<&String> = placed.iter().map(|(h, _)| h).collect();
    let (image, second) = copies_made
        .iter()
        .find(|(_, to)| !vp_hosts.contains(&to))
        .cloned()
        .expect("a copy on a host without VPs");
    let first = placed
        .iter()
        .find(|(_, t)| *t == image.tid)
        .map(|(h, _)| h.clone())
        .expect("its VP");
    // That host dies: a new copy is made from the one left, at once.
    let out = c.m.host_gone(&second, "stopped answering heartbeats");
    assert!(
        checks(&out).is_empty(),
        "no VP of the job was there: {out:?}"
    );
    let again = copies(&out);
    assert_eq!(again.len(), 1, "{out:?}");
    let (from, copy, third, _) = again[0].clone();
    assert_eq!((from.as_str(), &copy), (first.as_str(), &image));
    assert!(third != first && third != second, "{third}");
    kept(&mut c, &third, &image);
    // Then the other holder dies, the VP's own host: the job restarts from
    // the checkpoint, the image coming from the third host.
    let out = c.m.host_gone(&first, "stopped answering heartbeats");
    let asked = checks(&out);
    assert!(asked.iter().all(|(_, i)| i.gen == id), "{asked:?}");
    assert!(asked.contains(&(third.clone(), image.clone())), "{asked:?}");
    let out = all_intact(&mut c, &out);
    let r = restores(&out);
    assert_eq!(r.len(), 2, "{out:?}");
    assert!(r
        .iter()
        .any(|(h, t, to)| *h == third && *t == image.tid && *to != first));
}

#[test]
fn a_restored_vp_whose_copy_cannot_be_sent_is_looked_for_again_elsewhere() {
    let mut c = Cluster::new(3);
    let placed = c.running_job(2);
    take_checkpoint(&mut c, &placed);
    let out = c.m.control(
        Requester::Local(4),
        "h0",
        Request::Restart { job: "j1".into() },
    );
    let out = all_intact(&mut c, &out);
    let (holder, tid, _) = restores(&out)[0].clone();
    let image = copies(&out)
        .into_iter()
        .find(|x| x.1.tid == tid)
        .map(|x| x.1)
        .expect("its image");
    // The copy it was to come from cannot be read any more: the images
    // are looked for again, that copy left out.
    let out = c.m.from_host(
        &holder,
        ToMaster::ImageFailed {
            image: image.clone(),
            host: holder.clone(),
            reason: "Input/output error (os error 5)".into(),
        },
    );
    let asked = checks(&out);
    assert!(!asked.is_empty(), "{out:?}");
    assert!(!asked.contains(&(holder, image)), "{asked:?}");
}

/// A one-VP job's VP on its way between two workers (the master's own
/// host is never lost): its Tid, source and target.
fn moving_between_workers(c: &mut Cluster) -> (Tid, String, String) {
    let (mut src, tid) = c.running_job(1)[0].clone();
    if src == "h0" {
        migrate(c, tid, "h1");
        c.m.started("h1", tid, 5);
        src = "h1".into();
    }
    let to = if src == "h1" { "h2" } else { "h1" };
    migrate(c, tid, to);
    (tid, src, to.to_string())
}

#[test]
fn a_source_lost_mid_move_starts_its_vp_again_elsewhere() {
    let mut c = Cluster::new(3);
    let (tid, src, to) = moving_between_workers(&mut c);
    let to = to.as_str();
    // Its target is asked for what arrived of it; nothing did.
    let out = c.m.host_gone(&src, "stopped answering heartbeats");
    assert!(
        out.contains(&Out::ToHost(to.to_string(), ToHost::Recall { tid })),
        "{out:?}"
    );
    assert!(starts(&out).is_empty(), "{out:?}");
    // (A host that is not the live end of its move is not believed.)
    assert!(c
        .m
        .from_host(
            "h0",
            ToMaster::Missing {
                tid,
                reason: "gone".into(),
            },
        )
        .is_empty());
    let out = c.m.from_host(
        to,
        ToMaster::Missing {
            tid,
            reason: "its image stopped coming".into(),
        },
    );
    let again = starts(&out);
    assert_eq!(again.len(), 1, "{out:?}");
    assert_eq!(again[0].1, tid);
    assert_ne!(again[0].0, src);
    assert_eq!(c.state(tid).1, "starting");
}

#[test]
fn an_image_that_stops_coming_sends_the_vp_back_to_its_source_and_on_if_that_dies() {
    let mut c = Cluster::new(3);
    let (tid, src, to) = moving_between_workers(&mut c);
    let to = to.as_str();
    // The target's link to the source broke mid-image: the source, alive,
    // is asked to run the VP from the image it kept.
    let out = c.m.from_host(
        to,
        ToMaster::Missing {
            tid,
            reason: "its image stopped coming".into(),
        },
    );
    assert!(
        out.contains(&Out::ToHost(src.clone(), ToHost::Recall { tid })),
        "{out:?}"
    );
    assert!(starts(&out).is_empty(), "{out:?}");
    // Before it answers, it dies too: the VP is lost on its way and starts
    // again (a job of one VP), not on the dead host.
    let out = c.m.host_gone(&src, "stopped answering heartbeats");
    let again = starts(&out);
    assert_eq!(again.len(), 1, "{out:?}");
    assert_eq!(again[0].1, tid);
    assert_ne!(again[0].0, src);
    assert_eq!(c.state(tid).1, "starting");
}

#[test]
fn a_host_saying_again_that_its_vps_run_changes_nothing_but_a_move_whose_report_was_lost() {
    // (What a worker does when it attaches to a new master.)
    let mut c = Cluster::new(3);
    let (at, tid) = c.running_job(1)[0].clone();
    let out = c.m.started(&at, tid, 7);
    assert_eq!(c.state(tid), (Some(at.clone()), "running".into()));
    assert!(
        !out.iter().any(|o| matches!(o, Out::ToHost(..))),
        "nothing is asked of anyone: {out:?}"
    );
    // A move whose `Started` the old master never passed on.
    let to = ["h1", "h2", "h0"]
        .into_iter()
        .find(|h| *h != at)
        .expect("another host");
    migrate(&mut c, tid, to);
    c.m.started(to, tid, 9);
    assert_eq!(c.state(tid), (Some(to.to_string()), "running".into()));
    // Its exit, said twice (once to the old master, once again on
    // attaching), ends it once: the second changes nothing.
    let status = ExitInfo {
        code: Some(0),
        signal: None,
        error: None,
        cpu_ms: None,
    };
    let first = c.m.exited(to, tid, status.clone());
    assert!(!first.is_empty());
    assert!(c.m.exited(to, tid, status).is_empty());
}

#[test]
fn a_source_lost_mid_move_leaves_its_vp_at_the_target_if_it_arrived() {
    let mut c = Cluster::new(3);
    let (tid, src, to) = moving_between_workers(&mut c);
    let (src, to) = (src.as_str(), to.as_str());
    let out = c.m.host_gone(src, "stopped answering heartbeats");
    assert!(starts(&out).is_empty(), "{out:?}");
    // It had arrived whole: the target says it runs there.
    c.m.started(to, tid, 9);
    assert_eq!(c.state(tid), (Some(to.to_string()), "running".into()));
}

#[test]
fn a_target_lost_mid_move_leaves_its_vp_where_it_was_or_starts_it_again() {
    let mut c = Cluster::new(3);
    let (src, tid) = c.running_job(1)[0].clone();
    let to = if src == "h1" { "h2" } else { "h1" };
    migrate(&mut c, tid, to);
    let out = c.m.host_gone(to, "stopped answering heartbeats");
    assert!(
        out.contains(&Out::ToHost(src.clone(), ToHost::Recall { tid })),
        "{out:?}"
    );
    assert!(starts(&out).is_empty(), "{out:?}");
    // Short of its safe point, it stays at its source.
    c.m.migrate_failed(tid, "its move's target host is gone");
    assert_eq!(c.state(tid), (Some(src.clone()), "running".into()));

    // Again, to the third host, which dies after the image went; the
    // source starts it again from the image it kept.
    let third = ["h0", "h1", "h2"]
        .into_iter()
        .find(|h| *h != src && *h != to)
        .expect("a third host");
    migrate(&mut c, tid, third);
    if third != "h0" {
        let out = c.m.host_gone(third, "stopped answering heartbeats");
        assert!(
            out.contains(&Out::ToHost(src.clone(), ToHost::Recall { tid })),
            "{out:?}"
        );
        c.m.started(&src, tid, 11);
        assert_eq!(c.state(tid), (Some(src.clone()), "running".into()));
    }
}

#[test]
fn killing_a_job_ends_its_vps_and_a_second_kill_finds_nothing() {
    let mut c = Cluster::new(2);
    let placed = c.running_job(2);
    let out = c.m.control(
        Requester::Local(5),
        "h0",
        Request::Kill {
            target: "j1".into(),
        },
    );
    for (h, tid) in &placed {
        assert!(
            out.contains(&Out::ToHost(h.clone(), ToHost::Kill { tid: *tid })),
            "{out:?}"
        );
    }
    // Not answered until the VPs have ended.
    assert!(!out.iter().any(|o| matches!(o, Out::Reply(..))), "{out:?}");
    let mut ends = Vec::new();
    for (h, tid) in &placed {
        ends.extend(c.m.exited(
            h,
            *tid,
            ExitInfo {
                code: None,
                signal: Some(9),
                error: None,
                cpu_ms: None,
            },
        ));
    }
    assert!(
        ends.iter().any(|o| matches!(o, Out::Reply(Requester::Local(5), Response::Ok { message }) if message.contains("killed: its 2 VPs ended"))),
        "{ends:?}"
    );
    assert!(c.m.ps().is_empty());
    let again = c.m.control(
        Requester::Local(5),
        "h0",
        Request::Kill {
            target: "j1".into(),
        },
    );
    assert!(error_says(&again, "has already ended"), "{again:?}");
    let tid = format!("t{:x}", placed[0].1);
    let again =
        c.m.control(Requester::Local(5), "h0", Request::Kill { target: tid });
    assert!(error_says(&again, "has already ended"), "{again:?}");
    let unknown = c.m.control(
        Requester::Local(5),
        "h0",
        Request::Kill {
            target: "j9".into(),
        },
    );
    assert!(error_says(&unknown, "no job or VP"), "{unknown:?}");
}

#[test]
fn a_kill_whose_vps_do_not_end_fails_at_its_deadline_naming_them() {
    let mut c = Cluster::new(2);
    let placed = c.running_job(2);
    let now = Instant::now();
    c.m.tick(now, Duration::from_secs(3600));
    let out = c.m.control(
        Requester::Local(7),
        "h0",
        Request::Kill {
            target: "j1".into(),
        },
    );
    assert!(!out.iter().any(|o| matches!(o, Out::Reply(..))));
    // One ends, the other does not.
    let (h, tid) = &placed[0];
    c.m.exited(
        h,
        *tid,
        ExitInfo {
            code: None,
            signal: Some(9),
            error: None,
            cpu_ms: None,
        },
    );
    let early =
        c.m.tick(now + Duration::from_secs(5), Duration::from_secs(3600));
    assert!(
        !early.iter().any(|o| matches!(o, Out::Reply(..))),
        "{early:?}"
    );
    let late =
        c.m.tick(now + Duration::from_secs(11), Duration::from_secs(3600));
    let left = format!("t{:x}", placed[1].1);
    assert!(
        late.iter().any(
            |o| matches!(o, Out::Reply(Requester::Local(7), Response::Error { message })
            if message.contains(&left) && !message.contains(&format!("t{:x}", placed[0].1)))
        ),
        "{late:?}"
    );
}

#[test]
fn a_silent_host_mid_job_is_lost_and_its_vp_placed_again() {
    // Programs that know nothing of libmig: started again from the start.
    let mut c = Cluster::new(2);
    let placed = c.running_plain_job(2);
    let (lost, tid) = placed
        .iter()
        .find(|(h, _)| h == "h1")
        .cloned()
        .expect("a VP on h1");
    c.m.heard_from("h0", c.at(1));
    let out = tick_through(&mut c.m, c.t0, 10);
    assert!(!c.m.is_alive(&lost));
    assert!(out
        .iter()
        .any(|o| matches!(o, Out::Log(l) if l.contains("left the pool"))));
    // One processor left for two VPs: gang scheduling gives it two slots.
    assert_eq!(starts(&out), vec![("h0".to_string(), tid)]);
}

#[test]
fn a_job_whose_vps_may_talk_that_loses_one_with_no_checkpoint_ends_with_the_reason() {
    let mut c = Cluster::new(2);
    c.running_job(2);
    let out = tick_through(&mut c.m, c.t0, 10);
    assert!(starts(&out).is_empty(), "{out:?}");
    assert!(
        out.iter().any(|o| matches!(o, Out::Log(l)
            if l.contains("ending job j1") && l.contains("no checkpoint to go back to"))),
        "{out:?}"
    );
    // Its status says mig ended it, not "command not found".
    assert!(
        out.iter().any(|o| matches!(o, Out::History(i)
            if i.status == Some(libmig::msg::STATUS_LOST))),
        "{out:?}"
    );
}

fn ended_with(out: &[Out]) -> Option<i32> {
    out.iter().find_map(|o| match o {
        Out::History(i) => i.status,
        _ => None,
    })
}

fn killed() -> ExitInfo {
    ExitInfo {
        code: None,
        signal: Some(libc::SIGKILL),
        error: None,
        cpu_ms: None,
    }
}

fn exit_0() -> ExitInfo {
    ExitInfo {
        code: Some(0),
        signal: None,
        error: None,
        cpu_ms: None,
    }
}

#[test]
fn a_vp_its_own_job_kills_is_no_failure_of_the_job_and_one_of_another_job_is() {
    let mut c = Cluster::new(2);
    let placed = c.running_plain_job(2);
    let ((ha, a), (hb, b)) = (placed[0].clone(), placed[1].clone());
    // PVM's pvm_kill: VP a kills VP b of its own job.
    let out = c.m.vp_call(&ha, a, 1, VpCall::Kill { tid: b });
    assert!(kills(&out).contains(&(hb.clone(), b)), "{out:?}");
    // Its host's report of the signal comes after, and changes nothing.
    assert!(ended_with(&c.m.exited(&hb, b, killed())).is_none());
    assert_eq!(ended_with(&c.m.exited(&ha, a, exit_0())), Some(0));
    // A VP of another job killed so is killed, as by `mig kill`.
    let first = c.running_plain_job(1)[0].clone();
    let second = c.running_plain_job(1)[0].clone();
    c.m.vp_call(&first.0, first.1, 2, VpCall::Kill { tid: second.1 });
    assert_eq!(
        ended_with(&c.m.exited(&second.0, second.1, killed())),
        Some(128 + libc::SIGKILL)
    );
}

#[test]
fn a_vp_whose_program_never_said_it_can_move_is_never_asked_to() {
    let mut c = Cluster::new(3);
    let placed = c.running_plain_job(2);
    let (busy, tid) = placed[0].clone();
    // Another host's word for it counts for nothing.
    c.m.from_host(&other(&busy), ToMaster::Movable { tid });
    let out = migrate(&mut c, tid, &other(&busy));
    assert!(error_says(&out, "cannot be moved"), "{out:?}");
    assert!(move_out_orders(&out).is_empty());
    // Its owner is back: the scheduler holds it where it is (it is never
    // asked to move it), the master does not ask its host for an image
    // (which would resume it), and it stays stopped there.
    let out = c.m.owner_report(&busy, report(OwnerState::Reclaimed));
    assert!(move_out_orders(&out).is_empty(), "{out:?}");
    assert!(
        out.iter().any(|o| matches!(o, Out::Log(l)
            if l.contains("waits on") && l.contains("its program cannot be moved"))),
        "{out:?}"
    );
    assert!(
        !out.iter()
            .any(|o| matches!(o, Out::Log(l) if l.contains("not moving"))),
        "{out:?}"
    );
    assert_eq!(
        c.state(tid),
        (
            Some(busy.clone()),
            "stopped (owner back; its program cannot be moved)".into()
        )
    );
    // Retries find the same.
    let later = c.m.tick(c.at(60), Duration::from_secs(3600));
    assert!(move_out_orders(&later).is_empty());
}

fn kills(out: &[Out]) -> Vec<(String, Tid)> {
    out.iter()
        .filter_map(|o| match o {
            Out::ToHost(h, ToHost::Kill { tid }) => Some((h.clone(), *tid)),
            _ => None,
        })
        .collect()
}

#[test]
fn killing_a_job_reaches_every_vp_where_its_process_is_moving_held_or_parked() {
    let mut c = Cluster::new(3);
    let placed = c.running_job(2);
    // VP 0 is on its way elsewhere (its host's owner came back); on a
    // single-host cluster the other case: held where it is, then parked.
    let (busy, moving) = placed[0].clone();
    let out = c.m.owner_report(&busy, report(OwnerState::Reclaimed));
    let target = move_out_orders(&out)[0].2.clone();
    c.m.owner_report(&busy, report(OwnerState::Offered));
    let out = c.m.control(
        Requester::Local(5),
        "h0",
        Request::Kill {
            target: "j1".into(),
        },
    );
    let k = kills(&out);
    assert!(k.contains(&(busy.clone(), moving)), "{k:?}");
    assert!(k.contains(&(target.clone(), moving)), "{k:?}");
    assert!(k.contains(&placed[1]), "{k:?}");
    // Restored on the target all the same: it is ended there at once.
    let late = c.m.started(&target, moving, 77);
    assert_eq!(kills(&late), vec![(target, moving)]);

    let mut c = Cluster::new(1);
    let (h, tid) = c.running_job(1)[0].clone();
    c.m.owner_report(&h, report(OwnerState::Reclaimed));
    c.m.parked(&h, tid);
    let out = c.m.control(
        Requester::Local(5),
        "h0",
        Request::Kill {
            target: "j1".into(),
        },
    );
    assert_eq!(kills(&out), vec![(h, tid)], "{out:?}");
}

#[test]
fn a_job_killed_while_it_restores_ends_with_its_processes_ends() {
    let mut c = Cluster::new(2);
    let placed = c.running_job(2);
    take_checkpoint(&mut c, &placed);
    let out = c.m.control(
        Requester::Local(4),
        "h0",
        Request::Restart { job: "j1".into() },
    );
    all_intact(&mut c, &out);
    let out = c.m.control(
        Requester::Local(5),
        "h0",
        Request::Kill {
            target: "j1".into(),
        },
    );
    for (h, tid) in &placed {
        assert!(out.contains(&Out::ToHost(h.clone(), ToHost::Kill { tid: *tid })));
    }
    let mut answer = Vec::new();
    for (h, tid) in &placed {
        answer.extend(c.m.exited(
            h,
            *tid,
            ExitInfo {
                code: None,
                signal: Some(9),
                error: None,
                cpu_ms: None,
            },
        ));
    }
    assert!(c.m.ps().is_empty(), "{:?}", c.m.ps());
    assert!(answer.iter().any(|o| matches!(
        o,
        Out::Reply(Requester::Local(5), Response::Ok { message }) if message.contains("VPs ended")
    )), "{answer:?}");
}

fn grants(out: &[Out]) -> Vec<(String, u64, u64)> {
    out.iter()
        .filter_map(|o| match o {
            Out::ToHost(h, ToHost::LeaseGrant { n, ms }) => Some((h.clone(), *n, *ms)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_worker_whose_connection_is_lost_is_taken_for_dead_only_once_its_lease_has_lapsed() {
    let now = Instant::now();
    let (mut m, _) = Master::new(facts("h0", 1), now, Duration::ZERO);
    m.set_lease(Duration::from_millis(2500));
    m.register(facts("h1", 1), now);
    let out = m.control(Requester::Local(1), "h0", Request::Spawn(spec(2)));
    assert_eq!(starts(&out).len(), 2);
    let at = |ms: u64| now + Duration::from_millis(ms);
    m.heard_from("h1", at(100));
    let out = m.from_host("h1", ToMaster::LeaseAsk { n: 1 });
    assert_eq!(grants(&out), vec![("h1".to_string(), 1, 2500)]);
    // Cut off at 200 ms: its VP may run until 2600 ms; not started
    // elsewhere before.
    let out = m.host_lost("h1", "connection reset", at(200));
    assert!(starts(&out).is_empty(), "{out:?}");
    assert!(m.is_alive("h1"));
    assert!(starts(&m.tick(at(2500), Duration::from_secs(3))).is_empty());
    let out = m.tick(at(2700), Duration::from_secs(3));
    assert_eq!(starts(&out).len(), 1, "{out:?}");
    assert_eq!(starts(&out)[0].0, "h0");
    assert!(!m.is_alive("h1"));
    // A worker never granted a lease is taken for dead at once.
    m.register(facts("h2", 1), at(3000));
    let out = m.host_lost("h2", "connection reset", at(3100));
    assert!(!m.is_alive("h2"), "{out:?}");
}

#[test]
fn a_restart_with_no_intact_images_leaves_the_job_as_it_was_or_ends_one_that_lost_a_host() {
    let mut c = Cluster::new(3);
    let placed = c.running_job(2);
    take_checkpoint(&mut c, &placed);
    // By hand: a clear error, nothing stopped, the job runs on.
    let out = c.m.control(
        Requester::Local(4),
        "h0",
        Request::Restart { job: "j1".into() },
    );
    assert_eq!(checks(&out).len(), 2);
    // A second restart while the first looks joins it.
    let again = c.m.control(
        Requester::Local(6),
        "h0",
        Request::Restart { job: "j1".into() },
    );
    assert!(checks(&again).is_empty());
    let out = none_intact(&mut c, &out);
    assert!(kills(&out).is_empty(), "{out:?}");
    for who in [4, 6] {
        assert!(out.iter().any(|o| matches!(
            o,
            Out::Reply(Requester::Local(w), Response::Error { message })
                if *w == who && message.contains("no intact copy") && message.contains("goes on as it was")
        )), "{out:?}");
    }
    for (h, tid) in &placed {
        assert_eq!(c.state(*tid), (Some(h.clone()), "running".into()));
    }
    // A host died under it: it cannot go on consistently, and ends with
    // the reason as its VPs' error.
    let (lost, _) = placed
        .iter()
        .find(|(h, _)| h != "h0")
        .cloned()
        .expect("a worker VP");
    let out = c.m.host_gone(&lost, "connection lost");
    assert!(!checks(&out).is_empty());
    let out = none_intact(&mut c, &out);
    assert!(
        out.iter()
            .any(|o| matches!(o, Out::Log(l) if l.contains("ending job j1"))),
        "{out:?}"
    );
    assert!(c.m.ps().is_empty(), "{:?}", c.m.ps());
}

#[test]
fn a_master_that_was_busy_does_not_count_the_hosts_silence_meanwhile() {
    let mut c = Cluster::new(2);
    c.running_plain_job(2);
    // Busy (or stopped) from its start for 4 s: its first tick does not
    // give up a host whose messages it has not read yet.
    let out = c.m.tick(c.at(4), Duration::from_secs(3));
    assert!(c.m.is_alive("h1"), "{out:?}");
    assert!(
        out.iter()
            .any(|o| matches!(o, Out::Log(l) if l.contains("the master was busy"))),
        "{out:?}"
    );
    // Then silent while the master ticks on: given up.
    let from = c.at(4);
    let out = tick_through(&mut c.m, from, 4);
    assert!(!c.m.is_alive("h1"), "{out:?}");
}

#[test]
fn a_job_killed_while_its_images_are_looked_for_does_not_come_back() {
    let mut c = Cluster::new(2);
    let placed = c.running_job(2);
    take_checkpoint(&mut c, &placed);
    let out = c.m.control(
        Requester::Local(4),
        "h0",
        Request::Restart { job: "j1".into() },
    );
    c.m.control(
        Requester::Local(5),
        "h0",
        Request::Kill {
            target: "j1".into(),
        },
    );
    let out = all_intact(&mut c, &out);
    assert!(restores(&out).is_empty(), "{out:?}");
    assert!(out.iter().any(|o| matches!(
        o,
        Out::Reply(Requester::Local(4), Response::Error { message }) if message.contains("was killed")
    )), "{out:?}");
    // Killed, and every VP ended, before the hosts keeping its images
    // answered: whoever asked for the restart hears it all the same.
    let mut c = Cluster::new(2);
    let placed = c.running_job(2);
    take_checkpoint(&mut c, &placed);
    c.m.control(
        Requester::Local(4),
        "h0",
        Request::Restart { job: "j1".into() },
    );
    c.m.control(
        Requester::Local(5),
        "h0",
        Request::Kill {
            target: "j1".into(),
        },
    );
    let mut out = Vec::new();
    for (h, tid) in &placed {
        let status = ExitInfo {
            code: None,
            signal: Some(9),
            error: None,
            cpu_ms: None,
        };
        out.extend(c.m.exited(h, *tid, status));
    }
    assert!(
        out.iter().any(|o| matches!(
            o,
            Out::Reply(Requester::Local(4), Response::Error { message })
                if message.contains("was killed before it could restart")
        )),
        "{out:?}"
    );
}

#[test]
fn after_a_change_of_master_the_new_one_knows_where_every_copy_is_and_makes_new_ones() {
    let mut c = Cluster::new(3);
    let placed = c.running_job(3);
    let (_, copies_made) = take_checkpoint_copies(&mut c, &placed);
    // h1 takes over from h0, which lives on as a worker; then h2 dies.
    let (mut n, _) = Master::import(&c.m.export(), "h1", c.t0).expect("import");
    n.heard_from("h0", c.t0);
    let out = n.host_gone("h2", "test");
    // Every image that had a copy on h2 gets another, from the copy left,
    // on a live host without one.
    let lost_copies: Vec<&ImageId> = copies_made
        .iter()
        .filter(|(i, to)| to == "h2" || placed.iter().any(|(h, t)| h == "h2" && *t == i.tid))
        .map(|(i, _)| i)
        .collect();
    let again = copies(&out);
    for image in &lost_copies {
        let made = again.iter().find(|x| x.1 == **image);
        let (from, _, to, _) = made.unwrap_or_else(|| panic!("{image}: {out:?}"));
        assert!(from != "h2" && to != "h2" && from != to, "{again:?}");
    }
    // The job lost a VP with h2: the images are asked of live hosts only.
    let asked = checks(&out);
    assert_eq!(asked.len(), 3, "{out:?}");
    assert!(asked.iter().all(|(h, _)| h != "h2"), "{asked:?}");
}

#[test]
fn voters_go_from_one_to_three_at_once_and_a_gone_one_is_replaced_in_the_same_change() {
    let mut c = Cluster::new(2);
    assert_eq!(
        c.m.voter_change(),
        None,
        "two hosts: the master alone votes"
    );
    c.m.register(facts("h2", 1), c.t0);
    let change = c.m.voter_change().expect("three hosts: three voters");
    assert_eq!(change.add.len(), 2, "{change:?}");
    assert!(change.remove.is_empty());
    assert_eq!(c.m.voter_change(), None);
    c.m.register(facts("h3", 1), c.t0);
    let voter = change.add[0].1.clone();
    c.m.host_gone(&voter, "test");
    let change = c.m.voter_change().expect("a replacement");
    assert_eq!(change.remove.len(), 1, "{change:?}");
    assert_eq!(change.add, vec![(4, "h3".to_string())]);
    assert_eq!(c.m.voters().len(), 3);
}

#[test]
fn voters_change_one_at_a_time_however_many_went_at_once() {
    let mut c = Cluster::new(7);
    let change = c.m.voter_change().expect("seven hosts: five voters");
    assert_eq!(change.add.len(), 4, "{change:?}");
    assert_eq!(c.m.voter_change(), None);
    // Two voters' hosts go together: one goes out (and a spare comes in)
    // a change, never both.
    let (a, b) = (change.add[0].1.clone(), change.add[1].1.clone());
    c.m.host_gone(&a, "test");
    c.m.host_gone(&b, "test");
    let first = c.m.voter_change().expect("a replacement");
    assert_eq!(first.remove.len(), 1, "{first:?}");
    assert_eq!(first.add.len(), 1, "{first:?}");
    let second = c.m.voter_change().expect("the other replacement");
    assert_eq!(second.remove.len(), 1, "{second:?}");
    assert_eq!(second.add.len(), 1, "{second:?}");
    assert_ne!(first.remove, second.remove);
    assert_eq!(c.m.voters().len(), 5);
    assert_eq!(c.m.voter_change(), None);
}

#[test]
fn a_daemon_registering_again_keeps_its_name_and_another_gets_a_new_one() {
    let mut c = Cluster::new(2);
    // The same daemon (address and pid), whose first answer was lost.
    let (name, _) = c.m.register(facts("h1", 1), c.t0);
    assert_eq!(name, "h1");
    assert!(c.m.is_alive("h1"));
    // Another daemon asking for the name of a live host.
    let other = HostFacts {
        pid: 2,
        ..facts("h1", 1)
    };
    let (name, _) = c.m.register(other, c.t0);
    assert_eq!(name, "h1-2");
}

#[test]
fn a_master_cut_off_from_its_voters_counts_no_silence_and_lets_no_lease_lapse() {
    let mut c = Cluster::new(3);
    c.m.tick(c.at(1), Duration::from_secs(3));
    c.m.from_host("h2", ToMaster::LeaseAsk { n: 1 });
    let out = c.m.host_lost("h2", "connection reset", c.at(1));
    assert!(c.m.is_alive("h2"), "{out:?}");
    // Cut off from second 2 to second 10: nothing is given up, the host
    // whose link broke included.
    for k in 2..=10 {
        c.m.excuse_silence(c.at(k));
        let out = c.m.tick(c.at(k), Duration::from_secs(3));
        assert!(
            c.m.is_alive("h1") && c.m.is_alive("h2"),
            "second {k}: {out:?}"
        );
    }
    // In touch again: the hosts have their time from then to be heard.
    let out = c.m.tick(c.at(11), Duration::from_secs(3));
    assert!(c.m.is_alive("h1") && c.m.is_alive("h2"), "{out:?}");
    let from = c.at(11);
    let out = tick_through(&mut c.m, from, 3);
    assert!(!c.m.is_alive("h1") && !c.m.is_alive("h2"), "{out:?}");
}

#[test]
fn a_silent_host_is_not_given_up_while_the_lease_the_master_granted_runs() {
    let mut c = Cluster::new(2);
    // h1 last heard at second 0; a lease ask of it granted at second 2.
    c.m.tick(c.at(1), Duration::from_secs(3));
    c.m.tick(c.at(2), Duration::from_secs(3));
    c.m.from_host("h1", ToMaster::LeaseAsk { n: 1 });
    let out =
        c.m.tick(c.t0 + Duration::from_millis(3500), Duration::from_secs(3));
    assert!(c.m.is_alive("h1"), "{out:?}");
    let out = c.m.tick(c.at(5), Duration::from_secs(3));
    assert!(!c.m.is_alive("h1"), "{out:?}");
}

#[test]
fn moves_leave_nothing_behind_in_the_masters_state() {
    let mut c = Cluster::new(2);
    let (mut at, tid) = c.running_job(1)[0].clone();
    let mut sizes = Vec::new();
    for k in 0..400 {
        let to = other(&at);
        migrate(&mut c, tid, &to);
        c.m.started(&to, tid, 5000 + k);
        at = to;
        if k == 100 || k == 399 {
            sizes.push(c.m.export().len());
        }
    }
    // (A counter or two may take another byte.)
    assert!(
        sizes[1] <= sizes[0] + 8,
        "the replicated state grew with moves: {sizes:?}"
    );
}

#[test]
fn a_vp_is_not_moved_while_its_job_pauses_for_a_checkpoint() {
    let mut c = Cluster::new(2);
    let (src, tid) = c.running_job(1)[0].clone();
    c.m.control(
        Requester::Local(3),
        "h0",
        Request::Checkpoint { job: "j1".into() },
    );
    // Neither refused nor begun: it waits for the round (see
    // `a_move_asked_by_hand_while_the_vps_pause_...`).
    let out = migrate(&mut c, tid, &other(&src));
    assert!(replies(&out).is_empty(), "{out:?}");
    assert!(move_out_orders(&out).is_empty());
    assert_eq!(c.state(tid), (Some(src), "running".into()));
}

#[test]
fn a_host_is_deleted_only_once_drained_and_is_then_forgotten() {
    let mut c = Cluster::new(3);
    let delete = |c: &mut Cluster, host: &str| {
        c.m.control(
            Requester::Local(1),
            "h0",
            Request::Delete { host: host.into() },
        )
    };
    assert!(error_says(&delete(&mut c, "h9"), "no host \"h9\""));
    assert!(error_says(&delete(&mut c, "h0"), "is the master's host"));
    let placed = c.running_job(1);
    let (busy, tid) = placed[0].clone();
    if busy != "h0" {
        assert!(error_says(
            &delete(&mut c, &busy),
            &format!("still holds 1 VP (t{tid:x})")
        ));
    }
    // A host with nothing on it: told to stop, out of the map and the list;
    // its leaving later restarts nothing.
    let idle = ["h1", "h2"]
        .into_iter()
        .find(|h| *h != busy)
        .expect("an idle worker");
    let out = delete(&mut c, idle);
    assert!(
        out.contains(&Out::ToHost(idle.to_string(), ToHost::Halt)),
        "{out:?}"
    );
    assert!(replies(&out)
        .iter()
        .any(|r| matches!(r, Response::Ok { message } if message.contains("leaves"))));
    assert!(c.m.hosts_info().iter().all(|h| h.facts.name != idle));
    assert!(c.m.sched.map().processors().all(|(_, p)| &*p.host != idle));
    assert!(c.m.host_lost(idle, "closed", c.at(1)).is_empty());
    assert!(starts(&tick_through(&mut c.m, c.t0, 20)).is_empty());
    assert_eq!(c.state(tid).0, Some(busy));
}

// ----- placements that choose hosts (seeds 002-004) --------------------------

fn hosts_of(placed: &[(String, Tid)]) -> BTreeSet<String> {
    placed.iter().map(|(h, _)| h.clone()).collect()
}

#[test]
fn under_bidding_a_cluster_stays_together_and_a_group_spreads() {
    let mut c = Cluster::new(4);
    c.m.set_balance(Some(crate::balance::choice::Policy::Bidding));
    // A group of four over the threshold (4 VPs on one processor): one VP
    // to each host.
    let out =
        c.m.control(Requester::Local(1), "h2", Request::Spawn(spec(4)));
    let placed = starts(&out);
    assert_eq!(hosts_of(&placed).len(), 4, "{out:?}");
    // Every host holds one VP: the lowest bid for a cluster of three is
    // where it was asked for, all three there.
    let mut cluster = spec(3);
    cluster.class = Some(libmig::msg::JobClass::Cluster);
    let out =
        c.m.control(Requester::Local(1), "h2", Request::Spawn(cluster));
    let placed = starts(&out);
    assert_eq!(placed.len(), 3, "{out:?}");
    assert_eq!(hosts_of(&placed), BTreeSet::from(["h2".to_string()]));
    assert!(out
        .iter()
        .any(|o| matches!(o, Out::Log(l) if l.contains("bidding placement, cluster job"))));
}

#[test]
fn under_nres_each_vp_takes_the_tightest_host_with_its_memory() {
    let t0 = Instant::now();
    let mem = |name: &str, mb: u64| HostFacts {
        memory_mb: mb,
        ..facts(name, 1)
    };
    let (mut m, _) = Master::new(mem("h0", 4000), t0, Duration::ZERO);
    m.register(mem("h1", 1000), t0);
    m.register(mem("h2", 2000), t0);
    m.set_balance(Some(crate::balance::choice::Policy::Nres));
    let mut placed = Vec::new();
    for mb in [500, 1500, 3000] {
        let mut s = spec(1);
        s.memory_mb = Some(mb);
        let out = m.control(Requester::Local(1), "h0", Request::Spawn(s));
        placed.push(starts(&out)[0].clone());
    }
    // Our example of seed 004's nested choices (§2.2): one fits {h0, h1,
    // h2}, one {h0, h2}, one {h0}.
    let hosts: Vec<&str> = placed.iter().map(|(h, _)| h.as_str()).collect();
    assert_eq!(hosts, ["h1", "h2", "h0"]);
    // What they asked for is reserved: a fourth of 1500 fits nowhere now
    // (h0 has 1000 left), so nres leaves it to the gang scheduler, which
    // finds no host whose memory holds it beside the VPs there either:
    // it waits until the VP on h0 ends.
    let h0 = m.hosts_info().into_iter().find(|h| h.facts.name == "h0");
    assert_eq!(h0.map(|h| h.reserved_memory_mb), Some(3000));
    let mut s = spec(1);
    s.memory_mb = Some(1500);
    let out = m.control(Requester::Local(1), "h0", Request::Spawn(s));
    assert!(!out
        .iter()
        .any(|o| matches!(o, Out::Log(l) if l.contains("nres placement"))));
    assert!(starts(&out).is_empty(), "{out:?}");
    let (h, tid) = placed[2].clone();
    m.started(&h, tid, 100);
    let done = ExitInfo {
        code: Some(0),
        signal: None,
        error: None,
        cpu_ms: None,
    };
    let out = m.exited(&h, tid, done);
    assert_eq!(starts(&out).len(), 1, "{out:?}");
}

#[test]
fn under_roc_work_starts_where_asked_and_a_vp_a_host_gives_away_moves() {
    let mut c = Cluster::new(2);
    c.m.set_balance(Some(crate::balance::choice::Policy::Roc));
    let mut bag = spec(4);
    bag.independent = true;
    let out = c.m.control(Requester::Local(1), "h0", Request::Spawn(bag));
    let placed = starts(&out);
    assert_eq!(hosts_of(&placed), BTreeSet::from(["h0".to_string()]));
    for (h, tid) in &placed {
        c.m.started(h, *tid, 100 + *tid as u32);
        c.m.from_host(h, ToMaster::Movable { tid: *tid });
    }
    // The master decides nothing itself: ticks move nothing.
    let out = tick_through(&mut c.m, c.t0, 3);
    assert!(move_out_orders(&out).is_empty(), "{out:?}");
    // A host gives away only its own VPs: h1 cannot give h0's.
    let tid = placed[3].1;
    let out = c.m.from_host(
        "h1",
        ToMaster::GiveAway {
            tid,
            to: "h1".into(),
        },
    );
    assert!(move_out_orders(&out).is_empty(), "{out:?}");
    assert!(
        out.iter()
            .any(|o| matches!(o, Out::Log(l) if l.contains("refused"))),
        "{out:?}"
    );
    // h0 gives it to h1, which asked: moved.
    let out = c.m.from_host(
        "h0",
        ToMaster::GiveAway {
            tid,
            to: "h1".into(),
        },
    );
    assert_eq!(
        move_out_orders(&out),
        vec![("h0".to_string(), tid, "h1".to_string())]
    );
    // Given again while it moves: refused, nothing more.
    let out = c.m.from_host(
        "h0",
        ToMaster::GiveAway {
            tid,
            to: "h1".into(),
        },
    );
    assert!(move_out_orders(&out).is_empty(), "{out:?}");
}

#[test]
fn a_vp_of_a_job_that_is_not_independent_is_not_given_away() {
    let mut c = Cluster::new(2);
    c.m.set_balance(Some(crate::balance::choice::Policy::Roc));
    let out =
        c.m.control(Requester::Local(1), "h0", Request::Spawn(spec(2)));
    let placed = starts(&out);
    for (h, tid) in &placed {
        c.m.started(h, *tid, 100 + *tid as u32);
        c.m.from_host(h, ToMaster::Movable { tid: *tid });
    }
    let (h, tid) = placed[0].clone();
    let out = c.m.from_host(
        &h,
        ToMaster::GiveAway {
            tid,
            to: "h9".into(),
        },
    );
    assert!(move_out_orders(&out).is_empty(), "{out:?}");
}

#[test]
fn a_restart_cancels_a_move_in_flight_and_only_the_recorded_host_starts_the_vp() {
    // The scheduler (or a user) moves VP A while its job restarts from its
    // checkpoint, in the same turn: the move's target may still start A from
    // the image its source sent, and the restore starts A on A's host.
    let mut c = Cluster::new(3);
    let placed = c.running_job(2);
    take_checkpoint(&mut c, &placed);
    let (src, a) = placed[0].clone();
    let to = (0..3)
        .map(|i| format!("h{i}"))
        .find(|h| placed.iter().all(|(p, _)| p != h))
        .expect("a host without a VP");
    let out = migrate(&mut c, a, &to);
    assert_eq!(move_out_orders(&out), vec![(src.clone(), a, to.clone())]);
    let out = c.m.control(
        Requester::Local(4),
        "h0",
        Request::Restart { job: "j1".into() },
    );
    let out = all_intact(&mut c, &out);
    // The move is called off: its target ends whatever of A it has; A is
    // restored on its host (which ends A's process there as it does).
    assert_eq!(kills(&out), vec![(to.clone(), a)], "the move's target");
    assert!(restores(&out).iter().any(|(_, t, h)| *t == a && *h == src));
    // The target started A from the moved image all the same: that
    // process is ended at once, and A is still restored where the master
    // has it.
    let late = c.m.started(&to, a, 999);
    assert_eq!(kills(&late), vec![(to.clone(), a)], "{late:?}");
    assert_eq!(
        c.state(a),
        (
            Some(src.clone()),
            "restoring from the job's checkpoint".into()
        )
    );
    let out = c.m.started(&src, a, 7);
    assert!(kills(&out).is_empty(), "{out:?}");
    assert_eq!(c.state(a), (Some(src.clone()), "running".into()));
    // A report of a VP running on a host the master does not have it on
    // (a start that raced a restart or a move) ends that process too.
    let stray = c.m.started(&to, a, 1000);
    assert_eq!(kills(&stray), vec![(to, a)], "{stray:?}");
    assert_eq!(c.state(a), (Some(src), "running".into()));
}

#[test]
fn a_restore_whose_image_does_not_arrive_is_tried_again_then_ends_its_job_saying_why() {
    let mut c = Cluster::new(3);
    let placed = c.running_job(2);
    take_checkpoint(&mut c, &placed);
    let mut out = c.m.control(
        Requester::Local(4),
        "h0",
        Request::Restart { job: "j1".into() },
    );
    for round in 1..=4 {
        let restored = all_intact(&mut c, &out);
        let (_, tid, to) = restores(&restored)[0].clone();
        // The image stopped coming, or could not be written there.
        out = c.m.from_host(
            &to,
            ToMaster::Missing {
                tid,
                reason: "No space left on device (os error 28)".into(),
            },
        );
        if round <= 3 {
            assert!(!checks(&out).is_empty(), "round {round}: {out:?}");
        } else {
            assert!(checks(&out).is_empty(), "{out:?}");
            assert!(
                out.iter().any(|o| matches!(o, Out::Log(l)
                    if l.contains("ending job j1") && l.contains("could not be restored")
                        && l.contains("No space left on device"))),
                "{out:?}"
            );
        }
    }
}

#[test]
fn a_restore_that_fails_for_one_vp_each_time_ends_its_job_though_the_others_are_restored() {
    // The other VP taken in each time: the tries are the job's, not reset
    // by its restore.
    let mut c = Cluster::new(3);
    let placed = c.running_job(2);
    take_checkpoint(&mut c, &placed);
    let mut out = c.m.control(
        Requester::Local(4),
        "h0",
        Request::Restart { job: "j1".into() },
    );
    let mut failing = None;
    for round in 1..=4u32 {
        let restored = all_intact(&mut c, &out);
        let r = restores(&restored);
        let tid = *failing.get_or_insert(r[0].1);
        let to = r
            .iter()
            .find(|(_, t, _)| *t == tid)
            .map(|(_, _, h)| h.clone())
            .unwrap_or_else(|| panic!("round {round}: {tid:x} restored again: {r:?}"));
        for (_, other, at) in r.iter().filter(|(_, t, _)| *t != tid) {
            c.m.started(at, *other, 1000 + round);
        }
        out = c.m.from_host(
            &to,
            ToMaster::Missing {
                tid,
                reason: "its image: a socket's bytes did not fit".into(),
            },
        );
        if round <= 3 {
            assert!(!checks(&out).is_empty(), "round {round}: {out:?}");
        } else {
            assert!(checks(&out).is_empty(), "{out:?}");
            assert!(
                out.iter().any(|o| matches!(o, Out::Log(l)
                    if l.contains("ending job j1") && l.contains("could not be restored")
                        && l.contains("did not fit"))),
                "{out:?}"
            );
        }
    }
}

#[test]
fn a_host_that_could_not_take_in_a_vp_is_not_chosen_again_for_its_jobs_moves() {
    // Four VPs doubled up on two hosts; two more hosts join and the
    // scheduler spreads the job, one VP to h2, whose disk lacks the
    // program.
    let mut c = Cluster::new(2);
    c.running_job(4);
    c.m.register(facts("h2", 1), c.t0);
    let (_, out) = c.m.register(facts("h3", 1), c.t0);
    let moves = move_out_orders(&out);
    let (src, tid, _) = moves
        .iter()
        .find(|(_, _, to)| to == "h2")
        .cloned()
        .unwrap_or_else(|| panic!("a move to h2: {out:?}"));
    for (_, t, to) in moves.iter().filter(|(_, t, _)| *t != tid) {
        c.m.started(to, *t, 300);
    }
    let vp = c.m.tids[&tid].1;
    let out = c.m.from_host(
        "h2",
        ToMaster::Missing {
            tid,
            reason: "starting /bin/true: not found (relative to / or on PATH)".into(),
        },
    );
    assert!(
        out.contains(&Out::ToHost(src.clone(), ToHost::Recall { tid })),
        "{out:?}"
    );
    c.m.started(&src, tid, 301);
    let ps = c.m.ps();
    let v = ps.iter().find(|v| v.tid == tid).expect("in ps");
    assert_eq!(
        (v.host.as_deref(), v.state.as_str()),
        (Some(src.as_str()), "running")
    );
    let failed = v.move_failed.clone().unwrap_or_default();
    assert!(
        failed.contains("h2 (x86_64-linux) could not take it in") && failed.contains("/bin/true"),
        "{failed}"
    );
    // The map has it back where it runs.
    let placed = |c: &Cluster| c.m.sched.job_view("j1").expect("job").placement[&vp].clone();
    assert!(placed(&c).starts_with(&format!("{src}/")), "{}", placed(&c));
    // It is not moved there again: not after a failed move...
    for s in 1..=60 {
        let out = c.m.tick(c.at(s), Duration::from_secs(3600));
        assert!(move_out_orders(&out).is_empty(), "at {s} s: {out:?}");
    }
    // ...nor when the scheduler chooses h2 for it again (a host joins):
    // it stays, and the map follows it.
    let (_, out) = c.m.register(facts("h4", 1), c.at(61));
    assert!(
        !move_out_orders(&out).iter().any(|(_, _, to)| to == "h2"),
        "{out:?}"
    );
    assert!(
        out.iter().any(
            |o| matches!(o, Out::Log(l) if l.contains("stays on") && l.contains("h2 could not take in"))
        ),
        "{out:?}"
    );
    assert!(placed(&c).starts_with(&format!("{src}/")), "{}", placed(&c));
    // By hand, it is tried again (its program may be there now).
    let out = migrate(&mut c, tid, "h2");
    assert_eq!(move_out_orders(&out), vec![(src, tid, "h2".to_string())]);
}

/// Where the scheduler's map has VP `tid` of job j1.
fn mapped(c: &Cluster, tid: Tid) -> Option<String> {
    let (_, vp) = c.m.tids.get(&tid)?.clone();
    let place = c.m.sched.job_view("j1")?.placement.get(&vp)?.clone();
    Some(place.rsplit_once('/')?.0.to_string())
}

/// A scheduler move of VP `tid` off `busy`, whose owner came back, failed
/// once: the VP runs on `busy` and the map has it at the move's target.
fn scheduler_move_failed_once(c: &mut Cluster, busy: &str, tid: Tid) -> String {
    let out = c.m.owner_report(busy, report(OwnerState::Reclaimed));
    let orders = move_out_orders(&out);
    assert_eq!(orders.len(), 1, "{out:?}");
    let target = orders[0].2.clone();
    assert_eq!(mapped(c, tid).as_deref(), Some(target.as_str()));
    // (Its owner leaves again at once: its host's processor is back in
    // the map, and the move stands.)
    c.m.owner_report(busy, report(OwnerState::Offered));
    c.m.migrate_failed(tid, "its checkpoint is unusable");
    assert_eq!(c.state(tid).0.as_deref(), Some(busy));
    target
}

#[test]
fn a_scheduler_move_given_up_leaves_the_map_where_the_vp_runs() {
    let mut c = Cluster::new(3);
    let placed = c.running_job(2);
    let (busy, tid) = placed[0].clone();
    let target = scheduler_move_failed_once(&mut c, &busy, tid);
    // Tried again until given up: the map has it where it runs.
    for attempt in 1..MAX_MOVE_ATTEMPTS {
        let when = c.m.now + Duration::from_secs(5u64 << (attempt - 1));
        let again = c.m.tick(when, Duration::from_secs(3600));
        assert_eq!(
            move_out_orders(&again),
            vec![(busy.clone(), tid, target.clone())]
        );
        c.m.migrate_failed(tid, "its checkpoint is unusable");
    }
    assert_eq!(mapped(&c, tid).as_deref(), Some(busy.as_str()));
    assert_eq!(c.state(tid), (Some(busy), "running".into()));
}

#[test]
fn a_restart_while_a_scheduler_move_waits_to_be_tried_again_restores_the_vp_where_the_map_has_it() {
    // The map has VP A on the move's target, its process runs on its old
    // host: the restart starts A from its image on the target and ends
    // the process on the old host; map and master agree after.
    let mut c = Cluster::new(3);
    let placed = c.running_job(2);
    take_checkpoint(&mut c, &placed);
    let (busy, a) = placed[0].clone();
    let target = scheduler_move_failed_once(&mut c, &busy, a);
    let out = c.m.control(
        Requester::Local(4),
        "h0",
        Request::Restart { job: "j1".into() },
    );
    let out = all_intact(&mut c, &out);
    let restored = restores(&out);
    assert!(
        restored.iter().any(|(_, t, h)| *t == a && *h == target),
        "{out:?}"
    );
    assert!(kills(&out).contains(&(busy.clone(), a)), "{out:?}");
    for (_, tid, host) in &restored {
        assert_eq!(mapped(&c, *tid).as_ref(), Some(host), "{out:?}");
        assert_eq!(c.state(*tid).0.as_ref(), Some(host));
    }
    let out = c.m.started(&target, a, 77);
    assert!(kills(&out).is_empty(), "{out:?}");
    assert_eq!(c.state(a), (Some(target.clone()), "running".into()));
    assert_eq!(mapped(&c, a), Some(target));
}

#[test]
fn a_restart_during_a_scheduler_move_restores_the_vp_at_its_source_and_the_map_follows() {
    // The move's target may still start A from the image its source sent:
    // A is restored on its source, the target ends what it has of A, and
    // the map (which had A on the target) has it on the source.
    let mut c = Cluster::new(3);
    let placed = c.running_job(2);
    take_checkpoint(&mut c, &placed);
    let (busy, a) = placed[0].clone();
    let out = c.m.owner_report(&busy, report(OwnerState::Reclaimed));
    let target = move_out_orders(&out)[0].2.clone();
    c.m.owner_report(&busy, report(OwnerState::Offered));
    let out = c.m.control(
        Requester::Local(4),
        "h0",
        Request::Restart { job: "j1".into() },
    );
    let out = all_intact(&mut c, &out);
    assert!(
        restores(&out).iter().any(|(_, t, h)| *t == a && *h == busy),
        "{out:?}"
    );
    assert!(kills(&out).contains(&(target.clone(), a)), "{out:?}");
    assert_eq!(mapped(&c, a), Some(busy.clone()), "{out:?}");
    assert_eq!(c.state(a).0, Some(busy));
}

#[test]
fn a_host_lost_under_a_job_of_independent_vps_restores_only_its_vps_and_the_others_go_on() {
    let mut c = Cluster::new(3);
    let (placed, _) = independent_job(&mut c, 3);
    let (lost, gone) = on_a_worker(&placed);
    let out = c.m.host_gone(&lost, "connection lost");
    // Only the lost VP's image is looked for, and only it is restored.
    let asked = checks(&out);
    assert_eq!(asked.len(), 1, "{out:?}");
    assert_eq!(asked[0].1.tid, gone);
    let out = all_intact(&mut c, &out);
    let r = restores(&out);
    assert_eq!(r.len(), 1, "{out:?}");
    assert_eq!(r[0].1, gone);
    assert_ne!(r[0].2, lost);
    assert!(
        !out.iter()
            .any(|o| matches!(o, Out::Broadcast(ToHost::Fence { .. }))),
        "nothing the others sent is fenced off: {out:?}"
    );
    for (h, tid) in placed.iter().filter(|(_, t)| *t != gone) {
        assert_eq!(c.state(*tid), (Some(h.clone()), "running".into()));
    }
    let out = c.m.started(&r[0].2, gone, 500);
    assert!(kills(&out).is_empty(), "{out:?}");
    assert_eq!(c.state(gone), (Some(r[0].2.clone()), "running".into()));
}

#[test]
fn an_independent_vp_lost_with_no_image_left_starts_again_from_the_beginning_alone() {
    let mut c = Cluster::new(3);
    let (placed, _) = independent_job(&mut c, 2);
    let (lost, gone) = on_a_worker(&placed);
    let out = c.m.host_gone(&lost, "connection lost");
    let out = none_intact(&mut c, &out);
    let again = starts(&out);
    assert_eq!(again.len(), 1, "{out:?}");
    assert_eq!(again[0].1, gone);
    assert!(ended_with(&out).is_none(), "the job goes on: {out:?}");
    let (h, other) = placed
        .iter()
        .find(|(_, t)| *t != gone)
        .cloned()
        .expect("other");
    assert_eq!(c.state(other), (Some(h), "running".into()));
}

// ----- review: independent restores -----------------------------------------

/// A VP on a worker (not the master's host): its host and Tid.
fn on_a_worker(placed: &[(String, Tid)]) -> (String, Tid) {
    placed
        .iter()
        .find(|(h, _)| h != "h0")
        .cloned()
        .expect("a VP on a worker")
}

/// Where each VP runs, and where each image's copy is.
type Placed = (Vec<(String, Tid)>, Vec<(ImageId, String)>);

/// A running job j1 of `n` independent VPs with a checkpoint: (placed,
/// each image's copy host).
fn independent_job(c: &mut Cluster, n: u32) -> Placed {
    let mut s = spec(n);
    s.independent = true;
    let out = c.m.control(Requester::Local(1), "h0", Request::Spawn(s));
    let placed = starts(&out);
    assert_eq!(placed.len(), n as usize, "{out:?}");
    for (h, tid) in &placed {
        c.m.started(h, *tid, 100 + *tid as u32);
        c.m.from_host(h, ToMaster::Movable { tid: *tid });
    }
    let (_, copies) = take_checkpoint_copies(c, &placed);
    (placed, copies)
}

/// Two workers whose loss leaves every image a copy.
fn two_losable(
    placed: &[(String, Tid)],
    copies: &[(ImageId, String)],
) -> ((String, Tid), (String, Tid)) {
    let workers: Vec<_> = placed.iter().filter(|(h, _)| h != "h0").cloned().collect();
    for a in &workers {
        for b in &workers {
            if a == b {
                continue;
            }
            let ok = placed.iter().zip(copies).all(|((h, _), (_, copy))| {
                !([a.0.as_str(), b.0.as_str()].contains(&h.as_str())
                    && [a.0.as_str(), b.0.as_str()].contains(&copy.as_str()))
            });
            if ok {
                return (a.clone(), b.clone());
            }
        }
    }
    panic!("no two workers to lose: {placed:?} {copies:?}");
}

#[test]
fn a_second_host_lost_while_a_partial_restore_finds_no_image_has_its_vp_restored_too() {
    let mut c = Cluster::new(5);
    let (placed, copies) = independent_job(&mut c, 4);
    let ((l1, g1), (l2, g2)) = two_losable(&placed, &copies);
    let out1 = c.m.host_gone(&l1, "connection lost");
    assert_eq!(checks(&out1).len(), 1, "{out1:?}");
    let out2 = c.m.host_gone(&l2, "connection lost");
    // The first hunt finds nothing (its holders do not answer).
    let out3 = c.m.tick(c.at(40), Duration::from_secs(3600));
    let all: Vec<Out> = out2.iter().chain(&out3).cloned().collect();
    assert!(starts(&all).iter().any(|(_, t)| *t == g1), "{all:?}");
    // Nothing restores or starts g2 anywhere, and no hunt is under way.
    let g2_back = starts(&all).iter().any(|(_, t)| *t == g2)
        || restores(&all).iter().any(|(_, t, _)| *t == g2)
        || checks(&all).iter().any(|(_, i)| i.tid == g2);
    assert!(
        g2_back,
        "VP {g2:x} lost with {l2} has no process and nobody restores it: state {:?}; {all:?}",
        c.state(g2)
    );
}

#[test]
fn a_second_host_lost_during_a_partial_restore_restores_each_lost_vp_once() {
    let mut c = Cluster::new(5);
    let (placed, copies) = independent_job(&mut c, 4);
    let ((l1, g1), (l2, g2)) = two_losable(&placed, &copies);
    let out1 = c.m.host_gone(&l1, "connection lost");
    let _ = c.m.host_gone(&l2, "connection lost");
    let out3 = all_intact(&mut c, &out1);
    assert!(restores(&out3).iter().any(|(_, t, _)| *t == g1), "{out3:?}");
    let again: Vec<Tid> = checks(&out3).iter().map(|(_, i)| i.tid).collect();
    assert!(again.contains(&g2), "{out3:?}");
    assert!(
        !again.contains(&g1),
        "VP {g1:x}, just restored, is looked for and restored again: {again:x?}"
    );
}

#[test]
fn a_mig_restart_during_a_partial_restore_is_refused_at_once_saying_why() {
    let mut c = Cluster::new(4);
    let (placed, _) = independent_job(&mut c, 3);
    let (l1, _) = on_a_worker(&placed);
    let out1 = c.m.host_gone(&l1, "connection lost");
    let asked = c.m.control(
        Requester::Local(9),
        "h0",
        Request::Restart { job: "j1".into() },
    );
    assert!(error_says(&asked, "restoring the VPs it lost"), "{asked:?}");
    // The partial restore goes on, whatever it finds.
    let out = none_intact(&mut c, &out1);
    assert!(!out
        .iter()
        .any(|o| matches!(o, Out::Reply(Requester::Local(9), _))));
}

#[test]
fn a_mig_restart_during_a_partial_restore_is_never_told_ok_for_a_part() {
    let mut c = Cluster::new(4);
    let (placed, _) = independent_job(&mut c, 3);
    let (l1, _) = on_a_worker(&placed);
    let out1 = c.m.host_gone(&l1, "connection lost");
    let _ = c.m.control(
        Requester::Local(9),
        "h0",
        Request::Restart { job: "j1".into() },
    );
    let out = all_intact(&mut c, &out1);
    let ok = out
        .iter()
        .any(|o| matches!(o, Out::Reply(Requester::Local(9), Response::Ok { .. })));
    let n = restores(&out).len();
    assert!(
        !(ok && n < 3),
        "told Ok (restarting job) but {n} of 3 VPs restored: {out:?}"
    );
}

#[test]
fn a_host_lost_during_a_whole_restart_of_an_independent_job_restores_each_vp_once() {
    let mut c = Cluster::new(5);
    let (placed, copies) = independent_job(&mut c, 4);
    let ((l1, _), _) = two_losable(&placed, &copies);
    let asked = c.m.control(
        Requester::Local(9),
        "h0",
        Request::Restart { job: "j1".into() },
    );
    let _ = c.m.host_gone(&l1, "connection lost");
    // The hunt's holders on l1 do not answer; the others do.
    let live: Vec<(String, ImageId)> = checks(&asked)
        .into_iter()
        .filter(|(h, _)| *h != l1)
        .collect();
    let mut out = Vec::new();
    for (h, image) in live {
        out.extend(c.m.from_host(
            &h,
            ToMaster::ImageChecked {
                image,
                result: Ok(()),
            },
        ));
    }
    let mut all = out.clone();
    // Drive any further hunt to the end.
    for _ in 0..4 {
        let next = all_intact(&mut c, &out);
        if next.is_empty() {
            break;
        }
        all.extend(next.clone());
        out = next;
    }
    let over = c.m.tick(c.at(40), Duration::from_secs(3600));
    all.extend(over.clone());
    all.extend(all_intact(&mut c, &over));
    let r: Vec<Tid> = restores(&all).iter().map(|r| r.1).collect();
    eprintln!("restores: {r:x?}");
    for (_, t) in &placed {
        assert!(
            r.iter().filter(|x| *x == t).count() <= 1,
            "VP {t:x} restored more than once: {r:x?}"
        );
    }
}

#[test]
fn halt_says_how_many_hosts_it_halts_whatever_runs_on_them() {
    let mut c = Cluster::new(1);
    c.running_job(1);
    c.running_plain_job(1);
    let out = c.m.control(Requester::Local(1), "h0", Request::Halt);
    assert!(
        matches!(&replies(&out)[..], [Response::Ok { message }] if message == "halting 1 host"),
        "{out:?}"
    );
}

/// The answers to VPs' calls in `out`: (host, VP, call).
fn returns(out: &[Out]) -> Vec<(String, Tid, u64)> {
    out.iter()
        .filter_map(|o| match o {
            Out::ToHost(h, ToHost::VpReturn { tid, id, .. }) => Some((h.clone(), *tid, *id)),
            _ => None,
        })
        .collect()
}

/// Two VPs in group "g", VP `a` waiting in its barrier (call 7) and
/// moving from its host to another; VP `b` comes to the barrier (call 3):
/// a's answer goes to its source, which has taken its words for its move
/// and sends it back. Returns a, its source, where it moves, and what
/// the answer's coming back gave.
fn a_barrier_passed_while_one_moves(c: &mut Cluster) -> (Tid, String, String, Vec<Out>) {
    let placed = c.running_job(2);
    let (a_host, a) = placed[0].clone();
    let (b_host, b) = placed[1].clone();
    for (host, tid) in &placed {
        let join = VpCall::Join { group: "g".into() };
        c.m.from_host(
            host,
            ToMaster::VpCall {
                tid: *tid,
                id: 1,
                call: join,
            },
        );
    }
    let barrier = VpCall::Barrier {
        group: "g".into(),
        count: 2,
    };
    let out = c.m.from_host(
        &a_host,
        ToMaster::VpCall {
            tid: a,
            id: 7,
            call: barrier.clone(),
        },
    );
    assert!(returns(&out).is_empty(), "{out:?}");
    let to = ["h0", "h1", "h2"]
        .into_iter()
        .find(|h| *h != a_host && *h != b_host)
        .expect("a third host")
        .to_string();
    assert_eq!(move_out_orders(&migrate(c, a, &to)).len(), 1);
    let out = c.m.from_host(
        &b_host,
        ToMaster::VpCall {
            tid: b,
            id: 3,
            call: barrier,
        },
    );
    let mut got = returns(&out);
    got.sort();
    let mut want = vec![(b_host.clone(), b, 3), (a_host.clone(), a, 7)];
    want.sort();
    assert_eq!(got, want, "{out:?}");
    let back = c.m.from_host(
        &a_host,
        ToMaster::ReturnBack {
            tid: a,
            id: 7,
            ret: VpRet::Done,
        },
    );
    assert!(returns(&back).is_empty(), "{back:?}");
    (a, a_host, to, back)
}

#[test]
fn an_answer_to_a_moving_vp_waits_for_it_to_run_and_goes_where_it_runs() {
    let mut c = Cluster::new(3);
    let (a, _, to, out) = a_barrier_passed_while_one_moves(&mut c);
    assert!(
        out.iter()
            .any(|o| matches!(o, Out::Log(l) if l.contains("waits for it to run"))),
        "{out:?}"
    );
    // Nothing goes to it while it moves (the same answer sent back twice
    // is kept once)...
    let (src, _) = c.state(a);
    c.m.from_host(
        &src.expect("its source"),
        ToMaster::ReturnBack {
            tid: a,
            id: 7,
            ret: VpRet::Done,
        },
    );
    let out = c.m.tick(c.at(1), Duration::from_secs(3600));
    assert!(returns(&out).is_empty(), "{out:?}");
    // ...and once it runs where it went, its answer goes there, once.
    let out = c.m.from_host(&to, ToMaster::Started { tid: a, pid: 99 });
    assert_eq!(returns(&out), vec![(to.clone(), a, 7)], "{out:?}");
    let out = c.m.tick(c.at(2), Duration::from_secs(3600));
    assert!(returns(&out).is_empty(), "{out:?}");
    // The same, kept by a master that took over meanwhile: replicated.
    let mut c2 = Cluster::new(3);
    let (a2, _, to2, _) = a_barrier_passed_while_one_moves(&mut c2);
    let (mut m, _) = Master::import(&c2.m.export(), "h1", c2.at(1)).expect("import");
    let out = m.from_host(&to2, ToMaster::Started { tid: a2, pid: 99 });
    assert_eq!(returns(&out), vec![(to2, a2, 7)], "{out:?}");
}

#[test]
fn an_answer_to_a_vp_whose_move_failed_goes_where_it_stayed() {
    let mut c = Cluster::new(3);
    let (a, src, _, _) = a_barrier_passed_while_one_moves(&mut c);
    let out = c.m.from_host(
        &src,
        ToMaster::MigrateFailed {
            tid: a,
            reason: "its image could not be written".into(),
        },
    );
    assert_eq!(returns(&out), vec![(src, a, 7)], "{out:?}");
}

#[test]
fn an_answer_that_comes_back_for_a_vp_running_elsewhere_goes_there_and_one_ended_has_none() {
    let mut c = Cluster::new(3);
    let (a, src, to, _) = a_barrier_passed_while_one_moves(&mut c);
    c.m.from_host(&to, ToMaster::Started { tid: a, pid: 99 });
    let back = |c: &mut Cluster, id| {
        c.m.from_host(
            &src,
            ToMaster::ReturnBack {
                tid: a,
                id,
                ret: VpRet::Done,
            },
        )
    };
    let out = back(&mut c, 9);
    assert_eq!(returns(&out), vec![(to.clone(), a, 9)], "{out:?}");
    c.m.from_host(
        &to,
        ToMaster::Exited {
            tid: a,
            status: ExitInfo::ended_by_mig(0, "done".into()),
        },
    );
    let out = back(&mut c, 10);
    assert!(returns(&out).is_empty(), "{out:?}");
}

#[test]
fn an_answer_sent_back_by_a_host_it_never_went_to_is_refused() {
    let mut c = Cluster::new(3);
    let (a, src, to, _) = a_barrier_passed_while_one_moves(&mut c);
    let third = ["h0", "h1", "h2"]
        .into_iter()
        .find(|h| *h != src && *h != to)
        .expect("a third host")
        .to_string();
    // A forged answer to a call it will wait for, from the host where
    // neither the VP nor its answers ever were.
    let out = c.m.from_host(
        &third,
        ToMaster::ReturnBack {
            tid: a,
            id: 8,
            ret: VpRet::Instance(66),
        },
    );
    assert!(
        out.iter()
            .any(|o| matches!(o, Out::Log(l) if l.contains("refused"))),
        "{out:?}"
    );
    // Only the answer its source sent back reaches it where it runs.
    let out = c.m.from_host(&to, ToMaster::Started { tid: a, pid: 99 });
    assert_eq!(returns(&out), vec![(to.clone(), a, 7)], "{out:?}");
    // Once it runs there, its old host may still send one back; the third
    // host still may not.
    let back = |c: &mut Cluster, from: &str, id| {
        c.m.from_host(
            from,
            ToMaster::ReturnBack {
                tid: a,
                id,
                ret: VpRet::Done,
            },
        )
    };
    assert_eq!(returns(&back(&mut c, &src, 9)), vec![(to.clone(), a, 9)]);
    assert!(returns(&back(&mut c, &third, 10)).is_empty());
}

#[test]
fn an_answer_sent_to_a_moving_vps_host_that_dies_with_it_reaches_the_vp_rebuilt_elsewhere() {
    // The barrier is passed while VP a moves from src to `to`: its answer
    // goes to src, which dies before giving it or sending it back. The VP,
    // whole on `to`, is rebuilt there and says it waits for call 7.
    let mut c = Cluster::new(3);
    let mut placed = c.running_job(2);
    // (a on a worker: the master's own host does not die here.)
    placed.sort_by_key(|(h, _)| h == "h0");
    let (src, a) = placed[0].clone();
    let (b_host, b) = placed[1].clone();
    assert_ne!(src, "h0", "{placed:?}");
    for (host, tid) in &placed {
        let join = VpCall::Join { group: "g".into() };
        c.m.from_host(
            host,
            ToMaster::VpCall {
                tid: *tid,
                id: 1,
                call: join,
            },
        );
    }
    let barrier = VpCall::Barrier {
        group: "g".into(),
        count: 2,
    };
    c.m.from_host(
        &src,
        ToMaster::VpCall {
            tid: a,
            id: 7,
            call: barrier.clone(),
        },
    );
    let to = ["h0", "h1", "h2"]
        .into_iter()
        .find(|h| *h != src && *h != b_host && *h != "h0")
        .unwrap_or_else(|| panic!("a worker other than {src} and {b_host}"))
        .to_string();
    assert_eq!(move_out_orders(&migrate(&mut c, a, &to)).len(), 1);
    let out = c.m.from_host(
        &b_host,
        ToMaster::VpCall {
            tid: b,
            id: 3,
            call: barrier,
        },
    );
    assert!(returns(&out).contains(&(src.clone(), a, 7)), "{out:?}");
    c.m.host_gone(&src, "killed");
    c.m.from_host(&to, ToMaster::Started { tid: a, pid: 99 });
    let out = c.m.from_host(
        &to,
        ToMaster::Waits {
            tid: a,
            calls: vec![7],
        },
    );
    assert_eq!(returns(&out), vec![(to.clone(), a, 7)], "{out:?}");
    // Once: a later word of the same changes nothing.
    let out = c.m.from_host(
        &to,
        ToMaster::Waits {
            tid: a,
            calls: vec![7],
        },
    );
    assert!(returns(&out).is_empty(), "{out:?}");
}

#[test]
fn an_answer_sent_back_by_the_host_a_vp_runs_on_is_kept_for_its_word_of_what_it_waits_for() {
    // Its host is saving it (to park it, of its own accord) as the answer
    // comes: the master still has it running there.
    let mut c = Cluster::new(3);
    let placed = c.running_job(2);
    let (a_host, a) = placed[0].clone();
    let back = c.m.from_host(
        &a_host,
        ToMaster::ReturnBack {
            tid: a,
            id: 7,
            ret: VpRet::Done,
        },
    );
    assert!(returns(&back).is_empty(), "{back:?}");
    // Rebuilt (or left where it was), it says it waits for call 7.
    let out = c.m.from_host(
        &a_host,
        ToMaster::Waits {
            tid: a,
            calls: vec![7],
        },
    );
    assert_eq!(returns(&out), vec![(a_host.clone(), a, 7)], "{out:?}");
}

#[test]
fn copies_of_answers_are_forgotten_once_the_vp_calls_from_where_it_runs() {
    let mut c = Cluster::new(3);
    let (a, _, to, _) = a_barrier_passed_while_one_moves(&mut c);
    c.m.from_host(&to, ToMaster::Started { tid: a, pid: 99 });
    // It speaks again (a libmig VP restored from its own image numbers its
    // calls from 1 again): what was copied during its move is no use.
    c.m.from_host(
        &to,
        ToMaster::VpCall {
            tid: a,
            id: 1,
            call: VpCall::Tasks,
        },
    );
    let out = c.m.from_host(
        &to,
        ToMaster::Waits {
            tid: a,
            calls: vec![7],
        },
    );
    assert!(returns(&out).is_empty(), "{out:?}");
}
