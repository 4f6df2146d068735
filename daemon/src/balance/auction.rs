//! A new job's placement as the daemon where it arrives asks for it: seed
//! 002's negotiation (`migd --placement bidding`: every other host is
//! asked for a bid) and seed 004's search for room (`nres`: its neighbours
//! are asked, and pass the request on to theirs, each saying whom). Each
//! host bids from what it runs itself (`own_bid`); once every host asked
//! (or named as reached) has bid, or the wait is over, the paper's rules
//! (`choice`) choose among the bids it has. A host that did not answer in
//! time is left out, and the job is placed all the same. Seed 004's
//! trigger (`triggers`) says whether a job that fits where it arrived
//! looks for room at all.
//!
//! A bid is taken only from a host that was asked, once, for a request
//! still open; a figure that is not a number is refused, one out of range
//! clamped: a host can move only its own bid.
//!
//! Pure: no I/O, no clock (the caller says what time it is). What does not
//! live here: the messages' travel (`server::bids`), the rules themselves
//! (`choice`, `bidding`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use libmig::msg::{Bid, JobClass, Work};

use super::choice::{self, HostView, Need, Policy};
use super::nres;

/// Most processors a bid may say a host has.
const MOST_PROCESSORS: u32 = 4096;
/// Most VPs a bid may say a host runs.
const MOST_VPS: u32 = 1 << 20;
/// The range of a processor's relative speed in a bid.
const CAPACITY: (f64, f64) = (1e-3, 1e3);

/// Why a bid was not taken.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refused {
    /// No request of that number is open (never asked, or already decided).
    #[error("no request for bids {0} is open")]
    NotOpen(u64),
    /// The host was not asked (not a member when the request went out).
    #[error("{0} was not asked for a bid")]
    NotAsked(String),
    /// The host has bid already.
    #[error("{0} has bid already")]
    Twice(String),
    /// A figure is not a number.
    #[error("its {0} is not a number")]
    NotANumber(&'static str),
}

/// What one host bid (or, for the asker, its own state).
pub fn sane(bid: Bid) -> Result<Bid, Refused> {
    for (name, x) in [
        ("capacity", bid.capacity),
        ("I/O share", bid.free_io),
        ("estimate", bid.etc),
    ] {
        if !x.is_finite() {
            return Err(Refused::NotANumber(name));
        }
    }
    Ok(Bid {
        processors: bid.processors.min(MOST_PROCESSORS),
        capacity: bid.capacity.clamp(CAPACITY.0, CAPACITY.1),
        vps: bid.vps.min(MOST_VPS),
        free_io: bid.free_io.clamp(0.0, 1.0),
        etc: bid.etc.max(0.0),
        ..bid
    })
}

/// A host's bid for `work`, from what it runs: `processors` offered now,
/// each of speed `capacity`, `vps` live there, memory and I/O still free.
pub fn own_bid(
    work: &Work,
    processors: u32,
    capacity: f64,
    vps: u32,
    free_memory_mb: Option<u64>,
    free_io: f64,
) -> Bid {
    let width = f64::from(processors.max(1));
    let etc = (f64::from(vps.saturating_add(work.vps)) / width).max(1.0) / capacity.max(1e-9);
    Bid {
        processors,
        capacity,
        vps,
        free_memory_mb,
        free_io,
        etc,
    }
}

/// The decision on one request: the hosts chosen and how many of each
/// one's processors the job may use
/// (`None`: no host could take it, the master chooses), who was asked and
/// who stayed silent, and what the caller kept with the request.
#[derive(Debug)]
pub struct Decided<T> {
    /// The policy that decided.
    pub policy: Policy,
    /// Hosts and processors each, in host order.
    pub chosen: Option<Vec<(String, u32)>>,
    /// Hosts asked (not counting the asker).
    pub asked: usize,
    /// Hosts asked that did not bid in time.
    pub silent: Vec<String>,
    /// What the caller kept (the request it answers).
    pub kept: T,
}

#[derive(Debug)]
struct Open<T> {
    policy: Policy,
    work: Work,
    /// The asker's name and its own bid.
    local: (String, Bid),
    /// Every host asked, with its bid once it came.
    bids: BTreeMap<String, Option<Bid>>,
    /// Bids of hosts not yet known to be asked: under nres a host reached
    /// through a neighbour may bid before the neighbour says it passed the
    /// request on.
    early: BTreeMap<String, Bid>,
    deadline: Instant,
    kept: T,
}

/// The requests for bids this daemon has open.
#[derive(Debug)]
pub struct Auctions<T> {
    next: u64,
    open: BTreeMap<u64, Open<T>>,
}

impl<T> Default for Auctions<T> {
    fn default() -> Self {
        Auctions {
            next: 1,
            open: BTreeMap::new(),
        }
    }
}

impl<T> Auctions<T> {
    /// A request for bids for `work` under `policy`, arrived at host
    /// `local` (whose own bid is `own`), asking `hosts` (the asker left
    /// out) to answer within `wait`. Its number, to send with `Ask`; or,
    /// when there is no one to ask, the decision at once.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        &mut self,
        policy: Policy,
        work: Work,
        local: (String, Bid),
        hosts: Vec<String>,
        now: Instant,
        wait: Duration,
        kept: T,
    ) -> Result<u64, Decided<T>> {
        let bids: BTreeMap<String, Option<Bid>> = hosts
            .into_iter()
            .filter(|h| *h != local.0)
            .map(|h| (h, None))
            .collect();
        let open = Open {
            policy,
            work,
            local,
            bids,
            early: BTreeMap::new(),
            deadline: now + wait,
            kept,
        };
        if open.bids.is_empty() {
            return Err(decide(open));
        }
        let id = self.next;
        self.next += 1;
        self.open.insert(id, open);
        Ok(id)
    }

    /// Host `from`'s bid on request `id`, which it passed on to
    /// `forwarded` (members, whose bids are awaited too): the decision,
    /// once it was the last one awaited.
    pub fn bid(
        &mut self,
        from: &str,
        id: u64,
        bid: Bid,
        forwarded: &[String],
    ) -> Result<Option<Decided<T>>, Refused> {
        let open = self.open.get_mut(&id).ok_or(Refused::NotOpen(id))?;
        let bid = sane(bid)?;
        match open.bids.get_mut(from) {
            Some(Some(_)) => return Err(Refused::Twice(from.to_string())),
            Some(slot) => *slot = Some(bid),
            // Reached through a neighbour that has not said so yet: kept
            // until it does (the caller takes bids of members only).
            None if open.policy == Policy::Nres && from != open.local.0 => {
                if open.early.insert(from.to_string(), bid).is_some() {
                    return Err(Refused::Twice(from.to_string()));
                }
                return Ok(None);
            }
            None => return Err(Refused::NotAsked(from.to_string())),
        }
        for h in forwarded {
            if *h != open.local.0 && !open.bids.contains_key(h) {
                let early = open.early.remove(h);
                open.bids.insert(h.clone(), early);
            }
        }
        if open.bids.values().any(Option::is_none) {
            return Ok(None);
        }
        Ok(self.open.remove(&id).map(decide))
    }

    /// The requests whose wait is over at `now`, decided on the bids they
    /// have.
    pub fn expire(&mut self, now: Instant) -> Vec<Decided<T>> {
        let due: Vec<u64> = self
            .open
            .iter()
            .filter(|(_, o)| o.deadline <= now)
            .map(|(&id, _)| id)
            .collect();
        due.into_iter()
            .filter_map(|id| self.open.remove(&id))
            .map(decide)
            .collect()
    }

    /// When the next wait is over.
    pub fn due(&self) -> Option<Instant> {
        self.open.values().map(|o| o.deadline).min()
    }
}

/// The paper's rules over the bids in: the asker first, then every host
/// that bid, in name order.
fn decide<T>(open: Open<T>) -> Decided<T> {
    let mut names = vec![open.local.0.clone()];
    let mut views = vec![view(0, &open.local.1)];
    let mut silent = Vec::new();
    for (host, bid) in &open.bids {
        match bid {
            Some(b) => {
                views.push(view(names.len(), b));
                names.push(host.clone());
            }
            None => silent.push(host.clone()),
        }
    }
    let need = Need {
        vps: open.work.vps,
        class: open.work.class,
        memory_mb: open.work.memory_mb,
        io: open.work.io,
    };
    let chosen = choice::choose(open.policy, &need, 0, &views).map(|procs| {
        let mut per_host: BTreeMap<usize, u32> = BTreeMap::new();
        for p in procs {
            if let Some(i) = p.split_once(':').and_then(|(i, _)| i.parse().ok()) {
                *per_host.entry(i).or_default() += 1;
            }
        }
        per_host
            .into_iter()
            .filter_map(|(i, n)| Some((names.get(i)?.clone(), n)))
            .collect()
    });
    Decided {
        policy: open.policy,
        chosen,
        asked: open.bids.len(),
        silent,
        kept: open.kept,
    }
}

/// Seed 002's test at the host where a job arrived, from its own bid: a
/// simple program, or a group all of whose VPs are, within the task
/// threshold there stays without a request for bids; a cluster always asks
/// (it goes whole to the lowest bid).
pub fn stays_without_bids(work: &Work, own: &Bid) -> bool {
    let holds = own.processors > 0
        && match (work.memory_mb, own.free_memory_mb) {
            (Some(need), Some(free)) => need.saturating_mul(u64::from(work.vps)) <= free,
            _ => true,
        };
    let slowdown = own.etc * own.capacity;
    holds
        && match work.class {
            JobClass::Cluster => false,
            JobClass::Simple | JobClass::Group => slowdown <= choice::DELTA_TASK,
        }
}

/// Seed 004's trigger at the host where a job arrived, from its own bid:
/// it looks for room elsewhere when it cannot hold the job itself (too few
/// processors idle, or too little memory or I/O), or when the burst is
/// over the trigger line, whose height is its processors (the busier it
/// is, the smaller the burst it keeps).
pub fn triggers(work: &Work, own: &Bid) -> bool {
    let idle = own.processors.saturating_sub(own.vps);
    let memory_short = match (work.memory_mb, own.free_memory_mb) {
        (Some(need), Some(free)) => need.saturating_mul(u64::from(work.vps)) > free,
        _ => false,
    };
    let io_short = work.io * f64::from(work.vps) > own.free_io + 1e-9;
    let busy = f64::from(own.vps.min(own.processors));
    let utilisation = 100.0 * busy / f64::from(own.processors.max(1));
    idle < work.vps
        || memory_short
        || io_short
        || nres::needs_triggering(work.vps, utilisation, f64::from(own.processors))
}

/// A bid as `choice` sees host number `i`: its VPs spread over its
/// processors, named `i:p`.
fn view(i: usize, bid: &Bid) -> HostView {
    let n = bid.processors;
    HostView {
        processors: (0..n)
            .map(|p| (format!("{i}:{p}"), bid.vps / n + u32::from(p < bid.vps % n)))
            .collect(),
        capacity: bid.capacity,
        free_memory_mb: bid.free_memory_mb,
        free_io: bid.free_io,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn work(vps: u32, class: JobClass) -> Work {
        Work {
            vps,
            class,
            memory_mb: None,
            io: 0.0,
        }
    }

    fn bid(processors: u32, vps: u32) -> Bid {
        own_bid(&work(1, JobClass::Simple), processors, 1.0, vps, None, 1.0)
    }

    fn open(a: &mut Auctions<()>, w: Work, local: Bid, hosts: &[&str], now: Instant) -> u64 {
        open_as(a, Policy::Bidding, w, local, hosts, now)
    }

    fn open_as(
        a: &mut Auctions<()>,
        policy: Policy,
        w: Work,
        local: Bid,
        hosts: &[&str],
        now: Instant,
    ) -> u64 {
        let hosts = hosts.iter().map(|h| h.to_string()).collect();
        a.open(
            policy,
            w,
            ("h0".into(), local),
            hosts,
            now,
            Duration::from_millis(300),
            (),
        )
        .expect("open")
    }

    #[test]
    fn a_simple_program_goes_to_the_lowest_bid_once_every_host_bid() {
        let now = Instant::now();
        let mut a = Auctions::default();
        // h0 runs four VPs on one processor: over the task threshold.
        let id = open(
            &mut a,
            work(1, JobClass::Simple),
            bid(1, 4),
            &["h1", "h2"],
            now,
        );
        assert!(a.bid("h1", id, bid(1, 2), &[]).expect("h1").is_none());
        let d = a
            .bid("h2", id, bid(1, 0), &[])
            .expect("h2")
            .expect("decided");
        assert_eq!(d.chosen, Some(vec![("h2".to_string(), 1)]));
        assert_eq!((d.asked, d.silent.len()), (2, 0));
        assert!(a.due().is_none());
    }

    #[test]
    fn a_host_silent_past_the_wait_is_left_out_and_the_job_placed_all_the_same() {
        let now = Instant::now();
        let mut a = Auctions::default();
        let id = open(
            &mut a,
            work(3, JobClass::Group),
            bid(1, 1),
            &["h1", "h2"],
            now,
        );
        assert!(a.bid("h1", id, bid(1, 0), &[]).expect("h1").is_none());
        assert!(a.expire(now + Duration::from_millis(299)).is_empty());
        let d = a
            .expire(now + Duration::from_millis(300))
            .pop()
            .expect("decided");
        assert_eq!(d.silent, ["h2"]);
        let chosen = d.chosen.expect("chosen");
        assert!(chosen.iter().all(|(h, _)| h != "h2"), "{chosen:?}");
        // Its late bid finds nothing open.
        assert!(matches!(a.bid("h2", id, bid(1, 0), &[]), Err(Refused::NotOpen(n)) if n == id));
    }

    #[test]
    fn a_bid_from_a_host_not_asked_twice_or_not_a_number_is_refused() {
        let now = Instant::now();
        let mut a = Auctions::default();
        let id = open(
            &mut a,
            work(1, JobClass::Simple),
            bid(1, 9),
            &["h1", "h2"],
            now,
        );
        assert!(matches!(
            a.bid("ghost", id, bid(64, 0), &[]),
            Err(Refused::NotAsked(_))
        ));
        assert!(matches!(
            a.bid("h0", id, bid(64, 0), &[]),
            Err(Refused::NotAsked(_))
        ));
        let nan = Bid {
            capacity: f64::NAN,
            ..bid(1, 0)
        };
        assert!(matches!(
            a.bid("h1", id, nan, &[]),
            Err(Refused::NotANumber(_))
        ));
        assert!(a.bid("h1", id, bid(1, 3), &[]).expect("h1").is_none());
        assert!(matches!(
            a.bid("h1", id, bid(64, 0), &[]),
            Err(Refused::Twice(_))
        ));
        let d = a
            .bid("h2", id, bid(1, 5), &[])
            .expect("h2")
            .expect("decided");
        // The ghost's offer of 64 idle processors counted for nothing.
        assert_eq!(d.chosen, Some(vec![("h1".to_string(), 1)]));
    }

    #[test]
    fn a_host_lying_about_its_load_moves_only_its_own_bid() {
        let now = Instant::now();
        let mut a = Auctions::default();
        let group = work(3, JobClass::Group);
        // Honest: h1 and h2 idle, h0 busy: the group spreads over h1 and h2
        // (and h0 for the third).
        let id = open(&mut a, group, bid(1, 4), &["h1", "h2"], now);
        a.bid("h1", id, bid(1, 0), &[]).expect("h1");
        let honest = a
            .bid("h2", id, bid(1, 0), &[])
            .expect("h2")
            .expect("decided");
        // h2 says it has a million processors, none busy, of speed 1e9:
        // clamped, it is only the best bid, and h1's place is unchanged.
        let id = open(&mut a, group, bid(1, 4), &["h1", "h2"], now);
        a.bid("h1", id, bid(1, 0), &[]).expect("h1");
        let lie = Bid {
            processors: u32::MAX,
            capacity: 1e9,
            ..bid(1, 0)
        };
        let lied = a.bid("h2", id, lie, &[]).expect("h2").expect("decided");
        let on = |d: &Decided<()>, h: &str| {
            d.chosen
                .as_ref()
                .and_then(|c| c.iter().find(|(x, _)| x == h).map(|(_, n)| *n))
        };
        assert_eq!(on(&honest, "h1"), on(&lied, "h1"), "{honest:?} {lied:?}");
        assert!(on(&lied, "h2").is_some());
        assert!(sane(lie).expect("sane").processors <= MOST_PROCESSORS);
    }

    #[test]
    fn with_no_other_host_the_asker_decides_at_once() {
        let mut a: Auctions<&str> = Auctions::default();
        let d = a
            .open(
                Policy::Bidding,
                work(2, JobClass::Cluster),
                ("h0".into(), bid(2, 0)),
                vec!["h0".into()],
                Instant::now(),
                Duration::from_millis(300),
                "kept",
            )
            .expect_err("decided at once");
        assert_eq!(d.chosen, Some(vec![("h0".to_string(), 2)]));
        assert_eq!((d.asked, d.kept), (0, "kept"));
    }

    fn room(processors: u32, vps: u32, free_memory_mb: u64) -> Bid {
        Bid {
            free_memory_mb: Some(free_memory_mb),
            ..bid(processors, vps)
        }
    }

    #[test]
    fn under_nres_the_hosts_a_neighbour_passed_the_request_to_are_awaited_and_balance_takes_the_tightest(
    ) {
        let now = Instant::now();
        let mut a = Auctions::default();
        let w = Work {
            memory_mb: Some(500),
            ..work(1, JobClass::Simple)
        };
        let id = open_as(&mut a, Policy::Nres, w, room(1, 1, 3000), &["h1"], now);
        // h1 passed it on to h2: h2 is awaited too.
        let forwarded = ["h2".to_string()];
        assert!(a
            .bid("h1", id, room(1, 0, 2000), &forwarded)
            .expect("h1")
            .is_none());
        let d = a
            .bid("h2", id, room(1, 0, 1000), &[])
            .expect("h2")
            .expect("decided");
        assert_eq!(d.asked, 2);
        // h0 has no idle processor; h2 is the tightest that holds 500 MB.
        assert_eq!(d.chosen, Some(vec![("h2".to_string(), 1)]));
    }

    #[test]
    fn seed_004s_trigger_keeps_a_job_that_fits_an_idle_host_and_looks_further_when_busy_or_short() {
        let w = |vps, mb| Work {
            memory_mb: Some(mb),
            ..work(vps, JobClass::Group)
        };
        // Two idle processors, 4000 MB: a burst of two stays, three look.
        assert!(!triggers(&w(2, 1000), &room(2, 0, 4000)));
        assert!(triggers(&w(3, 1000), &room(2, 0, 4000)));
        // Half busy: the line is at one.
        assert!(!triggers(&w(1, 1000), &room(2, 1, 4000)));
        // Too little memory: it looks whatever the burst.
        assert!(triggers(&w(1, 5000), &room(2, 0, 4000)));
        // Every processor busy: it looks.
        assert!(triggers(&w(1, 10), &room(2, 2, 4000)));
    }

    #[test]
    fn under_nres_a_bid_that_comes_before_the_neighbour_names_its_host_is_kept() {
        let now = Instant::now();
        let mut a = Auctions::default();
        let w = work(1, JobClass::Simple);
        let id = open_as(&mut a, Policy::Nres, w, room(1, 1, 3000), &["h1"], now);
        // h2, reached through h1, answers first.
        assert!(a
            .bid("h2", id, room(1, 0, 1000), &[])
            .expect("h2")
            .is_none());
        let forwarded = ["h2".to_string()];
        let d = a
            .bid("h1", id, room(1, 0, 2000), &forwarded)
            .expect("h1")
            .expect("decided: h2's bid was in already");
        assert!(d.silent.is_empty(), "{d:?}");
        assert_eq!(d.chosen, Some(vec![("h2".to_string(), 1)]));
    }

    #[test]
    fn seed_002s_simple_programs_and_groups_within_the_task_threshold_ask_for_no_bids() {
        let simple = work(1, JobClass::Simple);
        // One processor: three VPs with the new one is 3x, within; four is not.
        assert!(stays_without_bids(
            &simple,
            &own_bid(&simple, 1, 1.0, 2, None, 1.0)
        ));
        assert!(!stays_without_bids(
            &simple,
            &own_bid(&simple, 1, 1.0, 3, None, 1.0)
        ));
        let group = work(4, JobClass::Group);
        assert!(!stays_without_bids(
            &group,
            &own_bid(&group, 1, 1.0, 0, None, 1.0)
        ));
        assert!(stays_without_bids(
            &group,
            &own_bid(&group, 2, 1.0, 0, None, 1.0)
        ));
        let cluster = work(2, JobClass::Cluster);
        assert!(!stays_without_bids(
            &cluster,
            &own_bid(&cluster, 8, 1.0, 0, None, 1.0)
        ));
        // No processor offered (the owner is back): it asks.
        assert!(!stays_without_bids(
            &simple,
            &own_bid(&simple, 0, 1.0, 0, None, 1.0)
        ));
    }
}
