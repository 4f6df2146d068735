//! Trees of real processes in a pid namespace of their own, moved mid-run
//! (stopped, dumped, killed, restored with their pids in a new namespace,
//! a fresh pipe on stdout): what they print is what a run without a move
//! prints, and the program's exit status comes through the namespace's
//! init.

mod common;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::thread::JoinHandle;
use std::time::Duration;

use common::{let_run, scratch, stdio_options};
use mig_ckpt::{
    dump_tree, restore_tree, spawn_in_namespace, ImageFile, RestoreOptions, Spawn, Tree,
};

/// A tree whose stdout the test reads; killed if the test fails.
struct Running {
    tree: Option<Tree>,
    reader: Option<JoinHandle<Vec<u8>>>,
    head: Vec<u8>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut t) = self.tree.take() {
            let _ = t.kill();
            let _ = t.wait();
        }
    }
}

fn gather(mut r: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = r.read_to_end(&mut v);
        v
    })
}

fn stdio(stdin: OwnedFd) -> (BTreeMap<i32, OwnedFd>, File) {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
    let err = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .expect("stderr");
    (
        BTreeMap::from([(0, stdin), (1, w), (2, err)]),
        File::from(r),
    )
}

fn null() -> OwnedFd {
    File::open("/dev/null").expect("null").into()
}

fn sh(script: &str) -> Spawn {
    Spawn {
        program: PathBuf::from("/bin/sh"),
        argv: vec!["sh".into(), "-c".into(), script.into()],
        env: vec![OsString::from("PATH=/usr/bin:/bin")],
        ..Default::default()
    }
}

impl Running {
    /// Starts `s` in a namespace with stdout on a pipe; waits for its first
    /// line when `first_line`.
    fn start(mut s: Spawn, first_line: bool) -> Running {
        let (fds, out) = stdio(null());
        s.fds = fds;
        s.die_with_caller = true;
        let tree = spawn_in_namespace(s).expect("spawn in a namespace");
        let mut head = Vec::new();
        let reader = if first_line {
            let mut out = BufReader::new(out);
            out.read_until(b'\n', &mut head).expect("first line");
            assert!(!head.is_empty(), "the program printed nothing");
            gather(out)
        } else {
            gather(out)
        };
        Running {
            tree: Some(tree),
            reader: Some(reader),
            head,
        }
    }

    fn tree(&self) -> &Tree {
        self.tree.as_ref().expect("tree")
    }

    /// Stops every process, dumps the tree into `name`, kills it: the
    /// image and all it printed.
    fn dump_and_kill(mut self, name: &str) -> (PathBuf, Vec<u8>) {
        self.tree().stop(Duration::from_secs(10)).expect("stop");
        let path = scratch().join(name);
        let mut f = File::create(&path).expect("create image");
        dump_tree(self.tree().init(), &stdio_options(), &mut f).expect("dump");
        let mut t = self.tree.take().expect("tree");
        t.kill().expect("kill");
        t.wait().expect("wait");
        (path, self.output())
    }

    /// Restores the tree of the image at `path`, stdout a fresh pipe.
    fn restore(path: &Path) -> Running {
        let img = ImageFile::open(File::open(path).expect("open image"), true).expect("image");
        let (fds, out) = stdio(null());
        let opts = RestoreOptions {
            die_with_caller: true,
            ..Default::default()
        };
        let tree = restore_tree(&img, fds, &opts).expect("restore");
        Running {
            tree: Some(tree),
            reader: Some(gather(out)),
            head: Vec::new(),
        }
    }

    /// Waits for the end: (the program's status, all it printed).
    fn finish(mut self) -> (ExitStatus, Vec<u8>) {
        let mut t = self.tree.take().expect("tree");
        let st = t.wait().expect("wait");
        (st, self.output())
    }

    fn output(&mut self) -> Vec<u8> {
        let mut all = std::mem::take(&mut self.head);
        if let Some(r) = self.reader.take() {
            all.extend(r.join().expect("reader"));
        }
        all
    }
}

/// What `sh -c script` prints when nothing moves it.
fn unmoved(script: &str) -> String {
    let out = Command::new("/bin/sh")
        .args(["-c", script])
        .output()
        .expect("run");
    assert!(out.status.success(), "{script} failed on its own");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `s` in a namespace, moving it `moves` times `gap_ms` apart; its
/// status and all it printed, across every tree it was.
fn moved(s: impl Fn() -> Spawn, moves: usize, gap_ms: u64, name: &str) -> (ExitStatus, String) {
    let mut r = Running::start(s(), true);
    let mut all = Vec::new();
    for i in 0..moves {
        let_run(gap_ms);
        let (img, before) = r.dump_and_kill(&format!("{name}-{i}.img"));
        all.extend(before);
        r = Running::restore(&img);
    }
    let (st, rest) = r.finish();
    all.extend(rest);
    (st, String::from_utf8_lossy(&all).into_owned())
}

const PIPELINE: &str = "i=0; while [ $i -lt 300 ]; do echo $i; i=$((i+1)); sleep 0.01; done \
                        | awk '{ s += $1; if (NR % 50 == 0) { print NR, s; fflush() } } END { print \"sum\", s }'";

#[test]
fn a_pipeline_moved_twice_prints_its_sum() {
    let want = unmoved(PIPELINE);
    assert!(want.ends_with("sum 44850\n"), "{want}");
    let (st, got) = moved(
        || sh(&format!("echo start; {PIPELINE}")),
        2,
        700,
        "pipeline",
    );
    assert!(st.success(), "{st:?}");
    assert_eq!(got, format!("start\n{want}"));
}
