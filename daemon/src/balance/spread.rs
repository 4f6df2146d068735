//! Rate-of-Change balancing between the daemons' hosts (`migd --placement
//! roc`): every sampling interval each host in the pool is a PE whose load
//! is its movable tasks (VPs of independent or one-VP jobs) per processor.
//! A host that asks (`roc::Roc::sample`) sends its request to the first
//! source (hosts at or above `HT`, busiest first), which answers with its
//! oldest tasks by CPU time (`roc::answer`) or passes it on while the TTL
//! lasts. The answer is a list of moves for the master to carry out; the
//! master says when each asker's work arrived (`arrived`) or could not be
//! moved (`failed`), which is how the network delay `ND` is learnt.
//!
//! Pure: no I/O, no clock (times are seconds passed in).

use std::collections::BTreeMap;

use super::roc::{answer, Answer, LoadRequest, Roc, Thresholds};

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

/// A host at a sample: its processors and its movable tasks.
#[derive(Debug, Clone, PartialEq)]
pub struct HostLoad {
    /// The host.
    pub name: String,
    /// Its processors in the pool.
    pub processors: u32,
    /// Its movable tasks: an id and the CPU time (s) each has used.
    pub tasks: Vec<(u64, f64)>,
    /// Tasks on their way to it (counted in its load, not sent on).
    pub incoming: u32,
}

/// A task to move from one host to another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    /// The task.
    pub task: u64,
    /// The host it is on.
    pub from: String,
    /// The host that asked for it.
    pub to: String,
}

/// Every host's Rate-of-Change state.
#[derive(Debug, Default)]
pub struct Spreader {
    pes: BTreeMap<String, (Roc, f64)>,
}

impl Spreader {
    /// One sample, `dt` seconds after the last, at time `now` (s): the
    /// moves the requests made now call for. Hosts not listed are
    /// forgotten.
    pub fn sample(&mut self, hosts: &[HostLoad], now: f64, dt: f64) -> Vec<Move> {
        self.pes.retain(|n, _| hosts.iter().any(|h| &h.name == n));
        let per = |h: &HostLoad| {
            (h.tasks.len() as f64 + f64::from(h.incoming)) / f64::from(h.processors.max(1))
        };
        // The source table: hosts at or above HT, busiest first.
        let mut sources: Vec<usize> = (0..hosts.len())
            .filter(|&i| per(&hosts[i]) >= THRESHOLDS.high)
            .collect();
        sources.sort_by(|&a, &b| per(&hosts[b]).total_cmp(&per(&hosts[a])).then(a.cmp(&b)));
        // What each host still holds as answers are given this sample.
        let mut left: Vec<Vec<(u64, f64)>> = hosts.iter().map(|h| h.tasks.clone()).collect();
        let mut moves = Vec::new();
        for (i, h) in hosts.iter().enumerate() {
            let (pe, _) = self
                .pes
                .entry(h.name.clone())
                .or_insert_with(|| (Roc::new(THRESHOLDS, FIRST_DELAY_S), now));
            let Some(amount) = pe.sample(per(h), dt) else {
                continue;
            };
            let mut req = LoadRequest {
                from: i,
                amount,
                ttl: TTL,
            };
            // It goes to the first source, and on from there.
            let mut at = sources.iter().copied().find(|&s| s != i);
            let mut got = Vec::new();
            while let Some(s) = at {
                let width = f64::from(hosts[s].processors.max(1));
                let cpu: Vec<f64> = left[s].iter().map(|t| t.1).collect();
                match answer(&cpu, THRESHOLDS.high * width, &sources, req) {
                    Answer::Send(picked) => {
                        let mut picked = picked;
                        picked.sort_unstable_by(|a, b| b.cmp(a));
                        for k in picked {
                            let (task, _) = left[s].remove(k);
                            got.push(Move {
                                task,
                                from: hosts[s].name.clone(),
                                to: h.name.clone(),
                            });
                        }
                        at = None;
                    }
                    // Passed on: to the next source in the table.
                    Answer::Forward(_, r) => {
                        req = r;
                        at = sources
                            .iter()
                            .skip_while(|&&x| x != s)
                            .skip(1)
                            .copied()
                            .find(|&x| x != i);
                    }
                    Answer::Unfulfilled => at = None,
                }
            }
            let Some((pe, asked)) = self.pes.get_mut(&h.name) else {
                continue;
            };
            if got.is_empty() {
                pe.unfulfilled();
            } else {
                *asked = now;
                moves.extend(got);
            }
        }
        moves
    }

    /// Work `host` asked for arrived at `now`.
    pub fn arrived(&mut self, host: &str, now: f64) {
        if let Some((pe, asked)) = self.pes.get_mut(host) {
            if pe.pending() {
                pe.received(now - *asked);
            }
        }
    }

    /// Work `host` asked for could not be moved.
    pub fn failed(&mut self, host: &str) {
        if let Some((pe, _)) = self.pes.get_mut(host) {
            pe.unfulfilled();
        }
    }

    /// Is a request of `host`'s out?
    pub fn pending(&self, host: &str) -> bool {
        self.pes.get(host).is_some_and(|(pe, _)| pe.pending())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &str, processors: u32, cpu: &[f64]) -> HostLoad {
        HostLoad {
            name: name.into(),
            processors,
            tasks: cpu
                .iter()
                .enumerate()
                .map(|(i, &c)| ((name.len() * 100 + i) as u64, c))
                .collect(),
            incoming: 0,
        }
    }

    #[test]
    fn an_idle_host_takes_the_oldest_tasks_of_the_busiest() {
        let mut s = Spreader::default();
        let hosts = [host("a", 1, &[1.0, 5.0, 3.0, 2.0]), host("bb", 1, &[])];
        let moves = s.sample(&hosts, 0.0, 1.0);
        // bb is below CT (1): it asks for 1; a, at 4 with HT 2, has 2 to
        // spare: its oldest by CPU time.
        let got: Vec<u64> = moves.iter().map(|m| m.task).collect();
        assert_eq!(got, vec![101]);
        assert!(moves.iter().all(|m| m.from == "a" && m.to == "bb"));
        // One request out at a time.
        assert!(s.pending("bb"));
        assert!(s.sample(&hosts, 1.0, 1.0).is_empty());
        s.arrived("bb", 1.5);
        assert!(!s.pending("bb"));
    }

    #[test]
    fn a_host_whose_load_falls_fast_asks_before_it_runs_dry() {
        let mut s = Spreader::default();
        let src = host("src", 1, &[9.0, 8.0, 7.0, 6.0, 5.0, 4.0]);
        // 2.5 tasks a processor, then one (every processor busy, at CT): a
        // fall of 1.5 a second with ND 1 s predicts -0.5 -> by the rate
        // alone it asks.
        let first = s.sample(&[src.clone(), host("sink", 2, &[1.0; 5])], 0.0, 1.0);
        assert!(first.is_empty(), "at HT it neither asks nor is asked");
        let moves = s.sample(&[src, host("sink", 2, &[1.0; 2])], 1.0, 1.0);
        assert!(!moves.is_empty());
        assert!(moves.iter().all(|m| m.from == "src" && m.to == "sink"));
    }

    #[test]
    fn a_host_with_every_processor_busy_asks_only_when_its_load_falls() {
        let mut s = Spreader::default();
        let src = host("src", 1, &[9.0, 8.0, 7.0, 6.0]);
        let busy = host("busy", 2, &[1.0, 1.0]);
        for t in 0..5 {
            let moves = s.sample(&[src.clone(), busy.clone()], f64::from(t), 1.0);
            assert!(moves.is_empty(), "sample {t}: {moves:?}");
        }
        // One of its tasks ends: a processor idle, it asks.
        let moves = s.sample(&[src, host("busy", 2, &[1.0])], 5.0, 1.0);
        assert!(!moves.is_empty() && moves.iter().all(|m| m.to == "busy"));
    }

    #[test]
    fn nobody_to_give_leaves_the_request_unfulfilled() {
        let mut s = Spreader::default();
        let hosts = [host("a", 1, &[1.0]), host("b", 1, &[])];
        assert!(s.sample(&hosts, 0.0, 1.0).is_empty());
        assert!(!s.pending("a") && !s.pending("b"));
    }

    #[test]
    fn tasks_on_their_way_count_in_the_load() {
        let mut s = Spreader::default();
        let mut sink = host("b", 1, &[1.0]);
        sink.incoming = 1;
        let hosts = [host("a", 1, &[1.0, 2.0, 3.0, 4.0, 5.0]), sink];
        assert!(s.sample(&hosts, 0.0, 1.0).is_empty(), "b at 2 asks nothing");
    }

    #[test]
    fn a_source_with_several_processors_keeps_ht_per_processor() {
        let mut s = Spreader::default();
        // Five tasks on two processors: 2.5 each, one task over HT * 2.
        let hosts = [host("a", 2, &[1.0, 2.0, 3.0, 4.0, 5.0]), host("b", 1, &[])];
        let moves = s.sample(&hosts, 0.0, 1.0);
        assert_eq!(moves.len(), 1);
        assert_eq!(moves[0].task, 104);
    }
}
