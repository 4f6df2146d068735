//! Seed 003 (IPG-SaLaD): Rate-of-Change load balancing. A PE does not
//! compare its load with others'; it watches how fast its own load falls
//! and asks for work only when, at that rate, it would run dry before work
//! asked for now could arrive (the network delay `ND`, learnt from its own
//! past requests). Sources (load at or above `HT`) answer with their oldest
//! tasks by CPU time (the likeliest to live long enough to pay for the
//! move); a request goes to the first entry of the source table and is
//! passed on while its TTL lasts.
//!
//! Each PE keeps its own source and sink tables (`Tables`, the paper's
//! Fig. 5), filled from what the messages it sees say of their senders'
//! loads (at or above `HT` a source, at or below `LT` a sink; whoever asks
//! for load is a sink whatever its load), and its own sampling interval
//! (`Sampling`), which adapts.
//!
//! Open points, and what is done here: below the critical threshold a PE
//! asks for enough to reach it (at least one task) when the rate does not
//! call for more; `ND` is learnt as the mean of the last estimate and the
//! delay just measured; amounts are whole tasks (`|PL|` rounded up); the
//! source table is ordered by the load last heard, busiest first (its
//! first entry is the one asked); the paper names what adapts the interval
//! ("the number of load requests received or network traffic") but not
//! how: here a PE whose load is not falling samples half as often each
//! time, up to a longest interval, and one whose load falls samples again
//! no later than it would have to ask to get work before it runs dry
//! (predicted time to idle less `ND`, so a slower network makes it sample
//! sooner), never more often than a shortest interval.

/// The thresholds of a PE, in tasks: critical (below it, always ask), low
/// (a sink at or below it) and high (a source at or above it; never ask).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Thresholds {
    /// Critical threshold `CT`.
    pub critical: f64,
    /// Low threshold `LT`.
    pub low: f64,
    /// High threshold `HT`.
    pub high: f64,
}

/// Where a PE's load puts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// At or above `HT`: may give work.
    Source,
    /// Between the thresholds.
    Neutral,
    /// At or below `LT`.
    Sink,
}

impl Thresholds {
    /// Where `load` puts a PE: a source at or above `HT`, a sink at or
    /// below `LT`, neutral between.
    pub fn state(&self, load: f64) -> State {
        if load >= self.high {
            State::Source
        } else if load <= self.low {
            State::Sink
        } else {
            State::Neutral
        }
    }

    /// Are they usable: finite, `0 <= CT <= LT < HT`?
    pub fn check(&self) -> Result<(), String> {
        let ok = [self.critical, self.low, self.high]
            .iter()
            .all(|x| x.is_finite())
            && 0.0 <= self.critical
            && self.critical <= self.low
            && self.low < self.high;
        if ok {
            Ok(())
        } else {
            Err(format!(
                "thresholds must be finite with 0 <= critical <= low < high (got {}, {}, {})",
                self.critical, self.low, self.high
            ))
        }
    }
}

/// One PE's source and sink tables (the paper's Fig. 5), as the messages
/// it saw left them: each PE in at most one, the source table busiest
/// first (as last heard; ties: the latest heard first).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tables {
    sources: Vec<(usize, f64)>,
    sinks: Vec<usize>,
}

impl Tables {
    /// A message (or the static allocator's mapping) said `pe` holds
    /// `load`: it goes to the table its load puts it in, or out of both.
    pub fn heard(&mut self, pe: usize, load: f64, t: &Thresholds) {
        self.forget(pe);
        match t.state(load) {
            State::Source => {
                let at = self
                    .sources
                    .iter()
                    .position(|&(_, l)| l <= load)
                    .unwrap_or(self.sources.len());
                self.sources.insert(at, (pe, load));
            }
            State::Sink => self.sinks.push(pe),
            State::Neutral => {}
        }
    }

    /// `pe` asked for load: a sink, whatever its load.
    pub fn asked_by(&mut self, pe: usize) {
        self.forget(pe);
        self.sinks.push(pe);
    }

    fn forget(&mut self, pe: usize) {
        self.sources.retain(|&(p, _)| p != pe);
        self.sinks.retain(|&p| p != pe);
    }

    /// The source table, its first entry first.
    pub fn sources(&self) -> Vec<usize> {
        self.sources.iter().map(|&(p, _)| p).collect()
    }

    /// The sink table, the earliest heard first.
    pub fn sinks(&self) -> &[usize] {
        &self.sinks
    }
}

/// How a PE's sampling interval adapts, within `[shortest, longest]`
/// seconds (or time slices).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Sampling {
    /// The shortest interval.
    pub shortest: f64,
    /// The longest interval.
    pub longest: f64,
}

impl Sampling {
    /// The interval after a sample that found `load`, changed by `dl` over
    /// the last interval `dt`, with network delay `nd`: below `CT` the
    /// shortest (it is asking); falling, no longer than it may wait and
    /// still ask in time (`load / |dl| * dt - nd`); otherwise twice the
    /// last. Always within the bounds.
    pub fn next(&self, load: f64, dl: f64, dt: f64, nd: f64, t: &Thresholds) -> f64 {
        let (lo, hi) = (self.shortest.max(f64::MIN_POSITIVE), self.longest);
        let hi = hi.max(lo);
        let want = if load < t.critical {
            lo
        } else if dl < 0.0 {
            (load / -dl * dt - nd).min(2.0 * dt)
        } else {
            2.0 * dt
        };
        if want.is_nan() {
            return lo;
        }
        want.clamp(lo, hi)
    }
}

/// One PE's side of Rate-of-Change: the load it saw last, its estimate of
/// the network delay, and whether a request of its own is out.
#[derive(Debug, Clone, PartialEq)]
pub struct Roc {
    thresholds: Thresholds,
    previous: Option<f64>,
    network_delay: f64,
    pending: bool,
}

impl Roc {
    /// A PE with these thresholds and a first guess of the network delay
    /// (seconds; positive).
    pub fn new(thresholds: Thresholds, network_delay: f64) -> Roc {
        Roc {
            thresholds,
            previous: None,
            network_delay: network_delay.max(f64::MIN_POSITIVE),
            pending: false,
        }
    }

    /// The network delay it now assumes.
    pub fn network_delay(&self) -> f64 {
        self.network_delay
    }

    /// The load it saw at its last sample, if any.
    pub fn last_load(&self) -> Option<f64> {
        self.previous
    }

    /// Is a request of its own still out?
    pub fn pending(&self) -> bool {
        self.pending
    }

    /// The start of a sample interval of `dt` seconds with `load` tasks:
    /// how many tasks to ask for now, if any (then a request is out until
    /// `received` or `unfulfilled`).
    pub fn sample(&mut self, load: f64, dt: f64) -> Option<u32> {
        let dl = self.previous.map_or(0.0, |p| load - p);
        self.previous = Some(load);
        let want = request(load, dl, dt, self.network_delay, &self.thresholds)?;
        if self.pending {
            return None;
        }
        self.pending = true;
        Some(want)
    }

    /// Work asked for arrived `after` seconds after the request: the
    /// request is over and the delay estimate learns from it.
    pub fn received(&mut self, after: f64) {
        self.pending = false;
        if after.is_finite() && after > 0.0 {
            self.network_delay = (self.network_delay + after) / 2.0;
        }
    }

    /// The request came back with nothing: over, and the next sample may
    /// ask again.
    pub fn unfulfilled(&mut self) {
        self.pending = false;
    }
}

/// The When and How Many phases: with `load` tasks now, `dl` its change
/// over the last interval of `dt` seconds and a network delay of `nd`
/// seconds, how many tasks to ask for, if any. At or above `HT` never;
/// below `CT` always; otherwise when the load, falling at `dl` per
/// interval, would reach zero within `nd` (`load / |dl| * dt < nd`), in the
/// amount `|PL|`, `PL = load + dl * nd / dt` being the load predicted after
/// `nd`.
pub fn request(load: f64, dl: f64, dt: f64, nd: f64, t: &Thresholds) -> Option<u32> {
    if load >= t.high || dt <= 0.0 {
        return None;
    }
    let predicted = load + dl * nd / dt;
    let by_rate =
        (dl < 0.0 && load / -dl * dt < nd && predicted < 0.0).then(|| (-predicted).ceil() as u32);
    if load < t.critical {
        let to_critical = (t.critical - load).ceil().max(1.0) as u32;
        return Some(by_rate.unwrap_or(0).max(to_critical));
    }
    by_rate.filter(|&n| n > 0)
}

/// A request for `amount` tasks as it travels: who asked, and how many
/// more PEs may pass it on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadRequest {
    /// The PE that asked (a sink, whatever its load).
    pub from: usize,
    /// Tasks asked for.
    pub amount: u32,
    /// Passes left.
    pub ttl: u32,
}

/// What a PE does with a request that reached it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Send these tasks (by index into its task list) to `from`.
    Send(Vec<usize>),
    /// Pass it on to this PE, one pass fewer.
    Forward(usize, LoadRequest),
    /// Nobody could help: the asker may ask again.
    Unfulfilled,
}

/// The Where and Which phases at a PE holding tasks that have used
/// `cpu[i]` seconds each: a source (at or above `HT`) sends its oldest
/// tasks by CPU time, as many as it has above `HT`, at most the amount
/// asked; any other PE passes the request to the first entry of its
/// source table (never back to the asker) while the TTL lasts.
pub fn answer(cpu: &[f64], high: f64, sources: &[usize], req: LoadRequest) -> Answer {
    let load = cpu.len() as f64;
    if load >= high {
        let spare = (load - high).floor().max(0.0) as usize;
        let n = spare.min(req.amount as usize);
        if n > 0 {
            return Answer::Send(oldest(cpu, n));
        }
    }
    match sources.iter().find(|&&s| s != req.from) {
        Some(&next) if req.ttl > 0 => Answer::Forward(
            next,
            LoadRequest {
                ttl: req.ttl - 1,
                ..req
            },
        ),
        _ => Answer::Unfulfilled,
    }
}

/// The `n` tasks that have used the most CPU time (ties: the lower index).
pub fn oldest(cpu: &[f64], n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..cpu.len()).collect();
    order.sort_by(|&a, &b| cpu[b].total_cmp(&cpu[a]).then(a.cmp(&b)));
    order.truncate(n);
    order
}

/// Normalised performance: `(T_noLB - T_bal) / (T_noLB - T_opt)`.
pub fn np(t_no_lb: f64, t_bal: f64, t_opt: f64) -> f64 {
    if t_no_lb - t_opt <= 0.0 {
        return 0.0;
    }
    (t_no_lb - t_bal) / (t_no_lb - t_opt)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Thresholds = Thresholds {
        critical: 1.0,
        low: 2.0,
        high: 5.0,
    };

    #[test]
    fn a_pe_whose_load_falls_fast_asks_for_what_it_will_lack() {
        // L = 4, DL = -2, dt = 1, ND = 3: empty in 2 intervals < 3, PL = -2.
        assert_eq!(request(4.0, -2.0, 1.0, 3.0, &T), Some(2));
        // Falling slowly: empty in 4 > 3, no request.
        assert_eq!(request(4.0, -1.0, 1.0, 3.0, &T), None);
        // Rising or steady: none.
        assert_eq!(request(4.0, 1.0, 1.0, 3.0, &T), None);
        assert_eq!(request(4.0, 0.0, 1.0, 3.0, &T), None);
        // At or above HT, however fast it falls: none.
        assert_eq!(request(5.0, -10.0, 1.0, 3.0, &T), None);
        // Below CT, always, even steady.
        assert_eq!(request(0.0, 0.0, 1.0, 3.0, &T), Some(1));
        assert_eq!(request(0.5, -1.0, 1.0, 3.0, &T), Some(3));
    }

    #[test]
    fn one_request_at_a_time_and_the_delay_is_learnt() {
        let mut pe = Roc::new(T, 3.0);
        assert_eq!(pe.sample(8.0, 1.0), None, "the first sample has no rate");
        assert_eq!(pe.sample(6.0, 1.0), None, "falls 2 a second from 6: 3 s");
        assert_eq!(pe.sample(4.0, 1.0), Some(2));
        assert!(pe.pending());
        assert_eq!(pe.sample(2.0, 1.0), None, "a request is out");
        pe.received(1.0);
        assert!(!pe.pending());
        assert_eq!(pe.network_delay(), 2.0);
        // Still falling 2 a second, now below CT: what 2 s at that rate
        // will lack.
        assert_eq!(pe.sample(0.0, 1.0), Some(4));
        pe.unfulfilled();
        assert_eq!(pe.sample(0.0, 1.0), Some(1), "asks again, below CT");
    }

    #[test]
    fn a_source_sends_its_oldest_tasks_above_ht_and_others_pass_the_request_on() {
        // L = 7, HT = 5, asked for 2: its 2 oldest by CPU time.
        let cpu = [1.0, 9.0, 3.0, 8.0, 0.5, 2.0, 7.0];
        let req = LoadRequest {
            from: 4,
            amount: 2,
            ttl: 2,
        };
        assert_eq!(answer(&cpu, 5.0, &[], req), Answer::Send(vec![1, 3]));
        // Asked for more than it has above HT: only those.
        let big = LoadRequest { amount: 9, ..req };
        assert_eq!(answer(&cpu, 5.0, &[], big), Answer::Send(vec![1, 3]));
        // Not a source: to the first source-table entry that is not the
        // asker, one pass fewer; out of passes, unfulfilled.
        assert_eq!(
            answer(&cpu[..3], 5.0, &[4, 6], req),
            Answer::Forward(6, LoadRequest { ttl: 1, ..req })
        );
        let spent = LoadRequest { ttl: 0, ..req };
        assert_eq!(answer(&cpu[..3], 5.0, &[6], spent), Answer::Unfulfilled);
        assert_eq!(answer(&cpu[..3], 5.0, &[], req), Answer::Unfulfilled);
    }

    #[test]
    fn normalised_performance_as_the_paper_defines_it() {
        assert!((np(100.0, 55.0, 40.0) - 0.75).abs() < 1e-12);
        assert!((np(100.0, 40.0, 40.0) - 1.0).abs() < 1e-12);
        assert_eq!(np(40.0, 40.0, 40.0), 0.0);
    }

    #[test]
    fn the_low_threshold_makes_a_sink_and_the_high_one_a_source() {
        assert_eq!(T.state(5.0), State::Source);
        assert_eq!(T.state(3.0), State::Neutral);
        assert_eq!(T.state(2.0), State::Sink);
        assert_eq!(T.state(0.0), State::Sink);
        assert!(T.check().is_ok());
        let bad = Thresholds { low: 6.0, ..T };
        assert!(bad.check().is_err());
        let nan = Thresholds {
            critical: f64::NAN,
            ..T
        };
        assert!(nan.check().is_err());
    }

    #[test]
    fn each_pe_s_tables_follow_the_loads_its_messages_report() {
        let mut t = Tables::default();
        t.heard(3, 6.0, &T);
        t.heard(7, 9.0, &T);
        t.heard(1, 6.0, &T);
        // Busiest first; of equal loads the latest heard first.
        assert_eq!(t.sources(), [7, 1, 3]);
        t.heard(2, 1.0, &T);
        assert_eq!(t.sinks(), [2]);
        // 7 drained to neutral: out of both tables.
        t.heard(7, 3.0, &T);
        assert_eq!(t.sources(), [1, 3]);
        // 3 asked for load: a sink, whatever its load.
        t.asked_by(3);
        assert_eq!(t.sources(), [1]);
        assert_eq!(t.sinks(), [2, 3]);
        // Another PE's tables are its own.
        assert!(Tables::default().sources().is_empty());
    }

    #[test]
    fn the_sampling_interval_stretches_while_the_load_holds_and_shrinks_as_it_falls() {
        let s = Sampling {
            shortest: 1.0,
            longest: 16.0,
        };
        // Steady or rising: twice as long, up to the longest.
        assert_eq!(s.next(4.0, 0.0, 2.0, 3.0, &T), 4.0);
        assert_eq!(s.next(4.0, 1.0, 16.0, 3.0, &T), 16.0);
        // Falling 1 an interval of 2 from 4: dry in 8, ND 3: again at 5 at
        // the latest, but at most twice the last interval.
        assert_eq!(s.next(4.0, -1.0, 4.0, 3.0, &T), 8.0);
        assert_eq!(s.next(4.0, -1.0, 2.0, 3.0, &T), 4.0);
        assert_eq!(s.next(4.0, -2.0, 2.0, 3.0, &T), 1.0);
        // A slower network: sooner.
        assert_eq!(s.next(4.0, -1.0, 4.0, 12.0, &T), 4.0);
        // Below CT: the shortest.
        assert_eq!(s.next(0.0, 0.0, 8.0, 3.0, &T), 1.0);
    }
}
