//! The handshake on the loop's connections: the `libmig::handshake`
//! machines fed with what arrives, their answers sent, and a data link that
//! is up used for what waited for it.

use libmig::handshake::Answer;
use libmig::msg::{Handshake, PeerMsg};
use mio::Token;

use super::net::Pending;
use super::Daemon;
use crate::conn::{Handshake as Machine, Kind};
use crate::{debug, log};

impl Daemon {
    /// A message from a daemon that connected to us and is not yet
    /// authenticated.
    pub(super) fn accepting(&mut self, t: Token, msg: PeerMsg) {
        let msg = match msg.into_handshake() {
            Ok(Handshake::JoinWithToken { id, suite, noise }) => {
                return self.join_with_token(t, &id, suite, &noise);
            }
            Ok(m) => m,
            Err(what) => return self.refuse(t, &format!("{what} before authentication")),
        };
        let Some(Machine::Accept(mut hs)) = self.net.conns.get_mut(&t).and_then(|c| c.hs.take())
        else {
            return self.refuse(t, "handshake out of turn");
        };
        match hs.on(&self.net.key, &msg) {
            Answer::Send(reply) => {
                if let Some(c) = self.net.conns.get_mut(&t) {
                    c.hs = Some(Machine::Accept(hs));
                }
                self.send_peer(t, reply);
            }
            Answer::Done(sealer, welcome) => {
                if let Some(c) = self.net.conns.get_mut(&t) {
                    c.kind = Kind::Peer { host: None };
                    c.dec.limit(libmig::frame::MAX_BODY);
                    if let Some(s) = sealer {
                        c.seal_with(s);
                    }
                }
                if let Some(w) = welcome {
                    self.send_peer(t, w);
                }
            }
            Answer::SendThenSeal(..) => self.refuse(t, "handshake out of turn"),
            Answer::Refuse(reason) => self.refuse(t, &reason),
        }
    }

    /// A message from `host`, to which we are opening a data link.
    pub(super) fn dialling(&mut self, t: Token, host: String, msg: PeerMsg) {
        let msg = match msg.into_handshake() {
            Ok(m) => m,
            Err(what) => {
                return self.refuse(t, &format!("{host}: unexpected {what} in the handshake"));
            }
        };
        let Some(Machine::Dial(mut client)) = self.net.conns.get_mut(&t).and_then(|c| c.hs.take())
        else {
            return self.refuse(t, "handshake out of turn");
        };
        match client.on(&self.net.key, &msg) {
            Answer::Send(reply) => {
                if let Some(c) = self.net.conns.get_mut(&t) {
                    c.hs = Some(Machine::Dial(client));
                }
                self.send_peer(t, reply);
            }
            Answer::SendThenSeal(proof, sealer) => {
                self.send_peer(t, proof);
                if let Some(c) = self.net.conns.get_mut(&t) {
                    c.hs = Some(Machine::Dial(client));
                    c.seal_with(sealer);
                }
            }
            Answer::Done(..) => self.data_link_up(t, host),
            Answer::Refuse(reason) if matches!(msg, Handshake::Refused { .. }) => {
                log!("{host} refused a data link: {reason}");
                self.close(t, &reason);
            }
            Answer::Refuse(reason) => self.refuse(t, &format!("{host}: {reason}")),
        }
    }

    /// The data link `t` to `host` is up: what waited for it goes.
    fn data_link_up(&mut self, t: Token, host: String) {
        if let Some(c) = self.net.conns.get_mut(&t) {
            c.kind = Kind::Data { host: host.clone() };
            c.dec.limit(libmig::frame::MAX_BODY);
        }
        debug!("data link to {host}");
        let name = self.facts.name.clone();
        self.send_peer(t, Handshake::Hi { name });
        for p in self.net.dialling.remove(&t).unwrap_or_default() {
            match p {
                Pending::Msg(env, body) => self.route(env, body, None),
                Pending::Peer(msg) => self.send_peer(t, msg),
            }
        }
    }
}
