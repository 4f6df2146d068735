//! How long the daemon's loop turns take: the longest since the daemon
//! started, and the longest and the 99th percentile over the last
//! `WINDOW` (for `mig stats`).
//!
//! A turn is the loop's work between two waits on the poll (the wait
//! itself is not counted). A long turn delays everything the loop owes:
//! heartbeats, leases, the consensus's messages, slot switches armed late.
//!
//! Recording a turn costs a few additions in fixed arrays (no allocation);
//! the caller reads the clock. What does not live here: the loop
//! (`server`), sending the figures to the master (`HostUsage`).

use std::time::{Duration, Instant};

use libmig::msg::LoopTurns;

/// The recent window the longest turn and the percentile are over: two
/// halves, the older dropped as a new one begins, so the figures cover
/// between `WINDOW / 2` and `WINDOW`.
pub const WINDOW: Duration = Duration::from_secs(10);

/// Buckets of the histogram: four per power of two of microseconds (each
/// bucket a quarter of an octave wide, so a percentile is within 25%), up
/// to 2^40 us (12 days; longer turns count in the last bucket).
const BUCKETS: usize = 4 * 40;

/// One half of the window.
#[derive(Debug, Clone)]
struct Half {
    began: Option<Instant>,
    longest: Duration,
    turns: u64,
    counts: [u32; BUCKETS],
}

impl Half {
    fn empty(began: Option<Instant>) -> Half {
        Half {
            began,
            longest: Duration::ZERO,
            turns: 0,
            counts: [0; BUCKETS],
        }
    }
}

/// The loop's turns so far.
#[derive(Debug, Clone)]
pub struct Turns {
    longest: Duration,
    turns: u64,
    older: Half,
    newer: Half,
}

impl Default for Turns {
    fn default() -> Turns {
        Turns {
            longest: Duration::ZERO,
            turns: 0,
            older: Half::empty(None),
            newer: Half::empty(None),
        }
    }
}

/// The bucket of a turn of `us` microseconds.
fn bucket(us: u64) -> usize {
    if us < 4 {
        return us as usize;
    }
    let octave = 63 - us.leading_zeros() as usize;
    let quarter = ((us >> (octave - 2)) & 3) as usize;
    ((octave - 1) * 4 + quarter).min(BUCKETS - 1)
}

/// The largest turn (us) bucket `b` holds.
fn bucket_top(b: usize) -> u64 {
    if b < 4 {
        return b as u64;
    }
    let (octave, quarter) = (b / 4 + 1, (b % 4) as u64);
    ((4 + quarter + 1) << (octave - 2)) - 1
}

impl Turns {
    /// A turn that took `took` ended at `now`.
    pub fn record(&mut self, took: Duration, now: Instant) {
        self.roll(now);
        self.longest = self.longest.max(took);
        self.turns += 1;
        let h = &mut self.newer;
        h.longest = h.longest.max(took);
        h.turns += 1;
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let b = &mut h.counts[bucket(us)];
        *b = b.saturating_add(1);
    }

    /// Begin a new half of the window if the newer one is old enough.
    fn roll(&mut self, now: Instant) {
        match self.newer.began {
            None => self.newer.began = Some(now),
            Some(b) if now.saturating_duration_since(b) >= WINDOW / 2 => {
                // A half with no turn at all (the loop was stuck in one for
                // longer than a half) leaves an empty older half.
                let stale = now.saturating_duration_since(b) >= WINDOW;
                let newer = std::mem::replace(&mut self.newer, Half::empty(Some(now)));
                self.older = if stale { Half::empty(None) } else { newer };
            }
            Some(_) => {}
        }
    }

    /// The figures at `now`.
    pub fn report(&mut self, now: Instant) -> LoopTurns {
        self.roll(now);
        let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let window_turns = self.older.turns + self.newer.turns;
        let window_longest = self.older.longest.max(self.newer.longest);
        let p99 = if window_turns == 0 {
            0
        } else {
            // The turn 99% of the window's turns are no longer than.
            let rank = window_turns - window_turns / 100;
            let mut seen = 0u64;
            let mut top = 0;
            for b in 0..BUCKETS {
                seen += u64::from(self.older.counts[b]) + u64::from(self.newer.counts[b]);
                if seen >= rank {
                    top = bucket_top(b);
                    break;
                }
            }
            top.min(us(window_longest))
        };
        LoopTurns {
            longest_us: us(self.longest),
            turns: self.turns,
            window_s: WINDOW.as_secs() as u32,
            window_longest_us: us(window_longest),
            window_p99_us: p99,
            window_turns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_hold_their_values_in_order() {
        let mut last = 0;
        for us in [
            0u64,
            1,
            3,
            4,
            5,
            7,
            8,
            9,
            15,
            16,
            100,
            1000,
            65_535,
            1 << 30,
        ] {
            let b = bucket(us);
            assert!(b >= last, "{us}");
            assert!(bucket_top(b) >= us, "{us}: top {}", bucket_top(b));
            if b > 0 {
                assert!(bucket_top(b - 1) < us, "{us}");
            }
            // Within a quarter of an octave.
            assert!(bucket_top(b) <= us + us / 4 + 1, "{us}");
            last = b;
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn longest_since_start_and_in_the_window_and_the_99th_percentile() {
        let t0 = Instant::now();
        let mut t = Turns::default();
        let ms = Duration::from_millis;
        // 990 turns of 1 ms and 10 of 50 ms, then one of 700 ms.
        for i in 0..1000 {
            let took = if i % 100 == 0 { ms(50) } else { ms(1) };
            t.record(took, t0 + ms(i));
        }
        t.record(ms(700), t0 + ms(1700));
        let r = t.report(t0 + ms(1800));
        assert_eq!(r.turns, 1001);
        assert_eq!(r.window_turns, 1001);
        assert_eq!(r.longest_us, 700_000);
        assert_eq!(r.window_longest_us, 700_000);
        // 11 turns of 1001 over 1 ms: the 99th percentile is one of them.
        assert!(
            (50_000..=62_500).contains(&r.window_p99_us),
            "{}",
            r.window_p99_us
        );
        // Short turns for a whole window later: the long one is out of
        // the window, not out of the record since start.
        for i in 0..20 {
            t.record(ms(2), t0 + ms(2000) + ms(1000 * i));
        }
        let r = t.report(t0 + ms(22_000));
        assert_eq!(r.longest_us, 700_000);
        assert!(r.window_longest_us == 2000, "{}", r.window_longest_us);
        assert!(r.window_p99_us <= 2000 && r.window_p99_us >= 1500);
        assert!(r.window_turns < 20 && r.window_turns >= 5, "{r:?}");
        // Nothing for longer than the window: nothing in it.
        let r = t.report(t0 + ms(60_000));
        assert_eq!(r.window_turns, 0);
        assert_eq!((r.window_longest_us, r.window_p99_us), (0, 0));
        assert_eq!(r.longest_us, 700_000);
    }
}
