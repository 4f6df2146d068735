//! Real programs moved mid-run: stopped, dumped, killed, restored as a new
//! process with a fresh pipe on stdout; what they print is what a run
//! without a move prints.

mod common;

use std::io::Write;
use std::process::Command;

use common::*;

/// What `cmd` prints when nothing moves it.
fn unmoved(mut cmd: Command) -> String {
    let out = cmd.output().expect("run");
    assert!(out.status.success(), "{cmd:?} failed on its own");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `make()`'s program, moving it `moves` times `gap_ms` apart; returns
/// all it printed, across every process it was.
fn moved(make: impl Fn() -> Command, moves: usize, gap_ms: u64, name: &str) -> String {
    let mut r = Running::start(make());
    let mut all = Vec::new();
    for i in 0..moves {
        let_run(gap_ms);
        let img = format!("{name}-{i}.img");
        let (next, before) = move_once(r, &img);
        if i % 2 == 1 {
            // Deleted under the restored process, as a caller cleaning up
            // would: its pages stay its own, and the next dump saves them.
            std::fs::remove_file(scratch().join(&img)).expect("remove image");
        }
        all.extend(before);
        r = next;
    }
    let (code, rest) = r.finish();
    all.extend(rest);
    assert_eq!(code, 0, "{name} exited with {code}");
    String::from_utf8_lossy(&all).into_owned()
}

fn heap(mib: &str, rounds: &str) -> Command {
    let mut c = Command::new(program("heap"));
    c.args([mib, rounds]);
    c
}

#[test]
fn heap_program_moved_once_prints_its_answer() {
    let want = unmoved(heap("32", "4000"));
    assert_eq!(moved(|| heap("32", "4000"), 1, 100, "heap-once"), want);
}

#[test]
fn heap_program_moved_six_times_prints_its_answer() {
    // A restored process's memory is mapped from its image: each later
    // dump must save it as the process's own.
    let want = unmoved(heap("32", "8000"));
    assert_eq!(moved(|| heap("32", "8000"), 6, 40, "heap-chain"), want);
}

fn sh_loop() -> Command {
    let mut c = Command::new("/bin/sh");
    c.args([
        "-c",
        "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); \
         if [ $((i % 1000)) -eq 0 ]; then echo $i; fi; done; echo done",
    ]);
    c
}

#[test]
fn shell_loop_moved_twice_counts_on() {
    let want = unmoved(sh_loop());
    assert_eq!(moved(sh_loop, 2, 60, "sh"), want);
}

/// The system's Python (not one of ours), if there is one.
fn python() -> Command {
    let mut c = Command::new("/usr/bin/python3");
    c.args([
        "-c",
        "import time\n\
         t = 0\n\
         for i in range(2000000):\n\
         \x20   t = (t * 31 + i * i) % 1000000007\n\
         \x20   if i % 100000 == 0: print(i, flush=True)\n\
         time.sleep(0.2)\n\
         print(t)\n",
    ]);
    c
}

#[test]
fn python_moved_twice_prints_its_answer() {
    assert!(
        std::path::Path::new("/usr/bin/python3").exists(),
        "/usr/bin/python3 is needed (Debian's python3-minimal)"
    );
    let want = unmoved(python());
    assert_eq!(moved(python, 2, 80, "python"), want);
}

fn awk() -> Command {
    let mut c = Command::new("awk");
    c.args([
        "BEGIN { s = 0; for (i = 0; i < 3000000; i++) { s = (s * 31 + i) % 1000003; \
         if (i % 100000 == 0) { print i; fflush() } } print s }",
    ]);
    c
}

#[test]
fn awk_moved_twice_prints_its_answer() {
    let want = unmoved(awk());
    assert_eq!(moved(awk, 2, 60, "awk"), want);
}

fn perl() -> Command {
    let mut c = Command::new("perl");
    c.args([
        "-e",
        "$| = 1; my $s = 0; for my $i (0 .. 3000000) { $s = ($s * 31 + $i) % 1000003; \
         print \"$i\\n\" if $i % 100000 == 0 } print \"$s\\n\"",
    ]);
    c
}

#[test]
fn perl_moved_twice_prints_its_answer() {
    let want = unmoved(perl());
    assert_eq!(moved(perl, 2, 60, "perl"), want);
}

#[test]
fn a_read_interrupted_by_the_move_goes_on_from_the_new_stdin() {
    // The shell is stopped inside read(2) on its stdin; the restored one
    // reads the fresh pipe it is given on fd 0.
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", "echo ready; read x; echo got $x"]);
    let (old_r, _old_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
    cmd.stdin(std::process::Stdio::from(old_r));
    let r = Running::start_keep_stdin(cmd);
    let_run(50);
    r.stop();
    let img = dump_to_file(r.pid(), "read.img");
    let before = r.kill();
    let (new_r, new_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
    let restored = restore_with_stdin(&img, new_r);
    let mut w = std::fs::File::from(new_w);
    w.write_all(b"hello\n").expect("write");
    drop(w);
    let (code, after) = restored.finish();
    assert_eq!(code, 0);
    assert_eq!(String::from_utf8_lossy(&before), "ready\n");
    assert_eq!(String::from_utf8_lossy(&after), "got hello\n");
}

fn threads() -> Command {
    let mut c = Command::new(program("threads"));
    c.args(["16", "3000"]);
    c
}

#[test]
fn pthreads_program_moved_three_times_prints_its_answer() {
    // Four workers and main (in pthread_join) are all saved and re-made;
    // pthread_kill and raise at the end use the tids glibc cached.
    let want = unmoved(threads());
    let r = Running::start(threads());
    let_run(60);
    r.stop();
    let img = dump_to_file(r.pid(), "threads-first.img");
    let mut all = r.kill();
    let image = mig_ckpt::ImageFile::open(std::fs::File::open(&img).expect("open"), false)
        .expect("image")
        .image()
        .clone();
    let meta = image.live().next().expect("a process");
    assert_eq!(meta.threads.len(), 5, "main and four workers saved");
    assert!(
        meta.threads.iter().all(|t| t.cached_tid_at.is_some()),
        "glibc's cached tid found for every thread"
    );
    let mut r = restore_from(&img);
    for i in 0..2 {
        let_run(60);
        let (next, before) = move_once(r, &format!("threads-{i}.img"));
        all.extend(before);
        r = next;
    }
    let (code, rest) = r.finish();
    all.extend(rest);
    assert_eq!(code, 0);
    assert_eq!(String::from_utf8_lossy(&all), want);
}

#[test]
fn open_files_and_file_mappings_survive_two_moves() {
    // A log kept open with O_APPEND (reopened by path at its offset), a
    // counter in a shared file mapping (mapped again), a private file
    // mapping the program changed (its changed pages in the image).
    let alone = tempfile::tempdir().expect("dir");
    let mut c = Command::new(program("files"));
    c.arg(alone.path()).arg("200000");
    let want = unmoved(c);
    let dir = tempfile::tempdir().expect("dir");
    let files = || {
        let mut c = Command::new(program("files"));
        c.arg(dir.path()).arg("200000");
        c
    };
    let got = moved(files, 2, 60, "files");
    assert_eq!(got, want);
    assert!(
        got.ends_with(" 0\n"),
        "every line of the log in order: {got}"
    );
}

#[test]
fn a_block_grown_by_realloc_after_a_move_keeps_its_bytes() {
    // glibc grows a large block with mremap; a block restored from the
    // image spans two mappings, so mremap refuses and glibc copies.
    let grow = || {
        let mut c = Command::new(program("grow"));
        c.args(["8", "100000000"]);
        c
    };
    let want = unmoved(grow());
    let got = moved(grow, 1, 60, "grow");
    assert_eq!(got, want);
    assert!(got.ends_with(" 0\n"), "every byte as written: {got}");
}

#[test]
fn a_process_restored_stopped_runs_on_when_continued() {
    let want = unmoved(heap("8", "3000"));
    let r = Running::start(heap("8", "3000"));
    let_run(30);
    r.stop();
    let img = dump_to_file(r.pid(), "stopped.img");
    let mut all = r.kill();
    let restored = restore_with(&img, true);
    let pid = restored.pid();
    assert_eq!(state(pid), "T", "restored stopped");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGCONT,
    )
    .expect("SIGCONT");
    let (code, rest) = restored.finish();
    all.extend(rest);
    assert_eq!(code, 0);
    assert_eq!(String::from_utf8_lossy(&all), want);
}

fn self_pipe() -> Command {
    let mut c = Command::new("/usr/bin/python3");
    c.args([
        "-c",
        "import os, time\n\
         r, w = os.pipe()\n\
         os.write(w, b'in flight')\n\
         print('start', flush=True)\n\
         time.sleep(0.5)\n\
         os.write(w, b', and after')\n\
         os.close(w)\n\
         print(os.read(r, 100).decode())\n",
    ]);
    c
}

#[test]
fn a_pipe_to_itself_keeps_its_bytes_across_a_move() {
    // Both ends in the one process: made again with the bytes in flight.
    let want = unmoved(self_pipe());
    assert_eq!(want, "start\nin flight, and after\n");
    assert_eq!(moved(self_pipe, 1, 150, "self-pipe"), want);
}
