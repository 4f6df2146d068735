//! Frames from local VPs: messages to route, calls for the master (a spawn's
//! program looked for here first), steps of checkpoints and moves, requests
//! for direct links.

use libmig::msg::{SnapStep, Tid, ToMaster, VpCall, VpMsg, VpRet};
use mio::Token;

use super::local::Local;
use super::routing::gone;
use super::Daemon;
use crate::route::{Body, Way};

impl Local {
    /// Local VP `tid` sends `env` on `t`: counted in its record (see
    /// `ledger`), and stamped with the incarnation its daemon started it
    /// in. A VP rebuilt from outside when its job went back to a
    /// checkpoint still has the old one in its memory, and its messages
    /// would be dropped as a past run's; a process of that past run still
    /// talking on its old connection here keeps its own.
    fn sent_by(&mut self, t: Token, tid: Tid, env: &mut libmig::msg::Envelope) {
        if self.vp_conns.get(&tid) != Some(&t) {
            return;
        }
        if let Some(v) = self.vps.by_tid.get_mut(&tid) {
            if let Some(s) = &v.start {
                env.incarnation = s.incarnation;
            }
            v.ledger.sent(env);
        }
    }
}

impl Daemon {
    /// A frame from local VP `tid` on connection `t`.
    pub(super) fn vp_msg(&mut self, t: Token, tid: Tid, msg: VpMsg, payload: Vec<u8>) {
        match msg {
            VpMsg::Send { mut env, confirm } => {
                if env.from != tid {
                    return self.refuse(t, &format!("VP t{tid:x} sent as t{:x}", env.from));
                }
                self.local.sent_by(t, tid, &mut env);
                if confirm {
                    match self.router.way(env.to) {
                        Way::Gone => {
                            return self.undeliverable(env, &gone(env.to));
                        }
                        Way::Locate => self.router.wait_confirm(env.to, tid),
                        Way::Local(_) | Way::Remote(_) | Way::Hold => {
                            self.send_vp(t, &VpMsg::Confirmed { to: env.to })
                        }
                    }
                }
                self.route(env, Body::Bytes(payload), Some(t));
            }
            VpMsg::SendFd {
                mut env,
                confirm,
                len,
            } => {
                let fd = self.net.conns.get_mut(&t).and_then(|c| c.fds.pop_front());
                let checked = fd
                    .ok_or_else(|| "a message without its descriptor".to_string())
                    .and_then(|fd| {
                        libmig::pool::check_fd(&fd, len as usize)
                            .map(|_| fd)
                            .map_err(|e| e.to_string())
                    });
                let fd = match checked {
                    Ok(fd) if env.from == tid && len as usize <= libmig::MAX_MESSAGE => fd,
                    Ok(_) => {
                        return self
                            .refuse(t, &format!("VP t{tid:x}: a forged or oversized message"))
                    }
                    Err(e) => return self.refuse(t, &format!("VP t{tid:x}: {e}")),
                };
                self.local.sent_by(t, tid, &mut env);
                if let Some(v) = self.local.vps.by_tid.get_mut(&tid) {
                    v.uncredited += len;
                }
                if confirm {
                    match self.router.way(env.to) {
                        Way::Gone => {
                            self.credit(&env, &Body::Fd(fd, len as usize));
                            return self.undeliverable(env, &gone(env.to));
                        }
                        Way::Locate => self.router.wait_confirm(env.to, tid),
                        Way::Local(_) | Way::Remote(_) | Way::Hold => {
                            self.send_vp(t, &VpMsg::Confirmed { to: env.to })
                        }
                    }
                }
                self.route(env, Body::Fd(fd, len as usize), Some(t));
            }
            VpMsg::Consumed { bytes } => {
                self.flow.consumed(t, bytes as usize);
                self.maybe_resume(t);
            }
            VpMsg::Backlog { bytes } => {
                self.flow.backlog(t, bytes as usize);
                self.maybe_resume(t);
            }
            VpMsg::Written { path, upto } => self.written(tid, &path, upto),
            VpMsg::ImageWritten { path } => self.image_written(tid, &path),
            VpMsg::ImageNotWritten { reason, no_space } => {
                self.image_not_written(tid, &reason, no_space)
            }
            VpMsg::Snap(SnapStep::Paused { id, sent }) => self.report(ToMaster::Snap {
                tid,
                step: libmig::msg::SnapReport::Paused { id, sent },
            }),
            VpMsg::Snap(SnapStep::Taken { id, path }) => self.snap_taken(tid, id, &path),
            VpMsg::Snap(SnapStep::Failed {
                id,
                reason,
                no_space,
            }) => self.snap_failed(tid, id, reason, no_space),
            VpMsg::Call { id, call } => match self.spawn_call_refused_here(tid, &call) {
                Some(why) => self.send_vp(
                    t,
                    &VpMsg::Return {
                        id,
                        ret: VpRet::Error(why),
                    },
                ),
                None => {
                    if let Some(v) = self.local.vps.by_tid.get_mut(&tid) {
                        v.ledger.calls.insert(id);
                    }
                    self.report(ToMaster::VpCall { tid, id, call })
                }
            },
            VpMsg::Direct { peer } => self.direct_link(t, tid, peer),
            VpMsg::Movable => {
                if let Some(v) = self.local.vps.by_tid.get_mut(&tid) {
                    v.movable = true;
                }
                // Said in time: it waits, stopped, to be moved.
                self.end_probation(|t| t == tid);
                self.report(ToMaster::Movable { tid });
            }
            VpMsg::PauseNotice { signal } if libmig::msg::pause_signal_ok(signal) => {
                if let Some(v) = self.local.vps.by_tid.get_mut(&tid) {
                    v.pause_signal = Some(signal);
                }
            }
            VpMsg::Quiesced => self.end_quiescing(|t| t == tid),
            // A pause notice for a signal that kills, stops or continues a
            // process outright, or for no signal.
            VpMsg::PauseNotice { .. } => self.refuse(t, "a VP may not send PauseNotice"),
            // What a daemon says to its VPs, and what VPs say to each other
            // on a direct link: never a VP's to its daemon.
            other @ (VpMsg::Deliver(_)
            | VpMsg::DeliverFd { .. }
            | VpMsg::Confirmed { .. }
            | VpMsg::Undeliverable { .. }
            | VpMsg::Return { .. }
            | VpMsg::Credit { .. }
            | VpMsg::WriteImage { .. }
            | VpMsg::StayPut
            | VpMsg::DirectLink { .. }
            | VpMsg::Snap(
                SnapStep::Begin { .. }
                | SnapStep::Now { .. }
                | SnapStep::Resume { .. }
                | SnapStep::Abort { .. },
            )
            | VpMsg::Ring { .. }
            | VpMsg::Wake) => self.refuse(t, &format!("a VP may not send {}", other.name())),
        }
    }

    /// Why `call` of local VP `tid`, a spawn of VPs of this host's
    /// architecture, is refused here, if it is: their program (the job's
    /// for this architecture) is not found from the job's working directory
    /// or on its `PATH`, as the caller's own start gives them. (The master,
    /// which has no disk to look at, says what the call alone shows wrong;
    /// a spawn on another architecture or host is looked at by the host
    /// that starts it, which reports the VP ended if it cannot.)
    fn spawn_call_refused_here(&self, tid: Tid, call: &VpCall) -> Option<String> {
        let program = match call {
            VpCall::Spawn { program, .. } => program,
            VpCall::SpawnArch { program, arch, .. } if *arch == self.facts.arch => program,
            VpCall::SpawnArch { .. } | VpCall::SpawnOn { .. } => return None,
            VpCall::Kill { .. }
            | VpCall::Tasks
            | VpCall::Notify { .. }
            | VpCall::Join { .. }
            | VpCall::Leave { .. }
            | VpCall::Members { .. }
            | VpCall::Barrier { .. }
            | VpCall::Hosts
            | VpCall::Ps
            | VpCall::MboxPut { .. }
            | VpCall::MboxGet { .. }
            | VpCall::MboxDel { .. }
            | VpCall::MboxList { .. }
            | VpCall::Signal { .. } => return None,
        };
        let start = self.local.vps.by_tid.get(&tid)?.start.as_ref()?;
        let program = crate::master::program_for(program, &self.facts.arch)?;
        if program.is_empty() {
            return None;
        }
        crate::host::missing_program(&program, &start.cwd, &start.env)
    }

    /// VP `tid` (on `t`) asks for a direct link to `peer`: a socket pair,
    /// one end to each, when both are on this host.
    pub(super) fn direct_link(&mut self, t: Token, tid: Tid, peer: Tid) {
        let refused = match self.router.way(peer) {
            Way::Local(p) if p != t => {
                match nix::sys::socket::socketpair(
                    nix::sys::socket::AddressFamily::Unix,
                    nix::sys::socket::SockType::Stream,
                    None,
                    nix::sys::socket::SockFlag::SOCK_CLOEXEC,
                ) {
                    Ok((a, b)) => {
                        let inode = |fd: &std::os::fd::OwnedFd| {
                            nix::sys::stat::fstat(std::os::fd::AsRawFd::as_raw_fd(fd))
                                .map_or(0, |s| s.st_ino)
                        };
                        for (one, other, end) in [(tid, peer, inode(&a)), (peer, tid, inode(&b))] {
                            if let Some(v) = self.local.vps.by_tid.get_mut(&one) {
                                v.direct.entry(other).or_default().insert(end);
                            }
                        }
                        self.send_vp_fd(
                            t,
                            &VpMsg::DirectLink {
                                peer,
                                refused: None,
                            },
                            a,
                        );
                        self.send_vp_fd(
                            p,
                            &VpMsg::DirectLink {
                                peer: tid,
                                refused: None,
                            },
                            b,
                        );
                        return;
                    }
                    Err(e) => format!("no socket pair: {e}"),
                }
            }
            Way::Local(_) => "a VP needs no link to itself".to_string(),
            Way::Remote(_) | Way::Hold | Way::Locate | Way::Gone => {
                format!("t{peer:x} is not on this host: messages go through the daemons")
            }
        };
        self.send_vp(
            t,
            &VpMsg::DirectLink {
                peer,
                refused: Some(refused),
            },
        );
    }
}
