//! A worker and the link to its master: attaching to a new master (or to
//! the same one again after the link broke), and noticing a master that
//! has gone silent.
//!
//! Attaching never blocks the loop: the connection is dialled, the
//! handshake runs as its messages arrive, `Attach` goes once it is done,
//! and the master's first answer (`Registered`, or `Fenced` for a host it
//! gave up meanwhile) makes it the master's link. A try that fails is
//! made again with back-off and jitter (at a failover every worker dials
//! the new master at once) until one succeeds, a newer master is
//! announced, or the daemon stops. Attaching twice is harmless: the
//! master takes the newest link for the host.
//!
//! Silence: the master answers every heartbeat (and each heartbeat tells
//! a worker whose news it has not all read yet that it is alive:
//! `behind_but_alive`), so a link on which the master has said nothing
//! for `dead_after` (nor taken any of the bytes waiting for it) is cut by
//! the worker itself (TCP would retransmit into a partition for minutes),
//! and the worker attaches again.
//!
//! What does not live here: who the master is (announcements and the
//! voters, `failover`), the master's side of an attach (`peer`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use libmig::handshake::{Answer, Client};
use libmig::msg::{Handshake, PeerMsg, ToHost};
use mio::net::TcpStream;
use mio::{Interest, Token};

use super::{net, Daemon, HANDSHAKE_TIMEOUT};
use crate::conn::{Conn, Kind, Sock};
use crate::{log, warn};

/// The longest wait between two tries.
const MOST_BETWEEN: Duration = Duration::from_secs(1);
/// How long one try may take, from the dial to the master's answer (as
/// long as the master gives a handshake).
const TRY_WITHIN: Duration = HANDSHAKE_TIMEOUT;

/// What a worker keeps about attaching to its master.
pub(super) struct Attach {
    /// The master to attach to, while not attached.
    target: Option<Target>,
    /// The connection of the try under way.
    conn: Option<Token>,
    /// Tries that failed since the target was set.
    tries: u32,
    /// When the next try is made.
    next: Instant,
    /// When the master last said something on its link.
    pub(super) heard: Instant,
}

/// A master to attach to.
#[derive(Debug, Clone)]
struct Target {
    addr: SocketAddr,
    /// Its host name, if it announced itself (else: the master this
    /// worker had, dialled again).
    name: Option<String>,
    /// The term it was elected in.
    term: u64,
}

impl Target {
    fn describe(&self) -> String {
        match &self.name {
            Some(n) => format!("the new master {n} at {}", self.addr),
            None => format!("the master at {}", self.addr),
        }
    }
}

impl Attach {
    pub(super) fn new() -> Attach {
        Attach {
            target: None,
            conn: None,
            tries: 0,
            next: Instant::now(),
            heard: Instant::now(),
        }
    }

    /// How long the loop may sleep before the next try is due.
    pub(super) fn due_in(&self) -> Duration {
        match (&self.target, self.conn) {
            (Some(_), None) => self.next.saturating_duration_since(Instant::now()),
            _ => Duration::MAX,
        }
    }

    /// The address being attached to, if any.
    pub(super) fn target_addr(&self) -> Option<SocketAddr> {
        self.target.as_ref().map(|t| t.addr)
    }
}

impl Daemon {
    /// Attach to the master at `addr` (`name`, elected in `term`; `None`:
    /// the one this worker had), the first try within `spread` (at
    /// random: every worker hears of a new master at once). A try under
    /// way to another address is given up.
    pub(super) fn attach_to(
        &mut self,
        addr: SocketAddr,
        name: Option<&str>,
        term: u64,
        spread: Duration,
    ) {
        if let Some(t) = self.attach.conn.take() {
            if self.attach.target_addr() != Some(addr) {
                self.quiet_close(t, "another master to attach to");
            } else {
                self.attach.conn = Some(t);
            }
        }
        self.attach.target = Some(Target {
            addr,
            name: name.map(str::to_string),
            term,
        });
        self.attach.tries = 0;
        self.attach.next = Instant::now() + net::jitter(spread);
    }

    /// Attach to no one: this daemon is the master now, or stops.
    pub(super) fn attach_cancel(&mut self) {
        self.attach.target = None;
        if let Some(t) = self.attach.conn.take() {
            self.quiet_close(t, "no longer attaching");
        }
    }

    /// Each turn of the loop: a try when one is due.
    pub(super) fn attach_turn(&mut self) {
        if self.attach.conn.is_some() || Instant::now() < self.attach.next {
            return;
        }
        let Some(target) = self.attach.target.clone() else {
            return;
        };
        if self.halting.is_some() || self.role.is_master() {
            return self.attach_cancel();
        }
        let local = self.net.listeners.tcp.local_addr().ok();
        let dialled = Client::start(&self.net.key)
            .map_err(|e| e.to_string())
            .and_then(|(client, hello)| {
                let mut s = net::dial(local, target.addr, None)
                    .map(TcpStream::from_std)
                    .map_err(|e| e.to_string())?;
                let t = self.net.token();
                self.net
                    .poll
                    .registry()
                    .register(&mut s, t, Interest::READABLE)
                    .map_err(|e| e.to_string())?;
                let mut c = Conn::new(
                    Sock::Tcp(s),
                    Kind::Attaching {
                        addr: target.addr,
                        sent: false,
                    },
                );
                c.hs = Some(crate::conn::Handshake::Dial(client));
                self.net.conns.insert(t, c);
                Ok((t, hello))
            });
        match dialled {
            Ok((t, hello)) => {
                self.attach.conn = Some(t);
                self.send_peer(t, hello);
            }
            Err(why) => self.attach_failed(&why),
        }
    }

    /// A message on the connection of a try: the handshake, then the
    /// master's answer to `Attach`.
    pub(super) fn attaching(&mut self, t: Token, sent: bool, msg: PeerMsg) {
        if self.attach.conn != Some(t) {
            return self.quiet_close(t, "a try given up");
        }
        if sent {
            return self.attached(t, msg);
        }
        let msg = match msg.into_handshake() {
            Ok(m) => m,
            Err(what) => return self.refuse(t, &format!("unexpected {what} in the handshake")),
        };
        let Some(crate::conn::Handshake::Dial(mut client)) =
            self.net.conns.get_mut(&t).and_then(|c| c.hs.take())
        else {
            return self.refuse(t, "handshake out of turn");
        };
        match client.on(&self.net.key, &msg) {
            Answer::Send(reply) => {
                if let Some(c) = self.net.conns.get_mut(&t) {
                    c.hs = Some(crate::conn::Handshake::Dial(client));
                }
                self.send_peer(t, reply);
            }
            Answer::SendThenSeal(proof, sealer) => {
                self.send_peer(t, proof);
                if let Some(c) = self.net.conns.get_mut(&t) {
                    c.hs = Some(crate::conn::Handshake::Dial(client));
                    c.seal_with(sealer);
                }
            }
            Answer::Done(..) => {
                // A live daemon answered: the master is there, or soon.
                self.failover.still_hoping();
                let addr = self.attach.target_addr();
                if let (Some(c), Some(addr)) = (self.net.conns.get_mut(&t), addr) {
                    c.kind = Kind::Attaching { addr, sent: true };
                    c.dec.limit(libmig::frame::MAX_BODY);
                }
                let facts = self.facts.clone();
                self.send_peer(t, Handshake::Attach { facts });
            }
            Answer::Refuse(reason) => self.refuse(t, &reason),
        }
    }

    /// The master's answer to `Attach` on `t`: the link to it, or why not.
    fn attached(&mut self, t: Token, first: PeerMsg) {
        let fenced = match first {
            PeerMsg::Handshake(Handshake::Registered { .. }) => None,
            PeerMsg::ToHost(ToHost::Fenced { why }) => Some(why),
            PeerMsg::Handshake(Handshake::Refused { reason }) => {
                // (Not the master (yet): tried again.)
                return self.quiet_close(t, &reason);
            }
            // Any other answer, of any conversation.
            other @ (PeerMsg::Handshake(_)
            | PeerMsg::ToHost(_)
            | PeerMsg::ToMaster(_)
            | PeerMsg::Data(_)
            | PeerMsg::Quorum(_)
            | PeerMsg::Bidding(_)
            | PeerMsg::Rate(_)
            | PeerMsg::Part { .. }) => {
                return self.refuse(t, &format!("unexpected {} to an attach", other.name()));
            }
        };
        let Some(target) = self.attach.target.take() else {
            return self.quiet_close(t, "a try given up");
        };
        self.attach.conn = None;
        // (A stopped master: its link is open, its answers never come; a
        // dead one: what was sent to it is lost.)
        if self.drop_master_links() || target.name.is_some() {
            self.fail_unanswered("a new master was elected");
        }
        if let Some(c) = self.net.conns.get_mut(&t) {
            c.kind = Kind::Master;
        }
        self.role.joined(t);
        self.attach.heard = Instant::now();
        self.failover.attached(target.addr, target.term);
        let tries = std::mem::take(&mut self.attach.tries);
        let after = if tries > 0 {
            format!(" after {} tries", tries + 1)
        } else {
            String::new()
        };
        match &target.name {
            Some(n) => log!("following the new master {n} (term {}){after}", target.term),
            None => log!("attached to the master at {} again{after}", target.addr),
        }
        if let Some(why) = fenced {
            self.fenced(&why);
            self.local.recent_exits.clear();
        }
        // Lines the last master did not say it holds safe go again (this
        // one takes each once), before those no master was sent.
        let again = self.lines_sent.again();
        if !again.is_empty() {
            log!(
                "{} of output the master had not said it holds go again",
                libmig::words::count(again.len() as u64, "line", "lines")
            );
        }
        for msg in again {
            self.send_peer(t, msg);
        }
        for msg in self.failover.take_unsent() {
            self.lines_sent.sent(&msg);
            self.send_peer(t, msg);
        }
        for msg in self.said_again() {
            self.send_peer(t, msg);
        }
    }

    /// The connection of a try closed (`why`): another try later.
    pub(super) fn attach_closed(&mut self, t: Token, why: &str) {
        if self.attach.conn == Some(t) {
            self.attach.conn = None;
            self.attach_failed(why);
        }
    }

    fn attach_failed(&mut self, why: &str) {
        let Some(target) = &self.attach.target else {
            return;
        };
        self.attach.tries += 1;
        let tries = self.attach.tries;
        let wait = net::back_off(tries, MOST_BETWEEN);
        self.attach.next = Instant::now() + wait;
        // (Tries 1, 4, 16...: a failover makes every worker fail a few.)
        if tries.is_power_of_two() && tries.trailing_zeros() & 1 == 0 {
            warn!(
                "cannot attach to {} yet: {why}; trying again (try {tries}, next in {} ms)",
                target.describe(),
                wait.as_millis()
            );
        }
    }

    /// Close `t` without the consequences of losing what it was (a try, a
    /// link replaced by a newer one).
    pub(super) fn quiet_close(&mut self, t: Token, why: &str) {
        if let Some(c) = self.net.conns.get_mut(&t) {
            c.kind = Kind::Control;
        }
        self.close(t, why);
    }

    /// Each heartbeat: a try that takes too long is given up, and a master
    /// silent for `dead_after` is taken for lost.
    pub(super) fn attach_tick(&mut self) {
        if let Some(t) = self.attach.conn {
            if self
                .net
                .conns
                .get(&t)
                .is_none_or(|c| c.since.elapsed() > TRY_WITHIN)
            {
                self.attach.conn = None;
                self.quiet_close(t, "the try timed out");
                self.attach_failed("no answer in time");
            }
        }
        let Some(link) = self.role.link() else {
            return;
        };
        // (A master busy taking a large image from this host answers late,
        // but takes its bytes.)
        let limit = self.cfg.dead_after;
        let taking = self
            .net
            .conns
            .get(&link)
            .is_some_and(|c| !c.flushed() && c.stalled_for() < limit);
        let silent = self.attach.heard.elapsed();
        if silent > limit && !taking {
            self.close(
                link,
                &format!("the master said nothing for {} ms", silent.as_millis()),
            );
        }
    }
}
