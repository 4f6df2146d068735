//! One non-blocking connection: its socket, its decoder, its output buffer,
//! and what kind of peer it is. What lives here: buffered reads and writes
//! that stop at `WouldBlock` and retry on `Interrupted`. What does not: what
//! the messages mean (the server and the master decide).

use std::io::{self, Read, Write};
use std::time::Instant;

use libmig::auth::Block;
use libmig::frame::Decoder;
use mio::event::Source;
use mio::net::{TcpStream, UnixStream};
use mio::{Interest, Registry, Token};

/// A TCP or Unix stream.
#[derive(Debug)]
pub enum Sock {
    /// Daemon to daemon.
    Tcp(TcpStream),
    /// Local control.
    Unix(UnixStream),
}

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.read(buf),
            Sock::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.write(buf),
            Sock::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Source for Sock {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => s.register(r, t, i),
            Sock::Unix(s) => s.register(r, t, i),
        }
    }
    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => s.reregister(r, t, i),
            Sock::Unix(s) => s.reregister(r, t, i),
        }
    }
    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => s.deregister(r),
            Sock::Unix(s) => s.deregister(r),
        }
    }
}

/// Where a connection stands.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// Accepted TCP, waiting for `Hello`.
    AwaitHello,
    /// Sent `Challenge`, waiting for `Proof`.
    AwaitProof {
        /// Their nonce.
        theirs: Block,
        /// Ours.
        ours: Block,
    },
    /// An authenticated daemon (on the master: a worker, named once registered).
    Peer {
        /// Host name after `Register`.
        host: Option<String>,
    },
    /// A worker's authenticated link to its master.
    Master,
    /// A local control client.
    Control,
}

/// A connection.
#[derive(Debug)]
pub struct Conn {
    /// The socket.
    pub sock: Sock,
    /// Incoming bytes not yet decoded.
    pub dec: Decoder,
    /// Outgoing bytes not yet written.
    pub out: Vec<u8>,
    /// What it is.
    pub kind: Kind,
    /// When it was accepted.
    pub since: Instant,
    /// Close once `out` is flushed.
    pub closing: bool,
    writable: bool,
}

/// What a read pass found.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadOutcome {
    /// Still open.
    Open,
    /// The peer closed (or the socket failed).
    Closed,
}

impl Conn {
    /// A new connection of `kind`.
    pub fn new(sock: Sock, kind: Kind) -> Conn {
        Conn {
            sock,
            dec: Decoder::default(),
            out: Vec::new(),
            kind,
            since: Instant::now(),
            closing: false,
            writable: false,
        }
    }

    /// Read until `WouldBlock`, feeding the decoder.
    pub fn read_all(&mut self) -> ReadOutcome {
        let mut buf = [0u8; 64 * 1024];
        loop {
            match self.sock.read(&mut buf) {
                Ok(0) => return ReadOutcome::Closed,
                Ok(n) => self.dec.feed(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return ReadOutcome::Open,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return ReadOutcome::Closed,
            }
        }
    }

    /// Queue bytes and write what the socket takes now.
    pub fn send(&mut self, bytes: &[u8], registry: &Registry, token: Token) -> io::Result<()> {
        self.out.extend_from_slice(bytes);
        self.flush(registry, token)
    }

    /// Write queued bytes until done or `WouldBlock`; ask for writability if
    /// some remain.
    pub fn flush(&mut self, registry: &Registry, token: Token) -> io::Result<()> {
        let mut written = 0;
        while written < self.out.len() {
            match self.sock.write(&self.out[written..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.out.drain(..written);
        let want = !self.out.is_empty();
        if want != self.writable {
            let interest = if want {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            registry.reregister(&mut self.sock, token, interest)?;
            self.writable = want;
        }
        Ok(())
    }
}
