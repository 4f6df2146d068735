//! On the master: finding an intact copy of every image of a job's
//! checkpoint before a restart stops anything. Generations are tried newest
//! first; each image is read from the master's own store, else fetched from
//! the host that keeps its other copy. The master hears the newest
//! generation found whole, or what was missing.
//!
//! What does not live here: deciding to restart and carrying it out (the
//! master), keeping images (`store`).

use std::collections::{HashSet, VecDeque};

use super::*;
use crate::master::{FoundImages, GenImages};

/// How long a replica holder may take to answer.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// The images of one job being looked for.
#[derive(Debug)]
pub(super) struct Hunt {
    /// Generations still to try, the one being tried first.
    gens: VecDeque<GenImages>,
    /// Images of the generation being tried, found intact.
    have: HashMap<Tid, Vec<u8>>,
    /// Images of it asked of their replica holders.
    waiting: HashSet<Tid>,
    deadline: Instant,
    /// What was missing, for the answer.
    missing: Vec<String>,
}

impl Daemon {
    /// The master asks for `job`'s images (see `Out::CheckImages`).
    pub(super) fn hunt_images(&mut self, job: String, gens: Vec<GenImages>) {
        let hunt = Hunt {
            gens: gens.into(),
            have: HashMap::new(),
            waiting: HashSet::new(),
            deadline: Instant::now() + FETCH_TIMEOUT,
            missing: Vec::new(),
        };
        self.hunts.insert(job.clone(), hunt);
        self.hunt_on(&job);
    }

    /// Try the generation at the front: its images from here, those not
    /// intact here asked of their replica holders; answer the master once
    /// one generation is whole or none is left.
    fn hunt_on(&mut self, job: &str) {
        loop {
            let Some(h) = self.hunts.get_mut(job) else {
                return;
            };
            if !h.waiting.is_empty() {
                return;
            }
            let Some((id, images)) = h.gens.front().cloned() else {
                let why = if h.missing.is_empty() {
                    "no checkpoint generation left".to_string()
                } else {
                    format!("no intact copy of {}", h.missing.join("; "))
                };
                self.hunts.remove(job);
                return self.tell_master_images(job, Err(why));
            };
            if images.iter().all(|(t, _)| h.have.contains_key(t)) {
                let Some(h) = self.hunts.remove(job) else {
                    return;
                };
                let found = images
                    .iter()
                    .filter_map(|(t, _)| Some((*t, h.have.get(t)?.clone())))
                    .collect();
                return self.tell_master_images(job, Ok((id, found)));
            }
            let mut asks = Vec::new();
            let mut whole = true;
            for (tid, replica) in images {
                if self
                    .hunts
                    .get(job)
                    .is_some_and(|h| h.have.contains_key(&tid))
                {
                    continue;
                }
                // The copy kept for another master, when this daemon
                // has since become the master.
                let mine = replica.as_deref() == Some(self.facts.name.as_str());
                let loaded = match self.store.load(job, id, &[tid]) {
                    Err(here) if mine => self
                        .replicas
                        .load(job, id, &[tid])
                        .map_err(|copy| format!("{here}; its copy here: {copy}")),
                    other => other,
                };
                match loaded {
                    Ok(mut v) => {
                        if let (Some((_, image)), Some(h)) = (v.pop(), self.hunts.get_mut(job)) {
                            h.have.insert(tid, image);
                        }
                    }
                    Err(here) => {
                        let token = replica.as_ref().and_then(|r| self.host_token(r));
                        match (replica, token) {
                            (Some(r), Some(t)) => {
                                log!("job {job}: {here}; asking {r} for its copy");
                                asks.push((t, tid));
                            }
                            (r, _) => {
                                let elsewhere = r.map_or("no other copy".into(), |r| {
                                    format!("its copy on {r} is out of reach")
                                });
                                log!("job {job}: {here}; {elsewhere}");
                                if let Some(h) = self.hunts.get_mut(job) {
                                    h.missing.push(format!(
                                        "VP t{tid:x}'s image of generation {id} ({here}; {elsewhere})"
                                    ));
                                }
                                whole = false;
                                break;
                            }
                        }
                    }
                }
            }
            let Some(h) = self.hunts.get_mut(job) else {
                return;
            };
            if !whole {
                h.gens.pop_front();
                h.have.clear();
                continue;
            }
            h.deadline = Instant::now() + FETCH_TIMEOUT;
            for (t, tid) in asks {
                if let Some(h) = self.hunts.get_mut(job) {
                    h.waiting.insert(tid);
                }
                self.send_peer(
                    t,
                    &PeerMsg::FetchReplica {
                        job: job.to_string(),
                        id,
                        tid,
                    },
                );
            }
        }
    }

    /// A replica holder answered.
    pub(super) fn replica_arrived(
        &mut self,
        job: &str,
        id: u64,
        tid: Tid,
        image: Result<Vec<u8>, String>,
    ) {
        let Some(h) = self
            .hunts
            .get_mut(job)
            .filter(|h| h.gens.front().is_some_and(|g| g.0 == id) && h.waiting.contains(&tid))
        else {
            return;
        };
        h.waiting.remove(&tid);
        let checked = image.and_then(|i| {
            libmig::checkpoint::Image::check(&i)
                .map(|()| i)
                .map_err(|e| e.to_string())
        });
        match checked {
            Ok(image) => {
                log!("job {job}: VP t{tid:x}'s image of generation {id} from its copy elsewhere");
                h.have.insert(tid, image);
            }
            Err(e) => {
                log!("job {job}: the copy of VP t{tid:x}'s image of generation {id}: {e}");
                h.missing.push(format!(
                    "VP t{tid:x}'s image of generation {id} (its copy: {e})"
                ));
                h.gens.pop_front();
                h.have.clear();
                h.waiting.clear();
            }
        }
        self.hunt_on(job);
    }

    /// Replica holders that did not answer in time: their generation is
    /// given up.
    pub(super) fn hunts_overdue(&mut self) {
        let now = Instant::now();
        let late: Vec<String> = self
            .hunts
            .iter()
            .filter(|(_, h)| !h.waiting.is_empty() && now > h.deadline)
            .map(|(j, _)| j.clone())
            .collect();
        for job in late {
            if let Some(h) = self.hunts.get_mut(&job) {
                let id = h.gens.front().map_or(0, |g| g.0);
                h.missing.push(format!(
                    "images of generation {id} (their copies' hosts did not answer)"
                ));
                h.gens.pop_front();
                h.have.clear();
                h.waiting.clear();
            }
            self.hunt_on(&job);
        }
    }

    fn tell_master_images(&mut self, job: &str, found: Result<FoundImages, String>) {
        if let Some(m) = self.role.master() {
            let out = m.images_checked(job, found);
            self.deliver(out);
        }
    }
}
