//! Sending: a message to one VP or many, through the daemon or a direct
//! link, large ones through shared buffers, the first to each receiver
//! confirmed by the daemon.

use std::io;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{LinkId, MigError, Route, Vm, DIRECT_WAIT, FD_WINDOW, MAX_MESSAGE, STAGE_WAIT};
use crate::frame;
use crate::msg::{Envelope, Tid, VpMsg, SYSTEM};
use crate::payload::FD_PAYLOAD;

impl Vm {
    /// Send a typed value (postcard-encoded) to `to` with `tag`.
    pub fn send<T: Serialize + ?Sized>(
        &mut self,
        to: Tid,
        tag: i32,
        value: &T,
    ) -> Result<(), MigError> {
        let bytes = postcard::to_allocvec(value)?;
        self.send_bytes(to, tag, &bytes)
    }

    /// A pooled buffer holding `data` for the daemon route. The daemon
    /// credits a payload as soon as it has queued it, and hands its buffer
    /// back only once the bytes are out (sealed onto another host's link,
    /// say): a sender that made a new buffer whenever none was free would
    /// fill fresh pages for every message of a fast stream. So it waits a
    /// while for one of its own to come back first (taking in what
    /// arrives meanwhile), and makes a new one only past `STAGE_WAIT` (a
    /// daemon that stopped, say).
    fn stage_for_daemon(
        &mut self,
        to: Tid,
        parts: &[&[u8]],
    ) -> Result<io::Result<std::os::fd::OwnedFd>, MigError> {
        let since = Instant::now();
        loop {
            if let Some(r) = self.outbox.try_stage(to, parts) {
                return Ok(r);
            }
            if since.elapsed() >= STAGE_WAIT {
                return Ok(self.outbox.stage(to, parts));
            }
            self.pump(LinkId::Daemon, false)?;
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// Send raw bytes to `to` with `tag` (written straight from `data`).
    pub fn send_bytes(&mut self, to: Tid, tag: i32, data: &[u8]) -> Result<(), MigError> {
        self.send_parts(to, tag, &[data])
    }

    /// Send the bytes of `parts`, one after another, as one message to
    /// `to` with `tag`: gathered straight from where they are into the
    /// socket or the shared buffer, never into a buffer of their own.
    pub fn send_parts(&mut self, to: Tid, tag: i32, parts: &[&[u8]]) -> Result<(), MigError> {
        let payload_len: usize = parts.iter().map(|p| p.len()).sum();
        if payload_len > MAX_MESSAGE {
            return Err(MigError::TooLarge { size: payload_len });
        }
        if let Some(e) = self.failures.pop_front() {
            return Err(e);
        }
        let first = !self.peers.confirmed(to);
        let seq = self.peers.next_seq(to);
        let env = Envelope {
            from: self.me.tid,
            to,
            tag,
            seq,
            incarnation: self.me.incarnation,
        };
        if !first {
            self.await_direct(to)?;
        }
        let via = if !first && self.peers.link(to).is_some() {
            LinkId::Direct(to)
        } else {
            LinkId::Daemon
        };
        if first {
            self.peers.ask_confirm(to);
        }
        // Large payloads go as a descriptor of a shared buffer (the daemon
        // passes it on instead of copying): through the daemon, within the
        // window of bytes it has not yet passed on; over a direct link,
        // while the pool has a buffer for it (else as bytes, which the
        // link's socket holds back).
        let memfd = match via {
            _ if payload_len < FD_PAYLOAD => None,
            LinkId::Daemon => {
                while self.fd_unacked > 0 && self.fd_unacked + payload_len > FD_WINDOW {
                    self.wait_io(None, None)?;
                }
                Some(self.stage_for_daemon(to, parts)?)
            }
            LinkId::Direct(_) => self.outbox.try_stage(to, parts),
        }
        .transpose()
        .map_err(|e| MigError::DaemonGone(format!("memfd: {e}")))?;
        let (head, data) = match &memfd {
            Some(_) => {
                let len = payload_len as u64;
                let head = frame::encode_head(
                    &VpMsg::SendFd {
                        env,
                        confirm: first,
                        len,
                    },
                    0,
                )?;
                (head, &[][..])
            }
            None => {
                let msg = VpMsg::Send {
                    env,
                    confirm: first,
                };
                (frame::encode_head(&msg, payload_len)?, parts)
            }
        };
        let framed: Vec<&[u8]> = std::iter::once(&head[..])
            .chain(data.iter().copied())
            .collect();
        if memfd.is_some() && via == LinkId::Daemon {
            self.fd_unacked += payload_len;
        }
        if let Err(e) = self.write(via, &framed, memfd.as_ref()) {
            if via == LinkId::Daemon {
                return Err(e);
            }
            // The direct link broke (the peer ended, or moved): the daemons
            // decide. What the peer put in it before (its ring, its
            // socket) is taken in first: closing drops it.
            let _ = self.drain_direct(to);
            self.peers.close_direct(to);
            let head = match &memfd {
                Some(_) => {
                    let len = payload_len as u64;
                    frame::encode_head(
                        &VpMsg::SendFd {
                            env,
                            confirm: true,
                            len,
                        },
                        0,
                    )?
                }
                None => frame::encode_head(&VpMsg::Send { env, confirm: true }, payload_len)?,
            };
            let framed: Vec<&[u8]> = std::iter::once(&head[..])
                .chain(data.iter().copied())
                .collect();
            self.peers.ask_confirm(to);
            if memfd.is_some() {
                self.fd_unacked += payload_len;
            }
            self.write(LinkId::Daemon, &framed, memfd.as_ref())?;
            return self.await_confirm(to, tag, seq);
        }
        if first {
            self.await_confirm(to, tag, seq)?;
        }
        self.ask_direct(to)
    }

    /// With direct routes asked for, ask the daemon once for a direct link
    /// to `peer` (it answers with one when `peer` is on this host): on the
    /// first message to it, and on the first from it through the daemon, so
    /// that a reply already takes the link.
    pub(super) fn ask_direct(&mut self, peer: Tid) -> Result<(), MigError> {
        if self.route == Route::Direct
            && peer != SYSTEM
            && peer != self.me.tid
            && self.peers.ask_direct(peer)
        {
            let head = frame::encode_head(&VpMsg::Direct { peer }, 0)?;
            if let Err(e) = self.write(LinkId::Daemon, &[&head], None) {
                self.peers.direct_refused(peer);
                return Err(e);
            }
        }
        Ok(())
    }

    /// A direct link to `to` asked for and not yet answered: wait a little
    /// for the answer (a round trip to the daemon), so that the message
    /// about to go takes the link rather than the daemon.
    fn await_direct(&mut self, to: Tid) -> Result<(), MigError> {
        let until = Instant::now() + DIRECT_WAIT;
        while self.peers.direct_asked(to) {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            self.wait_io(None, Some(left))?;
        }
        Ok(())
    }

    pub(super) fn await_confirm(&mut self, to: Tid, tag: i32, seq: u64) -> Result<(), MigError> {
        loop {
            if let Some(r) = self.peers.take_answer(to) {
                return r.map_err(|reason| {
                    // The message was not sent: its number is free again.
                    self.peers.unsend(to, seq);
                    MigError::NoSuchVp { to, tag, reason }
                });
            }
            self.wait_daemon()?;
        }
    }

    /// Send the same typed value to every VP in `to`.
    pub fn mcast<T: Serialize + ?Sized>(
        &mut self,
        to: &[Tid],
        tag: i32,
        value: &T,
    ) -> Result<(), MigError> {
        let bytes = postcard::to_allocvec(value)?;
        self.mcast_bytes(to, tag, &bytes)
    }

    /// Send the same bytes to every VP in `to`.
    pub fn mcast_bytes(&mut self, to: &[Tid], tag: i32, data: &[u8]) -> Result<(), MigError> {
        for &t in to {
            self.send_bytes(t, tag, data)?;
        }
        Ok(())
    }

    /// Write one frame (in `parts`, with `fd` passed along) to link `via`.
    /// While the socket is full it takes in what arrives; a frame that
    /// causes for the same link (an acknowledgement, say) waits until this
    /// one is whole, then goes.
    pub(super) fn write(
        &mut self,
        via: LinkId,
        parts: &[&[u8]],
        fd: Option<&std::os::fd::OwnedFd>,
    ) -> Result<(), MigError> {
        if self.writing.contains(&via) {
            let fd = fd
                .map(|f| f.try_clone())
                .transpose()
                .map_err(|e| MigError::DaemonGone(format!("dup: {e}")))?;
            self.deferred.push((via, parts.concat(), fd));
            return Ok(());
        }
        self.writing.push(via);
        let r = self.write_now(via, parts, fd);
        self.writing.pop();
        r?;
        while let Some(i) = self.deferred.iter().position(|(v, _, _)| *v == via) {
            let (_, frame, fd) = self.deferred.remove(i);
            self.write(via, &[&frame], fd.as_ref())?;
        }
        Ok(())
    }

    fn write_now(
        &mut self,
        via: LinkId,
        parts: &[&[u8]],
        fd: Option<&std::os::fd::OwnedFd>,
    ) -> Result<(), MigError> {
        // A frame without a descriptor that fits in a direct link's ring
        // goes there, without a system call.
        if let (LinkId::Direct(t), None) = (via, fd) {
            if let Some(r) = self.peers.link_mut(t).and_then(|l| l.try_ring(parts)) {
                return r.map_err(|e| MigError::DaemonGone(e.to_string()));
            }
        }
        let mut done = 0;
        loop {
            let link = match via {
                LinkId::Daemon => &mut self.daemon,
                LinkId::Direct(t) => match self.peers.link_mut(t) {
                    Some(l) => l,
                    None => return Err(MigError::DaemonGone("direct link closed".into())),
                },
            };
            match link.write_parts(parts, fd, &mut done) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => return Err(MigError::DaemonGone(e.to_string())),
            }
            // The socket is full: take in what arrives meanwhile, so two VPs
            // sending to each other never block each other.
            self.wait_io(Some(via), None)?;
        }
    }
}
