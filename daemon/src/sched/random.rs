//! Valid random event streams, for property tests and benchmarks.
//!
//! What lives here: a small deterministic generator (no `rand` dependency,
//! the same seed gives the same stream) that tracks which processors, jobs
//! and VPs exist so every event it emits is legal. What does not: checking
//! the scheduler's answers (the tests do).

use std::collections::BTreeMap;

use super::scheduler::Event;

/// Shape of the generated pool and workload.
#[derive(Debug, Clone)]
pub struct Shape {
    /// Processors present at the start.
    pub processors: usize,
    /// Processors per host.
    pub per_host: usize,
    /// Architectures to draw from.
    pub arches: Vec<String>,
    /// Largest job (VPs).
    pub max_job: u32,
    /// Jobs the generator aims to keep running.
    pub target_jobs: usize,
    /// Capacities new processors draw from.
    pub capacities: Vec<f64>,
    /// Hosts offer memory (1, 4 or 16 GB, or say nothing) and half the
    /// jobs ask for 2 or 8 GB a VP, which each host's VPs share.
    pub memory: bool,
    /// A quarter of the jobs come with processors a placement policy
    /// chose for them (`Event::Submit`'s `only`): some of those live.
    pub chosen: bool,
    /// Three jobs in four come with an estimate (1 to 100 s).
    pub estimates: bool,
}

impl Default for Shape {
    fn default() -> Self {
        Shape {
            processors: 8,
            per_host: 2,
            arches: vec!["x86_64".into()],
            max_job: 8,
            target_jobs: 4,
            capacities: vec![1.0, 1.0, 2.0, 3.0, 4.0, 1.5],
            memory: false,
            chosen: false,
            estimates: false,
        }
    }
}

/// A seeded generator of legal events.
#[derive(Debug, Clone)]
pub struct Generator {
    state: u64,
    shape: Shape,
    live: Vec<String>,
    gone: Vec<String>,
    next_proc: usize,
    jobs: BTreeMap<String, Vec<u32>>,
    next_vp: BTreeMap<String, u32>,
    next_job: usize,
    suspended: std::collections::BTreeSet<String>,
}

impl Generator {
    /// A generator with this seed and shape.
    pub fn new(seed: u64, shape: Shape) -> Self {
        Generator {
            state: seed ^ 0x9E37_79B9_7F4A_7C15,
            shape,
            live: Vec::new(),
            gone: Vec::new(),
            next_proc: 0,
            jobs: BTreeMap::new(),
            next_vp: BTreeMap::new(),
            next_job: 0,
            suspended: Default::default(),
        }
    }

    fn next(&mut self) -> u64 {
        // SplitMix64.
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    fn arch(&mut self) -> String {
        let i = self.below(self.shape.arches.len());
        self.shape
            .arches
            .get(i)
            .cloned()
            .unwrap_or_else(|| "x86_64".into())
    }

    fn new_processor(&mut self) -> Event {
        let (id, fresh) = match self.gone.pop() {
            Some(id) => (id, false),
            None => {
                let n = self.next_proc;
                self.next_proc += 1;
                (
                    format!(
                        "h{}/{}",
                        n / self.shape.per_host.max(1),
                        n % self.shape.per_host.max(1)
                    ),
                    true,
                )
            }
        };
        let _ = fresh;
        self.live.push(id.clone());
        let host = id.split('/').next().unwrap_or(&id).to_string();
        let i = self.below(self.shape.capacities.len());
        let capacity = self.shape.capacities.get(i).copied().unwrap_or(1.0);
        // The architecture follows the id so a returning processor keeps it.
        let h = id
            .bytes()
            .fold(0usize, |a, b| a.wrapping_mul(31).wrapping_add(b as usize));
        let arch = self.shape.arches[h % self.shape.arches.len().max(1)].clone();
        // The memory its host offers (sometimes unknown) follows the host,
        // as all processors of a host share it.
        let hh = host
            .bytes()
            .fold(0usize, |a, b| a.wrapping_mul(31).wrapping_add(b as usize));
        let memory_mb = if self.shape.memory {
            [None, Some(1000), Some(4000), Some(16000)][hh / 7 % 4]
        } else {
            None
        };
        Event::NewProcessor {
            id,
            host,
            arch,
            capacity,
            memory_mb,
        }
    }

    /// The next legal event.
    pub fn event(&mut self) -> Event {
        if self.live.len() < self.shape.processors.min(2) {
            return self.new_processor();
        }
        loop {
            let roll = self.below(100);
            match roll {
                0..=7 if self.live.len() < self.shape.processors * 3 / 2 + 1 => {
                    return self.new_processor()
                }
                8..=15 if self.live.len() > (self.shape.processors / 2).max(1) => {
                    let i = self.below(self.live.len());
                    let id = self.live.swap_remove(i);
                    self.gone.push(id.clone());
                    return Event::ProcessorExit { id };
                }
                16..=45 if self.jobs.len() < self.shape.target_jobs => {
                    let job = format!("j{}", self.next_job);
                    self.next_job += 1;
                    let mut vps = BTreeMap::new();
                    let n = 1 + self.below(self.shape.max_job as usize) as u32;
                    for _ in 0..n {
                        *vps.entry(self.arch()).or_insert(0) += 1;
                    }
                    self.jobs.insert(job.clone(), (0..n).collect());
                    self.next_vp.insert(job.clone(), n);
                    let memory_mb = if self.shape.memory {
                        [None, None, Some(2000), Some(8000)][self.below(4)]
                    } else {
                        None
                    };
                    let only = if self.shape.chosen && self.below(4) == 0 {
                        let live = self.live.clone();
                        let mut ids: Vec<String> =
                            live.into_iter().filter(|_| self.below(2) == 0).collect();
                        if ids.is_empty() {
                            let i = self.below(self.live.len());
                            ids.push(self.live[i].clone());
                        }
                        Some(ids)
                    } else {
                        None
                    };
                    let estimate = (self.shape.estimates && self.below(4) > 0)
                        .then(|| 1.0 + self.below(100) as f64);
                    return Event::Submit {
                        job,
                        vps,
                        memory_mb,
                        only,
                        estimate,
                    };
                }
                46..=60 if !self.jobs.is_empty() => {
                    let k = self.below(self.jobs.len());
                    let job = self.jobs.keys().nth(k).cloned().unwrap_or_default();
                    let vp = self.next_vp.get(&job).copied().unwrap_or(0);
                    self.next_vp.insert(job.clone(), vp + 1);
                    if let Some(v) = self.jobs.get_mut(&job) {
                        v.push(vp);
                    }
                    return Event::NewVp {
                        job,
                        arch: self.arch(),
                        host: None,
                    };
                }
                61..=85 if !self.jobs.is_empty() => {
                    let k = self.below(self.jobs.len());
                    let job = self.jobs.keys().nth(k).cloned().unwrap_or_default();
                    let vps = self.jobs.get(&job).cloned().unwrap_or_default();
                    let i = self.below(vps.len());
                    let vp = vps[i];
                    let left: Vec<u32> = vps.into_iter().filter(|&v| v != vp).collect();
                    if left.is_empty() {
                        self.jobs.remove(&job);
                        self.suspended.remove(&job);
                    } else {
                        self.jobs.insert(job.clone(), left);
                    }
                    return Event::VpExit { job, vp };
                }
                86..=88 if !self.jobs.is_empty() => {
                    let k = self.below(self.jobs.len());
                    let job = self.jobs.keys().nth(k).cloned().unwrap_or_default();
                    if self.suspended.remove(&job) {
                        return Event::Resume { job };
                    }
                    self.suspended.insert(job.clone());
                    return Event::Suspend { job };
                }
                89..=99 if self.jobs.len() > self.shape.target_jobs / 2 => {
                    let k = self.below(self.jobs.len());
                    let job = self.jobs.keys().nth(k).cloned().unwrap_or_default();
                    self.jobs.remove(&job);
                    self.suspended.remove(&job);
                    return Event::JobExit { job };
                }
                _ => continue,
            }
        }
    }

    /// The initial pool as events.
    pub fn pool(&mut self) -> Vec<Event> {
        (0..self.shape.processors)
            .map(|_| self.new_processor())
            .collect()
    }

    /// A time step for `Scheduler::on_event_at`: 0 to 20 s.
    pub fn pause(&mut self) -> f64 {
        self.below(21) as f64
    }

    /// VPs the generator believes exist (to check that none was lost).
    pub fn vp_count(&self) -> usize {
        self.jobs.values().map(Vec::len).sum()
    }
}
