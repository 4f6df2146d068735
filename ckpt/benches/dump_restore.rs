//! Dump and restore times of a stopped process holding 1, 64 and 256 MiB of
//! touched heap, beside copying the same bytes into fresh memory (what a
//! restore that copies its pages would pay on top of the transfer).
//!
//! For each size, REPS times (medians, and the worst):
//! - dump: `dump` of the stopped process into a file on tmpfs (pages read
//!   with `process_vm_readv`, written once);
//! - sink: the same into `io::sink()`: what taking the state costs before
//!   any writing (a move streams it into the link instead);
//! - open: `ImageFile::open` with every page checksum verified;
//! - restore: `restore` until the new process is released;
//! - touch: restore, then the restored process reads every page of its
//!   heap once and answers (the page faults a mapped image defers);
//! - copy: `memcpy` of the same bytes into memory never touched before.
//!
//! Then trees, each holding the same heap (`CKPT_TREE_MIB`, 1 and 64 by
//! default) in one process: dump and restore of one process as above
//! (`dump`, `restore`), of the same process alone in a pid namespace
//! (`dump_tree`, `restore_tree`), and of a pipeline in a namespace
//! (`sh -c 'holder | cat'`: the shell, the holder and cat, one pipe).
//!
//! `cargo bench -p mig-ckpt --bench dump_restore -- --bench` (5 rounds by
//! default, `CKPT_REPS=N` to change; `CKPT_MIB=1,64` for other sizes).
//! Without `--bench` (as `cargo test --benches` runs it) it does one 1 MiB
//! round of each only.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use mig_ckpt::{
    dump, dump_tree, restore, restore_tree, spawn_in_namespace, DumpOptions, ImageFile,
    RestoreOptions, Spawn, Tree,
};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

/// Holds MiB of touched heap; on each SIGUSR1 reads all of it and prints a
/// sum (waiting in sigsuspend, which a restore must restart with the
/// mask it had).
const HOLDER: &str = r#"
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static volatile sig_atomic_t asked;
static void on_usr1(int s) { (void)s; asked = 1; }
int main(int argc, char **argv) {
    size_t words = (size_t)atol(argv[1]) << 17;
    uint64_t *a = malloc(words * 8);
    for (size_t i = 0; i < words; i++) a[i] = i;
    signal(SIGUSR1, on_usr1);
    sigset_t usr1, old;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, &old);
    printf("ready\n"); fflush(stdout);
    for (;;) {
        while (!asked) sigsuspend(&old);
        asked = 0;
        uint64_t s = 0;
        for (size_t i = 0; i < words; i += 512) s += a[i];
        printf("%llu\n", (unsigned long long)s); fflush(stdout);
    }
}
"#;

fn build(dir: &Path) -> PathBuf {
    let src = dir.join("holder.c");
    std::fs::write(&src, HOLDER).expect("write source");
    let bin = dir.join("holder");
    let st = Command::new("gcc")
        .args(["-O2", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .expect("gcc");
    assert!(st.success());
    bin
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

fn median(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[v.len() / 2], v[v.len() - 1])
}

/// A stopped holder of `mib` MiB, our child, with its stdout read by us.
fn start(bin: &Path, mib: u64) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut cmd = Command::new(bin);
    // SAFETY: close_range is async-signal-safe and touches only the child's
    // descriptors: those the runner leaked (a jobserver pipe) would make
    // the dump refuse the process.
    unsafe {
        cmd.pre_exec(|| {
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
            Ok(())
        });
    }
    let mut child = cmd
        .arg(mib.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("ready");
    let pid = Pid::from_raw(child.id() as i32);
    kill(pid, Signal::SIGSTOP).expect("stop");
    waitpid(pid, Some(WaitPidFlag::WUNTRACED)).expect("wait");
    (child, out)
}

fn restore_once(path: &Path, verify: bool) -> (Child, BufReader<File>, f64) {
    let img = ImageFile::open(File::open(path).expect("open"), verify).expect("image");
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
    let null: OwnedFd = File::open("/dev/null").expect("null").into();
    let null2: OwnedFd = File::open("/dev/null").expect("null").into();
    let fds = BTreeMap::from([(0, null), (1, w), (2, null2)]);
    let t = Instant::now();
    let restored = restore(&img, fds, &RestoreOptions::default()).expect("restore");
    let took = ms(t);
    (restored.child, BufReader::new(File::from(r)), took)
}

/// How a tree is started, dumped and restored.
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    /// One process, its pid not kept.
    Alone,
    /// One process under the crate's init.
    InNamespace,
    /// `sh -c 'holder | cat'` under the crate's init.
    Pipeline,
}

/// Stdio for a bench process: (fds, the stdout reader).
fn stdio() -> (BTreeMap<i32, OwnedFd>, BufReader<File>) {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
    let null: OwnedFd = File::open("/dev/null").expect("null").into();
    let null2: OwnedFd = File::open("/dev/null").expect("null").into();
    (
        BTreeMap::from([(0, null), (1, w), (2, null2)]),
        BufReader::new(File::from(r)),
    )
}

/// Median dump and restore times (ms) and image size of `shape` holding
/// `mib` MiB, over `reps` rounds.
fn tree_round(bin: &Path, dir: &Path, shape: Shape, mib: u64, reps: usize) -> (f64, f64, u64) {
    let opts = DumpOptions {
        external_fds: [0, 1, 2].into(),
        ..Default::default()
    };
    let ready = |out: &mut BufReader<File>| {
        let mut line = String::new();
        out.read_line(&mut line).expect("ready");
        assert_eq!(line, "ready\n");
    };
    let (mut child, tree, _out) = match shape {
        Shape::Alone => {
            let (c, out) = start(bin, mib);
            let out: Box<dyn std::any::Any> = Box::new(out);
            (Some(c), None, Some(out))
        }
        Shape::InNamespace | Shape::Pipeline => {
            let (fds, mut out) = stdio();
            let (program, argv): (PathBuf, Vec<std::ffi::OsString>) = if shape == Shape::Pipeline {
                (
                    "/bin/sh".into(),
                    vec![
                        "sh".into(),
                        "-c".into(),
                        "\"$0\" \"$1\" | cat".into(),
                        bin.into(),
                        mib.to_string().into(),
                    ],
                )
            } else {
                (bin.into(), vec!["holder".into(), mib.to_string().into()])
            };
            let t = spawn_in_namespace(Spawn {
                program,
                argv,
                env: vec!["PATH=/usr/bin:/bin".into()],
                fds,
                die_with_caller: true,
                ..Default::default()
            })
            .expect("spawn");
            ready(&mut out);
            t.stop(std::time::Duration::from_secs(10)).expect("stop");
            let out: Box<dyn std::any::Any> = Box::new(out);
            (None, Some(t), Some(out))
        }
    };
    let path = dir.join("tree-img");
    let (mut d, mut r) = (vec![], vec![]);
    let mut bytes = 0;
    for _ in 0..reps {
        let t = Instant::now();
        let mut f = File::create(&path).expect("create");
        let st = match (&child, &tree) {
            (Some(c), _) => dump(c.id() as i32, &opts, &mut f),
            (_, Some(tr)) => dump_tree(tr.init(), &opts, &mut f),
            _ => unreachable!(),
        }
        .expect("dump");
        drop(f);
        d.push(ms(t));
        bytes = st.bytes;
        let img = ImageFile::open(File::open(&path).expect("open"), false).expect("image");
        let (fds, _o) = stdio();
        let t = Instant::now();
        if shape == Shape::Alone {
            let mut c = restore(&img, fds, &RestoreOptions::default())
                .expect("restore")
                .child;
            r.push(ms(t));
            let _ = c.kill();
            let _ = c.wait();
        } else {
            let mut tr: Tree =
                restore_tree(&img, fds, &RestoreOptions::default()).expect("restore");
            r.push(ms(t));
            let _ = tr.kill();
            let _ = tr.wait();
        }
    }
    if let Some(c) = child.as_mut() {
        let _ = c.kill();
        let _ = c.wait();
    }
    if let Some(mut t) = tree {
        let _ = t.kill();
        let _ = t.wait();
    }
    (median(&mut d).0, median(&mut r).0, bytes)
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let reps: usize = std::env::var("CKPT_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let chosen: Vec<u64> = std::env::var("CKPT_MIB")
        .ok()
        .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 64, 256]);
    let (sizes, reps): (&[u64], usize) = if full {
        (&chosen, reps.max(1))
    } else {
        (&[1], 1)
    };
    let dir = tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .expect("tempdir");
    let bin = build(dir.path());
    let opts = DumpOptions {
        external_fds: [0, 1, 2].into(),
        ..Default::default()
    };
    println!(
        "{:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "MiB",
        "image MiB",
        "dump ms",
        "dump GB/s",
        "sink ms",
        "open ms",
        "restore",
        "touch ms",
        "copy ms"
    );
    for &mib in sizes {
        let (mut orig, _out) = start(&bin, mib);
        let path = dir.path().join(format!("img-{mib}"));
        let (mut d, mut o, mut r, mut tch, mut c) = (vec![], vec![], vec![], vec![], vec![]);
        let mut sink = vec![];
        let mut bytes = 0;
        for _ in 0..reps {
            let t = Instant::now();
            let mut f = File::create(&path).expect("create");
            let st = dump(orig.id() as i32, &opts, &mut f).expect("dump");
            drop(f);
            d.push(ms(t));
            bytes = st.bytes;

            let t = Instant::now();
            dump(orig.id() as i32, &opts, &mut std::io::sink()).expect("dump");
            sink.push(ms(t));

            let t = Instant::now();
            drop(ImageFile::open(File::open(&path).expect("open"), true).expect("image"));
            o.push(ms(t));

            let (mut child, _, took) = restore_once(&path, false);
            r.push(took);
            let _ = child.kill();
            let _ = child.wait();

            let t = Instant::now();
            let (mut child, mut out, _) = restore_once(&path, false);
            kill(Pid::from_raw(child.id() as i32), Signal::SIGUSR1).expect("usr1");
            let mut line = String::new();
            out.read_line(&mut line).expect("answer");
            assert!(!line.is_empty(), "the restored process answered nothing");
            tch.push(ms(t));
            let _ = child.kill();
            let _ = child.wait();

            let src = vec![7u8; (mib << 20) as usize];
            let t = Instant::now();
            let mut dst: Vec<u8> = Vec::with_capacity(src.len());
            dst.extend_from_slice(&src);
            c.push(ms(t));
            std::hint::black_box(&dst);
        }
        let _ = orig.kill();
        let _ = orig.wait();
        let (dm, dw) = median(&mut d);
        let (sm, _) = median(&mut sink);
        let (om, _) = median(&mut o);
        let (rm, rw) = median(&mut r);
        let (tm, _) = median(&mut tch);
        let (cm, _) = median(&mut c);
        println!(
            "{:>5} {:>9.1} {:>9.1} {:>9.2} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}   (dump worst {dw:.1}, restore worst {rw:.1})",
            mib,
            bytes as f64 / (1 << 20) as f64,
            dm,
            bytes as f64 / dm / 1e6,
            sm,
            om,
            rm,
            tm,
            cm
        );
        let _ = std::io::stdout().flush();
    }
    let tree_sizes: Vec<u64> = if full {
        std::env::var("CKPT_TREE_MIB")
            .ok()
            .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
            .unwrap_or_else(|| vec![1, 64])
    } else {
        vec![1]
    };
    println!();
    println!(
        "{:>5} {:>34} {:>9} {:>9} {:>9}",
        "MiB", "what", "image MiB", "dump ms", "restore"
    );
    for &mib in &tree_sizes {
        for (shape, what) in [
            (Shape::Alone, "one process (dump, restore)"),
            (Shape::InNamespace, "one process in a namespace"),
            (Shape::Pipeline, "sh -c 'holder | cat' in a namespace"),
        ] {
            let (dm, rm, bytes) = tree_round(&bin, dir.path(), shape, mib, reps);
            println!(
                "{:>5} {:>34} {:>9.1} {:>9.1} {:>9.1}",
                mib,
                what,
                bytes as f64 / (1 << 20) as f64,
                dm,
                rm
            );
            let _ = std::io::stdout().flush();
        }
    }
}
