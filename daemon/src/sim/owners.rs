//! Owners in the simulator: when each processor's owner takes it back and
//! when they leave it again, as `processor_exit` / `new_processor` events
//! for the scheduler.
//!
//! What lives here: the models (`none`; `synthetic:BUSY/IDLE`, each owner
//! away for exponentially distributed idle periods of mean IDLE seconds and
//! back for busy periods of mean BUSY, from a seeded generator so a replay
//! is repeatable; an availability file of `TIME PROCESSOR leave|return`
//! lines) and the time-ordered stream of changes. What does not: what the
//! scheduler does with them (`gang`). Pure.

use super::rng::SplitMix;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// One owner change.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Change {
    /// When (seconds, trace time).
    pub t: f64,
    /// Which processor (index).
    pub processor: usize,
    /// The owner takes it back (true) or leaves it (false).
    pub leaves: bool,
}

/// How owners come and go.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Model {
    /// Never: every processor is always available.
    #[default]
    None,
    /// Alternating exponential periods: available (owner idle, mean
    /// `idle`), then taken back (owner busy, mean `busy`).
    Synthetic {
        /// Mean busy period, seconds.
        busy: f64,
        /// Mean idle period, seconds.
        idle: f64,
        /// Generator seed.
        seed: u64,
    },
    /// Exactly these changes (an availability file).
    Schedule(Vec<Change>),
}

impl Model {
    /// `none` or `synthetic:BUSY/IDLE` (mean seconds).
    pub fn parse(spec: &str) -> Result<Model, String> {
        if spec == "none" {
            return Ok(Model::None);
        }
        let bad = || {
            format!("owner model {spec:?}: expected none or synthetic:BUSY/IDLE (mean seconds, e.g. synthetic:600/3600)")
        };
        let (busy, idle) = spec
            .strip_prefix("synthetic:")
            .and_then(|r| r.split_once('/'))
            .ok_or_else(bad)?;
        let num = |s: &str| {
            s.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v > 0.0)
                .ok_or_else(bad)
        };
        Ok(Model::Synthetic {
            busy: num(busy)?,
            idle: num(idle)?,
            seed: 1,
        })
    }

    /// An availability file: `TIME PROCESSOR leave|return` per line, `#`
    /// comments; any other line is an error naming it.
    pub fn availability(text: &str, processors: usize) -> Result<Model, String> {
        let mut out = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let f: Vec<&str> = line.split_whitespace().collect();
            let bad = |why: &str| format!("availability line {}: {why}: {line:?}", n + 1);
            let [t, p, what] = f[..] else {
                return Err(bad("expected TIME PROCESSOR leave|return"));
            };
            let t: f64 = t
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| bad("bad time"))?;
            let processor: usize = p
                .parse()
                .ok()
                .filter(|&p| p < processors)
                .ok_or_else(|| bad(&format!("no processor {p} (0..{processors})")))?;
            let leaves = match what {
                "leave" => true,
                "return" => false,
                _ => return Err(bad("expected leave or return")),
            };
            out.push(Change {
                t,
                processor,
                leaves,
            });
        }
        out.sort_by(|a, b| a.t.total_cmp(&b.t));
        Ok(Model::Schedule(out))
    }

    /// The changes for `n` processors from `t0` on, in time order. A
    /// synthetic model stops at `until`: every processor still taken back
    /// is left again then and the stream ends (owners act while the trace
    /// submits jobs; its tail runs on the whole machine, so every policy
    /// finishes). An availability file is followed exactly.
    pub fn changes(&self, n: usize, t0: f64, until: f64) -> Changes {
        let until = match self {
            Model::Synthetic { .. } => until,
            _ => f64::INFINITY,
        };
        Changes {
            inner: self.source(n, t0),
            until,
            away: vec![false; n],
            draining: 0,
        }
    }

    fn source(&self, n: usize, t0: f64) -> Inner {
        match self {
            Model::None => Inner::Fixed(Vec::new().into_iter()),
            Model::Schedule(v) => Inner::Fixed(v.clone().into_iter()),
            Model::Synthetic { busy, idle, seed } => {
                let mut rng = SplitMix::new(*seed);
                let heap = (0..n)
                    .map(|p| Next {
                        t: t0 + rng.exp(*idle),
                        processor: p,
                        leaves: true,
                    })
                    .collect();
                Inner::Synthetic {
                    heap,
                    rng,
                    busy: *busy,
                    idle: *idle,
                }
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Next {
    t: f64,
    processor: usize,
    leaves: bool,
}

impl Eq for Next {}

impl Ord for Next {
    /// Earliest first (a max-heap of reversed order), ties by processor.
    fn cmp(&self, o: &Self) -> Ordering {
        o.t.total_cmp(&self.t)
            .then(o.processor.cmp(&self.processor))
    }
}

impl PartialOrd for Next {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

/// The stream of owner changes (see `Model::changes`).
#[derive(Debug)]
pub struct Changes {
    inner: Inner,
    until: f64,
    /// Processors taken back now.
    away: Vec<bool>,
    /// Past the horizon: the next processor to give back.
    draining: usize,
}

#[derive(Debug)]
enum Inner {
    /// A given list.
    Fixed(std::vec::IntoIter<Change>),
    /// Drawn as it goes: each processor's next change, the generator, the
    /// mean busy and idle periods.
    Synthetic {
        heap: BinaryHeap<Next>,
        rng: SplitMix,
        busy: f64,
        idle: f64,
    },
}

impl Inner {
    fn peek(&self) -> Option<f64> {
        match self {
            Inner::Fixed(it) => it.as_slice().first().map(|c| c.t),
            Inner::Synthetic { heap, .. } => heap.peek().map(|n| n.t),
        }
    }

    fn next(&mut self) -> Option<Change> {
        match self {
            Inner::Fixed(it) => it.next(),
            Inner::Synthetic {
                heap,
                rng,
                busy,
                idle,
            } => {
                let n = heap.pop()?;
                let period = if n.leaves { *busy } else { *idle };
                heap.push(Next {
                    t: n.t + rng.exp(period),
                    processor: n.processor,
                    leaves: !n.leaves,
                });
                Some(Change {
                    t: n.t,
                    processor: n.processor,
                    leaves: n.leaves,
                })
            }
        }
    }
}

impl Changes {
    /// When the next change is, if any.
    pub fn peek(&self) -> Option<f64> {
        match self.inner.peek() {
            Some(t) if t <= self.until => Some(t),
            _ => self.away[self.draining.min(self.away.len())..]
                .iter()
                .any(|&a| a)
                .then_some(self.until),
        }
    }
}

impl Iterator for Changes {
    type Item = Change;
    fn next(&mut self) -> Option<Change> {
        if self.inner.peek().is_some_and(|t| t <= self.until) {
            let c = self.inner.next()?;
            if let Some(a) = self.away.get_mut(c.processor) {
                *a = c.leaves;
            }
            return Some(c);
        }
        // Past the horizon: give back what is still taken, then stop.
        while self.draining < self.away.len() {
            let p = self.draining;
            self.draining += 1;
            if std::mem::take(&mut self.away[p]) {
                return Some(Change {
                    t: self.until,
                    processor: p,
                    leaves: false,
                });
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_bad_ones_say_what_is_expected() {
        assert_eq!(Model::parse("none"), Ok(Model::None));
        assert!(matches!(
            Model::parse("synthetic:600/3600"),
            Ok(Model::Synthetic { busy, idle, .. }) if busy == 600.0 && idle == 3600.0
        ));
        for bad in ["synthetic:0/5", "synthetic:5", "poisson", "synthetic:a/b"] {
            assert!(
                Model::parse(bad)
                    .unwrap_err()
                    .contains("synthetic:BUSY/IDLE"),
                "{bad}"
            );
        }
    }

    #[test]
    fn availability_files_are_checked_line_by_line() {
        let m = Model::availability("# t p what\n60 1 return\n10 1 leave\n", 2).unwrap();
        let c: Vec<Change> = m.changes(2, 0.0, f64::INFINITY).collect();
        assert_eq!(c.len(), 2);
        assert!(c[0].leaves && c[0].t == 10.0 && !c[1].leaves);
        let e = Model::availability("10 5 leave\n", 2).unwrap_err();
        assert!(e.contains("line 1") && e.contains("no processor 5"), "{e}");
        let e = Model::availability("10 0 leave\nx\n", 2).unwrap_err();
        assert!(e.contains("line 2"), "{e}");
    }

    #[test]
    fn synthetic_owners_alternate_in_time_order_and_repeat() {
        let m = Model::parse("synthetic:10/40").unwrap();
        let a: Vec<Change> = m.changes(4, 100.0, f64::INFINITY).take(400).collect();
        assert!(a.windows(2).all(|w| w[0].t <= w[1].t));
        for p in 0..4 {
            let mine: Vec<&Change> = a.iter().filter(|c| c.processor == p).collect();
            assert!(mine[0].leaves && mine[0].t >= 100.0);
            assert!(mine.windows(2).all(|w| w[0].leaves != w[1].leaves));
        }
        // Over many periods, owners are busy about busy / (busy + idle).
        let mut busy = 0.0;
        let mut since = [100.0; 4];
        for c in &a {
            if !c.leaves {
                busy += c.t - since[c.processor];
            }
            since[c.processor] = c.t;
        }
        let span: f64 = since.iter().map(|s| s - 100.0).sum();
        let share = busy / span;
        assert!((0.1..0.3).contains(&share), "busy share {share}");
        let b: Vec<Change> = m.changes(4, 100.0, f64::INFINITY).take(400).collect();
        assert_eq!(a, b, "the same model gives the same changes");
    }

    #[test]
    fn past_the_horizon_every_processor_comes_back_and_the_stream_ends() {
        let m = Model::parse("synthetic:50/50").unwrap();
        let c: Vec<Change> = m.changes(8, 0.0, 1000.0).collect();
        assert!(c.iter().all(|c| c.t <= 1000.0));
        let mut away = [false; 8];
        for c in &c {
            away[c.processor] = c.leaves;
        }
        assert_eq!(away, [false; 8], "all back at the end");
        assert!(c.len() > 20, "owners came and went before the horizon");
        let f = Model::availability("10 0 leave\n2000 0 return\n", 2).unwrap();
        let c: Vec<Change> = f.changes(2, 0.0, 100.0).collect();
        assert_eq!(c.len(), 2);
        assert!(
            c[0].leaves && !c[1].leaves && c[1].t == 2000.0,
            "a file is exact"
        );
    }
}
