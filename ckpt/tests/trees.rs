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

/// The image at `path`.
fn image_at(path: &Path) -> mig_ckpt::Image {
    ImageFile::open(File::open(path).expect("open image"), true)
        .expect("image")
        .image()
        .clone()
}

#[test]
fn a_pipeline_is_saved_as_a_tree_with_its_pipe() {
    // The shell, the loop's subshell, awk (and a sleep now and then), one
    // pipe between the subshell and awk, pids kept: awk is still the
    // shell's child by the pid it had.
    let r = Running::start(sh(&format!("echo start; {PIPELINE}")), true);
    let_run(300);
    let init = r.tree().init();
    let (img, _) = r.dump_and_kill("pipeline-look.img");
    let image = image_at(&img);
    assert!(image.keep_pids);
    assert!(image.procs.len() >= 3, "{:?}", image.procs);
    assert_eq!(image.procs[0].pid, 2, "the program is pid 2 under init");
    let pids: Vec<i32> = image.procs.iter().map(|p| p.pid).collect();
    assert!(
        image.procs[1..].iter().all(|p| pids.contains(&p.ppid)),
        "every other process's parent is saved: {:?}",
        image.procs
    );
    assert_eq!(image.pipes.len(), 1, "{:?}", image.files);
    let ends: Vec<bool> = image
        .files
        .iter()
        .filter_map(|f| match f {
            mig_ckpt::image::OpenFile::Pipe { write, .. } => Some(*write),
            _ => None,
        })
        .collect();
    assert!(ends.contains(&true) && ends.contains(&false), "{ends:?}");
    assert_ne!(init, 0);
}

#[test]
fn a_shell_moved_during_its_foreground_sleep_goes_on() {
    // The shell waits (wait4) for sleep, its child by pid; the sleep is
    // cut short (EINTR) and started again by sleep itself.
    let (st, got) = moved(|| sh("echo start; sleep 1; echo done"), 1, 300, "sleep");
    assert!(st.success(), "{st:?}");
    assert_eq!(got, "start\ndone\n");
}

#[test]
fn zombies_are_made_again_and_waited_for_by_their_pids() {
    let zombies = || Spawn {
        program: common::program("zombies"),
        argv: vec!["zombies".into(), "600000000".into()],
        ..Default::default()
    };
    let want = {
        let out = Command::new(common::program("zombies"))
            .arg("600000000")
            .output()
            .expect("run");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(
        want.contains("a: same pid, exit 7\nb: same pid, signal 15\n"),
        "{want}"
    );
    let mut r = Running::start(zombies(), true);
    let mut all = Vec::new();
    for i in 0..2 {
        let_run(150);
        let (img, before) = r.dump_and_kill(&format!("zombies-{i}.img"));
        let image = image_at(&img);
        let mut ended: Vec<i32> = image
            .procs
            .iter()
            .filter_map(|p| match p.state {
                mig_ckpt::image::ProcState::Zombie { status } => Some(status),
                _ => None,
            })
            .collect();
        ended.sort_unstable();
        assert_eq!(ended, [15, 7 << 8], "two zombies saved");
        all.extend(before);
        r = Running::restore(&img);
    }
    let (st, rest) = r.finish();
    all.extend(rest);
    assert!(st.success(), "{st:?}");
    assert_eq!(String::from_utf8_lossy(&all), want);
}

/// 108894 bytes into a pipe whose reader sleeps first: the writer blocks
/// with the pipe full (64 KiB in flight) until the reader reads.
const FULL_PIPE: &str = "echo start; seq 1 20000 | (sleep 1; md5sum)";

#[test]
fn bytes_in_a_pipe_at_the_dump_are_read_after_the_move() {
    let want = unmoved(FULL_PIPE);
    let r = Running::start(sh(FULL_PIPE), true);
    let_run(400);
    let (img, mut all) = r.dump_and_kill("full-pipe.img");
    let image = image_at(&img);
    assert_eq!(image.pipes.len(), 1);
    assert_eq!(image.pipes[0].data.len(), 65536, "the pipe was full");
    assert!(image.pipes[0].data.starts_with(b"1\n2\n3\n"));
    let (st, rest) = Running::restore(&img).finish();
    all.extend(rest);
    assert!(st.success(), "{st:?}");
    assert_eq!(String::from_utf8_lossy(&all), want);
}

fn program_in_namespace(name: &str, args: &[&str]) -> (Spawn, Command) {
    let mut argv: Vec<OsString> = vec![name.into()];
    argv.extend(args.iter().map(OsString::from));
    let mut c = Command::new(common::program(name));
    c.args(args);
    (
        Spawn {
            program: common::program(name),
            argv,
            ..Default::default()
        },
        c,
    )
}

#[test]
fn a_single_process_in_a_namespace_moved_twice_prints_its_answer() {
    let (_, mut c) = program_in_namespace("heap", &["16", "6000"]);
    let want = String::from_utf8_lossy(&c.output().expect("run").stdout).into_owned();
    let (st, got) = moved(
        || program_in_namespace("heap", &["16", "6000"]).0,
        2,
        60,
        "ns-heap",
    );
    assert!(st.success(), "{st:?}");
    assert_eq!(got, want);
}

#[test]
fn a_pthreads_program_in_a_namespace_keeps_its_tids_across_moves() {
    let (_, mut c) = program_in_namespace("threads", &["16", "3000"]);
    let want = String::from_utf8_lossy(&c.output().expect("run").stdout).into_owned();
    let mut r = Running::start(program_in_namespace("threads", &["16", "3000"]).0, true);
    let mut all = Vec::new();
    for i in 0..2 {
        let_run(60);
        let (img, before) = r.dump_and_kill(&format!("ns-threads-{i}.img"));
        let image = image_at(&img);
        let meta = image.live().next().expect("a process");
        assert_eq!(meta.threads.len(), 5);
        let tids: Vec<i32> = meta.threads.iter().map(|t| t.tid).collect();
        assert_eq!(tids[0], 2);
        assert!(tids[1..].iter().all(|&t| (3..10).contains(&t)), "{tids:?}");
        all.extend(before);
        r = Running::restore(&img);
        if i == 0 {
            // The threads are there again with their tids.
            let p = r.tree().program().expect("program");
            let mut now: Vec<i32> = std::fs::read_dir(format!("/proc/{p}/task"))
                .expect("tasks")
                .map(|e| {
                    let t = e.expect("task").file_name();
                    let st = std::fs::read_to_string(format!(
                        "/proc/{p}/task/{}/status",
                        t.to_string_lossy()
                    ))
                    .expect("status");
                    mig_ckpt::proc::parse_ids(&st).expect("ids").pid
                })
                .collect();
            now.sort_unstable();
            let mut saved = tids.clone();
            saved.sort_unstable();
            assert_eq!(now, saved);
        }
    }
    let (st, rest) = r.finish();
    all.extend(rest);
    assert!(st.success(), "{st:?}");
    assert_eq!(String::from_utf8_lossy(&all), want);
}

#[test]
fn the_programs_exit_status_comes_through_init() {
    let (st, _) = Running::start(sh("exit 3"), false).finish();
    assert_eq!(st.code(), Some(3));
    let (st, _) = Running::start(sh("kill -SEGV $$"), false).finish();
    assert_eq!(st.signal(), Some(libc::SIGSEGV));
    // A signal from outside with no handler ends the program, as it would
    // anywhere else (the program is not its namespace's pid 1).
    let r = Running::start(sh("echo start; sleep 30"), true);
    let p = r.tree().program().expect("running");
    // SAFETY: kill takes integers only.
    assert_eq!(unsafe { libc::kill(p, libc::SIGTERM) }, 0);
    let (st, _) = r.finish();
    assert_eq!(st.signal(), Some(libc::SIGTERM));
}

#[test]
fn a_tree_started_outside_a_namespace_moves_into_one_with_its_pids() {
    // Started by the test as any process is; dumped as a tree and
    // restored in a namespace, every pid as it was.
    let script = format!("echo start; {PIPELINE}");
    let want = format!("start\n{}", unmoved(PIPELINE));
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", &script]);
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let r = common::Running::start(cmd);
    let_run(400);
    let pid = r.pid();
    mig_ckpt::stop_tree(pid, Duration::from_secs(10)).expect("stop");
    let kids = mig_ckpt::descendants(pid).expect("tree");
    let path = scratch().join("outside.img");
    let mut f = File::create(&path).expect("create");
    dump_tree(pid, &stdio_options(), &mut f).expect("dump");
    let image = image_at(&path);
    assert_eq!(image.procs[0].pid, pid, "the root keeps its pid");
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill");
    let mut all = r.kill();
    let restored = Running::restore(&path);
    assert_eq!(
        mig_ckpt::proc::parse_ids(
            &std::fs::read_to_string(format!(
                "/proc/{}/status",
                restored.tree().program().expect("running")
            ))
            .expect("status")
        )
        .expect("ids")
        .pid,
        pid
    );
    let (st, rest) = restored.finish();
    all.extend(rest);
    assert!(st.success(), "{st:?}");
    assert_eq!(String::from_utf8_lossy(&all), want);
    assert!(kids.len() >= 3, "{kids:?}");
}

#[test]
fn a_tree_dumped_and_continued_runs_on_as_if_nothing_happened() {
    // The dump leaves every process stopped, the pipe's bytes in the pipe.
    let want = unmoved(FULL_PIPE);
    let r = Running::start(sh(FULL_PIPE), true);
    let_run(300);
    r.tree().stop(Duration::from_secs(10)).expect("stop");
    let path = scratch().join("continued.img");
    let mut f = File::create(&path).expect("create");
    dump_tree(r.tree().init(), &stdio_options(), &mut f).expect("dump");
    assert_eq!(image_at(&path).pipes[0].data.len(), 65536);
    r.tree().cont().expect("continue");
    let (st, got) = r.finish();
    assert!(st.success(), "{st:?}");
    assert_eq!(String::from_utf8_lossy(&got), want);
}

#[test]
fn a_tree_restored_stopped_runs_on_when_continued() {
    let want = format!("start\n{}", unmoved(PIPELINE));
    let r = Running::start(sh(&format!("echo start; {PIPELINE}")), true);
    let_run(300);
    let (img, mut all) = r.dump_and_kill("stopped-tree.img");
    let image = image_at(&img);
    let (fds, out) = stdio(null());
    let tree = restore_tree(
        &ImageFile::open(File::open(&img).expect("open"), true).expect("image"),
        fds,
        &RestoreOptions {
            stopped: true,
            die_with_caller: true,
            ..Default::default()
        },
    )
    .expect("restore");
    let procs = tree.processes().expect("processes");
    assert_eq!(procs.len(), image.procs.len() + 1, "init and the tree");
    for &p in &procs[1..] {
        assert!(
            matches!(common::state(p).as_str(), "T" | "Z"),
            "pid {p} not stopped"
        );
    }
    tree.cont().expect("continue");
    let r = Running {
        tree: Some(tree),
        reader: Some(gather(out)),
        head: Vec::new(),
    };
    let (st, rest) = r.finish();
    all.extend(rest);
    assert!(st.success(), "{st:?}");
    assert_eq!(String::from_utf8_lossy(&all), want);
}

#[test]
fn a_shell_caught_between_vfork_and_exec_is_stopped_and_saved() {
    // dash starts each command with vfork: a child stopped before its exec
    // leaves the shell waiting, uninterruptibly, for that exec. Stopped
    // the daemon's way (SIGSTOP to the group) and then by stop_tree, the
    // tree stops whole and is saved, again and again.
    let script = "echo start; i=0; while [ $i -lt 4000 ]; do /bin/true; i=$((i+1)); done; echo $i";
    let want = unmoved(script);
    let r = Running::start(sh(script), true);
    for i in 0..15 {
        let_run(20);
        let group = nix::unistd::Pid::from_raw(r.tree().init());
        nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGSTOP).expect("SIGSTOP");
        r.tree().stop(Duration::from_secs(10)).expect("stop");
        let path = scratch().join(format!("vfork-{i}.img"));
        let mut f = File::create(&path).expect("create");
        dump_tree(r.tree().init(), &stdio_options(), &mut f).expect("dump");
        r.tree().cont().expect("continue");
    }
    let (st, got) = r.finish();
    assert!(st.success(), "{st:?}");
    assert_eq!(String::from_utf8_lossy(&got), want);
}

#[test]
fn one_process_saved_by_dump_is_restored_in_a_namespace_with_its_pid() {
    let (_, mut c) = program_in_namespace("heap", &["8", "4000"]);
    let want = String::from_utf8_lossy(&c.output().expect("run").stdout).into_owned();
    let (_, mut c) = program_in_namespace("heap", &["8", "4000"]);
    let r = common::Running::start({
        c.stdin(std::process::Stdio::null());
        c
    });
    let_run(50);
    let pid = r.pid();
    r.stop();
    let img = common::dump_to_file(pid, "dump-into-ns.img");
    assert!(!image_at(&img).keep_pids);
    let mut all = r.kill();
    let restored = Running::restore(&img);
    let p = restored.tree().program().expect("running");
    let st = std::fs::read_to_string(format!("/proc/{p}/status")).expect("status");
    assert_eq!(mig_ckpt::proc::parse_ids(&st).expect("ids").pid, pid);
    let (st, rest) = restored.finish();
    all.extend(rest);
    assert!(st.success(), "{st:?}");
    assert_eq!(String::from_utf8_lossy(&all), want);
}

/// A cgroup of the v1 freezer hierarchy for one test, removed at the end.
struct Cgroup(PathBuf);

impl Cgroup {
    fn new(name: &str) -> Cgroup {
        let dir = PathBuf::from(format!(
            "/sys/fs/cgroup/freezer/mig-ckpt-{}-{name}",
            std::process::id()
        ));
        std::fs::create_dir(&dir).expect("a freezer cgroup (root, cgroup v1 freezer mounted)");
        Cgroup(dir)
    }

    fn procs(&self) -> OwnedFd {
        std::fs::OpenOptions::new()
            .write(true)
            .open(self.0.join("cgroup.procs"))
            .expect("cgroup.procs")
            .into()
    }

    /// Whether `pid` is in it.
    fn holds(&self, pid: i32) -> bool {
        let name = self
            .0
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .expect("cgroup")
            .lines()
            .any(|l| l.contains(":freezer:") && l.ends_with(&format!("/{name}")))
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        for _ in 0..100 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            let_run(10);
        }
    }
}

#[test]
fn a_tree_is_born_in_the_cgroup_it_is_given_and_restored_into_it() {
    let before = Cgroup::new("spawn");
    let after = Cgroup::new("restore");
    let fd = before.procs();
    let (fds, out) = stdio(null());
    let mut s = sh("echo start; sleep 30 | cat");
    s.fds = fds;
    s.die_with_caller = true;
    s.join = vec![std::os::fd::AsRawFd::as_raw_fd(&fd)];
    let tree = spawn_in_namespace(s).expect("spawn");
    let mut r = Running {
        tree: Some(tree),
        reader: Some(gather(out)),
        head: Vec::new(),
    };
    while r.tree().processes().expect("processes").len() < 4 {
        let_run(1);
    }
    let procs = r.tree().processes().expect("processes");
    assert!(procs.iter().all(|&p| before.holds(p)), "{procs:?}");
    r.tree().stop(Duration::from_secs(10)).expect("stop");
    let path = scratch().join("cgroup.img");
    let mut f = File::create(&path).expect("create");
    dump_tree(r.tree().init(), &stdio_options(), &mut f).expect("dump");
    let mut t = r.tree.take().expect("tree");
    t.kill().expect("kill");
    t.wait().expect("wait");
    drop(r);

    let img = ImageFile::open(File::open(&path).expect("open"), true).expect("image");
    let (fds, _out) = stdio(null());
    let fd = after.procs();
    let mut tree = restore_tree(
        &img,
        fds,
        &RestoreOptions {
            die_with_caller: true,
            join: vec![std::os::fd::AsRawFd::as_raw_fd(&fd)],
            ..Default::default()
        },
    )
    .expect("restore");
    let procs = tree.processes().expect("processes");
    assert_eq!(procs.len(), 4, "init, sh, sleep, cat");
    assert!(procs.iter().all(|&p| after.holds(p)), "{procs:?}");
    tree.kill().expect("kill");
    tree.wait().expect("wait");
}

/// A cgroup v2 directory under the unified hierarchy, removed at the end.
struct Unified(PathBuf);

impl Unified {
    fn new(name: &str) -> Unified {
        let root = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
            .into_iter()
            .find(|r| {
                Path::new(r).join("cgroup.procs").exists()
                    && Path::new(r).join("cgroup.controllers").exists()
            })
            .expect("a cgroup v2 hierarchy");
        let dir = Path::new(root).join(format!("mig-ckpt-{}-{name}", std::process::id()));
        std::fs::create_dir(&dir).expect("a cgroup v2 directory (root)");
        Unified(dir)
    }

    fn dir(&self) -> OwnedFd {
        File::open(&self.0).expect("its directory").into()
    }

    /// Whether `pid` is in it.
    fn holds(&self, pid: i32) -> bool {
        let name = self
            .0
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .expect("cgroup")
            .lines()
            .any(|l| l.starts_with("0::") && l.ends_with(&format!("/{name}")))
    }
}

impl Drop for Unified {
    fn drop(&mut self) {
        for _ in 0..100 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            let_run(10);
        }
    }
}

/// A tree restored `into` a cgroup v2 directory is born there (no write
/// into its `cgroup.procs`); given a descriptor that is no cgroup, it
/// writes itself into the files it is given instead.
#[test]
fn a_tree_restored_into_a_cgroup_directory_is_born_there_or_joins_instead() {
    let (fds, out) = stdio(null());
    let mut s = sh("echo start; sleep 30 | cat");
    s.fds = fds;
    s.die_with_caller = true;
    let tree = spawn_in_namespace(s).expect("spawn");
    let mut r = Running {
        tree: Some(tree),
        reader: Some(gather(out)),
        head: Vec::new(),
    };
    while r.tree().processes().expect("processes").len() < 4 {
        let_run(1);
    }
    r.tree().stop(Duration::from_secs(10)).expect("stop");
    let path = scratch().join("into.img");
    let mut f = File::create(&path).expect("create");
    dump_tree(r.tree().init(), &stdio_options(), &mut f).expect("dump");
    let mut t = r.tree.take().expect("tree");
    t.kill().expect("kill");
    t.wait().expect("wait");
    drop(r);

    let born = Unified::new("born");
    let instead = Cgroup::new("instead");
    let no_cgroup: OwnedFd = File::open(&path).expect("a file").into();
    for (into, in_v2) in [(born.dir(), true), (no_cgroup, false)] {
        let img = ImageFile::open(File::open(&path).expect("open"), true).expect("image");
        let (fds, _out) = stdio(null());
        let procs = instead.procs();
        let mut tree = restore_tree(
            &img,
            fds,
            &RestoreOptions {
                die_with_caller: true,
                into: Some(std::os::fd::AsRawFd::as_raw_fd(&into)),
                join_instead: vec![std::os::fd::AsRawFd::as_raw_fd(&procs)],
                ..Default::default()
            },
        )
        .expect("restore");
        let procs = tree.processes().expect("processes");
        assert_eq!(procs.len(), 4, "init, sh, sleep, cat");
        if in_v2 {
            assert!(procs.iter().all(|&p| born.holds(p)), "{procs:?}");
            assert!(!procs.iter().any(|&p| instead.holds(p)), "{procs:?}");
        } else {
            assert!(procs.iter().all(|&p| instead.holds(p)), "{procs:?}");
        }
        tree.kill().expect("kill");
        tree.wait().expect("wait");
    }
}

#[test]
fn a_tree_tied_to_its_callers_thread_ends_with_it() {
    let mut tree = std::thread::spawn(|| {
        let (fds, _out) = stdio(null());
        let mut s = sh("sleep 30");
        s.fds = fds;
        s.die_with_caller = true;
        spawn_in_namespace(s).expect("spawn")
    })
    .join()
    .expect("thread");
    // The thread that started it has ended: the namespace is killed.
    let st = tree.wait().expect("wait");
    assert_eq!(st.signal(), Some(libc::SIGKILL), "{st:?}");
}
