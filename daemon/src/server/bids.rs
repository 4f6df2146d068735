//! Seed 002's negotiation on the wire (`migd --placement bidding`): a
//! `mig spawn` arriving here waits while this daemon asks every other host
//! for a bid (`Bidding::Ask` on the data links), answers other daemons'
//! requests with its own bid, made from the VPs it runs, and, once every
//! bid is in or the wait (`bid_wait_ms`) is over, passes the spawn on to
//! the master with the hosts the bids chose (`SpawnSpec::bid_hosts`). The
//! master stays the directory of where VPs are and the gang scheduler's
//! home: it places the job on those hosts' processors, or chooses itself
//! when they cannot take it any more. What does not live here: the
//! decision (`balance::auction`).

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
        if self.cfg.balance() != Some(Policy::Bidding) || self.halting.is_some() {
            return Some(Request::Spawn(spec));
        }
        let work = Work {
            vps: spec.n,
            class: spec.job_class(),
            memory_mb: spec.memory_mb,
            io: spec.io.map_or(0.0, |c| c.share()),
        };
        let me = self.facts.name.clone();
        let own = self.own_bid(&work);
        let mut hosts: Vec<String> = self.net.peers.keys().cloned().collect();
        hosts.sort();
        let what = format!(
            "a spawn of {} ({} VPs, {})",
            spec.program,
            spec.n,
            work.class.name()
        );
        let waiting = Waiting { t, uid, spec };
        match self.bids.open(
            work,
            (me, own),
            hosts,
            Instant::now(),
            self.cfg.bid_wait,
            waiting,
        ) {
            Ok(id) => {
                let asked: Vec<String> = self
                    .net
                    .peers
                    .keys()
                    .filter(|h| **h != self.facts.name)
                    .cloned()
                    .collect();
                log!(
                    "bidding: asking {} hosts for bids for {what} (request {id})",
                    asked.len()
                );
                for host in asked {
                    self.send_to_host(&host, Bidding::Ask { id, work });
                }
            }
            Err(decided) => self.bids_decided(decided),
        }
        None
    }

    /// A message of the negotiation from `host`, on the data link `t` to it.
    pub(super) fn bidding_msg(&mut self, t: Token, host: &str, msg: Bidding) {
        match msg {
            Bidding::Ask { id, work } => {
                if !work.io.is_finite() {
                    return log!("bidding: {host} asked for a bid with an I/O share not a number");
                }
                let bid = self.own_bid(&work);
                self.send_peer(t, Bidding::Bid { id, bid });
            }
            Bidding::Bid { id, bid } => match self.bids.bid(host, id, bid) {
                Ok(Some(decided)) => self.bids_decided(decided),
                Ok(None) => {}
                Err(e) => log!("bidding: a bid from {host} refused: {e}"),
            },
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
            "bidding: {heard} of {} hosts bid for {}{silent}: chose {chose}",
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
        let processors = if self.owner.offered() {
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
