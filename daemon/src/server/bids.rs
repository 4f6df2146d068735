//! A new job's placement asked of the daemons, on the wire: under
//! `migd --placement bidding` (seed 002) a `mig spawn` arriving here waits
//! while this daemon asks every other host for a bid (`Bidding::Ask` on
//! the data links); under `nres` (seed 004) it stays here when it fits
//! within the trigger line, else this daemon asks its neighbours
//! (`neighbours` of them, the next hosts by name, round the ring), which
//! pass the request on to theirs once and say so. Every daemon answers
//! requests with its own bid, made from the VPs it runs. Once every bid
//! awaited is in, or the wait (`bid_wait_ms`) is over, the spawn goes on to
//! the master with the hosts chosen (`SpawnSpec::bid_hosts`). The master
//! stays the directory of where VPs are and the gang scheduler's home: it
//! places the job on those hosts' processors, or chooses itself when they
//! cannot take it any more. What does not live here: the decisions
//! (`balance::auction`).

use std::time::Instant;

use libmig::msg::{Bid, Bidding, Request, SpawnSpec, Work};
use mio::Token;

use super::Daemon;
use crate::balance::auction::{self, Decided};
use crate::balance::choice::Policy;
use crate::log;

/// A spawn waiting for its bids: the control connection it came on, its
/// user, the spawn.
#[derive(Debug)]
pub(super) struct Waiting {
    t: Token,
    uid: u32,
    spec: SpawnSpec,
}

/// This daemon's open requests for bids.
pub(super) type Bids = auction::Auctions<Waiting>;

impl Daemon {
    /// A spawn by `uid` on control connection `t`, under the bidding
    /// placement: ask every other host for a bid, unless there is none.
    /// Returns the request when bids are not asked for.
    pub(super) fn ask_for_bids(&mut self, t: Token, uid: u32, req: Request) -> Option<Request> {
        let Request::Spawn(mut spec) = req else {
            return Some(req);
        };
        // The hosts are the bids' to choose, never the request's.
        spec.bid_hosts.clear();
        let policy = match self.cfg.balance() {
            Some(p @ (Policy::Bidding | Policy::Nres)) if self.halting.is_none() => p,
            _ => return Some(Request::Spawn(spec)),
        };
        let work = Work {
            vps: spec.n,
            class: spec.job_class(),
            memory_mb: spec.memory_mb,
            io: spec.io.map_or(0.0, |c| c.share()),
        };
        let me = self.facts.name.clone();
        let own = self.own_bid(&work);
        let what = format!(
            "a spawn of {} ({} VPs, {})",
            spec.program,
            spec.n,
            work.class.name()
        );
        let (asked, hops) = match policy {
            Policy::Nres if !auction::triggers(&work, &own) => {
                log!("nres: {what} fits here within the trigger line: it stays");
                spec.bid_hosts = vec![(me, own.processors.max(1))];
                return Some(Request::Spawn(spec));
            }
            Policy::Nres => (self.neighbours(), 1),
            _ if auction::stays_without_bids(&work, &own) => {
                log!("bidding: {what} is within the task threshold here: it stays");
                spec.bid_hosts = vec![(me, own.processors.max(1))];
                return Some(Request::Spawn(spec));
            }
            _ => {
                let mut all: Vec<String> = self
                    .net
                    .peers
                    .keys()
                    .filter(|h| **h != me)
                    .cloned()
                    .collect();
                all.sort();
                (all, 0)
            }
        };
        if asked.is_empty() {
            // No other host known yet (this one just joined): the master,
            // which knows them all, chooses.
            log!(
                "{}: no other host known here for {what}: the master chooses",
                policy.name()
            );
            return Some(Request::Spawn(spec));
        }
        let waiting = Waiting { t, uid, spec };
        let opened = self.bids.open(
            policy,
            work,
            (me.clone(), own),
            asked.clone(),
            Instant::now(),
            self.cfg.bid_wait,
            waiting,
        );
        match opened {
            Ok(id) => {
                log!(
                    "{}: asking {} for {what} (request {id})",
                    policy.name(),
                    asked.join(" ")
                );
                for host in asked {
                    let ask = Bidding::Ask {
                        id,
                        origin: me.clone(),
                        hops,
                        work,
                    };
                    self.send_bidding(&host, ask);
                }
            }
            Err(decided) => self.bids_decided(decided),
        }
        None
    }

    /// A request for bids or a bid, to `host`, counted for `--metrics`.
    fn send_bidding(&mut self, host: &str, msg: Bidding) {
        self.metrics.placement_sent(match msg {
            Bidding::Ask { .. } => "ask",
            Bidding::Bid { .. } => "bid",
        });
        self.send_to_host(host, msg);
    }

    /// This host's neighbours for seed 004's search.
    fn neighbours(&self) -> Vec<String> {
        self.neighbours_of(&self.facts.name)
    }

    /// Host `host`'s neighbours: the next `neighbours` hosts after it by
    /// name, round the ring (every daemon draws the same ring).
    fn neighbours_of(&self, host: &str) -> Vec<String> {
        let mut ring: Vec<&str> = self.net.peers.keys().map(String::as_str).collect();
        for h in [self.facts.name.as_str(), host] {
            if !ring.contains(&h) {
                ring.push(h);
            }
        }
        ring.sort_unstable();
        let at = ring.iter().position(|h| *h == host).unwrap_or(0);
        (1..ring.len())
            .map(|k| ring[(at + k) % ring.len()].to_string())
            .take(self.cfg.neighbours as usize)
            .collect()
    }

    /// A message of the negotiation from `host`.
    pub(super) fn bidding_msg(&mut self, host: &str, msg: Bidding) {
        match msg {
            Bidding::Ask {
                id,
                origin,
                hops,
                work,
            } => {
                let members =
                    self.net.peers.contains_key(host) && self.net.peers.contains_key(&origin);
                if !work.io.is_finite() || !members {
                    return log!(
                        "bidding: a request from {host} for {origin} refused: not a member, \
                         or its I/O share not a number"
                    );
                }
                // An honest asker passes it on once at most.
                let hops = hops.min(1);
                // Passed on once more to this host's neighbours: not back,
                // nor to those the origin asked itself or another of its
                // neighbours before this one in the ring passes it to.
                let mut forwarded = Vec::new();
                if hops > 0 {
                    let asked = self.neighbours_of(&origin);
                    let me = self.facts.name.clone();
                    let before = asked.iter().take_while(|h| **h != me);
                    let reached: Vec<String> = before.flat_map(|h| self.neighbours_of(h)).collect();
                    for n in self.neighbours() {
                        let new = !asked.contains(&n) && !reached.contains(&n);
                        if n != origin && n != host && new {
                            let ask = Bidding::Ask {
                                id,
                                origin: origin.clone(),
                                hops: hops - 1,
                                work,
                            };
                            self.send_bidding(&n, ask);
                            forwarded.push(n);
                        }
                    }
                }
                let bid = self.own_bid(&work);
                self.send_bidding(&origin, Bidding::Bid { id, bid, forwarded });
            }
            Bidding::Bid { id, bid, forwarded } => {
                if !self.net.peers.contains_key(host) {
                    return log!("bidding: a bid from {host} refused: not a member");
                }
                let members: Vec<String> = forwarded
                    .into_iter()
                    .filter(|h| self.net.peers.contains_key(h))
                    .collect();
                match self.bids.bid(host, id, bid, &members) {
                    Ok(Some(decided)) => self.bids_decided(decided),
                    Ok(None) => {}
                    Err(e) => log!("bidding: a bid from {host} refused: {e}"),
                }
            }
        }
    }

    /// Requests for bids whose wait is over, decided on the bids in.
    pub(super) fn bids_due(&mut self) {
        if self.bids.due().is_some_and(|t| t <= Instant::now()) {
            for decided in self.bids.expire(Instant::now()) {
                self.bids_decided(decided);
            }
        }
    }

    /// The bids chose: the spawn goes on to the master with their choice
    /// (none: the master chooses), unless its `mig` went away meanwhile.
    fn bids_decided(&mut self, d: Decided<Waiting>) {
        let Waiting { t, uid, mut spec } = d.kept;
        if self.halting.is_some() {
            let message = format!(
                "{} is halting: {} not started",
                self.facts.name, spec.program
            );
            return self.send_resp(t, &libmig::msg::Response::Error { message });
        }
        let silent = if d.silent.is_empty() {
            String::new()
        } else {
            format!(" (no bid in time from {})", d.silent.join(" "))
        };
        let heard = d.asked - d.silent.len();
        let chose = match &d.chosen {
            Some(hosts) => hosts
                .iter()
                .map(|(h, n)| format!("{h}x{n}"))
                .collect::<Vec<_>>()
                .join(" "),
            None => "no host (the master chooses)".into(),
        };
        log!(
            "{}: {heard} of {} hosts bid for {}{silent}: chose {chose}",
            d.policy.name(),
            d.asked,
            spec.program
        );
        if !self.net.conns.contains_key(&t) {
            return log!(
                "bidding: the mig that asked for {} went away before the bids were in: not started",
                spec.program
            );
        }
        spec.bid_hosts = d.chosen.unwrap_or_default();
        self.pass_on(t, uid, Request::Spawn(spec));
    }

    /// This host's bid for `work`, from what it runs now: its processors
    /// while its owner is away, the VPs living here, the memory and I/O
    /// they leave free.
    fn own_bid(&self, work: &Work) -> Bid {
        let live = self.local.vps.by_tid.values().filter(|v| v.exit.is_none());
        let (mut vps, mut memory_mb, mut io) = (0u32, 0u64, 0.0f64);
        for v in live {
            vps = vps.saturating_add(1);
            if let Some(s) = &v.start {
                memory_mb = memory_mb.saturating_add(s.memory_mb.unwrap_or(0));
                io += s.io.map_or(0.0, |c| c.share());
            }
        }
        let processors = if self.owner.offered() && self.halting.is_none() {
            self.facts.processors
        } else {
            0
        };
        let free_memory_mb = libmig::msg::memory_for_new_vp(
            self.facts.memory_mb,
            crate::facts::free_memory_mb(),
            memory_mb,
        );
        auction::own_bid(
            work,
            processors,
            self.facts.capacity,
            vps,
            free_memory_mb,
            (1.0 - io).clamp(0.0, 1.0),
        )
    }
}
