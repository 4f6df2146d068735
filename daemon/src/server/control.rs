//! Requests from `mig` on the local control socket: answered by the master,
//! forwarded to it by a worker. A spawn's program is looked for here first,
//! on this host's disk, where the user asked for it (the master has no disk
//! of its own to look at).

use libmig::msg::{Request, Response, ToMaster};
use mio::Token;

use super::Daemon;
use crate::master::Requester;
use crate::switcher::wall_ns;

impl Daemon {
    /// A request on local control connection `t`.
    pub(super) fn control(&mut self, t: Token, req: Request) {
        let uid = self
            .net
            .conns
            .get(&t)
            .and_then(|c| c.uid)
            .unwrap_or(self.uid);
        if let Some(resp) = self.answer_logs(uid, &req) {
            return self.send_resp(t, &resp);
        }
        if let Some(message) = self.spawn_refused_here(uid, &req) {
            return self.send_resp(t, &Response::Error { message });
        }
        if let Some(req) = self.ask_for_bids(t, uid, req) {
            self.pass_on(t, uid, req);
        }
    }

    /// Request `req` of `uid` on control connection `t`, ready for the
    /// master: answered by it here, or forwarded to it.
    pub(super) fn pass_on(&mut self, t: Token, uid: u32, req: Request) {
        let me = self.facts.name.clone();
        if let Some(m) = self.role.master() {
            m.set_wall(wall_ns());
            let out = m.control_by(uid, Requester::Local(t.0), &me, req);
            self.carry_out_when_committed(out);
        } else if let Some(link) = self.role.link() {
            let id = self.proxied.forward(t);
            self.send_peer(link, ToMaster::Control { id, req, uid });
        } else if self.awaiting_master()
            && matches!(req, Request::Halt)
            && (uid == self.uid || uid == 0)
        {
            // A worker waits for a master however long it takes: told to
            // stop meanwhile, it stops (no master can pass it on).
            self.send_resp(
                t,
                &Response::Ok {
                    message: format!(
                        "{} has no master now: halting this host only",
                        self.facts.name
                    ),
                },
            );
            self.begin_halt();
        } else if let Some(message) = self.no_master_for_long() {
            self.send_resp(t, &Response::Error { message });
        } else if self.awaiting_master() {
            // Forwarded to whoever is elected (see `give_up_kept_requests`).
            let id = self.proxied.forward(t);
            self.report(ToMaster::Control { id, req, uid });
        } else {
            self.send_resp(
                t,
                &Response::Error {
                    message: "this daemon has lost its master".into(),
                },
            );
        }
    }

    /// Why `req`, a spawn by user `uid`, is refused here, if it is: its
    /// program (for this host's architecture) is not found from the spawn's
    /// working directory or on its `PATH`. What the request alone shows
    /// wrong (no program, a `MIG_*` variable, none for this architecture)
    /// the master says, the same way from every host; a spawn the master
    /// refuses whatever the program (another user's, on a daemon running as
    /// root) is not looked at.
    fn spawn_refused_here(&self, uid: u32, req: &Request) -> Option<String> {
        let Request::Spawn(spec) = req else {
            return None;
        };
        if self.uid == 0 && uid != 0 {
            return None;
        }
        let program = crate::master::check_program(spec, &self.facts.arch).ok()?;
        crate::host::missing_program(&program, &spec.cwd, &spec.env)
    }

    /// On the master, `Request::Logs` from user `uid`: the job's kept
    /// output from its offset (`None`: not that request, or not the master,
    /// which forwards it).
    pub(super) fn answer_logs(&mut self, uid: u32, req: &Request) -> Option<Response> {
        let Request::Logs { job, offset } = req else {
            return None;
        };
        let m = self.role.master()?;
        if let Some(why) = m.refusal(uid, req) {
            return Some(Response::Error {
                message: format!("permission denied: {why}"),
            });
        }
        let Some(ended) = m.job_ended(job) else {
            return Some(Response::Error {
                message: format!("no job {job} (running, or among the last ended ones)"),
            });
        };
        Some(match self.job_files.read_output(job, *offset) {
            Ok((data, next)) => Response::Log {
                ended: ended && data.len() < crate::job_files::LOG_CHUNK,
                data,
                next,
            },
            Err(e) => Response::Error {
                message: format!("cannot read job {job}'s output: {e}"),
            },
        })
    }
}
