//! Which processors a new job may use under the placements that choose
//! hosts (`migd --placement bidding|nres|roc`), from what the master knows
//! of each host. The gang scheduler then places the job among them
//! (`Event::Submit`'s `only`) and time-slices them as any other; `None`
//! leaves the choice to it.
//!
//! * `bidding` (seed 002): a host's bid is the completion time of the work
//!   under processor sharing (VPs on its processors, the new ones added,
//!   over its processors' speed). A simple program stays where it was
//!   asked for while its slowdown there is within `DELTA_TASK`, else goes
//!   to the lowest bid; a group's VPs over the threshold go to the hosts
//!   in ascending bid, one to a host while hosts last; a cluster goes whole
//!   to the host with the lowest bid for all of it. In the daemons a
//!   cluster does not clear room on its host (the paper's four phases):
//!   the gang scheduler gives it a slot of its own there instead.
//! * `nres` (seed 004): each VP needs a processor, its memory and its I/O
//!   share; a host has its idle processors, its memory less what the VPs
//!   placed there asked for, and its I/O less what they and the disks'
//!   measured business take. The job's VPs are mapped by procedure
//!   Balance (fewest choices first, one VP a host a round, rounds until
//!   all are mapped); hosts are offered tightest first, so a VP takes the
//!   host with the least room that fits it and keeps roomier ones for
//!   those that need them. A job that does not fit whole is left to the
//!   gang scheduler (the paper's "unmatched jobs stay local").
//! * `roc` (seed 003): work starts where it was asked for; Rate-of-Change
//!   (each daemon's own, `rate`) moves it on as hosts run dry.
//!
//! And after arrival, under `bidding`, seed 002's idle sites (`idle_takes`):
//! a host with no VP takes work from the most loaded one, largest
//! estimate first, while it holds less than `DELTA_SITE` tasks a processor
//! and less than half the other's. Clusters are left where they run (they
//! went whole to their host; moving one whole to an idle host would only
//! swap which host is idle).
//!
//! Pure: no I/O, no clock. What does not live here: the papers' decisions
//! themselves (`bidding`, `nres`, `roc`), the master's bookkeeping.

use libmig::msg::JobClass;

use super::{bidding, nres};

/// Seed 002's task threshold, read as a slowdown (ETC over stand-alone
/// time): a simple program stays where it arrived while within it.
pub const DELTA_TASK: f64 = 3.0;

/// Seed 002's site threshold, in tasks a processor: an idle host takes
/// work while it holds fewer (and fewer than half the loaded host's).
pub const DELTA_SITE: f64 = 2.0;

/// The placement policies that choose hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Policy {
    /// Rommel and Stankovic's bids by program class (seed 002).
    Bidding,
    /// Arora, Das and Biswas's N-resource matching (seed 004).
    Nres,
    /// Start where asked, Rate-of-Change balancing (seed 003).
    Roc,
}

impl Policy {
    /// Every policy.
    pub const ALL: [Policy; 3] = [Policy::Bidding, Policy::Nres, Policy::Roc];

    /// The name on the command line and in configs.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Bidding => "bidding",
            Policy::Nres => "nres",
            Policy::Roc => "roc",
        }
    }

    /// The policy called `name`.
    pub fn by_name(name: &str) -> Option<Policy> {
        Policy::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// A host as the master sees it when a job arrives.
#[derive(Debug, Clone, PartialEq)]
pub struct HostView {
    /// Its processors in the pool, each with the VPs on it (all slots).
    pub processors: Vec<(String, u32)>,
    /// One processor's relative speed.
    pub capacity: f64,
    /// Memory a new VP may still have there (MiB), if the host says.
    pub free_memory_mb: Option<u64>,
    /// The share of its I/O still free (0..1).
    pub free_io: f64,
}

impl HostView {
    fn vps(&self) -> u32 {
        self.processors.iter().map(|p| p.1).sum()
    }

    fn width(&self) -> f64 {
        self.processors.len().max(1) as f64
    }

    /// VPs per unit of processing speed.
    fn load(&self) -> f64 {
        f64::from(self.vps()) / (self.width() * self.capacity.max(1e-9))
    }

    /// The time to complete one unit of work with `more` VPs added, under
    /// processor sharing.
    fn etc(&self, more: u32) -> f64 {
        (f64::from(self.vps() + more) / self.width()).max(1.0) / self.capacity.max(1e-9)
    }

    fn holds(&self, vps: u32, memory_mb: Option<u64>) -> bool {
        match (memory_mb, self.free_memory_mb) {
            (Some(need), Some(free)) => need.saturating_mul(u64::from(vps)) <= free,
            _ => true,
        }
    }

    /// Can it take `vps` more VPs of `memory_mb` each (processors in the
    /// pool, and the memory)?
    pub fn can_take(&self, vps: u32, memory_mb: Option<u64>) -> bool {
        !self.processors.is_empty() && self.holds(vps, memory_mb)
    }

    /// Its `n` least busy processors (fewest VPs, then in order), round
    /// and round again when `n` is more than it has.
    pub fn least_busy(&self, n: usize) -> Vec<String> {
        let mut order: Vec<usize> = (0..self.processors.len()).collect();
        order.sort_by_key(|&i| (self.processors[i].1, i));
        order
            .iter()
            .cycle()
            .take(n.min(order.len()))
            .map(|&i| self.processors[i].0.clone())
            .collect()
    }

    fn all(&self) -> Vec<String> {
        self.processors.iter().map(|p| p.0.clone()).collect()
    }
}

/// What a new job asks for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Need {
    /// Its VPs.
    pub vps: u32,
    /// Its class (as `mig spawn --class` says, else simple for one VP and
    /// a group for more).
    pub class: JobClass,
    /// Memory each VP needs (MiB).
    pub memory_mb: Option<u64>,
    /// The share of a host's I/O each VP needs.
    pub io: f64,
}

/// A host's movable tasks for the idle-site rule.
#[derive(Debug, Clone, PartialEq)]
pub struct SiteTasks {
    /// Its processors in the pool.
    pub processors: u32,
    /// Does it hold any VP at all (movable or not)?
    pub holds_vps: bool,
    /// Its movable tasks: an id, its program (job) and the program's class.
    pub tasks: Vec<(u64, u32, JobClass)>,
}

/// Seed 002's idle sites: each host holding no VP takes from the most
/// loaded host (over one task a processor) what `bidding::idle_site` says.
/// Returns (task, the host it leaves, the host that takes it), by index.
pub fn idle_takes(hosts: &[SiteTasks]) -> Vec<(u64, usize, usize)> {
    let per = |h: &SiteTasks, n: usize| n as f64 / f64::from(h.processors.max(1));
    let mut left: Vec<Vec<(u64, u32, JobClass)>> = hosts
        .iter()
        .map(|h| {
            h.tasks
                .iter()
                .copied()
                .filter(|t| t.2 != JobClass::Cluster)
                .collect()
        })
        .collect();
    let mut out = Vec::new();
    for idle in 0..hosts.len() {
        if hosts[idle].holds_vps || hosts[idle].processors == 0 {
            continue;
        }
        let busy = (0..hosts.len())
            .filter(|&b| b != idle && per(&hosts[b], hosts[b].tasks.len()) > 1.0)
            .max_by(|&a, &b| {
                per(&hosts[a], left[a].len())
                    .total_cmp(&per(&hosts[b], left[b].len()))
                    .then(b.cmp(&a))
            });
        let Some(busy) = busy else {
            continue;
        };
        let class = |c: JobClass| match c {
            JobClass::Simple => bidding::Class::Simple,
            JobClass::Group => bidding::Class::Group,
            JobClass::Cluster => bidding::Class::Cluster,
        };
        let task = |&(_, program, c): &(u64, u32, JobClass)| bidding::Task {
            program,
            class: class(c),
            work: 1.0,
        };
        let sites = vec![Vec::new(), left[busy].iter().map(task).collect()];
        let threshold = DELTA_SITE * f64::from(hosts[idle].processors);
        let mut taken: Vec<usize> =
            bidding::idle_site(&sites, 0, 1, bidding::Load::Queue, threshold)
                .into_iter()
                .filter(|m| m.from == 1)
                .map(|m| m.index)
                .collect();
        taken.sort_unstable_by(|a, b| b.cmp(a));
        taken.dedup();
        for i in taken {
            let (id, _, _) = left[busy].remove(i);
            out.push((id, busy, idle));
        }
    }
    out
}

/// The processors `policy` lets a job asked for at `hosts[local]` use.
pub fn choose(
    policy: Policy,
    need: &Need,
    local: usize,
    hosts: &[HostView],
) -> Option<Vec<String>> {
    let hosts_ok = hosts.iter().any(|h| !h.processors.is_empty());
    if need.vps == 0 || !hosts_ok {
        return None;
    }
    match policy {
        Policy::Bidding => by_bids(need, local, hosts),
        Policy::Nres => by_resources(need, hosts),
        Policy::Roc => {
            let h = hosts
                .get(local)
                .filter(|h| h.holds(need.vps, need.memory_mb))?;
            (!h.processors.is_empty()).then(|| h.all())
        }
    }
}

fn by_bids(need: &Need, local: usize, hosts: &[HostView]) -> Option<Vec<String>> {
    let usable = |h: &HostView, vps: u32| !h.processors.is_empty() && h.holds(vps, need.memory_mb);
    match need.class {
        JobClass::Cluster => {
            // The whole cluster to the lowest bid for all of it (the host
            // it was asked at first among equals).
            let order = std::iter::once(local).chain((0..hosts.len()).filter(|&i| i != local));
            let best = order
                .filter_map(|i| Some((i, hosts.get(i)?)))
                .filter(|(_, h)| usable(h, need.vps))
                .fold(None::<(usize, f64)>, |best, (i, h)| {
                    let bid = h.etc(need.vps);
                    match best {
                        Some((_, b)) if b <= bid => best,
                        _ => Some((i, bid)),
                    }
                })?;
            Some(hosts[best.0].all())
        }
        JobClass::Simple if need.vps == 1 => {
            let here = hosts.get(local).filter(|h| usable(h, 1));
            let bids: Vec<(usize, f64)> = hosts
                .iter()
                .enumerate()
                .filter(|(_, h)| usable(h, 1))
                .map(|(i, h)| (i, h.etc(1)))
                .collect();
            let site = match here {
                Some(h) => bidding::place_simple(local, h.etc(1), DELTA_TASK / h.capacity, &bids),
                None => bids.iter().min_by(|a, b| a.1.total_cmp(&b.1))?.0,
            };
            Some(hosts[site].least_busy(1))
        }
        // A group (and a "simple" program of several VPs, which is one).
        _ => {
            let bids: Vec<(usize, f64)> = hosts
                .iter()
                .enumerate()
                .filter(|(_, h)| usable(h, 1))
                .map(|(i, h)| (i, h.load()))
                .collect();
            let here = hosts.get(local)?;
            let etc_here = here.etc(need.vps) * here.capacity;
            let etcs = vec![etc_here; need.vps as usize];
            let sites = bidding::place_group(local, &etcs, DELTA_TASK, &bids);
            let mut per_site = std::collections::BTreeMap::<usize, usize>::new();
            for s in sites {
                *per_site.entry(s).or_default() += 1;
            }
            let mut out = Vec::new();
            for (s, n) in per_site {
                let h = hosts.get(s)?;
                if !usable(h, n as u32) {
                    return None;
                }
                out.extend(h.least_busy(n));
            }
            Some(out)
        }
    }
}

fn by_resources(need: &Need, hosts: &[HostView]) -> Option<Vec<String>> {
    // Resources: idle processors, memory (MiB), I/O share.
    let mut free: Vec<[f64; 3]> = hosts
        .iter()
        .map(|h| {
            let idle = h.processors.iter().filter(|p| p.1 == 0).count() as f64;
            let mem = h.free_memory_mb.map_or(f64::INFINITY, |m| m as f64);
            [idle, mem, h.free_io.clamp(0.0, 1.0)]
        })
        .collect();
    let want = [1.0, need.memory_mb.map_or(0.0, |m| m as f64), need.io];
    // Tightest first: a VP's ties go to the host with the least room.
    let mut order: Vec<usize> = (0..hosts.len()).collect();
    order.sort_by(|&a, &b| {
        let key = |i: usize| (free[i][1], free[i][0], free[i][2]);
        let (x, y) = (key(a), key(b));
        x.0.total_cmp(&y.0)
            .then(x.1.total_cmp(&y.1))
            .then(x.2.total_cmp(&y.2))
            .then(a.cmp(&b))
    });
    let mut placed: Vec<usize> = Vec::new();
    let mut left = need.vps as usize;
    while left > 0 {
        let needs = vec![want.to_vec(); left];
        let offered: Vec<Vec<f64>> = order.iter().map(|&i| free[i].to_vec()).collect();
        let round: Vec<usize> = nres::balance(&needs, &offered)
            .into_iter()
            .flatten()
            .map(|u| order[u])
            .collect();
        if round.is_empty() {
            return None;
        }
        for &h in &round {
            for (f, w) in free[h].iter_mut().zip(want) {
                *f -= w;
            }
        }
        left -= round.len();
        placed.extend(round);
    }
    let mut per_host = std::collections::BTreeMap::<usize, usize>::new();
    for h in placed {
        *per_host.entry(h).or_default() += 1;
    }
    let mut out = Vec::new();
    for (h, n) in per_host {
        out.extend(hosts[h].least_busy(n));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &str, busy: &[u32], memory_mb: Option<u64>) -> HostView {
        HostView {
            processors: busy
                .iter()
                .enumerate()
                .map(|(i, &n)| (format!("{name}/{i}"), n))
                .collect(),
            capacity: 1.0,
            free_memory_mb: memory_mb,
            free_io: 1.0,
        }
    }

    fn need(vps: u32, class: JobClass) -> Need {
        Need {
            vps,
            class,
            memory_mb: None,
            io: 0.0,
        }
    }

    fn hosts_of(chosen: &[String]) -> Vec<&str> {
        let mut h: Vec<&str> = chosen.iter().filter_map(|p| p.split('/').next()).collect();
        h.sort();
        h
    }

    #[test]
    fn a_cluster_goes_whole_to_the_host_with_the_lowest_bid() {
        let hosts = [
            host("a", &[2], None),
            host("b", &[0, 1], None),
            host("c", &[1], None),
        ];
        let chosen = choose(Policy::Bidding, &need(3, JobClass::Cluster), 0, &hosts);
        // b: (1 + 3) / 2 = 2 beats a: 5 and c: 4.
        assert_eq!(chosen, Some(vec!["b/0".to_string(), "b/1".to_string()]));
    }

    #[test]
    fn a_group_goes_one_vp_to_a_host_in_ascending_bid() {
        let hosts = [
            host("a", &[0], None),
            host("b", &[2], None),
            host("c", &[0], None),
            host("d", &[1], None),
        ];
        let chosen = choose(Policy::Bidding, &need(4, JobClass::Group), 0, &hosts).unwrap();
        assert_eq!(hosts_of(&chosen), vec!["a", "b", "c", "d"]);
        // Three VPs over the threshold go to the three lowest bids.
        let chosen = choose(Policy::Bidding, &need(3, JobClass::Group), 1, &hosts).unwrap();
        assert_eq!(hosts_of(&chosen), vec!["a", "c", "d"]);
    }

    #[test]
    fn a_group_within_the_threshold_stays_where_it_was_asked() {
        let hosts = [host("a", &[0, 0], None), host("b", &[0], None)];
        let chosen = choose(Policy::Bidding, &need(2, JobClass::Group), 0, &hosts).unwrap();
        assert_eq!(hosts_of(&chosen), vec!["a", "a"]);
    }

    #[test]
    fn a_simple_program_stays_unless_its_slowdown_passes_the_threshold() {
        let hosts = [host("a", &[2], None), host("b", &[1], None)];
        let here = choose(Policy::Bidding, &need(1, JobClass::Simple), 0, &hosts);
        assert_eq!(here, Some(vec!["a/0".to_string()]), "3 within DELTA_TASK");
        let hosts = [host("a", &[3], None), host("b", &[1], None)];
        let there = choose(Policy::Bidding, &need(1, JobClass::Simple), 0, &hosts);
        assert_eq!(
            there,
            Some(vec!["b/0".to_string()]),
            "4 over it: the lowest bid"
        );
    }

    #[test]
    fn bids_leave_out_hosts_without_the_memory() {
        let hosts = [host("a", &[0], Some(1000)), host("b", &[3], Some(8000))];
        let n = Need {
            memory_mb: Some(2000),
            ..need(2, JobClass::Cluster)
        };
        let chosen = choose(Policy::Bidding, &n, 0, &hosts);
        assert_eq!(chosen, Some(vec!["b/0".to_string()]));
    }

    #[test]
    fn nres_maps_three_jobs_with_nested_choices_fewest_choices_first() {
        // Nested choices, the case seed 004's section 2.2 orders Balance
        // for (our numbers; the paper gives none): jobs fitting {A},
        // {A, B}, {A, B, C} -> A, B, C, here as memory: A offers 4000, B
        // 2000, C 1000.
        let hosts = [
            host("c", &[0], Some(1000)),
            host("a", &[0], Some(4000)),
            host("b", &[0], Some(2000)),
        ];
        let one = |mb| {
            let n = Need {
                memory_mb: Some(mb),
                ..need(1, JobClass::Simple)
            };
            choose(Policy::Nres, &n, 0, &hosts).unwrap()
        };
        assert_eq!(one(3000), vec!["a/0"]);
        assert_eq!(one(1500), vec!["b/0"], "the tightest host that fits");
        assert_eq!(one(500), vec!["c/0"]);
    }

    #[test]
    fn nres_spreads_a_jobs_vps_one_a_host_a_round_and_counts_io() {
        let mut hosts = vec![
            host("a", &[0, 0], None),
            host("b", &[0, 0], None),
            host("c", &[0], None),
        ];
        let chosen = choose(Policy::Nres, &need(3, JobClass::Group), 0, &hosts).unwrap();
        assert_eq!(hosts_of(&chosen), vec!["a", "b", "c"]);
        // Heavy I/O: a host whose disks are half busy takes none.
        hosts[0].free_io = 0.5;
        let heavy = Need {
            io: 0.75,
            ..need(2, JobClass::Group)
        };
        let chosen = choose(Policy::Nres, &heavy, 0, &hosts).unwrap();
        assert_eq!(hosts_of(&chosen), vec!["b", "c"]);
        // Two heavy VPs cannot share a host: three do not fit on two.
        let three = Need { vps: 3, ..heavy };
        assert_eq!(choose(Policy::Nres, &three, 0, &hosts), None);
    }

    #[test]
    fn nres_leaves_a_job_that_does_not_fit_to_the_gang_scheduler() {
        let hosts = [host("a", &[1], None), host("b", &[2], None)];
        assert_eq!(
            choose(Policy::Nres, &need(1, JobClass::Simple), 0, &hosts),
            None
        );
    }

    #[test]
    fn roc_starts_work_where_it_was_asked_for() {
        let hosts = [host("a", &[0], None), host("b", &[5, 5], None)];
        let chosen = choose(Policy::Roc, &need(4, JobClass::Group), 1, &hosts);
        assert_eq!(chosen, Some(vec!["b/0".to_string(), "b/1".to_string()]));
    }

    #[test]
    fn an_idle_host_takes_half_of_the_busiest_ones_simple_programs_not_its_clusters() {
        let simple = |id: u64| (id, id as u32, JobClass::Simple);
        let hosts = [
            SiteTasks {
                processors: 1,
                holds_vps: true,
                tasks: vec![simple(1), simple(2), simple(3), (9, 9, JobClass::Cluster)],
            },
            SiteTasks {
                processors: 1,
                holds_vps: true,
                tasks: vec![simple(4), simple(5)],
            },
            SiteTasks {
                processors: 1,
                holds_vps: false,
                tasks: Vec::new(),
            },
        ];
        let takes = idle_takes(&hosts);
        // The busiest holds four: the idle one takes while under
        // min(2, 4 / 2) = 2: two of its simple programs, not the cluster.
        assert_eq!(takes.len(), 2, "{takes:?}");
        assert!(takes
            .iter()
            .all(|&(t, from, to)| from == 0 && to == 2 && t != 9));
        // A host holding a VP it cannot move is not idle; one over no
        // host's load takes nothing.
        let quiet = [hosts[1].clone(), hosts[2].clone()];
        assert_eq!(idle_takes(&quiet).len(), 1);
        let calm = [
            SiteTasks {
                tasks: vec![simple(1)],
                ..hosts[0].clone()
            },
            hosts[2].clone(),
        ];
        assert!(idle_takes(&calm).is_empty());
    }

    #[test]
    fn policies_are_named() {
        for p in Policy::ALL {
            assert_eq!(Policy::by_name(p.name()), Some(p));
        }
        assert_eq!(Policy::by_name("mig"), None);
    }
}
