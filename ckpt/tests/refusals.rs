//! What cannot be saved is refused with its reason, and the process is left
//! as it was: stopped, and when continued it runs to its answer. Damaged
//! and truncated images are refused with clear errors.

mod common;

use std::collections::BTreeMap;
use std::fs::File;
use std::net::TcpListener;
use std::process::Command;

use common::*;
use mig_ckpt::{
    dump, mismatch, restore, DumpError, Fingerprint, ImageError, ImageFile, RestoreError,
    RestoreOptions,
};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

fn unmoved(mut cmd: Command) -> String {
    let out = cmd.output().expect("run");
    assert!(out.status.success(), "{cmd:?} failed on its own");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn resume(pid: i32) {
    kill(Pid::from_raw(pid), Signal::SIGCONT).expect("SIGCONT");
}

#[test]
fn a_tcp_connection_is_named_and_the_process_left_running() {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    // Accept (and hold) every connection for the test's length.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in l.incoming() {
            held.push(c);
        }
    });
    let tcp = || {
        let mut c = Command::new(program("tcp"));
        c.args([port.to_string(), "300000000".into()]);
        c
    };
    let want = unmoved(tcp());
    let r = Running::start(tcp());
    r.stop();
    let mut out = Vec::new();
    let e = dump(r.pid(), &stdio_options(), &mut out).expect_err("refused");
    let msg = e.to_string();
    assert!(matches!(e, DumpError::Unsupported { .. }), "{msg}");
    assert!(
        msg.contains("fd 3 is a TCP socket 127.0.0.1:")
            && msg.contains(&format!("-> 127.0.0.1:{port}")),
        "{msg}"
    );
    assert_eq!(state(r.pid()), "T", "left stopped");
    resume(r.pid());
    let (code, all) = r.finish();
    assert_eq!(code, 0);
    assert_eq!(String::from_utf8_lossy(&all), want);
}

#[test]
fn a_dump_leaves_the_process_to_finish_as_if_nothing_happened() {
    let heap = || {
        let mut c = Command::new(program("heap"));
        c.args(["16", "3000"]);
        c
    };
    let want = unmoved(heap());
    let r = Running::start(heap());
    let_run(50);
    r.stop();
    let img = dump_to_file(r.pid(), "left.img");
    assert_eq!(state(r.pid()), "T", "left stopped");
    // Dumped again, still the same.
    let again = dump_to_file(r.pid(), "left-again.img");
    resume(r.pid());
    let (code, all) = r.finish();
    assert_eq!(code, 0);
    assert_eq!(String::from_utf8_lossy(&all), want);
    let a = std::fs::read(img).expect("img");
    let b = std::fs::read(again).expect("img");
    assert_eq!(a.len(), b.len(), "two dumps of a stopped process differ");
}

#[test]
fn damaged_and_truncated_images_are_refused() {
    let mut c = Command::new(program("heap"));
    c.args(["4", "100000"]);
    let r = Running::start(c);
    r.stop();
    let path = dump_to_file(r.pid(), "whole.img");
    drop(r);
    let bytes = std::fs::read(&path).expect("read");
    let open = |b: &[u8], name: &str| {
        let p = scratch().join(name);
        std::fs::write(&p, b).expect("write");
        ImageFile::open(File::open(&p).expect("open"), true)
    };
    assert!(open(&bytes, "ok.img").is_ok());

    let mut page = bytes.clone();
    let at = bytes.len() - 64 * 1024;
    page[at] ^= 0x10;
    assert!(matches!(
        open(&page, "page.img"),
        Err(ImageError::RunChecksum { .. })
    ));
    let mut header = bytes.clone();
    header[20] ^= 1;
    assert_eq!(
        open(&header, "header.img").err(),
        Some(ImageError::HeaderChecksum)
    );
    let mut meta = bytes.clone();
    meta[100] ^= 1;
    assert_eq!(
        open(&meta, "meta.img").err(),
        Some(ImageError::MetaChecksum)
    );
    assert!(matches!(
        open(&bytes[..bytes.len() / 2], "half.img"),
        Err(ImageError::Size { .. })
    ));
    assert_eq!(
        open(&bytes[..10], "ten.img").err(),
        Some(ImageError::TooShort(10))
    );
    assert!(matches!(
        open(
            b"MIGCKPT\0 and more bytes than a header holds, which is sixty-four.",
            "other.img"
        ),
        Err(ImageError::BadMagic(_))
    ));
    let e = open(&page, "page.img").expect_err("damaged");
    assert!(e.to_string().contains("damaged"), "{e}");
}

#[test]
fn a_restore_without_the_descriptors_left_to_the_caller_is_refused() {
    let mut c = Command::new(program("heap"));
    c.args(["1", "100000"]);
    let r = Running::start(c);
    r.stop();
    let path = dump_to_file(r.pid(), "nofd.img");
    drop(r);
    let img = ImageFile::open(File::open(&path).expect("open"), true).expect("image");
    let e = restore(&img, BTreeMap::new(), &RestoreOptions::default()).expect_err("refused");
    assert!(matches!(e, RestoreError::MissingFd(0)), "{e}");
}

#[test]
fn a_target_without_the_same_program_is_named() {
    // The program from a file of its own, so the test can change it.
    let exe = scratch().join("heap-copy");
    std::fs::copy(program("heap"), &exe).expect("copy");
    let mut c = Command::new(&exe);
    c.args(["1", "100000"]);
    let r = Running::start(c);
    r.stop();
    let path = dump_to_file(r.pid(), "fingerprint.img");
    drop(r);
    let img = ImageFile::open(File::open(&path).expect("open"), true).expect("image");
    let source = Fingerprint::here(img.image()).expect("fingerprint");
    assert!(source.files.contains_key(exe.to_str().expect("utf-8")));
    assert!(
        source.files.keys().any(|f| f.contains("libc")),
        "{:?}",
        source.files.keys()
    );
    assert_eq!(
        mismatch(&source, &Fingerprint::here(img.image()).expect("again")),
        None
    );
    // The dump recorded it: a restore checks it before it starts anything.
    assert_eq!(img.image().needs.as_ref(), Some(&source));
    let null_fds = || {
        BTreeMap::from([
            (0, File::open("/dev/null").expect("null").into()),
            (1, File::open("/dev/null").expect("null").into()),
            (2, File::open("/dev/null").expect("null").into()),
        ])
    };

    let mut bytes = std::fs::read(&exe).expect("read");
    bytes.push(0);
    std::fs::write(&exe, &bytes).expect("write");
    let why =
        mismatch(&source, &Fingerprint::here(img.image()).expect("changed")).expect("differs");
    assert!(why.contains("heap-copy has other content"), "{why}");
    let e = restore(&img, null_fds(), &RestoreOptions::default()).expect_err("other program");
    assert!(matches!(e, RestoreError::Machine(_)), "{e}");
    assert!(e.to_string().contains("heap-copy has other content"), "{e}");

    std::fs::remove_file(&exe).expect("remove");
    let why = mismatch(&source, &Fingerprint::here(img.image()).expect("gone")).expect("differs");
    assert!(why.contains("heap-copy is missing"), "{why}");
    let e = restore(&img, null_fds(), &RestoreOptions::default()).expect_err("no program");
    assert!(matches!(e, RestoreError::Machine(_)), "{e}");
    assert!(e.to_string().contains("heap-copy is missing"), "{e}");
}

fn in_namespace(program: &str, args: &[&str]) -> (mig_ckpt::Tree, std::io::BufReader<File>) {
    use std::io::BufRead;
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
    let null: std::os::fd::OwnedFd = File::open("/dev/null").expect("null").into();
    let mut argv: Vec<std::ffi::OsString> = vec![program.into()];
    argv.extend(args.iter().map(std::ffi::OsString::from));
    let tree = mig_ckpt::spawn_in_namespace(mig_ckpt::Spawn {
        program: program.into(),
        argv,
        env: vec!["PATH=/usr/bin:/bin".into()],
        fds: BTreeMap::from([(0, null), (1, w)]),
        die_with_caller: true,
        ..Default::default()
    })
    .expect("spawn");
    let mut out = std::io::BufReader::new(File::from(r));
    let mut first = String::new();
    out.read_line(&mut first).expect("first line");
    assert!(!first.is_empty());
    (tree, out)
}

/// Every process of `tree` is stopped.
fn all_stopped(tree: &mig_ckpt::Tree) -> bool {
    tree.processes()
        .expect("processes")
        .iter()
        .skip(1)
        .all(|&p| state(p) == "T")
}

#[test]
fn processes_sharing_a_descriptor_table_are_named_and_left_to_finish() {
    use std::io::Read;
    let prog = program("shared");
    let want = unmoved(Command::new(&prog));
    let (mut tree, mut out) = in_namespace(prog.to_str().expect("utf-8"), &[]);
    tree.stop(std::time::Duration::from_secs(10)).expect("stop");
    let e =
        mig_ckpt::dump_tree(tree.init(), &stdio_options(), &mut Vec::new()).expect_err("refused");
    assert!(matches!(e, DumpError::Unsupported { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("pid 3 shares its descriptor table (CLONE_FILES) with pid 2"),
        "{e}"
    );
    assert!(all_stopped(&tree), "left stopped");
    tree.cont().expect("continue");
    let mut rest = String::new();
    out.read_to_string(&mut rest).expect("read");
    assert!(tree.wait().expect("wait").success());
    assert_eq!(format!("ready\n{rest}"), want);
}

#[test]
fn a_group_whose_leader_has_exited_is_named() {
    // setsid makes a session and group led by a shell that exits, leaving
    // its background sleep under init in them.
    let (mut tree, _out) = in_namespace(
        "/bin/sh",
        &["-c", "setsid sh -c 'sleep 30 & exit'; echo start; sleep 30"],
    );
    std::thread::sleep(std::time::Duration::from_millis(100));
    tree.stop(std::time::Duration::from_secs(10)).expect("stop");
    let e =
        mig_ckpt::dump_tree(tree.init(), &stdio_options(), &mut Vec::new()).expect_err("refused");
    let msg = e.to_string();
    assert!(msg.contains("whose leader has exited"), "{msg}");
    assert!(all_stopped(&tree), "left stopped");
    tree.kill().expect("kill");
    tree.wait().expect("wait");
}

#[test]
fn a_process_with_children_is_a_tree_and_a_tree_is_not_one_process() {
    let mut c = Command::new("/bin/sh");
    c.args(["-c", "echo start; sleep 30; echo done"]);
    let r = Running::start(c);
    // Once the shell has started sleep.
    while mig_ckpt::descendants(r.pid()).expect("tree").len() < 2 {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    mig_ckpt::stop_tree(r.pid(), std::time::Duration::from_secs(10)).expect("stop");
    let e = dump(r.pid(), &stdio_options(), &mut Vec::new()).expect_err("refused");
    assert!(e.to_string().contains("dump_tree"), "{e}");
    let path = scratch().join("a-tree.img");
    let mut f = File::create(&path).expect("create");
    mig_ckpt::dump_tree(r.pid(), &stdio_options(), &mut f).expect("dump_tree");
    for p in mig_ckpt::descendants(r.pid()).expect("tree") {
        let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
    }
    drop(r);
    let img = ImageFile::open(File::open(&path).expect("open"), true).expect("image");
    assert_eq!(img.image().procs.len(), 2);
    let e = restore(&img, BTreeMap::new(), &RestoreOptions::default()).expect_err("refused");
    assert!(e.to_string().contains("restore_tree"), "{e}");
}

/// Runs `f` on a thread of its own without CAP_SYS_ADMIN in its effective
/// set (capabilities are per thread).
fn without_sys_admin<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        #[repr(C)]
        struct Header {
            version: u32,
            pid: i32,
        }
        #[repr(C)]
        #[derive(Clone, Copy, Default)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        let mut h = Header {
            version: 0x2008_0522,
            pid: 0,
        };
        let mut d = [Data::default(); 2];
        // SAFETY: capget and capset read and write the header and two data
        // words given, ours; capset changes this thread only.
        unsafe {
            assert_eq!(libc::syscall(libc::SYS_capget, &mut h, d.as_mut_ptr()), 0);
            const CAP_SYS_ADMIN: u32 = 21;
            d[0].effective &= !(1 << CAP_SYS_ADMIN);
            assert_eq!(libc::syscall(libc::SYS_capset, &mut h, d.as_ptr()), 0);
        }
        f()
    })
    .join()
    .expect("thread")
}

#[test]
fn without_the_privilege_a_namespace_is_refused_clearly() {
    let e = without_sys_admin(|| {
        mig_ckpt::spawn_in_namespace(mig_ckpt::Spawn {
            program: "/bin/true".into(),
            ..Default::default()
        })
        .expect_err("refused")
    });
    assert!(matches!(e, mig_ckpt::NsError::Namespace(_)), "{e}");
    assert!(e.to_string().contains("CAP_SYS_ADMIN"), "{e}");

    // A tree saved by a privileged caller is not restored half.
    let mut c = Command::new("/bin/sh");
    c.args(["-c", "echo start; sleep 30"]);
    let r = Running::start(c);
    mig_ckpt::stop_tree(r.pid(), std::time::Duration::from_secs(10)).expect("stop");
    let path = scratch().join("unprivileged.img");
    let mut f = File::create(&path).expect("create");
    mig_ckpt::dump_tree(r.pid(), &stdio_options(), &mut f).expect("dump_tree");
    for p in mig_ckpt::descendants(r.pid()).expect("tree") {
        let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
    }
    drop(r);
    let e = without_sys_admin(move || {
        let img = ImageFile::open(File::open(&path).expect("open"), true).expect("image");
        let null = || -> std::os::fd::OwnedFd { File::open("/dev/null").expect("null").into() };
        let fds = BTreeMap::from([(0, null()), (1, null()), (2, null())]);
        mig_ckpt::restore_tree(&img, fds, &RestoreOptions::default())
            .expect_err("refused")
            .to_string()
    });
    assert!(e.contains("CAP_SYS_ADMIN"), "{e}");
}
