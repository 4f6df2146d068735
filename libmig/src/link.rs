//! One of a VP's sockets (to its daemon, or a direct link to another VP):
//! a blocking socket used without blocking (MSG_DONTWAIT), except for the
//! one read a VP waits in when it has nothing else to watch; read with
//! `recvmsg` so that descriptors passed along (SCM_RIGHTS) are collected,
//! and written with vectored `sendmsg` so that a payload is never copied
//! into a frame. What does not live here: what the
//! frames mean (`vm`).

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};

use crate::frame::Decoder;

/// A VP's socket with its decoder and the descriptors it has received.
#[derive(Debug)]
pub(crate) struct Link {
    pub sock: UnixStream,
    pub dec: Decoder,
    pub fds: VecDeque<OwnedFd>,
}

impl Link {
    pub fn new(sock: UnixStream) -> io::Result<Link> {
        sock.set_nonblocking(false)?;
        Ok(Link {
            sock,
            dec: Decoder::default(),
            fds: VecDeque::new(),
        })
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
                Ok(n) => *done += n,
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
