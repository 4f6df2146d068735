//! Memfds saved and made anew: reading one's name, size and seals (and,
//! for a caller's own, its bytes) through a descriptor, finding how far its
//! bytes go, and making a new one from what was saved, its bytes taken from
//! memory or copied from the image file. What does not live here: which
//! memfds a process holds or maps (`dump`, `fds`), where they go at restore
//! (`restore`). A dump streams a memfd's bytes into the image's data in
//! pieces (`dump`), never holding it whole.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;

use crate::image::{Memfd, MemfdBytes};

/// The largest memfd saved: a larger one is refused, named. Its bytes
/// travel in the image's data, streamed, so the bound is only against a
/// size no move should carry (libmig's pooled buffer for a 64 MiB message
/// is 67,112,960 bytes).
pub const MAX_SIZE: u64 = 1 << 30;

/// The piece a memfd's bytes are read, written and copied in.
pub const PIECE: usize = 1 << 20;

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

/// The memfd on `fd`: its name, size and seals, not its bytes. Refused
/// when `fd` is not a memfd (a regular file of the kernel's memory whose
/// `/proc` name is `/memfd:...`) or is larger than [`MAX_SIZE`].
pub fn facts(fd: BorrowedFd<'_>) -> io::Result<(String, u64, i32)> {
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
    Ok((crate::fds::memfd_name(&shown), size, seals))
}

/// How far the bytes of the memfd on `fd` of `size` bytes go: one past its
/// last byte that is not zero (0 for a memfd of zeros). Holes past the
/// last data (`SEEK_DATA`/`SEEK_HOLE`) are skipped, then the rest read
/// backwards a piece at a time.
pub fn used_len(fd: BorrowedFd<'_>, size: u64) -> io::Result<u64> {
    let file = File::from(fd.try_clone_to_owned()?);
    // The end of the last data (pages the memfd has), or the size when it
    // cannot be told. Asked of a description of our own (opened anew), so
    // that the offset of the one the processes share stays as it was.
    let mut end = size;
    if let Ok(own) = File::open(format!("/proc/self/fd/{}", fd.as_raw_fd())) {
        end = 0;
        let mut at = 0u64;
        while at < size {
            // SAFETY: lseek on our own descriptor.
            let data = unsafe { libc::lseek(own.as_raw_fd(), at as libc::off_t, libc::SEEK_DATA) };
            if data < 0 {
                if io::Error::last_os_error().raw_os_error() != Some(libc::ENXIO) {
                    end = size;
                }
                break;
            }
            // SAFETY: as above.
            let hole = unsafe { libc::lseek(own.as_raw_fd(), data, libc::SEEK_HOLE) };
            if hole <= data {
                end = size;
                break;
            }
            end = hole as u64;
            at = hole as u64;
        }
    }
    let mut end = end.min(size);
    let mut buf = vec![0u8; PIECE.min(end as usize)];
    while end > 0 {
        let n = (end as usize).min(buf.len());
        let from = end - n as u64;
        file.read_exact_at(&mut buf[..n], from)?;
        if let Some(i) = buf[..n].iter().rposition(|&b| b != 0) {
            return Ok(from + i as u64 + 1);
        }
        end = from;
    }
    Ok(0)
}

/// The memfd on `fd`: its size, seals and bytes, trailing zeros left out,
/// held in memory ([`MemfdBytes::Held`]: a caller's own, which a dump
/// writes into the image's data). Refused as [`facts`] refuses.
pub fn read(fd: BorrowedFd<'_>) -> io::Result<Memfd> {
    let (name, size, seals) = facts(fd)?;
    let used = used_len(fd, size)?;
    let len = usize::try_from(used).map_err(io::Error::other)?;
    let mut data = vec![0u8; len];
    File::from(fd.try_clone_to_owned()?).read_exact_at(&mut data, 0)?;
    Ok(Memfd {
        name,
        size,
        seals,
        data: MemfdBytes::Held(data),
    })
}

/// A new memfd as `m` says: its name, size and bytes held in memory, then
/// its seals. One whose bytes are in an image's data is refused: it is
/// made with [`make_from`] (a restore does), or by
/// [`crate::ImageFile::open`] into memory for the caller's sockets.
pub fn make(m: &Memfd) -> io::Result<OwnedFd> {
    make_from(m, None)
}

/// A new memfd as `m` says: its name, size and bytes, then its seals;
/// bytes in an image's data ([`MemfdBytes::Image`]) are copied a piece at
/// a time from `image`: (the image file, where its data starts).
pub fn make_from(m: &Memfd, image: Option<(&File, u64)>) -> io::Result<OwnedFd> {
    check_size(&m.name, m.size)?;
    if m.data.len() > m.size {
        return Err(io::Error::other(format!(
            "memfd {:?}: {} bytes in {}",
            m.name,
            m.data.len(),
            m.size
        )));
    }
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
    match (&m.data, image) {
        (MemfdBytes::Held(b), _) => file.write_all_at(b, 0)?,
        (MemfdBytes::Image { len: 0, .. }, _) => {}
        (MemfdBytes::Image { offset, len }, Some((img, data_offset))) => {
            let from = data_offset + offset;
            let mut buf = vec![0u8; PIECE.min(*len as usize)];
            let mut done = 0u64;
            while done < *len {
                let n = (*len - done).min(buf.len() as u64) as usize;
                img.read_exact_at(&mut buf[..n], from + done)?;
                file.write_all_at(&buf[..n], done)?;
                done += n as u64;
            }
        }
        (MemfdBytes::Image { .. }, None) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "memfd {:?}: its bytes are in an image's data, and no image was given",
                    m.name
                ),
            ))
        }
    }
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

/// Sets, in `piece` (the bytes of a memfd from byte `at`), bit `bit` of
/// the 32-bit word at each of `marks` (byte offset in the memfd, bit) that
/// lies in it, wholly or in part.
pub fn mark_piece(piece: &mut [u8], at: u64, marks: &[(u64, u32)]) {
    for &(word, bit) in marks {
        let w = (1u32 << (bit & 31)).to_le_bytes();
        for (k, b) in w.iter().enumerate() {
            let i = word + k as u64;
            if i >= at && i < at + piece.len() as u64 {
                piece[(i - at) as usize] |= b;
            }
        }
    }
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

/// Checks that bit `bit` of the 32-bit word at byte `at` of a memfd of
/// `size` bytes named `name` can be set.
pub fn check_bit(name: &str, size: u64, at: u64, bit: u32) -> io::Result<()> {
    if bit > 31 || !at.is_multiple_of(4) || at.checked_add(4).is_none_or(|e| e > size) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("no word at byte {at} of memfd {name:?} of {size} bytes"),
        ));
    }
    Ok(())
}

/// Sets bit `bit` of the 32-bit word at byte `at` of the saved bytes `m`
/// (held in memory).
pub fn set_bit_in(m: &mut Memfd, at: u64, bit: u32) -> io::Result<()> {
    check_bit(&m.name, m.size, at, bit)?;
    let MemfdBytes::Held(data) = &mut m.data else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("memfd {:?}: its bytes are in an image's data", m.name),
        ));
    };
    let at = at as usize;
    if data.len() < at + 4 {
        data.resize(at + 4, 0);
    }
    mark_piece(data, 0, &[(at as u64, bit)]);
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
            data: MemfdBytes::Held(b"bytes".to_vec()),
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
            size: MAX_SIZE,
            seals: 0,
            data: MemfdBytes::Held(vec![]),
        })
        .expect("sparse");
        File::from(huge.try_clone().expect("dup"))
            .set_len(MAX_SIZE + 1)
            .expect("grow");
        let e = read(huge.as_fd()).expect_err("too large");
        assert!(e.to_string().contains("larger than a move carries"), "{e}");
        // libmig's pooled buffer for a 64 MiB message is carried.
        let pooled = make(&Memfd {
            name: "mig-pooled".into(),
            size: 67_112_960,
            seals: libc::F_SEAL_GROW | libc::F_SEAL_SHRINK,
            data: MemfdBytes::Held(vec![]),
        })
        .expect("sparse");
        let (name, size, _) = facts(pooled.as_fd()).expect("carried");
        assert_eq!((name.as_str(), size), ("mig-pooled", 67_112_960));
    }

    #[test]
    fn the_bytes_used_end_at_the_last_byte_not_zero_past_holes_and_zeros() {
        let m = Memfd {
            name: "sparse".into(),
            size: 8 << 20,
            seals: 0,
            data: MemfdBytes::Held(vec![]),
        };
        let fd = make(&m).expect("made");
        assert_eq!(used_len(fd.as_fd(), m.size).expect("len"), 0);
        let f = File::from(fd.try_clone().expect("dup"));
        f.write_all_at(&[7], 3 << 20).expect("write");
        // A page of zeros written after it: data, not a hole.
        f.write_all_at(&[0; 4096], 5 << 20).expect("zeros");
        assert_eq!(used_len(fd.as_fd(), m.size).expect("len"), (3 << 20) + 1);
        f.write_all_at(&[9], (8 << 20) - 1).expect("last");
        assert_eq!(used_len(fd.as_fd(), m.size).expect("len"), 8 << 20);
    }

    #[test]
    fn a_memfd_is_made_from_an_image_s_data_a_piece_at_a_time() {
        let bytes: Vec<u8> = (0..(3 * PIECE as u64 + 5))
            .map(|i| (i % 253) as u8)
            .collect();
        let mut img = tempfile::tempfile().expect("file");
        std::io::Write::write_all(&mut img, &[1; 4096]).expect("head");
        std::io::Write::write_all(&mut img, &bytes).expect("data");
        let m = Memfd {
            name: "from-image".into(),
            size: bytes.len() as u64 + 100,
            seals: libc::F_SEAL_GROW,
            data: MemfdBytes::Image {
                offset: 0,
                len: bytes.len() as u64,
            },
        };
        assert!(make(&m).is_err(), "no image given");
        let fd = make_from(&m, Some((&img, 4096))).expect("made");
        let back = read(fd.as_fd()).expect("read");
        assert_eq!(back.size, m.size);
        assert_eq!(back.seals, libc::F_SEAL_GROW);
        assert_eq!(back.data, MemfdBytes::Held(bytes));
    }

    #[test]
    fn a_bit_set_through_the_descriptor_or_in_the_bytes_reads_back() {
        let mut m = Memfd {
            name: "mig-ring".into(),
            size: 8192,
            seals: libc::F_SEAL_GROW | libc::F_SEAL_SHRINK,
            data: MemfdBytes::Held(vec![]),
        };
        let fd = make(&m).expect("made");
        set_bit(fd.as_fd(), 4100, 31).expect("set");
        let back = read(fd.as_fd()).expect("read");
        assert_eq!(back.data.held().map(|d| d[4103]), Some(0x80));
        set_bit_in(&mut m, 4100, 31).expect("set in bytes");
        assert_eq!(back, m);
        assert!(set_bit(fd.as_fd(), 8190, 0).is_err());
        assert!(set_bit_in(&mut m, 8192, 0).is_err());
    }
}
