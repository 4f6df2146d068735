//! Gang slicing as the master sees it: each host's slot table from the
//! scheduler's map, the round in force, and `mig stats` from what hosts
//! report of their switches and of their daemon loop's turns.

use std::collections::BTreeMap;

use libmig::msg::{
    HostTimeline, HostTurns, LoopTurns, SliceReport, SliceStats, SlotCell, StatsInfo, Switch,
    TimelineSwitch,
};

use super::{Master, Out};

impl Master {
    /// Host `host`'s slot table from the scheduler's map: per slot, per
    /// processor of the host, the Tids there.
    pub(super) fn slot_table(&self, host: &str) -> Vec<Vec<SlotCell>> {
        self.sched
            .host_table(host)
            .into_iter()
            .map(|slot| {
                slot.into_iter()
                    .filter_map(|c| {
                        let j = self.jobs.get(&c.job)?;
                        let processor = c.processor.rsplit('/').next()?.parse().ok()?;
                        Some(SlotCell {
                            processor,
                            tids: c
                                .vps
                                .iter()
                                .filter_map(|vp| j.vps.get(vp).map(|v| v.tid))
                                .collect(),
                            independent: j.spec.independent,
                        })
                    })
                    .collect()
            })
            .collect()
    }

    /// The server's clock, for answers that depend on it (`mig map`).
    pub fn set_wall(&mut self, ns: u64) {
        self.wall_ns = ns;
    }

    /// `set_wall`, chained.
    pub fn with_wall(&mut self, ns: u64) -> &mut Master {
        self.wall_ns = ns;
        self
    }

    /// The round the hosts now slice: its epoch (ns) and slots.
    pub fn set_round(&mut self, epoch_ns: u64, slots: u64) {
        self.round = Some((epoch_ns, slots));
    }

    /// The slot length (ns); 0 when not slicing.
    pub fn quantum_ns(&self) -> u64 {
        self.quantum_ns
    }

    /// The round in force, if tables went out.
    pub fn round(&self) -> Option<(u64, u64)> {
        self.round
    }

    /// A table is going to `host`: keep which jobs each of its slots runs.
    pub(super) fn note_table(&mut self, host: &str, generation: u64, table: &[Vec<SlotCell>]) {
        let jobs: Vec<Vec<String>> = table
            .iter()
            .map(|slot| {
                let mut js: Vec<String> = slot
                    .iter()
                    .flat_map(|c| c.tids.iter())
                    .filter_map(|t| self.tids.get(t).map(|(j, _)| j.clone()))
                    .collect();
                js.sort();
                js.dedup();
                js
            })
            .collect();
        let h = self.slicing.entry(host.to_string()).or_default();
        if h.tables.len() == KEEP_TABLES {
            h.tables.pop_front();
        }
        h.tables.push_back((generation, jobs));
    }

    /// `mig stats --plot`: each host's recent switches (the last 200), with
    /// the jobs of the slot each switched to.
    pub(super) fn timeline(&self) -> Vec<HostTimeline> {
        self.slicing
            .iter()
            .map(|(host, h)| {
                let skip = h.switches.len().saturating_sub(200);
                HostTimeline {
                    host: host.clone(),
                    switches: h
                        .switches
                        .iter()
                        .skip(skip)
                        .map(|s| TimelineSwitch {
                            ideal_ns: s.ideal_ns,
                            late_ns: s.late_ns,
                            slot: s.slot,
                            jobs: h
                                .tables
                                .iter()
                                .rev()
                                .find(|(g, _)| *g == s.generation)
                                .and_then(|(_, t)| t.get(s.slot as usize))
                                .cloned()
                                .unwrap_or_default(),
                        })
                        .collect(),
                }
            })
            .collect()
    }

    /// A host's slicer reported.
    pub(super) fn slicing_report(&mut self, host: &str, r: SliceReport) -> Vec<Out> {
        let h = self.slicing.entry(host.to_string()).or_default();
        for s in r.switches {
            if h.switches.len() == KEEP_SWITCHES {
                h.switches.pop_front();
            }
            h.switches.push_back(s);
        }
        h.installed.extend(r.installed);
        let extra = h.installed.len().saturating_sub(64);
        h.installed.drain(..extra);
        Vec::new()
    }

    /// Host `host`'s daemon loop turns, as it last reported them (the
    /// server sets the master's own).
    pub fn note_turns(&mut self, host: &str, turns: LoopTurns) {
        if self.hosts.contains_key(host) {
            self.turns.insert(host.to_string(), turns);
        }
    }

    /// `mig stats`: switch lateness per host and overall, cross-host skew
    /// for the same boundary, time lost to switching, each host's loop
    /// turns (the master's first, then live hosts').
    pub(super) fn stats(&self) -> StatsInfo {
        fn pcts(mut v: Vec<f64>) -> [f64; 3] {
            if v.is_empty() {
                return [0.0; 3];
            }
            v.sort_by(f64::total_cmp);
            let at = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
            [at(0.5), at(0.99), at(1.0)]
        }
        let ms = |ns: u64| ns as f64 / 1e6;
        let lost = |sw: &[&Switch]| {
            let (first, last) = match (
                sw.iter().map(|s| s.ideal_ns).min(),
                sw.iter().map(|s| s.ideal_ns).max(),
            ) {
                (Some(a), Some(b)) if b > a => (a, b),
                _ => return 0.0,
            };
            let took: u64 = sw.iter().map(|s| s.took_ns).sum();
            took as f64 / (last - first) as f64
        };
        let mut hosts = Vec::new();
        let mut all: Vec<&Switch> = Vec::new();
        let mut by_boundary: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for (name, h) in &self.slicing {
            let sw: Vec<&Switch> = h.switches.iter().collect();
            for s in &sw {
                by_boundary.entry(s.ideal_ns).or_default().push(s.late_ns);
            }
            hosts.push(SliceStats {
                host: name.clone(),
                switches: sw.len() as u64,
                late_ms: pcts(sw.iter().map(|s| ms(s.late_ns)).collect()),
                lost: lost(&sw),
                installed: h.installed.clone(),
            });
            all.extend(sw);
        }
        let lost_all = if hosts.is_empty() {
            0.0
        } else {
            hosts.iter().map(|h| h.lost).sum::<f64>() / hosts.len() as f64
        };
        hosts.push(SliceStats {
            host: "all".into(),
            switches: all.len() as u64,
            late_ms: pcts(all.iter().map(|s| ms(s.late_ns)).collect()),
            lost: lost_all,
            installed: Vec::new(),
        });
        let skews: Vec<f64> = by_boundary
            .values()
            .filter(|l| l.len() > 1)
            .map(|l| {
                let (lo, hi) = (
                    l.iter().min().copied().unwrap_or(0),
                    l.iter().max().copied().unwrap_or(0),
                );
                ms(hi - lo)
            })
            .collect();
        let mut loop_turns: Vec<HostTurns> = self
            .turns
            .iter()
            .filter(|(h, _)| self.is_alive(h))
            .map(|(h, t)| HostTurns {
                host: h.clone(),
                master: *h == self.name,
                turns: t.clone(),
            })
            .collect();
        loop_turns.sort_by_key(|t| !t.master);
        StatsInfo {
            loop_turns,
            quantum_ms: ms(self.quantum_ns),
            slots: self.sched.map().columns().len() as u32,
            boundaries: skews.len() as u64,
            skew_ms: pcts(skews),
            hosts,
        }
    }
}

/// What a host's slicer reported, for `mig stats`.
#[derive(Debug, Default)]
pub(super) struct HostSlicing {
    pub(super) switches: std::collections::VecDeque<Switch>,
    pub(super) installed: Vec<(u64, u64, u64)>,
    /// The last tables sent to the host: generation, and per slot the jobs
    /// with cells there (for `timeline`).
    pub(super) tables: std::collections::VecDeque<(u64, Vec<Vec<String>>)>,
}

/// Tables kept per host for `mig stats --plot`.
const KEEP_TABLES: usize = 16;

/// Switches kept per host for `mig stats`.
pub(super) const KEEP_SWITCHES: usize = 4096;
