//! Reusable shared buffers for large messages between processes of one
//! host, so that a stream of them costs two copies in memory already
//! mapped, instead of fresh pages for every message.
//!
//! What lives here: the sender's pool of buffers (`Outbox`), the receiver's
//! cache of mappings of its peers' buffers (`Inbox`), the release flag, and
//! the check every receiver of a message descriptor makes (`check_fd`).
//! What does not: sending descriptors (`vm`, the daemon), `Payload`.
//!
//! A pooled buffer is a memfd of `HEADER + capacity` bytes, sealed so that
//! its size never changes (mapping it is safe: no SIGBUS), but not against
//! writes. Its first word says whether it is in use. A buffer carries
//! messages to one receiver only: a receiver, which keeps it mapped, never
//! sees (or touches) what goes to anyone else. The sender fills a
//! free buffer, marks it in use and sends its descriptor; whoever takes the
//! bytes out (the receiver, or a daemon sending them to another host)
//! copies them, or writes them to its socket, and only then marks it free.
//! Until then the sender never touches it. A sender that breaks this rule
//! can only spoil its own message: a receiver copies the bytes out before
//! it looks at them. A buffer never marked free is never used again: the
//! pool makes another one, and once full it forgets the buffers filled
//! longest ago (their holders keep their memory until done with them).

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::payload::{sealed_memfd, Payload, FD_PAYLOAD};

/// Bytes before a pooled buffer's data: the flag, and room to keep the
/// data page-aligned.
pub const HEADER: usize = 4096;

/// The most a sender keeps in its pool (the most it may have in flight to
/// its daemon too).
pub const POOL_BYTES: usize = 64 << 20;

/// How much of its peers' buffers a receiver keeps mapped (the least
/// recently used go first): a whole pool of each of two busy senders.
/// Unmapping is costly (it interrupts every processor), mapping again too.
const INBOX_BYTES: usize = 2 * POOL_BYTES;

const FIXED_SIZE: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// What a message descriptor from another process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FdKind {
    /// A sealed memfd: the bytes from offset 0, unchangeable.
    Sealed,
    /// A pooled buffer: the bytes from `HEADER`, to be released.
    Pooled,
}

/// Check a message descriptor of `len` bytes from another process: a
/// regular file that can no longer grow or shrink, long enough, and either
/// sealed against writes or a pooled buffer. Gives its kind and its
/// identity (device, inode, size).
pub fn check_fd(fd: &OwnedFd, len: usize) -> io::Result<(FdKind, (u64, u64, u64))> {
    let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidData, why.to_string());
    // SAFETY: fstat and fcntl on a descriptor we hold.
    let (st, seals) = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd.as_raw_fd(), &mut st) != 0 {
            return Err(io::Error::last_os_error());
        }
        (st, libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS))
    };
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(bad("a message descriptor that is not a file"));
    }
    let fixed = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
    if seals < 0 || seals & fixed != fixed {
        return Err(bad("a message descriptor that is not sealed"));
    }
    let (kind, start) = if seals & libc::F_SEAL_WRITE != 0 {
        (FdKind::Sealed, 0)
    } else {
        (FdKind::Pooled, HEADER as u64)
    };
    let size = st.st_size as u64;
    if size < start + len as u64 {
        return Err(bad("a message descriptor shorter than its message"));
    }
    Ok((kind, (st.st_dev, st.st_ino, size)))
}

/// A shared read-write mapping of a whole pooled buffer.
pub(crate) struct Mapping {
    ptr: *mut u8,
    size: usize,
}

// SAFETY: the mapping is owned by this value; the data is only copied in
// or out through raw pointers, the flag is atomic.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Map all `size` bytes of `fd`, shared, read-write.
    pub(crate) fn new(fd: &OwnedFd, size: usize) -> io::Result<Mapping> {
        // SAFETY: a shared mapping of a file whose size is sealed at
        // `size` or more (checked or made by the caller); checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: ptr.cast(),
            size,
        })
    }

    /// The mapping's first byte.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    fn flag(&self) -> &AtomicU32 {
        // SAFETY: the mapping starts page-aligned and holds at least
        // HEADER bytes; the first word is only used atomically.
        unsafe { &*(self.ptr as *const AtomicU32) }
    }

    /// `len` bytes of data, from `HEADER`.
    pub(crate) fn data(&self, len: usize) -> *const u8 {
        debug_assert!(HEADER + len <= self.size);
        // SAFETY: within the mapping (the caller checked the size).
        unsafe { self.ptr.add(HEADER) }
    }

    /// The bytes are out: the sender may use the buffer again.
    pub(crate) fn release(&self) {
        self.flag().store(0, Ordering::Release);
    }

    /// Map a peer's pooled buffer of `size` bytes: no more than the largest
    /// message needs (a peer's buffer never holds more; one that claims a
    /// huge size maps no more than that).
    pub(crate) fn of_peer(fd: &OwnedFd, size: u64) -> io::Result<Mapping> {
        let most = (HEADER + crate::MAX_MESSAGE) as u64;
        Mapping::new(fd, size.min(most) as usize)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping this value owns.
        unsafe { libc::munmap(self.ptr.cast(), self.size) };
    }
}

struct Buffer {
    fd: OwnedFd,
    map: Mapping,
    capacity: usize,
    /// When it was last filled (the pool's count of fills).
    filled: u64,
    /// Filled since the last `trim_idle`.
    used: bool,
    /// The one receiver it carries messages to.
    to: crate::msg::Tid,
}

impl Buffer {
    fn new(capacity: usize, to: crate::msg::Tid) -> io::Result<Buffer> {
        let fd = crate::payload::sealable_memfd(c"mig-pooled")?;
        let size = HEADER + capacity;
        // SAFETY: plain system calls on the descriptor we own.
        unsafe {
            if libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) != 0
                || libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, FIXED_SIZE) != 0
            {
                return Err(io::Error::last_os_error());
            }
        }
        let map = Mapping::new(&fd, size)?;
        Ok(Buffer {
            fd,
            map,
            capacity,
            filled: 0,
            used: true,
            to,
        })
    }

    fn free(&self) -> bool {
        self.map.flag().load(Ordering::Acquire) == 0
    }

    fn fill(&mut self, parts: &[&[u8]], count: u64) -> io::Result<OwnedFd> {
        self.filled = count;
        self.used = true;
        self.map.flag().store(1, Ordering::Relaxed);
        let mut at = HEADER;
        for data in parts {
            // SAFETY: the buffer holds `capacity >=` the parts' total bytes
            // after the header, and nobody reads them until its descriptor
            // is sent.
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), self.map.ptr.add(at), data.len());
            }
            at += data.len();
        }
        self.fd.try_clone()
    }
}

/// The bytes of `parts` together.
fn total(parts: &[&[u8]]) -> usize {
    parts.iter().map(|p| p.len()).sum()
}

/// The capacity of a buffer for `len` bytes: the next power of two up to
/// 1 MiB, then the next whole MiB (a message a few bytes over 16 MiB takes a
/// buffer of 17 MiB, not 32: the pool holds three such, not one).
fn capacity_for(len: usize) -> usize {
    const MIB: usize = 1 << 20;
    if len <= MIB {
        len.next_power_of_two().max(FD_PAYLOAD)
    } else {
        len.div_ceil(MIB) * MIB
    }
}

/// A sender's pool of buffers.
#[derive(Default)]
pub struct Outbox {
    buffers: Vec<Buffer>,
    bytes: usize,
    fills: u64,
}

impl Outbox {
    /// A descriptor holding `parts` one after another, to send to `to`: a free buffer of the
    /// pool that carries messages to `to` filled again, else a new one
    /// while the pool has room (replacing free ones too small, or another
    /// receiver's), else a new one in place of the buffers filled longest
    /// ago. Those are forgotten, not reused: whoever holds one keeps its
    /// memory until done with it, and one held by a process that ended
    /// without releasing it stops counting against the pool.
    pub fn stage(&mut self, to: crate::msg::Tid, parts: &[&[u8]]) -> io::Result<OwnedFd> {
        if let Some(r) = self.try_stage(to, parts) {
            return r;
        }
        let capacity = capacity_for(total(parts));
        while self.bytes + capacity > POOL_BYTES {
            let Some(i) = (0..self.buffers.len()).min_by_key(|&i| self.buffers[i].filled) else {
                break;
            };
            self.bytes -= self.buffers.swap_remove(i).capacity;
        }
        match self.try_stage(to, parts) {
            Some(r) => r,
            None => sealed_memfd(parts),
        }
    }

    /// `stage`, but `None` when the pool has no room (for a route whose
    /// socket, not this pool, must hold a fast sender back).
    pub fn try_stage(
        &mut self,
        to: crate::msg::Tid,
        parts: &[&[u8]],
    ) -> Option<io::Result<OwnedFd>> {
        self.fills += 1;
        let len = total(parts);
        let fits = |b: &Buffer| b.to == to && b.capacity >= len && b.free();
        if let Some(b) = self
            .buffers
            .iter_mut()
            .filter(|b| fits(b))
            .min_by_key(|b| b.capacity)
        {
            return Some(b.fill(parts, self.fills));
        }
        let capacity = capacity_for(len);
        while self.bytes + capacity > POOL_BYTES {
            let Some(i) = self
                .buffers
                .iter()
                .enumerate()
                .filter(|(_, b)| b.free())
                .min_by_key(|(_, b)| b.capacity)
                .map(|(i, _)| i)
            else {
                break;
            };
            self.bytes -= self.buffers.swap_remove(i).capacity;
        }
        if self.bytes + capacity > POOL_BYTES {
            return None;
        }
        let made = Buffer::new(capacity, to).and_then(|mut b| {
            let fd = b.fill(parts, self.fills)?;
            self.bytes += capacity;
            self.buffers.push(b);
            Ok(fd)
        });
        Some(made)
    }

    /// Buffers in the pool (for tests).
    pub fn buffers(&self) -> usize {
        self.buffers.len()
    }

    /// Let go of the free buffers not filled since the last call (for a
    /// daemon, now and then: a stream that ended leaves nothing behind).
    pub fn trim_idle(&mut self) {
        self.buffers
            .retain_mut(|b| std::mem::take(&mut b.used) || !b.free());
        self.bytes = self.buffers.iter().map(|b| b.capacity).sum();
    }
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Outbox({} buffers, {} bytes)",
            self.buffers.len(),
            self.bytes
        )
    }
}

/// A receiver's mappings of its peers' buffers.
#[derive(Default)]
pub struct Inbox {
    /// Mappings by buffer, most recently used first, each with whether it
    /// was used since the last `trim_idle`.
    maps: VecDeque<((u64, u64), Arc<Mapping>, bool)>,
    bytes: usize,
}

impl Inbox {
    /// The `len` bytes a peer's message descriptor carries, read in place:
    /// a sealed memfd mapped, or a pooled buffer's mapping, released to its
    /// sender once the payload is dropped (libmig's senders never write a
    /// buffer before that). Until then the sender fills other buffers, or,
    /// with its pool full, sends bytes.
    pub fn read_in_place(&mut self, fd: OwnedFd, len: usize) -> io::Result<Payload> {
        Ok(match self.look_up(fd, len)? {
            Ok(sealed) => sealed,
            Err(map) => Payload::pooled(map, len),
        })
    }

    /// A sealed memfd mapped (`Ok`), or the mapping of a pooled buffer.
    fn look_up(&mut self, fd: OwnedFd, len: usize) -> io::Result<Result<Payload, Arc<Mapping>>> {
        let (kind, (dev, ino, size)) = check_fd(&fd, len)?;
        if kind == FdKind::Sealed {
            return Payload::map(fd, len).map(Ok);
        }
        let hit = self.maps.iter().position(|(k, _, _)| *k == (dev, ino));
        // A buffer comes marked in use (its sender marks it before passing
        // it). A mapping of it that reads free is not of it any more: this
        // process was moved from outside, and its mappings are copies made
        // anew, while the sender's buffer, reused, keeps its identity.
        let hit = hit.and_then(|i| self.maps.remove(i)).filter(|(_, m, _)| {
            let mine = m.flag().load(Ordering::Acquire) != 0;
            if !mine {
                self.bytes -= m.size;
            }
            mine
        });
        let (key, map) = match hit {
            Some((k, m, _)) => (k, m),
            None => {
                let map = Arc::new(Mapping::of_peer(&fd, size)?);
                self.bytes += map.size;
                while self.bytes > INBOX_BYTES {
                    match self.maps.pop_back() {
                        Some((_, old, _)) => self.bytes -= old.size,
                        None => break,
                    }
                }
                ((dev, ino), map)
            }
        };
        self.maps.push_front((key, map.clone(), true));
        Ok(Err(map))
    }

    /// Unmap the buffers not used since the last call (for a daemon, now
    /// and then: the buffers of a VP that ended are not kept alive here).
    pub fn trim_idle(&mut self) {
        self.maps.retain_mut(|(_, _, used)| std::mem::take(used));
        self.bytes = self.maps.iter().map(|(_, m, _)| m.size).sum();
    }
}

impl std::fmt::Debug for Inbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Inbox({} mappings)", self.maps.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
    }

    #[test]
    fn a_buffer_is_used_again_only_once_its_bytes_are_out() {
        let mut out = Outbox::default();
        let mut inbox = Inbox::default();
        let a = bytes(FD_PAYLOAD + 5, 1);
        let fd1 = out.stage(1, &[&a]).unwrap();
        // Not yet taken out: a second message gets a buffer of its own.
        let b = bytes(FD_PAYLOAD, 2);
        let fd2 = out.stage(1, &[&b]).unwrap();
        assert_eq!(out.buffers(), 2);
        assert_eq!(&*inbox.read_in_place(fd1, a.len()).unwrap(), &a[..]);
        // The first is free again: the third message reuses it.
        let c = bytes(FD_PAYLOAD + 9, 3);
        let fd3 = out.stage(1, &[&c]).unwrap();
        assert_eq!(out.buffers(), 2);
        assert_eq!(&*inbox.read_in_place(fd3, c.len()).unwrap(), &c[..]);
        assert_eq!(&*inbox.read_in_place(fd2, b.len()).unwrap(), &b[..]);
    }

    #[test]
    fn a_mapping_that_is_no_longer_of_the_senders_buffer_is_made_again() {
        let mut out = Outbox::default();
        let mut inbox = Inbox::default();
        let a = bytes(FD_PAYLOAD, 1);
        let fd = out.stage(1, &[&a]).unwrap();
        let (_, (dev, ino, _)) = check_fd(&fd, a.len()).unwrap();
        drop(inbox.read_in_place(fd, a.len()).unwrap());
        // As a move from outside leaves it: the receiver's mapping is a
        // copy, apart from the sender's buffer (here: a mapping of another
        // buffer under the first one's name, read free).
        let other = Buffer::new(FD_PAYLOAD, 2).unwrap();
        other.map.flag().store(0, Ordering::Release);
        let copy = Arc::new(Mapping::of_peer(&other.fd, (HEADER + FD_PAYLOAD) as u64).unwrap());
        inbox.maps[0].1 = copy;
        // The sender fills its buffer again: the receiver reads its bytes,
        // not the copy's.
        let b = bytes(FD_PAYLOAD, 9);
        let fd = out.stage(1, &[&b]).unwrap();
        assert_eq!(check_fd(&fd, b.len()).unwrap().1 .1, ino);
        assert_eq!(&*inbox.read_in_place(fd, b.len()).unwrap(), &b[..]);
        assert_eq!(inbox.maps.len(), 1);
        assert_eq!(inbox.maps[0].0, (dev, ino));
    }

    #[test]
    fn a_buffer_only_ever_carries_messages_to_one_receiver() {
        let mut out = Outbox::default();
        let mut inbox = Inbox::default();
        let a = bytes(FD_PAYLOAD, 8);
        let fd = out.stage(1, &[&a]).unwrap();
        let _ = inbox.read_in_place(fd, a.len()).unwrap();
        // Free again, but it went to 1: a message to 2 gets its own buffer.
        let fd = out.stage(2, &[&a]).unwrap();
        assert_eq!(out.buffers(), 2);
        let _ = inbox.read_in_place(fd, a.len()).unwrap();
        // And 1's is used again for 1.
        let _ = out.stage(1, &[&a]).unwrap();
        assert_eq!(out.buffers(), 2);
    }

    #[test]
    fn bytes_passed_on_release_their_buffer_when_dropped() {
        let mut out = Outbox::default();
        let mut daemon = Inbox::default();
        let a = bytes(FD_PAYLOAD, 5);
        let p = daemon
            .read_in_place(out.stage(1, &[&a]).unwrap(), a.len())
            .unwrap();
        assert_eq!(&*p, &a[..]);
        let b = bytes(FD_PAYLOAD, 6);
        let fd = out.stage(1, &[&b]).unwrap();
        assert_eq!(out.buffers(), 2, "the first is still being passed on");
        drop(p);
        let _ = daemon.read_in_place(fd, b.len()).unwrap();
        let _ = out.stage(1, &[&a]).unwrap();
        assert_eq!(out.buffers(), 2, "the first was free again");
    }

    #[test]
    fn a_peer_buffer_claiming_a_huge_size_maps_no_more_than_a_message_needs() {
        let mut inbox = Inbox::default();
        let fd = crate::payload::sealable_memfd(c"huge").unwrap();
        let huge: u64 = 1 << 40;
        // SAFETY: on our own descriptor.
        unsafe {
            assert_eq!(libc::ftruncate(fd.as_raw_fd(), huge as libc::off_t), 0);
            assert_eq!(
                libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, FIXED_SIZE),
                0
            );
        }
        let got = inbox.read_in_place(fd, FD_PAYLOAD).unwrap();
        assert_eq!(got.len(), FD_PAYLOAD);
        assert!(got.iter().all(|&b| b == 0));
        assert_eq!(inbox.bytes, HEADER + crate::MAX_MESSAGE);
    }

    #[test]
    fn idle_buffers_and_mappings_are_let_go() {
        let mut out = Outbox::default();
        let mut inbox = Inbox::default();
        let a = bytes(FD_PAYLOAD, 7);
        let fd = out.stage(1, &[&a]).unwrap();
        let _ = inbox.read_in_place(fd, a.len()).unwrap();
        // Used since the last trim: kept.
        out.trim_idle();
        inbox.trim_idle();
        assert_eq!((out.buffers(), inbox.maps.len()), (1, 1));
        // Idle through a whole period: let go.
        out.trim_idle();
        inbox.trim_idle();
        assert_eq!((out.buffers(), inbox.maps.len()), (0, 0));
        assert_eq!((out.bytes, inbox.bytes), (0, 0));
        // A buffer still held is never let go.
        let held = out.stage(1, &[&a]).unwrap();
        out.trim_idle();
        out.trim_idle();
        assert_eq!(out.buffers(), 1);
        drop(held);
    }

    #[test]
    fn a_full_pool_forgets_its_oldest_buffer_and_never_reuses_a_held_one() {
        let mut out = Outbox::default();
        let mut inbox = Inbox::default();
        let half = |seed| bytes(POOL_BYTES / 2, seed);
        let (a, b, c) = (half(1), half(2), half(3));
        let fa = out.stage(1, &[&a]).unwrap();
        let fb = out.stage(1, &[&b]).unwrap();
        assert_eq!(out.buffers(), 2);
        // Full, both held: a direct link sends bytes instead...
        assert!(out.try_stage(1, &[&c]).is_none());
        // ...the daemon route forgets the oldest (still held) for a new one.
        let fc = out.stage(1, &[&c]).unwrap();
        assert_eq!(out.buffers(), 2);
        assert_eq!(check_fd(&fc, c.len()).unwrap().0, FdKind::Pooled);
        // Nothing held was overwritten.
        assert_eq!(&*inbox.read_in_place(fa, a.len()).unwrap(), &a[..]);
        assert_eq!(&*inbox.read_in_place(fb, b.len()).unwrap(), &b[..]);
        assert_eq!(&*inbox.read_in_place(fc, c.len()).unwrap(), &c[..]);
    }

    #[test]
    fn descriptors_that_could_change_size_or_are_short_are_refused() {
        // SAFETY: test-only memfd, checked.
        let raw = unsafe { libc::memfd_create(c"t".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(raw >= 0);
        // SAFETY: just created.
        let fd = unsafe { std::os::fd::FromRawFd::from_raw_fd(raw) };
        // SAFETY: on our own descriptor.
        assert_eq!(unsafe { libc::ftruncate(raw, 1 << 20) }, 0);
        assert!(check_fd(&fd, 10).is_err(), "unsealed");
        let mut out = Outbox::default();
        let data = bytes(FD_PAYLOAD, 4);
        let fd = out.stage(1, &[&data]).unwrap();
        let room = out.buffers[0].capacity;
        assert!(check_fd(&fd, room).is_ok());
        assert!(check_fd(&fd, room + 1).is_err(), "shorter than claimed");
        let sealed = sealed_memfd(&[&data]).unwrap();
        assert!(check_fd(&sealed, data.len() + 1).is_err());
        assert_eq!(check_fd(&sealed, data.len()).unwrap().0, FdKind::Sealed);
    }
}
