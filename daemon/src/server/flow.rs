//! Flow control: a receiver that falls behind pauses those who send to it,
//! and messages held for a VP not reachable yet hold their senders back.

use super::*;

impl Daemon {
    /// `src` sent to `dest`, which has too much queued: stop reading `src`
    /// until `dest` drains.
    pub(super) fn pause(&mut self, src: Token, dest: Token) {
        if src == dest {
            return;
        }
        if let Some(c) = self.conns.get_mut(&src) {
            if !c.paused {
                c.paused = true;
                self.blocked.entry(dest).or_default().push(src);
            }
        }
    }

    pub(super) fn resume(&mut self, src: Token) {
        if let Some(c) = self.conns.get_mut(&src) {
            if c.paused {
                c.paused = false;
                self.conn_ready(src);
            }
        }
    }

    /// After `t` wrote: if it is down to the low mark, its senders go on.
    pub(super) fn maybe_resume(&mut self, t: Token) {
        let low = self.conns.get(&t).is_none_or(|c| c.queued() <= LOW_WATER)
            && self.fd_inflight.get(&t).is_none_or(|&n| n <= FD_LOW_WATER);
        if low {
            for src in self.blocked.remove(&t).unwrap_or_default() {
                self.resume(src);
            }
        }
    }

    /// A memfd payload of a local sender leaves this daemon (passed on or
    /// dropped): the sender may send that much more.
    pub(super) fn credit(&mut self, env: &Envelope, body: &Body) {
        if let (Body::Fd(_, len), Some(&t)) = (body, self.vp_conns.get(&env.from)) {
            let bytes = *len as u64;
            self.send_vp(t, &VpMsg::Credit { bytes });
        }
    }

    /// Keep a message for a VP not reachable yet; past the high mark, its
    /// sender waits until the VP can be reached (flow control for held
    /// messages too).
    pub(super) fn hold(&mut self, env: Envelope, body: Body, src: Option<Token>) {
        let to = env.to;
        self.router.hold(env, body);
        if let Some(src) = src {
            if self.router.held_bytes(to) > HIGH_WATER {
                if let Some(c) = self.conns.get_mut(&src).filter(|c| !c.paused) {
                    c.paused = true;
                    self.held_blocked.entry(to).or_default().push(src);
                }
            }
        }
    }

    /// Messages held for `tid` went on: the senders paused for them go on.
    pub(super) fn released(&mut self, tid: Tid) {
        for src in self.held_blocked.remove(&tid).unwrap_or_default() {
            self.resume(src);
        }
    }

    /// Has `t` so much waiting for it that its senders must wait?
    pub(super) fn full(&self, t: Token) -> bool {
        self.conns.get(&t).is_some_and(|c| c.queued() > HIGH_WATER)
            || self.fd_inflight.get(&t).is_some_and(|&n| n > FD_HIGH_WATER)
    }
}
