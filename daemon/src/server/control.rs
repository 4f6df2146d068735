//! Requests from `mig` on the local control socket: answered by the master,
//! forwarded to it by a worker.

use super::*;

impl Daemon {
    /// A request on local control connection `t`.
    pub(super) fn control(&mut self, t: Token, req: Request) {
        let me = self.facts.name.clone();
        let uid = self.conns.get(&t).and_then(|c| c.uid).unwrap_or(self.uid);
        if let Some(m) = self.role.master() {
            m.set_wall(wall_ns());
            let out = m.control_by(uid, Requester::Local(t.0), &me, req);
            self.deliver(out);
        } else if let Some(link) = self.role.link() {
            let id = self.proxied.forward(t);
            self.send_peer(link, &PeerMsg::Control { id, req, uid });
        } else if self.awaiting_master() {
            // Forwarded to whoever is elected.
            let id = self.proxied.forward(t);
            self.report(PeerMsg::Control { id, req, uid });
        } else {
            self.send_resp(
                t,
                &Response::Error {
                    message: "this daemon has lost its master".into(),
                },
            );
        }
    }
}
