//! Checkpoint images: what a VP writes at a safe point so that it can be
//! started again, on this host or another, and carry on with the same Tid.
//!
//! ```text
//! 0           8         12        16            24
//! +-----------+---------+---------+-------------+----------------------+
//! | MIGCKPT\0 | version | crc32c  | body length | body (postcard Image) |
//! +-----------+---------+---------+-------------+----------------------+
//! ```
//!
//! The body holds the header (Tid, job, program, arguments, working
//! directory, environment), the program's own state (postcard bytes of the
//! value it keeps), and libmig's state (unread messages, sequence numbers
//! per peer). A reader checks, in this order, the size (the preamble is
//! there, the body length is within `MAX_IMAGE` and matches the file), the
//! magic, the version and the checksum, and only then decodes: a damaged
//! image is always a clear error, never a panic and never a silent restore.
//! Images are written atomically (a temporary file, fsync, rename, fsync of
//! the directory), so a crash leaves the previous image or the new one.
//!
//! What does not live here: when images are taken (`vm`) or moved (migd).

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::msg::Tid;

/// The first 8 bytes of every image.
pub const MAGIC: [u8; 8] = *b"MIGCKPT\0";
/// The image format this library writes and reads.
pub const VERSION: u32 = 1;
/// Bytes before the body.
pub const PREAMBLE: usize = 24;
/// The largest image body accepted: 4 GiB.
pub const MAX_IMAGE: u64 = 4 << 30;

/// Why an image cannot be used.
#[derive(Debug, Error)]
pub enum CheckpointError {
    /// Reading or writing failed.
    #[error("checkpoint {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Shorter than its preamble or than the body length it announces.
    #[error("checkpoint is truncated: {got} bytes, {want} expected")]
    Truncated {
        /// Bytes present.
        got: u64,
        /// Bytes announced.
        want: u64,
    },
    /// Longer than it announces, or announces more than `MAX_IMAGE`.
    #[error("checkpoint has a bad length: {0}")]
    BadLength(String),
    /// Not an image at all.
    #[error("not a mig checkpoint (bad magic)")]
    BadMagic,
    /// Written by another format version.
    #[error("checkpoint format version {theirs} is not supported (this library reads {VERSION})")]
    Version {
        /// The image's version.
        theirs: u32,
    },
    /// The bytes changed after they were written.
    #[error("checkpoint is corrupted (checksum {got:08x}, expected {want:08x})")]
    Checksum {
        /// Computed.
        got: u32,
        /// Stored.
        want: u32,
    },
    /// The checksum holds but the body does not decode.
    #[error("checkpoint body does not decode: {0}")]
    Decode(#[from] postcard::Error),
}

impl CheckpointError {
    /// Did writing fail for lack of space (ENOSPC, or EDQUOT: a quota)?
    pub fn no_space(&self) -> bool {
        matches!(self, CheckpointError::Io { source, .. }
            if matches!(source.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)))
    }
}

/// Who the image belongs to and how to start it again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// The VP's Tid (kept across restarts).
    pub tid: Tid,
    /// Its job.
    pub job: String,
    /// Its index in the job.
    pub vp: u32,
    /// The program as spawned.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its working directory.
    pub cwd: String,
    /// The environment that matters (what the job was given).
    pub env: Vec<(String, String)>,
}

/// A message taken in but not yet received by the program.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unread {
    /// Sender.
    pub from: Tid,
    /// Tag.
    pub tag: i32,
    /// Its sequence number (0 for notices).
    pub seq: u64,
    /// Payload.
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
}

/// libmig's own state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LibState {
    /// Messages taken in, in arrival order (those in order per sender).
    pub mailbox: Vec<Unread>,
    /// Messages that arrived ahead of their turn.
    pub early: Vec<Unread>,
    /// Per receiver: the last sequence number sent.
    pub seq_out: Vec<(Tid, u64)>,
    /// Per sender: the next sequence number expected.
    pub seq_in: Vec<(Tid, u64)>,
}

/// A whole image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    /// Who and how.
    pub header: Header,
    /// The program's state, postcard-encoded.
    #[serde(with = "serde_bytes")]
    pub state: Vec<u8>,
    /// libmig's state.
    pub lib: LibState,
}

impl Image {
    /// The image as bytes: preamble and body.
    pub fn encode(&self) -> Result<Vec<u8>, CheckpointError> {
        let mut out = vec![0u8; PREAMBLE];
        out = postcard::to_extend(self, out)?;
        let body = &out[PREAMBLE..];
        let crc = crc32c::crc32c(body);
        let len = body.len() as u64;
        out[0..8].copy_from_slice(&MAGIC);
        out[8..12].copy_from_slice(&VERSION.to_le_bytes());
        out[12..16].copy_from_slice(&crc.to_le_bytes());
        out[16..24].copy_from_slice(&len.to_le_bytes());
        Ok(out)
    }

    /// Check image bytes in the order size, magic, version, checksum,
    /// without decoding them (a daemon passing an image on needs no more).
    pub fn check(bytes: &[u8]) -> Result<(), CheckpointError> {
        let mut c = Checker::default();
        c.update(bytes);
        c.finish()
    }

    /// `check` but for the checksum: size, magic and version only, without
    /// reading the body (for an image its writer just summed and whose
    /// receiver sums it again).
    pub fn check_shape(bytes: &[u8]) -> Result<(), CheckpointError> {
        let take = PREAMBLE.min(bytes.len());
        Image::check_shape_of(&bytes[..take], bytes.len() as u64)
    }

    /// `check_shape` of an image of `total` bytes from its first bytes
    /// (the preamble, or all there is if shorter).
    pub fn check_shape_of(start: &[u8], total: u64) -> Result<(), CheckpointError> {
        let take = PREAMBLE.min(start.len());
        let c = Checker {
            preamble: start[..take].to_vec(),
            body: total.saturating_sub(take as u64),
            crc: 0,
        };
        c.finish_shape().map(|_| ())
    }

    /// An image from bytes, checked (see `check`), then decoded.
    pub fn decode(bytes: &[u8]) -> Result<Image, CheckpointError> {
        Image::check(bytes)?;
        Ok(postcard::from_bytes(&bytes[PREAMBLE..])?)
    }

    /// Write the image to `path` atomically and durably (fsync of the file
    /// and its directory): for checkpoints that must survive a crash.
    pub fn write(&self, path: &Path) -> Result<(), CheckpointError> {
        self.write_to(path, true)
    }

    /// Write the image to `path` atomically but without waiting for the
    /// disk: for an image that only carries a VP to another host, where a
    /// crash meanwhile loses the move, not the VP.
    pub fn write_transient(&self, path: &Path) -> Result<(), CheckpointError> {
        self.write_to(path, false)
    }

    fn write_to(&self, path: &Path, durable: bool) -> Result<(), CheckpointError> {
        stream_to(path, durable, None, |sink| {
            postcard::to_io(self, sink)?;
            Ok(())
        })
    }

    /// Read and check the image at `path`.
    pub fn read(path: &Path) -> Result<Image, CheckpointError> {
        let io = |source| CheckpointError::Io {
            path: path.to_path_buf(),
            source,
        };
        let size = fs::metadata(path).map_err(io)?.len();
        if size > PREAMBLE as u64 + MAX_IMAGE {
            return Err(CheckpointError::BadLength(format!(
                "a file of {size} bytes is larger than any image"
            )));
        }
        Image::decode(&fs::read(path).map_err(io)?)
    }
}

/// Write the image of a program's `state` (with `header` and `lib`) to
/// `path` without encoding the state in memory first: its size is counted,
/// then it is encoded straight into the file. The bytes are those of
/// `Image { header, state: postcard::to_allocvec(state), lib }.encode()`.
///
/// `progress`, if given, hears (file being written, bytes of it final but
/// for the preamble) every `PROGRESS_STEP` bytes: a daemon can send the
/// image on while it is written (the preamble, written last, goes last).
pub fn write_state<S: Serialize>(
    path: &Path,
    header: &Header,
    state: &S,
    lib: &LibState,
    durable: bool,
    progress: Option<OnProgress<'_>>,
) -> Result<(), CheckpointError> {
    let len = postcard::to_io(state, Counted(0))?.0;
    stream_to(path, durable, progress, |sink| {
        postcard::to_io(header, &mut *sink)?;
        // Postcard writes a byte string as its length (LEB128) then the bytes.
        let mut varint = Vec::with_capacity(10);
        let mut n = len;
        loop {
            let low = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                varint.push(low);
                break;
            }
            varint.push(low | 0x80);
        }
        sink.write_all(&varint)
            .map_err(|source| CheckpointError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        postcard::to_io(state, &mut *sink)?;
        postcard::to_io(lib, &mut *sink)?;
        Ok(())
    })
}

/// Write an image file atomically: a blank preamble, the body from `body`
/// through a checksumming writer behind a buffer, then the preamble; the
/// image is never built in memory.
fn stream_to(
    path: &Path,
    durable: bool,
    progress: Option<OnProgress<'_>>,
    body: impl FnOnce(&mut Summing<io::BufWriter<File>>) -> Result<(), CheckpointError>,
) -> Result<(), CheckpointError> {
    use std::io::{Seek, SeekFrom};
    let io = |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    };
    let tmp = temp_path(path, std::process::id());
    let written = (|| {
        let mut f = private_file(&tmp).map_err(io)?;
        f.write_all(&[0u8; PREAMBLE]).map_err(io)?;
        let mut sink = Summing {
            out: io::BufWriter::with_capacity(1 << 20, f),
            crc: 0,
            len: 0,
            progress: progress.map(|p| (p, tmp.clone(), PROGRESS_STEP)),
            failed: None,
        };
        if let Err(e) = body(&mut sink) {
            // postcard says only that its writer failed ("the serialize
            // buffer is full"): the writer's own error says why.
            return Err(sink.failed.take().map_or(e, io));
        }
        sink.out.flush().map_err(io)?;
        let mut f = sink.out.into_inner().map_err(|e| io(e.into_error()))?;
        let mut pre = [0u8; PREAMBLE];
        pre[0..8].copy_from_slice(&MAGIC);
        pre[8..12].copy_from_slice(&VERSION.to_le_bytes());
        pre[12..16].copy_from_slice(&sink.crc.to_le_bytes());
        pre[16..24].copy_from_slice(&sink.len.to_le_bytes());
        f.seek(SeekFrom::Start(0)).map_err(io)?;
        f.write_all(&pre).map_err(io)?;
        if durable {
            f.sync_all().map_err(io)?;
        }
        Ok(())
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    publish(&tmp, path, durable).inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })
}

/// A writer that only counts what it is given.
struct Counted(u64);

impl Write for Counted {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Hears how far an image's write has come: (file being written, bytes of
/// it final but for the preamble).
pub type OnProgress<'a> = &'a mut dyn FnMut(&Path, u64);

/// How often (bytes) `write_state` reports its progress.
pub const PROGRESS_STEP: u64 = 8 << 20;

/// Who hears the progress of a write, of which file, and when next.
type Progress<'a> = (OnProgress<'a>, std::path::PathBuf, u64);

/// A writer that passes bytes on, summing them (CRC-32C) and counting.
struct Summing<'a, W> {
    out: W,
    crc: u32,
    len: u64,
    progress: Option<Progress<'a>>,
    /// The first error writing met (its encoder reports none of it).
    failed: Option<io::Error>,
}

impl<W: Write> Summing<'_, W> {
    /// Keep a copy of `e` for the caller, and pass it on.
    fn failed(&mut self, e: io::Error) -> io::Error {
        if self.failed.is_none() {
            self.failed = Some(match e.raw_os_error() {
                Some(code) => io::Error::from_raw_os_error(code),
                None => io::Error::new(e.kind(), e.to_string()),
            });
        }
        e
    }
}

impl<W: Write> Write for Summing<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // A megabyte at a time, so the sum reads what the write just
        // brought into the cache (one pass over memory, not two). As large
        // as the buffer behind it, which then passes it straight on.
        let n = match self.out.write(&buf[..buf.len().min(1 << 20)]) {
            Ok(n) => n,
            Err(e) => return Err(self.failed(e)),
        };
        self.crc = crc32c::crc32c_append(self.crc, &buf[..n]);
        self.len += n as u64;
        if self
            .progress
            .as_ref()
            .is_some_and(|(_, _, next)| self.len >= *next)
        {
            if let Err(e) = self.out.flush() {
                return Err(self.failed(e));
            }
            if let Some((tell, file, next)) = &mut self.progress {
                tell(file, PREAMBLE as u64 + self.len);
                *next = self.len + PROGRESS_STEP;
            }
        }
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// An image decoded in place: the program's state borrowed from the bytes
/// (a mapping of the file), not copied out of them.
#[derive(Debug, Deserialize)]
pub struct ImageRef<'a> {
    /// Who and how.
    pub header: Header,
    /// The program's state, postcard-encoded.
    #[serde(borrow)]
    pub state: &'a [u8],
    /// libmig's state.
    pub lib: LibState,
}

impl<'a> ImageRef<'a> {
    /// Check (see `Image::check`), then decode borrowing the state.
    pub fn decode(bytes: &'a [u8]) -> Result<ImageRef<'a>, CheckpointError> {
        Image::check(bytes)?;
        Ok(postcard::from_bytes(&bytes[PREAMBLE..])?)
    }

    /// `decode` for bytes whose checksum was checked already (by the
    /// daemon that received them): the shape is checked, not the sum.
    pub fn decode_summed(bytes: &'a [u8]) -> Result<ImageRef<'a>, CheckpointError> {
        Image::check_shape(bytes)?;
        Ok(postcard::from_bytes(&bytes[PREAMBLE..])?)
    }
}

/// Map the image file at `path` read-only (no copy), refusing a file larger
/// than any image; decode it with `ImageRef::decode`.
pub fn map(path: &Path) -> Result<crate::Payload, CheckpointError> {
    let io = |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    };
    let f = File::open(path).map_err(io)?;
    let size = f.metadata().map_err(io)?.len();
    if size > PREAMBLE as u64 + MAX_IMAGE {
        return Err(CheckpointError::BadLength(format!(
            "a file of {size} bytes is larger than any image"
        )));
    }
    crate::Payload::map_file(&f, size as usize, true).map_err(io)
}

/// `Image::check` over bytes that arrive in pieces: feed them in order with
/// `update`, then `finish` gives the same verdict as checking them whole,
/// without ever holding them all.
#[derive(Debug, Clone, Default)]
pub struct Checker {
    preamble: Vec<u8>,
    body: u64,
    crc: u32,
}

impl Checker {
    /// Take in the next bytes of the image.
    pub fn update(&mut self, mut bytes: &[u8]) {
        if self.preamble.len() < PREAMBLE {
            let take = (PREAMBLE - self.preamble.len()).min(bytes.len());
            self.preamble.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        self.crc = crc32c::crc32c_append(self.crc, bytes);
        self.body += bytes.len() as u64;
    }

    /// Take in bytes at offset `at` of the image. The body must come in
    /// order (each piece where the last one ended); the preamble may come
    /// again later and replaces what came before (an image sent on while
    /// it is written gets its preamble last). A piece out of order is an
    /// error.
    pub fn update_at(&mut self, at: u64, bytes: &[u8]) -> Result<(), CheckpointError> {
        let pre = PREAMBLE as u64;
        let split =
            usize::try_from(pre.saturating_sub(at)).map_or(bytes.len(), |n| n.min(bytes.len()));
        let (head, body) = bytes.split_at(split);
        if !head.is_empty() {
            let at = at as usize;
            if at > self.preamble.len() {
                return Err(CheckpointError::BadLength(format!(
                    "a piece at {at} where {} was next",
                    self.preamble.len()
                )));
            }
            let end = at + head.len();
            if self.preamble.len() < end {
                self.preamble.resize(end, 0);
            }
            self.preamble[at..end].copy_from_slice(head);
        }
        if !body.is_empty() {
            let body_at = at.max(pre);
            if body_at != pre + self.body || self.preamble.len() < PREAMBLE {
                return Err(CheckpointError::BadLength(format!(
                    "a piece at {body_at} where {} was next",
                    self.seen()
                )));
            }
            self.crc = crc32c::crc32c_append(self.crc, body);
            self.body += body.len() as u64;
        }
        Ok(())
    }

    /// Bytes taken in so far.
    pub fn seen(&self) -> u64 {
        self.preamble.len() as u64 + self.body
    }

    /// The verdict on everything taken in: size, magic, version, checksum.
    pub fn finish(&self) -> Result<(), CheckpointError> {
        let want = self.finish_shape()?;
        if self.crc != want {
            return Err(CheckpointError::Checksum {
                got: self.crc,
                want,
            });
        }
        Ok(())
    }

    /// Size, magic and version; the checksum the preamble announces.
    fn finish_shape(&self) -> Result<u32, CheckpointError> {
        let got = self.seen();
        let p = &self.preamble;
        if p.len() < PREAMBLE {
            return Err(CheckpointError::Truncated {
                got,
                want: PREAMBLE as u64,
            });
        }
        let word = |r: std::ops::Range<usize>| {
            let mut b = [0u8; 8];
            b[..r.len()].copy_from_slice(&p[r]);
            u64::from_le_bytes(b)
        };
        let len = word(16..24);
        if len > MAX_IMAGE {
            return Err(CheckpointError::BadLength(format!(
                "announces {len} bytes, more than the limit of {MAX_IMAGE}"
            )));
        }
        let want = PREAMBLE as u64 + len;
        if got < want {
            return Err(CheckpointError::Truncated { got, want });
        }
        if got > want {
            return Err(CheckpointError::BadLength(format!(
                "{got} bytes where {want} were announced"
            )));
        }
        if p[0..8] != MAGIC {
            return Err(CheckpointError::BadMagic);
        }
        let version = word(8..12) as u32;
        if version != VERSION {
            return Err(CheckpointError::Version { theirs: version });
        }
        Ok(word(12..16) as u32)
    }
}

/// The file process `pid` writes an image for `path` into before it
/// renames it there. A daemon that watches a VP write its image (moves send
/// it on while it is written) names the same file with [`is_temp_of`].
pub fn temp_path(path: &Path, pid: u32) -> PathBuf {
    path.with_extension(format!("tmp.{pid}"))
}

/// Is `candidate` the file some process writes an image for `path` into?
pub fn is_temp_of(candidate: &Path, path: &Path) -> bool {
    let Some(pid) = candidate
        .extension()
        .and_then(|e| e.to_str())
        .and_then(|e| e.parse::<u32>().ok())
    else {
        return false;
    };
    candidate == temp_path(path, pid)
}

/// Write image bytes (already checked) to `path` atomically; `durable`
/// also waits for the disk (file and directory).
pub fn write_bytes(path: &Path, bytes: &[u8], durable: bool) -> Result<(), CheckpointError> {
    let io = |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    };
    let tmp = temp_path(path, std::process::id());
    // Only its owner reads an image: it is the program's whole state.
    let mut f = private_file(&tmp).map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    if durable {
        f.sync_all().map_err(io)?;
    }
    publish(&tmp, path, durable)
}

/// Create (or truncate) `path` readable and writable by its owner only.
pub(crate) fn private_file(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

/// Rename the written `tmp` to `path`; `durable` also syncs the directory.
fn publish(tmp: &Path, path: &Path, durable: bool) -> Result<(), CheckpointError> {
    let io = |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    };
    fs::rename(tmp, path).map_err(io)?;
    if let Some(dir) = path
        .parent()
        .filter(|d| durable && !d.as_os_str().is_empty())
    {
        File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image() -> Image {
        Image {
            header: Header {
                tid: 0x40001,
                job: "j1".into(),
                vp: 0,
                program: "./heat".into(),
                args: vec!["--rows".into(), "64".into()],
                cwd: "/tmp".into(),
                env: vec![("LANG".into(), "C".into())],
            },
            state: postcard::to_allocvec(&(7u32, vec![1.5f64; 100])).unwrap(),
            lib: LibState {
                mailbox: vec![Unread {
                    from: 0x40002,
                    tag: 3,
                    seq: 9,
                    data: b"halo".to_vec(),
                }],
                early: vec![],
                seq_out: vec![(0x40002, 12)],
                seq_in: vec![(0x40002, 10)],
            },
        }
    }

    #[test]
    fn checking_in_pieces_gives_the_verdict_of_checking_whole() {
        let good = image().encode().unwrap();
        let mut bad = good.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        let short = &good[..good.len() - 3];
        for bytes in [&good[..], &bad[..], short, &good[..10]] {
            for piece in [1, 7, 24, 1000] {
                let mut c = Checker::default();
                bytes.chunks(piece).for_each(|p| c.update(p));
                assert_eq!(c.seen(), bytes.len() as u64);
                assert_eq!(
                    format!("{:?}", c.finish()),
                    format!("{:?}", Image::check(bytes)),
                    "pieces of {piece}"
                );
            }
        }
        assert!(Image::check(&good).is_ok() && Image::check(&bad).is_err());
    }

    #[test]
    fn a_streamed_image_is_the_encoded_one_and_decodes_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t40001.ckpt");
        image().write_transient(&path).unwrap();
        assert_eq!(fs::read(&path).unwrap(), image().encode().unwrap());
        let mapped = map(&path).unwrap();
        let r = ImageRef::decode(&mapped).unwrap();
        assert_eq!(r.header, image().header);
        assert_eq!(r.state, &image().state[..]);
        assert_eq!(r.lib, image().lib);
    }

    #[test]
    fn a_state_written_straight_to_the_file_is_the_image_encoded_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t40001.ckpt");
        let i = image();
        // States whose encodings need length prefixes of 1, 2 and 3 bytes.
        for n in [3usize, 200, 20_000] {
            let state = (7u32, vec![1.5f64; n]);
            write_state(&path, &i.header, &state, &i.lib, false, None).unwrap();
            let whole = Image {
                state: postcard::to_allocvec(&state).unwrap(),
                ..image()
            };
            assert_eq!(fs::read(&path).unwrap(), whole.encode().unwrap(), "{n}");
        }
    }

    #[test]
    fn an_image_survives_the_disk_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t40001.ckpt");
        image().write(&path).unwrap();
        assert_eq!(Image::read(&path).unwrap(), image());
        // Writing again replaces it whole; no temporary file is left.
        let mut second = image();
        second.state = vec![1, 2, 3];
        second.write(&path).unwrap();
        assert_eq!(Image::read(&path).unwrap(), second);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn every_truncation_and_every_flipped_byte_is_refused() {
        let bytes = image().encode().unwrap();
        for cut in 0..bytes.len() {
            let err = Image::decode(&bytes[..cut]).unwrap_err();
            assert!(
                matches!(err, CheckpointError::Truncated { .. }),
                "cut {cut}: {err}"
            );
        }
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert!(
                Image::decode(&bad).is_err(),
                "flipping byte {i} went unnoticed"
            );
        }
    }

    #[test]
    fn an_image_sent_while_written_is_checked_with_its_preamble_last() {
        let bytes = image().encode().unwrap();
        let mut placeholder = bytes.clone();
        placeholder[..PREAMBLE].fill(0);
        // As a daemon sends it: the body as written (after a blank
        // preamble) in pieces, then the preamble.
        let mut c = Checker::default();
        for (i, piece) in placeholder.chunks(7).enumerate() {
            c.update_at((i * 7) as u64, piece).unwrap();
        }
        c.update_at(0, &bytes[..PREAMBLE]).unwrap();
        c.finish().unwrap();
        // Without the real preamble: refused.
        let mut c = Checker::default();
        c.update_at(0, &placeholder).unwrap();
        assert!(c.finish().is_err());
        // A piece of the body out of order: refused at once.
        let mut c = Checker::default();
        c.update_at(0, &bytes[..40]).unwrap();
        assert!(c.update_at(50, &bytes[50..60]).is_err());
        assert!(c.update_at(30, &bytes[30..60]).is_err());
        // A flipped byte anywhere is still found.
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            let mut c = Checker::default();
            c.update_at(0, &bad).unwrap();
            assert!(c.finish().is_err(), "byte {i}");
        }
    }

    #[test]
    fn the_shape_check_is_the_full_check_but_for_the_checksum() {
        let bytes = image().encode().unwrap();
        Image::check_shape(&bytes).unwrap();
        for cut in 0..bytes.len() {
            let (shape, full) = (
                Image::check_shape(&bytes[..cut]),
                Image::check(&bytes[..cut]),
            );
            assert_eq!(
                shape.unwrap_err().to_string(),
                full.unwrap_err().to_string()
            );
        }
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            match Image::check(&bad).unwrap_err() {
                CheckpointError::Checksum { .. } => Image::check_shape(&bad).unwrap(),
                other => assert_eq!(
                    Image::check_shape(&bad).unwrap_err().to_string(),
                    other.to_string(),
                    "byte {i}"
                ),
            }
        }
    }

    #[test]
    fn checks_come_in_order_size_magic_version_checksum() {
        let bytes = image().encode().unwrap();
        let mut long = bytes.clone();
        long.push(0);
        assert!(matches!(
            Image::decode(&long),
            Err(CheckpointError::BadLength(_))
        ));
        let mut huge = bytes.clone();
        huge[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        huge[0] = b'X';
        assert!(matches!(
            Image::decode(&huge),
            Err(CheckpointError::BadLength(_))
        ));
        let mut magic = bytes.clone();
        magic[0] = b'X';
        magic[8] = 9;
        assert!(matches!(
            Image::decode(&magic),
            Err(CheckpointError::BadMagic)
        ));
        let mut version = bytes.clone();
        version[8] = 9;
        version[30] ^= 1;
        let err = Image::decode(&version).unwrap_err();
        assert!(
            matches!(err, CheckpointError::Version { theirs: 9 }),
            "{err}"
        );
        let mut body = bytes.clone();
        body[30] ^= 1;
        let err = Image::decode(&body).unwrap_err();
        assert!(err.to_string().contains("corrupted"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let missing = Image::read(&dir.path().join("none")).unwrap_err();
        assert!(missing.to_string().contains("none"), "{missing}");
    }

    #[test]
    fn a_write_that_fails_says_why_not_that_the_serialize_buffer_is_full() {
        struct Full;
        impl Write for Full {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::from_raw_os_error(libc::ENOSPC))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut sink = Summing {
            out: Full,
            crc: 0,
            len: 0,
            progress: None,
            failed: None,
        };
        // What postcard says of it...
        let e = postcard::to_io(&vec![7u8; 100], &mut sink).err();
        assert_eq!(e, Some(postcard::Error::SerializeBufferFull));
        // ...and what the writer kept: the reason, and that it is space.
        let e = CheckpointError::Io {
            path: "t40001.snap".into(),
            source: sink.failed.take().unwrap(),
        };
        assert!(e.no_space());
        assert!(e.to_string().contains("No space left on device"), "{e}");
        let other = CheckpointError::Io {
            path: "x".into(),
            source: io::Error::from_raw_os_error(libc::EIO),
        };
        assert!(!other.no_space());
    }

    #[test]
    fn a_daemon_names_the_temporary_file_a_vp_writes_its_image_into() {
        let final_path = Path::new("/state/t40001.ckpt");
        let tmp = temp_path(final_path, 4242);
        assert_eq!(tmp, Path::new("/state/t40001.tmp.4242"));
        assert!(is_temp_of(&tmp, final_path));
        assert!(!is_temp_of(Path::new("/state/t40002.tmp.4242"), final_path));
        assert!(!is_temp_of(Path::new("/other/t40001.tmp.4242"), final_path));
        assert!(!is_temp_of(Path::new("/state/t40001.tmp.x"), final_path));
        assert!(!is_temp_of(final_path, final_path));
    }
}
