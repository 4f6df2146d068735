//! Seed 002 (Rommel and Stankovic): scheduling simple programs, distributed
//! groups (tasks that gain from running apart) and clusters (tasks that
//! talk much, best kept together) on processor-sharing sites, by estimates
//! and requests for bids.
//!
//! * Estimates (eq. 1-2): with a site's tasks sorted by remaining work,
//!   `ETC_tau = nu * sum_{j<=tau} (N - j + 1) * (eta_j - eta_{j-1})` and
//!   `STC = sum_tau ETC_tau` (the sum, not the mean: many short tasks must
//!   not make a site look idle). A cluster task's work grows by
//!   `eta * psi_C * r`, r its cluster's tasks on other sites.
//! * A simple program stays if its ETC is under the task threshold, else
//!   goes to the lowest bid (remote ETC plus transfer delay; staying bids
//!   its own ETC).
//! * A distributed group's tasks over the threshold go, most bound first,
//!   to the sites in ascending bid, never two on a site while sites remain.
//! * A cluster goes whole to the team site with the lowest bid (the
//!   s-site), which makes room in up to four phases: (1) it fits as it is;
//!   (2) its simple tasks go to team sites (least loaded first), shortest
//!   ETC first; (3) its
//!   partial clusters go to team sites holding the rest of their cluster;
//!   (4) its distributed-group tasks go to team sites without a task of
//!   their group. Phases stop once the s-site's load is within the site
//!   threshold.
//! * An idle site takes work from one loaded site: candidates by ETC,
//!   largest first (a cluster comes whole, with its tasks elsewhere; a
//!   group's tasks one at a time), while the idle site's load is below
//!   `min(Delta_site, STC_c / 2)`.
//!
//! The paper's figures use queue length as the load (`Load::Queue`); the
//! algorithm itself uses STC (`Load::Stc`). Open points, and what is done
//! here: a site accepts work while its load with that work is within the
//! site threshold (the idle site: while its load before it is below its
//! threshold, as the paper's Figure 5 reads); ties go to the lower site
//! index. Pure: no I/O, no randomness (the caller picks the team's idle
//! site and the loaded site an idle one takes from).

/// A program's class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// One task, on its own.
    Simple,
    /// Tasks that run best apart.
    Group,
    /// Tasks that talk much, best together.
    Cluster,
}

/// A task on a site.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    /// Its program.
    pub program: u32,
    /// The program's class.
    pub class: Class,
    /// Remaining instructions (`eta`).
    pub work: f64,
}

/// How a site's load is measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Load {
    /// Tasks queued (the paper's figures).
    Queue,
    /// The sum of completion times, eq. 2, at `nu` seconds an instruction.
    Stc {
        /// Instruction time.
        nu: f64,
    },
}

impl Load {
    /// The load of a site holding `tasks`.
    pub fn of(self, tasks: &[Task]) -> f64 {
        match self {
            Load::Queue => tasks.len() as f64,
            Load::Stc { nu } => {
                let work: Vec<f64> = tasks.iter().map(|t| t.work).collect();
                stc(nu, &work)
            }
        }
    }
}

/// Eq. 1: each task's estimated time to complete under processor sharing,
/// in the order given (`work[i]`: its remaining instructions).
pub fn etc(nu: f64, work: &[f64]) -> Vec<f64> {
    let n = work.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| work[a].total_cmp(&work[b]).then(a.cmp(&b)));
    let mut out = vec![0.0; n];
    let (mut acc, mut prev) = (0.0, 0.0);
    for (j, &i) in order.iter().enumerate() {
        acc += (n - j) as f64 * (work[i] - prev);
        prev = work[i];
        out[i] = nu * acc;
    }
    out
}

/// Eq. 2: the sum of the ETCs.
pub fn stc(nu: f64, work: &[f64]) -> f64 {
    etc(nu, work).iter().sum()
}

/// A cluster task's work with its communication: `eta * (1 + psi * r)`,
/// r its cluster's tasks on other sites.
pub fn with_communication(work: f64, psi: f64, remote: u32) -> f64 {
    work * (1.0 + psi * f64::from(remote))
}

/// Where a simple program arriving at `local` goes: `etc_here` its ETC
/// there, `bids` each site's (remote ETC plus transfer delay; `local`'s
/// own, if listed, is ignored).
pub fn place_simple(local: usize, etc_here: f64, threshold: f64, bids: &[(usize, f64)]) -> usize {
    if etc_here <= threshold {
        return local;
    }
    bids.iter()
        .filter(|(s, _)| *s != local)
        .fold(
            (local, etc_here),
            |best, &(s, b)| {
                if b < best.1 {
                    (s, b)
                } else {
                    best
                }
            },
        )
        .0
}

/// Where each task of a distributed group arriving at `local` goes:
/// `etcs[i]` task i's ETC there; `bids` every site's STC (with transfer
/// delay), `local`'s own included. Tasks under the threshold stay; the
/// others, most bound first, go to the sites in ascending bid, one each
/// until every site has one, then again.
pub fn place_group(
    local: usize,
    etcs: &[f64],
    threshold: f64,
    bids: &[(usize, f64)],
) -> Vec<usize> {
    let mut sites: Vec<(usize, f64)> = bids.to_vec();
    sites.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    let mut over: Vec<usize> = (0..etcs.len()).filter(|&i| etcs[i] > threshold).collect();
    over.sort_by(|&a, &b| etcs[b].total_cmp(&etcs[a]).then(a.cmp(&b)));
    let mut out = vec![local; etcs.len()];
    if sites.is_empty() {
        return out;
    }
    for (k, i) in over.into_iter().enumerate() {
        out[i] = sites[k % sites.len()].0;
    }
    out
}

/// A move of one task: from which site (and its index there) to which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    /// The site it leaves.
    pub from: usize,
    /// Its index in that site's list as given.
    pub index: usize,
    /// The site it goes to.
    pub to: usize,
}

/// A cluster's re-assignment: the team's lowest bid becomes the s-site;
/// `sites[s]` the tasks of each site now (the cluster's among them),
/// `team` the sites that may take part, `program` the cluster. Returns the
/// s-site and every move (the cluster's tasks to the s-site, then what
/// the phases move off it), or `None` if the team is empty.
pub fn place_cluster(
    sites: &[Vec<Task>],
    team: &[usize],
    program: u32,
    load: Load,
    site_threshold: f64,
) -> Option<(usize, Vec<Move>)> {
    let cluster: Vec<(usize, usize)> = sites
        .iter()
        .enumerate()
        .flat_map(|(s, ts)| {
            ts.iter()
                .enumerate()
                .filter(|(_, t)| t.program == program)
                .map(move |(i, _)| (s, i))
        })
        .collect();
    let s_site = lowest_bid(sites, team, program, &cluster, load)?;
    let moves: Vec<Move> = cluster
        .iter()
        .filter(|&&(s, _)| s != s_site)
        .map(|&(s, i)| Move {
            from: s,
            index: i,
            to: s_site,
        })
        .collect();
    let others: Vec<usize> = team.iter().copied().filter(|&s| s != s_site).collect();
    let mut room = Room {
        now: with_cluster_moved(sites, program, s_site, &cluster),
        s_site,
        others: &others,
        program,
        load,
        site_threshold,
        moves,
    };
    // Phase one: nothing more to do.
    if room.fits(&room.now[s_site]) {
        return Some((s_site, room.moves));
    }
    // Phases two to four: simple tasks (shortest ETC first), partial
    // clusters (the most bound first, to a site with the rest of theirs),
    // group tasks (to a site without one of their group).
    for class in [Class::Simple, Class::Cluster, Class::Group] {
        if room.phase(class) {
            return Some((s_site, room.moves));
        }
    }
    // Nothing made it fit: what was marked moves all the same.
    Some((s_site, room.moves))
}

/// The team site with the lowest bid for the cluster `program` (whose
/// tasks are `cluster`, by site and index): its load with the whole
/// cluster there. `None` if the team has no site.
fn lowest_bid(
    sites: &[Vec<Task>],
    team: &[usize],
    program: u32,
    cluster: &[(usize, usize)],
    load: Load,
) -> Option<usize> {
    let with_cluster = |s: usize| -> Vec<Task> {
        let mut v: Vec<Task> = sites[s]
            .iter()
            .filter(|t| t.program != program)
            .cloned()
            .collect();
        v.extend(cluster.iter().map(|&(cs, i)| sites[cs][i].clone()));
        v
    };
    Some(
        team.iter()
            .copied()
            .filter(|&s| s < sites.len())
            .map(|s| (load.of(&with_cluster(s)), s))
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))?
            .1,
    )
}

/// A task as the phases see it: the site and index it came from, and
/// itself.
type Placed = (usize, usize, Task);

/// Every site's tasks as the phases see them: the cluster `program`
/// (`cluster`, by site and index) already moved to `s_site`.
fn with_cluster_moved(
    sites: &[Vec<Task>],
    program: u32,
    s_site: usize,
    cluster: &[(usize, usize)],
) -> Vec<Vec<Placed>> {
    let mut now: Vec<Vec<Placed>> = sites
        .iter()
        .enumerate()
        .map(|(s, ts)| {
            ts.iter()
                .enumerate()
                .filter(|(_, t)| t.program != program || s == s_site)
                .map(|(i, t)| (s, i, t.clone()))
                .collect()
        })
        .collect();
    for &(s, i) in cluster {
        if s != s_site {
            now[s_site].push((s, i, sites[s][i].clone()));
        }
    }
    now
}

/// The tasks of `v`.
fn tasks(v: &[Placed]) -> Vec<Task> {
    v.iter().map(|(_, _, t)| t.clone()).collect()
}

/// `v` but its entries at the indices `taken`.
fn without(v: &[Placed], taken: &[usize]) -> Vec<Placed> {
    v.iter()
        .enumerate()
        .filter(|(x, _)| !taken.contains(x))
        .map(|(_, p)| p.clone())
        .collect()
}

/// The s-site making room for the cluster `program` (phases two to
/// four): every site's tasks as they would be, and the moves so far.
struct Room<'a> {
    now: Vec<Vec<Placed>>,
    s_site: usize,
    /// The team's other sites.
    others: &'a [usize],
    program: u32,
    load: Load,
    site_threshold: f64,
    moves: Vec<Move>,
}

impl Room<'_> {
    /// Whether a site holding `v` is within the site threshold.
    fn fits(&self, v: &[Placed]) -> bool {
        self.load.of(&tasks(v)) <= self.site_threshold
    }

    /// One phase: the s-site's tasks of `class` move, one unit at a time,
    /// to team sites that take them, until the s-site fits (true) or none
    /// is left (false; what moved is off the s-site).
    fn phase(&mut self, class: Class) -> bool {
        let mut taken: Vec<usize> = Vec::new();
        for k in self.candidates(class) {
            if taken.contains(&k) {
                continue;
            }
            let Some(unit) = self.move_off(class, k) else {
                continue;
            };
            taken.extend(&unit);
            if self.fits(&without(&self.now[self.s_site], &taken)) {
                return true;
            }
        }
        self.now[self.s_site] = without(&self.now[self.s_site], &taken);
        false
    }

    /// The s-site's tasks of `class` (not of the cluster itself), by index
    /// there: simple tasks shortest ETC first, the others most bound first.
    fn candidates(&self, class: Class) -> Vec<usize> {
        let here = &self.now[self.s_site];
        let mut candidates: Vec<usize> = (0..here.len())
            .filter(|&k| {
                let t = &here[k].2;
                t.class == class && t.program != self.program
            })
            .collect();
        let work: Vec<f64> = here.iter().map(|(_, _, t)| t.work).collect();
        let etcs = match self.load {
            Load::Stc { nu } => etc(nu, &work),
            Load::Queue => work.clone(),
        };
        if class == Class::Simple {
            candidates.sort_by(|&a, &b| etcs[a].total_cmp(&etcs[b]).then(a.cmp(&b)));
        } else {
            candidates.sort_by(|&a, &b| etcs[b].total_cmp(&etcs[a]).then(a.cmp(&b)));
        }
        candidates
    }

    /// The s-site's task `k` (a partial cluster whole: every task of its
    /// program there) to the least loaded team site that may take it
    /// (any for a simple task, one holding the rest of a cluster, one
    /// without a task of a group) and fits with it. The indices moved, or
    /// `None` if no site takes it.
    fn move_off(&mut self, class: Class, k: usize) -> Option<Vec<usize>> {
        let now = &self.now;
        let here = &now[self.s_site];
        let t = here[k].2.clone();
        let unit: Vec<usize> = if class == Class::Cluster {
            (0..here.len())
                .filter(|&x| here[x].2.program == t.program)
                .collect()
        } else {
            vec![k]
        };
        let holds = |s: usize| now[s].iter().any(|(_, _, o)| o.program == t.program);
        // The team's sites, least loaded first.
        let mut order = self.others.to_vec();
        order.sort_by(|&a, &b| {
            self.load
                .of(&tasks(&now[a]))
                .total_cmp(&self.load.of(&tasks(&now[b])))
                .then(a.cmp(&b))
        });
        let to = order.into_iter().find(|&s| {
            let allowed = match class {
                Class::Simple => true,
                Class::Cluster => holds(s),
                Class::Group => !holds(s),
            };
            let mut v = now[s].clone();
            v.extend(unit.iter().map(|&x| here[x].clone()));
            allowed && self.fits(&v)
        })?;
        for &x in &unit {
            let (from, index, task) = self.now[self.s_site][x].clone();
            self.now[to].push((from, index, task));
            self.moves.retain(|m| !(m.from == from && m.index == index));
            if from != to {
                self.moves.push(Move { from, index, to });
            }
        }
        Some(unit)
    }
}

/// An idle site `idle` takes work from the loaded site `busy` (`sites[s]`
/// every site's tasks): its threshold is `min(site_threshold, load(busy) /
/// 2)`; candidates by ETC, largest first; a cluster comes whole (its tasks
/// on other sites too), a group's task only if none of its group was
/// taken; it takes while its own load is below its threshold.
pub fn idle_site(
    sites: &[Vec<Task>],
    idle: usize,
    busy: usize,
    load: Load,
    site_threshold: f64,
) -> Vec<Move> {
    let limit = site_threshold.min(load.of(&sites[busy]) / 2.0);
    let work: Vec<f64> = sites[busy].iter().map(|t| t.work).collect();
    let etcs = match load {
        Load::Stc { nu } => etc(nu, &work),
        Load::Queue => work.clone(),
    };
    let mut order: Vec<usize> = (0..sites[busy].len()).collect();
    order.sort_by(|&a, &b| etcs[b].total_cmp(&etcs[a]).then(a.cmp(&b)));
    let mut here: Vec<Task> = sites[idle].clone();
    let mut moves: Vec<Move> = Vec::new();
    let mut taken_programs: Vec<u32> = Vec::new();
    for i in order {
        if load.of(&here) >= limit {
            break;
        }
        let t = &sites[busy][i];
        if moves.iter().any(|m| m.from == busy && m.index == i) {
            continue;
        }
        match t.class {
            Class::Simple => {
                moves.push(Move {
                    from: busy,
                    index: i,
                    to: idle,
                });
                here.push(t.clone());
            }
            Class::Group => {
                if taken_programs.contains(&t.program) {
                    continue;
                }
                taken_programs.push(t.program);
                moves.push(Move {
                    from: busy,
                    index: i,
                    to: idle,
                });
                here.push(t.clone());
            }
            Class::Cluster => {
                for (s, ts) in sites.iter().enumerate() {
                    if s == idle {
                        continue;
                    }
                    for (x, o) in ts.iter().enumerate() {
                        if o.program == t.program {
                            moves.push(Move {
                                from: s,
                                index: x,
                                to: idle,
                            });
                            here.push(o.clone());
                        }
                    }
                }
            }
        }
    }
    moves
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(program: u32, class: Class, work: f64) -> Task {
        Task {
            program,
            class,
            work,
        }
    }

    #[test]
    fn eq_1_and_2_on_three_tasks() {
        assert_eq!(etc(1.0, &[10.0, 20.0, 30.0]), [30.0, 50.0, 60.0]);
        assert_eq!(stc(1.0, &[10.0, 20.0, 30.0]), 140.0);
        // Any order; the instruction time scales.
        assert_eq!(etc(2.0, &[30.0, 10.0, 20.0]), [120.0, 60.0, 100.0]);
        assert!(stc(1.0, &[]).abs() < 1e-12);
        // Communication: a cluster task with 2 of its cluster elsewhere.
        assert!((with_communication(10.0, 0.1, 2) - 12.0).abs() < 1e-12);
    }

    #[test]
    fn figure_1_a_simple_program_goes_to_the_shortest_queue_unless_moving_costs_more() {
        // s4 arrives at site 3 (index 2) where 4 tasks run: ETC = 5S; the
        // bids are (queue + 1) S plus the transfer delay; site 5 has 2.
        let s = 1.0;
        let queues = [5.0, 5.0, 4.0, 3.0, 2.0];
        let bids = |delay: f64| -> Vec<(usize, f64)> {
            (0..5).map(|i| (i, (queues[i] + 1.0) * s + delay)).collect()
        };
        assert_eq!(place_simple(2, 5.0 * s, 3.0 * s, &bids(0.5)), 4);
        // Under the task threshold: it stays.
        assert_eq!(place_simple(2, 5.0 * s, 5.0 * s, &bids(0.5)), 2);
        // A transfer delay larger than the gain: it stays.
        assert_eq!(place_simple(2, 5.0 * s, 3.0 * s, &bids(3.0)), 2);
    }

    #[test]
    fn figure_2_a_distributed_group_spreads_over_the_least_loaded_sites() {
        // Group 2 (two tasks) arrives at site 5 (index 4); site 4 (index 3)
        // bids lowest, site 5 itself next: one task stays, one moves.
        let bids = [(0, 9.0), (1, 8.0), (2, 7.0), (3, 2.0), (4, 4.0)];
        let got = place_group(4, &[6.0, 5.0], 3.0, &bids);
        assert_eq!(got, [3, 4], "the more bound task to the lowest bid");
        // Under the threshold, a task stays; never two on one site while
        // sites remain; more tasks than sites go round again.
        assert_eq!(place_group(4, &[1.0, 5.0], 3.0, &bids), [4, 3]);
        let five = place_group(4, &[9.0; 6], 3.0, &bids);
        assert_eq!(five, [3, 4, 2, 1, 0, 3]);
    }

    /// Figure 3 as its text tells it: cluster 1 arrives as three tasks, on
    /// sites 2, 3 and 4; each of the team's sites would hold 6 tasks with
    /// the whole cluster, site 5's the shortest, so it has the lowest bid
    /// (STC, nu = 1). The site threshold is 70.
    fn figure_3() -> Vec<Vec<Task>> {
        let (s, d, c) = (Class::Simple, Class::Group, Class::Cluster);
        vec![
            // site 1: the complete cluster 2 and d3,1 (not in the team).
            vec![t(2, c, 9.0), t(2, c, 9.0), t(2, c, 9.0), t(30, d, 9.0)],
            // site 2: c1,1, c3,1, c3,2, s1.
            vec![t(1, c, 5.0), t(3, c, 6.0), t(3, c, 6.0), t(21, s, 3.0)],
            // site 3: c1,2, c3,3, d1,1, s2.
            vec![t(1, c, 5.0), t(3, c, 3.0), t(11, d, 3.0), t(22, s, 1.0)],
            // site 4: c1,3, d1,2, s3, s5.
            vec![t(1, c, 5.0), t(11, d, 4.0), t(23, s, 4.0), t(25, s, 4.0)],
            // site 5: s4, d1,3, d2,2.
            vec![t(24, s, 1.0), t(11, d, 2.0), t(12, d, 2.0)],
        ]
    }

    #[test]
    fn figure_3_a_cluster_goes_whole_to_the_lowest_bid_which_makes_room_in_phases() {
        let sites = figure_3();
        let stc = Load::Stc { nu: 1.0 };
        let (s_site, moves) = place_cluster(&sites, &[1, 2, 3, 4], 1, stc, 70.0).expect("a team");
        assert_eq!(s_site, 4, "site 5");
        let dest = |s: usize, i: usize| {
            moves
                .iter()
                .find(|m| m.from == s && m.index == i)
                .map_or(s, |m| m.to)
        };
        // Every task of cluster 1 ends on site 5.
        assert_eq!([dest(1, 0), dest(2, 0), dest(3, 0)], [4, 4, 4]);
        // Phase two: s4 to the least loaded team site, site 3; still over
        // the threshold. Phase four: d1,3 to site 2, the one without a task
        // of group 1 (sites 3 and 4 hold d1,1 and d1,2); now within it.
        assert_eq!(dest(4, 0), 2, "s4 to site 3: {moves:?}");
        assert_eq!(dest(4, 1), 1, "d1,3 to site 2: {moves:?}");
        assert_eq!(dest(4, 2), 4, "d2,2 stays");
        assert_eq!(moves.len(), 5, "{moves:?}");
        let at5: Vec<Task> = sites
            .iter()
            .enumerate()
            .flat_map(|(s, ts)| ts.iter().enumerate().map(move |(i, t)| (s, i, t)))
            .filter(|&(s, i, _)| dest(s, i) == 4)
            .map(|(_, _, t)| t.clone())
            .collect();
        assert_eq!(at5.len(), 4, "site 5 ends at 4 tasks");
        assert!(stc.of(&at5) <= 70.0);
        // With room enough, phase one: the cluster alone moves.
        let (_, only) = place_cluster(&sites, &[1, 2, 3, 4], 1, stc, 1000.0).expect("a team");
        assert_eq!(only.len(), 3);
        assert!(place_cluster(&sites, &[], 1, stc, 70.0).is_none());
    }

    #[test]
    fn figure_5_an_idle_site_takes_a_whole_cluster_and_leaves_four_sites_at_3() {
        let (s, d, c) = (Class::Simple, Class::Group, Class::Cluster);
        let sites = vec![
            // site 1: busy, nothing of site 2's clusters.
            vec![
                t(30, s, 1.0),
                t(31, s, 1.0),
                t(32, d, 2.0),
                t(32, d, 2.0),
                t(33, s, 1.0),
            ],
            // site 2 (the c-site): c1,1, c3,1, c3,2, s1, s4.
            vec![
                t(1, c, 5.0),
                t(3, c, 6.0),
                t(3, c, 6.0),
                t(21, s, 1.0),
                t(24, s, 1.0),
            ],
            // site 3: c3,3 and three more.
            vec![t(3, c, 6.0), t(22, s, 1.0), t(40, d, 2.0), t(41, s, 1.0)],
            // site 4: c1,2, c1,3, s5.
            vec![t(1, c, 5.0), t(1, c, 5.0), t(25, s, 1.0)],
            // site 5: idle.
            vec![],
        ];
        let moves = idle_site(&sites, 4, 1, Load::Queue, 4.0);
        // Cluster 3 (the largest ETC) comes whole: c3,1, c3,2 from site 2,
        // c3,3 from site 3; then site 5 is at its threshold.
        let mut got: Vec<(usize, usize)> = moves.iter().map(|m| (m.from, m.index)).collect();
        got.sort_unstable();
        assert_eq!(got, [(1, 1), (1, 2), (2, 0)]);
        assert!(moves.iter().all(|m| m.to == 4));
        let mut load: Vec<usize> = sites.iter().map(Vec::len).collect();
        for m in &moves {
            load[m.from] -= 1;
            load[m.to] += 1;
        }
        assert_eq!(&load[1..], [3, 3, 3, 3]);
    }
}
