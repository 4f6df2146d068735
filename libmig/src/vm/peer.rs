//! What a VP knows of each VP it has exchanged messages with: one `Peer`
//! per Tid, kept in `Peers`. A peer's state is the numbers of the messages
//! each way, whether the daemon has said it exists, and how messages to it
//! travel (through the daemons, or over a direct link); each is one value,
//! changed only by the methods here, so no two of them can disagree.
//!
//! What does not live here: reading and writing (`send`, `recv`), the
//! decisions of when to ask for a confirmation or a direct link.

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::Message;
use crate::link::Link;
use crate::msg::Tid;

/// The VPs this one has exchanged messages with.
#[derive(Debug, Default)]
pub(super) struct Peers {
    all: HashMap<Tid, Peer>,
    /// The peers with a direct link open, so that a wait looks only at
    /// them (kept by `open_direct` and `close_direct`).
    linked: Vec<Tid>,
}

/// One peer.
#[derive(Debug, Default)]
struct Peer {
    /// The number of the last message sent to it (0: none).
    sent: u64,
    /// Its messages to this VP, delivered in the order it sent them.
    order: Order,
    confirm: Confirm,
    direct: Direct,
}

/// Messages from one sender: the number delivered next and those that
/// came before their turn.
#[derive(Debug)]
struct Order {
    next: u64,
    early: BTreeMap<u64, Message>,
}

impl Default for Order {
    fn default() -> Order {
        Order {
            next: 1,
            early: BTreeMap::new(),
        }
    }
}

/// Whether the daemon has said that the peer exists. The first message to
/// a peer asks (`VpMsg::Send { confirm }`), and so does the first after a
/// message to it was not delivered.
#[derive(Debug, Default)]
enum Confirm {
    /// Not asked: the next message asks.
    #[default]
    Unasked,
    /// Asked with a message; the sender waits for the answer.
    Asked,
    /// The answer, not yet taken by the sender waiting for it.
    Answered(Result<(), String>),
    /// It exists: messages go without asking.
    Confirmed,
}

/// How messages to the peer travel.
#[derive(Debug, Default)]
enum Direct {
    /// Through the daemons; no direct link asked for or offered.
    #[default]
    Unasked,
    /// A direct link asked of the daemon and not yet answered.
    Asked,
    /// Over a direct link (boxed: most peers have none).
    Open(Box<Link>),
    /// Through the daemons: the link was refused, could not be set up, or
    /// broke. Not asked for again (the peer may still offer one).
    Closed,
}

impl Peers {
    fn peer(&mut self, t: Tid) -> &mut Peer {
        self.all.entry(t).or_default()
    }

    /// The number of the next message to `to` (counted as sent).
    pub(super) fn next_seq(&mut self, to: Tid) -> u64 {
        let p = self.peer(to);
        p.sent += 1;
        p.sent
    }

    /// Message `seq` to `to` was not sent: if it was the last, its number
    /// is free again.
    pub(super) fn unsend(&mut self, to: Tid, seq: u64) {
        if let Some(p) = self.all.get_mut(&to).filter(|p| p.sent == seq) {
            p.sent -= 1;
        }
    }

    /// The number of the last message sent to each peer that has one.
    pub(super) fn sent(&self) -> Vec<(Tid, u64)> {
        self.all
            .iter()
            .filter(|(_, p)| p.sent > 0)
            .map(|(&t, p)| (t, p.sent))
            .collect()
    }

    /// Have all of `from`'s messages up to number `seq` been delivered?
    pub(super) fn delivered(&self, from: Tid, seq: u64) -> bool {
        seq == 0 || self.all.get(&from).is_some_and(|p| p.order.next > seq)
    }

    /// The number of the next message expected from each peer that has
    /// sent one or more.
    pub(super) fn expected(&self) -> Vec<(Tid, u64)> {
        self.all
            .iter()
            .filter(|(_, p)| p.order.next > 1)
            .map(|(&t, p)| (t, p.order.next))
            .collect()
    }

    /// The messages that came before their turn, with their numbers.
    pub(super) fn early(&self) -> impl Iterator<Item = (u64, &Message)> {
        self.all
            .values()
            .flat_map(|p| p.order.early.iter().map(|(&seq, m)| (seq, m)))
    }

    /// Restored from a checkpoint: the last number sent to `to`.
    pub(super) fn restore_sent(&mut self, to: Tid, seq: u64) {
        self.peer(to).sent = seq;
    }

    /// Restored from a checkpoint: the next number expected from `from`.
    pub(super) fn restore_expected(&mut self, from: Tid, next: u64) {
        self.peer(from).order.next = next;
    }

    /// Restored from a checkpoint: message `seq`, come before its turn.
    pub(super) fn restore_early(&mut self, seq: u64, m: Message) {
        self.peer(m.from).order.early.insert(seq, m);
    }

    /// Message `m` (number `seq` from its sender, 0 for unnumbered): into
    /// `mailbox` in its sender's order, with those it let through; kept if
    /// it comes early, dropped if it was already delivered.
    pub(super) fn deliver(&mut self, seq: u64, m: Message, mailbox: &mut VecDeque<Message>) {
        if seq == 0 {
            mailbox.push_back(m);
            return;
        }
        let o = &mut self.peer(m.from).order;
        if seq < o.next {
            return; // a duplicate
        }
        if seq > o.next {
            o.early.insert(seq, m);
            return;
        }
        mailbox.push_back(m);
        o.next += 1;
        while let Some(m) = o.early.remove(&o.next) {
            mailbox.push_back(m);
            o.next += 1;
        }
    }

    /// Has the daemon said that `to` exists (so messages go without
    /// asking)?
    pub(super) fn confirmed(&self, to: Tid) -> bool {
        self.all
            .get(&to)
            .is_some_and(|p| matches!(p.confirm, Confirm::Confirmed))
    }

    /// A message to `to` asks whether it exists.
    pub(super) fn ask_confirm(&mut self, to: Tid) {
        self.peer(to).confirm = Confirm::Asked;
    }

    /// The daemon says `to` exists. The answer to a message that asked
    /// (which overrides a failure of an earlier message reported
    /// meanwhile); nothing asked, nothing to answer.
    pub(super) fn exists(&mut self, to: Tid) {
        let p = self.peer(to);
        if matches!(p.confirm, Confirm::Asked | Confirm::Answered(_)) {
            p.confirm = Confirm::Answered(Ok(()));
        }
    }

    /// A message to `to` was not delivered, for `reason`: the answer to a
    /// message that asked whether it exists (`Ok`), or a failure to report
    /// otherwise (`Err` gives the reason back). Either way the next message
    /// asks again.
    pub(super) fn not_delivered(&mut self, to: Tid, reason: String) -> Result<(), String> {
        let p = self.peer(to);
        match p.confirm {
            Confirm::Asked => {
                p.confirm = Confirm::Answered(Err(reason));
                Ok(())
            }
            Confirm::Confirmed => {
                p.confirm = Confirm::Unasked;
                Err(reason)
            }
            Confirm::Unasked | Confirm::Answered(_) => Err(reason),
        }
    }

    /// The daemon's answer to whether `to` exists, once it has come.
    pub(super) fn take_answer(&mut self, to: Tid) -> Option<Result<(), String>> {
        let p = self.all.get_mut(&to)?;
        match std::mem::take(&mut p.confirm) {
            Confirm::Answered(r) => {
                if r.is_ok() {
                    p.confirm = Confirm::Confirmed;
                }
                // (A refusal leaves `Unasked`: the next message asks.)
                Some(r)
            }
            other => {
                p.confirm = other;
                None
            }
        }
    }

    /// Start asking for a direct link to `to`, unless one was asked for
    /// or set up before: whether to ask.
    pub(super) fn ask_direct(&mut self, to: Tid) -> bool {
        let p = self.peer(to);
        let ask = matches!(p.direct, Direct::Unasked);
        if ask {
            p.direct = Direct::Asked;
        }
        ask
    }

    /// Is a direct link to `to` asked for and not yet answered?
    pub(super) fn direct_asked(&self, to: Tid) -> bool {
        self.all
            .get(&to)
            .is_some_and(|p| matches!(p.direct, Direct::Asked))
    }

    /// No direct link to `to` from the one asked for (refused, or it could
    /// not be set up): messages go through the daemons.
    pub(super) fn direct_refused(&mut self, to: Tid) {
        let p = self.peer(to);
        if matches!(p.direct, Direct::Asked) {
            p.direct = Direct::Closed;
        }
    }

    /// A direct link to `to`, asked for by either side: kept, unless one
    /// is open already (then `link` is dropped and this is false).
    pub(super) fn open_direct(&mut self, to: Tid, link: Link) -> bool {
        let p = self.peer(to);
        if matches!(p.direct, Direct::Open(_)) {
            return false;
        }
        p.direct = Direct::Open(Box::new(link));
        self.linked.push(to);
        true
    }

    /// The direct link to `to` broke or is given up: later messages go
    /// through the daemons.
    pub(super) fn close_direct(&mut self, to: Tid) {
        if let Some(p) = self.all.get_mut(&to) {
            if let Direct::Open(_) = p.direct {
                p.direct = Direct::Closed;
                self.linked.retain(|&t| t != to);
            }
        }
    }

    /// Give up every direct link.
    pub(super) fn close_all_direct(&mut self) {
        for t in std::mem::take(&mut self.linked) {
            if let Some(p) = self.all.get_mut(&t) {
                p.direct = Direct::Closed;
            }
        }
    }

    /// The direct link to `to`, if one is open.
    pub(super) fn link(&self, to: Tid) -> Option<&Link> {
        match &self.all.get(&to)?.direct {
            Direct::Open(l) => Some(l),
            _ => None,
        }
    }

    /// The direct link to `to`, if one is open.
    pub(super) fn link_mut(&mut self, to: Tid) -> Option<&mut Link> {
        match &mut self.all.get_mut(&to)?.direct {
            Direct::Open(l) => Some(l),
            _ => None,
        }
    }

    /// The peers with a direct link open, in the order they were opened.
    pub(super) fn linked(&self) -> &[Tid] {
        &self.linked
    }

    /// The direct links open.
    pub(super) fn links(&self) -> impl Iterator<Item = (Tid, &Link)> {
        self.linked
            .iter()
            .filter_map(|&t| self.link(t).map(|l| (t, l)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(from: Tid, tag: i32) -> Message {
        Message {
            from,
            tag,
            data: Vec::new().into(),
        }
    }

    #[test]
    fn messages_are_delivered_in_their_senders_order_once() {
        let mut peers = Peers::default();
        let mut mailbox = VecDeque::new();
        peers.deliver(2, msg(7, 2), &mut mailbox);
        assert!(mailbox.is_empty());
        peers.deliver(1, msg(7, 1), &mut mailbox);
        peers.deliver(1, msg(7, 1), &mut mailbox);
        peers.deliver(0, msg(7, 0), &mut mailbox);
        let tags: Vec<i32> = mailbox.iter().map(|m| m.tag).collect();
        assert_eq!(tags, [1, 2, 0]);
        assert!(peers.delivered(7, 2));
        assert!(!peers.delivered(7, 3));
        assert_eq!(peers.expected(), [(7, 3)]);
    }

    #[test]
    fn a_refused_first_message_gives_its_number_back_and_asks_again() {
        let mut peers = Peers::default();
        let seq = peers.next_seq(5);
        peers.ask_confirm(5);
        // Looking for the answer before it comes leaves the question open.
        assert_eq!(peers.take_answer(5), None);
        assert_eq!(peers.not_delivered(5, "gone".into()), Ok(()));
        assert_eq!(peers.take_answer(5), Some(Err("gone".into())));
        peers.unsend(5, seq);
        assert!(!peers.confirmed(5));
        assert!(peers.sent().is_empty());
        // Later failures are reported, not taken as an answer.
        peers.ask_confirm(5);
        peers.exists(5);
        assert_eq!(peers.take_answer(5), Some(Ok(())));
        assert!(peers.confirmed(5));
        assert_eq!(
            peers.not_delivered(5, "exited".into()),
            Err("exited".into())
        );
        assert!(!peers.confirmed(5));
        // An answer to nothing asked is no answer.
        peers.exists(5);
        assert_eq!(peers.take_answer(5), None);
    }

    #[test]
    fn a_direct_link_is_asked_for_once() {
        let mut peers = Peers::default();
        assert!(peers.ask_direct(3));
        assert!(peers.direct_asked(3));
        assert!(!peers.ask_direct(3));
        peers.direct_refused(3);
        assert!(!peers.direct_asked(3));
        assert!(!peers.ask_direct(3));
        assert!(peers.link(3).is_none());
        assert!(peers.linked().is_empty());
    }

    #[test]
    fn the_first_direct_link_is_kept_until_it_closes() {
        let link = || Link::new(std::os::unix::net::UnixStream::pair().unwrap().0).unwrap();
        let mut peers = Peers::default();
        assert!(peers.ask_direct(4));
        assert!(peers.open_direct(4, link()));
        assert!(!peers.direct_asked(4));
        // Both sides asked: the second link is dropped.
        assert!(!peers.open_direct(4, link()));
        peers.direct_refused(4);
        assert_eq!(peers.linked(), [4]);
        assert_eq!(peers.links().count(), 1);
        peers.close_direct(4);
        assert!(peers.link(4).is_none());
        assert!(peers.linked().is_empty());
        assert!(!peers.ask_direct(4));
        // The peer may still offer one.
        assert!(peers.open_direct(4, link()));
        peers.close_all_direct();
        assert!(peers.links().next().is_none());
    }
}
