//! A VP's standard input as its host feeds it (`ToHost::Input`): the
//! write end of its stdin pipe, the bytes waiting for room in it, and its
//! end. Where the bytes come from (`mig spawn --wait`, through the master)
//! and which VP has such a pipe are decided elsewhere.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// Most bytes kept for a VP that does not read its input; what arrives
/// beyond them is dropped (and said so in the log by the caller).
pub const MAX_PENDING: usize = 4 << 20;

/// The write end of a VP's stdin pipe (non-blocking) and what waits for
/// room in it.
#[derive(Debug)]
pub struct Input {
    fd: Option<OwnedFd>,
    pending: Vec<u8>,
    eof: bool,
}

/// What `Input::push` did with the bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum Pushed {
    /// Written or kept for later.
    Kept,
    /// Over `MAX_PENDING` (or after the end): this many bytes dropped.
    Dropped(usize),
}

impl Input {
    /// Feed the pipe whose write end is `fd` (made non-blocking here).
    pub fn new(fd: OwnedFd) -> io::Result<Input> {
        // SAFETY: fcntl on a descriptor we own; no memory is passed.
        unsafe {
            let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
            if fl < 0 || libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(Input {
            fd: Some(fd),
            pending: Vec::new(),
            eof: false,
        })
    }

    /// Bytes for the VP, then (with `eof`) its end; written as far as the
    /// pipe has room.
    pub fn push(&mut self, data: &[u8], eof: bool) -> Pushed {
        let dropped = if self.eof || self.fd.is_none() {
            data.len()
        } else {
            let room = MAX_PENDING.saturating_sub(self.pending.len());
            let take = data.len().min(room);
            self.pending.extend_from_slice(&data[..take]);
            data.len() - take
        };
        self.eof |= eof;
        self.flush();
        if dropped > 0 {
            Pushed::Dropped(dropped)
        } else {
            Pushed::Kept
        }
    }

    /// Write what waits, as far as the pipe has room; close the pipe once
    /// everything is written after the end, or when the VP closed its end.
    pub fn flush(&mut self) {
        let Some(fd) = &self.fd else { return };
        while !self.pending.is_empty() {
            // SAFETY: writes from a live buffer of the given length.
            let n = unsafe {
                libc::write(
                    fd.as_raw_fd(),
                    self.pending.as_ptr().cast(),
                    self.pending.len(),
                )
            };
            if n > 0 {
                self.pending.drain(..n as usize);
                continue;
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => return,
                // EPIPE: the VP closed its stdin; nothing more is wanted.
                _ => {
                    self.pending.clear();
                    self.fd = None;
                    return;
                }
            }
        }
        if self.eof {
            self.fd = None;
        }
    }

    /// The pipe's write end, while open (to be told when it has room).
    pub fn fd(&self) -> Option<std::os::fd::RawFd> {
        self.fd.as_ref().map(|f| f.as_raw_fd())
    }

    /// Is anything waiting for room in the pipe?
    pub fn waiting(&self) -> bool {
        self.fd.is_some() && !self.pending.is_empty()
    }

    /// What waits for room in the pipe, and whether the end came after
    /// it (a move carries them with the VP).
    pub fn held(&self) -> (Vec<u8>, bool) {
        (self.pending.clone(), self.eof)
    }

    /// Is the pipe closed (the end was written, or the VP closed it)?
    pub fn closed(&self) -> bool {
        self.fd.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn pipe() -> (std::fs::File, OwnedFd) {
        let (r, w) = nix::unistd::pipe().expect("pipe");
        (std::fs::File::from(r), w)
    }

    #[test]
    fn bytes_reach_the_reader_then_its_end() {
        let (mut r, w) = pipe();
        let mut i = Input::new(w).expect("input");
        assert_eq!(i.push(b"hello ", false), Pushed::Kept);
        assert_eq!(i.push(b"world\n", true), Pushed::Kept);
        assert!(i.closed());
        let mut got = String::new();
        r.read_to_string(&mut got).expect("read");
        assert_eq!(got, "hello world\n");
    }

    #[test]
    fn a_full_pipe_keeps_the_rest_until_read_and_drops_past_the_bound() {
        let (mut r, w) = pipe();
        let mut i = Input::new(w).expect("input");
        let big = vec![7u8; MAX_PENDING];
        assert_eq!(i.push(&big, false), Pushed::Kept);
        assert!(i.waiting(), "a pipe holds far less than the bound");
        let written = MAX_PENDING - i.pending.len();
        // Room for as many as the pipe took; the rest is dropped.
        assert_eq!(i.push(&big, true), Pushed::Dropped(MAX_PENDING - written));
        let mut got = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        while !i.closed() {
            let n = r.read(&mut buf).expect("read");
            got.extend_from_slice(&buf[..n]);
            i.flush();
        }
        r.read_to_end(&mut got).expect("read the rest");
        assert_eq!(got.len(), MAX_PENDING + written);
        assert!(got.iter().all(|&b| b == 7));
    }

    #[test]
    fn a_reader_that_closes_its_end_stops_the_feeding() {
        let (r, w) = pipe();
        let mut i = Input::new(w).expect("input");
        drop(r);
        // SAFETY: SIGPIPE ignored so the write fails with EPIPE (migd
        // ignores it too).
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
        i.push(b"nobody reads this", false);
        assert!(i.closed());
        assert_eq!(i.push(b"more", false), Pushed::Dropped(4));
    }
}
