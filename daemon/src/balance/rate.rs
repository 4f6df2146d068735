//! Rate-of-Change as one daemon runs it (`migd --placement roc`, seed
//! 003): its own load sampled at an interval that adapts, its own request
//! for work when the rate says it will run dry, its own tables of sources
//! and sinks filled from what the messages it sees say of their senders,
//! and its answer to a request that reaches it: its oldest tasks when it
//! is a source, else the request passed on to the first source it knows
//! of while the TTL lasts.
//!
//! Loads are in tasks a processor: a host's movable tasks (VPs of
//! independent or one-VP jobs that can be moved) over its processors, with
//! the paper's thresholds as `THRESHOLDS` sets them. A host that knows of
//! no source asks the hosts it knows in turn, one a request, which is how
//! its tables fill at first.
//!
//! Pure: no I/O, no clock (times are seconds passed in). What does not
//! live here: the paper's rules (`roc`), the messages' travel
//! (`server::rate`), carrying a move out (the master).

use super::roc::{answer, Answer, LoadRequest, Roc, Sampling, Tables, Thresholds};

/// Thresholds in tasks per processor: below 1 (a processor idle) a host
/// always asks; a host with every processor busy asks only when its rate
/// of change says it will run dry before work could arrive (seed 003's
/// rule: at CT 1.5 a fully busy host asked at every sample); at 2 it
/// gives. At or below LT it is a sink in others' eyes.
pub const THRESHOLDS: Thresholds = Thresholds {
    critical: 1.0,
    low: 1.0,
    high: 2.0,
};

/// The first guess of the time a move takes (s), before one was measured.
pub const FIRST_DELAY_S: f64 = 1.0;

/// How many hosts a request may pass through.
pub const TTL: u32 = 4;

/// The sampling interval's bounds (s).
pub const SAMPLING: Sampling = Sampling {
    shortest: 0.5,
    longest: 4.0,
};

/// How long the asker waits for an answer and the work a source said it
/// sent (s) before it takes the request as unfulfilled.
pub const ARRIVAL_WAIT_S: f64 = 30.0;

/// A request to send: to which host, with what.
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    /// The host to send it to.
    pub to: String,
    /// Its number.
    pub id: u64,
    /// Tasks asked for.
    pub amount: u32,
    /// Passes left.
    pub ttl: u32,
}

/// What to do with a request that reached this host.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// Give these tasks (by index into the tasks passed in) to the asker,
    /// and say so.
    Give(Vec<usize>),
    /// Pass it on to this host, one pass fewer.
    PassOn(String, u32),
    /// Tell the asker nobody could help.
    Nothing,
}

/// One daemon's Rate-of-Change.
#[derive(Debug)]
pub struct Pe {
    roc: Roc,
    tables: Tables,
    /// Host names by their number in `tables`.
    names: Vec<String>,
    interval: f64,
    next_sample: f64,
    last_sample: Option<f64>,
    /// Its request out: number, when asked, and whether work is on its way.
    out: Option<(u64, f64, bool)>,
    next_id: u64,
    /// Whom it asks next when it knows of no source.
    turn: usize,
}

impl Default for Pe {
    fn default() -> Self {
        Pe {
            roc: Roc::new(THRESHOLDS, FIRST_DELAY_S),
            tables: Tables::default(),
            names: Vec::new(),
            interval: SAMPLING.shortest,
            next_sample: 0.0,
            last_sample: None,
            out: None,
            next_id: 1,
            turn: 0,
        }
    }
}

impl Pe {
    fn number(&mut self, host: &str) -> usize {
        match self.names.iter().position(|n| n == host) {
            Some(i) => i,
            None => {
                self.names.push(host.to_string());
                self.names.len() - 1
            }
        }
    }

    /// When it samples next (s).
    pub fn due(&self) -> f64 {
        self.next_sample.min(
            self.out
                .map_or(f64::INFINITY, |(_, at, _)| at + ARRIVAL_WAIT_S),
        )
    }

    /// A message from `host` said its load is `load`.
    pub fn heard(&mut self, host: &str, load: f64) {
        if load.is_finite() && load >= 0.0 {
            let i = self.number(host);
            self.tables.heard(i, load, &THRESHOLDS);
        }
    }

    /// The sources it knows of, busiest first.
    pub fn sources(&self) -> Vec<String> {
        self.tables
            .sources()
            .into_iter()
            .filter_map(|i| self.names.get(i).cloned())
            .collect()
    }

    /// A sample at `now` of its own `load`: the request to send, if the
    /// rate calls for one. `others` are the hosts it may ask when it knows
    /// of no source.
    pub fn sample(&mut self, now: f64, load: f64, others: &[String]) -> Option<Ask> {
        // No answer, or no work, within the wait: over.
        if let Some((_, at, _)) = self.out {
            if now - at >= ARRIVAL_WAIT_S {
                self.out = None;
                self.roc.unfulfilled();
            }
        }
        if now < self.next_sample {
            return None;
        }
        let dt = self
            .last_sample
            .map_or(SAMPLING.shortest, |t| (now - t).max(1e-3));
        let dl = self.roc.last_load().map_or(0.0, |p| load - p);
        self.interval = SAMPLING.next(load, dl, dt, self.roc.network_delay(), &THRESHOLDS);
        self.last_sample = Some(now);
        self.next_sample = now + self.interval;
        let amount = self.roc.sample(load, dt)?;
        // The first source still a member (one gone is never asked again).
        let known = self.sources().into_iter().find(|s| others.contains(s));
        let to = known.or_else(|| {
            let n = others.len();
            (n > 0).then(|| {
                self.turn = (self.turn + 1) % n;
                others[self.turn].clone()
            })
        });
        let Some(to) = to else {
            self.roc.unfulfilled();
            return None;
        };
        let id = self.next_id;
        self.next_id += 1;
        self.out = Some((id, now, false));
        Some(Ask {
            to,
            id,
            amount,
            ttl: TTL,
        })
    }

    /// Request `id` of `asker` for `amount` tasks, with `ttl` passes left,
    /// reached this host, whose movable tasks have used `cpu` seconds each
    /// on `processors`: what to do.
    pub fn request(
        &mut self,
        asker: &str,
        amount: u32,
        ttl: u32,
        cpu: &[f64],
        processors: u32,
    ) -> Reply {
        let from = self.number(asker);
        self.tables.asked_by(from);
        let high = THRESHOLDS.high * f64::from(processors.max(1));
        let req = LoadRequest {
            from,
            amount: amount.min(1024),
            ttl: ttl.min(TTL),
        };
        match answer(cpu, high, &self.tables.sources(), req) {
            Answer::Send(picked) => Reply::Give(picked),
            Answer::Forward(next, r) => match self.names.get(next) {
                Some(h) => Reply::PassOn(h.clone(), r.ttl),
                None => Reply::Nothing,
            },
            Answer::Unfulfilled => Reply::Nothing,
        }
    }

    /// The answer to its request `id`: `sent` tasks on their way (0:
    /// nobody could help, it may ask again at its next sample).
    pub fn answered(&mut self, id: u64, sent: u32) {
        match self.out {
            Some((out, at, false)) if out == id => {
                if sent == 0 {
                    self.out = None;
                    self.roc.unfulfilled();
                } else {
                    self.out = Some((out, at, true));
                }
            }
            _ => {}
        }
    }

    /// A task moved in at `now`: the work it asked for came (the network
    /// delay learns how long it took).
    pub fn arrived(&mut self, now: f64) {
        if let Some((_, at, true)) = self.out {
            self.out = None;
            self.roc.received(now - at);
        }
    }

    /// Is a request of its own out?
    pub fn asking(&self) -> bool {
        self.out.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn others(h: &[&str]) -> Vec<String> {
        h.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn an_idle_host_asks_in_turn_until_it_hears_of_a_source_then_asks_it() {
        let mut pe = Pe::default();
        let ask = pe.sample(0.0, 0.0, &others(&["a", "b"])).expect("asks");
        assert_eq!((ask.amount, ask.ttl), (1, TTL));
        // Nobody could help: it asks again at its next sample, someone else.
        pe.answered(ask.id, 0);
        assert!(!pe.asking());
        let again = pe
            .sample(pe.due(), 0.0, &others(&["a", "b"]))
            .expect("asks again");
        assert_ne!(again.to, ask.to);
        pe.answered(again.id, 0);
        // It hears that b is a source: b is asked from then on.
        pe.heard("b", 4.0);
        let third = pe
            .sample(pe.due(), 0.0, &others(&["a", "b"]))
            .expect("asks b");
        assert_eq!(third.to, "b");
        // Work on its way: no new request until it arrives.
        pe.answered(third.id, 1);
        assert!(pe.sample(pe.due(), 0.0, &others(&["a", "b"])).is_none());
        pe.arrived(pe.due());
        assert!(!pe.asking());
    }

    #[test]
    fn a_source_gives_its_oldest_and_a_neutral_host_passes_the_request_on() {
        let mut src = Pe::default();
        // Four tasks on one processor: two over HT.
        let reply = src.request("sink", 1, TTL, &[1.0, 9.0, 3.0, 2.0], 1);
        assert_eq!(reply, Reply::Give(vec![1]));
        let mut neutral = Pe::default();
        neutral.heard("src", 4.0);
        let reply = neutral.request("sink", 1, TTL, &[1.0], 1);
        assert_eq!(reply, Reply::PassOn("src".into(), TTL - 1));
        // Never back to the asker, nor on once the TTL is spent.
        neutral.heard("sink", 5.0);
        assert_eq!(neutral.request("src", 1, 0, &[1.0], 1), Reply::Nothing);
    }

    #[test]
    fn work_promised_that_never_comes_frees_the_asker_to_ask_again() {
        let mut pe = Pe::default();
        let ask = pe.sample(0.0, 0.0, &others(&["a"])).expect("asks");
        pe.answered(ask.id, 2);
        assert!(pe.due() <= ARRIVAL_WAIT_S);
        assert!(pe
            .sample(ARRIVAL_WAIT_S - 1.0, 0.0, &others(&["a"]))
            .is_none());
        let again = pe.sample(ARRIVAL_WAIT_S + 1.0, 0.0, &others(&["a"]));
        assert!(again.is_some());
    }

    #[test]
    fn loads_that_are_not_numbers_are_not_heard_and_answers_to_other_requests_ignored() {
        let mut pe = Pe::default();
        pe.heard("x", f64::NAN);
        pe.heard("y", -3.0);
        pe.heard("z", f64::INFINITY);
        assert!(pe.sources().is_empty());
        let ask = pe.sample(0.0, 0.0, &others(&["a"])).expect("asks");
        pe.answered(ask.id + 7, 5);
        assert!(pe.asking());
        pe.arrived(1.0);
        assert!(pe.asking(), "no work was on its way yet");
    }

    #[test]
    fn a_busy_host_asks_nothing() {
        let mut pe = Pe::default();
        for t in 0..10 {
            assert!(pe
                .sample(f64::from(t) * 5.0, 2.0, &others(&["a"]))
                .is_none());
        }
    }
}
