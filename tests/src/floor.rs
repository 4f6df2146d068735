//! What a move's bytes cannot go under on this machine, measured in the
//! benches' own runs beside the moves: the same bytes copied once over
//! loopback TCP, by one writer thread and one reader, raw or sealed as
//! daemons seal their links. No daemons, no files, no frames.
//!
//! What does not live here: the moves themselves (the benches), and the
//! sustained rates of `limits sealed` (many messages, a median of
//! repetitions), of which these are single copies of one size.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

use libmig::auth::ClusterKey;
use libmig::seal::{Opening, Suite};

/// Bytes a daemon seals at a time (`conn::SEAL_BATCH`).
const BATCH: usize = 256 * 1024;

/// How a copy is made.
#[derive(Clone, Copy, Debug)]
pub enum Copy {
    /// Raw bytes, read into one reused 1 MiB buffer.
    Raw,
    /// Sealed as daemons seal their links (256 KiB at a time) and opened
    /// into one reused 1 MiB buffer: the sealed link alone.
    Sealed,
    /// Sealed, and opened into memory of its own not touched before, as
    /// a VP restored on another host must hold its state: a move's two
    /// unavoidable costs, paid by one writer and one reader.
    SealedFresh,
}

/// Milliseconds to copy `bytes` over loopback TCP (one writer thread, one
/// reader), from before the connection is made until the last byte is in.
pub fn copy_ms(bytes: usize, how: Copy) -> f64 {
    let bytes = bytes.max(1);
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    let data = vec![7u8; bytes];
    let (mut tx_seal, mut rx_seal) = match how {
        Copy::Raw => (None, None),
        Copy::Sealed | Copy::SealedFresh => {
            let key = ClusterKey::from_bytes([5; 32]);
            let (open, first) = Opening::dial(Suite::best(), &key).expect("dial");
            let (rx, answer) = Opening::accept(Suite::best(), &key, &first).expect("accept");
            (Some(open.finish(&answer).expect("finish")), Some(rx))
        }
    };
    let t = Instant::now();
    let w = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).expect("connect");
        match tx_seal.as_mut() {
            None => s.write_all(&data).expect("write"),
            Some(seal) => {
                let mut out = Vec::new();
                for piece in data.chunks(BATCH) {
                    out.clear();
                    seal.seal(piece, &mut out).expect("seal");
                    s.write_all(&out).expect("write");
                }
            }
        }
    });
    let (mut r, _) = l.accept().expect("accept");
    let mut got = 0;
    match (how, rx_seal.as_mut()) {
        (Copy::SealedFresh, Some(seal)) => {
            let mut buf = vec![0u8; bytes];
            while got < bytes {
                got += seal.read_into(&mut r, &mut buf[got..]).expect("open");
            }
        }
        (_, Some(seal)) => {
            let mut buf = vec![0u8; 1 << 20];
            while got < bytes {
                let room = buf.len().min(bytes - got);
                got += seal.read_into(&mut r, &mut buf[..room]).expect("open");
            }
        }
        (_, None) => {
            let mut buf = vec![0u8; 1 << 20];
            while got < bytes {
                got += r.read(&mut buf).expect("read");
            }
        }
    }
    let _ = w.join();
    t.elapsed().as_secs_f64() * 1e3
}
