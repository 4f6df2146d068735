//! A byte ring in shared memory for one direction of a direct link between
//! two VPs of one host: whole frames go in without a system call, and the
//! receiver, which looks for them while it spins, takes them out without
//! one. The link's socket stays for what a ring cannot carry (descriptors,
//! frames larger than the ring's room) and to wake a receiver that sleeps.
//!
//! What lives here: the ring's layout and its atomic protocol, made by the
//! sender (a sealed memfd it passes over the socket) and mapped by the
//! receiver after checking it. What does not: which frames go where, or
//! waiting (`link`, `vm`).
//!
//! Layout (one page of header, then the bytes):
//! - `tail`, bytes ever published (the sender's, with a CAS); its top bit,
//!   `CLOSED`, is set by the receiver when it stops reading (a VP about to
//!   move): a publish after that fails, and the sender sends that frame by
//!   the daemons instead, so nothing is lost between the receiver's last
//!   look and its end.
//! - `head`, bytes ever taken (the receiver's).
//! - `sleeping`: the receiver is about to wait on the socket; the sender
//!   that finds it set clears it and writes a wake-up frame there.
//! - `socket`: the sender wrote to the socket; the receiver that finds it
//!   set clears it and reads the socket (else it never asks the kernel).
//!
//! The receiver trusts nothing in the ring: a peer that writes nonsense
//! into the counters breaks its own link (an error), never this process.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Bytes a ring holds.
pub const RING_BYTES: usize = 1 << 19;
/// The name of a ring's memfd (`/memfd:mig-ring` in `/proc/PID/maps`).
pub const MEMFD_NAME: &str = "mig-ring";
/// Where `CLOSED` lies for whoever closes a ring from outside (a daemon
/// moving its receiver or its sender): the byte offset of a 32-bit word
/// in the mapping, and its bit (the tail's top bit, little-endian). Set
/// atomically, it makes every later push fail, as the receiver's own
/// close does; frames pushed before stay to be read.
pub const CLOSED_FLAG: (u64, u32) = ((TAIL + 4) as u64, 31);
/// Its header: one page.
const HEADER: usize = 4096;
const CLOSED: u64 = 1 << 63;

const TAIL: usize = 0;
const HEAD: usize = 64;
const SLEEPING: usize = 128;
const SOCKET: usize = 192;

/// What became of a frame offered to the ring.
#[derive(Debug, PartialEq, Eq)]
pub enum Push {
    /// It is in, whole.
    Done,
    /// Not enough room now (or larger than the ring): it goes by the socket.
    NoRoom,
    /// The receiver stopped reading: it goes by the daemons.
    Closed,
}

/// One direction's ring, mapped.
pub struct Ring {
    ptr: *mut u8,
    /// Owns the mapping `ptr` points into (unmapped when dropped).
    _map: crate::pool::Mapping,
    cap: usize,
    /// The sender's last look at `head`: room is counted from it, and
    /// `head` (a line the receiver writes) read again only when that is
    /// not enough.
    seen_head: std::cell::Cell<u64>,
}

// SAFETY: the mapping is owned by this value (`_map`); shared words are
// only used atomically, the bytes only copied in or out through raw
// pointers.
unsafe impl Send for Ring {}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ring({} bytes)", self.cap)
    }
}

impl Ring {
    /// A new ring of `cap` bytes (a power of two), for sending: it and the
    /// descriptor to pass to the receiver (its size sealed).
    pub fn create(cap: usize) -> io::Result<(Ring, OwnedFd)> {
        if !cap.is_power_of_two() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a ring's size is a power of two",
            ));
        }
        let fd = crate::payload::sealable_memfd(c"mig-ring")?;
        debug_assert_eq!(MEMFD_NAME, "mig-ring");
        let size = (HEADER + cap) as libc::off_t;
        // SAFETY: sizing and sealing a memfd we own.
        let ok = unsafe {
            libc::ftruncate(fd.as_raw_fd(), size) == 0
                && libc::fcntl(
                    fd.as_raw_fd(),
                    libc::F_ADD_SEALS,
                    libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
                ) == 0
        };
        if !ok {
            return Err(io::Error::last_os_error());
        }
        let ring = Ring::map(&fd, cap)?;
        // Until the receiver has mapped it, it is taken to sleep: the
        // first frame wakes it (it learns of the ring on the socket).
        ring.word32(SLEEPING).store(1, Ordering::Release);
        Ok((ring, fd))
    }

    /// A peer's ring of `cap` bytes, for receiving: the descriptor must be
    /// a regular file whose size is sealed at exactly what `cap` needs.
    pub fn open(fd: &OwnedFd, cap: u64) -> io::Result<Ring> {
        let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidData, why.to_string());
        let cap = usize::try_from(cap).map_err(|_| bad("a ring too large"))?;
        if !cap.is_power_of_two() || cap > RING_BYTES * 4 {
            return Err(bad("a ring of a size no VP makes"));
        }
        // SAFETY: fstat and fcntl on a descriptor we hold.
        let (st, seals) = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(fd.as_raw_fd(), &mut st) != 0 {
                return Err(io::Error::last_os_error());
            }
            (st, libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS))
        };
        let fixed = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG || seals < 0 || seals & fixed != fixed {
            return Err(bad("a ring that is not a sealed file"));
        }
        if st.st_size as u64 != (HEADER + cap) as u64 {
            return Err(bad("a ring whose size is not what it says"));
        }
        Ring::map(fd, cap)
    }

    fn map(fd: &OwnedFd, cap: usize) -> io::Result<Ring> {
        // (A file sealed at this size: the mapping covers all of it.)
        let map = crate::pool::Mapping::new(fd, HEADER + cap)?;
        Ok(Ring {
            ptr: map.ptr(),
            _map: map,
            cap,
            seen_head: std::cell::Cell::new(0),
        })
    }

    fn word64(&self, at: usize) -> &AtomicU64 {
        // SAFETY: inside the header page, aligned, used only atomically.
        unsafe { &*(self.ptr.add(at) as *const AtomicU64) }
    }

    fn word32(&self, at: usize) -> &AtomicU32 {
        // SAFETY: as for `word64`.
        unsafe { &*(self.ptr.add(at) as *const AtomicU32) }
    }

    /// Copy `bytes` in at ring position `pos` (wrapping).
    fn copy_in(&self, pos: u64, bytes: &[u8]) {
        let at = (pos as usize) & (self.cap - 1);
        let first = bytes.len().min(self.cap - at);
        // SAFETY: both ranges lie inside the data area (`at + first <=
        // cap`, the rest from its start); the receiver reads none of it
        // before the tail says it may.
        unsafe {
            let data = self.ptr.add(HEADER);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), data.add(at), first);
            std::ptr::copy_nonoverlapping(bytes.as_ptr().add(first), data, bytes.len() - first);
        }
    }

    /// Sender: put one whole frame (`parts`, in order) in.
    pub fn push(&self, parts: &[&[u8]]) -> Push {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let tail = self.word64(TAIL).load(Ordering::Acquire);
        if tail & CLOSED != 0 {
            return Push::Closed;
        }
        let fits = |head: u64| {
            let used = tail.wrapping_sub(head);
            used <= self.cap as u64 && len <= self.cap - used as usize
        };
        if !fits(self.seen_head.get()) {
            let head = self.word64(HEAD).load(Ordering::Acquire);
            self.seen_head.set(head);
            if !fits(head) {
                return Push::NoRoom;
            }
        }
        let mut pos = tail;
        for p in parts {
            self.copy_in(pos, p);
            pos += p.len() as u64;
        }
        // Only the receiver changes the tail besides us, and only to close.
        match self
            .word64(TAIL)
            .compare_exchange(tail, pos, Ordering::SeqCst, Ordering::Acquire)
        {
            Ok(_) => Push::Done,
            Err(_) => Push::Closed,
        }
    }

    /// Sender, after a push: is the receiver asleep (it is then taken to be
    /// awake: one wake-up per sleep)?
    pub fn take_sleeping(&self) -> bool {
        // (SeqCst against `sleep`: the publish above and this look, the
        // receiver's word and its look at the tail, are in one order, so
        // one of the two sees the other.)
        self.word32(SLEEPING).load(Ordering::SeqCst) != 0
            && self.word32(SLEEPING).swap(0, Ordering::AcqRel) != 0
    }

    /// Sender: it wrote to the socket.
    pub fn mark_socket(&self) {
        self.word32(SOCKET).store(1, Ordering::Release);
    }

    /// Receiver: has the sender written to the socket since the last look?
    pub fn take_socket(&self) -> bool {
        self.word32(SOCKET).load(Ordering::Relaxed) != 0
            && self.word32(SOCKET).swap(0, Ordering::AcqRel) != 0
    }

    /// Receiver: about to wait on the socket. Whether anything is there
    /// after all (then it does not wait).
    pub fn sleep(&self) -> bool {
        self.word32(SLEEPING).store(1, Ordering::SeqCst);
        let tail = self.word64(TAIL).load(Ordering::SeqCst) & !CLOSED;
        tail != self.word64(HEAD).load(Ordering::Relaxed)
            || self.word32(SOCKET).load(Ordering::SeqCst) != 0
    }

    /// Receiver: awake again (a sender need not wake it).
    pub fn awake(&self) {
        self.word32(SLEEPING).store(0, Ordering::Relaxed);
    }

    /// Receiver: take what is there (at most `room.len()` bytes) into
    /// `room`. How many; an error if the counters make no sense.
    pub fn pop(&self, room: &mut [u8]) -> io::Result<usize> {
        let tail = self.word64(TAIL).load(Ordering::Acquire) & !CLOSED;
        let head = self.word64(HEAD).load(Ordering::Relaxed);
        let avail = tail.wrapping_sub(head);
        if avail > self.cap as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a ring whose counters make no sense",
            ));
        }
        let n = (avail as usize).min(room.len());
        let at = (head as usize) & (self.cap - 1);
        let first = n.min(self.cap - at);
        // SAFETY: both ranges lie inside the data area; the sender does not
        // write them again before `head` passes them.
        unsafe {
            let data = self.ptr.add(HEADER);
            std::ptr::copy_nonoverlapping(data.add(at), room.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(data, room.as_mut_ptr().add(first), n - first);
        }
        self.word64(HEAD)
            .store(head.wrapping_add(n as u64), Ordering::Release);
        Ok(n)
    }

    /// Receiver: stop reading. Frames published before this are still
    /// there to take; none after it are.
    pub fn close(&self) {
        self.word64(TAIL).fetch_or(CLOSED, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(cap: usize) -> (Ring, Ring) {
        let (tx, fd) = Ring::create(cap).expect("ring");
        let rx = Ring::open(&fd, cap as u64).expect("open");
        (tx, rx)
    }

    fn take(rx: &Ring) -> Vec<u8> {
        let mut out = Vec::new();
        let mut buf = [0u8; 7];
        loop {
            let n = rx.pop(&mut buf).expect("pop");
            if n == 0 {
                return out;
            }
            out.extend_from_slice(&buf[..n]);
        }
    }

    #[test]
    fn frames_come_out_whole_and_in_order_across_the_wrap() {
        let (tx, rx) = pair(4096);
        let mut sent = Vec::new();
        for i in 0..5000u32 {
            let a = i.to_le_bytes();
            let b = vec![i as u8; (i % 300) as usize];
            match tx.push(&[&a, &b]) {
                Push::Done => {
                    sent.extend_from_slice(&a);
                    sent.extend_from_slice(&b);
                }
                Push::NoRoom => {
                    assert_eq!(take(&rx), sent);
                    sent.clear();
                    assert_eq!(tx.push(&[&a, &b]), Push::Done, "room once taken");
                    sent.extend_from_slice(&a);
                    sent.extend_from_slice(&b);
                }
                Push::Closed => panic!("not closed"),
            }
        }
        assert_eq!(take(&rx), sent);
        assert!(!rx.sleep(), "all taken");
        assert_eq!(
            tx.push(&[&[0u8; 4097]]),
            Push::NoRoom,
            "larger than the ring"
        );
    }

    #[test]
    fn after_close_nothing_more_goes_in_and_what_was_in_comes_out() {
        let (tx, rx) = pair(4096);
        assert_eq!(tx.push(&[b"before"]), Push::Done);
        rx.close();
        assert_eq!(tx.push(&[b"after"]), Push::Closed);
        assert_eq!(take(&rx), b"before");
    }

    #[test]
    fn a_sleeping_receiver_is_woken_once_and_a_socket_write_is_seen_once() {
        let (tx, rx) = pair(4096);
        // A new ring's receiver is taken to sleep until it has looked.
        assert!(tx.take_sleeping());
        assert!(!tx.take_sleeping());
        assert!(!rx.sleep(), "nothing there: it may sleep");
        assert_eq!(tx.push(&[b"x"]), Push::Done);
        assert!(tx.take_sleeping());
        assert!(rx.sleep(), "something there: it does not sleep");
        tx.mark_socket();
        assert!(rx.take_socket());
        assert!(!rx.take_socket());
    }

    #[test]
    fn nonsense_in_the_counters_is_an_error_and_a_bad_descriptor_is_refused() {
        let (tx, rx) = pair(4096);
        tx.word64(TAIL).store(1 << 40, Ordering::Release);
        assert!(rx.pop(&mut [0u8; 16]).is_err());
        let (_, fd) = Ring::create(4096).expect("ring");
        assert!(Ring::open(&fd, 8192).is_err(), "size not as said");
        assert!(Ring::open(&fd, 3000).is_err(), "not a power of two");
        let plain = crate::payload::sealable_memfd(c"t").expect("memfd");
        // SAFETY: sizing a memfd we own.
        assert_eq!(unsafe { libc::ftruncate(plain.as_raw_fd(), 8192) }, 0);
        assert!(Ring::open(&plain, 4096).is_err(), "not sealed");
    }
}
