//! Where a message between VPs goes next, as one daemon sees it.
//!
//! Every daemon keeps the master's directory (each VP's host, or waiting, or
//! gone), its own VPs' connections, and messages it holds for VPs that are
//! not reachable yet (waiting for a processor, starting, or unknown here
//! until the master answers). It decides; the server moves the bytes. What
//! lives here: those tables and the decision. What does not: sockets.

use std::collections::{HashMap, HashSet, VecDeque};
use std::os::fd::OwnedFd;

use libmig::msg::{Envelope, Loc, Tid};
use mio::Token;

/// What to do with a message for a VP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Way {
    /// Deliver on this host's connection to the VP.
    Local(Token),
    /// Send to that host's daemon.
    Remote(String),
    /// Keep it until the VP can be reached.
    Hold,
    /// Keep it, and ask the master where the VP is.
    Locate,
    /// The VP does not exist (any more): tell the sender.
    Gone,
}

/// A message's payload as a daemon holds it: bytes, or the sealed memfd a
/// VP of this host passed (never read unless it must go to another host).
#[derive(Debug)]
pub enum Body {
    /// Bytes.
    Bytes(Vec<u8>),
    /// A sealed memfd of this many bytes.
    Fd(OwnedFd, usize),
}

impl Body {
    /// Payload length.
    pub fn len(&self) -> usize {
        match self {
            Body::Bytes(b) => b.len(),
            Body::Fd(_, n) => *n,
        }
    }

    /// Is it empty?
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A held message.
pub type Held = (Envelope, Body);

/// The routing tables of one daemon.
#[derive(Debug)]
pub struct Router {
    me: String,
    is_master: bool,
    dir: HashMap<Tid, Loc>,
    local: HashMap<Tid, Token>,
    held: HashMap<Tid, VecDeque<Held>>,
    held_bytes: HashMap<Tid, usize>,
    locating: HashSet<Tid>,
    /// Local VPs waiting for a confirmation about a receiver.
    confirm_wait: HashMap<Tid, Vec<Tid>>,
    /// VPs of jobs restarted from a checkpoint: the incarnation their
    /// messages must have (an earlier one's are stale).
    fences: HashMap<Tid, u32>,
}

impl Router {
    /// `tids`' job went back to a checkpoint and is now `incarnation`.
    pub fn fence(&mut self, tids: &[Tid], incarnation: u32) {
        for &t in tids {
            let f = self.fences.entry(t).or_default();
            *f = (*f).max(incarnation);
        }
    }

    /// Was `env` sent by an earlier incarnation of a restarted job (after
    /// the checkpoint it went back to)? Notices are never stale.
    pub fn is_stale(&self, env: &Envelope) -> bool {
        env.seq != 0
            && self
                .fences
                .get(&env.from)
                .is_some_and(|&f| env.incarnation < f)
    }

    /// The tables of host `me`.
    pub fn new(me: &str, is_master: bool) -> Router {
        Router {
            me: me.to_string(),
            is_master,
            dir: HashMap::new(),
            local: HashMap::new(),
            held: HashMap::new(),
            fences: HashMap::new(),
            held_bytes: HashMap::new(),
            locating: HashSet::new(),
            confirm_wait: HashMap::new(),
        }
    }

    /// This host's name changed (the master renamed it at registration).
    pub fn rename(&mut self, me: &str) {
        self.me = me.to_string();
    }

    /// Where a message for `to` goes now.
    pub fn way(&self, to: Tid) -> Way {
        if let Some(&t) = self.local.get(&to) {
            return Way::Local(t);
        }
        match self.dir.get(&to) {
            Some(Loc::At(h)) if *h != self.me => Way::Remote(h.clone()),
            Some(Loc::At(_)) | Some(Loc::Waiting) => Way::Hold,
            Some(Loc::Gone) => Way::Gone,
            None if self.is_master => Way::Gone,
            None => Way::Locate,
        }
    }

    /// Ask the master about `to` unless already asked. True if a question
    /// must be sent.
    pub fn ask(&mut self, to: Tid) -> bool {
        self.locating.insert(to)
    }

    /// Keep a message for later.
    pub fn hold(&mut self, env: Envelope, payload: Body) {
        *self.held_bytes.entry(env.to).or_default() += payload.len();
        self.held
            .entry(env.to)
            .or_default()
            .push_back((env, payload));
    }

    /// Payload bytes held for `tid`.
    pub fn held_bytes(&self, tid: Tid) -> usize {
        self.held_bytes.get(&tid).copied().unwrap_or(0)
    }

    /// Remember that local VP `from` waits for a confirmation about `to`.
    pub fn wait_confirm(&mut self, to: Tid, from: Tid) {
        self.confirm_wait.entry(to).or_default().push(from);
    }

    /// A receiver local VP `from` waits to have confirmed, if any.
    pub fn confirm_awaited_by(&self, from: Tid) -> Option<Tid> {
        self.confirm_wait
            .iter()
            .find(|(_, waiting)| waiting.contains(&from))
            .map(|(&to, _)| to)
    }

    /// A directory update. Returns the held messages and waiting
    /// confirmations of VPs whose way may have changed.
    pub fn update(&mut self, entries: Vec<(Tid, Loc)>) -> (Vec<Held>, Vec<(Tid, Tid)>) {
        let mut freed = Vec::new();
        let mut confirms = Vec::new();
        for (tid, loc) in entries {
            self.locating.remove(&tid);
            self.dir.insert(tid, loc);
            self.held_bytes.remove(&tid);
            if let Some(q) = self.held.remove(&tid) {
                freed.extend(q);
            }
            for from in self.confirm_wait.remove(&tid).unwrap_or_default() {
                confirms.push((from, tid));
            }
        }
        (freed, confirms)
    }

    /// A VP of this host connected. Returns the messages held for it.
    pub fn attach(&mut self, tid: Tid, token: Token) -> Vec<Held> {
        self.local.insert(tid, token);
        self.held_bytes.remove(&tid);
        self.held.remove(&tid).map(Vec::from).unwrap_or_default()
    }

    /// A VP of this host is gone from here (or moving away).
    pub fn detach(&mut self, tid: Tid) {
        self.local.remove(&tid);
    }

    /// Connection `token` closed: if it still is `tid`'s, `tid` is gone
    /// from here (a VP that left and came back has a new one).
    pub fn closed(&mut self, tid: Tid, token: Token) {
        if self.local.get(&tid) == Some(&token) {
            self.local.remove(&tid);
        }
    }

    /// The local VP on `token`, if any.
    pub fn local_tid(&self, token: Token) -> Option<Tid> {
        self.local
            .iter()
            .find(|(_, &t)| t == token)
            .map(|(&tid, _)| tid)
    }

    /// The host of `tid` as the directory has it.
    pub fn host_of(&self, tid: Tid) -> Option<&str> {
        match self.dir.get(&tid) {
            Some(Loc::At(h)) => Some(h),
            Some(Loc::Waiting | Loc::Gone) | None => None,
        }
    }

    /// The whole directory (for a host that joins).
    pub fn directory(&self) -> Vec<(Tid, Loc)> {
        self.dir.iter().map(|(&t, l)| (t, l.clone())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(to: Tid) -> Envelope {
        Envelope {
            from: 1,
            to,
            tag: 0,
            seq: 1,
            incarnation: 0,
        }
    }

    #[test]
    fn fenced_senders_old_messages_are_stale() {
        let mut r = Router::new("h0", false);
        let old = env(2);
        assert!(!r.is_stale(&old), "nothing is fenced yet");
        r.fence(&[1], 1);
        assert!(r.is_stale(&old), "incarnation 0 from a job now at 1");
        assert!(!r.is_stale(&Envelope {
            incarnation: 1,
            ..old
        }));
        assert!(!r.is_stale(&Envelope { seq: 0, ..old }), "a notice");
        assert!(!r.is_stale(&Envelope { from: 9, ..old }), "another job");
        r.fence(&[1], 0);
        assert!(r.is_stale(&old), "a fence never goes back");
    }

    #[test]
    fn messages_wait_for_their_vp_and_follow_the_directory() {
        let mut r = Router::new("h1", false);
        assert_eq!(r.way(7), Way::Locate);
        assert!(r.ask(7));
        assert!(!r.ask(7), "asked once");
        r.hold(env(7), Body::Bytes(b"a".to_vec()));
        assert_eq!(r.held_bytes(7), 1);
        r.wait_confirm(7, 1);
        assert_eq!(r.confirm_awaited_by(1), Some(7));
        assert_eq!(r.confirm_awaited_by(2), None);
        let (freed, confirms) = r.update(vec![(7, Loc::At("h2".into()))]);
        assert_eq!(freed.len(), 1);
        assert_eq!(r.held_bytes(7), 0);
        assert_eq!(confirms, vec![(1, 7)]);
        assert_eq!(r.confirm_awaited_by(1), None, "answered");
        assert_eq!(r.way(7), Way::Remote("h2".into()));
        r.update(vec![(8, Loc::At("h1".into()))]);
        assert_eq!(r.way(8), Way::Hold, "placed here but not connected yet");
        r.hold(env(8), Body::Bytes(b"b".to_vec()));
        assert_eq!(r.attach(8, Token(40)).len(), 1);
        assert_eq!(r.way(8), Way::Local(Token(40)));
        assert_eq!(r.local_tid(Token(40)), Some(8));
        r.detach(8);
        r.update(vec![(8, Loc::Gone)]);
        assert_eq!(r.way(8), Way::Gone);
        let m = Router::new("m", true);
        assert_eq!(m.way(99), Way::Gone, "the master knows every VP");
    }
}
