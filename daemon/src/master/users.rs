//! Who may do what, where a daemon serves several local users (`shared`):
//! everyone may look (hosts, VPs, the map, figures) and start jobs; a job
//! and its VPs are controlled (killed, moved, checkpointed, restarted) by
//! the user who started it; the virtual machine itself (halting it, taking
//! a host back, join tokens) by its own user and root, who control every
//! job too.
//!
//! What lives here: the rule, and noting who started a job. What does not:
//! learning a caller's uid (the server, from the socket's credentials).

use libmig::msg::{OwnerAction, Request, Response, Tid};

use super::{Master, Out, Requester};

impl Master {
    /// The user the virtual machine runs as (its daemons' uid).
    pub fn set_admin_uid(&mut self, uid: u32) {
        self.admin_uid = uid;
    }

    /// `control` for a request of local user `uid`: refused when that user
    /// may not, else carried out (a job it starts is noted as theirs).
    pub fn control_by(
        &mut self,
        uid: u32,
        from: Requester,
        from_host: &str,
        req: Request,
    ) -> Vec<Out> {
        if let Some(why) = self.refusal(uid, &req) {
            return vec![Out::Reply(
                from,
                Response::Error {
                    message: format!("permission denied: {why}"),
                },
            )];
        }
        let spawn = matches!(req, Request::Spawn(_));
        let out = self.control(from, from_host, req);
        if spawn && uid != self.admin_uid {
            for o in &out {
                if let Out::Reply(_, Response::Spawned { job, .. }) = o {
                    if let Some(j) = self.jobs.get_mut(job) {
                        j.uid = Some(uid);
                    }
                }
            }
        }
        self.settle_returns(out)
    }

    /// Why `uid` may not make `req`, if it may not.
    pub fn refusal(&self, uid: u32, req: &Request) -> Option<String> {
        if uid == 0 || uid == self.admin_uid {
            return None;
        }
        let admin = self.admin_uid;
        let job_of = |target: &str| -> Option<String> {
            if self.jobs.contains_key(target) {
                return Some(target.to_string());
            }
            let hex = target.trim_start_matches('t').trim_start_matches("0x");
            let tid = Tid::from_str_radix(hex, 16).ok()?;
            self.tids.get(&tid).map(|(job, _)| job.clone())
        };
        let theirs = |target: &str| match job_of(target) {
            // Unknown: the request itself says so.
            None => {
                // An ended job's output is its user's too.
                let owner = self.history.find(target)?.uid.unwrap_or(admin);
                (owner != uid).then(|| {
                    format!("job {target} belonged to uid {owner}; uid {uid} sees only its own")
                })
            }
            Some(job) => {
                let owner = self.jobs.get(&job).and_then(|j| j.uid).unwrap_or(admin);
                (owner != uid).then(|| {
                    format!(
                        "job {job} belongs to uid {owner}; uid {uid} controls only its own jobs"
                    )
                })
            }
        };
        match req {
            Request::Hosts
            | Request::Ps
            | Request::Map
            | Request::Stats
            | Request::Timeline
            | Request::Jobs => None,
            Request::Wait { job } | Request::Logs { job, .. } => theirs(job),
            Request::Owner {
                action: OwnerAction::Status,
                ..
            } => None,
            Request::Spawn(_) if admin == 0 => Some(format!(
                "this daemon runs as root and does not run uid {uid}'s programs as root; run \
                 the shared daemon as a service user"
            )),
            Request::Spawn(_) => None,
            Request::Kill { target } => theirs(target),
            Request::Migrate { tid, .. } => theirs(tid),
            Request::Checkpoint { job }
            | Request::Restart { job }
            | Request::Input { job, .. }
            | Request::Suspend { job }
            | Request::Resume { job } => theirs(job),
            Request::Owner { .. }
            | Request::Halt
            | Request::Delete { .. }
            | Request::TokenCreate { .. }
            | Request::TokenList
            | Request::TokenRevoke { .. } => Some(format!(
                "only uid {admin} (the virtual machine's user) and root may do that"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use libmig::msg::{ToHost, VpCall, VpRet};

    use super::super::tests::{spec, Cluster};
    use super::*;

    fn says(out: &[Out], words: &str) -> bool {
        out.iter().any(
            |o| matches!(o, Out::Reply(_, Response::Error { message }) if message.contains(words)),
        )
    }

    #[test]
    fn users_control_their_own_jobs_and_root_and_the_owner_control_all() {
        let mut c = Cluster::new(2);
        c.m.set_admin_uid(1000);
        let out =
            c.m.control_by(2000, Requester::Local(1), "h0", Request::Spawn(spec(1)));
        let job = out
            .iter()
            .find_map(|o| match o {
                Out::Reply(_, Response::Spawned { job, .. }) => Some(job.clone()),
                _ => None,
            })
            .expect("spawned");
        let kill = |target: &str| Request::Kill {
            target: target.into(),
        };
        // Another user may look, not touch.
        let out = c.m.control_by(3000, Requester::Local(1), "h0", kill(&job));
        assert!(says(&out, "belongs to uid 2000"), "{out:?}");
        let out = c.m.control_by(3000, Requester::Local(1), "h0", Request::Ps);
        assert!(!says(&out, "permission denied"));
        let out =
            c.m.control_by(3000, Requester::Local(1), "h0", Request::Halt);
        assert!(says(&out, "only uid 1000"));
        let out = c.m.control_by(
            3000,
            Requester::Local(1),
            "h0",
            Request::Checkpoint { job: job.clone() },
        );
        assert!(says(&out, "permission denied"));
        // Its owner, the VM's user and root may.
        for uid in [2000, 1000, 0] {
            let out = c.m.control_by(uid, Requester::Local(1), "h0", Request::Ps);
            assert!(!says(&out, "permission denied"), "uid {uid}");
        }
        let out = c.m.control_by(2000, Requester::Local(1), "h0", kill(&job));
        assert!(!says(&out, "permission denied"), "{out:?}");
        // A root daemon runs no other user's program.
        c.m.set_admin_uid(0);
        let out =
            c.m.control_by(2000, Requester::Local(1), "h0", Request::Spawn(spec(1)));
        assert!(says(&out, "runs as root"), "{out:?}");
    }

    #[test]
    fn a_vp_signals_or_kills_only_vps_of_its_own_user() {
        let mut c = Cluster::new(2);
        c.m.set_admin_uid(1000);
        let mut tids_of = |uid: u32| {
            let out =
                c.m.control_by(uid, Requester::Local(1), "h0", Request::Spawn(spec(1)));
            out.iter()
                .find_map(|o| match o {
                    Out::Reply(_, Response::Spawned { tids, .. }) => Some(tids[0]),
                    _ => None,
                })
                .expect("spawned")
        };
        let (mine, other, theirs) = (tids_of(2000), tids_of(2000), tids_of(3000));
        let error = |out: &[Out]| {
            out.iter().find_map(|o| match o {
                Out::ToHost(
                    _,
                    ToHost::VpReturn {
                        ret: VpRet::Error(e),
                        ..
                    },
                ) => Some(e.clone()),
                _ => None,
            })
        };
        let signal = |tid| VpCall::Signal {
            tid,
            signal: libc::SIGUSR1,
        };
        let out = c.m.vp_call("h0", mine, 1, signal(theirs));
        assert!(
            error(&out).is_some_and(|e| e.contains("another user")),
            "{out:?}"
        );
        let out = c.m.vp_call("h0", mine, 2, VpCall::Kill { tid: theirs });
        assert!(
            error(&out).is_some_and(|e| e.contains("another user")),
            "{out:?}"
        );
        let out = c.m.vp_call("h0", mine, 3, signal(other));
        assert_eq!(error(&out), None, "{out:?}");
        assert!(
            out.iter()
                .any(|o| matches!(o, Out::ToHost(_, ToHost::Signal { tid, .. }) if *tid == other)),
            "{out:?}"
        );
        let out = c.m.vp_call(
            "h0",
            mine,
            4,
            VpCall::Signal {
                tid: other,
                signal: libc::SIGSTOP,
            },
        );
        assert!(
            error(&out).is_some_and(|e| e.contains("may not be sent")),
            "{out:?}"
        );
    }
}
