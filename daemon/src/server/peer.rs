//! Messages between daemons once authenticated: the master's side of its
//! workers, a worker's side of its master, and delivering the master's `Out`s.

use super::*;

impl Daemon {
    /// A message from another daemon on connection `t` of kind `kind`.
    pub(super) fn peer_msg(&mut self, t: Token, kind: Kind, msg: PeerMsg, payload: Vec<u8>) {
        match (kind, msg) {
            (Kind::Accepting, msg) => self.accepting(t, &msg),
            (
                kind @ (Kind::Peer { host: Some(_) } | Kind::Master | Kind::Data { .. }),
                PeerMsg::Part { last },
            ) => self.part(t, kind, last, payload),
            (Kind::Dialling { host }, msg) => self.dialling(t, host, &msg),
            (Kind::Attaching { sent, .. }, msg) => self.attaching(t, sent, msg),
            (Kind::Peer { host: None }, PeerMsg::Register { .. }) if !self.role.is_master() => {
                match self.failover_master_addr() {
                    Some(addr) => self.send_peer(t, &PeerMsg::Redirect { addr }),
                    None => self.refuse(t, net::NO_MASTER_NOW),
                }
            }
            (Kind::Peer { host: None }, PeerMsg::Attach { facts }) => {
                let Some(m) = self.role.master() else {
                    return self.refuse(t, net::NOT_THE_MASTER);
                };
                let (name, out, fenced) = m.attach(facts, Instant::now());
                let dir = m.directory();
                let voters = m.voters_msg();
                self.retire_links_of(&name, t);
                if let Some(c) = self.conns.get_mut(&t) {
                    c.kind = Kind::Peer {
                        host: Some(name.clone()),
                    };
                }
                if fenced {
                    self.unsent_to.remove(&name);
                    self.send_peer(
                        t,
                        &PeerMsg::Fenced {
                            why: "it was declared dead while it could not be reached".into(),
                        },
                    );
                } else {
                    self.send_peer(t, &PeerMsg::Registered { name: name.clone() });
                    self.send_peer(t, &dir);
                    self.send_peer(t, &voters);
                    for msg in self.unsent_to.remove(&name).unwrap_or_default() {
                        self.send_peer(t, &msg);
                    }
                }
                self.deliver(out);
            }
            (Kind::Data { host }, PeerMsg::Consensus { from, msg }) => {
                self.on_consensus(&host, from, &msg)
            }
            (Kind::Data { .. }, PeerMsg::NewMaster { term, name, addr }) => {
                self.on_new_master(term, &name, &addr)
            }
            (Kind::Data { .. }, PeerMsg::Voter { id }) => self.on_voter(id),
            (Kind::Data { host }, PeerMsg::JobFile(copy)) => self.on_job_file(&host, copy),
            (Kind::Peer { host: None }, PeerMsg::Register { facts }) => {
                let Some(m) = self.role.master() else {
                    return self.refuse(t, net::NOT_THE_MASTER);
                };
                let (name, out) = m.register(facts, Instant::now());
                let dir = m.directory();
                let voters = m.voters_msg();
                self.unsent_to.remove(&name);
                self.retire_links_of(&name, t);
                if let Some(c) = self.conns.get_mut(&t) {
                    c.kind = Kind::Peer {
                        host: Some(name.clone()),
                    };
                }
                self.send_peer(t, &PeerMsg::Registered { name });
                self.send_peer(t, &dir);
                self.send_peer(t, &voters);
                self.deliver(out);
            }
            (Kind::Peer { host: None }, PeerMsg::Hi { name }) => {
                if let Some(c) = self.conns.get_mut(&t) {
                    c.kind = Kind::Data { host: name };
                }
            }
            (Kind::Data { .. }, PeerMsg::Deliver(env)) => {
                self.route(env, Body::Bytes(payload), Some(t))
            }
            (
                Kind::Data { .. },
                PeerMsg::RestorePart {
                    tid,
                    at,
                    total,
                    last,
                    start,
                },
            ) => {
                let part = ImagePart {
                    tid,
                    at,
                    total,
                    last,
                };
                self.image_part(t, part, start, &payload);
                if let Some(c) = self.conns.get_mut(&t) {
                    c.dec.recycle(payload);
                }
            }
            (Kind::Data { .. }, PeerMsg::Undeliverable { env, reason }) => {
                self.undeliverable(env, &reason)
            }
            (
                Kind::Data { .. },
                PeerMsg::ImagePart {
                    image, at, total, ..
                },
            ) => self.image_copy_part(t, image, (at, total), payload),
            (Kind::Data { .. }, PeerMsg::ImageAck { image, upto }) => {
                self.image_acked(&image, upto)
            }
            (Kind::Data { .. }, PeerMsg::RestoreOff { tid }) => self.restore_off(tid),
            (Kind::Peer { host: Some(h) }, msg) => self.on_worker_msg(&h, t, msg),
            (Kind::Master, msg) => self.on_master_msg(msg),
            (_, other) => self.refuse(t, &format!("unexpected {}", other.name())),
        }
    }

    /// On the master: host `name` attached or registered on `t`; an older
    /// link of the same host (broken without a word: a partition, a
    /// worker that gave up on a silent link) goes quietly, not as a host
    /// lost.
    fn retire_links_of(&mut self, name: &str, t: Token) {
        let old: Vec<Token> = self
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

    /// On the master: a message from worker `h`.
    pub(super) fn on_worker_msg(&mut self, h: &str, t: Token, msg: PeerMsg) {
        // Answered at once, whatever the consensus: the worker knows by the
        // answers that its link carries both ways (see `attach`).
        if matches!(msg, PeerMsg::Heartbeat) {
            self.send_peer(t, &PeerMsg::Heartbeat);
        }
        let Some(m) = self.role.master() else { return };
        if let (false, PeerMsg::Register { facts }) = (m.is_alive(h), &msg) {
            // Fenced, it ended its VPs and registers again, under its name.
            let facts = HostFacts {
                name: h.to_string(),
                ..facts.clone()
            };
            let (name, out) = m.register(facts, Instant::now());
            let dir = m.directory();
            self.unsent_to.remove(&name);
            self.send_peer(t, &PeerMsg::Registered { name });
            self.send_peer(t, &dir);
            return self.deliver(out);
        }
        let mut out = m.heard_from(h, Instant::now());
        if !m.is_alive(h) {
            // Declared dead: it hears it is fenced, and nothing it says
            // counts any more.
            return self.deliver(out);
        }
        if let PeerMsg::Control { id, req, uid } = &msg {
            let (id, uid) = (*id, *uid);
            if let Some(resp) = self.answer_logs(uid, req) {
                self.deliver(out);
                return self.send_peer(t, &PeerMsg::Reply { id, resp });
            }
        }
        let Some(m) = self.role.master() else {
            return self.deliver(out);
        };
        out.extend(match msg {
            PeerMsg::Control { id, req, uid } => m.with_wall(wall_ns()).control_by(
                uid,
                Requester::Remote {
                    host: h.to_string(),
                    id,
                },
                h,
                req,
            ),
            msg => {
                let what = msg.name();
                match m.with_wall(wall_ns()).from_host(h, msg) {
                    Some(out) => out,
                    None => {
                        return self.refuse(t, &format!("unexpected {what} from a worker"));
                    }
                }
            }
        });
        self.deliver(out);
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
        let behind: Vec<Token> = self
            .conns
            .iter()
            .filter(|(t, c)| {
                matches!(c.kind, Kind::Peer { host: Some(_) })
                    && (c.paused || self.read_again.contains(t))
            })
            .map(|(t, _)| *t)
            .collect();
        for t in behind {
            self.send_peer(t, &PeerMsg::Heartbeat);
        }
    }

    /// On a worker: a message from the master.
    pub(super) fn on_master_msg(&mut self, msg: PeerMsg) {
        self.attach.heard = Instant::now();
        match msg {
            PeerMsg::Reply { id, resp } => {
                // Spawned, Output and VpDone may be followed by more replies.
                let more = matches!(
                    resp,
                    Response::Spawned { .. } | Response::Output { .. } | Response::VpDone { .. }
                );
                if let Some(t) = self.proxied.answered(id, more) {
                    self.send_resp(t, &resp);
                }
            }
            other => self.host_msg(other),
        }
    }

    /// A message for this host (from the master, possibly itself).
    pub(super) fn host_msg(&mut self, msg: PeerMsg) {
        match msg {
            PeerMsg::Start(s) => self.start_vp(s),
            PeerMsg::Kill { tid } => {
                self.drop_sent(tid);
                if let Some(vp) = self.vps.by_tid.get(&tid) {
                    vp.kill();
                }
                // Parked, or not started yet (its lease lapsed): it ends
                // here and now.
                let parked = self.moves.unpark(tid);
                let held = self.lease.undefer(tid);
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
                    self.report(PeerMsg::Exited { tid, status });
                }
            }
            PeerMsg::Unpark { tid } => self.unpark(tid),
            PeerMsg::Recall { tid } => self.recall(tid),
            PeerMsg::Input { tid, data, eof } => self.feed_input(tid, &data, eof),
            PeerMsg::Signal { tid, signal } if libmig::msg::signal_ok(signal) => {
                if let Some(vp) = self.vps.by_tid.get(&tid) {
                    host::signal_number(vp.pid, signal);
                }
            }
            PeerMsg::Snap { tid, step } => self.snap_step(tid, step),
            PeerMsg::CopyImage { image, to, start } => self.copy_image(image, to, start),
            PeerMsg::CheckImage { image } => self.check_image(image),
            PeerMsg::PruneImages { job, keep } => self.prune_images(&job, &keep),
            PeerMsg::SlotTable(t) => {
                self.slicer.install(t);
                self.drive_slicer();
            }
            PeerMsg::Hold { tids, hold } => self.hold_vps(&tids, hold),
            PeerMsg::Halt => {
                log!("halt requested");
                self.begin_halt();
            }
            PeerMsg::LeaseGrant { n, ms } => self.lease_granted(n, ms),
            PeerMsg::Fenced { why } => {
                // The master counts none of the images kept here any more.
                self.copies_in.clear();
                self.copies_out.clear();
                self.outbound
                    .retain(|o| !matches!(o.what, crate::migrate::Sending::Copy(_)));
                self.store.clear();
                self.fenced(&why)
            }
            PeerMsg::Checkpoint { to, start } => self.checkpoint(to, start),
            PeerMsg::OwnerCommand { id, reclaim } => {
                self.owner.request(reclaim, Instant::now());
                self.owner_poll(Some(id));
            }
            PeerMsg::Peers(list) => {
                self.peers = list
                    .into_iter()
                    .filter_map(|(n, a)| a.parse().ok().map(|a| (n, a)))
                    .collect();
            }
            PeerMsg::Directory(entries) => self.directory(entries),
            PeerMsg::Fence { tids, incarnation } => self.router.fence(&tids, incarnation),
            PeerMsg::VpReturn { tid, id, ret } => {
                if let Some(&t) = self.vp_conns.get(&tid) {
                    self.send_vp(t, &VpMsg::Return { id, ret });
                }
            }
            PeerMsg::Registered { .. } => self.rejoined(),
            PeerMsg::Voters(list) => self.on_voters(list),
            PeerMsg::Voter { id } => self.on_voter(id),
            PeerMsg::Heartbeat => {}
            other => warn!("ignoring unexpected {} from the master", other.name()),
        }
    }

    /// Report to the master (handled in place when this is the master).
    pub(super) fn report(&mut self, msg: PeerMsg) {
        if matches!(msg, PeerMsg::MigrateFailed { .. }) {
            self.metrics.move_failed();
        }
        if let Some(m) = self.role.master() {
            let out = m
                .with_wall(wall_ns())
                .from_host(&self.facts.name, msg)
                .unwrap_or_default();
            self.deliver(out);
        } else if let Some(link) = self.role.link() {
            self.send_peer(link, &msg);
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
        if self.corked.is_some() {
            return false;
        }
        self.corked = Some(Default::default());
        true
    }

    /// Write what was queued since `cork`, on each connection once.
    pub(super) fn uncork(&mut self) {
        for t in self.corked.take().unwrap_or_default() {
            let failed = match self.conns.get_mut(&t) {
                Some(c) => c.flush(self.poll.registry(), t).err(),
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
        if !self.corked.as_mut().is_some_and(|c| c.remove(&t)) {
            return;
        }
        let failed = match self.conns.get_mut(&t) {
            Some(c) => c.flush(self.poll.registry(), t).err(),
            None => return,
        };
        if let Some(e) = failed {
            self.write_failed(t, &e);
        }
        self.maybe_resume(t);
    }

    /// Carry out the master's `Out`s (see `deliver`: on the master, once
    /// the state that decided them is committed).
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
                let more = matches!(
                    resp,
                    Response::Spawned { .. } | Response::Output { .. } | Response::VpDone { .. }
                );
                if let Some(t) = self.proxied.answered(id, more) {
                    self.send_resp(t, &resp);
                }
            }
            Out::Reply(Requester::Remote { host, id }, resp) => {
                if let Some(t) = self.host_token(&host) {
                    self.send_peer(t, &PeerMsg::Reply { id, resp });
                }
            }
            Out::Reply(Requester::Vp { tid, id }, _) => {
                warn!("dropping a control reply meant for VP t{tid:x} call {id}")
            }
            Out::Broadcast(msg) => {
                let workers: Vec<Token> = self
                    .conns
                    .iter()
                    .filter(|(_, c)| matches!(c.kind, Kind::Peer { host: Some(_) }))
                    .map(|(t, _)| *t)
                    .collect();
                // Encoded once for all.
                match frame::encode(&msg) {
                    Ok(bytes) => {
                        for t in workers {
                            self.send_bytes(t, &bytes);
                        }
                    }
                    Err(_) => {
                        for t in workers {
                            self.send_peer(t, &msg);
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
                if let Some(t) = self.host_token(&host) {
                    // What was queued for it goes first, as it would
                    // have uncorked.
                    if let Some(c) = self.conns.get_mut(&t) {
                        let _ = c.flush(self.poll.registry(), t);
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
                } else if let Some(t) = self.host_token(&host) {
                    self.send_peer(t, &msg);
                } else {
                    self.unsent(host, msg);
                }
            }
        }
    }

    /// A message for a host with no link: kept while the master holds it
    /// alive (only the link may have broken; it attaches again), up to a
    /// bound; else dropped.
    fn unsent(&mut self, host: String, msg: PeerMsg) {
        const MAX: usize = 4096;
        let alive = self.role.master().is_some_and(|m| m.is_alive(&host));
        let room = self.unsent_to.get(&host).map_or(0, Vec::len) < MAX;
        if alive && room {
            self.unsent_to.entry(host).or_default().push(msg);
        } else {
            warn!("no connection to {host}; dropping {}", msg.name());
        }
    }

    pub(super) fn host_token(&self, host: &str) -> Option<Token> {
        self.conns
            .iter()
            .find(|(_, c)| matches!(&c.kind, Kind::Peer { host: Some(h) } if h == host))
            .map(|(t, _)| *t)
    }
}
