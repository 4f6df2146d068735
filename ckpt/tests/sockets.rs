//! A socket to the caller, given anew at restore: the bytes the process had
//! not read go into the image, looked at and not taken (the process, when
//! continued, still reads them), with those the caller says it still held
//! and the start of a write the caller had already read; descriptors on
//! their way through it are refused with the reason.

mod common;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

use common::*;
use mig_ckpt::{dump, restore, DumpError, DumpOptions, ImageFile, RestoreOptions, SocketState};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// `sockread` with `theirs` on fd 3; it has said "ready". Its stdout.
fn start(theirs: &UnixStream) -> (Child, BufReader<std::process::ChildStdout>) {
    let raw = theirs.as_raw_fd();
    let mut cmd = Command::new(program("sockread"));
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
    let mut child = cmd.spawn().expect("sockread");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    out.read_line(&mut first).expect("ready");
    assert_eq!(first, "ready\n");
    (child, out)
}

fn options(unread: &[u8]) -> DumpOptions {
    DumpOptions {
        external_fds: [0, 1, 2, 3].into(),
        sockets: vec![SocketState {
            fd: 3,
            unread: unread.to_vec(),
            unfinished: b"MG half".to_vec(),
            notes: b"heard 7".to_vec(),
            passed: vec![],
        }],
        ..Default::default()
    }
}

#[test]
fn bytes_waiting_in_the_socket_go_into_the_image_and_stay_in_the_socket() {
    let (mut ours, theirs) = UnixStream::pair().expect("pair");
    let (mut child, mut out) = start(&theirs);
    drop(theirs);
    let pid = child.id() as i32;
    stop(pid);
    // Written while it is stopped: it has not read them.
    ours.write_all(b"hello ").expect("write");
    let path = scratch().join("sockread.img");
    let mut f = File::create(&path).expect("create");
    dump(pid, &options(b"world"), &mut f).expect("dump");
    drop(f);
    let img = ImageFile::open(File::open(&path).expect("open"), true).expect("image");
    assert_eq!(
        img.image().sockets,
        vec![SocketState {
            fd: 3,
            unread: b"hello world".to_vec(),
            unfinished: b"MG half".to_vec(),
            notes: b"heard 7".to_vec(),
            passed: vec![],
        }]
    );
    // Not taken: continued, it reads them (and only them: the caller's
    // held bytes are the image's).
    kill(Pid::from_raw(pid), Signal::SIGCONT).expect("SIGCONT");
    drop(ours);
    let mut said = String::new();
    out.read_to_string(&mut said).expect("read");
    assert_eq!(said, "hello ");
    assert!(child.wait().expect("wait").success());

    // Restored with a new socket on fd 3, it reads what the image kept.
    let (mut ours, theirs) = UnixStream::pair().expect("pair");
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
    let null = |write: bool| -> OwnedFd {
        std::fs::OpenOptions::new()
            .read(!write)
            .write(write)
            .open("/dev/null")
            .expect("null")
            .into()
    };
    let fds = BTreeMap::from([
        (0, null(false)),
        (1, w),
        (2, null(true)),
        (3, OwnedFd::from(theirs)),
    ]);
    let mut restored = restore(&img, fds, &RestoreOptions::default()).expect("restore");
    ours.write_all(&img.image().sockets[0].unread)
        .expect("write");
    drop(ours);
    let mut said = String::new();
    File::from(r).read_to_string(&mut said).expect("read");
    assert_eq!(said, "hello world");
    assert!(restored.child.wait().expect("wait").success());
}

#[test]
fn a_descriptor_other_than_a_memfd_on_its_way_through_the_socket_is_refused() {
    let (ours, theirs) = UnixStream::pair().expect("pair");
    let (mut child, mut out) = start(&theirs);
    drop(theirs);
    let pid = child.id() as i32;
    stop(pid);
    let passed = File::open("/dev/null").expect("null");
    let fds = [passed.as_raw_fd()];
    let cmsg = [nix::sys::socket::ControlMessage::ScmRights(&fds)];
    let iov = [std::io::IoSlice::new(b"x")];
    nix::sys::socket::sendmsg::<()>(
        ours.as_raw_fd(),
        &iov,
        &cmsg,
        nix::sys::socket::MsgFlags::empty(),
        None,
    )
    .expect("sendmsg");
    let mut sink = Vec::new();
    match dump(pid, &options(b""), &mut sink) {
        Err(DumpError::Unsupported { what, .. }) => {
            assert!(
                what.contains("descriptor")
                    && what.contains("fd 3")
                    && what.contains("not a memfd"),
                "{what}"
            )
        }
        other => panic!("not refused: {other:?}"),
    }
    // As it was: continued, it reads its byte.
    assert_eq!(state(pid), "T");
    kill(Pid::from_raw(pid), Signal::SIGCONT).expect("SIGCONT");
    drop(ours);
    let mut said = String::new();
    out.read_to_string(&mut said).expect("read");
    assert_eq!(said, "x");
    assert!(child.wait().expect("wait").success());
}

#[test]
fn a_process_that_closed_its_socket_is_saved_without_it() {
    let mut cmd = Command::new("/bin/sleep");
    cmd.arg("30").stdin(Stdio::null()).stdout(Stdio::null());
    // SAFETY: close_range in the child between fork and exec touches only
    // the child's descriptors: fd 3 is not there.
    unsafe {
        cmd.pre_exec(|| {
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("sleep");
    let pid = child.id() as i32;
    stop(pid);
    let mut out = Vec::new();
    dump(pid, &options(b"never read"), &mut out).expect("dump");
    let (_, img) = mig_ckpt::image::decode(&out, true).expect("image");
    assert!(img.sockets.is_empty(), "{:?}", img.sockets);
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_memfd_on_its_way_through_the_socket_goes_into_the_image_with_its_bytes() {
    let (ours, theirs) = UnixStream::pair().expect("pair");
    let (mut child, mut out) = start(&theirs);
    drop(theirs);
    let pid = child.id() as i32;
    stop(pid);
    let memfd = mig_ckpt::memfd::make(&mig_ckpt::image::Memfd {
        name: "mig-message".into(),
        size: 4096,
        seals: libc::F_SEAL_GROW | libc::F_SEAL_SHRINK,
        data: mig_ckpt::image::MemfdBytes::Held(b"a large message".to_vec()),
    })
    .expect("memfd");
    for (bytes, fd) in [
        (&b"ab"[..], Some(&memfd)),
        (b"cd", None),
        (b"e", Some(&memfd)),
    ] {
        let fds: Vec<i32> = fd.iter().map(|f| f.as_raw_fd()).collect();
        let cmsg: Vec<_> = fd
            .iter()
            .map(|_| nix::sys::socket::ControlMessage::ScmRights(&fds))
            .collect();
        let iov = [std::io::IoSlice::new(bytes)];
        nix::sys::socket::sendmsg::<()>(
            ours.as_raw_fd(),
            &iov,
            &cmsg,
            nix::sys::socket::MsgFlags::empty(),
            None,
        )
        .expect("sendmsg");
    }
    let mut held = options(b"");
    held.sockets[0].passed.push(mig_ckpt::image::Memfd {
        name: "held".into(),
        size: 1,
        seals: 0,
        data: mig_ckpt::image::MemfdBytes::Held(vec![]),
    });
    let mut sink = Vec::new();
    dump(pid, &held, &mut sink).expect("dump");
    let (h, img) = mig_ckpt::image::decode(&sink, true).expect("image");
    let s = &img.sockets[0];
    assert_eq!(s.unread, b"abcde");
    let names: Vec<&str> = s.passed.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["mig-message", "mig-message", "held"]);
    assert_eq!(
        mig_ckpt::image::memfd_bytes(&sink, &h, &s.passed[0]),
        Some(&b"a large message"[..])
    );
    // Opened from a file, the image holds them in memory for the caller,
    // who makes them anew (its runs checked even without the page checks).
    let path = std::env::temp_dir().join(format!("passed-{}.img", std::process::id()));
    std::fs::write(&path, &sink).expect("write");
    let file =
        mig_ckpt::ImageFile::open(std::fs::File::open(&path).expect("open"), false).expect("image");
    let held = &file.image().sockets[0].passed[0];
    assert_eq!(held.data.held(), Some(&b"a large message"[..]));
    let made = mig_ckpt::memfd::make(held).expect("made");
    let back = mig_ckpt::memfd::read(std::os::fd::AsFd::as_fd(&made)).expect("read");
    assert_eq!(&back, held);
    let mig_ckpt::image::MemfdBytes::Image { offset, .. } = s.passed[0].data else {
        panic!("{:?}", s.passed[0].data)
    };
    let mut bad = sink.clone();
    bad[(h.data_offset + offset + 3) as usize] ^= 1;
    std::fs::write(&path, &bad).expect("write");
    let e = mig_ckpt::ImageFile::open(std::fs::File::open(&path).expect("open"), false)
        .expect_err("damaged");
    assert!(
        matches!(&e, mig_ckpt::ImageError::MemfdChecksum { name, .. } if name == "mig-message"),
        "{e}"
    );
    let _ = std::fs::remove_file(&path);
    assert_eq!(s.passed[0].size, 4096);
    // Only looked at: continued, it reads all five bytes.
    kill(Pid::from_raw(pid), Signal::SIGCONT).expect("SIGCONT");
    drop(ours);
    let mut said = String::new();
    out.read_to_string(&mut said).expect("read");
    assert_eq!(said, "abcde");
    assert!(child.wait().expect("wait").success());
}
