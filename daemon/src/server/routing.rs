//! Moving a message one step on: to a local VP, to another host, into the
//! hold; telling a sender what could not be delivered; the directory of
//! where VPs are; the master's answers to VPs' calls.

use libmig::msg::{DataLink, Envelope, Loc, PeerMsg, Tid, ToMaster, VpMsg, VpRet, SYSTEM};
use libmig::payload::FD_PAYLOAD;
use libmig::{frame, Payload};
use mio::Token;

use super::net::Pending;
use super::Daemon;
use crate::conn::Kind;
use crate::route::{Body, Way};
use crate::{debug, warn};

impl Daemon {
    /// Move a message one step on: to a local VP, to another host, or into
    /// the hold. `src` (the connection it came on) is paused if the next
    /// connection is full.
    pub(super) fn route(&mut self, env: Envelope, body: Body, src: Option<Token>) {
        if self.router.is_stale(&env) {
            // From a run its job has gone back on: never delivered.
            return self.credit(&env, &body);
        }
        let dest = match self.router.way(env.to) {
            // A VP whose socket broke is ending: its exit decides.
            Way::Local(d) if self.net.conns.get(&d).is_none_or(|c| c.broken) => {
                return self.hold(env, body, src)
            }
            Way::Local(d) => d,
            // (A host whose last dial just failed is not dialled again
            // for each message: see `DIAL_AGAIN_AFTER`.)
            Way::Remote(h) if self.net.dial_failed_lately(&h) => {
                self.credit(&env, &body);
                return self.undeliverable(env, &format!("host {h} cannot be reached"));
            }
            Way::Remote(h) => match self.link_to(&h) {
                Some(d) if self.net.is_data_link(d) => d,
                Some(d) => {
                    return self
                        .net
                        .dialling
                        .entry(d)
                        .or_default()
                        .push(Pending::Msg(env, body))
                }
                None => {
                    self.credit(&env, &body);
                    return self.undeliverable(env, &format!("host {h} cannot be reached"));
                }
            },
            Way::Hold => return self.hold(env, body, src),
            Way::Locate => {
                let to = env.to;
                self.hold(env, body, src);
                if self.router.ask(to) {
                    self.report(ToMaster::Locate { tid: to });
                }
                return;
            }
            Way::Gone => {
                self.credit(&env, &body);
                return self.undeliverable(env, &gone(env.to));
            }
        };
        let local = self
            .net
            .conns
            .get(&dest)
            .is_some_and(|c| matches!(c.kind, Kind::Vp { .. }));
        let (body, lent) = match body {
            // A large payload from another host reaches its VP in one of
            // this daemon's pooled buffers: one copy here instead of one
            // into the socket and one out of it.
            Body::Bytes(b) if local && b.len() >= FD_PAYLOAD => {
                match self.net.outbox.stage(env.to, &[&b]) {
                    Ok(fd) => {
                        let len = b.len();
                        // Its buffer takes in the next large message of that link.
                        if let Some(c) = src.and_then(|s| self.net.conns.get_mut(&s)) {
                            c.dec.recycle(b);
                        }
                        (Body::Fd(fd, len), true)
                    }
                    Err(_) => (Body::Bytes(b), false),
                }
            }
            body @ (Body::Bytes(_) | Body::Fd(..)) => (body, false),
        };
        // (A buffer of this daemon's own, lent, was no VP's to credit.)
        if !lent {
            self.credit(&env, &body);
        }
        self.metrics.routed(local, body.len());
        let (head, payload, fd) = match (local, body) {
            (true, Body::Fd(fd, len)) => {
                self.flow.passed(dest, len);
                let msg = VpMsg::DeliverFd {
                    env,
                    len: len as u64,
                    lent,
                };
                (
                    frame::encode_head(&msg, 0),
                    Payload::from(Vec::new()),
                    Some(fd),
                )
            }
            (true, Body::Bytes(b)) => {
                let head = frame::encode_head(&VpMsg::Deliver(env), b.len());
                (head, b.into(), None)
            }
            (false, body) => {
                // Another host: the bytes go over TCP, written straight
                // from the memfd's mapping if they came as one.
                let p = match body {
                    Body::Bytes(b) => Payload::from(b),
                    Body::Fd(fd, len) => match self.net.inbox.read_in_place(fd, len) {
                        Ok(p) => p,
                        Err(e) => {
                            return self.undeliverable(env, &format!("reading its payload: {e}"))
                        }
                    },
                };
                (
                    frame::encode_head(&PeerMsg::Data(DataLink::Deliver(env)), p.len()),
                    p,
                    None,
                )
            }
        };
        let head = match head {
            Ok(h) => h,
            Err(e) => return warn!("cannot encode a message: {e}"),
        };
        let failed = match self.net.conns.get_mut(&dest) {
            Some(c) => c
                .send_parts(head, payload, fd, self.net.poll.registry(), dest)
                .err(),
            None => return,
        };
        if let Some(e) = failed {
            return self.write_failed(dest, &e);
        }
        if local {
            // Handed to it: counted, and a VP paused for a job checkpoint
            // may now have all it waits for.
            let to = env.to;
            if let Some(v) = self.local.vps.by_tid.get_mut(&to) {
                v.ledger.given(&env);
                if v.snap.is_some() {
                    self.snap_when_given(to);
                }
            }
        }
        if let Some(src) = src {
            if self.full(dest) {
                self.pause(src, dest);
            }
        }
    }

    /// Tell a message's sender it could not be delivered.
    pub(super) fn undeliverable(&mut self, env: Envelope, reason: &str) {
        // Nobody to tell: a notice, or a message of a run its job has gone
        // back on (the VP of that Tid now is a restored one, which never
        // sent it).
        if env.from == SYSTEM || self.router.is_stale(&env) {
            return;
        }
        let way = match self.local.vp_conns.get(&env.from) {
            Some(&t) => Way::Local(t),
            None => self.router.way(env.from),
        };
        match way {
            Way::Local(t) => self.send_vp(
                t,
                &VpMsg::Undeliverable {
                    to: env.to,
                    tag: env.tag,
                    reason: reason.to_string(),
                },
            ),
            Way::Remote(h) => match self.data_link(&h) {
                Some(t) => self.send_peer(
                    t,
                    DataLink::Undeliverable {
                        env,
                        reason: reason.to_string(),
                    },
                ),
                None => warn!(
                    "cannot tell t{:x} that a message was not delivered: {reason}",
                    env.from
                ),
            },
            // Moving, unknown here, or gone: nobody to tell.
            Way::Hold | Way::Locate | Way::Gone => {}
        }
    }

    /// The master says where VPs are: held messages and confirmations go on.
    pub(super) fn directory(&mut self, entries: Vec<(Tid, Loc)>) {
        let tids: Vec<Tid> = entries.iter().map(|(t, _)| *t).collect();
        // A VP that runs somewhere (or ended) needs no image kept here.
        for (tid, loc) in &entries {
            if *loc != Loc::Waiting {
                self.drop_sent(*tid);
            }
            if *loc == Loc::Gone {
                self.flow.forget(*tid);
            }
        }
        let (freed, confirms) = self.router.update(entries);
        for (from, to) in confirms {
            if self.router.way(to) != Way::Gone {
                if let Some(&t) = self.local.vp_conns.get(&from) {
                    self.send_vp(t, &VpMsg::Confirmed { to });
                }
            }
        }
        for (env, payload) in freed {
            self.route(env, payload, None);
        }
        for tid in tids {
            self.released(tid);
        }
    }

    /// The master's answer `ret` to call `id` of VP `tid`: to the VP, if it
    /// is here and waits for it (a VP moved here waits for the calls its
    /// image says, `Ledger::calls`); back to the master if the VP is not
    /// here to take it (it left, or its words were taken for its move:
    /// the master keeps it until the VP runs again).
    pub(super) fn vp_return(&mut self, tid: Tid, id: u64, ret: VpRet) {
        let Some(v) = self
            .local
            .vps
            .by_tid
            .get_mut(&tid)
            .filter(|v| v.carried.is_none())
        else {
            debug!(
                "VP t{tid:x} is not here to take the answer to its call {id}: back to the master"
            );
            return self.report(ToMaster::ReturnBack { tid, id, ret });
        };
        let waits = v.ledger.calls.remove(&id);
        match self.local.vp_conns.get(&tid) {
            Some(&t) if waits => self.send_vp(t, &VpMsg::Return { id, ret }),
            _ => {
                debug!("an answer to call {id} of VP t{tid:x}, which does not wait for it: dropped")
            }
        }
    }
}

pub(super) fn gone(tid: Tid) -> String {
    format!("VP t{tid:x} has exited or never existed")
}
