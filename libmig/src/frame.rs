//! Framing: a fixed 12-byte header outside postcard, then the body.
//!
//! ```text
//! 0      2       3       4                8             12
//! +------+-------+-------+----------------+-------------+--------------------+-------------
//! | "MG" | major | minor | message length | body length | message (postcard) | raw payload
//! +------+-------+-------+----------------+-------------+--------------------+-------------
//!                                                       |<------- "body length" bytes ------->
//! ```
//!
//! Both lengths are little-endian `u32`s. The body is the postcard-encoded
//! message ("message length" bytes) followed by raw payload bytes (the
//! rest, so "body length" counts both), so bulk data is never re-encoded.
//! The body length is checked against `MAX_BODY` before anything is
//! allocated, and the message length against the body length; another
//! major version is refused with a message naming both versions. (The
//! code calls the postcard message of a frame its `head`.)
//!
//! What lives here: the header, blocking read/write of whole frames, and an
//! incremental decoder for non-blocking sockets. What does not: what the
//! bodies mean (`msg`).

use std::io::{self, Read, Write};

use serde::{de::DeserializeOwned, Serialize};
use thiserror::Error;

/// Frame magic.
pub const MAGIC: [u8; 2] = *b"MG";
/// Protocol major version: a peer with another major is refused. Bumped on
/// any change to a message type (postcard does not describe its schema).
pub const MAJOR: u8 = 22;
/// Protocol minor version (informational).
pub const MINOR: u8 = 0;
/// Header size in bytes.
pub const HEADER: usize = 12;
/// Largest body accepted: 64 MiB of payload plus room for the message.
pub const MAX_BODY: usize = (64 << 20) + (1 << 20);

/// Why a frame was refused.
#[derive(Debug, Error)]
pub enum FrameError {
    /// The first two bytes are not `MG`.
    #[error("not a mig frame (bad magic {0:02x?})")]
    BadMagic([u8; 2]),
    /// Another major protocol version.
    #[error("protocol version {theirs}.x is not compatible with ours {MAJOR}.{MINOR}")]
    Version {
        /// The peer's major version.
        theirs: u8,
    },
    /// The length prefix is above `MAX_BODY`.
    #[error("frame of {0} bytes exceeds the maximum of {MAX_BODY}")]
    TooLarge(u64),
    /// The message length exceeds the body length.
    #[error("message of {head} bytes in a body of {body}")]
    BadHeaderLength {
        /// Message length.
        head: u64,
        /// Body length.
        body: u64,
    },
    /// The body does not decode as the expected message.
    #[error("malformed message: {0}")]
    Decode(#[from] postcard::Error),
    /// The connection ended mid-frame.
    #[error("connection closed in the middle of a frame")]
    Truncated,
    /// An I/O error.
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
}

/// Check a header and return the body length.
pub fn parse_header(h: &[u8; HEADER]) -> Result<usize, FrameError> {
    if h[0..2] != MAGIC {
        return Err(FrameError::BadMagic([h[0], h[1]]));
    }
    if h[2] != MAJOR {
        return Err(FrameError::Version { theirs: h[2] });
    }
    let len = u32::from_le_bytes([h[8], h[9], h[10], h[11]]) as u64;
    if len > MAX_BODY as u64 {
        return Err(FrameError::TooLarge(len));
    }
    let head = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as u64;
    if head > len {
        return Err(FrameError::BadHeaderLength { head, body: len });
    }
    Ok(len as usize)
}

fn head_len(h: &[u8]) -> usize {
    u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as usize
}

/// Encode `msg` as one frame without payload.
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, FrameError> {
    encode_with(msg, &[])
}

/// Encode `msg` followed by raw `payload` bytes as one frame.
pub fn encode_with<T: Serialize>(msg: &T, payload: &[u8]) -> Result<Vec<u8>, FrameError> {
    let mut out = encode_head(msg, payload.len())?;
    out.extend_from_slice(payload);
    Ok(out)
}

/// Encode the 12-byte header and `msg` of a frame whose `payload_len` raw
/// bytes the caller writes next (with a vectored write, so a large payload
/// is never copied into the frame).
pub fn encode_head<T: Serialize>(msg: &T, payload_len: usize) -> Result<Vec<u8>, FrameError> {
    let mut out = vec![0u8; HEADER];
    out = postcard::to_extend(msg, out)?;
    let head = out.len() - HEADER;
    let len = head + payload_len;
    if len > MAX_BODY {
        return Err(FrameError::TooLarge(len as u64));
    }
    out[0..2].copy_from_slice(&MAGIC);
    out[2] = MAJOR;
    out[3] = MINOR;
    out[4..8].copy_from_slice(&(head as u32).to_le_bytes());
    out[8..12].copy_from_slice(&(len as u32).to_le_bytes());
    Ok(out)
}

/// Write one frame (blocking).
pub fn write_frame<T: Serialize, W: Write>(w: &mut W, msg: &T) -> Result<(), FrameError> {
    w.write_all(&encode(msg)?)?;
    Ok(())
}

/// Read one frame (blocking), dropping any payload. `Ok(None)` on a clean
/// end of stream.
pub fn read_frame<T: DeserializeOwned, R: Read>(r: &mut R) -> Result<Option<T>, FrameError> {
    Ok(read_frame_with(r)?.map(|(m, _)| m))
}

/// Read one frame and its payload (blocking).
pub fn read_frame_with<T: DeserializeOwned, R: Read>(
    r: &mut R,
) -> Result<Option<(T, Vec<u8>)>, FrameError> {
    let mut h = [0u8; HEADER];
    let mut got = 0;
    while got < HEADER {
        match r.read(&mut h[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(FrameError::Truncated),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let len = parse_header(&h)?;
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            FrameError::Truncated
        } else {
            e.into()
        }
    })?;
    let head = head_len(&h);
    let msg = postcard::from_bytes(&body[..head])?;
    body.drain(..head);
    Ok(Some((msg, body)))
}

/// Map a large fresh buffer's pages in one system call rather than one
/// page fault per 4 KiB while the kernel copies into it (best effort).
/// Where the buffer spans whole 2 MiB blocks they are asked for as huge
/// pages: on a virtual machine a 4 KiB fault costs about ten times what
/// zeroing the page does (256 MiB: 185 ms in 4 KiB pages, 40 ms in 2 MiB
/// ones, on the machine the benchmarks ran on).
pub fn prefault(buf: &mut [u8]) {
    const PAGE: usize = 4096;
    const HUGE: usize = 2 << 20;
    let (lo, hi) = (
        buf.as_mut_ptr() as usize,
        buf.as_mut_ptr() as usize + buf.len(),
    );
    let advise = |start: usize, end: usize, advice: libc::c_int| {
        if end > start {
            // SAFETY: advice on whole pages inside memory we own; it only
            // populates them (with the zeros they already hold) or says how
            // to back them.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, advice) };
        }
    };
    advise(
        lo.next_multiple_of(HUGE),
        hi / HUGE * HUGE,
        libc::MADV_HUGEPAGE,
    );
    advise(
        lo.next_multiple_of(PAGE),
        hi / PAGE * PAGE,
        libc::MADV_POPULATE_WRITE,
    );
}

/// Payloads at least this large get a buffer of their own that the socket
/// is read into directly: no copy between the kernel and the caller's `Vec`.
pub const BIG_PAYLOAD: usize = 64 * 1024;
const READ_CHUNK: usize = 256 * 1024;

/// What a fresh decoder's reads ask for.
const FIRST_CHUNK: usize = 16 * 1024;
/// The largest payload buffer a decoder keeps for reuse.
pub const MAX_SPARE: usize = 16 << 20;

/// Incremental decoder for non-blocking sockets: read (or feed) bytes, take
/// frames. Small frames share one buffer; a large payload is read straight
/// into its own exact-size `Vec`, which `next_frame_with` hands over.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    big: Option<BigFrame>,
    /// A payload buffer given back for reuse (see `recycle`).
    spare: Vec<u8>,
    /// The largest body taken (`None`: `MAX_BODY`); see `limit`.
    limit: Option<usize>,
    /// How much a read asks for: from `FIRST_CHUNK`, doubled up to
    /// `READ_CHUNK` whenever a read fills all it asked for. A new link
    /// then costs a page or four, not `READ_CHUNK` of fresh zeroed memory
    /// (which a first message would wait for).
    chunk: usize,
}

#[derive(Debug)]
struct BigFrame {
    head: Vec<u8>,
    payload: Vec<u8>,
    filled: usize,
}

impl Decoder {
    /// Append bytes read elsewhere.
    pub fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if let Some(b) = self.big.as_mut().filter(|b| b.filled < b.payload.len()) {
                let n = bytes.len().min(b.payload.len() - b.filled);
                b.payload[b.filled..b.filled + n].copy_from_slice(&bytes[..n]);
                b.filled += n;
                bytes = &bytes[n..];
                continue;
            }
            self.reserve(bytes.len());
            self.buf[self.end..self.end + bytes.len()].copy_from_slice(bytes);
            self.end += bytes.len();
            if self.big.is_none() {
                // A bad header is reported by `next_frame_with`.
                let _ = self.begin_big();
            }
            return;
        }
    }

    /// Read once from `read` (which fills the slice it is given, like
    /// `Read::read`): into a large frame's payload if one is in progress,
    /// else into the shared buffer. Returns the bytes read and how many
    /// were asked for (fewer means the source had no more just then).
    pub fn fill(
        &mut self,
        mut read: impl FnMut(&mut [u8]) -> io::Result<usize>,
    ) -> io::Result<(usize, usize)> {
        if let Some(b) = self.big.as_mut().filter(|b| b.filled < b.payload.len()) {
            let room = &mut b.payload[b.filled..];
            let asked = room.len();
            let n = read(room)?;
            b.filled += n;
            return Ok((n, asked));
        }
        // A decoder limited to small frames (a peer not yet authenticated)
        // reads in small pieces: nothing large is allocated for it.
        let small = self.limit.filter(|&l| l < READ_CHUNK).map(|l| l + HEADER);
        let chunk = self.chunk.clamp(FIRST_CHUNK, READ_CHUNK);
        self.reserve(small.unwrap_or(chunk));
        let upto = small.map_or(self.buf.len(), |n| self.end + n);
        let room = &mut self.buf[self.end..upto];
        let asked = room.len();
        let n = read(room)?;
        self.end += n;
        if small.is_none() && n == asked {
            self.chunk = (chunk * 2).min(READ_CHUNK);
        }
        if self.big.is_none() {
            // A bad header is reported by `next_frame_with`.
            let _ = self.begin_big();
        }
        Ok((n, asked))
    }

    /// Read once from `r`; see `fill`.
    pub fn read_from<R: Read>(&mut self, r: &mut R) -> io::Result<(usize, usize)> {
        self.fill(|b| r.read(b))
    }

    fn reserve(&mut self, more: usize) {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        if self.buf.len() - self.end >= more {
            return;
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() - self.end < more {
            let least = match self.limit {
                Some(l) if l < READ_CHUNK => more,
                _ => self.chunk.clamp(FIRST_CHUNK, READ_CHUNK),
            };
            self.buf.resize(self.end + more.max(least), 0);
        }
    }

    /// If the buffered header announces a large payload and its message is
    /// in, move them out and allocate the payload.
    fn begin_big(&mut self) -> Result<(), FrameError> {
        let avail = &self.buf[self.start..self.end];
        if avail.len() < HEADER {
            return Ok(());
        }
        let mut h = [0u8; HEADER];
        h.copy_from_slice(&avail[..HEADER]);
        let len = parse_header(&h)?;
        self.check_len(len)?;
        let head = head_len(&h);
        let plen = len - head;
        if plen < BIG_PAYLOAD || avail.len() < HEADER + head {
            return Ok(());
        }
        let head_bytes = avail[HEADER..HEADER + head].to_vec();
        let have = (avail.len() - HEADER - head).min(plen);
        let mut payload = match std::mem::take(&mut self.spare) {
            // (Bytes a reused buffer still holds are overwritten before
            // anything reads them: only the filled part is ever handed on.)
            mut spare if spare.len() >= plen => {
                spare.truncate(plen);
                spare
            }
            mut spare if spare.capacity() >= plen => {
                spare.resize(plen, 0);
                spare
            }
            _ => {
                let mut fresh = vec![0u8; plen];
                prefault(&mut fresh);
                fresh
            }
        };
        payload[..have].copy_from_slice(&avail[HEADER + head..HEADER + head + have]);
        self.start += HEADER + head + have;
        self.big = Some(BigFrame {
            head: head_bytes,
            payload,
            filled: have,
        });
        Ok(())
    }

    /// Take no frame whose body is over `max` bytes (at most `MAX_BODY`):
    /// before a peer is authenticated, nothing large is allocated for it.
    pub fn limit(&mut self, max: usize) {
        self.limit = Some(max.min(MAX_BODY));
    }

    fn check_len(&self, len: usize) -> Result<(), FrameError> {
        match self.limit {
            Some(max) if len > max => Err(FrameError::TooLarge(len as u64)),
            _ => Ok(()),
        }
    }

    /// Give back a payload this decoder handed over and the caller is done
    /// with: the next large payload is read into it (up to `MAX_SPARE`)
    /// instead of fresh memory, which the kernel would have to zero again.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        if buf.capacity() <= MAX_SPARE && buf.capacity() > self.spare.capacity() {
            self.spare = buf;
        }
    }

    /// Bytes buffered but not yet decoded.
    pub fn pending(&self) -> usize {
        self.end - self.start + self.big.as_ref().map_or(0, |b| b.filled + b.head.len())
    }

    /// A copy of the bytes buffered but not yet decoded, as they came (a
    /// large frame's header, which the decoder does not keep, made again
    /// from its lengths): fed to another decoder, they decode as they would
    /// have here once the rest arrives.
    pub fn pending_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.pending() + HEADER);
        if let Some(b) = &self.big {
            out.extend_from_slice(&MAGIC);
            out.push(MAJOR);
            out.push(MINOR);
            out.extend_from_slice(&(b.head.len() as u32).to_le_bytes());
            out.extend_from_slice(&((b.head.len() + b.payload.len()) as u32).to_le_bytes());
            out.extend_from_slice(&b.head);
            out.extend_from_slice(&b.payload[..b.filled]);
        }
        out.extend_from_slice(&self.buf[self.start..self.end]);
        out
    }

    /// The next whole frame's message, if one is buffered (any payload is
    /// dropped). A bad header is an error as soon as its 12 bytes are in (no
    /// waiting for a huge body).
    pub fn next_frame<T: DeserializeOwned>(&mut self) -> Result<Option<T>, FrameError> {
        Ok(self.next_frame_with()?.map(|(m, _)| m))
    }

    /// The next whole frame's message and payload.
    pub fn next_frame_with<T: DeserializeOwned>(
        &mut self,
    ) -> Result<Option<(T, Vec<u8>)>, FrameError> {
        if self
            .big
            .as_ref()
            .is_some_and(|b| b.filled < b.payload.len())
        {
            return Ok(None);
        }
        if let Some(b) = self.big.take() {
            let msg = postcard::from_bytes(&b.head)?;
            let _ = self.begin_big();
            return Ok(Some((msg, b.payload)));
        }
        self.begin_big()?;
        if self.big.is_some() {
            return self.next_frame_with();
        }
        let avail = &self.buf[self.start..self.end];
        if avail.len() < HEADER {
            return Ok(None);
        }
        let mut h = [0u8; HEADER];
        h.copy_from_slice(&avail[..HEADER]);
        let len = parse_header(&h)?;
        self.check_len(len)?;
        if avail.len() < HEADER + len {
            return Ok(None);
        }
        let head = head_len(&h);
        let msg = postcard::from_bytes(&avail[HEADER..HEADER + head])?;
        let payload = avail[HEADER + head..HEADER + len].to_vec();
        self.start += HEADER + len;
        Ok(Some((msg, payload)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_partial_feeds() {
        let bytes = encode(&("hello".to_string(), 42u32)).unwrap();
        let mut d = Decoder::default();
        for b in &bytes[..bytes.len() - 1] {
            d.feed(std::slice::from_ref(b));
            assert!(d.next_frame::<(String, u32)>().unwrap().is_none());
        }
        d.feed(&bytes[bytes.len() - 1..]);
        assert_eq!(
            d.next_frame::<(String, u32)>().unwrap(),
            Some(("hello".into(), 42))
        );
        let mut r = &bytes[..];
        assert_eq!(
            read_frame::<(String, u32), _>(&mut r).unwrap(),
            Some(("hello".into(), 42))
        );
        assert!(read_frame::<(String, u32), _>(&mut r).unwrap().is_none());
    }

    #[test]
    fn payload_travels_raw_beside_the_message() {
        let data: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        let bytes = encode_with(&7u16, &data).unwrap();
        assert_eq!(bytes.len(), HEADER + 1 + data.len());
        let mut d = Decoder::default();
        d.feed(&bytes);
        assert_eq!(d.next_frame_with::<u16>().unwrap(), Some((7, data.clone())));
        assert_eq!(
            read_frame_with::<u16, _>(&mut &bytes[..]).unwrap(),
            Some((7, data))
        );
        let mut bad = bytes.clone();
        bad[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            read_frame::<u16, _>(&mut &bad[..]),
            Err(FrameError::BadHeaderLength { .. })
        ));
    }

    #[test]
    fn a_recycled_payload_buffer_is_reused_and_holds_only_the_next_payload() {
        let first: Vec<u8> = vec![0xAA; 4 * BIG_PAYLOAD];
        let second: Vec<u8> = (0..2 * BIG_PAYLOAD as u32).map(|i| (i * 3) as u8).collect();
        let mut d = Decoder::default();
        d.feed(&encode_with(&1u8, &first).unwrap());
        let (_, got) = d.next_frame_with::<u8>().unwrap().unwrap();
        assert_eq!(got, first);
        let at = got.as_ptr();
        d.recycle(got);
        d.feed(&encode_with(&2u8, &second).unwrap());
        let (_, got) = d.next_frame_with::<u8>().unwrap().unwrap();
        assert_eq!(got, second, "nothing of the first payload is left");
        assert_eq!(got.as_ptr(), at, "read into the recycled buffer");
        // Too large to keep: not kept.
        d.recycle(vec![0u8; MAX_SPARE + 1]);
        assert!(d.spare.capacity() <= MAX_SPARE);
    }

    #[test]
    fn large_payloads_arrive_whole_however_they_are_cut() {
        let big: Vec<u8> = (0..3 * BIG_PAYLOAD as u32).map(|i| (i * 7) as u8).collect();
        let mut stream = encode_with(&1u8, &big).unwrap();
        stream.extend(encode_with(&2u8, b"small").unwrap());
        stream.extend(encode_with(&3u8, &big[..BIG_PAYLOAD]).unwrap());
        for cut in [1usize, 5, 13, 4096, 70_000, stream.len()] {
            let mut d = Decoder::default();
            let mut got = Vec::new();
            let mut src = &stream[..];
            while !src.is_empty() {
                let n = cut.min(src.len());
                if cut % 2 == 1 {
                    d.feed(&src[..n]);
                    src = &src[n..];
                } else {
                    let mut chunk = &src[..n];
                    let (r, _) = d.read_from(&mut chunk).unwrap();
                    src = &src[r..];
                }
                while let Some(f) = d.next_frame_with::<u8>().unwrap() {
                    got.push(f);
                }
            }
            assert_eq!(got.len(), 3, "cut {cut}");
            assert_eq!(got[0], (1, big.clone()));
            assert_eq!(got[1], (2, b"small".to_vec()));
            assert_eq!(got[2], (3, big[..BIG_PAYLOAD].to_vec()));
            assert_eq!(d.pending(), 0);
        }
    }

    #[test]
    fn bad_headers_are_refused_before_the_body_arrives() {
        let mut d = Decoder::default();
        d.feed(b"GET / HTTP/1.1\r\n");
        assert!(matches!(
            d.next_frame::<u32>(),
            Err(FrameError::BadMagic(_))
        ));
        let mut h = encode(&1u32).unwrap();
        h[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        let mut d = Decoder::default();
        d.feed(&h[..HEADER]);
        assert!(matches!(
            d.next_frame::<u32>(),
            Err(FrameError::TooLarge(_))
        ));
        let mut v = encode(&1u32).unwrap();
        v[2] = MAJOR + 1;
        let err = read_frame::<u32, _>(&mut &v[..]).unwrap_err();
        assert!(err.to_string().contains("not compatible"));
        let t = encode(&"x".repeat(100)).unwrap();
        assert!(matches!(
            read_frame::<String, _>(&mut &t[..50]),
            Err(FrameError::Truncated)
        ));
    }

    /// What a decoder holds of unfinished frames, fed to a new one, and then
    /// the rest of those frames: the same frames come out (a small one and
    /// a large one cut anywhere, as a connection moved mid-frame gives them).
    #[test]
    fn pending_bytes_carry_an_unfinished_frame_to_another_decoder() {
        let big: Vec<u8> = (0..BIG_PAYLOAD * 2).map(|i| (i % 251) as u8).collect();
        let mut stream = encode_with(&("small".to_string(), 1u32), b"abc").unwrap();
        stream.extend(encode_with(&("large".to_string(), 2u32), &big).unwrap());
        stream.extend(encode(&("last".to_string(), 3u32)).unwrap());
        for cut in [
            0,
            5,
            HEADER + 2,
            30,
            40,
            41,
            200,
            BIG_PAYLOAD,
            stream.len() - 3,
        ] {
            let mut a = Decoder::default();
            a.feed(&stream[..cut]);
            let mut got = Vec::new();
            while let Some(f) = a.next_frame_with::<(String, u32)>().unwrap() {
                got.push(f);
            }
            let mut b = Decoder::default();
            b.feed(&a.pending_bytes());
            b.feed(&stream[cut..]);
            while let Some(f) = b.next_frame_with::<(String, u32)>().unwrap() {
                got.push(f);
            }
            let names: Vec<&str> = got.iter().map(|(m, _)| m.0.as_str()).collect();
            assert_eq!(names, ["small", "large", "last"], "cut at {cut}");
            assert_eq!(got[0].1, b"abc");
            assert_eq!(got[1].1, big, "cut at {cut}");
            assert!(got[2].1.is_empty());
        }
    }
}
