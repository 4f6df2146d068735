//! Memfds saved and made anew: reading one's bytes, name, size and seals
//! through a descriptor, and making a new one from what was read. What
//! does not live here: which memfds a process holds or maps (`dump`,
//! `fds`), where they go at restore (`restore`).

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;

use crate::image::Memfd;

/// The largest memfd saved (its bytes travel in the image's metadata,
/// which holds at most `image::MAX_META`): a larger one is refused, named,
/// rather than read into memory.
pub const MAX_SIZE: u64 = 64 << 20;

/// Refuses a memfd of `size` bytes larger than [`MAX_SIZE`].
pub fn check_size(name: &str, size: u64) -> io::Result<()> {
    if size > MAX_SIZE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("memfd {name:?} of {size} bytes is larger than a move carries ({MAX_SIZE})"),
        ));
    }
    Ok(())
}

/// The memfd on `fd` (named `name`): its size, seals and bytes, trailing
/// zeros left out. Refused when `fd` is not a memfd (a regular file of
/// the kernel's memory whose `/proc` name is `/memfd:...`).
pub fn read(fd: BorrowedFd<'_>) -> io::Result<Memfd> {
    let shown = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
    let shown = shown.to_string_lossy();
    if !shown.starts_with("/memfd:") {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{shown} is not a memfd"),
        ));
    }
    let file = File::from(fd.try_clone_to_owned()?);
    let size = file.metadata()?.len();
    check_size(&shown, size)?;
    // SAFETY: fcntl on our descriptor.
    let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) }.max(0);
    let len = usize::try_from(size).map_err(io::Error::other)?;
    let mut data = vec![0u8; len];
    file.read_exact_at(&mut data, 0)?;
    let used = data.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    data.truncate(used);
    Ok(Memfd {
        name: crate::fds::memfd_name(&shown),
        size,
        seals,
        data,
    })
}

/// A new memfd as `m` says: its name, size and bytes, then its seals.
pub fn make(m: &Memfd) -> io::Result<OwnedFd> {
    let name = CString::new(m.name.replace('\0', "")).map_err(io::Error::other)?;
    // SAFETY: memfd_create reads the name (ours, NUL-terminated) and
    // returns a new descriptor, which we then own.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just made, ours alone.
    let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    file.set_len(m.size)?;
    file.write_all_at(&m.data, 0)?;
    let seals = m.seals & !libc::F_SEAL_SEAL;
    // SAFETY: fcntl on our descriptor. F_SEAL_SEAL goes last, alone.
    let ok = unsafe {
        (seals == 0 || libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) == 0)
            && (m.seals & libc::F_SEAL_SEAL == 0
                || libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SEAL) == 0)
    };
    if !ok {
        return Err(io::Error::last_os_error());
    }
    Ok(file.into())
}

/// Sets bit `bit` (0-31) of the aligned 32-bit word at byte `at` of the
/// memfd on `fd`, atomically against every process that maps it: through
/// a shared mapping of its page here.
pub fn set_bit(fd: BorrowedFd<'_>, at: u64, bit: u32) -> io::Result<()> {
    let size = File::from(fd.try_clone_to_owned()?).metadata()?.len();
    if bit > 31 || !at.is_multiple_of(4) || at + 4 > size {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("no word at byte {at} of a memfd of {size} bytes"),
        ));
    }
    let page = at & !4095;
    // SAFETY: a new shared mapping of one page of the file (inside it:
    // `at + 4 <= size`), unmapped below; only the aligned word at `at` is
    // touched, atomically.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            page as libc::off_t,
        );
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let word =
            &*(p.cast::<u8>().add((at - page) as usize) as *const std::sync::atomic::AtomicU32);
        word.fetch_or(1 << bit, std::sync::atomic::Ordering::SeqCst);
        libc::munmap(p, 4096);
    }
    Ok(())
}

/// Sets bit `bit` of the 32-bit word at byte `at` of the saved bytes `m`.
pub fn set_bit_in(m: &mut Memfd, at: u64, bit: u32) -> io::Result<()> {
    if bit > 31 || !at.is_multiple_of(4) || at + 4 > m.size {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "no word at byte {at} of memfd {:?} of {} bytes",
                m.name, m.size
            ),
        ));
    }
    let at = at as usize;
    if m.data.len() < at + 4 {
        m.data.resize(at + 4, 0);
    }
    let mut w = [0u8; 4];
    w.copy_from_slice(&m.data[at..at + 4]);
    let w = u32::from_le_bytes(w) | (1 << bit);
    m.data[at..at + 4].copy_from_slice(&w.to_le_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_memfd_read_and_made_again_has_its_bytes_size_and_seals() {
        let m = Memfd {
            name: "pooled".into(),
            size: 3 * 4096,
            seals: libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_WRITE,
            data: b"bytes".to_vec(),
        };
        let fd = make(&m).expect("made");
        let back = read(fd.as_fd()).expect("read");
        assert_eq!(back, m);
        // Not a memfd: refused.
        let f = File::open("/dev/null").expect("null");
        assert!(read(f.as_fd()).is_err());
        // Larger than a move carries: refused, not read into memory.
        let huge = make(&Memfd {
            name: "huge".into(),
            size: MAX_SIZE + 1,
            seals: 0,
            data: vec![],
        })
        .expect("sparse");
        let e = read(huge.as_fd()).expect_err("too large");
        assert!(e.to_string().contains("larger than a move carries"), "{e}");
    }

    #[test]
    fn a_bit_set_through_the_descriptor_or_in_the_bytes_reads_back() {
        let mut m = Memfd {
            name: "mig-ring".into(),
            size: 8192,
            seals: libc::F_SEAL_GROW | libc::F_SEAL_SHRINK,
            data: vec![],
        };
        let fd = make(&m).expect("made");
        set_bit(fd.as_fd(), 4100, 31).expect("set");
        let back = read(fd.as_fd()).expect("read");
        assert_eq!(back.data[4103], 0x80);
        set_bit_in(&mut m, 4100, 31).expect("set in bytes");
        assert_eq!(back, m);
        assert!(set_bit(fd.as_fd(), 8190, 0).is_err());
        assert!(set_bit_in(&mut m, 8192, 0).is_err());
    }
}
