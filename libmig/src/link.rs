//! One of a VP's sockets (to its daemon, or a direct link to another VP):
//! a blocking socket used without blocking (MSG_DONTWAIT), except for the
//! one read a VP waits in when it has nothing else to watch; read with
//! `recvmsg` so that descriptors passed along (SCM_RIGHTS) are collected,
//! and written with vectored `sendmsg` so that a payload is never copied
//! into a frame. A direct link also has a ring in shared memory each way
//! (`ring`): frames that fit go through it, and the socket carries the
//! rest. What does not live here: what the frames mean (`vm`).

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};

use crate::frame::Decoder;
use crate::ring::{Push, Ring};

/// A VP's socket with its decoder and the descriptors it has received.
#[derive(Debug)]
pub(crate) struct Link {
    pub sock: UnixStream,
    pub dec: Decoder,
    pub fds: VecDeque<OwnedFd>,
    /// A direct link's ring this side sends into, once offered.
    pub tx: Option<Ring>,
    /// The peer's ring this side takes from, once it offered it.
    pub rx: Option<Ring>,
    /// Frames taken from `rx`.
    ring_dec: Decoder,
}

/// The frames a ring gave, and whether the socket must be read too.
pub(crate) type RingFrames<T> = (Vec<(T, Vec<u8>)>, bool);

impl Link {
    pub fn new(sock: UnixStream) -> io::Result<Link> {
        sock.set_nonblocking(false)?;
        Ok(Link {
            sock,
            dec: Decoder::default(),
            fds: VecDeque::new(),
            tx: None,
            rx: None,
            ring_dec: Decoder::default(),
        })
    }

    /// The frames waiting in the peer's ring (`None` without one), and
    /// whether the peer wrote to the socket since the last look.
    pub fn ring_frames<T: serde::de::DeserializeOwned>(
        &mut self,
    ) -> io::Result<Option<RingFrames<T>>> {
        let Some(rx) = &self.rx else {
            return Ok(None);
        };
        let socket = rx.take_socket();
        let mut frames = Vec::new();
        loop {
            let (n, asked) = self.ring_dec.fill(|room| rx.pop(room))?;
            while let Some(f) = self
                .ring_dec
                .next_frame_with::<T>()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?
            {
                frames.push(f);
            }
            if n < asked || n == 0 {
                return Ok(Some((frames, socket)));
            }
        }
    }

    /// Send one whole frame through this side's ring if it has one and
    /// the frame fits (`None`: it goes by the socket); a sleeping receiver
    /// is woken through the socket.
    pub fn try_ring(&mut self, parts: &[&[u8]]) -> Option<io::Result<()>> {
        let tx = self.tx.as_ref()?;
        match tx.push(parts) {
            Push::Done => {}
            Push::NoRoom => return None,
            Push::Closed => return Some(Err(io::ErrorKind::BrokenPipe.into())),
        }
        if tx.take_sleeping() {
            // (A full socket holds unread bytes: the receiver wakes anyway.)
            if let Ok(wake) = crate::frame::encode_head(&crate::msg::VpMsg::Wake, 0) {
                let mut done = 0;
                let _ = self.write_parts(&[&wake], None, &mut done);
            }
        }
        Some(Ok(()))
    }

    pub fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Read once (waiting for data only if `wait`): the bytes read (0 is the end of the
    /// stream; `WouldBlock` means nothing was there) and whether more may be
    /// waiting (the read filled what was asked, or stopped at a passed
    /// descriptor).
    pub fn read_once(&mut self, wait: bool) -> io::Result<(usize, bool)> {
        let fd = self.sock.as_raw_fd();
        let before = self.fds.len();
        let fds = &mut self.fds;
        let (n, asked) = self
            .dec
            .fill(|buf| crate::payload::recv_with_fds(fd, buf, fds, wait))?;
        Ok((n, n == asked || self.fds.len() > before))
    }

    /// Write `parts` from byte `done` on, as far as the socket takes without
    /// blocking, passing `fd` with the first byte. Returns whether
    /// everything is written.
    pub fn write_parts(
        &mut self,
        parts: &[&[u8]],
        fd: Option<&OwnedFd>,
        done: &mut usize,
    ) -> io::Result<bool> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        while *done < total {
            let mut skip = *done;
            let mut slices = Vec::with_capacity(parts.len());
            for p in parts {
                if skip >= p.len() {
                    skip -= p.len();
                    continue;
                }
                slices.push(IoSlice::new(&p[skip..]));
                skip = 0;
            }
            // The descriptor goes with the frame's first byte.
            let raw = fd.filter(|_| *done == 0).map(|f| [f.as_raw_fd()]);
            let cmsg: Vec<ControlMessage> =
                raw.iter().map(|r| ControlMessage::ScmRights(r)).collect();
            let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL;
            match sendmsg::<()>(self.fd(), &slices, &cmsg, flags, None) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    *done += n;
                    // A receiver that spins on the ring reads the socket
                    // only when told to.
                    if let Some(tx) = &self.tx {
                        tx.mark_socket();
                    }
                }
                Err(nix::errno::Errno::EAGAIN) => return Ok(false),
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(true)
    }
}

/// Wait until one of `fds` is readable (or, for `writable`, writable), or
/// `timeout_ms` passes (-1: forever). Returns the ready flags per fd.
pub(crate) fn poll(fds: &[(RawFd, bool)], timeout_ms: i32) -> io::Result<Vec<(bool, bool)>> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&(fd, w)| libc::pollfd {
            fd,
            events: libc::POLLIN | if w { libc::POLLOUT } else { 0 },
            revents: 0,
        })
        .collect();
    loop {
        // SAFETY: `pfds` is a valid array of `pfds.len()` pollfd structs.
        let r = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout_ms) };
        if r >= 0 {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(pfds
        .iter()
        .map(|p| {
            let bad = p.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0;
            (
                p.revents & libc::POLLIN != 0 || bad,
                p.revents & libc::POLLOUT != 0,
            )
        })
        .collect())
}
