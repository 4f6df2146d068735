//! The daemon's part in surviving its master: the consensus between voters
//! carried over data links (the `Quorum` messages), the master's state
//! proposed as it changes and what the master decided held back until that
//! state is committed (a new master never lacks a decision the old one
//! acted on), taking over when elected, stepping down when another is, and
//! a worker following a new master without stopping its VPs.
//!
//! What does not live here: raft (`crate::consensus`), what the state holds
//! and how a master is rebuilt from it (`Master::export/import`), which hosts
//! vote (`master::voters`).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use libmig::msg::{JobFileCopy, PeerMsg, Quorum, Response, ToMaster};
use mio::Token;

use super::net::Pending;
use super::role::Role;
use super::Daemon;
use crate::conn::Kind;
use crate::consensus::{Consensus, Said, TICK};
use crate::master::{Master, Out, Requester, VoterChange};
use crate::{debug, log, warn};

/// A loop turn this much later than the last one means the daemon was
/// stopped (or starved): a master then steps down before doing anything,
/// since the others may have elected another meanwhile.
const STALL: Duration = Duration::from_secs(1);

/// Reports and requests kept while there is no master (beyond: dropped, with
/// a log line).
const UNSENT_MAX: usize = 100_000;

/// How long a user's request waits for the next master while the voters
/// elect one: beyond, it fails saying why (no majority of the voters may be
/// up to elect one), rather than leave `mig` waiting for nothing.
const KEPT_REQUEST_MAX: Duration = Duration::from_secs(20);

/// What a daemon keeps for failover.
pub(super) struct Failover {
    /// Its vote and copy of the log, if it is a voter.
    consensus: Option<Consensus>,
    /// Voters' hosts, by voter id.
    hosts: HashMap<u64, String>,
    last_tick: Instant,
    last_turn: Instant,
    /// On the master: the state last proposed, the index of the newest
    /// proposal, and the `Out`s waiting for it to commit.
    exported: Vec<u8>,
    proposed: u64,
    held: VecDeque<(u64, VecDeque<Out>)>,
    /// On the master: not before this is its state looked at again (see
    /// `LOOK_SHARE`).
    next_look: Instant,
    /// On the master: the `Out`s decided since the last proposal, whose
    /// state is proposed once, when a turn ends with no proposal under way
    /// (`propose_turn`).
    this_turn: Vec<Out>,
    /// The term of the master this host follows.
    term: u64,
    /// A worker whose master is gone: since when, and what it would have
    /// told it.
    masterless: Option<Instant>,
    /// Since when this worker has had no master, however often one
    /// answered its attach meanwhile (see `no_master_for_long`).
    no_master_since: Option<Instant>,
    unsent: VecDeque<ToMaster>,
    /// A worker's master's address (a daemon joining this one is sent
    /// there).
    pub(super) master_addr: Option<SocketAddr>,
    /// Hosts whose data link was lost, and when: the consensus does not
    /// dial them again for a while (a dead voter stays one until the
    /// master has given its host up).
    unreachable: HashMap<String, Instant>,
    /// When each other voter was last heard from (by its id).
    heard: HashMap<u64, Instant>,
    /// On the master: when each voter not heard from lately was last told
    /// again that it is one (see `remind_voters`).
    reminded: HashMap<u64, Instant>,
    /// On the master: when hosts that have not attached were last told
    /// again who the master is.
    announced: Instant,
    /// On the master: it is cut off from most voters (see `isolated`).
    excusing: bool,
    /// On the master: a change of the voters it proposed is under way
    /// (said in the log when it is done).
    voters_changing: bool,
}

/// How long the consensus leaves a host whose link was lost.
const REDIAL_AFTER: Duration = Duration::from_secs(1);

/// How often a master tells again the hosts that have not attached to it
/// who the master is (an announcement can be lost with its link).
const ANNOUNCE_EVERY: Duration = Duration::from_secs(1);
/// A voter silent this long (a live one answers every heartbeat) is told
/// again that it is one, at most this often (`remind_voters`).
const REMIND: Duration = Duration::from_millis(500);

/// Most time one turn of the loop spends carrying out committed decisions,
/// and how many it takes at a time between looks at the clock (few: one
/// may start a VP on this host, a millisecond or more each).
const RELEASE_TIME: Duration = Duration::from_millis(20);
const RELEASE_CHUNK: usize = 16;
/// Most decisions the master holds (committed or not) before it reads its
/// workers' news again.
const HELD_MAX: usize = 20_000;

/// The master looks at its whole state (serializes it, to propose it if it
/// changed) for at most one part in `LOOK_SHARE` of its time, and proposes
/// at most `PROPOSE_RATE` bytes a second to each voter: after a look that
/// took `t` and found `b` bytes, the next is `LOOK_SHARE * t` or
/// `b / PROPOSE_RATE` later at the earliest (never more than `LOOK_MAX`),
/// and the decisions of the turns between go together. With 10,000 VPs a
/// look takes a millisecond or more and finds 700 KB; hosts asking for
/// their leases made one every turn.
const LOOK_SHARE: u32 = 10;
const PROPOSE_RATE: f64 = 32.0 * 1024.0 * 1024.0;
const LOOK_MAX: Duration = Duration::from_millis(100);

impl Failover {
    pub(super) fn new() -> Failover {
        Failover {
            consensus: None,
            hosts: HashMap::new(),
            last_tick: Instant::now(),
            last_turn: Instant::now(),
            exported: Vec::new(),
            proposed: 0,
            held: VecDeque::new(),
            next_look: Instant::now(),
            this_turn: Vec::new(),
            term: 0,
            masterless: None,
            no_master_since: None,
            unsent: VecDeque::new(),
            master_addr: None,
            unreachable: HashMap::new(),
            heard: HashMap::new(),
            reminded: HashMap::new(),
            announced: Instant::now(),
            excusing: false,
            voters_changing: false,
        }
    }

    /// The founding master: the only voter, leader at once.
    pub(super) fn found(&mut self, me: &str) {
        match Consensus::founding(1) {
            Ok(c) => {
                self.term = c.term();
                self.consensus = Some(c);
                self.hosts.insert(1, me.to_string());
            }
            Err(e) => {
                warn!("cannot start the replicated log ({e}): this master cannot be replaced")
            }
        }
    }

    /// The data link to `host` was lost.
    pub(super) fn cut_off(&mut self, host: &str) {
        self.unreachable.insert(host.to_string(), Instant::now());
    }

    /// A master answered (or announced itself): a masterless worker waits
    /// on (see `masterless_too_long`).
    pub(super) fn still_hoping(&mut self) {
        if self.masterless.is_some() {
            self.masterless = Some(Instant::now());
        }
    }

    /// A worker attached to the master at `addr`, elected in `term`.
    pub(super) fn attached(&mut self, addr: SocketAddr, term: u64) {
        self.masterless = None;
        self.no_master_since = None;
        self.master_addr = Some(addr);
        self.term = self.term.max(term);
    }

    /// What a worker kept for its next master.
    pub(super) fn take_unsent(&mut self) -> VecDeque<ToMaster> {
        std::mem::take(&mut self.unsent)
    }

    /// Is this voter, leading, cut off from most voters: has it heard from
    /// fewer than a majority of them (itself included) within `within`?
    /// Then it cannot commit anything, and the silence of hosts tells
    /// nothing about them: the partition may be its own.
    pub(super) fn isolated(&self, within: Duration) -> bool {
        let Some(c) = &self.consensus else {
            return false;
        };
        let voters = c.voters();
        if voters.len() <= 1 {
            return false;
        }
        let me = c.id();
        let heard = voters
            .iter()
            .filter(|&&v| v == me || self.heard.get(&v).is_some_and(|t| t.elapsed() < within))
            .count();
        heard <= voters.len() / 2
    }

    /// On the master: is its last proposal still to be committed?
    fn under_way(&self) -> bool {
        self.consensus
            .as_ref()
            .is_some_and(|c| c.leads() && self.proposed > c.committed())
    }

    /// How long the loop may sleep before the consensus needs a tick, or
    /// the master's decisions waiting to be proposed may go.
    pub(super) fn due_in(&self) -> Duration {
        let look = match self.this_turn.is_empty() || self.under_way() {
            true => Duration::MAX,
            false => self.next_look.saturating_duration_since(Instant::now()),
        };
        match self.consensus {
            Some(_) => TICK.saturating_sub(self.last_tick.elapsed()).min(look),
            None => Duration::MAX,
        }
    }
}

impl Daemon {
    /// Each turn of the loop, first: a master that was stopped steps down;
    /// the consensus ticks when due.
    pub(super) fn failover_turn(&mut self) {
        let gap = self.failover.last_turn.elapsed();
        self.failover.last_turn = Instant::now();
        if gap > STALL && self.role.is_master() {
            if let Some(c) = &mut self.failover.consensus {
                if c.voters().len() > 1 {
                    log!(
                        "this master (term {}) was stopped for {} ms: stepping down (another \
                         may have been elected meanwhile)",
                        c.term(),
                        gap.as_millis()
                    );
                    let said = c.step_down();
                    self.send_said(said);
                    self.check_leadership();
                }
            }
        }
        if self.failover.consensus.is_some() && self.failover.last_tick.elapsed() >= TICK {
            self.failover.last_tick = Instant::now();
            let said = self
                .failover
                .consensus
                .as_mut()
                .map(|c| c.tick())
                .unwrap_or_default();
            self.send_said(said);
            self.check_leadership();
            self.release_held();
            self.voters_changed();
            self.change_voters();
            self.remind_voters();
        }
        let term = self
            .failover
            .consensus
            .as_ref()
            .map_or(self.failover.term, |c| c.term().max(self.failover.term));
        self.metrics.consensus(term, self.role.is_master());
    }

    /// Changes to the job files (output, history): made here, and on the
    /// master (`copy`) sent to every other voter in one message, so that
    /// whichever is elected next answers `mig logs` and `mig jobs` as this
    /// one did (the lines a worker sent that the master had not carried
    /// out when it died the worker sends the next: see `lines`).
    pub(super) fn keep_job_files(&mut self, changes: Vec<JobFileCopy>, copy: bool) {
        if changes.is_empty() {
            return;
        }
        if copy {
            let me = self.facts.name.clone();
            let others: BTreeSet<String> = match self.role.master() {
                Some(m) => m.voters().values().filter(|h| **h != me).cloned().collect(),
                None => BTreeSet::new(),
            };
            for host in others {
                if !self.failover.unreachable.contains_key(&host) {
                    self.send_to_host(&host, Quorum::JobFile(changes.clone()));
                }
            }
        }
        for change in changes {
            match change {
                JobFileCopy::Output { job, line } => {
                    if let Err(e) = self.job_files.append_output(&job, &line) {
                        warn!("cannot keep job {job}'s output: {e}");
                    }
                }
                JobFileCopy::History(info) => {
                    self.job_files.close(&info.job);
                    if let Err(e) = self.job_files.append_history(&info) {
                        warn!("cannot write job {} to history.jsonl: {e}", info.job);
                    }
                }
                JobFileCopy::Forget { job } => self.job_files.forget(&job),
            }
        }
    }

    /// A copy of the master's job files from `host`: kept by a voter when
    /// `host` is the master its consensus follows, ignored otherwise.
    pub(super) fn on_job_file(&mut self, host: &str, changes: Vec<JobFileCopy>) {
        let leader = self
            .failover
            .consensus
            .as_ref()
            .filter(|c| !c.leads())
            .map(|c| c.leader());
        let from_master = leader
            .and_then(|l| self.failover.hosts.get(&l))
            .is_some_and(|h| h == host);
        if from_master {
            self.keep_job_files(changes, false);
        } else {
            debug!("ignoring job files from {host}, which is not the master");
        }
    }

    /// Send what the consensus said, over data links.
    fn send_said(&mut self, said: Vec<Said>) {
        let Some(me) = self.failover.consensus.as_ref().map(|c| c.id()) else {
            return;
        };
        self.failover
            .unreachable
            .retain(|_, since| since.elapsed() < REDIAL_AFTER);
        for Said::Send { to, msg } in said {
            let Some(host) = self.failover.hosts.get(&to).cloned() else {
                continue;
            };
            if !self.failover.unreachable.contains_key(&host) {
                self.send_to_host(&host, Quorum::Consensus { from: me, msg });
            }
        }
    }

    /// A message for another daemon over the data link to it (dialled if
    /// need be; the message waits for the handshake).
    pub(super) fn send_to_host(&mut self, host: &str, msg: impl Into<PeerMsg>) {
        let msg = msg.into();
        let Some(t) = self.link_to(host) else { return };
        match self.net.conns.get(&t).map(|c| &c.kind) {
            Some(Kind::Data { .. }) => self.send_peer(t, msg),
            Some(Kind::Dialling { .. }) => self
                .net
                .dialling
                .entry(t)
                .or_default()
                .push(Pending::Peer(msg)),
            _ => {}
        }
    }

    /// A message of the quorum from `host`, on the data link to it.
    pub(super) fn quorum_msg(&mut self, host: &str, msg: Quorum) {
        match msg {
            Quorum::Consensus { from, msg } => self.on_consensus(host, from, &msg),
            Quorum::Voter { id } => self.on_voter(id),
            Quorum::JobFile(changes) => self.on_job_file(host, changes),
            Quorum::NewMaster { term, name, addr } => self.on_new_master(term, &name, &addr),
        }
    }

    /// A consensus message from voter `from` on `host`.
    pub(super) fn on_consensus(&mut self, host: &str, from: u64, msg: &[u8]) {
        self.failover.hosts.insert(from, host.to_string());
        let Some(c) = &mut self.failover.consensus else {
            return;
        };
        match c.step(msg) {
            Ok(said) => self.send_said(said),
            Err(e) => return warn!("consensus message from {host} refused: {e}"),
        }
        self.failover.heard.insert(from, Instant::now());
        self.check_leadership();
        self.release_held();
        self.follow_leader();
    }

    /// A voter without a master that knows who leads now attaches to it
    /// (a master that stepped down is told by no announcement: the new
    /// master may have given its host up).
    fn follow_leader(&mut self) {
        if !self.awaiting_master() {
            return;
        }
        let Some(c) = &self.failover.consensus else {
            return;
        };
        let (leader, term) = (c.leader(), c.term());
        if leader == 0 || leader == c.id() {
            return;
        }
        let Some(host) = self.failover.hosts.get(&leader).cloned() else {
            return;
        };
        let Some(&addr) = self.net.peers.get(&host) else {
            return;
        };
        if self.attach.target_addr() != Some(addr) && term >= self.failover.term {
            self.failover.term = term;
            self.attach_to(addr, Some(&host), term, Duration::ZERO);
        }
    }

    /// The master made this host voter `id`.
    pub(super) fn on_voter(&mut self, id: u64) {
        if self
            .failover
            .consensus
            .as_ref()
            .is_some_and(|c| c.id() == id)
        {
            return;
        }
        match Consensus::joining(id) {
            Ok(c) => {
                log!("voter {id}: this host keeps a copy of the master's state and votes");
                self.failover.hosts.insert(id, self.facts.name.clone());
                self.failover.consensus = Some(c);
            }
            Err(e) => warn!("cannot become a voter: {e}"),
        }
    }

    /// The voters' hosts, from the master.
    pub(super) fn on_voters(&mut self, list: Vec<(u64, String)>) {
        self.failover.hosts.extend(list);
    }

    /// Take over when this voter was elected; step down when another was.
    fn check_leadership(&mut self) {
        let Some(c) = &self.failover.consensus else {
            return;
        };
        match (c.leads(), self.role.is_master()) {
            (true, false) => self.take_over(),
            (false, true) if c.term() > self.failover.term || c.leader() != c.id() => {
                let (term, leader) = (c.term(), c.leader());
                let who = self.failover.hosts.get(&leader).cloned();
                log!(
                    "stepped down as master (term {term}; {} leads now)",
                    who.as_deref().unwrap_or("no one yet")
                );
                self.role = Role::worker();
                // Its own clients waiting on a job hear the rest of it from
                // the new master, through this daemon (`master::LOCAL_ID`).
                let local: Vec<Token> = self
                    .net
                    .conns
                    .iter()
                    .filter(|(_, c)| c.kind == Kind::Control)
                    .map(|(t, _)| *t)
                    .collect();
                for t in local {
                    self.proxied.adopt(crate::master::LOCAL_ID | t.0 as u64, t);
                }
                // What it decided but could not get replicated is undone:
                // its own users hear so. What it only passed on (a line a
                // VP wrote, a VP's or a job's end: facts, whoever is the
                // master) reaches them still: the next master hears again
                // only a worker's lines this one had not said were safe
                // (`lines`: those may show twice), and says an end it heard
                // of again at most once more.
                let this_turn = std::mem::take(&mut self.failover.this_turn);
                let held = std::mem::take(&mut self.failover.held);
                // (The workers send again what was not said to be safe.)
                self.lines_taken = super::lines::Taken::default();
                for outs in held.into_iter().map(|(_, o)| o).chain([this_turn.into()]) {
                    for o in outs {
                        let Out::Reply(Requester::Local(t), resp) = o else {
                            continue;
                        };
                        let fact = matches!(
                            resp,
                            Response::Output { .. }
                                | Response::Skipped { .. }
                                | Response::VpDone { .. }
                                | Response::JobDone { .. }
                        );
                        let resp = if fact {
                            resp
                        } else {
                            Response::Error {
                                message: "this daemon stopped being the master before its \
                                          answer was safe; ask again"
                                    .into(),
                            }
                        };
                        self.send_resp(Token(t), &resp);
                    }
                }
                self.failover.masterless = Some(Instant::now());
                self.failover.no_master_since.get_or_insert(Instant::now());
                self.follow_leader();
            }
            _ => {}
        }
    }

    /// Elected: the master's state from the log, and every host told.
    fn take_over(&mut self) {
        let Some(c) = &self.failover.consensus else {
            return;
        };
        let term = c.term();
        let committed = c.committed();
        let Some((_, bytes)) = c.newest() else {
            return warn!("elected (term {term}) but holding no state yet: waiting");
        };
        let me = self.facts.name.clone();
        let (mut m, out) = match Master::import(bytes, &me, Instant::now()) {
            Ok(x) => x,
            Err(e) => return warn!("elected (term {term}) but {e}"),
        };
        m.set_admin_uid(self.uid);
        m.voting(c.voters());
        log!("elected master (term {term})");
        // The old master's link goes quietly: this daemon is the master.
        // What was sent to the old master and never answered fails (a
        // question that changes nothing is asked again by `mig`).
        self.drop_master_links();
        self.fail_unanswered("a new master was elected");
        self.attach_cancel();
        // Workers still linked to this daemon from when it was the master
        // before (it stepped down and is elected again) attach anew, and
        // say again what they hold: a worker linked to the master keeps
        // its link when it hears of its term (`on_new_master`).
        for t in self.net.worker_links() {
            self.quiet_close(t, "a link to this daemon's last term as master");
        }
        let peers = m.peer_list();
        let voters: Vec<(u64, String)> = m.voters().iter().map(|(i, h)| (*i, h.clone())).collect();
        self.failover.exported = m.export();
        self.failover.proposed = committed;
        self.failover.term = term;
        self.failover.masterless = None;
        self.failover.no_master_since = None;
        self.failover.hosts.extend(voters.iter().cloned());
        self.role = Role::master_with(m);
        self.net.peers = peers
            .iter()
            .filter_map(|(n, a)| a.parse().ok().map(|a| (n.clone(), a)))
            .collect();
        let addr = self
            .net
            .listeners
            .tcp
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        for (host, _) in peers.iter().filter(|(n, _)| *n != me) {
            self.send_to_host(
                host,
                Quorum::NewMaster {
                    term,
                    name: me.clone(),
                    addr: addr.clone(),
                },
            );
        }
        self.carry_out_when_committed(out);
        // What this host said to the old master, which may have died
        // before passing it on (its own VPs' exits, say), it says again to
        // itself as the master now.
        for msg in self.said_again() {
            self.report(msg);
        }
        // It knows no worker's numbers (elected again, those it had may be
        // of lines it never carried out).
        self.lines_taken = super::lines::Taken::default();
        // The lines it sent the old master that it did not say it took.
        for msg in self.lines_sent.take_kept() {
            self.report(msg);
        }
        // What this host told no one while there was no master (a
        // request for logs is answered from the job files here).
        for msg in std::mem::take(&mut self.failover.unsent) {
            if let ToMaster::Control { id, req, uid } = &msg {
                if let Some(resp) = self.answer_logs(*uid, req) {
                    let to = Requester::Remote {
                        host: me.clone(),
                        id: *id,
                    };
                    self.carry_out(vec![Out::Reply(to, resp)]);
                    continue;
                }
            }
            self.report(msg);
        }
    }

    /// Close the links to an old master quietly (not as a lost master).
    /// Were there any?
    pub(super) fn drop_master_links(&mut self) -> bool {
        let old: Vec<Token> = self
            .net
            .conns
            .iter()
            .filter(|(_, c)| c.kind == Kind::Master)
            .map(|(t, _)| *t)
            .collect();
        for &t in &old {
            if let Some(c) = self.net.conns.get_mut(&t) {
                c.kind = Kind::Control;
            }
            self.close(t, "a new master was elected");
        }
        !old.is_empty()
    }

    /// A new master announced itself: attach to it, unless an announcement
    /// of a later term was followed already, or this host follows it
    /// already. Every worker hears it at once: the first try comes at a
    /// random instant within a few milliseconds a host.
    pub(super) fn on_new_master(&mut self, term: u64, name: &str, addr: &str) {
        if term < self.failover.term || name == self.facts.name {
            return;
        }
        if self.role.is_master() {
            // The consensus says so too, or soon will.
            return;
        }
        let Ok(addr) = addr.parse::<SocketAddr>() else {
            return warn!("new master {name} announced a bad address {addr:?}");
        };
        // Linked to it already (it announced itself again to a host whose
        // link broke, and that attached again meanwhile): the link goes
        // on. Attaching again would make the master drop the live link,
        // and what this host sent on it the master has not read yet.
        if self.role.link().is_some() && self.failover.master_addr == Some(addr) {
            self.failover.term = self.failover.term.max(term);
            return;
        }
        if self.attach.target_addr() == Some(addr) {
            return;
        }
        self.failover.term = term;
        self.failover.still_hoping();
        let spread = (Duration::from_millis(2) * self.net.peers.len() as u32)
            .min(Duration::from_millis(200));
        self.attach_to(addr, Some(name), term, spread);
    }

    /// On the master, every second: the hosts it holds alive that have not
    /// attached to it are told again who the master is (the announcement
    /// made when it was elected goes over a data link, which may have
    /// broken, or been refused).
    pub(super) fn announce_again(&mut self) {
        if self.failover.announced.elapsed() < ANNOUNCE_EVERY || self.failover.consensus.is_none() {
            return;
        }
        self.failover.announced = Instant::now();
        let me = self.facts.name.clone();
        let Some(m) = self.role.master() else { return };
        let peers = m.peer_list();
        let attached: std::collections::HashSet<String> = self
            .net
            .conns
            .values()
            .filter_map(|c| match &c.kind {
                Kind::Peer { host: Some(h) } => Some(h.clone()),
                _ => None,
            })
            .collect();
        let addr = self
            .net
            .listeners
            .tcp
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let term = self.failover.term;
        for (host, _) in peers {
            if host != me && !attached.contains(&host) {
                self.send_to_host(
                    &host,
                    Quorum::NewMaster {
                        term,
                        name: me.clone(),
                        addr: addr.clone(),
                    },
                );
            }
        }
    }

    /// On the master, each heartbeat: cut off from most voters, it does
    /// not count hosts' silence (nor let the leases of hosts whose link
    /// broke lapse into their death): the partition may be its own, and
    /// what it decided then would take effect, wrongly, when it heals.
    pub(super) fn excuse_silence_if_cut_off(&mut self) {
        let cut_off = self.role.is_master() && self.failover.isolated(self.cfg.dead_after);
        if cut_off != self.failover.excusing {
            self.failover.excusing = cut_off;
            if cut_off {
                log!(
                    "this master has heard from too few voters for {} ms: hosts' silence does \
                     not count until it hears from most of them again",
                    self.cfg.dead_after.as_millis()
                );
            } else {
                log!("this master hears from most voters again");
            }
        }
        if cut_off {
            if let Some(m) = self.role.master() {
                m.excuse_silence(Instant::now());
            }
        }
    }

    /// What this host says again to a new master, its own master part
    /// included. A report the old master took in but never passed on (it
    /// died first, or the link broke under it) is lost: every VP that
    /// runs here, and is not in a move, says again that it does (a VP that
    /// had just arrived would otherwise stay "moving" for ever), and every
    /// VP that ended here lately that it ended (one the master has heard
    /// of already changes nothing, and one of a VP that runs here again
    /// is not said). A VP rebuilt here from outside that still waits for
    /// the master says so again too (`Waits`: its daemon gives each
    /// answer once).
    pub(super) fn said_again(&self) -> Vec<ToMaster> {
        let running = self
            .local
            .vps
            .by_tid
            .iter()
            .filter(|(&tid, v)| v.exit.is_none() && self.moves.get(tid).is_none())
            .flat_map(|(&tid, v)| {
                let started = ToMaster::Started {
                    tid,
                    pid: v.pid as u32,
                };
                let waits =
                    (v.restored.is_some() && !v.ledger.calls.is_empty()).then(|| ToMaster::Waits {
                        tid,
                        calls: v.ledger.calls.iter().copied().collect(),
                    });
                std::iter::once(started).chain(waits)
            });
        let exits = self
            .local
            .recent_exits
            .iter()
            .filter(|(tid, _)| !self.local.vps.by_tid.contains_key(tid))
            .map(|(tid, status)| ToMaster::Exited {
                tid: *tid,
                status: status.clone(),
            });
        running.chain(exits).collect()
    }

    /// A worker lost its master. It attaches to it again (only the link
    /// may have broken) and, with voters to elect another, waits for one
    /// too; its VPs run on under their lease meanwhile.
    pub(super) fn master_lost(&mut self, why: &str) {
        self.role.lost_master();
        self.fail_unanswered(why);
        if self.failover.hosts.len() > 1 {
            log!(
                "lost the master: {why}; attaching to it again and waiting for the voters to \
                 elect another"
            );
        } else {
            log!("lost the master: {why}; attaching to it again (it was the only voter)");
        }
        self.failover.masterless.get_or_insert(Instant::now());
        self.failover.no_master_since.get_or_insert(Instant::now());
        if let (Some(addr), None) = (self.failover.master_addr, self.attach.target_addr()) {
            let term = self.failover.term;
            self.attach_to(addr, None, term, Duration::ZERO);
        }
    }

    /// Requests the master went away with fail, with why (those not sent
    /// to it yet, kept for the next master, stay).
    pub(super) fn fail_unanswered(&mut self, why: &str) {
        let queued: Vec<u64> = self
            .failover
            .unsent
            .iter()
            .filter_map(|m| match m {
                ToMaster::Control { id, .. } => Some(*id),
                // No user's `mig` waits on an answer to these.
                ToMaster::Heartbeat
                | ToMaster::LeaseAsk { .. }
                | ToMaster::Started { .. }
                | ToMaster::Exited { .. }
                | ToMaster::Output { .. }
                | ToMaster::VpCall { .. }
                | ToMaster::Locate { .. }
                | ToMaster::Owner(_)
                | ToMaster::OwnerDone { .. }
                | ToMaster::Slicing(_)
                | ToMaster::Usage(_)
                | ToMaster::Parked { .. }
                | ToMaster::Movable { .. }
                | ToMaster::GiveAway { .. }
                | ToMaster::MigrateFailed { .. }
                | ToMaster::Missing { .. }
                | ToMaster::Snap { .. }
                | ToMaster::ImageKept { .. }
                | ToMaster::ImageFailed { .. }
                | ToMaster::ImageChecked { .. }
                | ToMaster::ReturnBack { .. }
                | ToMaster::Waits { .. } => None,
            })
            .collect();
        for t in self.proxied.unanswered(&queued) {
            self.send_resp(
                t,
                &Response::Error {
                    message: format!(
                        "the master went away before it answered ({why}); if it was a spawn, \
                         `mig ps` shows whether it began; ask again"
                    ),
                },
            );
        }
    }

    /// Without a master for longer than `KEPT_REQUEST_MAX`: why a user's
    /// request is not kept for the next one.
    pub(super) fn no_master_for_long(&self) -> Option<String> {
        let since = self.failover.no_master_since;
        let since = since.filter(|_| self.awaiting_master())?;
        let waited = since.elapsed();
        (waited >= KEPT_REQUEST_MAX).then(|| {
            format!(
                "{} has had no master for {} s: its voters have not elected another (a \
                 majority of them must be up and reach each other; `mig hosts` through another \
                 daemon shows them); ask again once one is elected",
                self.facts.name,
                waited.as_secs()
            )
        })
    }

    /// Users' requests kept for the next master fail once none has come
    /// for `KEPT_REQUEST_MAX` (what hosts report is kept on).
    pub(super) fn give_up_kept_requests(&mut self) {
        let Some(why) = self.no_master_for_long() else {
            return;
        };
        let (given_up, kept): (VecDeque<ToMaster>, VecDeque<ToMaster>) =
            std::mem::take(&mut self.failover.unsent)
                .into_iter()
                .partition(|m| matches!(m, ToMaster::Control { .. }));
        self.failover.unsent = kept;
        for msg in given_up {
            let ToMaster::Control { id, .. } = msg else {
                continue;
            };
            if let Some(t) = self.proxied.answered(id, false) {
                let message = why.clone();
                self.send_resp(t, &Response::Error { message });
            }
        }
    }

    /// Where this worker's master is, for a daemon that asks to join.
    pub(super) fn failover_master_addr(&self) -> Option<String> {
        self.role.link()?;
        self.failover.master_addr.map(|a| a.to_string())
    }

    /// Is this a worker waiting for a new master (what it would send is
    /// kept for it)?
    pub(super) fn awaiting_master(&self) -> bool {
        self.failover.masterless.is_some() && !self.role.is_master()
    }

    /// Keep `msg` for the next master. Heartbeats and periodic reports are
    /// not kept: the next ones say the same.
    pub(super) fn keep_unsent(&mut self, msg: ToMaster) {
        if msg.is_periodic() {
            return;
        }
        if self.failover.unsent.len() >= UNSENT_MAX {
            return log!("no master for a while: dropping {}", msg.name());
        }
        self.failover.unsent.push_back(msg);
    }

    /// A worker whose master was the only voter stops once it has waited
    /// long enough for that master to declare it dead: no other can be
    /// elected. With voters, it waits for as long as it takes (its VPs are
    /// frozen by its lease meanwhile), trying the master it knows of.
    pub(super) fn masterless_too_long(&mut self) {
        if self.failover.hosts.len() > 1 {
            return;
        }
        let limit = self.cfg.dead_after.max(REDIAL_AFTER * 3);
        if let Some(since) = self.failover.masterless {
            if since.elapsed() > limit && !self.role.is_master() && self.halting.is_none() {
                log!(
                    "no master answered within {} s: stopping",
                    limit.as_secs_f64()
                );
                self.begin_halt();
            }
        }
    }

    /// On the master: `outs` go once the state that decided them is
    /// committed (at once with one voter). That state is looked at and
    /// proposed at most once a turn of the loop, however many decisions
    /// the turn made (`propose_turn`): serializing the whole state for each of a
    /// burst of 300,000 output lines kept one turn busy for seconds, and
    /// the voters elected another master meanwhile. Elsewhere: at once.
    pub(super) fn carry_out_when_committed(&mut self, outs: Vec<Out>) {
        if outs.is_empty() {
            return;
        }
        if self.role.master().is_none() || self.failover.consensus.is_none() {
            self.carry_out(outs);
            return self.lines_taken.carried_out();
        }
        self.failover.this_turn.extend(outs);
    }

    /// The turn of the loop ends: the master's state, if it changed, is
    /// proposed, and what the turn decided waits for it to commit. One
    /// proposal is under way at a time: while the last is not committed,
    /// the decisions of the turns since wait for the next, which carries
    /// all their changes at once (each proposal is the whole state, sent
    /// to every voter: one a turn, with 10,000 VPs a megabyte each, was
    /// more than the voters could take and the master could send).
    pub(super) fn propose_turn(&mut self) {
        if !self.proposable() {
            // Committed decisions left over from a turn that had its share.
            return self.release_held();
        }
        let outs = crate::master::join_directories(std::mem::take(&mut self.failover.this_turn));
        let Some(index) = self.replicate() else {
            self.carry_out(outs);
            return self.lines_taken.carried_out();
        };
        self.failover.held.push_back((index, outs.into()));
        self.lines_taken.proposed(index);
        self.release_held();
    }

    /// On the master: propose its state if it changed. The index the
    /// newest `Out`s must wait for.
    fn replicate(&mut self) -> Option<u64> {
        let m = self.role.master()?;
        let c = self.failover.consensus.as_mut()?;
        let began = Instant::now();
        let bytes = m.export();
        let pace = (began.elapsed() * LOOK_SHARE)
            .max(Duration::from_secs_f64(bytes.len() as f64 / PROPOSE_RATE));
        self.failover.next_look = began + pace.min(LOOK_MAX);
        if bytes != self.failover.exported {
            match c.propose(bytes.clone()) {
                Ok((index, said)) => {
                    self.failover.proposed = index;
                    self.failover.exported = bytes;
                    self.send_said(said);
                }
                Err(e) => warn!("the master's state could not be proposed: {e}"),
            }
        }
        Some(self.failover.proposed)
    }

    /// Carry out the `Out`s whose state is committed, in order, for at
    /// most `RELEASE_TIME` a turn: a commit can release tens of thousands
    /// of them at once (the lines of a flood of output, each copied to its
    /// waiter, its file and the voters), and the loop owes heartbeats. The
    /// rest go next turn (`releasable` keeps the loop from sleeping).
    fn release_held(&mut self) {
        let committed = match &self.failover.consensus {
            Some(c) => c.committed(),
            None => return,
        };
        let began = Instant::now();
        let corked = self.cork();
        let mut copies = Vec::new();
        while began.elapsed() < RELEASE_TIME {
            let Some((i, outs)) = self.failover.held.front_mut() else {
                break;
            };
            if *i > committed {
                break;
            }
            let chunk: Vec<Out> = outs.drain(..outs.len().min(RELEASE_CHUNK)).collect();
            if outs.is_empty() {
                self.failover.held.pop_front();
            }
            for o in chunk {
                self.carry_out_one(o, &mut copies);
            }
        }
        self.keep_job_files(copies, true);
        if corked {
            self.uncork();
        }
        let next = self.failover.held.front().map(|(i, _)| *i);
        self.lines_taken.carried_out_before(next);
    }

    /// Has the master more decisions waiting to be carried out than it
    /// should take in more work for (`HELD_MAX`)? Its workers' news waits
    /// then, as its own VPs' output does while any wait.
    pub(super) fn backlogged(&self) -> bool {
        self.failover
            .held
            .iter()
            .map(|(_, o)| o.len())
            .sum::<usize>()
            + self.failover.this_turn.len()
            > HELD_MAX
    }

    /// Has the master decisions to propose, nothing under way, and may it
    /// look at its state now (the loop does not sleep then)?
    pub(super) fn proposable(&self) -> bool {
        !self.failover.this_turn.is_empty()
            && !self.failover.under_way()
            && Instant::now() >= self.failover.next_look
    }

    /// Are committed `Out`s waiting to be carried out?
    pub(super) fn releasable(&self) -> bool {
        let committed = self.failover.consensus.as_ref().map(|c| c.committed());
        self.failover
            .held
            .front()
            .is_some_and(|(i, _)| committed.is_some_and(|c| *i <= c))
    }

    /// On the master: say when a change of the voters is done (until then,
    /// the old voters and the new must each have a majority alive: a
    /// second voter lost before it is done stops the master's state).
    fn voters_changed(&mut self) {
        let Some(c) = &self.failover.consensus else {
            return;
        };
        if !self.failover.voters_changing || c.changing() || !c.leads() {
            return;
        }
        self.failover.voters_changing = false;
        if let Some(m) = self.role.master() {
            m.voting(c.voters());
        }
        let hosts: Vec<String> = c
            .voters()
            .iter()
            .map(|id| match self.failover.hosts.get(id) {
                Some(h) => format!("{h} ({id})"),
                None => format!("voter {id}"),
            })
            .collect();
        log!(
            "voters changed: the master's state is kept on {}",
            hosts.join(", ")
        );
    }

    /// On the master: a voter not heard from for `REMIND` is told again
    /// that it is one, at most every `REMIND`. The word goes on the data
    /// link to its host, which may not have been up (or may have been
    /// still in its handshake) when the voter was made: a host that never
    /// heard it never votes, though the consensus counts it, and with the
    /// master gone the others may then be too few to elect another.
    fn remind_voters(&mut self) {
        let Some(c) = &self.failover.consensus else {
            return;
        };
        if !c.leads() {
            return;
        }
        let me = c.id();
        let quiet: Vec<(u64, String)> = c
            .voters()
            .into_iter()
            .filter(|&v| v != me)
            .filter(|v| {
                self.failover
                    .heard
                    .get(v)
                    .is_none_or(|t| t.elapsed() >= REMIND)
            })
            .filter(|v| {
                self.failover
                    .reminded
                    .get(v)
                    .is_none_or(|t| t.elapsed() >= REMIND)
            })
            .filter_map(|v| self.failover.hosts.get(&v).map(|h| (v, h.clone())))
            .collect();
        for (id, host) in quiet {
            self.failover.reminded.insert(id, Instant::now());
            debug!("telling voter {id} on {host} again that it votes (not heard from lately)");
            self.tell_voter(&host, id);
        }
    }

    /// On the master: tell `host` it is voter `id`. (A host that joined a
    /// moment ago may be missing from this daemon's address book, whose
    /// word from the master waits, with its other decisions, until the
    /// voters have it: its address is taken from the master's table.)
    fn tell_voter(&mut self, host: &str, id: u64) {
        if !self.net.peers.contains_key(host) {
            let addr = self.role.master().and_then(|m| {
                m.peer_list()
                    .into_iter()
                    .find(|(n, _)| n == host)
                    .and_then(|(_, a)| a.parse().ok())
            });
            if let Some(a) = addr {
                self.net.peers.insert(host.to_string(), a);
            }
        }
        self.send_to_host(host, Quorum::Voter { id });
    }

    /// On the master: the next change to the voters, when the consensus
    /// can take one (on every tick, and at once when a host is given up).
    pub(super) fn change_voters(&mut self) {
        let Some(c) = &self.failover.consensus else {
            return;
        };
        if !c.leads() || c.changing() || self.failover.isolated(self.cfg.dead_after) {
            return;
        }
        let Some(m) = self.role.master() else { return };
        let Some(change) = m.voter_change() else {
            return;
        };
        let list = m.voters_msg();
        let VoterChange { add, remove } = change;
        let mut what: Vec<String> = remove
            .iter()
            .map(|(id, host)| format!("voter {id} on {host} (gone) votes no more"))
            .collect();
        for (id, host) in &add {
            self.failover.hosts.insert(*id, host.clone());
            // (Heard from as it joins: it has had no chance to speak yet.)
            self.failover.heard.insert(*id, Instant::now());
            self.tell_voter(host, *id);
            what.push(format!("host {host} becomes voter {id}"));
        }
        log!("voters change: {}", what.join("; "));
        let add: Vec<u64> = add.iter().map(|(i, _)| *i).collect();
        let remove: Vec<u64> = remove.iter().map(|(i, _)| *i).collect();
        let result = self
            .failover
            .consensus
            .as_mut()
            .map(|c| c.change_voters(&add, &remove));
        match result {
            Some(Ok(said)) => {
                self.failover.voters_changing = true;
                self.send_said(said);
            }
            Some(Err(e)) => warn!("the voters could not be changed: {e}"),
            None => {}
        }
        self.carry_out_when_committed(vec![Out::Broadcast(list)]);
    }
}
