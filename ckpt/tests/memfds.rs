//! Memory shared through memfds, and a socket to a peer that stays
//! behind, as a libmig program holds them once it has talked to a VP
//! beside it: every memfd is carried with its bytes and made anew (its
//! descriptors and mappings share the new one, its seals kept), a socket
//! the caller names is cut (what it held is read, then the end of the
//! stream), and a bit the caller names is set, atomically, in the memory
//! the process still shares with whoever stays (a ring's "closed" flag).

mod common;

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use common::*;
use mig_ckpt::image::{Header, MemfdBytes, OpenFile, PAGE};
use mig_ckpt::{dump, DumpError, DumpOptions, ImageError, ImageFile};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

const SIZE: usize = 4 * 4096;

/// Kills its process when the test ends, failed or not.
struct Reap(i32);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(Pid::from_raw(self.0), nix::sys::signal::Signal::SIGKILL);
    }
}

/// `memfds` with `theirs` on fd 3, stopped by itself: the child, its
/// stdout, and the memfd descriptor and mapping address it printed.
fn start(
    theirs: &UnixStream,
) -> (
    std::process::Child,
    BufReader<std::process::ChildStdout>,
    i32,
    u64,
) {
    let raw = theirs.as_raw_fd();
    let mut cmd = Command::new(program("memfds"));
    cmd.stdin(Stdio::null()).stdout(Stdio::piped());
    // SAFETY: dup2 and close_range in the child between fork and exec, of
    // a descriptor the parent keeps open until the spawn returns.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(raw, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 0u32);
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("memfds");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    out.read_line(&mut first).expect("ready");
    let w: Vec<&str> = first.split_whitespace().collect();
    assert_eq!(w.first(), Some(&"ready"), "{first}");
    let fd = w[1].parse().expect("fd");
    let addr = u64::from_str_radix(w[2].trim_start_matches("0x"), 16).expect("addr");
    match waitpid(
        Pid::from_raw(child.id() as i32),
        Some(WaitPidFlag::WUNTRACED),
    )
    .expect("wait")
    {
        WaitStatus::Stopped(..) => {}
        other => panic!("not stopped: {other:?}"),
    }
    (child, out, fd, addr)
}

#[test]
fn memfds_and_a_cut_socket_are_carried_and_the_flag_reaches_whoever_stays() {
    let (mut ours, theirs) = UnixStream::pair().expect("pair");
    let (mut child, _out, fd, addr) = start(&theirs);
    let pid = child.id() as i32;
    let _reap = Reap(pid);
    let sock = std::fs::metadata(format!("/proc/{pid}/fd/3"))
        .expect("fd 3")
        .ino();
    drop(theirs);
    // Written while it is stopped: it has not read them.
    ours.write_all(b"hello from the peer").expect("write");
    // The memfd as a peer that shares it sees it.
    let shared = File::options()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/fd/{fd}"))
        .expect("the memfd");
    // SAFETY: a shared mapping of a file of SIZE bytes (sealed at that
    // size), unmapped below; read only through volatile reads.
    let view = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            SIZE,
            libc::PROT_READ,
            libc::MAP_SHARED,
            shared.as_raw_fd(),
            0,
        )
    };
    assert_ne!(view, libc::MAP_FAILED);
    // SAFETY: inside the mapping, aligned.
    let top = || unsafe { std::ptr::read_volatile((view as *const u32).add(1)) } >> 31;
    assert_eq!(top(), 0);

    let path = scratch().join("memfds.img");
    let mut f = File::create(&path).expect("create");
    let opts = DumpOptions {
        external_fds: [0, 1, 2].into(),
        cut: [sock].into(),
        set_bits: [(pid, vec![(addr + 4, 31)])].into(),
        ..Default::default()
    };
    dump(pid, &opts, &mut f).expect("dump");
    drop(f);
    assert_eq!(top(), 1, "the bit reached the memory the peer shares");
    let img = ImageFile::open(File::open(&path).expect("open"), true).expect("image");
    let names: Vec<&str> = img.image().memfds.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["kept", "only-mapped"]);
    assert!(img
        .image()
        .files
        .iter()
        .any(|f| matches!(f, OpenFile::Cut { unread, .. } if unread == b"hello from the peer")));
    let _ = child.kill();
    let _ = child.wait();

    let restored = restore_from(&path);
    let (code, said) = restored.finish();
    let said = String::from_utf8_lossy(&said);
    assert_eq!(code, 0, "{said}");
    assert_eq!(
        said,
        "read \"hello from the peer\" then the end\n\
         bytes wrong 0\n\
         top bit set\n\
         mapping sees: through the fd\n\
         size sealed yes\n\
         write to the peer: EPIPE\n"
    );
    // The peer's memfd is the old one: the restored process wrote into its
    // own.
    let mut at100 = [0u8; 14];
    // SAFETY: inside the mapping.
    unsafe { std::ptr::copy_nonoverlapping((view as *const u8).add(100), at100.as_mut_ptr(), 14) };
    assert_ne!(&at100, b"through the fd");
    // SAFETY: the mapping made above.
    unsafe { libc::munmap(view, SIZE) };
}

#[test]
fn a_socket_to_a_peer_not_named_is_refused_and_the_process_left_as_it_was() {
    let (ours, theirs) = UnixStream::pair().expect("pair");
    let (mut child, mut out, _, _) = start(&theirs);
    let pid = child.id() as i32;
    let _reap = Reap(pid);
    drop(theirs);
    let mut f = File::create(scratch().join("refused.img")).expect("create");
    let e = dump(pid, &stdio_options(), &mut f).expect_err("refused");
    assert!(matches!(e, DumpError::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("fd 3 is"), "{e}");
    // Continued, it goes on (its peer ends the stream).
    drop(ours);
    nix::sys::signal::kill(Pid::from_raw(pid), nix::sys::signal::Signal::SIGCONT).expect("CONT");
    let mut line = String::new();
    out.read_line(&mut line).expect("line");
    assert_eq!(line, "read \"\" then the end\n");
    let _ = child.wait();
}

#[test]
fn a_bit_for_the_image_only_leaves_the_running_process_and_its_peers_alone() {
    let (ours, theirs) = UnixStream::pair().expect("pair");
    let (mut child, mut out, fd, addr) = start(&theirs);
    let pid = child.id() as i32;
    let _reap = Reap(pid);
    let sock = std::fs::metadata(format!("/proc/{pid}/fd/3"))
        .expect("fd 3")
        .ino();
    drop(theirs);
    let path = scratch().join("snap.img");
    let mut f = File::create(&path).expect("create");
    let opts = DumpOptions {
        external_fds: [0, 1, 2].into(),
        cut: [sock].into(),
        set_bits: [(pid, vec![(addr + 4, 31)])].into(),
        checkpoint_only: true,
        ..Default::default()
    };
    dump(pid, &opts, &mut f).expect("dump");
    drop(f);
    // In the image: set.
    let img = ImageFile::open(File::open(&path).expect("open"), true).expect("image");
    let kept = &img.image().memfds[0];
    assert_eq!(kept.name, "kept");
    let bytes = img.memfd_bytes(kept).expect("its bytes");
    assert_eq!(bytes[7] >> 7, 1, "the top bit of the word at 4");
    // In the process: clear, and it runs on with its peer.
    drop(ours);
    nix::sys::signal::kill(Pid::from_raw(pid), nix::sys::signal::Signal::SIGCONT).expect("CONT");
    let mut said = String::new();
    std::io::Read::read_to_string(&mut out, &mut said).expect("read");
    assert!(said.contains("top bit clear"), "{said}");
    let _ = (child.wait(), fd);
}

#[test]
fn a_memfd_on_its_way_through_a_cut_socket_is_marked_for_whoever_sent_it() {
    let (ours, theirs) = UnixStream::pair().expect("pair");
    let (mut child, _out, _, _) = start(&theirs);
    let pid = child.id() as i32;
    let _reap = Reap(pid);
    let sock = std::fs::metadata(format!("/proc/{pid}/fd/3"))
        .expect("fd 3")
        .ino();
    drop(theirs);
    // A ring offered and not yet taken: its memfd waits in the socket.
    let ring = mig_ckpt::memfd::make(&mig_ckpt::image::Memfd {
        name: "mig-ring".into(),
        size: 8192,
        seals: libc::F_SEAL_GROW | libc::F_SEAL_SHRINK,
        data: mig_ckpt::image::MemfdBytes::Held(vec![]),
    })
    .expect("memfd");
    let fds = [ring.as_raw_fd()];
    let cmsg = [nix::sys::socket::ControlMessage::ScmRights(&fds)];
    let iov = [std::io::IoSlice::new(b"offer")];
    nix::sys::socket::sendmsg::<()>(
        ours.as_raw_fd(),
        &iov,
        &cmsg,
        nix::sys::socket::MsgFlags::empty(),
        None,
    )
    .expect("sendmsg");
    let opts = DumpOptions {
        external_fds: [0, 1, 2].into(),
        cut: [sock].into(),
        mark_memfds: vec![("mig-ring".into(), 4, 31)],
        ..Default::default()
    };
    let mut sink = Vec::new();
    dump(pid, &opts, &mut sink).expect("dump");
    // Marked where its sender sees it...
    let mut word = [0u8; 4];
    std::os::unix::fs::FileExt::read_exact_at(&File::from(ring), &mut word, 4).expect("read");
    assert_eq!(u32::from_le_bytes(word) >> 31, 1);
    // ...and in the image.
    let (h, img) = mig_ckpt::image::decode(&sink, true).expect("image");
    let passed = img
        .files
        .iter()
        .find_map(|f| match f {
            OpenFile::Cut { unread, passed, .. } if unread == b"offer" => Some(passed.clone()),
            _ => None,
        })
        .expect("the cut socket");
    assert_eq!(passed.len(), 1);
    let bytes = mig_ckpt::image::memfd_bytes(&sink, &h, &passed[0]).expect("its bytes");
    assert_eq!(bytes.get(7), Some(&0x80));
    let _ = child.kill();
    let _ = child.wait();
}

/// What `memfds` says once restored from an image of the first test's
/// dump (its socket cut, the top bit of the word at 4 set).
const MOVED: &str = "read \"hello from the peer\" then the end\n\
                     bytes wrong 0\n\
                     top bit set\n\
                     mapping sees: through the fd\n\
                     size sealed yes\n\
                     write to the peer: EPIPE\n";

/// `memfds` dumped as the first test dumps it, into `name`: the image's
/// path (the process is killed).
fn dumped(name: &str) -> std::path::PathBuf {
    let (mut ours, theirs) = UnixStream::pair().expect("pair");
    let (mut child, _out, _fd, addr) = start(&theirs);
    let pid = child.id() as i32;
    let _reap = Reap(pid);
    let sock = std::fs::metadata(format!("/proc/{pid}/fd/3"))
        .expect("fd 3")
        .ino();
    drop(theirs);
    ours.write_all(b"hello from the peer").expect("write");
    let path = scratch().join(name);
    let mut f = File::create(&path).expect("create");
    let opts = DumpOptions {
        external_fds: [0, 1, 2].into(),
        cut: [sock].into(),
        set_bits: [(pid, vec![(addr + 4, 31)])].into(),
        ..Default::default()
    };
    dump(pid, &opts, &mut f).expect("dump");
    let _ = child.kill();
    let _ = child.wait();
    path
}

#[test]
fn a_memfd_larger_than_64_mib_held_and_mapped_is_carried_byte_for_byte() {
    let mut cmd = Command::new(program("bigmemfd"));
    cmd.stdin(Stdio::null()).stdout(Stdio::piped());
    // SAFETY: close_range in the child between fork and exec (only stdio
    // is its own).
    unsafe {
        cmd.pre_exec(|| {
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("bigmemfd");
    let pid = child.id() as i32;
    let _reap = Reap(pid);
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    out.read_line(&mut first).expect("ready");
    assert_eq!(first, "ready\n");
    match waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WUNTRACED)).expect("wait") {
        WaitStatus::Stopped(..) => {}
        other => panic!("not stopped: {other:?}"),
    }
    let path = scratch().join("big.img");
    let mut f = File::create(&path).expect("create");
    dump(pid, &stdio_options(), &mut f).expect("dump");
    drop(f);
    let _ = child.kill();
    let _ = child.wait();

    let img = ImageFile::open(File::open(&path).expect("open"), true).expect("image");
    // The bytes are in the data, not the metadata.
    assert!(img.data_offset() < 1 << 20, "{}", img.data_offset());
    let got: Vec<(&str, u64, u64)> = img
        .image()
        .memfds
        .iter()
        .map(|m| (m.name.as_str(), m.size, m.data.len()))
        .collect();
    // Each without its last MiB of zeros.
    assert_eq!(
        got,
        [
            ("mig-pooled", 80 << 20, 79 << 20),
            ("peer-ring", 72 << 20, 71 << 20)
        ]
    );
    assert!(img
        .image()
        .memfds
        .iter()
        .all(|m| matches!(m.data, MemfdBytes::Image { .. })));

    let restored = restore_from(&path);
    let (code, said) = restored.finish();
    let said = String::from_utf8_lossy(&said);
    assert_eq!(code, 0, "{said}");
    assert_eq!(
        said,
        "bytes wrong 0\n\
         size 83886080\n\
         mapping sees: one file\n\
         size sealed yes\n"
    );
}

#[test]
fn a_damaged_memfd_run_is_refused_by_the_run_checks() {
    let path = dumped("damaged.img");
    let good = ImageFile::open(File::open(&path).expect("open"), true).expect("image");
    let kept = &good.image().memfds[0];
    assert_eq!(kept.name, "kept");
    let MemfdBytes::Image { offset, len } = kept.data else {
        panic!("{:?}", kept.data)
    };
    assert!(len > 100);
    let at = good.data_offset() + offset + 100;
    let mut bytes = std::fs::read(&path).expect("read");
    bytes[at as usize] ^= 0x10;
    let bad = scratch().join("damaged-bad.img");
    std::fs::write(&bad, &bytes).expect("write");
    let e = ImageFile::open(File::open(&bad).expect("open"), true).expect_err("damaged");
    assert!(
        matches!(&e, ImageError::MemfdChecksum { name, .. } if name == "kept"),
        "{e}"
    );
    let mut check = mig_ckpt::image::StreamCheck::new();
    for piece in bytes.chunks(3000) {
        check.update(piece).expect("header and metadata whole");
    }
    let e = check.finish().expect_err("damaged");
    assert!(matches!(e, ImageError::MemfdChecksum { .. }), "{e}");
    // Without the run checks it opens (a receiver checked it on the way).
    assert!(ImageFile::open(File::open(&bad).expect("open"), false).is_ok());
}

/// Format 5's metadata: each memfd's bytes in it.
mod v5 {
    use mig_ckpt::image::{Image, Memfd, OpenFile, PendingInput, Pipe, Proc};
    use mig_ckpt::Fingerprint;
    use serde::Serialize;

    #[derive(Serialize)]
    pub struct MemfdV5 {
        pub name: String,
        pub size: u64,
        pub seals: i32,
        #[serde(with = "serde_bytes")]
        pub data: Vec<u8>,
    }

    #[derive(Serialize)]
    pub enum OpenFileV5 {
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

    #[derive(Serialize)]
    pub struct SocketStateV5 {
        pub fd: i32,
        #[serde(with = "serde_bytes")]
        pub unread: Vec<u8>,
        #[serde(with = "serde_bytes")]
        pub unfinished: Vec<u8>,
        #[serde(with = "serde_bytes")]
        pub notes: Vec<u8>,
        pub passed: Vec<MemfdV5>,
    }

    #[derive(Serialize)]
    pub struct V5 {
        pub keep_pids: bool,
        pub procs: Vec<Proc>,
        pub files: Vec<OpenFileV5>,
        pub pipes: Vec<Pipe>,
        pub needs: Option<Fingerprint>,
        pub inputs: Vec<PendingInput>,
        pub sockets: Vec<SocketStateV5>,
        pub memfds: Vec<MemfdV5>,
    }

    /// `img`'s state as format 5 wrote it, each memfd's bytes from `bytes`.
    pub fn from(img: &Image, bytes: &dyn Fn(&Memfd) -> Vec<u8>) -> V5 {
        let memfd = |m: &Memfd| MemfdV5 {
            name: m.name.clone(),
            size: m.size,
            seals: m.seals,
            data: bytes(m),
        };
        V5 {
            keep_pids: img.keep_pids,
            procs: img.procs.clone(),
            files: img
                .files
                .iter()
                .map(|f| match f.clone() {
                    OpenFile::External { fd } => OpenFileV5::External { fd },
                    OpenFile::Path { path, flags, pos } => OpenFileV5::Path { path, flags, pos },
                    OpenFile::Pipe { pipe, write, flags } => {
                        OpenFileV5::Pipe { pipe, write, flags }
                    }
                    OpenFile::Memfd { memfd, flags, pos } => {
                        OpenFileV5::Memfd { memfd, flags, pos }
                    }
                    OpenFile::Cut {
                        unread,
                        flags,
                        passed,
                    } => OpenFileV5::Cut {
                        unread,
                        flags,
                        passed: passed.iter().map(memfd).collect(),
                    },
                })
                .collect(),
            pipes: img.pipes.clone(),
            needs: img.needs.clone(),
            inputs: img.inputs.clone(),
            sockets: img
                .sockets
                .iter()
                .map(|s| SocketStateV5 {
                    fd: s.fd,
                    unread: s.unread.clone(),
                    unfinished: s.unfinished.clone(),
                    notes: s.notes.clone(),
                    passed: s.passed.iter().map(memfd).collect(),
                })
                .collect(),
            memfds: img.memfds.iter().map(memfd).collect(),
        }
    }
}

#[test]
fn a_version_5_image_with_memfds_still_restores() {
    // Today's image, written again as format 5 wrote it: the memfds'
    // bytes in the metadata, only page runs in the data.
    let path = dumped("for-v5.img");
    let img = ImageFile::open(File::open(&path).expect("open"), true).expect("image");
    let old = v5::from(img.image(), &|m| img.memfd_bytes(m).expect("bytes"));
    let mb = postcard::to_stdvec(&old).expect("encode v5");
    let pages: u64 = img.image().runs().map(|r| r.pages * PAGE).sum();
    let mut data = vec![0u8; pages as usize];
    std::os::unix::fs::FileExt::read_exact_at(img.file(), &mut data, img.data_offset())
        .expect("pages");
    let runs = img.image().runs().count() as u64;
    let mut h = Header::new(mb.len() as u64, pages, runs, crc32c::crc32c(&mb));
    h.version = 5;
    let mut bytes = h.encode().to_vec();
    bytes.extend_from_slice(&mb);
    bytes.resize(h.data_offset as usize, 0);
    bytes.extend_from_slice(&data);
    let crcs: Vec<u32> = img
        .image()
        .runs()
        .map(|r| {
            let s = r.offset as usize;
            crc32c::crc32c(&data[s..s + (r.pages * PAGE) as usize])
        })
        .collect();
    bytes.extend_from_slice(&mig_ckpt::image::encode_trailer(&crcs));
    let v5 = scratch().join("v5.img");
    std::fs::write(&v5, &bytes).expect("write");

    let back = ImageFile::open(File::open(&v5).expect("open"), true).expect("v5 image");
    assert!(back
        .image()
        .memfds
        .iter()
        .all(|m| matches!(m.data, MemfdBytes::Held(_))));
    assert_eq!(back.image().memfds.len(), 2);
    let restored = restore_from(&v5);
    let (code, said) = restored.finish();
    let said = String::from_utf8_lossy(&said);
    assert_eq!(code, 0, "{said}");
    assert_eq!(said, MOVED);
}

/// An image whose metadata claims a memfd of `size` bytes, `len` of them
/// in a run after a memfd of a page (its data two pages of zeros, its sums
/// right).
fn claiming(size: u64, len: u64) -> Vec<u8> {
    use mig_ckpt::image::{self, Image, Memfd, SocketState};
    let img = Image {
        keep_pids: false,
        procs: vec![],
        files: vec![],
        pipes: vec![],
        needs: None,
        inputs: vec![],
        sockets: vec![SocketState {
            fd: 3,
            unread: vec![0],
            unfinished: vec![],
            notes: vec![],
            passed: vec![
                Memfd {
                    name: "pad".into(),
                    size: PAGE,
                    seals: 0,
                    data: MemfdBytes::Image {
                        offset: 0,
                        len: PAGE,
                    },
                },
                Memfd {
                    name: "huge".into(),
                    size,
                    seals: 0,
                    data: MemfdBytes::Image { offset: PAGE, len },
                },
            ],
        }],
        memfds: vec![],
    };
    let mb = image::encode_meta(&img).expect("meta");
    let h = Header::new(mb.len() as u64, 2 * PAGE, 2, crc32c::crc32c(&mb));
    let mut out = h.encode().to_vec();
    out.extend_from_slice(&mb);
    out.resize(h.data_offset as usize, 0);
    out.extend_from_slice(&[0u8; 2 * PAGE as usize]);
    let page = crc32c::crc32c(&[0u8; PAGE as usize]);
    let crcs = [page, page];
    out.extend_from_slice(&image::encode_trailer(&crcs));
    out
}

#[test]
fn a_memfd_claiming_more_than_a_move_carries_is_refused_by_every_reader() {
    use mig_ckpt::image::{self, StreamCheck};
    // A length whose page rounding overflows, and a size past the bound
    // with a length that rounds to nothing: refused, nothing allocated.
    for (size, len) in [(u64::MAX, u64::MAX - 10), (u64::MAX, PAGE), (2 << 30, PAGE)] {
        let bytes = claiming(size, len);
        let mut c = StreamCheck::new();
        let streamed = c.update(&bytes).and_then(|()| c.finish().map(|_| ()));
        assert!(streamed.is_err(), "{size} {len}: streamed");
        assert!(
            image::decode(&bytes, true).is_err(),
            "{size} {len}: decoded"
        );
        let mut f = tempfile::tempfile().expect("file");
        f.write_all(&bytes).expect("write");
        match ImageFile::open(f, true) {
            Err(ImageError::Meta(why)) | Err(ImageError::Runs(why)) => {
                assert!(why.contains("memfd"), "{why}")
            }
            Err(e) => panic!("{size} {len}: {e}"),
            Ok(_) => panic!("{size} {len}: opened"),
        }
    }
}
