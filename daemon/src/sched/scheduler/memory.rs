//! Memory as a consumable of each host: every VP placed on a host's
//! processors is resident there whatever slot runs (gang scheduling stops
//! a VP, it does not swap it out), so the memory its job asked for
//! (`Event::Submit`'s `memory_mb`, per VP) is taken from its host's
//! (`Event::NewProcessor`'s `memory_mb`) for as long as it is placed. The
//! multiprogramming level then follows from memory, as on real machines.
//!
//! What lives here: what each host's resident VPs need (kept until the map
//! changes), how many VPs of a job each host still holds, and MTAT and
//! Compression kept within that (`capped_plan`), which every planner path
//! falls back to when its plan would oversubscribe a host (`plan`,
//! `plan_both`). What does not: the static filter of processors whose host
//! offers less than one VP needs (`planning::allowed_rows`), or the
//! projection of memory for a promised start (`admission`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::{PoolInput, Scheduler};
use crate::sched::map::{BitSet, JobKey, Row};
use crate::sched::mtat::{finish_time, slots_at};

/// VPs of one job each host (by its number in `Hosts`) still holds;
/// `u32::MAX` where the host says nothing of its memory.
pub(super) type Caps = Vec<u32>;

/// What the hosts have left, from `Scheduler::resident`: MB per host
/// (`u64::MAX` where a host says nothing), and the `Caps` of a job with
/// no VP placed per MB its VPs ask for, made when first asked.
#[derive(Debug, Default)]
pub(super) struct Left {
    room: Vec<u64>,
    caps: HashMap<u64, Arc<Caps>>,
    /// Per MB a VP asks for and architecture, the VPs of that size the
    /// hosts of its rows hold, each row counted for all its host holds
    /// (`arch_room`): forgotten when any host's memory changes.
    totals: HashMap<(u64, u32), u64>,
}

/// How many VPs of `m` MB each fit in `mb` MB.
fn per_vp(mb: u64, m: u64) -> u32 {
    (mb / m).min(u64::from(u32::MAX)) as u32
}

/// The pool's hosts, numbered: the host of each row, and the memory each
/// offers (the least any of its processors says; `None`: none says).
/// Made again when a processor joins or leaves.
#[derive(Debug, Default)]
pub(super) struct Hosts {
    of_row: Vec<u32>,
    offer: Vec<Option<u64>>,
    /// Every host has one processor in the pool.
    pub(super) single: bool,
}

impl Hosts {
    /// The number of row `r`'s host.
    pub(super) fn of(&self, r: Row) -> Option<u32> {
        self.of_row.get(r).copied().filter(|&h| h != u32::MAX)
    }

    /// The memory host `h` offers.
    pub(super) fn offer(&self, h: u32) -> Option<u64> {
        self.offer.get(h as usize).copied().flatten()
    }

    /// How many hosts.
    pub(super) fn len(&self) -> usize {
        self.offer.len()
    }
}

impl Scheduler {
    /// The pool's hosts, numbered (see `Hosts`).
    pub(super) fn hosts(&self) -> Arc<Hosts> {
        if let Some(h) = self.hosts.borrow().as_ref() {
            return h.clone();
        }
        let mut names: HashMap<&str, u32> = HashMap::new();
        let mut h = Hosts {
            of_row: vec![u32::MAX; self.map.row_capacity()],
            offer: Vec::new(),
            single: true,
        };
        for (r, p) in self.map.processors() {
            let next = names.len() as u32;
            let id = *names.entry(&p.host).or_insert(next);
            if id as usize == h.offer.len() {
                h.offer.push(p.memory_mb);
            } else {
                h.single = false;
                if let Some(m) = p.memory_mb {
                    let o = &mut h.offer[id as usize];
                    *o = Some(o.map_or(m, |x| x.min(m)));
                }
            }
            if let Some(slot) = h.of_row.get_mut(r) {
                *slot = id;
            }
        }
        let h = Arc::new(h);
        *self.hosts.borrow_mut() = Some(h.clone());
        h
    }

    /// A processor joined or left: hosts are numbered again, and what
    /// they hold counted again.
    pub(super) fn forget_hosts(&mut self) {
        self.hosts.get_mut().take();
        self.resident.get_mut().take();
        self.left.get_mut().take();
        self.fresh_plans.get_mut().clear();
    }

    /// The memory (MB) the placed VPs of every job that asked for some
    /// take on each host (by number).
    pub(super) fn resident(&self) -> std::cell::Ref<'_, Vec<u64>> {
        if self.resident.borrow().is_none() {
            let used = self.count_resident(&self.hosts());
            *self.resident.borrow_mut() = Some(used);
        }
        std::cell::Ref::map(self.resident.borrow(), |r| {
            r.as_ref().expect("just computed")
        })
    }

    /// `resident`, counted from the jobs.
    fn count_resident(&self, hosts: &Hosts) -> Vec<u64> {
        let mut used = vec![0u64; hosts.len()];
        for j in self.jobs.iter().flatten() {
            let Some(m) = j.memory_mb.filter(|&m| m > 0) else {
                continue;
            };
            for (&r, &n) in &j.rows {
                if let Some(h) = hosts.of(r) {
                    used[h as usize] += m.saturating_mul(u64::from(n));
                }
            }
        }
        used
    }

    /// VPs were placed, moved or removed: what hosts hold is counted
    /// again when next asked.
    pub(super) fn forget_resident(&self) {
        self.resident.borrow_mut().take();
        self.left.borrow_mut().take();
    }

    /// Job `k`'s VPs, `m` MB each (`memory_mb`), moved from `old` rows
    /// (VPs per row) to `new` ones: what the hosts hold (`resident`) and
    /// have left (`left`), where kept, changed on those hosts alone, to
    /// what counting them again gives (`check_memory` compares). Jobs
    /// that ask for no memory change neither.
    pub(super) fn resident_moved(
        &self,
        m: Option<u64>,
        old: &BTreeMap<Row, u32>,
        new: &BTreeMap<Row, u32>,
    ) {
        let Some(m) = m.filter(|&m| m > 0) else {
            return;
        };
        let hosts = self.hosts();
        let mut resident = self.resident.borrow_mut();
        let mut left = self.left.borrow_mut();
        let Some(used) = resident.as_mut() else {
            left.take();
            return;
        };
        // Exact sums; where `count_resident` would saturate, counted again.
        let mut delta: BTreeMap<u32, i128> = BTreeMap::new();
        let mut exact = true;
        for (rows, sign) in [(old, -1i128), (new, 1)] {
            for (&r, &n) in rows {
                exact &= m.checked_mul(u64::from(n)).is_some();
                if let Some(h) = hosts.of(r) {
                    *delta.entry(h).or_default() += sign * i128::from(m) * i128::from(n);
                }
            }
        }
        let after: Option<Vec<(u32, u64)>> = delta
            .into_iter()
            .filter(|&(_, d)| d != 0)
            .map(|(h, d)| {
                let v = i128::from(*used.get(h as usize)?) + d;
                u64::try_from(v).ok().map(|v| (h, v))
            })
            .collect();
        let Some(after) = after.filter(|_| exact) else {
            resident.take();
            left.take();
            return;
        };
        if let Some(l) = left.as_mut().filter(|_| !after.is_empty()) {
            l.totals.clear();
        }
        for (h, v) in after {
            used[h as usize] = v;
            if let Some(l) = left.as_mut() {
                let room = hosts.offer(h).map_or(u64::MAX, |o| o.saturating_sub(v));
                l.room[h as usize] = room;
                for (&need, caps) in l.caps.iter_mut() {
                    Arc::make_mut(caps)[h as usize] = per_vp(room, need);
                }
            }
        }
    }

    /// The memory (MB) each host has left (`u64::MAX` where it says
    /// nothing of its memory), kept until `resident` is forgotten.
    fn left(&self) -> std::cell::RefMut<'_, Left> {
        if self.left.borrow().is_none() {
            let hosts = self.hosts();
            let resident = self.resident();
            let room = (0..hosts.len())
                .map(|h| match hosts.offer[h] {
                    Some(offer) => offer.saturating_sub(resident[h]),
                    None => u64::MAX,
                })
                .collect();
            *self.left.borrow_mut() = Some(Left {
                room,
                caps: HashMap::new(),
                totals: HashMap::new(),
            });
        }
        std::cell::RefMut::map(self.left.borrow_mut(), |l| {
            l.as_mut().expect("just computed")
        })
    }

    /// Does any host in the pool say what memory it offers?
    pub(super) fn any_memory_limit(&self) -> bool {
        self.hosts().offer.iter().any(Option::is_some)
    }

    /// How many VPs of job `k` each host holds, counting its own VPs as
    /// not yet placed: `None` when the job needs no memory or no host
    /// says what it offers. For a job with no VP placed, the same for
    /// every job asking as much a VP, made once until VPs are placed,
    /// moved or removed.
    pub(super) fn memory_caps(&self, k: JobKey) -> Option<Arc<Caps>> {
        let j = self.job(k);
        let m = j.memory_mb.filter(|&m| m > 0)?;
        if !self.any_memory_limit() {
            return None;
        }
        let base = {
            let mut left = self.left();
            let Left { room, caps, .. } = &mut *left;
            caps.entry(m)
                .or_insert_with(|| Arc::new(room.iter().map(|&mb| per_vp(mb, m)).collect()))
                .clone()
        };
        if j.rows.is_empty() {
            return Some(base);
        }
        // Its own VPs given back to the hosts they are on.
        let own = self.own_memory(k, m);
        let left = self.left();
        let mut caps = Arc::unwrap_or_clone(base);
        for (h, mb) in own {
            caps[h as usize] = per_vp(left.room[h as usize].saturating_add(mb), m);
        }
        Some(Arc::new(caps))
    }

    /// The memory (MB) job `k`'s placed VPs, `m` MB each, take on each
    /// host that says what it offers.
    fn own_memory(&self, k: JobKey, m: u64) -> Vec<(u32, u64)> {
        let hosts = self.hosts();
        let mut own: Vec<(u32, u64)> = self
            .job(k)
            .rows
            .iter()
            .filter_map(|(&r, &n)| {
                let h = hosts.of(r).filter(|&h| hosts.offer(h).is_some())?;
                Some((h, m.saturating_mul(u64::from(n))))
            })
            .collect();
        // One entry a host, its rows' memory summed.
        own.sort_unstable_by_key(|&(h, _)| h);
        own.dedup_by(|next, kept| {
            let same = next.0 == kept.0;
            if same {
                kept.1 = kept.1.saturating_add(next.1);
            }
            same
        });
        own
    }

    /// The memory (MB) each host has left for job `k`, its own VPs
    /// counted as gone (`u64::MAX` where a host says nothing): `None` when
    /// the job needs no memory or no host says.
    pub(super) fn memory_room(&self, k: JobKey) -> Option<Vec<u64>> {
        let m = self.job(k).memory_mb.filter(|&m| m > 0)?;
        if !self.any_memory_limit() {
            return None;
        }
        let own = self.own_memory(k, m);
        let mut room = self.left().room.clone();
        for (h, mb) in own {
            room[h as usize] = room[h as usize].saturating_add(mb);
        }
        Some(room)
    }

    /// For plans of several moves made before any is carried out
    /// (compaction, making room): would job `k` with `counts[i]` VPs on
    /// `rows[i]` fit in what the hosts have left once `taken` (MB per
    /// host, by the moves planned before it) is gone? If so its own is
    /// added to `taken`.
    pub(super) fn take_memory(
        &self,
        k: JobKey,
        rows: &[Row],
        counts: &[u32],
        taken: &mut HashMap<u32, u64>,
    ) -> bool {
        let Some(m) = self.job(k).memory_mb.filter(|&m| m > 0) else {
            return true;
        };
        let Some(room) = self.memory_room(k) else {
            return true;
        };
        let hosts = self.hosts();
        let mut need: HashMap<u32, u64> = HashMap::new();
        for (&r, &n) in rows.iter().zip(counts) {
            if let Some(h) = hosts.of(r).filter(|&h| hosts.offer(h).is_some()) {
                *need.entry(h).or_default() += m.saturating_mul(u64::from(n));
            }
        }
        let fits = need.iter().all(|(h, &mb)| {
            mb.saturating_add(taken.get(h).copied().unwrap_or(0)) <= room[*h as usize]
        });
        if fits {
            for (h, mb) in need {
                *taken.entry(h).or_default() += mb;
            }
        }
        fits
    }

    /// What `apply` carries out for job `k`, its VPs `kept` on their rows
    /// and `assignments` moved or started, cut to what the hosts' memory
    /// holds: an assignment beyond it is left out (its VP held). Plans keep
    /// within memory already; this holds it where `assign` keeps a VP on
    /// its processor whatever the plan said (pinned, or on processors
    /// chosen for its job).
    pub(super) fn within_memory(
        &self,
        k: JobKey,
        kept: &[(Row, u32)],
        assignments: &mut Vec<(u32, Row)>,
    ) -> Vec<u32> {
        let Some(caps) = self.memory_caps(k) else {
            return Vec::new();
        };
        let hosts = self.hosts();
        let mut on: HashMap<u32, u32> = HashMap::new();
        for &(r, n) in kept {
            if let Some(h) = hosts.of(r) {
                *on.entry(h).or_default() += n;
            }
        }
        let mut dropped = Vec::new();
        assignments.retain(|&(i, r)| {
            let Some(h) = hosts.of(r) else { return true };
            let n = on.entry(h).or_default();
            if *n < caps.get(h as usize).copied().unwrap_or(0) {
                *n += 1;
                true
            } else {
                dropped.push(i);
                false
            }
        });
        dropped
    }

    /// Could `counts` (VPs per architecture) run on `free` by `bound`
    /// within `caps`? Each row counted for the VPs it takes by the bound
    /// and its host holds: exact where each host is one row, an upper
    /// bound where hosts share (a quick refusal before MTAT).
    pub(super) fn fits_in_memory(
        &self,
        caps: &Caps,
        free: &BitSet,
        counts: &[(u32, u32)],
        bound: f64,
    ) -> bool {
        let hosts = self.hosts();
        counts.iter().all(|&(arch, x)| {
            let Some(rows) = self.map.arch_rows(arch) else {
                return false;
            };
            let mut got: u64 = 0;
            for r in free.iter().filter(|&r| rows.contains(r)) {
                let cap = hosts
                    .of(r)
                    .map_or(0, |h| caps.get(h as usize).copied().unwrap_or(0));
                got += u64::from(slots_at(bound, self.cap(r)).min(cap));
                if got >= u64::from(x) {
                    return true;
                }
            }
            false
        })
    }

    /// Can the hosts hold `counts` (VPs per architecture) on no rows at
    /// all, `caps` saying how many each holds? True when, for some
    /// architecture, its rows counted each for all its host holds (an
    /// upper bound of what any of its rows hold together: `arch_room`)
    /// come short of its VPs. Then every slot is refused by
    /// `fits_in_memory`, and every plan on its rows placing them all
    /// oversteps `caps` somewhere, as `capped_plan` finds no plan within
    /// them.
    pub(super) fn memory_holds_none(&self, caps: &Caps, counts: &[(u32, u32)]) -> bool {
        counts
            .iter()
            .any(|&(arch, x)| self.arch_room(caps, arch).is_some_and(|n| n < u64::from(x)))
    }

    /// `memory_holds_none` for job `k` with its own `memory_caps`: false
    /// where it needs no memory. For a job with no VP placed, whose caps
    /// are those of every job asking as much a VP, each architecture's
    /// count is kept until a host's memory changes.
    pub(super) fn memory_holds_job_nowhere(&self, k: JobKey, counts: &[(u32, u32)]) -> bool {
        let Some(caps) = self.memory_caps(k) else {
            return false;
        };
        let j = self.job(k);
        let m = j.memory_mb.unwrap_or(0);
        if !j.rows.is_empty() {
            return self.memory_holds_none(&caps, counts);
        }
        counts.iter().any(|&(arch, x)| {
            let kept = self.left().totals.get(&(m, arch)).copied();
            let room = kept.or_else(|| {
                let n = self.arch_room(&caps, arch)?;
                self.left().totals.insert((m, arch), n);
                Some(n)
            });
            room.is_some_and(|n| n < u64::from(x))
        })
    }

    /// The VPs architecture `arch`'s rows hold, each counted for all its
    /// host holds by `caps` (a row without a host for any number):
    /// `None` where the architecture has no rows.
    fn arch_room(&self, caps: &Caps, arch: u32) -> Option<u64> {
        let hosts = self.hosts();
        let rows = self.map.arch_rows(arch)?;
        Some(
            rows.iter()
                .map(|r| {
                    hosts.of(r).map_or(u64::from(u32::MAX), |h| {
                        u64::from(caps.get(h as usize).copied().unwrap_or(0))
                    })
                })
                .sum(),
        )
    }

    /// Do `counts[i]` VPs on `rows[i]` stay within `caps`?
    pub(super) fn within(&self, caps: &Caps, rows: &[Row], counts: &[u32]) -> bool {
        let hosts = self.hosts();
        // Hosts of one processor each and rows each once: each row alone.
        if hosts.single && rows.windows(2).all(|w| w[0] < w[1]) {
            return rows.iter().zip(counts).all(|(&r, &n)| {
                n == 0
                    || hosts
                        .of(r)
                        .is_none_or(|h| n <= caps.get(h as usize).copied().unwrap_or(0))
            });
        }
        let mut on: HashMap<u32, u64> = HashMap::new();
        for (&r, &n) in rows.iter().zip(counts) {
            if n == 0 {
                continue;
            }
            if let Some(h) = hosts.of(r) {
                let e = on.entry(h).or_default();
                *e += u64::from(n);
                if *e > u64::from(caps.get(h as usize).copied().unwrap_or(0)) {
                    return false;
                }
            }
        }
        true
    }

    /// MTAT and Compression for a job on `rows` (`inp`, its MTAT input
    /// there) with no host holding more of its VPs than `caps` says: the
    /// least `T = max n_r / a_r` any such assignment reaches (found by
    /// bisection on `T`, every architecture's VPs placed fastest
    /// processor first), and then, for each of `wants` (`compressed`,
    /// `keep_t`), either the fewest processors reaching it (`compressed`,
    /// fastest first) or the VPs kept where they are by `max(T, keep_t)`
    /// and the rest placed fastest first. `None` where the hosts cannot
    /// hold them all. (Architectures are served in order where they share
    /// a host.) The bisection does not depend on `wants`: made once.
    pub(super) fn capped_plan<const N: usize>(
        &self,
        inp: &PoolInput,
        rows: &[Row],
        caps: &Caps,
        wants: [(bool, f64); N],
    ) -> [Option<(f64, Vec<u32>)>; N] {
        let hosts = self.hosts();
        let host: Vec<Option<u32>> = rows.iter().map(|&r| hosts.of(r)).collect();
        // Fastest first, the job's own processors first among equals.
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_by(|&a, &b| {
            inp.caps[b]
                .total_cmp(&inp.caps[a])
                .then(inp.preferred[b].cmp(&inp.preferred[a]))
                .then(a.cmp(&b))
        });
        let mut left: Caps = Vec::new();
        let mut assign = |t: f64, keep: Option<f64>| -> Option<Vec<u32>> {
            left.clone_from(caps);
            let mut out = vec![0u32; rows.len()];
            // Up to `limit` VPs of `need` on row `i`, as its host allows.
            let mut take = |i: usize, limit: u32, need: &mut u32, out: &mut Vec<u32>| {
                let room = host[i].map_or(u32::MAX, |h| left.get(h as usize).copied().unwrap_or(0));
                let n = limit.saturating_sub(out[i]).min(room).min(*need);
                out[i] += n;
                *need -= n;
                if let Some(l) = host[i].and_then(|h| left.get_mut(h as usize)) {
                    *l = l.saturating_sub(n);
                }
            };
            for (z, &x) in inp.counts.iter().enumerate() {
                let mut need = x;
                if let Some(kt) = keep {
                    let bound = t.max(kt);
                    for &i in &order {
                        if inp.pool_of[i] == z && inp.current[i] > 0 {
                            let limit = inp.current[i].min(slots_at(bound, inp.caps[i]));
                            take(i, limit, &mut need, &mut out);
                        }
                    }
                }
                for &i in &order {
                    if need == 0 {
                        break;
                    }
                    if inp.pool_of[i] == z {
                        take(i, slots_at(t, inp.caps[i]), &mut need, &mut out);
                    }
                }
                if need > 0 {
                    return None;
                }
            }
            Some(out)
        };
        // One pool on hosts of one processor each: whether `T` will do is
        // a sum, with no assignment made; the rows counted once per
        // capacity and cap (thousands of rows, a few kinds): the same sum.
        let simple = inp.counts.len() == 1 && hosts.single;
        let mut kinds: Vec<(f64, u32, u64)> = Vec::new();
        if simple {
            for (i, h) in host.iter().enumerate() {
                let cap = h.map_or(u32::MAX, |h| caps.get(h as usize).copied().unwrap_or(0));
                if cap == 0 {
                    continue;
                }
                let a = inp.caps[i];
                match kinds
                    .iter_mut()
                    .find(|(b, c, _)| b.to_bits() == a.to_bits() && *c == cap)
                {
                    Some(kind) => kind.2 += 1,
                    None => kinds.push((a, cap, 1)),
                }
            }
        }
        let enough = |t: f64| -> bool {
            let mut got: u64 = 0;
            for &(a, cap, n) in &kinds {
                got += u64::from(slots_at(t, a).min(cap)) * n;
            }
            got >= u64::from(inp.counts[0])
        };
        // At this `T` every processor takes all the VPs of any pool: only
        // the hosts' memory can leave some without a place.
        let slowest = inp.caps.iter().copied().fold(f64::INFINITY, f64::min);
        let most = inp.counts.iter().copied().max().unwrap_or(0);
        let mut hi = f64::from(most.max(1)) / slowest;
        if assign(hi, None).is_none() {
            return std::array::from_fn(|_| None);
        }
        let mut lo = 0.0;
        for _ in 0..64 {
            let mid = (lo + hi) / 2.0;
            let fits = if simple {
                enough(mid)
            } else {
                assign(mid, None).is_some()
            };
            if fits {
                hi = mid;
            } else {
                lo = mid;
            }
            if hi - lo <= hi * 1e-12 {
                break;
            }
        }
        wants.map(|(compressed, keep_t)| {
            let out = assign(hi, (!compressed).then_some(keep_t))?;
            let t = rows
                .iter()
                .zip(&out)
                .filter(|(_, &n)| n > 0)
                .map(|(&r, &n)| finish_time(n, self.cap(r)))
                .fold(0.0, f64::max);
            Some((t, out))
        })
    }

    /// Every host's memory holds what its placed VPs need; `Err` names
    /// the first that does not (for `check_invariants`), or a count kept
    /// out of step.
    pub(super) fn check_memory(&self) -> Result<(), String> {
        let hosts = self.hosts();
        let used = self.count_resident(&hosts);
        if self
            .resident
            .borrow()
            .as_ref()
            .is_some_and(|kept| *kept != used)
        {
            return Err("resident memory out of step".into());
        }
        if let Some(left) = self.left.borrow().as_ref() {
            let room: Vec<u64> = (0..hosts.len())
                .map(|h| {
                    hosts
                        .offer(h as u32)
                        .map_or(u64::MAX, |o| o.saturating_sub(used[h]))
                })
                .collect();
            if left.room != room {
                return Err("memory left out of step".into());
            }
            for (&m, caps) in &left.caps {
                if room
                    .iter()
                    .zip(caps.iter())
                    .any(|(&mb, &n)| per_vp(mb, m) != n)
                    || caps.len() != room.len()
                {
                    return Err(format!("VPs of {m} MB each hosts hold out of step"));
                }
            }
        }
        for (h, &need) in used.iter().enumerate() {
            if let Some(offer) = hosts.offer(h as u32) {
                if need > offer {
                    let name = self
                        .map
                        .processors()
                        .find(|&(r, _)| hosts.of(r) == Some(h as u32))
                        .map(|(_, p)| p.host.to_string())
                        .unwrap_or_default();
                    return Err(format!(
                        "host {name}: its VPs need {need} MB, it offers {offer} MB"
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::sched::compress::compress_pools;
    use crate::sched::event::Event;
    use crate::sched::random::{Generator, Shape};
    use crate::sched::scheduler::SchedConfig;
    use crate::sched::Placement;

    /// The least `max n_r / a_r` over every assignment of `x` VPs to
    /// processors of capacities `caps` (on hosts `host_of`) with no host
    /// holding more than `limit` says: all of them tried.
    fn brute(x: u32, caps: &[f64], host_of: &[usize], limit: &[u32]) -> Option<f64> {
        // (processor, VPs left, VPs on each host, turnaround so far)
        let mut best: Option<f64> = None;
        let mut stack = vec![(0usize, x, vec![0u32; limit.len()], 0.0f64)];
        while let Some((i, left, on, worst)) = stack.pop() {
            if i == caps.len() {
                if left == 0 && best.is_none_or(|b| worst < b) {
                    best = Some(worst);
                }
                continue;
            }
            let h = host_of[i];
            for n in 0..=left {
                if on[h] + n > limit[h] {
                    break;
                }
                let mut on = on.clone();
                on[h] += n;
                let w = if n > 0 {
                    worst.max(f64::from(n) / caps[i])
                } else {
                    worst
                };
                stack.push((i + 1, left - n, on, w));
            }
        }
        best
    }

    /// `memory_caps` as it was first written: every host's room counted
    /// from the jobs, the job's own VPs given back, divided by its need.
    fn plain_caps(s: &Scheduler, k: JobKey) -> Option<Caps> {
        let j = s.job(k);
        let m = j.memory_mb.filter(|&m| m > 0)?;
        let hosts = s.hosts();
        if !hosts.offer.iter().any(Option::is_some) {
            return None;
        }
        let used = s.count_resident(&hosts);
        let mut room: Vec<u64> = (0..hosts.len())
            .map(|h| match hosts.offer[h] {
                Some(offer) => offer.saturating_sub(used[h]),
                None => u64::MAX,
            })
            .collect();
        for (&r, &n) in &j.rows {
            if let Some(h) = hosts.of(r).filter(|&h| hosts.offer(h).is_some()) {
                room[h as usize] = room[h as usize].saturating_add(m.saturating_mul(u64::from(n)));
            }
        }
        Some(
            room.into_iter()
                .map(|mb| (mb / m).min(u64::from(u32::MAX)) as u32)
                .collect(),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// What the hosts hold and have left, kept from event to event and
        /// changed where jobs move, is what counting them again gives: every
        /// job's `memory_caps` and `memory_room` agree with the plain count
        /// after every event, and so do `memory_holds_job_nowhere` and
        /// `fresh_plan` (kept for jobs with no VP placed) with what
        /// computing them again gives; and where `memory_holds_none` says
        /// no host set holds a job, no plan on its rows does and no slot's
        /// count.
        #[test]
        fn kept_memory_agrees_with_a_count(seed in any::<u64>(), per_host in 1usize..4, backfill in any::<bool>()) {
            let mut g = Generator::new(seed, Shape {
                processors: 12,
                per_host,
                arches: vec!["x86_64".into(), "aarch64".into()],
                max_job: 10,
                target_jobs: 6,
                memory: true,
                estimates: true,
                ..Shape::default()
            });
            let config = if backfill { Placement::Mig.config() } else { SchedConfig::default() };
            let mut s = Scheduler::new(config);
            for e in g.pool() {
                s.on_event(e).unwrap();
            }
            for _ in 0..60 {
                let e = g.event();
                s.on_event(e).unwrap();
                prop_assert_eq!(s.check_invariants(), Ok(()));
                for k in 0..s.jobs.len() as JobKey {
                    if s.jobs[k as usize].is_none() {
                        continue;
                    }
                    let want = plain_caps(&s, k);
                    let got = s.memory_caps(k).map(|c| c.to_vec());
                    prop_assert_eq!(&got, &want);
                    if let Some(want) = want {
                        let m = s.job(k).memory_mb.unwrap_or(1);
                        let room = s.memory_room(k).unwrap();
                        prop_assert!(room.iter().zip(&want).all(|(&mb, &n)| per_vp(mb, m) == n));
                        // Kept per size of VP for jobs with none placed: the
                        // same answer as counting every row now.
                        let (demand, t_new) = s.demand_of(k);
                        for _ in 0..2 {
                            prop_assert_eq!(
                                s.memory_holds_job_nowhere(k, &demand.counts),
                                s.memory_holds_none(&want, &demand.counts)
                            );
                        }
                        // A slot of its own's plan, kept for jobs with none
                        // placed: what planning it again gives.
                        if !demand.counts.is_empty() && t_new.is_finite() {
                            let all = demand.rows.to_vec();
                            let inp = s.pool_input(k, &all);
                            let counts = inp.as_ref().and_then(|inp| {
                                compress_pools(&inp.counts, &inp.pool_of, &inp.caps, t_new, &inp.current)
                            });
                            for _ in 0..2 {
                                let kept = s.fresh_plan(k, &demand, t_new);
                                let (all_kept, inp_kept, counts_kept) = kept.parts();
                                prop_assert_eq!(all_kept, &all[..]);
                                prop_assert_eq!(counts_kept, counts.as_ref());
                                prop_assert_eq!(
                                    inp_kept.map(|i| (&i.counts, &i.pool_of, &i.caps, &i.current, &i.preferred)),
                                    inp.as_ref().map(|i| (&i.counts, &i.pool_of, &i.caps, &i.current, &i.preferred))
                                );
                            }
                        }
                        // Where it says no host set holds the job, no plan
                        // on its rows and no slot's count does.
                        if !demand.counts.is_empty() && s.memory_holds_none(&want, &demand.counts) {
                            let rows = demand.rows.to_vec();
                            prop_assert!(s.plan(k, &rows, true, 0.0).is_none());
                            prop_assert!(s.plan(k, &rows, false, s.current_t(k)).is_none());
                            prop_assert!(s.plan_both(k, &rows, s.current_t(k)).is_none());
                            for c in s.map.columns() {
                                prop_assert!(!s.fits_in_memory(&want, c.free(), &demand.counts, 1e12));
                            }
                        }
                    }
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// MTAT within the hosts' memory reaches the least turnaround of
        /// any assignment that the hosts hold, places every VP, and keeps
        /// each host within what its memory holds.
        #[test]
        fn capped_plan_reaches_the_least_turnaround_memory_allows(
            x in 1u32..7,
            caps in proptest::collection::vec(1u32..5, 1..6),
            limit in proptest::collection::vec(0u32..5, 3),
        ) {
            let mut s = Scheduler::new(SchedConfig { max_slots: 0, ..Placement::Mig.config() });
            let host_of: Vec<usize> = (0..caps.len()).map(|i| i % 3).collect();
            for (i, &c) in caps.iter().enumerate() {
                s.on_event(Event::NewProcessor {
                    id: format!("p{i}"),
                    host: format!("h{}", host_of[i]),
                    arch: "x86_64".into(),
                    capacity: f64::from(c),
                    memory_mb: Some(1000),
                }).unwrap();
            }
            s.on_event(Event::Submit {
                job: "j".into(),
                vps: BTreeMap::from([("x86_64".to_string(), x)]),
                memory_mb: Some(100),
                only: None,
                estimate: None,
            }).unwrap();
            let k = s.job_of["j"];
            let rows: Vec<Row> = (0..caps.len()).map(|i| s.map.row_of(&format!("p{i}")).unwrap()).collect();
            // Hosts are numbered as they first appear: h0, h1, h2.
            let hosts = s.hosts();
            let mut cap_map: Caps = vec![u32::MAX; hosts.len()];
            for (i, &r) in rows.iter().enumerate() {
                cap_map[hosts.of(r).unwrap() as usize] = limit[host_of[i]];
            }
            let capf: Vec<f64> = caps.iter().map(|&c| f64::from(c)).collect();
            let want = brute(x, &capf, &host_of, &limit);
            for compressed in [true, false] {
                let inp = s.pool_input(k, &rows).unwrap();
                let [got] = s.capped_plan(&inp, &rows, &cap_map, [(compressed, 0.0)]);
                match (got, want) {
                    (None, None) => {}
                    (Some((t, counts)), Some(w)) => {
                        prop_assert!((t - w).abs() <= 1e-9 * w.max(1.0), "T {} against {}", t, w);
                        prop_assert_eq!(counts.iter().sum::<u32>(), x);
                        prop_assert!(s.within(&cap_map, &rows, &counts));
                        let worst = rows.iter().zip(&counts).filter(|(_, &n)| n > 0)
                            .map(|(&r, &n)| f64::from(n) / s.cap(r)).fold(0.0, f64::max);
                        prop_assert!(worst <= t * (1.0 + 1e-12));
                    }
                    (got, want) => prop_assert!(false, "{:?} against {:?}", got, want),
                }
            }
        }
    }
}
