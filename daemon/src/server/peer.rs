//! Messages between daemons once authenticated: which link carries which
//! conversation (`peer_msg`), the master's side of its workers (`Register`,
//! `Attach`, their `ToMaster` news), a host's side of its master (`ToHost`),
//! what comes on a data link (`DataLink`), and carrying out the master's
//! `Out`s. What does not live here: setting links up (`handshake`,
//! `attach`, `token`), the quorum's messages (`quorum_msg` in `failover`).

use std::time::Instant;

use libmig::frame;
use libmig::msg::{
    DataLink, ExitInfo, Handshake, HostFacts, JobFileCopy, PeerMsg, Response, ToHost, ToMaster,
};
use mio::Token;

use super::move_in::ImagePart;
use super::{net, Daemon};
use crate::conn::Kind;
use crate::master::{Out, Requester};
use crate::route::Body;
use crate::switcher::wall_ns;
use crate::{host, log, warn};

impl Daemon {
    /// A message from another daemon on connection `t` of kind `kind`. A
    /// link being set up takes only the handshake; once it is up, each kind
    /// of link carries its conversations, and one on a link that does not
    /// carry it is refused (ignored from the master).
    pub(super) fn peer_msg(&mut self, t: Token, kind: Kind, msg: PeerMsg, payload: Vec<u8>) {
        match (kind, msg) {
            (Kind::Accepting, msg) => self.accepting(t, msg),
            (Kind::Dialling { host }, msg) => self.dialling(t, host, msg),
            (Kind::Attaching { sent, .. }, msg) => self.attaching(t, sent, msg),
            (kind @ (Kind::Control | Kind::Vp { .. }), msg) => {
                self.off_its_link(t, &kind, msg.name(), "links between daemons")
            }
            (kind, PeerMsg::Handshake(m)) => self.handshake_msg(t, &kind, m),
            (Kind::Peer { host: Some(h) }, PeerMsg::ToMaster(m)) => self.on_worker_msg(&h, t, m),
            (Kind::Master, PeerMsg::ToHost(m)) => self.on_master_msg(m),
            (Kind::Data { .. }, PeerMsg::Data(m)) => self.data_msg(t, m, payload),
            (Kind::Data { host }, PeerMsg::Quorum(m)) => self.quorum_msg(&host, m),
            (Kind::Data { host }, PeerMsg::Bidding(m)) => self.bidding_msg(&host, m),
            (Kind::Data { host }, PeerMsg::Rate(m)) => self.rate_msg(&host, m),
            (
                kind @ (Kind::Peer { host: Some(_) } | Kind::Master | Kind::Data { .. }),
                PeerMsg::Part { last },
            ) => self.part(t, kind, last, payload),
            (kind, PeerMsg::ToMaster(m)) => {
                self.off_its_link(t, &kind, m.name(), "a host's link to its master")
            }
            (kind, PeerMsg::ToHost(m)) => {
                self.off_its_link(t, &kind, m.name(), "the master's link to a host")
            }
            (kind, PeerMsg::Data(m)) => self.off_its_link(t, &kind, m.name(), "data links"),
            (kind, PeerMsg::Quorum(m)) => self.off_its_link(t, &kind, m.name(), "data links"),
            (kind, PeerMsg::Bidding(m)) => self.off_its_link(t, &kind, m.name(), "data links"),
            (kind, PeerMsg::Rate(m)) => self.off_its_link(t, &kind, m.name(), "data links"),
            (kind, PeerMsg::Part { .. }) => {
                self.off_its_link(t, &kind, "Part", "a link that says what it is")
            }
        }
    }

    /// Message `what` came on `t`, a link of kind `kind` that does not
    /// carry it (it travels on `travels`): refused, but from the master,
    /// whose link is not given up for it (it says the master is there).
    fn off_its_link(&mut self, t: Token, kind: &Kind, what: &str, travels: &str) {
        match kind {
            Kind::Master => {
                self.attach.heard = Instant::now();
                warn!("ignoring unexpected {what} from the master")
            }
            Kind::Peer { host: Some(h) } => {
                self.refuse(t, &format!("unexpected {what} from worker {h}"))
            }
            kind => self.refuse(
                t,
                &format!("unexpected {what} on {kind} (it travels on {travels})"),
            ),
        }
    }

    /// A message of the handshake on authenticated link `t` of kind
    /// `kind`: a worker that registers or attaches, a data link's dialler
    /// saying who it is, the master taking back a host it had fenced.
    fn handshake_msg(&mut self, t: Token, kind: &Kind, msg: Handshake) {
        match (kind, msg) {
            (Kind::Peer { host: None }, Handshake::Register { facts }) => self.registers(t, facts),
            (Kind::Peer { host: Some(h) }, Handshake::Register { facts }) => {
                let h = h.clone();
                self.registers_again(&h, t, facts)
            }
            (Kind::Peer { host: None }, Handshake::Attach { facts }) => self.attaches(t, facts),
            (Kind::Peer { host: None }, Handshake::Hi { name }) => {
                if let Some(c) = self.net.conns.get_mut(&t) {
                    c.kind = Kind::Data { host: name };
                }
            }
            (Kind::Master, Handshake::Registered { .. }) => {
                self.attach.heard = Instant::now();
                self.local.rejoined()
            }
            (
                kind,
                m @ (Handshake::Register { .. }
                | Handshake::Attach { .. }
                | Handshake::Hi { .. }
                | Handshake::Registered { .. }),
            ) => self.off_its_link(t, kind, m.name(), "a link being set up"),
            (
                kind,
                m @ (Handshake::Hello { .. }
                | Handshake::Challenge { .. }
                | Handshake::Proof { .. }
                | Handshake::Welcome
                | Handshake::Refused { .. }
                | Handshake::JoinWithToken { .. }
                | Handshake::JoinAnswer { .. }
                | Handshake::ClusterKeyIs { .. }
                | Handshake::Redirect { .. }),
            ) => self.off_its_link(t, kind, m.name(), "a link being authenticated"),
        }
    }

    /// A daemon that authenticated on `t` joins afresh (`Register`): on
    /// the master, it is a worker now; a worker tells it where the master
    /// is.
    fn registers(&mut self, t: Token, facts: HostFacts) {
        if !self.role.is_master() {
            return match self.failover_master_addr() {
                Some(addr) => self.send_peer(t, Handshake::Redirect { addr }),
                None => self.refuse(t, net::NO_MASTER_NOW),
            };
        }
        let Some(m) = self.role.master() else {
            return self.refuse(t, net::NOT_THE_MASTER);
        };
        let (name, out) = m.register(facts, Instant::now());
        let dir = m.directory();
        let voters = m.voters_msg();
        if let Some(u) = self.role.unsent_to() {
            u.remove(&name);
        }
        // (A daemon started anew numbers its lines from 1 again.)
        self.lines_taken.forget(&name);
        self.retire_links_of(&name, t);
        if let Some(c) = self.net.conns.get_mut(&t) {
            c.kind = Kind::Peer {
                host: Some(name.clone()),
            };
        }
        self.send_peer(t, Handshake::Registered { name });
        self.send_peer(t, dir);
        self.send_peer(t, voters);
        self.carry_out_when_committed(out);
    }

    /// A worker that authenticated on `t` attaches (after a change of
    /// master, or its link broke): it goes on as it was, or hears it was
    /// fenced.
    fn attaches(&mut self, t: Token, facts: HostFacts) {
        let Some(m) = self.role.master() else {
            return self.refuse(t, net::NOT_THE_MASTER);
        };
        let (name, out, fenced) = m.attach(facts, Instant::now());
        let dir = m.directory();
        let voters = m.voters_msg();
        self.retire_links_of(&name, t);
        if let Some(c) = self.net.conns.get_mut(&t) {
            c.kind = Kind::Peer {
                host: Some(name.clone()),
            };
        }
        if fenced {
            if let Some(u) = self.role.unsent_to() {
                u.remove(&name);
            }
            self.send_peer(
                t,
                ToHost::Fenced {
                    why: "it was declared dead while it could not be reached".into(),
                },
            );
        } else {
            self.send_peer(t, Handshake::Registered { name: name.clone() });
            self.send_peer(t, dir);
            self.send_peer(t, voters);
            let kept = self.role.unsent_to().and_then(|u| u.remove(&name));
            for msg in kept.unwrap_or_default() {
                self.send_peer(t, msg);
            }
        }
        self.carry_out_when_committed(out);
    }

    /// Worker `h` registers again on its link `t`: fenced, it ended its
    /// VPs and joins again, under its name. (One held alive may not.)
    fn registers_again(&mut self, h: &str, t: Token, facts: HostFacts) {
        let Some(m) = self.role.master() else { return };
        if m.is_alive(h) {
            return self.off_its_link(
                t,
                &Kind::Peer {
                    host: Some(h.to_string()),
                },
                "Register",
                "a link being set up",
            );
        }
        let facts = HostFacts {
            name: h.to_string(),
            ..facts
        };
        let (name, out) = m.register(facts, Instant::now());
        let dir = m.directory();
        if let Some(u) = self.role.unsent_to() {
            u.remove(&name);
        }
        self.lines_taken.forget(&name);
        self.send_peer(t, Handshake::Registered { name });
        self.send_peer(t, dir);
        self.carry_out_when_committed(out);
    }

    /// On the master: host `name` attached or registered on `t`; an older
    /// link of the same host (broken without a word: a partition, a
    /// worker that gave up on a silent link) goes quietly, not as a host
    /// lost.
    fn retire_links_of(&mut self, name: &str, t: Token) {
        let old: Vec<Token> = self
            .net
            .conns
            .iter()
            .filter(|(k, c)| {
                **k != t
                    && c.kind
                        == Kind::Peer {
                            host: Some(name.to_string()),
                        }
            })
            .map(|(k, _)| *k)
            .collect();
        for k in old {
            self.quiet_close(k, "replaced by a newer link of the same host");
        }
    }

    /// On the master: news from worker `h` on its link `t`.
    pub(super) fn on_worker_msg(&mut self, h: &str, t: Token, msg: ToMaster) {
        // Answered at once, whatever the consensus: the worker knows by the
        // answers that its link carries both ways (see `attach`).
        if matches!(msg, ToMaster::Heartbeat) {
            let lines = self.lines_taken.safe(h);
            self.send_peer(t, ToHost::Heartbeat { lines });
        }
        let Some(m) = self.role.master() else { return };
        let mut out = m.heard_from(h, Instant::now());
        if !m.is_alive(h) {
            // Declared dead: it hears it is fenced, and nothing it says
            // counts any more.
            return self.carry_out_when_committed(out);
        }
        if let ToMaster::Output { n, .. } = &msg {
            if !self.lines_taken.take(h, *n) {
                // Sent again on a new link: it came on the last.
                return self.carry_out_when_committed(out);
            }
        }
        if let ToMaster::Control { id, req, uid } = &msg {
            let (id, uid) = (*id, *uid);
            if let Some(resp) = self.answer_logs(uid, req) {
                self.carry_out_when_committed(out);
                return self.send_peer(t, ToHost::Reply { id, resp });
            }
        }
        if let Some(m) = self.role.master() {
            out.extend(m.with_wall(wall_ns()).from_host(h, msg));
        }
        self.carry_out_when_committed(out);
    }

    /// A message from the host at the other end of data link `t` (with
    /// its payload).
    fn data_msg(&mut self, t: Token, msg: DataLink, payload: Vec<u8>) {
        match msg {
            DataLink::Deliver(env) => self.route(env, Body::Bytes(payload), Some(t)),
            DataLink::Undeliverable { env, reason } => self.undeliverable(env, &reason),
            DataLink::RestorePart {
                tid,
                at,
                total,
                last,
                start,
            } => {
                let part = ImagePart {
                    tid,
                    at,
                    total,
                    last,
                };
                self.image_part(t, part, start, &payload);
                if let Some(c) = self.net.conns.get_mut(&t) {
                    c.dec.recycle(payload);
                }
            }
            DataLink::RestoreOff { tid } => self.restore_off(tid),
            DataLink::ImagePart {
                image, at, total, ..
            } => self.image_copy_part(t, image, (at, total), payload),
            DataLink::ImageAck { image, upto } => self.image_acked(&image, upto),
        }
    }

    /// On the master, each heartbeat: a worker whose messages it has not
    /// all read (left for the next turn, or not read while the master
    /// carries out a backlog or while what they feed is full) hears a
    /// heartbeat. The master answers a worker's heartbeat only once it
    /// reads it, behind the worker's news: a flood of output kept that
    /// answer more than `dead_after` behind, the worker took its silence
    /// for a lost link and cut it, and the lines in flight were lost.
    pub(super) fn behind_but_alive(&mut self) {
        if !self.role.is_master() {
            return;
        }
        let behind: Vec<(Token, u64)> = self
            .net
            .conns
            .iter()
            .filter_map(|(t, c)| match &c.kind {
                Kind::Peer { host: Some(h) } if c.paused || self.net.read_again.contains(t) => {
                    Some((*t, self.lines_taken.safe(h)))
                }
                _ => None,
            })
            .collect();
        for (t, lines) in behind {
            self.send_peer(t, ToHost::Heartbeat { lines });
        }
    }

    /// On a worker: a message from the master.
    pub(super) fn on_master_msg(&mut self, msg: ToHost) {
        self.attach.heard = Instant::now();
        self.host_msg(msg);
    }

    /// A message for this host (from the master, possibly itself).
    pub(super) fn host_msg(&mut self, msg: ToHost) {
        match msg {
            ToHost::Heartbeat { lines } => self.lines_sent.taken(lines),
            ToHost::Reply { id, resp } => self.answered(id, resp),
            ToHost::Start(s) => self.start_vp(s),
            ToHost::Kill { tid } => {
                self.drop_sent(tid);
                if let Some(vp) = self.local.vps.by_tid.get(&tid) {
                    vp.kill();
                }
                // Parked, or not started yet (its lease lapsed): it ends
                // here and now.
                let parked = self.moves.unpark(tid);
                let held = self.local.lease.undefer(tid);
                if let Some(p) = &parked {
                    crate::discard::remove_later(&p.path);
                }
                if parked.is_some() || held {
                    let status = ExitInfo {
                        code: None,
                        signal: Some(9),
                        error: None,
                        cpu_ms: None,
                    };
                    self.report(ToMaster::Exited { tid, status });
                }
            }
            ToHost::Unpark { tid } => self.unpark(tid),
            ToHost::Recall { tid } => self.recall(tid),
            ToHost::Input { tid, data, eof } => self.local.feed_input(tid, &data, eof),
            ToHost::Signal { tid, signal } if libmig::msg::signal_ok(signal) => {
                if let Some(vp) = self.local.vps.by_tid.get(&tid) {
                    host::signal_number(vp.pid, signal);
                }
            }
            ToHost::Signal { tid, signal } => {
                warn!("ignoring signal {signal} for VP t{tid:x}: not one a VP may be sent")
            }
            ToHost::Snap { tid, step } => self.snap_step(tid, step),
            ToHost::CopyImage { image, to, start } => self.copy_image(image, to, start),
            ToHost::CheckImage { image } => self.check_image(image),
            ToHost::PruneImages { job, keep } => self.images.prune_images(&job, &keep),
            ToHost::SlotTable(t) => {
                self.slicing.slicer.install(t);
                self.drive_slicer();
            }
            ToHost::Hold { tids, hold } => self.hold_vps(&tids, hold),
            ToHost::Halt => {
                log!("halt requested");
                self.begin_halt();
            }
            ToHost::LeaseGrant { n, ms } => self.lease_granted(n, ms),
            ToHost::Fenced { why } => {
                self.images.forget_copies();
                self.fenced(&why)
            }
            ToHost::MoveOut { to, start } => self.move_out(to, start),
            ToHost::OwnerCommand { id, reclaim } => {
                self.owner.request(reclaim, Instant::now());
                self.owner_poll(Some(id));
            }
            ToHost::Peers(list) => {
                self.net.peers = list
                    .into_iter()
                    .filter_map(|(n, a)| a.parse().ok().map(|a| (n, a)))
                    .collect();
            }
            ToHost::Directory(entries) => self.directory(entries),
            ToHost::Fence { tids, incarnation } => self.router.fence(&tids, incarnation),
            ToHost::VpReturn { tid, id, ret } => self.vp_return(tid, id, ret),
            ToHost::Voters(list) => self.on_voters(list),
        }
    }

    /// Reply `resp` to request `id` this host passed on to the master, for
    /// the local `mig` that made it.
    fn answered(&mut self, id: u64, resp: Response) {
        // Spawned, Output and VpDone may be followed by more replies.
        let more = matches!(
            resp,
            Response::Spawned { .. } | Response::Output { .. } | Response::VpDone { .. }
        );
        if let Some(t) = self.proxied.answered(id, more) {
            self.send_resp(t, &resp);
        }
    }

    /// Report to the master (handled in place when this is the master).
    pub(super) fn report(&mut self, msg: ToMaster) {
        if matches!(msg, ToMaster::MigrateFailed { .. }) {
            self.metrics.move_failed();
        }
        if let Some(m) = self.role.master() {
            let out = m.with_wall(wall_ns()).from_host(&self.facts.name, msg);
            self.carry_out_when_committed(out);
        } else if let Some(link) = self.role.link() {
            self.lines_sent.sent(&msg);
            self.send_peer(link, msg);
        } else if self.awaiting_master() {
            self.keep_unsent(msg);
        }
    }

    /// From now until `uncork`, messages to other daemons, VPs and control
    /// clients are queued, not written: a burst of decisions (a spawn of a
    /// thousand VPs tells every host where each VP is) costs a write per
    /// connection, not a system call (and a wake-up of its reader) per
    /// message. Was it not corked already (the caller then uncorks)?
    pub(super) fn cork(&mut self) -> bool {
        if self.net.corked.is_some() {
            return false;
        }
        self.net.corked = Some(Default::default());
        true
    }

    /// Write what was queued since `cork`, on each connection once.
    pub(super) fn uncork(&mut self) {
        for t in self.net.corked.take().unwrap_or_default() {
            let failed = match self.net.conns.get_mut(&t) {
                Some(c) => c.flush(self.net.poll.registry(), t).err(),
                None => continue,
            };
            if let Some(e) = failed {
                self.write_failed(t, &e);
            }
            self.maybe_resume(t);
        }
    }

    /// Write now what was queued for `t` since `cork` (a message a signal
    /// tells its reader to look for must be there when it looks).
    pub(super) fn flush_now(&mut self, t: Token) {
        if !self.net.corked.as_mut().is_some_and(|c| c.remove(&t)) {
            return;
        }
        let failed = match self.net.conns.get_mut(&t) {
            Some(c) => c.flush(self.net.poll.registry(), t).err(),
            None => return,
        };
        if let Some(e) = failed {
            self.write_failed(t, &e);
        }
        self.maybe_resume(t);
    }

    /// Carry out the master's `Out`s (see `carry_out_when_committed`: on
    /// the master, once the state that decided them is committed).
    pub(super) fn carry_out(&mut self, outs: Vec<Out>) {
        let corked = self.cork();
        // Changes to the job files, copied to the other voters together.
        let mut copies = Vec::new();
        for o in crate::master::join_directories(outs) {
            self.carry_out_one(o, &mut copies);
        }
        self.keep_job_files(copies, true);
        if corked {
            self.uncork();
        }
    }

    /// Carry out one `Out`; changes to the job files are added to `copies`
    /// (the caller keeps them, and copies them to the voters in one go).
    pub(super) fn carry_out_one(&mut self, o: Out, copies: &mut Vec<JobFileCopy>) {
        match o {
            // The master's own news, filtered as its module's.
            Out::Log(l) => crate::log_at!(log::Level::Info, "migd::master", "{l}"),
            Out::JobOutput { job, line } => {
                crate::log_at!(log::Level::Debug, "migd::output", "{job} {line}");
                copies.push(JobFileCopy::Output { job, line });
            }
            Out::History(info) => copies.push(JobFileCopy::History(info)),
            Out::ForgetOutput(job) => copies.push(JobFileCopy::Forget { job }),
            Out::Reply(Requester::Local(t), resp) => self.send_resp(Token(t), &resp),
            Out::Reply(Requester::Remote { host, id }, resp) if host == self.facts.name => {
                // Forwarded by this daemon before it was elected.
                self.answered(id, resp)
            }
            Out::Reply(Requester::Remote { host, id }, resp) => {
                if let Some(t) = self.net.host_token(&host) {
                    self.send_peer(t, ToHost::Reply { id, resp });
                }
            }
            Out::Reply(Requester::Vp { tid, id }, _) => {
                warn!("dropping a control reply meant for VP t{tid:x} call {id}")
            }
            Out::Broadcast(msg) => {
                let workers = self.net.worker_links();
                // Encoded once for all.
                let wire = PeerMsg::ToHost(msg.clone());
                match frame::encode(&wire) {
                    Ok(bytes) => {
                        for t in workers {
                            self.send_bytes(t, &bytes);
                        }
                    }
                    Err(_) => {
                        for t in workers {
                            self.send_peer(t, wire.clone());
                        }
                    }
                }
                self.host_msg(msg);
            }
            Out::Deliver(env, payload) => self.route(env, Body::Bytes(payload), None),
            Out::SlotTables {
                generation,
                slots,
                all,
                tables,
            } => self.send_tables(generation, slots, all, tables),
            Out::Disconnect(host) => {
                if let Some(t) = self.net.host_token(&host) {
                    // What was queued for it goes first, as it would
                    // have uncorked.
                    if let Some(c) = self.net.conns.get_mut(&t) {
                        let _ = c.flush(self.net.poll.registry(), t);
                    }
                    self.close(t, "given up for dead");
                }
                // A voter's host given up is replaced now, not at the
                // next tick: until it is, one more voter lost stops the
                // master.
                self.change_voters();
            }
            Out::ToHost(host, msg) => {
                if host == self.facts.name {
                    self.host_msg(msg);
                } else if let Some(t) = self.net.host_token(&host) {
                    self.send_peer(t, msg);
                } else {
                    self.unsent(host, msg);
                }
            }
        }
    }

    /// A message for a host with no link: kept while the master holds it
    /// alive (only the link may have broken; it attaches again), up to a
    /// bound; else dropped.
    fn unsent(&mut self, host: String, msg: ToHost) {
        const MAX: usize = 4096;
        let alive = self.role.master().is_some_and(|m| m.is_alive(&host));
        let kept = self.role.unsent_to().filter(|_| alive);
        if let Some(u) = kept.filter(|u| u.get(&host).map_or(0, Vec::len) < MAX) {
            u.entry(host).or_default().push(msg);
        } else {
            warn!("no connection to {host}; dropping {}", msg.name());
        }
    }
}
