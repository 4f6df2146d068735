//! Seed 003's Rate-of-Change on the wire (`migd --placement roc`): this
//! daemon samples its own load (its movable tasks over its processors) at
//! the interval its rate calls for, asks a source for work when it would
//! run dry before work could come (`Rate::Ask` on the data links),
//! answers others' requests from its own tasks or passes them on, and
//! tells the master which VPs it gives away (`ToMaster::GiveAway`), which
//! the master moves. Every message says its sender's load: that is how
//! this daemon's tables of sources and sinks fill. What does not live
//! here: the decisions (`balance::rate`).

use std::time::Instant;

use libmig::msg::{Rate, ToMaster};

use super::Daemon;
use crate::balance::choice::Policy;
use crate::balance::rate::{Pe, Reply};
use crate::log;

/// This daemon's Rate-of-Change: its state, and the instant its clock
/// counts from.
#[derive(Debug)]
pub(super) struct Rating {
    epoch: Instant,
    pe: Pe,
}

impl Default for Rating {
    fn default() -> Self {
        Rating {
            epoch: Instant::now(),
            pe: Pe::default(),
        }
    }
}

impl Rating {
    fn now(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    /// When this daemon samples next.
    pub(super) fn due(&self) -> Instant {
        let s = self.pe.due().clamp(0.0, 1e6);
        self.epoch + std::time::Duration::from_secs_f64(s)
    }
}

impl Daemon {
    fn rating(&self) -> bool {
        self.cfg.balance() == Some(Policy::Roc) && self.halting.is_none()
    }

    /// Its movable tasks now (VPs of independent or one-VP jobs that can
    /// be moved and are not moving), with the CPU seconds each has used,
    /// and its load: those tasks a processor offered (none while its owner
    /// is back).
    fn movable_tasks(&self) -> (Vec<(libmig::msg::Tid, f64)>, f64) {
        let tasks: Vec<(libmig::msg::Tid, f64)> = self
            .local
            .vps
            .by_tid
            .iter()
            .filter(|(tid, v)| {
                v.exit.is_none()
                    && v.movable
                    && v.start
                        .as_ref()
                        .is_some_and(|s| s.independent || s.nvps == 1)
                    && self.moves.get(**tid).is_none()
            })
            .map(|(&tid, v)| (tid, v.cpu_ms().unwrap_or(0) as f64 / 1000.0))
            .collect();
        let processors = if self.owner.offered() {
            self.facts.processors
        } else {
            0
        };
        let load = tasks.len() as f64 / f64::from(processors.max(1));
        (tasks, load)
    }

    /// Sample this host's load when due, and ask for work if the rate
    /// says so.
    pub(super) fn rate_due(&mut self) {
        if !self.rating() || Instant::now() < self.rating.due() {
            return;
        }
        // A host whose owner is back takes no work: it does not sample.
        if !self.owner.offered() {
            return;
        }
        let load = self.movable_tasks().1;
        let mut others: Vec<String> = self
            .net
            .peers
            .keys()
            .filter(|h| **h != self.facts.name)
            .cloned()
            .collect();
        others.sort();
        let now = self.rating.now();
        let Some(ask) = self.rating.pe.sample(now, load, &others) else {
            return;
        };
        log!(
            "rate-of-change: load {load:.2} a processor, asking {} for {} task(s) (request {})",
            ask.to,
            ask.amount,
            ask.id
        );
        let msg = Rate::Ask {
            id: ask.id,
            asker: self.facts.name.clone(),
            amount: ask.amount,
            ttl: ask.ttl,
            load,
        };
        self.send_rate(&ask.to, msg);
    }

    /// A message of Rate-of-Change from `host`.
    pub(super) fn rate_msg(&mut self, host: &str, msg: Rate) {
        if !self.rating() {
            return;
        }
        match msg {
            Rate::Ask {
                id,
                asker,
                amount,
                ttl,
                load,
            } => {
                self.rating.pe.heard(host, load);
                if asker == self.facts.name || !self.net.peers.contains_key(&asker) {
                    return log!(
                        "rate-of-change: a request from {host} for {asker}, not a member: dropped"
                    );
                }
                self.asked_for_work(id, &asker, amount, ttl);
            }
            Rate::Answer { id, sent, load } => {
                self.rating.pe.heard(host, load);
                self.rating.pe.answered(id, sent);
            }
        }
    }

    /// Request `id` of `asker` for `amount` tasks reached this host: give
    /// its oldest, pass the request on, or say nobody could help.
    fn asked_for_work(&mut self, id: u64, asker: &str, amount: u32, ttl: u32) {
        let (tasks, load) = self.movable_tasks();
        let cpu: Vec<f64> = tasks.iter().map(|t| t.1).collect();
        let processors = self.facts.processors;
        let reply = if self.owner.offered() {
            self.rating.pe.request(asker, amount, ttl, &cpu, processors)
        } else {
            Reply::Nothing
        };
        match reply {
            Reply::Give(picked) => {
                let sent = picked.len() as u32;
                for i in picked {
                    if let Some(&(tid, _)) = tasks.get(i) {
                        log!("rate-of-change: giving VP t{tid:x} to {asker}, which asked for work");
                        self.metrics.placement_sent("give_away");
                        self.report(ToMaster::GiveAway {
                            tid,
                            to: asker.to_string(),
                        });
                    }
                }
                let load = (tasks.len() as f64 - f64::from(sent)) / f64::from(processors.max(1));
                self.send_rate(asker, Rate::Answer { id, sent, load });
            }
            Reply::PassOn(next, ttl) => {
                let msg = Rate::Ask {
                    id,
                    asker: asker.to_string(),
                    amount,
                    ttl,
                    load,
                };
                self.send_rate(&next, msg);
            }
            Reply::Nothing => self.send_rate(asker, Rate::Answer { id, sent: 0, load }),
        }
    }

    /// A message of Rate-of-Change, to `host`, counted for `--metrics`.
    fn send_rate(&mut self, host: &str, msg: Rate) {
        self.metrics.placement_sent(match msg {
            Rate::Ask { .. } => "rate_ask",
            Rate::Answer { .. } => "rate_answer",
        });
        self.send_to_host(host, msg);
    }

    /// A VP moved in: the work this host asked for came.
    pub(super) fn work_arrived(&mut self) {
        if self.rating() {
            let now = self.rating.now();
            self.rating.pe.arrived(now);
        }
    }
}
