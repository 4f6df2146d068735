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
use mig_ckpt::image::OpenFile;
use mig_ckpt::{dump, DumpError, DumpOptions, ImageFile};
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
    assert_eq!(kept.data[7] >> 7, 1, "the top bit of the word at 4");
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
        data: vec![],
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
    let img = mig_ckpt::image::decode(&sink, true).expect("image").1;
    let passed = img
        .files
        .iter()
        .find_map(|f| match f {
            OpenFile::Cut { unread, passed, .. } if unread == b"offer" => Some(passed.clone()),
            _ => None,
        })
        .expect("the cut socket");
    assert_eq!(passed.len(), 1);
    assert_eq!(passed[0].data.get(7), Some(&0x80));
    let _ = child.kill();
    let _ = child.wait();
}
