//! Sealed links between daemons: the Noise protocol framework (`snow`),
//! pattern NNpsk0 with the cluster key as the pre-shared key. Both sides
//! prove they hold the key, and every byte after the handshake is encrypted
//! and authenticated (ChaCha20-Poly1305, or AES-256-GCM where the dialling
//! CPU has AES instructions), with a nonce per record, so a record that is
//! changed, dropped, replayed or reordered fails its check and the link is
//! closed.
//!
//! On the wire a sealed stream is a sequence of records: a 2-byte
//! big-endian length, then that many bytes of Noise transport message (at
//! most 65,535: up to 65,519 bytes of frames and a 16-byte tag). Frames are
//! cut into records regardless of their own boundaries.
//!
//! What lives here: the handshake's two Noise messages, sealing bytes into
//! records and opening records back into bytes, over non-blocking and
//! blocking sockets. What does not: when a link is sealed (`handshake`), the
//! frames (`frame`).

use std::io::{self, Read, Write};

use serde::de::DeserializeOwned;
use serde::Serialize;
use snow::{Builder, HandshakeState, TransportState};

use crate::auth::ClusterKey;
use crate::frame::{self, FrameError};

/// Most plaintext bytes in one record.
pub const RECORD_PLAIN: usize = 65535 - TAG;
const TAG: usize = 16;
/// Raw bytes read from the socket at a time.
const RAW_CHUNK: usize = 256 * 1024;

/// The cipher suites a dialler may choose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suite {
    /// ChaCha20-Poly1305 (fast everywhere in software).
    ChaCha = 0,
    /// AES-256-GCM (fastest where the CPU has AES instructions).
    AesGcm = 1,
}

impl Suite {
    /// What this CPU does fastest.
    pub fn best() -> Suite {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
        {
            return Suite::AesGcm;
        }
        #[cfg(target_arch = "aarch64")]
        if std::arch::is_aarch64_feature_detected!("aes") {
            return Suite::AesGcm;
        }
        Suite::ChaCha
    }

    /// The suite numbered `n` in a `Hello`.
    pub fn from_wire(n: u8) -> Option<Suite> {
        match n {
            0 => Some(Suite::ChaCha),
            1 => Some(Suite::AesGcm),
            _ => None,
        }
    }

    fn params(self) -> &'static str {
        match self {
            Suite::ChaCha => "Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s",
            Suite::AesGcm => "Noise_NNpsk0_25519_AESGCM_SHA256",
        }
    }
}

/// Why sealing failed.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    /// The Noise handshake or a record failed (wrong key, tampering).
    #[error("sealing: {0}")]
    Noise(#[from] snow::Error),
}

/// A handshake under way.
pub struct Opening(HandshakeState);

impl std::fmt::Debug for Opening {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Opening(..)")
    }
}

fn builder<'a>(suite: Suite, key: &'a ClusterKey) -> Result<Builder<'a>, SealError> {
    let params = suite.params().parse()?;
    Ok(Builder::new(params).psk(0, key.psk())?)
}

impl Opening {
    /// The dialler's first message (its ephemeral key, under the key).
    pub fn dial(suite: Suite, key: &ClusterKey) -> Result<(Opening, Vec<u8>), SealError> {
        let mut hs = builder(suite, key)?.build_initiator()?;
        let mut msg = vec![0u8; 256];
        let n = hs.write_message(&[], &mut msg)?;
        msg.truncate(n);
        Ok((Opening(hs), msg))
    }

    /// The accepting side: take the dialler's first message, answer with
    /// ours; the link's sealer.
    pub fn accept(
        suite: Suite,
        key: &ClusterKey,
        first: &[u8],
    ) -> Result<(Sealer, Vec<u8>), SealError> {
        let mut hs = builder(suite, key)?.build_responder()?;
        let mut scratch = vec![0u8; 256];
        hs.read_message(first, &mut scratch)?;
        let mut msg = vec![0u8; 256];
        let n = hs.write_message(&[], &mut msg)?;
        msg.truncate(n);
        Ok((Sealer::new(hs.into_transport_mode()?), msg))
    }

    /// The dialler: take the answer; the link's sealer.
    pub fn finish(mut self, answer: &[u8]) -> Result<Sealer, SealError> {
        let mut scratch = vec![0u8; 256];
        self.0.read_message(answer, &mut scratch)?;
        Ok(Sealer::new(self.0.into_transport_mode()?))
    }
}

/// Both directions of a sealed link: records out, records in.
pub struct Sealer {
    t: TransportState,
    /// Bytes read from the socket, not yet a whole record: the first
    /// `raw_len` of a buffer allocated once.
    raw: Vec<u8>,
    raw_len: usize,
    /// Opened bytes not yet taken, from `pos`.
    plain: Vec<u8>,
    pos: usize,
    /// The peer closed after what is in `raw`/`plain`.
    eof: bool,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Sealer({} raw, {} plain)",
            self.raw_len,
            self.plain.len() - self.pos
        )
    }
}

impl Sealer {
    fn new(t: TransportState) -> Sealer {
        Sealer {
            t,
            raw: Vec::new(),
            raw_len: 0,
            plain: Vec::new(),
            pos: 0,
            eof: false,
        }
    }

    /// Seal `plain` into records appended to `out`.
    pub fn seal(&mut self, plain: &[u8], out: &mut Vec<u8>) -> Result<(), SealError> {
        out.reserve(plain.len() + (plain.len() / RECORD_PLAIN + 1) * (TAG + 2));
        for piece in plain.chunks(RECORD_PLAIN) {
            let at = out.len();
            out.resize(at + 2 + piece.len() + TAG, 0);
            let n = self.t.write_message(piece, &mut out[at + 2..])?;
            out[at..at + 2].copy_from_slice(&(n as u16).to_be_bytes());
            out.truncate(at + 2 + n);
        }
        Ok(())
    }

    /// Are opened bytes waiting to be taken (read them before waiting for
    /// the socket)?
    pub fn has_plain(&self) -> bool {
        self.pos < self.plain.len()
    }

    /// Open whole records in `raw`: straight into `out` from `*filled`
    /// while nothing waits in `plain` and a record fits there (no copy),
    /// else into `plain` (and so on, in order).
    fn open_records(&mut self, out: &mut [u8], filled: &mut usize) -> io::Result<()> {
        if self.pos == self.plain.len() {
            self.plain.clear();
            self.pos = 0;
        }
        let bad = |e: snow::Error| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a sealed record failed its check ({e})"),
            )
        };
        let mut at = 0;
        while self.raw_len - at >= 2 {
            let n = u16::from_be_bytes([self.raw[at], self.raw[at + 1]]) as usize;
            if self.raw_len - at - 2 < n {
                break;
            }
            let record = &self.raw[at + 2..at + 2 + n];
            // (The cipher writes the whole record, tag included, then
            // opens it where it lies: it needs room for all of it.)
            if self.plain.is_empty() && out.len() - *filled >= n {
                *filled += self
                    .t
                    .read_message(record, &mut out[*filled..])
                    .map_err(bad)?;
            } else {
                let start = self.plain.len();
                self.plain.resize(start + n, 0);
                let got = self
                    .t
                    .read_message(record, &mut self.plain[start..])
                    .map_err(bad)?;
                self.plain.truncate(start + got);
            }
            at += 2 + n;
        }
        self.raw.copy_within(at..self.raw_len, 0);
        self.raw_len -= at;
        Ok(())
    }

    /// Read opened bytes into `buf`, reading the socket `src` until `buf`
    /// is full or the socket has nothing more just now (`WouldBlock` when
    /// nothing at all was opened; 0 at the end of the stream). A record
    /// that fails its check is an `InvalidData` error.
    pub fn read_into<R: Read>(&mut self, src: &mut R, buf: &mut [u8]) -> io::Result<usize> {
        let mut n = 0;
        loop {
            let have = self.plain.len() - self.pos;
            if have > 0 {
                let k = have.min(buf.len() - n);
                buf[n..n + k].copy_from_slice(&self.plain[self.pos..self.pos + k]);
                self.pos += k;
                n += k;
            }
            if n == buf.len() || self.eof {
                return Ok(n);
            }
            if self.raw.len() < RAW_CHUNK + 2 + 65535 {
                self.raw.resize(RAW_CHUNK + 2 + 65535, 0);
            }
            let at = self.raw_len;
            match src.read(&mut self.raw[at..]) {
                Ok(0) => {
                    self.eof = true;
                    if self.raw_len > 0 && n == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the link closed inside a sealed record",
                        ));
                    }
                    return Ok(n);
                }
                Ok(k) => {
                    self.raw_len += k;
                    self.open_records(buf, &mut n)?;
                }
                Err(e) => {
                    if e.kind() == io::ErrorKind::WouldBlock && n > 0 {
                        return Ok(n);
                    }
                    return Err(e);
                }
            }
        }
    }

    /// Blocking: seal and write one frame.
    pub fn write_frame<T: Serialize, W: Write>(
        &mut self,
        w: &mut W,
        msg: &T,
    ) -> Result<(), FrameError> {
        let plain = frame::encode(msg)?;
        let mut out = Vec::new();
        self.seal(&plain, &mut out).map_err(|e| {
            FrameError::Io(io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
        })?;
        w.write_all(&out)?;
        Ok(())
    }

    /// Blocking: read one frame (whole records from `r`; bytes of the next
    /// frames stay here, for `read_into`).
    pub fn read_frame<T: DeserializeOwned, R: Read>(
        &mut self,
        r: &mut R,
    ) -> Result<Option<T>, FrameError> {
        let mut reader = Blocking { s: self, r };
        frame::read_frame(&mut reader)
    }
}

/// Reads opened bytes from a blocking socket one record at a time (never
/// more raw bytes than a record's).
struct Blocking<'a, R> {
    s: &'a mut Sealer,
    r: &'a mut R,
}

impl<R: Read> Read for Blocking<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while !self.s.has_plain() {
            let mut len = [0u8; 2];
            match self.r.read_exact(&mut len) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            let n = u16::from_be_bytes(len) as usize;
            let at = self.s.raw_len;
            if self.s.raw.len() < at + 2 + n {
                self.s.raw.resize(at + 2 + n, 0);
            }
            self.s.raw[at..at + 2].copy_from_slice(&len);
            self.r.read_exact(&mut self.s.raw[at + 2..at + 2 + n])?;
            self.s.raw_len = at + 2 + n;
            self.s.open_records(&mut [], &mut 0)?;
        }
        let have = self.s.plain.len() - self.s.pos;
        let k = have.min(buf.len());
        buf[..k].copy_from_slice(&self.s.plain[self.s.pos..self.s.pos + k]);
        self.s.pos += k;
        Ok(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(suite: Suite, a: &ClusterKey, b: &ClusterKey) -> Result<(Sealer, Sealer), SealError> {
        let (open, first) = Opening::dial(suite, a)?;
        let (server, answer) = Opening::accept(suite, b, &first)?;
        Ok((open.finish(&answer)?, server))
    }

    #[test]
    fn sealed_bytes_open_on_the_other_side_and_nowhere_else() {
        for suite in [Suite::ChaCha, Suite::AesGcm] {
            let k = ClusterKey::from_bytes([7; 32]);
            let (mut c, mut s) = pair(suite, &k, &k).expect("handshake");
            let data: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
            let mut wire = Vec::new();
            c.seal(&data, &mut wire).expect("seal");
            assert!(
                !wire.windows(64).any(|w| w == &data[1000..1064]),
                "in the clear"
            );
            let mut got = vec![0u8; data.len()];
            let n = s.read_into(&mut &wire[..], &mut got).expect("open");
            assert_eq!(n, data.len());
            assert_eq!(got, data);
            // One byte changed: the record fails its check.
            let (mut c, mut s) = pair(suite, &k, &k).expect("handshake");
            let mut wire = Vec::new();
            c.seal(b"hello", &mut wire).expect("seal");
            wire[5] ^= 1;
            let e = s
                .read_into(&mut &wire[..], &mut [0u8; 16])
                .expect_err("tampered");
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        }
    }

    #[test]
    fn records_opened_in_place_or_kept_arrive_in_order_whatever_the_reads() {
        let k = ClusterKey::from_bytes([3; 32]);
        let (mut c, mut s) = pair(Suite::best(), &k, &k).expect("handshake");
        let data: Vec<u8> = (0..700_000u32).map(|i| (i * 7 / 3) as u8).collect();
        let mut wire = Vec::new();
        c.seal(&data, &mut wire).expect("seal");
        // Reads too small for a record, then large ones, then odd ones.
        let mut got = Vec::new();
        let mut src = &wire[..];
        for size in [10usize, 70_000, 100, 200_000, 65_551, 1 << 20]
            .iter()
            .cycle()
        {
            let mut buf = vec![0u8; *size];
            let n = s.read_into(&mut src, &mut buf).expect("open");
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got.len(), data.len());
        assert!(got == data, "bytes out of order or changed");
    }

    #[test]
    fn another_key_cannot_open_the_link() {
        let (a, b) = (
            ClusterKey::from_bytes([1; 32]),
            ClusterKey::from_bytes([2; 32]),
        );
        assert!(pair(Suite::ChaCha, &a, &b).is_err());
    }

    #[test]
    fn a_replayed_record_is_refused() {
        let k = ClusterKey::from_bytes([9; 32]);
        let (mut c, mut s) = pair(Suite::ChaCha, &k, &k).expect("handshake");
        let mut wire = Vec::new();
        c.seal(b"once", &mut wire).expect("seal");
        let twice = [wire.clone(), wire].concat();
        let mut buf = [0u8; 64];
        let e = s.read_into(&mut &twice[..], &mut buf).expect_err("replay");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }
}
