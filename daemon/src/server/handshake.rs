//! The handshake on the loop's connections: the `libmig::handshake`
//! machines fed with what arrives, their answers sent, and a data link that
//! is up used for what waited for it.

use super::*;
use libmig::handshake::{Answer, Client, Server};

impl Daemon {
    /// A message from a daemon that connected to us and is not yet
    /// authenticated.
    pub(super) fn accepting(&mut self, t: Token, mut hs: Server, msg: &PeerMsg) {
        match hs.on(&self.key, msg) {
            Answer::Send(reply) => {
                if let Some(c) = self.conns.get_mut(&t) {
                    c.kind = Kind::Accepting(hs);
                }
                self.send_peer(t, &reply);
            }
            Answer::Done(welcome) => {
                if let Some(c) = self.conns.get_mut(&t) {
                    c.kind = Kind::Peer { host: None };
                    c.dec.limit(libmig::frame::MAX_BODY);
                }
                if let Some(w) = welcome {
                    self.send_peer(t, &w);
                }
            }
            Answer::Refuse(reason) => self.refuse(t, &reason),
        }
    }

    /// A message from `host`, to which we are opening a data link.
    pub(super) fn dialling(&mut self, t: Token, host: String, mut client: Client, msg: &PeerMsg) {
        match client.on(&self.key, msg) {
            Answer::Send(reply) => {
                if let Some(c) = self.conns.get_mut(&t) {
                    c.kind = Kind::Dialling { host, client };
                }
                self.send_peer(t, &reply);
            }
            Answer::Done(_) => self.data_link_up(t, host),
            Answer::Refuse(reason) if matches!(msg, PeerMsg::Refused { .. }) => {
                log!("{host} refused a data link: {reason}");
                self.close(t, &reason);
            }
            Answer::Refuse(reason) => self.refuse(t, &format!("{host}: {reason}")),
        }
    }

    /// The data link `t` to `host` is up: what waited for it goes.
    fn data_link_up(&mut self, t: Token, host: String) {
        if let Some(c) = self.conns.get_mut(&t) {
            c.kind = Kind::Data { host: host.clone() };
            c.dec.limit(libmig::frame::MAX_BODY);
        }
        log!("data link to {host}");
        let name = self.facts.name.clone();
        self.send_peer(t, &PeerMsg::Hi { name });
        for p in self.dialling.remove(&t).unwrap_or_default() {
            match p {
                Pending::Msg(env, body) => self.route(env, body, None),
                Pending::Image(start, image) => self.send_image(&host, start, image, None),
                Pending::Peer(msg) => self.send_peer(t, &msg),
            }
        }
    }
}
