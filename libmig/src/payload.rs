//! Message payloads, and how large ones travel between processes of one
//! host without being copied by anyone in between.
//!
//! A payload of at least `FD_PAYLOAD` bytes travels as a memfd descriptor
//! (SCM_RIGHTS), through the daemon, which never reads it, or over a direct
//! link: one of the sender's reusable shared buffers (`pool`), or a sealed
//! memfd of its own (it can no longer grow, shrink or change; the daemon
//! route's fallback when no pooled buffer can be made), which the receiver
//! maps read-only. What lives here:
//! `Payload` (bytes on the heap, a mapping, or a lent shared buffer),
//! sealed memfds, receiving descriptors. What does not: the shared buffers
//! (`pool`), who sends what (`vm`, the daemon).

use std::fmt;
use std::fs::File;
use std::io::{self, Write};
use std::ops::Deref;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Payloads from this size on travel as a memfd between processes of one
/// host.
pub const FD_PAYLOAD: usize = 128 * 1024;

const SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;

/// The bytes of a received message: on the heap, mapped read-only from the
/// sender's sealed memfd (unmapped when dropped), or read in place from a
/// shared buffer (released to its sender when dropped).
pub struct Payload(Inner);

enum Inner {
    Heap(Vec<u8>),
    Mapped {
        ptr: *mut libc::c_void,
        len: usize,
    },
    /// A peer's pooled buffer, read in place and released when dropped
    /// (see `pool`); its sender does not write it until then.
    Pooled {
        map: std::sync::Arc<crate::pool::Mapping>,
        len: usize,
    },
    /// A range of another payload, shared (see `split`).
    Slice {
        of: std::sync::Arc<Payload>,
        off: usize,
        len: usize,
    },
}

// SAFETY: a mapping is private to this value and read-only; a sealed one
// cannot change, a pooled one does not until released (its sender's rule),
// so sharing or moving it across threads is like a Vec.
unsafe impl Send for Payload {}
// SAFETY: as above; only shared reads are possible.
unsafe impl Sync for Payload {}

impl Payload {
    /// Is it a peer's pooled buffer, which goes back to its sender only
    /// when this is dropped?
    pub fn is_lent(&self) -> bool {
        match &self.0 {
            Inner::Pooled { .. } => true,
            Inner::Slice { of, .. } => of.is_lent(),
            _ => false,
        }
    }

    /// Copy the bytes into a `Vec` (free when they already are one).
    pub fn into_vec(mut self) -> Vec<u8> {
        if let Inner::Heap(v) = &mut self.0 {
            return std::mem::take(v);
        }
        self.to_vec()
    }

    /// Copy `range` of these bytes through the kernel rather than by
    /// reading them: when they map a file another process has truncated
    /// meanwhile, this is an error instead of a SIGBUS that kills this
    /// process (a daemon reading a VP's image file).
    pub fn copy_checked(&self, range: std::ops::Range<usize>) -> io::Result<Vec<u8>> {
        let bytes: &[u8] = self;
        let src = bytes
            .get(range.clone())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "a range past the end"))?;
        if let Inner::Heap(_) = &self.0 {
            return Ok(src.to_vec());
        }
        let mut out = vec![0u8; src.len()];
        let mut done = 0;
        while done < src.len() {
            let local = libc::iovec {
                iov_base: out[done..].as_mut_ptr().cast(),
                iov_len: src.len() - done,
            };
            let remote = libc::iovec {
                iov_base: src[done..].as_ptr() as *mut libc::c_void,
                iov_len: src.len() - done,
            };
            // SAFETY: both ranges lie within live memory of this process:
            // `out` is ours to write, `src` is mapped (the kernel reports
            // pages it cannot read as an error, it does not fault us).
            let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
            match n {
                n if n > 0 => done += n as usize,
                0 => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the mapped file was cut short",
                    ))
                }
                _ => {
                    let e = io::Error::last_os_error();
                    return match e.raw_os_error() {
                        // Not allowed here (a sandbox): copy directly.
                        Some(libc::ENOSYS) | Some(libc::EPERM) => {
                            out[done..].copy_from_slice(&src[done..]);
                            Ok(out)
                        }
                        Some(libc::EFAULT) => Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the mapped file was cut short",
                        )),
                        _ => Err(e),
                    };
                }
            }
        }
        Ok(out)
    }

    /// The `Vec` itself when the bytes are on the heap (to append to).
    pub fn heap_mut(&mut self) -> Option<&mut Vec<u8>> {
        match &mut self.0 {
            Inner::Heap(v) => Some(v),
            Inner::Mapped { .. } | Inner::Pooled { .. } | Inner::Slice { .. } => None,
        }
    }

    /// Map the first `len` bytes of a file read-only, without copying them:
    /// for a file this process wrote or owns, which nobody changes while
    /// it is mapped (checkpoint images). `populate` maps every page at once
    /// (for bytes about to be read more than once); otherwise pages come in
    /// as they are first read (a daemon sending an image front to back
    /// starts at once).
    pub fn map_file(file: &File, len: usize, populate: bool) -> io::Result<Payload> {
        let populate = if populate { libc::MAP_POPULATE } else { 0 };
        map_read_only(file.as_raw_fd(), 0, len, libc::MAP_PRIVATE | populate)
    }

    /// `map_file` of `len` bytes from `offset` (a multiple of the page
    /// size), pages coming in as they are read.
    pub fn map_file_at(file: &File, offset: u64, len: usize) -> io::Result<Payload> {
        let offset = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))?;
        map_read_only(file.as_raw_fd(), offset, len, libc::MAP_PRIVATE)
    }

    /// Cut into consecutive pieces of at most `part` bytes that share these
    /// bytes instead of copying them.
    pub fn split(self, part: usize) -> Vec<Payload> {
        let len = self.len();
        let part = part.max(1);
        let ranges: Vec<_> = (0..len)
            .step_by(part)
            .map(|off| off..off + part.min(len - off))
            .collect();
        self.pieces(&ranges)
    }

    /// The given ranges of these bytes (clipped to them), sharing them
    /// instead of copying.
    pub fn pieces(self, ranges: &[std::ops::Range<usize>]) -> Vec<Payload> {
        let len = self.len();
        let whole = std::sync::Arc::new(self);
        ranges
            .iter()
            .map(|r| {
                let off = r.start.min(len);
                Payload(Inner::Slice {
                    of: whole.clone(),
                    off,
                    len: r.end.min(len).saturating_sub(off),
                })
            })
            .collect()
    }

    /// Map `len` bytes of a sealed memfd received from another process,
    /// after checking that it is one (a regular file of at least `len`
    /// bytes that can no longer shrink or change).
    pub fn map(fd: OwnedFd, len: usize) -> io::Result<Payload> {
        if crate::pool::check_fd(&fd, len)?.0 != crate::pool::FdKind::Sealed {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a message descriptor that is not sealed against writes",
            ));
        }
        map_read_only(
            fd.as_raw_fd(),
            0,
            len,
            libc::MAP_SHARED | libc::MAP_POPULATE,
        )
    }

    /// `len` bytes of a peer's pooled buffer, released when dropped.
    pub(crate) fn pooled(map: std::sync::Arc<crate::pool::Mapping>, len: usize) -> Payload {
        Payload(Inner::Pooled { map, len })
    }
}

/// Map `len` bytes of `fd` read-only (and populated) as a payload.
fn map_read_only(
    fd: std::os::fd::RawFd,
    offset: libc::off_t,
    len: usize,
    flags: libc::c_int,
) -> io::Result<Payload> {
    if len == 0 {
        return Ok(Payload(Inner::Heap(Vec::new())));
    }
    // SAFETY: mapping a file the caller holds, read-only, at a size it has
    // (the caller checked); the result is checked before use.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            flags,
            fd,
            offset,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(Payload(Inner::Mapped { ptr, len }))
}

impl From<Vec<u8>> for Payload {
    fn from(v: Vec<u8>) -> Payload {
        Payload(Inner::Heap(v))
    }
}

impl Deref for Payload {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Inner::Heap(v) => v,
            // SAFETY: `ptr` maps `len` readable bytes until `drop`.
            Inner::Mapped { ptr, len } => unsafe { std::slice::from_raw_parts(ptr.cast(), *len) },
            // SAFETY: the mapping holds HEADER + len bytes (checked when
            // made); a sender that writes them meanwhile breaks the pool's
            // rule and spoils only its own message, which is only written
            // to a socket.
            Inner::Pooled { map, len } => unsafe {
                std::slice::from_raw_parts(map.data(*len), *len)
            },
            Inner::Slice { of, off, len } => &of[*off..*off + *len],
        }
    }
}

impl Drop for Payload {
    fn drop(&mut self) {
        match &self.0 {
            Inner::Mapped { ptr, len } => {
                // SAFETY: unmapping exactly the mapping this value owns.
                unsafe { libc::munmap(*ptr, *len) };
            }
            // Written out: the sender may use its buffer again.
            Inner::Pooled { map, .. } => map.release(),
            _ => {}
        }
    }
}

impl Clone for Payload {
    fn clone(&self) -> Payload {
        Payload(Inner::Heap(self.to_vec()))
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Payload) -> bool {
        **self == **other
    }
}

impl Eq for Payload {}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Payload({} bytes)", self.len())
    }
}

/// Read once from the Unix socket `sock` into `buf` with `recvmsg`, keeping
/// any descriptors that came along in `fds` (close-on-exec). Waits for data
/// only if `wait` (and the socket is blocking).
pub fn recv_with_fds(
    sock: std::os::fd::RawFd,
    buf: &mut [u8],
    fds: &mut std::collections::VecDeque<OwnedFd>,
    wait: bool,
) -> io::Result<usize> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut iov = [io::IoSliceMut::new(buf)];
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 4]);
    let mut flags = MsgFlags::MSG_CMSG_CLOEXEC;
    if !wait {
        flags |= MsgFlags::MSG_DONTWAIT;
    }
    let msg = recvmsg::<()>(sock, &mut iov, Some(&mut space), flags).map_err(io::Error::from)?;
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            if let ControlMessageOwned::ScmRights(v) = c {
                for raw in v {
                    // SAFETY: the kernel just installed `raw` in this process
                    // for us; nothing else owns it.
                    fds.push_back(unsafe { OwnedFd::from_raw_fd(raw) });
                }
            }
        }
    }
    Ok(msg.bytes)
}

/// A new empty memfd that may be sealed (close-on-exec).
pub(crate) fn sealable_memfd(name: &std::ffi::CStr) -> io::Result<OwnedFd> {
    // SAFETY: a NUL-terminated name and valid flags; the result is checked.
    let raw =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: memfd_create just returned this descriptor to us.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Write `parts`, one after another, into a new sealed memfd.
pub fn sealed_memfd(parts: &[&[u8]]) -> io::Result<OwnedFd> {
    let mut file = File::from(sealable_memfd(c"mig-message")?);
    for data in parts {
        file.write_all(data)?;
    }
    // SAFETY: fcntl on a descriptor we own.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, SEALS) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(OwnedFd::from(file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mapped_file_splits_into_shared_pieces_that_join_to_it() {
        let data: Vec<u8> = (0..100_003u32).map(|i| (i % 251) as u8).collect();
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&data).unwrap();
        let p = Payload::map_file(&f, data.len(), false).unwrap();
        assert_eq!(&*p, &data[..]);
        let parts = p.split(4096 * 3);
        assert_eq!(parts.len(), data.len().div_ceil(4096 * 3));
        assert!(parts.iter().all(|q| q.len() <= 4096 * 3));
        let joined: Vec<u8> = parts.iter().flat_map(|q| q.iter().copied()).collect();
        assert_eq!(joined, data);
        assert_eq!(parts[1].clone().into_vec(), &data[4096 * 3..4096 * 6]);
        assert!(Payload::map_file(&f, 0, true).unwrap().split(10).is_empty());
    }

    #[test]
    fn a_mapped_file_cut_short_is_an_error_to_copy_not_a_crash() {
        let data: Vec<u8> = (0..5 * 4096u32).map(|i| (i % 241) as u8).collect();
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&data).unwrap();
        let p = Payload::map_file(&f, data.len(), false).unwrap();
        assert_eq!(p.copy_checked(4096..8192).unwrap(), &data[4096..8192]);
        // Another process (here: this one) truncates the file.
        f.set_len(4096).unwrap();
        assert_eq!(p.copy_checked(0..100).unwrap(), &data[..100]);
        assert!(p.copy_checked(0..data.len()).is_err());
        assert!(p.copy_checked(8192..8200).is_err());
        assert!(p.copy_checked(0..data.len() + 1).is_err(), "past the end");
    }

    #[test]
    fn a_sealed_memfd_maps_back_to_the_same_bytes_and_cannot_change() {
        let data: Vec<u8> = (0..FD_PAYLOAD * 3).map(|i| (i % 253) as u8).collect();
        let fd = sealed_memfd(&[&data]).unwrap();
        let copy = fd.try_clone().unwrap();
        let p = Payload::map(fd, data.len()).unwrap();
        assert_eq!(&*p, &data[..]);
        assert_eq!(p.clone().into_vec(), data);
        // The sender can no longer change or shrink it.
        let mut f = File::from(copy.try_clone().unwrap());
        assert!(f.write_all(b"x").is_err());
        assert!(f.set_len(1).is_err());
        // A longer length than it has, or an unsealed file, is refused.
        assert!(Payload::map(copy, data.len() + 1).is_err());
        let plain = OwnedFd::from(tempfile::tempfile().unwrap());
        assert!(Payload::map(plain, 0).is_err());
    }
}
