//! Flow control's bookkeeping: who waits for whom.
//!
//! A connection with too much queued for it (or a VP with too many bytes
//! of shared buffers passed and not yet taken in) pauses those who send to
//! it until it is down to the low mark; messages held for a VP that cannot
//! be reached yet pause their senders past the high mark, until they go
//! on. What lives here: the water marks and the waiting lists, answering
//! which senders to pause or resume. What does not: connections themselves
//! (the server pauses and resumes them as told).

use std::collections::HashMap;

use libmig::msg::Tid;
use mio::Token;

/// A connection with this much queued for it pauses those who send to it...
pub const HIGH_WATER: usize = 8 << 20;
/// ...until it is down to this.
pub const LOW_WATER: usize = 2 << 20;
/// A VP with this much in memfd payloads passed and not yet taken in
/// pauses those who send to it...
pub const FD_HIGH_WATER: usize = 64 << 20;
/// ...until it is down to this.
pub const FD_LOW_WATER: usize = 16 << 20;

/// Who waits for whom.
#[derive(Debug, Default)]
pub struct Flow {
    /// Per connection, the senders paused until it drains.
    waiting_on: HashMap<Token, Vec<Token>>,
    /// Per VP not reachable yet, the senders paused until the messages
    /// held for it go on.
    waiting_on_held: HashMap<Tid, Vec<Token>>,
    /// Per VP connection, bytes of shared buffers passed and not yet taken in.
    fd_inflight: HashMap<Token, usize>,
    /// Per VP connection, unread messages it carried over a move.
    backlog: HashMap<Token, usize>,
    /// Per VP that moved from outside, the credit its image gave it for
    /// its shared buffers still held here: their credit when they are
    /// taken in is not given again.
    prepaid: HashMap<Tid, u64>,
}

impl Flow {
    /// Has `t` (with `queued` bytes queued for it) so much waiting for it
    /// that its senders must wait?
    pub fn full(&self, t: Token, queued: usize) -> bool {
        queued > HIGH_WATER
            || self.fd_inflight.get(&t).is_some_and(|&n| n > FD_HIGH_WATER)
            || self.backlog.get(&t).is_some_and(|&n| n > HIGH_WATER)
    }

    /// The VP on `t` holds `bytes` unread from before its move.
    pub fn backlog(&mut self, t: Token, bytes: usize) {
        if bytes == 0 {
            self.backlog.remove(&t);
        } else {
            self.backlog.insert(t, bytes);
        }
    }

    /// Are messages held for a VP so many (`held` bytes) that their
    /// senders must wait?
    pub fn held_too_much(held: usize) -> bool {
        held > HIGH_WATER
    }

    /// `src`, just paused, waits until `dest` drains.
    pub fn wait_on(&mut self, dest: Token, src: Token) {
        self.waiting_on.entry(dest).or_default().push(src);
    }

    /// `src`, just paused, waits until what is held for `tid` goes on.
    pub fn wait_on_held(&mut self, tid: Tid, src: Token) {
        self.waiting_on_held.entry(tid).or_default().push(src);
    }

    /// `t` wrote and has `queued` bytes left: if that is down to the low
    /// marks, the senders that waited for it, to resume.
    pub fn drained(&mut self, t: Token, queued: usize) -> Vec<Token> {
        let low = queued <= LOW_WATER
            && self.fd_inflight.get(&t).is_none_or(|&n| n <= FD_LOW_WATER)
            && self.backlog.get(&t).is_none_or(|&n| n <= LOW_WATER);
        if low {
            self.waiting_on.remove(&t).unwrap_or_default()
        } else {
            Vec::new()
        }
    }

    /// What was held for `tid` went on: the senders that waited, to resume.
    pub fn held_released(&mut self, tid: Tid) -> Vec<Token> {
        self.waiting_on_held.remove(&tid).unwrap_or_default()
    }

    /// A shared buffer of `len` bytes was passed to the VP on `t`.
    pub fn passed(&mut self, t: Token, len: usize) {
        *self.fd_inflight.entry(t).or_default() += len;
    }

    /// The VP on `t` took in `bytes` of the buffers passed to it.
    pub fn consumed(&mut self, t: Token, bytes: usize) {
        if let Some(n) = self.fd_inflight.get_mut(&t) {
            *n = n.saturating_sub(bytes);
        }
    }

    /// Nothing more will be written to `t` (it failed or closed): the
    /// senders that waited for it, to resume.
    pub fn gave_up(&mut self, t: Token) -> Vec<Token> {
        self.waiting_on.remove(&t).unwrap_or_default()
    }

    /// VP `tid`'s image credits it with `bytes` of the shared buffers it
    /// passed that are still held here.
    pub fn prepay(&mut self, tid: Tid, bytes: u64) {
        if bytes > 0 {
            *self.prepaid.entry(tid).or_default() += bytes;
        }
    }

    /// The image that credited `tid` with `bytes` was not used (its move
    /// was called off): the part of them not yet absorbed by their taking
    /// in, whose credit is given as they are taken in (the caller gives
    /// the rest at once).
    pub fn unprepay(&mut self, tid: Tid, bytes: u64) -> u64 {
        let Some(p) = self.prepaid.get_mut(&tid) else {
            return 0;
        };
        let left = (*p).min(bytes);
        *p -= left;
        if *p == 0 {
            self.prepaid.remove(&tid);
        }
        left
    }

    /// `bytes` of a shared buffer VP `tid` passed were taken in: the credit
    /// still to give it (none of what an image of it gave already).
    pub fn credit_due(&mut self, tid: Tid, bytes: u64) -> u64 {
        let Some(p) = self.prepaid.get_mut(&tid) else {
            return bytes;
        };
        let paid = (*p).min(bytes);
        *p -= paid;
        if *p == 0 {
            self.prepaid.remove(&tid);
        }
        bytes - paid
    }

    /// VP `tid` has ended: nothing is owed to it.
    pub fn forget(&mut self, tid: Tid) {
        self.prepaid.remove(&tid);
    }

    /// `t` closed: forgotten; the senders that waited for it, to resume.
    pub fn closed(&mut self, t: Token) -> Vec<Token> {
        self.fd_inflight.remove(&t);
        self.backlog.remove(&t);
        self.gave_up(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credit_an_image_gave_is_not_given_again() {
        let mut f = Flow::default();
        assert_eq!(f.credit_due(7, 100), 100);
        f.prepay(7, 300);
        f.prepay(7, 0);
        assert_eq!(f.credit_due(7, 200), 0);
        assert_eq!(f.credit_due(7, 250), 150, "100 left of what was paid");
        assert_eq!(f.credit_due(7, 50), 50);
        // A move called off: its image's credit is given as usual, that
        // part of it already absorbed at once by the caller.
        f.prepay(8, 300);
        f.prepay(8, 100);
        assert_eq!(f.unprepay(8, 100), 100);
        assert_eq!(f.credit_due(8, 400), 100);
        f.prepay(8, 100);
        assert_eq!(f.credit_due(8, 60), 0);
        assert_eq!(f.unprepay(8, 100), 40, "60 absorbed meanwhile");
        assert_eq!(f.credit_due(8, 10), 10);
        f.prepay(9, 10);
        f.forget(9);
        assert_eq!(f.credit_due(9, 10), 10);
    }

    #[test]
    fn senders_wait_until_the_receiver_is_down_to_the_low_mark() {
        let mut f = Flow::default();
        let (dest, a, b) = (Token(1), Token(2), Token(3));
        assert!(f.full(dest, HIGH_WATER + 1));
        assert!(!f.full(dest, HIGH_WATER));
        f.wait_on(dest, a);
        f.wait_on(dest, b);
        assert!(f.drained(dest, LOW_WATER + 1).is_empty());
        assert_eq!(f.drained(dest, LOW_WATER), vec![a, b]);
        assert!(f.drained(dest, 0).is_empty(), "resumed once");
    }

    #[test]
    fn shared_buffers_not_taken_in_count_as_queued() {
        let mut f = Flow::default();
        let (vp, src) = (Token(1), Token(2));
        f.passed(vp, FD_HIGH_WATER + 1);
        assert!(f.full(vp, 0));
        f.wait_on(vp, src);
        f.consumed(vp, FD_HIGH_WATER + 1 - FD_LOW_WATER - 1);
        assert!(f.drained(vp, 0).is_empty(), "still above the low mark");
        f.consumed(vp, 1);
        assert_eq!(f.drained(vp, 0), vec![src]);
        f.consumed(vp, usize::MAX);
        assert!(!f.full(vp, 0));
    }

    #[test]
    fn what_a_moved_vp_carries_unread_counts_until_it_reads_it() {
        let mut f = Flow::default();
        let (vp, src) = (Token(1), Token(2));
        f.backlog(vp, HIGH_WATER + 1);
        assert!(f.full(vp, 0));
        f.wait_on(vp, src);
        f.backlog(vp, LOW_WATER + 1);
        assert!(f.drained(vp, 0).is_empty(), "still above the low mark");
        f.backlog(vp, 0);
        assert_eq!(f.drained(vp, 0), vec![src]);
        assert!(!f.full(vp, 0));
    }

    #[test]
    fn a_closed_receiver_or_released_hold_lets_everyone_go_on() {
        let mut f = Flow::default();
        f.wait_on(Token(1), Token(2));
        f.wait_on_held(0x40001, Token(3));
        assert!(Flow::held_too_much(HIGH_WATER + 1));
        assert_eq!(f.closed(Token(1)), vec![Token(2)]);
        assert_eq!(f.held_released(0x40001), vec![Token(3)]);
        assert!(f.held_released(0x40001).is_empty());
    }
}
