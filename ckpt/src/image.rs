//! The process image: its byte layout, the state it carries, and its
//! validation. Pure: no system calls here (reading and writing go through
//! `Read`/`Write`/`FileExt` the caller hands in); how the state is taken from
//! a process lives in `dump`, how it is put back in `restore`.
//!
//! An image holds one process or a tree of them ([`Image`]): each process's
//! state ([`Meta`]) with its place in the tree (parent, process group,
//! session), the open files its descriptors refer to, shared between
//! processes where they were ([`OpenFile`]), and the pipes between them
//! with the bytes in flight ([`Pipe`]). The pages of every process follow
//! one another in the data, in the order of [`Image::procs`]; then come the
//! bytes of every memfd the image carries ([`Memfd`]: those the processes
//! hold or map, then those on their way through a cut socket, then those
//! on their way through the caller's sockets, see
//! [`Image::memfds_in_order`]), each a run of its own, page aligned, its
//! trailing zeros left out (a memfd of zeros has no run). The metadata
//! says where each memfd's bytes are ([`MemfdBytes::Image`]), not the
//! bytes: a dump streams them from the memfd as it streams pages, and a
//! restore copies them from the file into the new memfd, so no memfd the
//! processes hold or map is held whole in memory (and none counts against
//! [`MAX_META`]); those on their way through the caller's sockets are read
//! into memory when the image is opened (`ImageFile::open`, at most
//! `memfd::MAX_SIZE` in all). A memfd is at most `memfd::MAX_SIZE`. Its
//! bytes are read while the processes are stopped: one shared with a
//! process outside them that writes it meanwhile is saved as it was read.
//! Version 5 kept them in the metadata: such an image is read with each
//! memfd's bytes held in memory ([`MemfdBytes::Held`]).
//!
//! ```text
//! 0                64                 data_offset (page aligned)                         data_end
//! | header (64 B) | metadata (postcard) | pad | page runs | memfd runs, each page aligned | trailer |
//! ```
//!
//! The header, little-endian:
//!
//! | bytes  | field                                             |
//! |--------|---------------------------------------------------|
//! | 0..8   | magic `MIGPROC\0`                                 |
//! | 8..12  | format version (this module's [`FORMAT_VERSION`]) |
//! | 12..16 | reserved, zero                                    |
//! | 16..24 | metadata length                                   |
//! | 24..32 | data offset (page aligned, after the metadata)   |
//! | 32..40 | data length (whole pages)                         |
//! | 40..48 | number of runs (page runs and memfd runs)         |
//! | 48..52 | crc32c of the metadata                            |
//! | 52..60 | reserved, zero                                    |
//! | 60..64 | crc32c of bytes 0..60                             |
//!
//! The trailer holds one crc32c per run (page runs in the order the metadata
//! lists them, then memfd runs, each over its whole pages, zero padding
//! included) and a crc32c of those. The page data sits page aligned so that a
//! restore maps it into place (`MAP_PRIVATE`, copy on write) rather than
//! copying it, and the trailer comes last so that a dump streams the pages
//! straight from the process without holding the image.
//!
//! Validation goes size → magic → version → header checksum → total size →
//! metadata checksum → metadata → (on request) every run's checksum, and
//! each step has its own [`ImageError`]. A receiver checks the image as its
//! bytes arrive with [`StreamCheck`] (so it never reads it twice) and then
//! opens the file without the page checks.

use serde::{Deserialize, Serialize};

pub mod v1;

/// The first eight bytes of every process image.
pub const MAGIC: [u8; 8] = *b"MIGPROC\0";
/// The format version written. Version 1 (one process, no tree) is still
/// read, as an image of one process whose pid need not be kept, version 2
/// (no record of what the source machine had) as an image whose needs are
/// unknown, version 3 (no sockets' bytes) as an image with none, version
/// 4 (no memfds) as an image with none, and version 5 (memfds' bytes in
/// the metadata) as an image whose memfds' bytes are held in memory
/// ([`MemfdBytes::Held`]); newer versions are refused.
pub const FORMAT_VERSION: u32 = 6;
/// The versions this build reads.
pub const READS: [u32; 6] = [1, 2, 3, 4, 5, 6];
/// The header's size.
pub const HEADER_LEN: usize = 64;
/// The page size the format assumes (x86-64).
pub const PAGE: u64 = 4096;
/// The most metadata an image may claim (a guard against a damaged length).
pub const MAX_META: u64 = 256 << 20;

/// Why bytes are not a usable image.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ImageError {
    /// Fewer bytes than a header.
    #[error("process image too short: {0} bytes, a header alone is {HEADER_LEN}")]
    TooShort(u64),
    /// Not our magic.
    #[error("not a process image (magic {0:02x?})")]
    BadMagic([u8; 8]),
    /// Another format version.
    #[error("process image format version {found}, this build reads 1 to {FORMAT_VERSION}")]
    Version {
        /// The version found.
        found: u32,
    },
    /// The header's checksum does not match.
    #[error("process image header damaged (checksum mismatch)")]
    HeaderChecksum,
    /// The header's fields contradict each other or the size.
    #[error("process image header inconsistent: {0}")]
    Header(String),
    /// The file is not as long as the header says.
    #[error("process image truncated or padded: {actual} bytes, header says {expected}")]
    Size {
        /// What the header implies.
        expected: u64,
        /// What there is.
        actual: u64,
    },
    /// The metadata's checksum does not match.
    #[error("process image metadata damaged (checksum mismatch)")]
    MetaChecksum,
    /// The metadata does not decode.
    #[error("process image metadata undecodable: {0}")]
    Meta(String),
    /// The metadata's runs do not match the header.
    #[error("process image runs inconsistent: {0}")]
    Runs(String),
    /// The trailer's checksum does not match.
    #[error("process image trailer damaged (checksum mismatch)")]
    TrailerChecksum,
    /// A page run's data is damaged.
    #[error("process image pages damaged: run {index} at {addr:#x} (checksum mismatch)")]
    RunChecksum {
        /// Which run.
        index: usize,
        /// Its address in the process.
        addr: u64,
    },
    /// A memfd run's data is damaged.
    #[error("process image memfd bytes damaged: run {index}, memfd {name:?} (checksum mismatch)")]
    MemfdChecksum {
        /// Which run (counting page runs first).
        index: usize,
        /// The memfd's name.
        name: String,
    },
    /// Reading or writing the image failed.
    #[error("process image i/o: {0}")]
    Io(String),
}

/// The fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Format version.
    pub version: u32,
    /// Metadata length.
    pub meta_len: u64,
    /// Where the page data starts.
    pub data_offset: u64,
    /// Page data length.
    pub data_len: u64,
    /// Number of runs (trailer entries).
    pub runs: u64,
    /// crc32c of the metadata.
    pub meta_crc: u32,
}

impl Header {
    /// The header for `meta_len` bytes of metadata, `data_len` bytes of pages
    /// in `runs` runs.
    pub fn new(meta_len: u64, data_len: u64, runs: u64, meta_crc: u32) -> Header {
        Header {
            version: FORMAT_VERSION,
            meta_len,
            data_offset: page_up(HEADER_LEN as u64 + meta_len),
            data_len,
            runs,
            meta_crc,
        }
    }

    /// The image's total length.
    pub fn total_len(&self) -> u64 {
        self.data_offset + self.data_len + 4 * self.runs + 4
    }

    /// Where the trailer starts.
    pub fn trailer_offset(&self) -> u64 {
        self.data_offset + self.data_len
    }

    /// The 64 header bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
        b[16..24].copy_from_slice(&self.meta_len.to_le_bytes());
        b[24..32].copy_from_slice(&self.data_offset.to_le_bytes());
        b[32..40].copy_from_slice(&self.data_len.to_le_bytes());
        b[40..48].copy_from_slice(&self.runs.to_le_bytes());
        b[48..52].copy_from_slice(&self.meta_crc.to_le_bytes());
        let crc = crc32c::crc32c(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Reads a header from the first bytes of an image `total` bytes long:
    /// size, magic, version, checksum, then the fields against the size.
    pub fn decode(b: &[u8], total: u64) -> Result<Header, ImageError> {
        if total < HEADER_LEN as u64 || b.len() < HEADER_LEN {
            return Err(ImageError::TooShort(total.min(b.len() as u64)));
        }
        let h = Header::decode_fields(b)?;
        let expected = h.total_len();
        if expected != total {
            return Err(ImageError::Size {
                expected,
                actual: total,
            });
        }
        Ok(h)
    }

    /// Reads a header from an image's first bytes whose total length is not
    /// known yet (a stream): magic, version, checksum, fields.
    pub fn decode_fields(b: &[u8]) -> Result<Header, ImageError> {
        if b.len() < HEADER_LEN {
            return Err(ImageError::TooShort(b.len() as u64));
        }
        let magic: [u8; 8] = b[0..8].try_into().unwrap_or_default();
        if magic != MAGIC {
            return Err(ImageError::BadMagic(magic));
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        let version = u32_at(8);
        if !READS.contains(&version) {
            return Err(ImageError::Version { found: version });
        }
        if crc32c::crc32c(&b[..60]) != u32_at(60) {
            return Err(ImageError::HeaderChecksum);
        }
        let h = Header {
            version,
            meta_len: u64_at(16),
            data_offset: u64_at(24),
            data_len: u64_at(32),
            runs: u64_at(40),
            meta_crc: u32_at(48),
        };
        if h.meta_len > MAX_META {
            return Err(ImageError::Header(format!(
                "metadata of {} bytes (most {MAX_META})",
                h.meta_len
            )));
        }
        if h.data_offset != page_up(HEADER_LEN as u64 + h.meta_len)
            || !h.data_len.is_multiple_of(PAGE)
        {
            return Err(ImageError::Header("data not page aligned".into()));
        }
        if h.runs > h.data_len / PAGE {
            return Err(ImageError::Header(format!(
                "{} runs in {} pages",
                h.runs,
                h.data_len / PAGE
            )));
        }
        h.data_offset
            .checked_add(h.data_len)
            .and_then(|x| x.checked_add(4 * h.runs + 4))
            .ok_or_else(|| ImageError::Header("lengths overflow".into()))?;
        Ok(h)
    }
}

/// Rounds up to a whole page (at most the last whole page of `u64`).
pub fn page_up(x: u64) -> u64 {
    x.div_ceil(PAGE).saturating_mul(PAGE)
}

/// The trailer for the given run checksums.
pub fn encode_trailer(crcs: &[u32]) -> Vec<u8> {
    let mut t: Vec<u8> = crcs.iter().flat_map(|c| c.to_le_bytes()).collect();
    let all = crc32c::crc32c(&t);
    t.extend_from_slice(&all.to_le_bytes());
    t
}

/// The run checksums from a trailer of `runs` entries.
pub fn decode_trailer(t: &[u8], runs: usize) -> Result<Vec<u32>, ImageError> {
    if t.len() != 4 * runs + 4 {
        return Err(ImageError::Runs(format!(
            "trailer of {} bytes for {runs} runs",
            t.len()
        )));
    }
    let (body, crc) = t.split_at(4 * runs);
    if crc32c::crc32c(body) != u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) {
        return Err(ImageError::TrailerChecksum);
    }
    Ok(body
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// Everything but the pages: the processes, their open files and pipes,
/// and where their pages go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    /// The processes' pids must be kept: the image is restored in a pid
    /// namespace of its own (`restore_tree`), each process with the pid it
    /// had. Otherwise (one process saved by `dump`) it gets a new pid.
    pub keep_pids: bool,
    /// The processes, each after its parent; the first is the tree's root.
    pub procs: Vec<Proc>,
    /// The open files the processes' descriptors refer to (an open file
    /// shared by descriptors of one or several processes is here once).
    pub files: Vec<OpenFile>,
    /// The pipes between processes of the tree.
    pub pipes: Vec<Pipe>,
    /// What the source machine had that the image relies on (its files'
    /// content, vDSO, CPU): a restore elsewhere refuses, saying why, when
    /// its machine differs. `None`: not known (an image of version 2 or
    /// older, or the source could not tell).
    pub needs: Option<crate::compat::Fingerprint>,
    /// Input waiting for the root on descriptors the caller gives anew
    /// (its stdin pipe): what the pipe held that it had not read, then
    /// what the caller still held for it. The caller writes it first into
    /// the new pipe.
    pub inputs: Vec<PendingInput>,
    /// Stream sockets between the root and its caller, given anew at
    /// restore (a VP's socket to its daemon): what was on its way each
    /// way when the processes stopped.
    pub sockets: Vec<SocketState>,
    /// The memfds the processes held or had mapped shared, each made anew
    /// at restore with its bytes (descriptors and mappings of one memfd
    /// share the new one, as they shared the old).
    pub memfds: Vec<Memfd>,
}

/// A memfd (`memfd_create(2)`): a file in memory, known only to the
/// processes that hold it. Whoever else held it (another process, the
/// caller) keeps the old one: from the restore on, the two are apart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memfd {
    /// Its name, as `memfd_create` was given it.
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its seals (`F_GET_SEALS`), put back once it is filled; 0 when
    /// unknown (no descriptor of it was held: only mapped).
    pub seals: i32,
    /// Its bytes from offset 0 (the rest, up to `size`, zero): where they
    /// are.
    pub data: MemfdBytes,
}

/// Where a memfd's bytes are (from its offset 0; the rest, up to its size,
/// zero).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MemfdBytes {
    /// In the image's data: `len` bytes from `offset` (from the start of
    /// the data, page aligned), a run of their own after the page runs
    /// with its checksum in the trailer; no run when `len` is 0. What a
    /// dump writes.
    Image {
        /// Where they start in the data.
        offset: u64,
        /// How many (trailing zeros left out).
        len: u64,
    },
    /// Here, in memory: a memfd of a version 5 image (whose bytes were in
    /// its metadata), one read by [`crate::memfd::read`], or one of the
    /// caller's sockets read from the image file by
    /// [`crate::ImageFile::open`].
    Held(#[serde(with = "serde_bytes")] Vec<u8>),
}

impl MemfdBytes {
    /// How many bytes (trailing zeros left out).
    pub fn len(&self) -> u64 {
        match self {
            MemfdBytes::Image { len, .. } => *len,
            MemfdBytes::Held(b) => b.len() as u64,
        }
    }

    /// No bytes (all zero).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes when held in memory.
    pub fn held(&self) -> Option<&[u8]> {
        match self {
            MemfdBytes::Held(b) => Some(b),
            MemfdBytes::Image { .. } => None,
        }
    }

    /// The run they make in the image's data: (offset, whole pages'
    /// length), when in the image and not empty.
    pub fn run(&self) -> Option<(u64, u64)> {
        match self {
            MemfdBytes::Image { offset, len } if *len > 0 => Some((*offset, page_up(*len))),
            MemfdBytes::Image { .. } | MemfdBytes::Held(_) => None,
        }
    }
}

/// A [`Memfd`] as version 5 wrote it (its bytes in the metadata).
#[derive(Deserialize)]
struct MemfdV5 {
    name: String,
    size: u64,
    seals: i32,
    #[serde(with = "serde_bytes")]
    data: Vec<u8>,
}

impl From<MemfdV5> for Memfd {
    fn from(v: MemfdV5) -> Memfd {
        Memfd {
            name: v.name,
            size: v.size,
            seals: v.seals,
            data: MemfdBytes::Held(v.data),
        }
    }
}

/// What was on its way through a stream socket between the root and its
/// caller (which holds the other end, and gives a new pair's end at
/// restore) when the processes stopped. Only the bytes are kept: a socket
/// with descriptors in flight is refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SocketState {
    /// The root's descriptor.
    pub fd: i32,
    /// Bytes for the root it had not read: those the socket held (looked
    /// at, not taken), then those the caller had not written yet. The
    /// caller writes them first into the new socket.
    #[serde(with = "serde_bytes")]
    pub unread: Vec<u8>,
    /// The start of what the root was writing when it stopped, which the
    /// caller had already read (a write cut short: the root writes the
    /// rest once restored). The caller takes them as read first on its new
    /// end, ahead of what the root writes next.
    #[serde(with = "serde_bytes")]
    pub unfinished: Vec<u8>,
    /// The caller's own record of the conversation (what it had heard
    /// and sent on it), kept for it as it is: this crate does not read it.
    #[serde(with = "serde_bytes")]
    pub notes: Vec<u8>,
    /// The memfds passed with `unread` (`SCM_RIGHTS`), in order: the
    /// caller passes new ones with the first bytes it writes.
    pub passed: Vec<Memfd>,
}

/// A [`SocketState`] as version 4 wrote it (no `passed`).
#[derive(Deserialize)]
struct SocketStateV4 {
    fd: i32,
    #[serde(with = "serde_bytes")]
    unread: Vec<u8>,
    #[serde(with = "serde_bytes")]
    unfinished: Vec<u8>,
    #[serde(with = "serde_bytes")]
    notes: Vec<u8>,
}

/// A [`SocketState`] as version 5 wrote it (its memfds' bytes in the
/// metadata).
#[derive(Deserialize)]
struct SocketStateV5 {
    fd: i32,
    #[serde(with = "serde_bytes")]
    unread: Vec<u8>,
    #[serde(with = "serde_bytes")]
    unfinished: Vec<u8>,
    #[serde(with = "serde_bytes")]
    notes: Vec<u8>,
    passed: Vec<MemfdV5>,
}

impl From<SocketStateV5> for SocketState {
    fn from(v: SocketStateV5) -> SocketState {
        SocketState {
            fd: v.fd,
            unread: v.unread,
            unfinished: v.unfinished,
            notes: v.notes,
            passed: v.passed.into_iter().map(Memfd::from).collect(),
        }
    }
}

/// An [`OpenFile`] as version 5 wrote it (a cut socket's memfds' bytes in
/// the metadata).
#[derive(Deserialize)]
enum OpenFileV5 {
    External {
        fd: i32,
    },
    Path {
        path: String,
        flags: i32,
        pos: u64,
    },
    Pipe {
        pipe: u32,
        write: bool,
        flags: i32,
    },
    Memfd {
        memfd: u32,
        flags: i32,
        pos: u64,
    },
    Cut {
        #[serde(with = "serde_bytes")]
        unread: Vec<u8>,
        flags: i32,
        passed: Vec<MemfdV5>,
    },
}

impl From<OpenFileV5> for OpenFile {
    fn from(v: OpenFileV5) -> OpenFile {
        match v {
            OpenFileV5::External { fd } => OpenFile::External { fd },
            OpenFileV5::Path { path, flags, pos } => OpenFile::Path { path, flags, pos },
            OpenFileV5::Pipe { pipe, write, flags } => OpenFile::Pipe { pipe, write, flags },
            OpenFileV5::Memfd { memfd, flags, pos } => OpenFile::Memfd { memfd, flags, pos },
            OpenFileV5::Cut {
                unread,
                flags,
                passed,
            } => OpenFile::Cut {
                unread,
                flags,
                passed: passed.into_iter().map(Memfd::from).collect(),
            },
        }
    }
}

impl From<SocketStateV4> for SocketState {
    fn from(v: SocketStateV4) -> SocketState {
        SocketState {
            fd: v.fd,
            unread: v.unread,
            unfinished: v.unfinished,
            notes: v.notes,
            passed: Vec::new(),
        }
    }
}

/// Input a process had not read yet on a descriptor its caller feeds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingInput {
    /// The root's descriptor (0 for stdin).
    pub fd: i32,
    /// The bytes, in order.
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
    /// The writer had closed its end after them (the reader gets its end
    /// of file once it has read them).
    pub closed: bool,
}

/// An image's metadata as version 2 wrote it (no `needs`).
#[derive(Deserialize)]
struct V2 {
    keep_pids: bool,
    procs: Vec<Proc>,
    files: Vec<OpenFile>,
    pipes: Vec<Pipe>,
}

impl From<V2> for Image {
    fn from(v: V2) -> Image {
        Image {
            keep_pids: v.keep_pids,
            procs: v.procs,
            files: v.files,
            pipes: v.pipes,
            needs: None,
            inputs: Vec::new(),
            sockets: Vec::new(),
            memfds: Vec::new(),
        }
    }
}

/// An image's metadata as version 3 wrote it (no `sockets`).
#[derive(Deserialize)]
struct V3 {
    keep_pids: bool,
    procs: Vec<Proc>,
    files: Vec<OpenFile>,
    pipes: Vec<Pipe>,
    needs: Option<crate::compat::Fingerprint>,
    inputs: Vec<PendingInput>,
}

impl From<V3> for Image {
    fn from(v: V3) -> Image {
        Image {
            keep_pids: v.keep_pids,
            procs: v.procs,
            files: v.files,
            pipes: v.pipes,
            needs: v.needs,
            inputs: v.inputs,
            sockets: Vec::new(),
            memfds: Vec::new(),
        }
    }
}

/// An image's metadata as version 4 wrote it (no `memfds`).
#[derive(Deserialize)]
struct V4 {
    keep_pids: bool,
    procs: Vec<Proc>,
    files: Vec<OpenFile>,
    pipes: Vec<Pipe>,
    needs: Option<crate::compat::Fingerprint>,
    inputs: Vec<PendingInput>,
    sockets: Vec<SocketStateV4>,
}

impl From<V4> for Image {
    fn from(v: V4) -> Image {
        Image {
            keep_pids: v.keep_pids,
            procs: v.procs,
            files: v.files,
            pipes: v.pipes,
            needs: v.needs,
            inputs: v.inputs,
            sockets: v.sockets.into_iter().map(SocketState::from).collect(),
            memfds: Vec::new(),
        }
    }
}

/// An image's metadata as version 5 wrote it (memfds' bytes in it).
#[derive(Deserialize)]
struct V5 {
    keep_pids: bool,
    procs: Vec<Proc>,
    files: Vec<OpenFileV5>,
    pipes: Vec<Pipe>,
    needs: Option<crate::compat::Fingerprint>,
    inputs: Vec<PendingInput>,
    sockets: Vec<SocketStateV5>,
    memfds: Vec<MemfdV5>,
}

impl From<V5> for Image {
    fn from(v: V5) -> Image {
        Image {
            keep_pids: v.keep_pids,
            procs: v.procs,
            files: v.files.into_iter().map(OpenFile::from).collect(),
            pipes: v.pipes,
            needs: v.needs,
            inputs: v.inputs,
            sockets: v.sockets.into_iter().map(SocketState::from).collect(),
            memfds: v.memfds.into_iter().map(Memfd::from).collect(),
        }
    }
}

impl Image {
    /// Every memfd the image carries, in the order their runs follow one
    /// another in the data: those the processes hold or map
    /// ([`Image::memfds`]), then those on their way through cut sockets
    /// (in the order of [`Image::files`]), then those on their way through
    /// the caller's sockets (in the order of [`Image::sockets`]).
    pub fn memfds_in_order(&self) -> impl Iterator<Item = &Memfd> {
        let cut = self.files.iter().flat_map(|f| match f {
            OpenFile::Cut { passed, .. } => &passed[..],
            OpenFile::External { .. }
            | OpenFile::Path { .. }
            | OpenFile::Pipe { .. }
            | OpenFile::Memfd { .. } => &[],
        });
        self.memfds
            .iter()
            .chain(cut)
            .chain(self.sockets.iter().flat_map(|s| s.passed.iter()))
    }

    /// [`Image::memfds_in_order`], to change.
    pub fn memfds_in_order_mut(&mut self) -> impl Iterator<Item = &mut Memfd> {
        let cut = self.files.iter_mut().flat_map(|f| match f {
            OpenFile::Cut { passed, .. } => &mut passed[..],
            OpenFile::External { .. }
            | OpenFile::Path { .. }
            | OpenFile::Pipe { .. }
            | OpenFile::Memfd { .. } => &mut [],
        });
        self.memfds
            .iter_mut()
            .chain(cut)
            .chain(self.sockets.iter_mut().flat_map(|s| s.passed.iter_mut()))
    }

    /// Every run of the data in order, page runs then memfd runs: (start
    /// in the data, length in bytes, what to call it when damaged).
    pub fn all_runs(&self) -> impl Iterator<Item = (u64, u64, RunName<'_>)> {
        self.runs()
            .map(|r| (r.offset, r.pages * PAGE, RunName::Pages(r.addr)))
            .chain(self.memfds_in_order().filter_map(|m| {
                m.data
                    .run()
                    .map(|(offset, len)| (offset, len, RunName::Memfd(&m.name)))
            }))
    }

    /// The state of every process that is not a zombie, in order.
    pub fn live(&self) -> impl Iterator<Item = &Meta> {
        self.procs.iter().filter_map(|p| match &p.state {
            ProcState::Live(m) => Some(&**m),
            ProcState::Zombie { .. } => None,
        })
    }

    /// Every page run, in image order.
    pub fn runs(&self) -> impl Iterator<Item = &Run> {
        self.live()
            .flat_map(|m| m.regions.iter().flat_map(|r| r.runs.iter()))
    }

    /// Checks the runs against the header: they follow each other in the
    /// data (page runs, then memfd runs, each page aligned), page runs lie
    /// inside their regions and memfd runs inside their memfds, and all
    /// add up to the data length; and every descriptor names an open file
    /// and every pipe end a pipe.
    pub fn check_runs(&self, h: &Header) -> Result<(), ImageError> {
        let mut next = 0u64;
        let mut count = 0u64;
        for m in self.live() {
            for r in &m.regions {
                if r.start % PAGE != 0 || r.end % PAGE != 0 || r.start >= r.end {
                    return Err(ImageError::Runs(format!(
                        "region {:#x}-{:#x} not whole pages",
                        r.start, r.end
                    )));
                }
                for run in &r.runs {
                    let len = run.pages.saturating_mul(PAGE);
                    if run.offset != next
                        || run.pages == 0
                        || !run.addr.is_multiple_of(PAGE)
                        || run.addr < r.start
                        || run.addr.checked_add(len).is_none_or(|e| e > r.end)
                    {
                        return Err(ImageError::Runs(format!(
                            "run at {:#x} ({} pages, offset {}) outside region {:#x}-{:#x} or out of order",
                            run.addr, run.pages, run.offset, r.start, r.end
                        )));
                    }
                    next = next
                        .checked_add(len)
                        .ok_or_else(|| ImageError::Runs("page runs overflow".into()))?;
                    count += 1;
                }
            }
        }
        for m in self.memfds_in_order() {
            if m.size > crate::memfd::MAX_SIZE {
                return Err(ImageError::Meta(format!(
                    "memfd {:?} of {} bytes (most {})",
                    m.name,
                    m.size,
                    crate::memfd::MAX_SIZE
                )));
            }
            match &m.data {
                MemfdBytes::Image { offset, len } => {
                    if *offset != next || *len > m.size {
                        return Err(ImageError::Runs(format!(
                            "memfd {:?}: {len} bytes at offset {offset} in {} (next run at {next})",
                            m.name, m.size
                        )));
                    }
                    if *len > 0 {
                        next = next
                            .checked_add(page_up(*len))
                            .ok_or_else(|| ImageError::Runs("memfd runs overflow".into()))?;
                        count += 1;
                    }
                }
                MemfdBytes::Held(b) => {
                    if b.len() as u64 > m.size {
                        return Err(ImageError::Meta(format!(
                            "memfd {:?} holds {} bytes in {}",
                            m.name,
                            b.len(),
                            m.size
                        )));
                    }
                }
            }
        }
        if next != h.data_len || count != h.runs {
            return Err(ImageError::Runs(format!(
                "{count} runs of {next} bytes, header says {} of {}",
                h.runs, h.data_len
            )));
        }
        for m in self.live() {
            if let Some(f) = m.fds.iter().find(|f| f.file as usize >= self.files.len()) {
                return Err(ImageError::Meta(format!(
                    "fd {} names open file {} of {}",
                    f.fd,
                    f.file,
                    self.files.len()
                )));
            }
        }
        for f in &self.files {
            match f {
                OpenFile::Pipe { pipe, .. } if *pipe as usize >= self.pipes.len() => {
                    return Err(ImageError::Meta(format!(
                        "a pipe end names pipe {pipe} of {}",
                        self.pipes.len()
                    )));
                }
                OpenFile::Memfd { memfd, .. } => self.check_memfd(*memfd)?,
                OpenFile::Pipe { .. }
                | OpenFile::External { .. }
                | OpenFile::Path { .. }
                | OpenFile::Cut { .. } => {}
            }
        }
        for r in self.live().flat_map(|m| m.regions.iter()) {
            if let RegionKind::Memfd { memfd, offset, .. } = r.kind {
                self.check_memfd(memfd)?;
                let end = offset.checked_add(r.end - r.start);
                if end.is_none_or(|e| e > self.memfds[memfd as usize].size) {
                    return Err(ImageError::Meta(format!(
                        "region {:#x}-{:#x} maps past the end of memfd {memfd}",
                        r.start, r.end
                    )));
                }
            }
        }
        Ok(())
    }

    /// Does memfd `i` exist?
    fn check_memfd(&self, i: u32) -> Result<(), ImageError> {
        if i as usize >= self.memfds.len() {
            return Err(ImageError::Meta(format!(
                "memfd {i} of {}",
                self.memfds.len()
            )));
        }
        Ok(())
    }
}

/// A process of the image and its place in the tree. Ids are as the
/// process saw them (inside its pid namespace); 0 means a process outside
/// the tree (its parent, or the leader of its group or session, was not
/// saved: at restore it is the namespace's init, or the group and session
/// the restored tree is given).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proc {
    /// Its pid.
    pub pid: i32,
    /// Its parent's pid, 0 when the parent is not in the tree.
    pub ppid: i32,
    /// Its process group, 0 when the group's id is not a pid of the tree.
    pub pgid: i32,
    /// Its session, 0 when the session's id is not a pid of the tree.
    pub sid: i32,
    /// Running (stopped) or ended.
    pub state: ProcState,
}

/// Whether a process of the tree runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProcState {
    /// A process, stopped for the dump: all its state.
    Live(Box<Meta>),
    /// A child that ended and that its parent has not waited for yet.
    Zombie {
        /// Its wait status (as `waitpid` gives it).
        status: i32,
    },
}

/// An open file (what the kernel calls a file description): descriptors
/// that referred to the same one at the dump share it again at restore,
/// offset and flags included.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpenFile {
    /// Given anew by the caller at restore, by the number the root process
    /// had it on (stdio pipes, the control socket).
    External {
        /// The root's descriptor number.
        fd: i32,
    },
    /// A file, directory or harmless device reopened by path.
    Path {
        /// Its path.
        path: String,
        /// `O_*` status flags (access mode, `O_APPEND`, `O_NONBLOCK`...).
        flags: i32,
        /// File offset.
        pos: u64,
    },
    /// One end of a pipe of the tree.
    Pipe {
        /// Index in [`Image::pipes`].
        pipe: u32,
        /// The write end (else the read end).
        write: bool,
        /// `O_*` status flags (`O_NONBLOCK`).
        flags: i32,
    },
    // (Variants are appended: the image's encoding numbers them.)
    /// A memfd (by its index in [`Image::memfds`]).
    Memfd {
        /// Index in [`Image::memfds`].
        memfd: u32,
        /// `O_*` status flags (access mode, `O_APPEND`, `O_NONBLOCK`...).
        flags: i32,
        /// File offset.
        pos: u64,
    },
    /// A stream socket whose other end stays behind (the caller names
    /// which may be cut: a link between two programs of which one moves):
    /// at restore the socket's other end is closed, so it reads what it
    /// had not read, then the end of the stream, and its writes fail.
    Cut {
        /// The bytes it had not read.
        #[serde(with = "serde_bytes")]
        unread: Vec<u8>,
        /// `O_*` status flags (`O_NONBLOCK`).
        flags: i32,
        /// The memfds passed with `unread`, in order (passed anew with its
        /// first bytes).
        passed: Vec<Memfd>,
    },
}

/// A pipe between processes of the tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pipe {
    /// Its capacity in bytes (`F_GETPIPE_SZ`).
    pub size: u32,
    /// The bytes written and not yet read.
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
}

/// One process's state: what it was and where its pages go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// Its program file (`/proc/PID/exe`).
    pub exe: String,
    /// Its memory, in address order.
    pub regions: Vec<Region>,
    /// The vDSO and its data pages where the process had them.
    pub specials: Vec<Special>,
    /// sha256 of the vDSO's bytes (it must be the same where it goes).
    #[serde(with = "serde_bytes")]
    pub vdso_hash: Vec<u8>,
    /// Its threads, the main one first.
    pub threads: Vec<Thread>,
    /// Signal dispositions other than the default.
    pub sigactions: Vec<SigAction>,
    /// Signals pending for the whole process (128-byte `siginfo_t`s).
    pub shared_pending: Vec<SigInfo>,
    /// Its file descriptors.
    pub fds: Vec<Fd>,
    /// Working directory.
    pub cwd: String,
    /// File creation mask.
    pub umask: u32,
    /// Resource limits: (resource, soft, hard).
    pub rlimits: Vec<(u32, u64, u64)>,
    /// The `mm` fields `PR_SET_MM_MAP` sets.
    pub mm: MmFields,
    /// The auxiliary vector's bytes.
    #[serde(with = "serde_bytes")]
    pub auxv: Vec<u8>,
    /// `ITIMER_REAL`, `ITIMER_VIRTUAL`, `ITIMER_PROF`: (interval, value) in µs.
    pub itimers: Vec<(u64, u64)>,
    /// What restore needs of the machine.
    pub cpu: Cpu,
}

/// Access bits of a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prot {
    /// Readable.
    pub r: bool,
    /// Writable.
    pub w: bool,
    /// Executable.
    pub x: bool,
}

/// One mapping of the process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Region {
    /// First address.
    pub start: u64,
    /// One past the last.
    pub end: u64,
    /// Access.
    pub prot: Prot,
    /// What is under the pages not in `runs`.
    pub kind: RegionKind,
    /// `madvise` advice to give back (`MADV_*` numbers).
    pub advice: Vec<i32>,
    /// The pages saved, in address order.
    pub runs: Vec<Run>,
}

/// What backs a region.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RegionKind {
    /// Private anonymous memory (or memory whose backing cannot be reopened:
    /// its pages are all in the image).
    Anon,
    /// The main stack (grows down).
    Stack,
    /// A private mapping of a file reopened by path; the pages the process
    /// changed are in the image.
    FilePrivate {
        /// The file.
        path: String,
        /// Offset of `start` in the file.
        offset: u64,
    },
    /// A shared mapping of a file reopened by path (its data is the file's).
    FileShared {
        /// The file.
        path: String,
        /// Offset of `start` in the file.
        offset: u64,
        /// Whether the process may make it writable (needs the file opened
        /// for writing).
        may_write: bool,
    },
    /// A shared mapping of a memfd of the image (its data is the memfd's).
    Memfd {
        /// Index in [`Image::memfds`].
        memfd: u32,
        /// Offset of `start` in the memfd.
        offset: u64,
        /// Whether the process may make it writable.
        may_write: bool,
    },
}

/// Pages saved, contiguous in the process and in the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// Address of the first page.
    pub addr: u64,
    /// Number of pages.
    pub pages: u64,
    /// Offset from the start of the page data.
    pub offset: u64,
}

/// What a run of the data holds, to name it when it is damaged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunName<'a> {
    /// Pages of a process, from this address.
    Pages(u64),
    /// The bytes of the memfd of this name.
    Memfd(&'a str),
}

impl RunName<'_> {
    /// The error for run `index` of this kind whose checksum does not
    /// match.
    pub fn damaged(&self, index: usize) -> ImageError {
        match self {
            RunName::Pages(addr) => ImageError::RunChecksum { index, addr: *addr },
            RunName::Memfd(name) => ImageError::MemfdChecksum {
                index,
                name: (*name).to_string(),
            },
        }
    }
}

/// A kernel-provided mapping moved rather than saved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Special {
    /// `[vdso]`, `[vvar]`, `[vvar_vclock]`.
    pub name: String,
    /// First address.
    pub start: u64,
    /// One past the last.
    pub end: u64,
}

/// One thread's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thread {
    /// Its tid.
    pub tid: i32,
    /// `user_regs_struct` as 27 words, a system call to restart rewound.
    pub regs: Vec<u64>,
    /// The `NT_X86_XSTATE` regset (FPU and vector registers).
    #[serde(with = "serde_bytes")]
    pub xstate: Vec<u8>,
    /// Blocked signals.
    pub sigmask: u64,
    /// Signals pending for this thread.
    pub pending: Vec<SigInfo>,
    /// rseq registration: (address, length, signature), if any.
    pub rseq: Option<(u64, u32, u32)>,
    /// Robust futex list: (head, length).
    pub robust_list: (u64, u64),
    /// `clear_child_tid` (`set_tid_address`).
    pub clear_child_tid: u64,
    /// sigaltstack: (sp, flags, size).
    pub altstack: (u64, i32, u64),
    /// Its name (`comm`).
    pub comm: String,
    /// Where glibc caches this thread's tid (`struct pthread`'s `tid`), when
    /// the word there held the tid at the dump.
    pub cached_tid_at: Option<u64>,
}

/// A `siginfo_t` (128 bytes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SigInfo(#[serde(with = "serde_bytes")] pub Vec<u8>);

/// A signal disposition (the kernel's `struct sigaction` for `rt_sigaction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SigAction {
    /// Signal number.
    pub signo: i32,
    /// Handler address (or `SIG_IGN`).
    pub handler: u64,
    /// `SA_*` flags.
    pub flags: u64,
    /// The restorer glibc installed.
    pub restorer: u64,
    /// Signals blocked while the handler runs.
    pub mask: u64,
}

/// A file descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fd {
    /// Its number.
    pub fd: i32,
    /// Index in [`Image::files`] of the open file it refers to.
    pub file: u32,
    /// `FD_CLOEXEC`.
    pub cloexec: bool,
}

/// The `mm` fields of `PR_SET_MM_MAP`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MmFields {
    /// Text start.
    pub start_code: u64,
    /// Text end.
    pub end_code: u64,
    /// Data start.
    pub start_data: u64,
    /// Data end.
    pub end_data: u64,
    /// Heap start.
    pub start_brk: u64,
    /// Current break.
    pub brk: u64,
    /// Stack start.
    pub start_stack: u64,
    /// argv start.
    pub arg_start: u64,
    /// argv end.
    pub arg_end: u64,
    /// environment start.
    pub env_start: u64,
    /// environment end.
    pub env_end: u64,
}

/// What the machine must offer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cpu {
    /// `/proc/cpuinfo` flags of the source.
    pub flags: Vec<String>,
    /// Size of the `NT_X86_XSTATE` regset.
    pub xstate_len: u32,
}

/// Encodes metadata.
pub fn encode_meta(m: &Image) -> Result<Vec<u8>, ImageError> {
    postcard::to_stdvec(m).map_err(|e| ImageError::Meta(e.to_string()))
}

/// Decodes the metadata of an image of format `version`, refusing trailing
/// bytes; a version 1 image becomes an image of one process.
pub fn decode_meta(version: u32, b: &[u8]) -> Result<Image, ImageError> {
    fn take<T: serde::de::DeserializeOwned>(b: &[u8]) -> Result<T, ImageError> {
        let (m, rest) =
            postcard::take_from_bytes::<T>(b).map_err(|e| ImageError::Meta(e.to_string()))?;
        if !rest.is_empty() {
            return Err(ImageError::Meta(format!("{} trailing bytes", rest.len())));
        }
        Ok(m)
    }
    match version {
        1 => Ok(take::<v1::Meta>(b)?.into()),
        2 => Ok(take::<V2>(b)?.into()),
        3 => Ok(take::<V3>(b)?.into()),
        4 => Ok(take::<V4>(b)?.into()),
        5 => Ok(take::<V5>(b)?.into()),
        FORMAT_VERSION => take(b),
        found => Err(ImageError::Version { found }),
    }
}

/// Encodes a whole image in memory: `image` and the page data of its runs,
/// in their order (a dump streams instead; this serves tests and small
/// images).
pub fn encode(image: &Image, data: &[u8]) -> Result<Vec<u8>, ImageError> {
    let mb = encode_meta(image)?;
    encode_parts(FORMAT_VERSION, &mb, image, data)
}

/// An image of format `version` from its encoded metadata.
fn encode_parts(
    version: u32,
    mb: &[u8],
    image: &Image,
    data: &[u8],
) -> Result<Vec<u8>, ImageError> {
    let runs = image.all_runs().count() as u64;
    let mut h = Header::new(mb.len() as u64, data.len() as u64, runs, crc32c::crc32c(mb));
    h.version = version;
    image.check_runs(&h)?;
    let mut out = h.encode().to_vec();
    out.extend_from_slice(mb);
    out.resize(h.data_offset as usize, 0);
    out.extend_from_slice(data);
    let crcs: Vec<u32> = image
        .all_runs()
        .map(|(s, len, _)| crc32c::crc32c(&data[s as usize..(s + len) as usize]))
        .collect();
    out.extend_from_slice(&encode_trailer(&crcs));
    Ok(out)
}

/// Checks an image as its bytes arrive, in order and in pieces of any
/// size, so that a receiver need not read it again: the header, then the
/// metadata, are refused as soon as they are whole; every run's checksum is
/// computed on the way and compared with the trailer at the end.
#[derive(Debug, Default)]
pub struct StreamCheck {
    /// Bytes of the header and metadata until both are whole.
    head: Vec<u8>,
    header: Option<Header>,
    meta: Option<Image>,
    /// Bytes seen.
    pos: u64,
    /// (start, end) of each run in the image, in order.
    runs: Vec<(u64, u64)>,
    next_run: usize,
    crc: u32,
    crcs: Vec<u32>,
    trailer: Vec<u8>,
}

impl StreamCheck {
    /// A check of a new image.
    pub fn new() -> StreamCheck {
        StreamCheck::default()
    }

    /// Takes the next bytes.
    pub fn update(&mut self, mut bytes: &[u8]) -> Result<(), ImageError> {
        while !bytes.is_empty() {
            let Some(h) = self.header else {
                let want = HEADER_LEN - self.head.len();
                let n = want.min(bytes.len());
                self.head.extend_from_slice(&bytes[..n]);
                self.pos += n as u64;
                bytes = &bytes[n..];
                if self.head.len() == HEADER_LEN {
                    self.header = Some(Header::decode_fields(&self.head)?);
                }
                continue;
            };
            if self.meta.is_none() {
                let want = HEADER_LEN + h.meta_len as usize - self.head.len();
                let n = want.min(bytes.len());
                self.head.extend_from_slice(&bytes[..n]);
                self.pos += n as u64;
                bytes = &bytes[n..];
                if self.head.len() == HEADER_LEN + h.meta_len as usize {
                    let mb = &self.head[HEADER_LEN..];
                    if crc32c::crc32c(mb) != h.meta_crc {
                        return Err(ImageError::MetaChecksum);
                    }
                    let meta = decode_meta(h.version, mb)?;
                    meta.check_runs(&h)?;
                    self.runs = meta
                        .all_runs()
                        .map(|(s, len, _)| (h.data_offset + s, h.data_offset + s + len))
                        .collect();
                    self.meta = Some(meta);
                    self.head = Vec::new();
                }
                continue;
            }
            if self.pos < h.data_offset {
                let n = (h.data_offset - self.pos).min(bytes.len() as u64) as usize;
                self.pos += n as u64;
                bytes = &bytes[n..];
                continue;
            }
            if let Some(&(start, end)) = self.runs.get(self.next_run) {
                debug_assert!(self.pos >= start);
                let n = (end - self.pos).min(bytes.len() as u64) as usize;
                self.crc = crc32c::crc32c_append(self.crc, &bytes[..n]);
                self.pos += n as u64;
                bytes = &bytes[n..];
                if self.pos == end {
                    self.crcs.push(self.crc);
                    self.crc = 0;
                    self.next_run += 1;
                }
                continue;
            }
            let room = (4 * h.runs as usize + 4).saturating_sub(self.trailer.len());
            if bytes.len() > room {
                return Err(ImageError::Size {
                    expected: h.total_len(),
                    actual: self.pos + bytes.len() as u64,
                });
            }
            self.trailer.extend_from_slice(bytes);
            self.pos += bytes.len() as u64;
            bytes = &[];
        }
        Ok(())
    }

    /// The image is whole: checks its length and every run, and gives its
    /// state.
    pub fn finish(self) -> Result<(Header, Image), ImageError> {
        let (Some(h), Some(meta)) = (self.header, self.meta) else {
            return Err(ImageError::TooShort(self.pos));
        };
        if self.pos != h.total_len() {
            return Err(ImageError::Size {
                expected: h.total_len(),
                actual: self.pos,
            });
        }
        let want = decode_trailer(&self.trailer, h.runs as usize)?;
        if self.crcs.len() != want.len() {
            return Err(ImageError::Runs(format!(
                "{} runs read, the trailer sums {}",
                self.crcs.len(),
                want.len()
            )));
        }
        for (i, (got, want)) in self.crcs.iter().zip(&want).enumerate() {
            if got != want {
                let name = meta.all_runs().nth(i).map_or(RunName::Pages(0), |r| r.2);
                return Err(name.damaged(i));
            }
        }
        Ok((h, meta))
    }
}

/// Decodes an image held whole in memory (tests and small images); a file
/// goes through [`crate::ImageFile`].
pub fn decode(bytes: &[u8], verify_pages: bool) -> Result<(Header, Image), ImageError> {
    let h = Header::decode(bytes, bytes.len() as u64)?;
    let meta_bytes = &bytes[HEADER_LEN..HEADER_LEN + h.meta_len as usize];
    if crc32c::crc32c(meta_bytes) != h.meta_crc {
        return Err(ImageError::MetaChecksum);
    }
    let meta = decode_meta(h.version, meta_bytes)?;
    meta.check_runs(&h)?;
    let crcs = decode_trailer(&bytes[h.trailer_offset() as usize..], h.runs as usize)?;
    if verify_pages {
        for (i, ((start, len, name), crc)) in meta.all_runs().zip(&crcs).enumerate() {
            let s = (h.data_offset + start) as usize;
            let data = &bytes[s..s + len as usize];
            if crc32c::crc32c(data) != *crc {
                return Err(name.damaged(i));
            }
        }
    }
    Ok((h, meta))
}

/// The bytes of `m`, a memfd of the image held whole in `bytes` whose
/// header is `h` (tests and small images; a file goes through
/// [`crate::ImageFile::memfd_bytes`]). `None` when they are not there.
pub fn memfd_bytes<'a>(bytes: &'a [u8], h: &Header, m: &'a Memfd) -> Option<&'a [u8]> {
    match &m.data {
        MemfdBytes::Held(b) => Some(b),
        MemfdBytes::Image { offset, len } => {
            let s = usize::try_from(h.data_offset.checked_add(*offset)?).ok()?;
            bytes.get(s..s.checked_add(usize::try_from(*len).ok()?)?)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A tree of a live process with `runs` and a zombie, a pipe between
    /// them and the caller's stdout.
    fn sample(runs: &[(u64, u64)]) -> Image {
        let mut off = 0;
        let rs = runs
            .iter()
            .map(|&(addr, pages)| {
                let r = Run {
                    addr,
                    pages,
                    offset: off,
                };
                off += pages * PAGE;
                r
            })
            .collect();
        let meta = Meta {
            exe: "/bin/true".into(),
            regions: vec![
                Region {
                    start: 0x10000,
                    end: 0x100000,
                    prot: Prot {
                        r: true,
                        w: true,
                        x: false,
                    },
                    kind: RegionKind::Anon,
                    advice: vec![],
                    runs: rs,
                },
                Region {
                    start: 0x200000,
                    end: 0x202000,
                    prot: Prot {
                        r: true,
                        w: true,
                        x: false,
                    },
                    kind: RegionKind::Memfd {
                        memfd: 0,
                        offset: 0x1000,
                        may_write: true,
                    },
                    advice: vec![],
                    runs: vec![],
                },
            ],
            specials: vec![],
            vdso_hash: vec![1; 32],
            threads: vec![],
            sigactions: vec![],
            shared_pending: vec![],
            fds: vec![
                Fd {
                    fd: 1,
                    file: 0,
                    cloexec: false,
                },
                Fd {
                    fd: 4,
                    file: 1,
                    cloexec: true,
                },
            ],
            cwd: "/".into(),
            umask: 0o22,
            rlimits: vec![(7, 1024, 4096)],
            mm: MmFields::default(),
            auxv: vec![0; 16],
            itimers: vec![(0, 0); 3],
            cpu: Cpu {
                flags: vec!["avx2".into()],
                xstate_len: 2696,
            },
        };
        Image {
            keep_pids: true,
            inputs: vec![PendingInput {
                fd: 0,
                data: b"typed ahead\n".to_vec(),
                closed: true,
            }],
            sockets: vec![SocketState {
                fd: 3,
                unread: b"for it".to_vec(),
                unfinished: b"from it".to_vec(),
                notes: b"the caller's".to_vec(),
                passed: vec![],
            }],
            needs: Some(crate::compat::Fingerprint {
                files: [("/usr/bin/prog".to_string(), Some(vec![7; 32]))].into(),
                vdso: vec![1; 32],
                cpu_flags: vec!["avx2".into()],
                xstate_len: 2696,
            }),
            procs: vec![
                Proc {
                    pid: 2,
                    ppid: 0,
                    pgid: 2,
                    sid: 0,
                    state: ProcState::Live(Box::new(meta)),
                },
                Proc {
                    pid: 3,
                    ppid: 2,
                    pgid: 2,
                    sid: 0,
                    state: ProcState::Zombie { status: 0x0100 },
                },
            ],
            files: vec![
                OpenFile::External { fd: 1 },
                OpenFile::Pipe {
                    pipe: 0,
                    write: false,
                    flags: 0,
                },
                OpenFile::Memfd {
                    memfd: 0,
                    flags: libc::O_RDWR,
                    pos: 12,
                },
                OpenFile::Cut {
                    unread: b"half a fr".to_vec(),
                    flags: 0,
                    passed: vec![Memfd {
                        name: "mig-pooled".into(),
                        size: 8192,
                        seals: libc::F_SEAL_GROW,
                        data: MemfdBytes::Held(vec![1; 10]),
                    }],
                },
            ],
            pipes: vec![Pipe {
                size: 65536,
                data: b"in flight".to_vec(),
            }],
            memfds: vec![Memfd {
                name: "mig-ring".into(),
                size: 0x3000,
                seals: libc::F_SEAL_GROW | libc::F_SEAL_SHRINK,
                data: MemfdBytes::Held(b"ring".to_vec()),
            }],
        }
    }

    /// `sample`, its memfds' bytes in the data as a dump writes them: the
    /// ring's, the cut socket's memfd's, and one on its way through the
    /// caller's socket of two pages (some zero padding after it).
    fn sample_runs(runs: &[(u64, u64)]) -> Image {
        let mut img = sample(runs);
        img.sockets[0].passed.push(Memfd {
            name: "mig-message".into(),
            size: 3 * PAGE,
            seals: 0,
            data: MemfdBytes::Held(vec![3; 5000]),
        });
        let mut next: u64 = img.runs().map(|r| r.pages * PAGE).sum();
        for m in img.memfds_in_order_mut() {
            let len = m.data.len();
            m.data = MemfdBytes::Image { offset: next, len };
            next += page_up(len);
        }
        img
    }

    /// A whole image in memory, runs filled with a pattern.
    fn build(meta: &Image) -> Vec<u8> {
        let data: Vec<u8> = meta
            .all_runs()
            .flat_map(|(start, len, _)| (0..len).map(move |i| (i ^ start) as u8))
            .collect();
        encode(meta, &data).expect("encode")
    }

    #[test]
    fn memfd_runs_follow_the_pages_and_a_damaged_one_is_refused() {
        let m = sample_runs(&[(0x10000, 2)]);
        let img = build(&m);
        let (h, back) = decode(&img, true).expect("decode");
        assert_eq!(back, m);
        // Two pages, then the ring's page, the cut socket's memfd's page,
        // the message's two pages.
        assert_eq!(h.data_len, 6 * PAGE);
        assert_eq!(h.runs, 4);
        assert_eq!(
            back.sockets[0].passed[0].data,
            MemfdBytes::Image {
                offset: 4 * PAGE,
                len: 5000
            }
        );
        // A byte of the message's bytes, or of its padding, damaged.
        for at in [4 * PAGE + 10, 6 * PAGE - 1] {
            let mut bad = img.clone();
            bad[(h.data_offset + at) as usize] ^= 4;
            assert!(decode(&bad, false).is_ok());
            let want = || ImageError::MemfdChecksum {
                index: 3,
                name: "mig-message".into(),
            };
            assert_eq!(decode(&bad, true), Err(want()));
            assert_eq!(streamed(&bad, &[100, 5000]), Err(want()));
        }
        // Runs out of order, or past their memfd's end: refused.
        let mut m2 = m.clone();
        m2.memfds[0].data = MemfdBytes::Image {
            offset: 3 * PAGE,
            len: 4,
        };
        assert!(matches!(m2.check_runs(&h), Err(ImageError::Runs(_))));
        let mut m3 = m.clone();
        m3.memfds[0].size = 2;
        assert!(matches!(m3.check_runs(&h), Err(ImageError::Runs(_))));
    }

    #[test]
    fn a_version_1_image_is_one_process_with_new_pids() {
        let img = sample(&[(0x10000, 1)]);
        let ProcState::Live(m) = &img.procs[0].state else {
            unreachable!()
        };
        let old = v1::Meta {
            pid: 77,
            exe: m.exe.clone(),
            // (Version 1 had no memfds.)
            regions: m.regions[..1].to_vec(),
            specials: vec![],
            vdso_hash: m.vdso_hash.clone(),
            threads: vec![],
            sigactions: vec![],
            shared_pending: vec![],
            fds: vec![
                v1::Fd {
                    fd: 0,
                    kind: v1::FdKind::External,
                    cloexec: false,
                },
                v1::Fd {
                    fd: 3,
                    kind: v1::FdKind::Path {
                        path: "/tmp/x".into(),
                        flags: 1,
                        pos: 9,
                    },
                    cloexec: true,
                },
            ],
            cwd: "/".into(),
            umask: 0o22,
            rlimits: vec![],
            mm: MmFields::default(),
            auxv: vec![],
            itimers: vec![],
            cpu: m.cpu.clone(),
        };
        let mb = postcard::to_stdvec(&old).expect("encode v1");
        let back: Image = old.into();
        let data = vec![5u8; PAGE as usize];
        let bytes = encode_parts(1, &mb, &back, &data).expect("v1 image");
        let (h, got) = decode(&bytes, true).expect("v1 decodes");
        assert_eq!(h.version, 1);
        assert_eq!(got, back);
        assert!(!got.keep_pids);
        assert_eq!(got.procs[0].pid, 77);
        assert_eq!(
            got.files,
            vec![
                OpenFile::External { fd: 0 },
                OpenFile::Path {
                    path: "/tmp/x".into(),
                    flags: 1,
                    pos: 9
                }
            ]
        );
    }

    #[test]
    fn a_version_4_image_has_no_memfds() {
        let mut img = sample(&[(0x10000, 1)]);
        img.memfds.clear();
        img.sockets.clear();
        img.files.truncate(2);
        for p in &mut img.procs {
            if let ProcState::Live(m) = &mut p.state {
                m.regions.truncate(1);
            }
        }
        #[derive(Serialize)]
        struct Old<'a> {
            keep_pids: bool,
            procs: &'a Vec<Proc>,
            files: &'a Vec<OpenFile>,
            pipes: &'a Vec<Pipe>,
            needs: &'a Option<crate::compat::Fingerprint>,
            inputs: &'a Vec<PendingInput>,
            sockets: &'a Vec<SocketState>,
        }
        let mb = postcard::to_stdvec(&Old {
            keep_pids: img.keep_pids,
            procs: &img.procs,
            files: &img.files,
            pipes: &img.pipes,
            needs: &img.needs,
            inputs: &img.inputs,
            sockets: &img.sockets,
        })
        .expect("encode v4");
        let data = vec![5u8; PAGE as usize];
        let bytes = encode_parts(4, &mb, &img, &data).expect("v4 image");
        let (h, got) = decode(&bytes, true).expect("v4 decodes");
        assert_eq!(h.version, 4);
        assert_eq!(got, img);
    }

    #[test]
    fn a_memfd_the_image_lacks_or_mapped_past_its_end_is_refused() {
        let mut img = sample(&[(0x10000, 1)]);
        img.memfds[0].size = 0x2000;
        let e = encode(&img, &vec![0; PAGE as usize]).expect_err("past its end");
        assert!(e.to_string().contains("past the end of memfd 0"), "{e}");
        let mut img = sample(&[(0x10000, 1)]);
        img.memfds.clear();
        let e = encode(&img, &vec![0; PAGE as usize]).expect_err("no memfd");
        assert!(e.to_string().contains("memfd 0 of 0"), "{e}");
        let mut img = sample(&[(0x10000, 1)]);
        img.memfds[0].data = MemfdBytes::Held(vec![1; 0x4000]);
        assert!(encode(&img, &vec![0; PAGE as usize]).is_err());
    }

    #[test]
    fn an_fd_naming_no_open_file_is_refused() {
        let mut img = sample(&[(0x10000, 1)]);
        img.files.truncate(1);
        let e = encode(&img, &vec![0; PAGE as usize]).expect_err("refused");
        assert!(matches!(e, ImageError::Meta(_)), "{e}");
        let mut img = sample(&[(0x10000, 1)]);
        img.pipes.clear();
        assert!(encode(&img, &vec![0; PAGE as usize]).is_err());
    }

    #[test]
    fn round_trip() {
        let m = sample_runs(&[(0x10000, 2), (0x20000, 3)]);
        let img = build(&m);
        let (h, back) = decode(&img, true).expect("decode");
        assert_eq!(back, m);
        assert_eq!(h.data_offset % PAGE, 0);
    }

    #[test]
    fn refusals_in_order() {
        let img = build(&sample_runs(&[(0x10000, 2)]));
        assert_eq!(decode(&img[..10], false), Err(ImageError::TooShort(10)));
        let mut bad = img.clone();
        bad[0] = b'X';
        assert!(matches!(decode(&bad, false), Err(ImageError::BadMagic(_))));
        let mut next = img.clone();
        next[8] = (FORMAT_VERSION + 1) as u8;
        assert_eq!(
            decode(&next, false),
            Err(ImageError::Version {
                found: FORMAT_VERSION + 1
            })
        );
        let mut hdr = img.clone();
        hdr[20] ^= 1;
        assert_eq!(decode(&hdr, false), Err(ImageError::HeaderChecksum));
        assert!(matches!(
            decode(&img[..img.len() - 1], false),
            Err(ImageError::Size { .. })
        ));
        let mut meta = img.clone();
        meta[HEADER_LEN + 3] ^= 0x40;
        assert_eq!(decode(&meta, false), Err(ImageError::MetaChecksum));
        let mut page = img.clone();
        let at = Header::decode(&img, img.len() as u64)
            .expect("h")
            .data_offset as usize
            + 100;
        page[at] ^= 1;
        assert!(decode(&page, false).is_ok());
        assert_eq!(
            decode(&page, true),
            Err(ImageError::RunChecksum {
                index: 0,
                addr: 0x10000
            })
        );
        let mut trailer = img.clone();
        let n = trailer.len();
        trailer[n - 6] ^= 1;
        assert_eq!(decode(&trailer, false), Err(ImageError::TrailerChecksum));
    }

    #[test]
    fn runs_outside_their_region_are_refused() {
        let mut m = sample(&[(0x10000, 2)]);
        let img = build(&m);
        let h = Header::decode(&img, img.len() as u64).expect("h");
        if let ProcState::Live(p) = &mut m.procs[0].state {
            p.regions[0].runs[0].addr = 0xff000;
        }
        assert!(matches!(m.check_runs(&h), Err(ImageError::Runs(_))));
    }

    fn streamed(img: &[u8], cuts: &[usize]) -> Result<(Header, Image), ImageError> {
        let mut c = StreamCheck::new();
        let mut at = 0;
        for &k in cuts {
            let k = (at + k).min(img.len());
            c.update(&img[at..k])?;
            at = k;
        }
        c.update(&img[at..])?;
        c.finish()
    }

    proptest! {
        /// Streamed in any pieces, an image checks as it does whole; a
        /// damaged byte (outside the padding) or a cut is caught.
        #[test]
        fn stream_check_agrees(cuts in proptest::collection::vec(0usize..9000, 0..8), at in 0usize..40000, cut in 0usize..20000) {
            let m = sample_runs(&[(0x10000, 1), (0x30000, 2)]);
            let img = build(&m);
            let (_, back) = streamed(&img, &cuts).expect("whole image");
            prop_assert_eq!(back, m);
            let at = at % img.len();
            let mut bad = img.clone();
            bad[at] ^= 0x20;
            let h = Header::decode(&img, img.len() as u64).expect("h");
            let in_pad = at >= HEADER_LEN + h.meta_len as usize && at < h.data_offset as usize;
            prop_assert_eq!(streamed(&bad, &cuts).is_err(), !in_pad);
            let cut = cut % img.len();
            prop_assert!(streamed(&img[..cut], &cuts).is_err());
            let mut long = img.clone();
            long.push(0);
            prop_assert!(streamed(&long, &cuts).is_err());
        }

        /// Any damage to any byte is caught (with page checks on), never a
        /// panic; any truncation is caught by the size check.
        #[test]
        fn damage_is_caught(at in 0usize..40000, bit in 0u8..8, cut in 0usize..20000) {
            let img = build(&sample_runs(&[(0x10000, 1), (0x30000, 2)]));
            let at = at % img.len();
            let mut bad = img.clone();
            bad[at] ^= 1 << bit;
            // Padding between metadata and data is not covered by any sum.
            let h = Header::decode(&img, img.len() as u64).expect("h");
            let in_pad = at >= HEADER_LEN + h.meta_len as usize && at < h.data_offset as usize;
            prop_assert_eq!(decode(&bad, true).is_err(), !in_pad);
            let cut = cut % img.len();
            prop_assert!(decode(&img[..cut], true).is_err());
        }

        /// Arbitrary bytes never panic the decoder.
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode(&bytes, true);
            let _ = streamed(&bytes, &[7, 60]);
        }
    }
}
