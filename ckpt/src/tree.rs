//! How a saved tree of processes is made again: pure decisions over the
//! image's pids, parents, process groups and sessions.
//!
//! Every process must be forked by its own parent (only a parent can wait
//! for its child, and a shell waits by pid), so a restore creates them
//! parents first, each by its parent, with its saved pid (`clone3` with
//! `set_tid` in a fresh pid namespace whose init, pid 1, is the crate's).
//! Sessions are inherited at fork and only made by `setsid`, so a session
//! leader calls `setsid` after forking the children that were born before
//! it did (they stay in the session it was born in: the one their own
//! children, if they lead sessions too, show) and before forking the
//! others; process groups are joined afterwards, when every process
//! exists, leaders first. [`plan`] gives that order and those calls, or
//! says why a tree cannot be made again (a session that is neither the
//! process's own nor one its parent was in, a group whose leader is not in
//! the tree or not in it any more).
//!
//! What does not live here: carrying the steps out (`restore`), which
//! descriptors go where (`restore`'s handover, from the image's open
//! files).

use std::collections::{BTreeMap, VecDeque};

use crate::image::{Image, ProcState};

/// One step of making a tree, over indices into [`Image::procs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// `parent` (`None`: the namespace's init) forks `child` with its pid.
    Fork {
        /// The parent.
        parent: Option<usize>,
        /// The child.
        child: usize,
    },
    /// The process calls `setsid`.
    Setsid(usize),
}

/// The steps that make a saved tree again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreePlan {
    /// Forks and `setsid`s, in order: every process is forked after its
    /// parent, before or after its parent's `setsid` as its session says.
    pub steps: Vec<Step>,
    /// Then, with every process there: (process, group) for `setpgid(0,
    /// group)`, in order (group leaders first).
    pub setpgid: Vec<(usize, i32)>,
}

/// Why a tree cannot be made again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the process tree cannot be made again: {0}")]
pub struct TreeError(pub String);

/// The plan that makes `image`'s tree again, or why there is none.
pub fn plan(image: &Image) -> Result<TreePlan, TreeError> {
    let procs = &image.procs;
    let bad = |s: String| Err(TreeError(s));
    if procs.is_empty() {
        return bad("no process".into());
    }
    let mut by_pid: BTreeMap<i32, usize> = BTreeMap::new();
    for (i, p) in procs.iter().enumerate() {
        if p.pid <= 1 {
            return bad(format!(
                "pid {} (pid 1 is the namespace's init, made anew)",
                p.pid
            ));
        }
        if by_pid.insert(p.pid, i).is_some() {
            return bad(format!("pid {} twice", p.pid));
        }
    }
    if procs[0].ppid != 0 {
        return bad(format!(
            "the root, pid {}, has its parent {} in the tree",
            procs[0].pid, procs[0].ppid
        ));
    }
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); procs.len()];
    let mut tops = Vec::new();
    for (i, p) in procs.iter().enumerate() {
        if p.ppid == 0 {
            tops.push(i);
            continue;
        }
        let Some(&q) = by_pid.get(&p.ppid) else {
            return bad(format!("pid {}'s parent {} is not saved", p.pid, p.ppid));
        };
        if matches!(procs[q].state, ProcState::Zombie { .. }) {
            return bad(format!("pid {}'s parent {} has ended", p.pid, p.ppid));
        }
        children[q].push(i);
    }

    // Parents first, breadth first from init's children; a process not
    // reached is in a cycle.
    let mut order = Vec::with_capacity(procs.len());
    let mut queue: VecDeque<usize> = tops.iter().copied().collect();
    while let Some(i) = queue.pop_front() {
        order.push(i);
        queue.extend(children[i].iter().copied());
    }
    if order.len() != procs.len() {
        return bad("parents form a cycle".into());
    }
    // The session each process must be born in (`None`: any): its own if
    // it does not lead one; else the one its children that are not in its
    // session were born in, since they were forked before its `setsid`.
    let mut birth: Vec<Option<i32>> = vec![None; procs.len()];
    for &i in order.iter().rev() {
        let p = &procs[i];
        if p.sid != p.pid {
            birth[i] = Some(p.sid);
            continue;
        }
        for &c in &children[i] {
            match (birth[c], birth[i]) {
                (Some(s), _) if s == p.pid => {}
                (Some(s), None) => birth[i] = Some(s),
                (Some(s), Some(t)) if s != t => {
                    return bad(format!(
                        "pid {}'s children were born in sessions {s} and {t}",
                        p.pid
                    ))
                }
                _ => {}
            }
        }
    }

    // (session, group) each process has once made, before any setpgid.
    let mut made: Vec<(i32, i32)> = vec![(0, 0); procs.len()];
    let mut steps = Vec::new();
    for &t in &tops {
        steps.push(Step::Fork {
            parent: None,
            child: t,
        });
    }
    for &i in &order {
        let p = &procs[i];
        let (sid, pgid) = made[i];
        if birth[i].is_some_and(|b| b != sid) {
            return bad(format!(
                "pid {} is in session {}, which it does not lead and its parent was not in",
                p.pid, p.sid
            ));
        }
        if p.sid == p.pid && p.pgid != p.pid {
            return bad(format!(
                "pid {} leads its session but is in process group {}",
                p.pid, p.pgid
            ));
        }
        let leads = p.sid == p.pid;
        // Children born in the session this process was born in are
        // forked before it makes its own, the others after.
        let (new, stay): (Vec<usize>, Vec<usize>) = children[i]
            .iter()
            .partition(|&&c| leads && birth[c] == Some(p.pid));
        for &c in &stay {
            steps.push(Step::Fork {
                parent: Some(i),
                child: c,
            });
            made[c] = (sid, pgid);
        }
        if leads {
            steps.push(Step::Setsid(i));
            made[i] = (p.pid, p.pid);
            for &c in &new {
                steps.push(Step::Fork {
                    parent: Some(i),
                    child: c,
                });
                made[c] = (p.pid, p.pid);
            }
        }
    }

    // Process groups: leaders, then members, once all exist.
    let mut setpgid = Vec::new();
    let mut members = Vec::new();
    for (i, p) in procs.iter().enumerate() {
        if p.pgid == made[i].1 {
            continue;
        }
        if p.pgid == p.pid {
            setpgid.push((i, p.pid));
            continue;
        }
        match by_pid.get(&p.pgid).copied() {
            Some(l) if procs[l].pgid == p.pgid && procs[l].sid == p.sid => {
                members.push((i, p.pgid));
            }
            Some(_) => {
                return bad(format!(
                    "pid {} is in process group {}, whose leader is in another group or session",
                    p.pid, p.pgid
                ))
            }
            None => {
                return bad(format!(
                    "pid {} is in process group {}, which it cannot join again",
                    p.pid, p.pgid
                ))
            }
        }
    }
    setpgid.extend(members);
    Ok(TreePlan { steps, setpgid })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::{Cpu, Meta, MmFields, Proc};
    use proptest::prelude::*;

    /// A live process (its state does not matter to the plan).
    fn proc(pid: i32, ppid: i32, pgid: i32, sid: i32) -> Proc {
        Proc {
            pid,
            ppid,
            pgid,
            sid,
            state: ProcState::Live(Box::new(Meta {
                exe: "/bin/sh".into(),
                regions: vec![],
                specials: vec![],
                vdso_hash: vec![],
                threads: vec![],
                sigactions: vec![],
                shared_pending: vec![],
                fds: vec![],
                cwd: "/".into(),
                umask: 0o22,
                rlimits: vec![],
                mm: MmFields::default(),
                auxv: vec![],
                itimers: vec![],
                cpu: Cpu {
                    flags: vec![],
                    xstate_len: 0,
                },
            })),
        }
    }

    fn image(procs: Vec<Proc>) -> Image {
        Image {
            keep_pids: true,
            procs,
            files: vec![],
            pipes: vec![],
            needs: None,
            inputs: Vec::new(),
            sockets: Vec::new(),
            memfds: Vec::new(),
        }
    }

    #[test]
    fn a_pipeline_under_a_shell() {
        // sh -c 'a | b' started in the namespace: all in init's group and
        // session; a (a zombie) and b forked by sh.
        let mut procs = vec![proc(2, 0, 0, 0), proc(3, 2, 0, 0), proc(4, 2, 0, 0)];
        procs[1].state = ProcState::Zombie { status: 0 };
        let p = plan(&image(procs.clone())).expect("plan");
        let fork = |parent, child| Step::Fork { parent, child };
        assert_eq!(p.steps, [fork(None, 0), fork(Some(0), 1), fork(Some(0), 2)]);
        assert!(p.setpgid.is_empty());
        // A shell with job control: the pipeline is a group led by a.
        procs[1].pgid = 3;
        procs[2].pgid = 3;
        let p = plan(&image(procs)).expect("plan");
        assert_eq!(p.setpgid, [(1, 3), (2, 3)]);
    }

    #[test]
    fn what_cannot_be_made_again_is_named() {
        let cases = [
            (vec![proc(1, 0, 0, 0)], "pid 1"),
            (vec![proc(2, 0, 0, 0), proc(2, 0, 0, 0)], "twice"),
            (vec![proc(2, 0, 0, 0), proc(3, 9, 0, 0)], "parent 9"),
            (vec![proc(2, 5, 0, 0)], "root"),
            (
                vec![proc(2, 0, 0, 0), proc(3, 4, 0, 0), proc(4, 3, 0, 0)],
                "cycle",
            ),
            (vec![proc(2, 0, 0, 0), proc(3, 2, 0, 7)], "session 7"),
            (vec![proc(2, 0, 2, 2), proc(3, 2, 9, 2)], "group 9"),
            (vec![proc(2, 0, 0, 2)], "leads its session"),
            (
                vec![proc(2, 0, 2, 0), proc(3, 2, 3, 3), proc(4, 2, 3, 0)],
                "another group or session",
            ),
        ];
        for (procs, want) in cases {
            let e = plan(&image(procs.clone())).expect_err("refused");
            assert!(e.to_string().contains(want), "{procs:?}: {e}");
        }
        let mut live_parent = vec![proc(2, 0, 0, 0), proc(3, 2, 0, 0)];
        live_parent[0].state = ProcState::Zombie { status: 0 };
        let e = plan(&image(live_parent)).expect_err("zombie parent");
        assert!(e.to_string().contains("has ended"), "{e}");
    }

    /// What a process does in a made-up history of a namespace.
    #[derive(Debug, Clone)]
    enum Act {
        /// Process `n` (modulo those there) forks.
        Fork(usize),
        /// It calls setsid.
        Setsid(usize),
        /// It joins the group of another (or makes its own).
        Setpgid(usize, usize),
    }

    /// Runs a history as the kernel would (failing calls do nothing) and
    /// gives the tree it leaves, pids from 2 under init.
    fn run(acts: &[Act]) -> Vec<Proc> {
        let mut ps = vec![proc(2, 0, 0, 0)];
        for a in acts {
            let n = ps.len();
            match *a {
                Act::Fork(i) => {
                    let p = ps[i % n].clone();
                    ps.push(proc(n as i32 + 2, p.pid, p.pgid, p.sid));
                }
                Act::Setsid(i) => {
                    let pid = ps[i % n].pid;
                    if !ps.iter().any(|q| q.pgid == pid) {
                        ps[i % n].sid = pid;
                        ps[i % n].pgid = pid;
                    }
                }
                Act::Setpgid(i, j) => {
                    let (p, g) = (ps[i % n].clone(), ps[j % n].pid);
                    let exists = g == p.pid || ps.iter().any(|q| q.pgid == g && q.sid == p.sid);
                    if p.sid != p.pid && exists && (g == p.pid || ps[j % n].pgid == g) {
                        ps[i % n].pgid = g;
                    }
                }
            }
        }
        ps
    }

    fn act() -> impl Strategy<Value = Act> {
        prop_oneof![
            (0usize..8).prop_map(Act::Fork),
            (0usize..8).prop_map(Act::Setsid),
            (0usize..8, 0usize..8).prop_map(|(a, b)| Act::Setpgid(a, b)),
        ]
    }

    proptest! {
        /// Any tree a namespace can come to (whose group leaders are still
        /// there) has a plan, and carrying it out gives every process its
        /// parent, session and group back.
        #[test]
        fn every_reachable_tree_is_made_again(acts in proptest::collection::vec(act(), 0..24)) {
            let procs = run(&acts);
            prop_assume!(procs.iter().all(|q| q.pgid == 0
                || procs.iter().any(|l| l.pid == q.pgid && l.pgid == q.pgid)));
            let p = plan(&image(procs.clone())).expect("a plan");
            let mut made: Vec<Option<(i32, i32)>> = vec![None; procs.len()];
            let mut parent = vec![None; procs.len()];
            for s in &p.steps {
                match *s {
                    Step::Fork { parent: q, child } => {
                        prop_assert!(made[child].is_none(), "forked twice");
                        made[child] = Some(match q {
                            None => (0, 0),
                            Some(q) => made[q].expect("parent first"),
                        });
                        parent[child] = q.map(|q| procs[q].pid);
                    }
                    Step::Setsid(i) => {
                        let pid = procs[i].pid;
                        prop_assert!(!made.iter().any(|m| m.is_some_and(|m| m.1 == pid)), "setsid by a group leader");
                        made[i] = Some((pid, pid));
                    }
                }
            }
            for (i, q) in parent.iter().enumerate() {
                prop_assert_eq!(q.unwrap_or(0), procs[i].ppid);
            }
            for &(i, g) in &p.setpgid {
                let (sid, _) = made[i].expect("made");
                prop_assert!(sid != procs[i].pid, "a session leader changes group");
                prop_assert!(
                    g == procs[i].pid || made.iter().enumerate().any(|(k, m)| procs[k].pid == g && *m == Some((sid, g))),
                    "group {} joined before its leader leads it", g
                );
                made[i] = Some((sid, g));
            }
            for (i, m) in made.iter().enumerate() {
                prop_assert_eq!(*m, Some((procs[i].sid, procs[i].pgid)), "pid {}", procs[i].pid);
            }
        }
    }
}
