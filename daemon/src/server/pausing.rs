//! Flow control on the loop's connections: pausing and resuming senders
//! as the `Flow` bookkeeping (`crate::flow`) says.

use libmig::msg::{Envelope, Tid, VpMsg};
use mio::Token;

use super::Daemon;
use crate::conn::Conn;
use crate::flow::Flow;
use crate::route::Body;

impl Daemon {
    /// `src` sent to `dest`, which has too much queued: stop reading `src`
    /// until `dest` drains.
    pub(super) fn pause(&mut self, src: Token, dest: Token) {
        if src == dest {
            return;
        }
        if let Some(c) = self.net.conns.get_mut(&src).filter(|c| !c.paused) {
            c.paused = true;
            self.flow.wait_on(dest, src);
        }
    }

    /// Read `src` again.
    pub(super) fn resume(&mut self, src: Token) {
        if let Some(c) = self.net.conns.get_mut(&src).filter(|c| c.paused) {
            c.paused = false;
            // A close while it was paused raised no event it will see again.
            self.conn_ready(src, true);
        }
    }

    /// Resume each of `senders`.
    pub(super) fn resume_all(&mut self, senders: Vec<Token>) {
        for src in senders {
            self.resume(src);
        }
    }

    /// After `t` wrote: if it is down to the low mark, its senders go on.
    pub(super) fn maybe_resume(&mut self, t: Token) {
        let queued = self.net.conns.get(&t).map_or(0, Conn::queued);
        let senders = self.flow.drained(t, queued);
        self.resume_all(senders);
    }

    /// A memfd payload of a local sender leaves this daemon (passed on or
    /// dropped): the sender may send that much more.
    pub(super) fn credit(&mut self, env: &Envelope, body: &Body) {
        let Body::Fd(_, len) = body else { return };
        // (Not what an image of it credited it with already.)
        let bytes = self.flow.credit_due(env.from, *len as u64);
        if let (true, Some(&t)) = (bytes > 0, self.local.vp_conns.get(&env.from)) {
            if let Some(v) = self.local.vps.by_tid.get_mut(&env.from) {
                v.uncredited = v.uncredited.saturating_sub(bytes);
            }
            self.send_vp(t, &VpMsg::Credit { bytes });
        }
    }

    /// Keep a message for a VP not reachable yet; past the high mark, its
    /// sender waits until the VP can be reached (flow control for held
    /// messages too).
    pub(super) fn hold(&mut self, env: Envelope, body: Body, src: Option<Token>) {
        let to = env.to;
        self.router.hold(env, body);
        let Some(src) = src.filter(|_| Flow::held_too_much(self.router.held_bytes(to))) else {
            return;
        };
        if let Some(c) = self.net.conns.get_mut(&src).filter(|c| !c.paused) {
            c.paused = true;
            self.flow.wait_on_held(to, src);
        }
    }

    /// Messages held for `tid` went on: the senders paused for them go on.
    pub(super) fn released(&mut self, tid: Tid) {
        let senders = self.flow.held_released(tid);
        self.resume_all(senders);
    }

    /// Has `t` so much waiting for it that its senders must wait?
    pub(super) fn full(&self, t: Token) -> bool {
        self.flow
            .full(t, self.net.conns.get(&t).map_or(0, Conn::queued))
    }
}
