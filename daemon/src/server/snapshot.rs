//! Job checkpoints: a VP's steps in a consistent checkpoint of its job, its
//! image kept, and (on the master) restarting a job from its images.

use super::*;

impl Daemon {
    /// A job checkpoint's step from the master for local VP `tid`.
    pub(super) fn snap_step(&mut self, tid: Tid, step: SnapStep) {
        let Some(&t) = self.vp_conns.get(&tid) else {
            return;
        };
        let begins = matches!(step, SnapStep::Begin { .. });
        let step = match step {
            SnapStep::Begin { id, .. } => SnapStep::Begin {
                id,
                path: self.state.snap_image(tid).display().to_string(),
            },
            other => other,
        };
        self.send_vp(t, &VpMsg::Snap(step));
        if begins {
            // Looked at by the VP at its next safe point. The step goes
            // first: a VP that looked on the signal before the step was in
            // its socket would never look again.
            if let Some(v) = self.vps.by_tid.get(&tid) {
                host::signal(v.pid, Signal::SIGUSR2);
            }
        }
    }

    /// VP `tid` wrote its image of job checkpoint `id`: check it, keep a
    /// copy here, send it to the master.
    pub(super) fn snap_taken(&mut self, tid: Tid, id: u64, path: &str) {
        let expected = self.state.snap_image(tid);
        if std::path::Path::new(path) != expected {
            return log!(
                "VP t{tid:x} wrote its checkpoint to {path}, not {}",
                expected.display()
            );
        }
        let image = std::fs::read(&expected)
            .map_err(|e| e.to_string())
            .and_then(|b| {
                libmig::checkpoint::Image::check(&b)
                    .map(|()| b)
                    .map_err(|e| e.to_string())
            });
        crate::discard::remove_later(&expected);
        match image {
            Ok(image) => {
                let job = self
                    .vps
                    .by_tid
                    .get(&tid)
                    .and_then(|v| v.start.as_ref())
                    .map(|s| s.job.clone())
                    .unwrap_or_default();
                if !self.role.is_master() {
                    // Kept here too: the master holds the other copy.
                    if let Err(e) = self.replicas.save(&job, id, tid, &image) {
                        warn!("cannot keep a copy of job {job}'s checkpoint: {e}");
                    }
                    self.replicas.prune(&job, &[id.saturating_sub(1), id]);
                }
                self.report(PeerMsg::SnapImage { tid, id, image });
            }
            Err(e) => warn!("VP t{tid:x}: its checkpoint image is unusable: {e}"),
        }
    }

    /// On the master: restart a job's VPs from generation `id`'s images
    /// (checked): each to its host.
    pub(super) fn restore_job(
        &mut self,
        job: &str,
        id: u64,
        placements: Vec<(Tid, String, StartVp)>,
        images: Vec<(Tid, Vec<u8>)>,
    ) {
        log!("job {job}: restoring from generation {id}");
        let mut images: HashMap<Tid, Vec<u8>> = images.into_iter().collect();
        let outs = placements
            .into_iter()
            .filter_map(|(tid, host, start)| {
                let image = images.remove(&tid)?;
                Some(Out::ToHost(
                    host.clone(),
                    PeerMsg::Restore {
                        to: host,
                        start,
                        image,
                    },
                ))
            })
            .collect();
        self.deliver(outs);
    }
}
