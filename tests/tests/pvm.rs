//! PVM programs nobody here wrote, on real daemons: Debian's builds of PVM
//! 3.4's own examples (`pvm-examples`) run against our `libpvm3` (found
//! first through `LD_LIBRARY_PATH`), and the same examples built from their
//! sources against our `pvm3.h`. Each must print what PVM's `Readme` says
//! and exit as under PVM.
//!
//! The examples come from Debian's `pvm-examples`; as root the test installs
//! it when missing, otherwise it fails saying what to install.
//!
//! Debian's programs are also moved mid-run, from outside (they never say
//! they can move themselves), by `mig migrate` and by an owner reclaim:
//! each worker waits behind a gate (a shell that becomes Debian's program
//! once the test lets it), so that the moves fall in the middle of their
//! conversations, and they print what they print unmoved.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use mig_tests::{bin, debian_package, job_lines, pvm_library, tied, tool, Vm};

/// Debian's examples, installed if need be.
fn examples() -> PathBuf {
    let dir = PathBuf::from("/usr/bin");
    debian_package("pvm-examples", || dir.join("hello.pvm").is_file());
    dir
}

/// A directory where our library answers to every name PVM's programs
/// load it by (`libpvm3.so.3`, `libgpvm3.so.3`) and link it by (`-lpvm3`).
fn our_lib() -> tempfile::TempDir {
    let lib = pvm_library();
    let dir = tempfile::tempdir().expect("tempdir");
    for name in ["libpvm3.so.3", "libgpvm3.so.3", "libpvm3.so", "libfpvm3.so"] {
        std::os::unix::fs::symlink(&lib, dir.path().join(name)).expect("symlink");
    }
    dir
}

/// PVM's example sources (Debian's `pvm-examples`), unpacked: the
/// directory holds `examples/`.
fn pvm_sources() -> tempfile::TempDir {
    examples();
    let src = tempfile::tempdir().expect("tempdir");
    let ok = Command::new("tar")
        .args(["xzf", "/usr/share/doc/pvm-examples/examples.tar.gz", "-C"])
        .arg(src.path())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "cannot unpack PVM's example sources");
    src
}

/// Compile the C program `source` into `exe` against our headers and
/// library (found at run time through its rpath), with `flags`.
fn cc(source: &Path, exe: &Path, lib: &Path, flags: &[&str]) {
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../pvm3/include");
    let out = Command::new("cc")
        .args(flags)
        .arg("-o")
        .arg(exe)
        .arg(source)
        .arg("-I")
        .arg(&include)
        .arg("-L")
        .arg(lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lpvm3")
        .output()
        .expect("cc");
    assert!(
        out.status.success(),
        "cc {}: {}",
        source.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `mig spawn -n N --wait` of a PVM program with our library.
fn spawn(vm: &Vm, lib: &Path, n: u32, prog: &Path, env: &[(&str, &Path)]) -> Output {
    let n = n.to_string();
    let ld = format!("LD_LIBRARY_PATH={}", lib.display());
    let mut args = vec!["spawn", "-n", &n, "-e", &ld];
    let pairs: Vec<String> = env
        .iter()
        .map(|(k, v)| format!("{k}={}", v.display()))
        .collect();
    for p in &pairs {
        args.extend(["-e", p.as_str()]);
    }
    let p = prog.display().to_string();
    args.extend(["--wait", "--", &p]);
    vm.mig(&args)
}

/// The lines of a job that must have succeeded.
fn ok_lines(out: &Output) -> Vec<String> {
    let lines = job_lines(out);
    assert!(
        out.status.success(),
        "{lines:?}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    lines
}

/// master1's lines: each "I got X from W; (expecting Y)" with X == Y, one
/// per worker, the workers 0..n.
fn master1_answers_right(lines: &[String], n: usize) {
    let mut who: Vec<usize> = Vec::new();
    for l in lines.iter().filter(|l| l.starts_with("I got ")) {
        let words: Vec<&str> = l.split_whitespace().collect();
        let got: f64 = words[2].parse().expect("a number");
        let from: usize = words[4].trim_end_matches(';').parse().expect("a worker");
        let want: f64 = words[6].trim_end_matches(')').parse().expect("a number");
        assert_eq!(got, want, "{l}");
        who.push(from);
    }
    who.sort();
    assert_eq!(who, (0..n).collect::<Vec<_>>(), "{lines:?}");
}

#[test]
fn debians_builds_of_pvms_examples_run_on_mig_as_they_are() {
    let ex = examples();
    let lib = our_lib();
    let vm = Vm::start(3);

    // From a shell, as the Readme runs it: hello enrols (it is started
    // again as a job of one VP), spawns hello_other and prints its greeting.
    let out = tied(Command::new(ex.join("hello.pvm")))
        .env("LD_LIBRARY_PATH", lib.path())
        .env("MIG_DAEMON", vm.sock())
        .env("MIG_BIN", bin("mig"))
        .output()
        .expect("run hello");
    let lines = job_lines(&out);
    assert!(
        out.status.success(),
        "{lines:?}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let me = lines
        .iter()
        .find_map(|l| l.strip_prefix("i'm t"))
        .expect("i'm tX");
    let from = lines
        .iter()
        .find_map(|l| l.strip_prefix("from t"))
        .expect("from tY: hello, world from HOST");
    assert!(from.contains(": hello, world from "), "{lines:?}");
    assert_ne!(
        from.split(':').next(),
        Some(me),
        "hello_other is another task"
    );

    // master1 spawns 3 workers per host pvm_config lists (3 hosts) and
    // checks their sums.
    let lines = ok_lines(&spawn(&vm, lib.path(), 1, &ex.join("master1"), &[]));
    assert!(
        lines
            .iter()
            .any(|l| l.contains("Spawning 9 worker tasks ... SUCCESSFUL")),
        "{lines:?}"
    );
    master1_answers_right(&lines, 9);

    // The Fortran master and workers (Debian links PVM's Fortran wrappers
    // into them; they call our C library).
    let lines = ok_lines(&spawn(&vm, lib.path(), 1, &ex.join("fmaster1"), &[]));
    let got: Vec<&String> = lines.iter().filter(|l| l.contains("I got")).collect();
    assert_eq!(got.len(), 9, "{lines:?}");
    for l in got {
        let w: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(w[2], w[6], "{l}");
    }
    let lines = ok_lines(&spawn(&vm, lib.path(), 4, &ex.join("fspmd"), &[]));
    assert!(
        lines.iter().any(|l| l.contains("token ring done")),
        "{lines:?}"
    );

    // PVM's timing: round trips and bandwidth with timing_slave (direct
    // route asked); it ends with exit(1) under PVM too.
    let out = spawn(&vm, lib.path(), 1, &ex.join("timing"), &[]);
    let lines = job_lines(&out);
    assert_eq!(out.status.code(), Some(1), "{lines:?}");
    assert!(
        lines.iter().any(|l| l.starts_with("RTT Avg uSec")),
        "{lines:?}"
    );
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("Avg Byte/uSec"))
            .count(),
        5,
        "one line of rates per message size: {lines:?}"
    );
    assert!(lines.iter().any(|l| l == "done"), "{lines:?}");

    // inheritb spawns two children each in a context of its own, then
    // receives from "anyone" in one context, then in the other: each time
    // from the child of that context.
    let lines = ok_lines(&spawn(&vm, lib.path(), 1, &ex.join("inheritb"), &[]));
    let ctx_of = |l: &str| {
        l.split("context ")
            .nth(1)
            .and_then(|c| c.split(|ch: char| !ch.is_ascii_digit()).next())
            .map(str::to_string)
    };
    let new_ctx = |n: &str| {
        lines
            .iter()
            .find(|l| l.contains(&format!("with new #{n} context")) && l.contains("spawn"))
            .and_then(|l| ctx_of(l))
    };
    let from = |n: &str| {
        lines
            .iter()
            .find(|l| l.contains(&format!("received from {n} inherit2")))
            .and_then(|l| ctx_of(l))
    };
    assert!(
        new_ctx("1").is_some() && new_ctx("1") != new_ctx("2"),
        "{lines:?}"
    );
    assert_eq!(from("1st"), new_ctx("1"), "{lines:?}");
    assert_eq!(from("2nd"), new_ctx("2"), "{lines:?}");

    // The Fortran group example: six tasks, a broadcast, two reductions.
    let lines = ok_lines(&spawn(&vm, lib.path(), 1, &ex.join("fgexample"), &[]));
    assert!(
        lines
            .iter()
            .any(|l| l.contains("The 1-Norm is         5050")),
        "{lines:?}"
    );

    // Contexts are inherited: inherita sets a new one, which its child
    // (and grandchild) report; inherit3 sets its own, which its child gets.
    let ld = format!("LD_LIBRARY_PATH={}", lib.path().display());
    let inherita = ex.join("inherita").display().to_string();
    for (child, contexts) in [("inherit1", 1), ("inherit3", 2)] {
        let lines = ok_lines(&vm.mig(&["spawn", "-e", &ld, "--wait", "--", &inherita, child]));
        let changed = lines
            .iter()
            .find_map(|l| l.split("with changed context ").nth(1))
            .map(|c| c.trim_end_matches('.').to_string())
            .expect("inherita changes its context");
        let mut seen: Vec<String> = lines
            .iter()
            .filter_map(|l| l.split(" with context ").nth(1))
            .map(|c| c.trim_end_matches('.').to_string())
            .collect();
        assert!(
            seen.contains(&changed),
            "the child inherits {changed}: {lines:?}"
        );
        assert!(
            lines.iter().any(|l| l.contains("END - sent from")),
            "{lines:?}"
        );
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), contexts, "{lines:?}");
    }

    // spmd, four siblings passing a token round a ring; it exits 1 under
    // PVM too (its last line is exit(1)).
    let out = spawn(&vm, lib.path(), 4, &ex.join("spmd"), &[]);
    let lines = job_lines(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{lines:?}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("Pass a token through the   4 tid ring")),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("token ring done")),
        "{lines:?}"
    );
}

#[test]
fn pvms_mailbox_examples_find_each_other_through_it() {
    let ex = examples();
    let lib = our_lib();
    let vm = Vm::start(2);
    let ld = format!("LD_LIBRARY_PATH={}", lib.path().display());
    let run = |prog: &str, args: &[&str]| {
        let p = ex.join(prog).display().to_string();
        let mut a = vec!["spawn", "-e", &ld, "--wait", "--", &p];
        a.extend_from_slice(args);
        ok_lines(&vm.mig(&a))
    };
    // task0 puts a service and its context in the mailbox and serves
    // whoever finds it there; task1 finds it; task_end stops it.
    let p = ex.join("task0").display().to_string();
    let server = vm.mig(&["spawn", "-e", &ld, "--", &p, "svc", "d"]);
    assert!(
        server.status.success(),
        "{}",
        String::from_utf8_lossy(&server.stderr)
    );
    let job = String::from_utf8_lossy(&server.stdout).trim().to_string();
    let mut lines = Vec::new();
    let found = mig_tests::wait_until(std::time::Duration::from_secs(30), || {
        // (Until task0 has put its entry, task1 finds none and exits 255.)
        let p = ex.join("task1").display().to_string();
        lines = job_lines(&vm.mig(&["spawn", "-e", &ld, "--wait", "--", &p, "svc"]));
        lines
            .iter()
            .any(|l| l.contains("you are service request number 1"))
    });
    assert!(found, "{lines:?}\n{}", vm.log(0));
    let lines = run("task_end", &["svc", "0"]);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("service name <svc> of index 0")),
        "{lines:?}"
    );
    let ended = mig_tests::wait_until(std::time::Duration::from_secs(30), || {
        vm.log(0)
            .contains(&format!("job {job} finished with status 0"))
    });
    assert!(ended, "task0 did not end:\n{}", vm.log(0));
    // Entries outlive their owner only when persistent: lmbi loads three
    // of each kind and exits; gmbi then lists the persistent three.
    run("lmbi", &["3", "m", "e"]);
    run("lmbi", &["3", "mp", "e"]);
    let lines = run("gmbi", &[]);
    let listed = lines.iter().filter(|l| l.contains("indices <")).count();
    assert_eq!(listed, 3, "{lines:?}");
    assert!(
        lines.iter().any(|l| l.contains("PvmMboxPersistent")),
        "{lines:?}"
    );
}

#[test]
fn pvms_examples_built_from_source_against_our_header_run_too() {
    examples();
    let lib = our_lib();
    let src = pvm_sources();
    let ex = src.path().join("examples");
    let out_dir = tempfile::tempdir().expect("tempdir");
    for prog in ["hello", "hello_other", "master1", "slave1"] {
        let exe = out_dir.path().join(prog);
        cc(
            &ex.join(format!("{prog}.c")),
            &exe,
            lib.path(),
            &["-w", "-std=gnu89"],
        );
    }
    let vm = Vm::start(2);
    // PVM_EP names where spawned programs are found, as PVM's ep= does.
    let ep = [("PVM_EP", out_dir.path())];
    let out = spawn(&vm, lib.path(), 1, &out_dir.path().join("hello"), &ep);
    let lines = job_lines(&out);
    assert!(
        out.status.success(),
        "{lines:?}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("from t") && l.contains("hello, world from")),
        "{lines:?}"
    );
    let lines = ok_lines(&spawn(
        &vm,
        lib.path(),
        1,
        &out_dir.path().join("master1"),
        &ep,
    ));
    master1_answers_right(&lines, 6);
}

#[test]
fn pvm_calls_do_what_pvm_documents() {
    // pvm3/c/selftest.c checks each call (every type with strides in both
    // encodings, packf, nrecv/trecv/probe, contexts, handlers, psend/precv,
    // mcast, groups and reduce, config/tasks/mstat, errors, exit notices)
    // with three echo workers it spawns.
    let lib = our_lib();
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build_c("selftest", lib.path(), dir.path());
    let vm = Vm::start(3);
    let lines = ok_lines(&spawn(&vm, lib.path(), 1, &exe, &[]));
    assert!(
        lines.iter().any(|l| l == "selftest ok: 0 failed"),
        "{lines:?}"
    );
    // pvm_sendsig reached a worker on another host.
    let elsewhere: u32 = lines
        .iter()
        .find_map(|l| l.strip_prefix("selftest: "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("how many workers were elsewhere");
    assert!(elsewhere >= 1, "{lines:?}");
}

/// Build one of `pvm3/c/` against our headers and library (found at run
/// time through its rpath).
fn build_c(name: &str, lib: &Path, into: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../pvm3/c");
    let exe = into.join(name);
    cc(&src.join(format!("{name}.c")), &exe, lib, &["-Wall"]);
    exe
}

#[test]
fn a_c_program_keeps_its_state_through_moves_with_mig_h() {
    let lib = our_lib();
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build_c("migrating", lib.path(), dir.path());
    let vm = Vm::start(2);
    let job = vm.start_job(1, &exe, &["1500"]);
    let mut tid = String::new();
    let mut host = String::new();
    let placed = mig_tests::wait_until(std::time::Duration::from_secs(30), || {
        let ps = vm.json(&["ps"]);
        let Some(v) = ps.as_array().and_then(|a| a.first()).cloned() else {
            return false;
        };
        tid = v["tid"].as_str().unwrap_or("").to_string();
        host = v["host"].as_str().unwrap_or("").to_string();
        v["movable"] == true && v["state"] == "running"
    });
    assert!(placed, "the VP never said it can be moved:\n{}", vm.log(0));
    // There and back again.
    for _ in 0..2 {
        let to = if host == "h0" { "h1" } else { "h0" };
        let out = vm.migrate(&tid, to);
        assert!(
            out.status.success(),
            "mig migrate: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let moved = mig_tests::wait_until(std::time::Duration::from_secs(30), || {
            vm.where_is(&tid)
                .is_some_and(|(h, s)| h == to && s == "running")
        });
        assert!(moved, "{tid} did not reach {to}:\n{}", vm.log(0));
        host = to.to_string();
    }
    let lines = mig_tests::job_succeeds(job, &vm.log(0));
    assert!(
        lines.iter().any(|l| l.starts_with("restored at step")),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.ends_with("after 2 moves: OK")),
        "{lines:?}"
    );
}

#[test]
fn pvms_fortran_examples_built_with_gfortran_against_our_fpvm3_h_run() {
    tool("gfortran", "gfortran");
    let lib = our_lib();
    let src = pvm_sources();
    // The sources include '../include/fpvm3.h'.
    let include = src.path().join("include");
    std::fs::create_dir_all(&include).expect("mkdir");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../pvm3/include/fpvm3.h"),
        include.join("fpvm3.h"),
    )
    .expect("copy fpvm3.h");
    let bin = tempfile::tempdir().expect("tempdir");
    for prog in ["master1", "slave1", "spmd", "gexample"] {
        let out = Command::new("gfortran")
            // PVM's examples pass scalars where arrays are declared, as
            // Fortran 77 code does.
            .args(["-w", "-fallow-argument-mismatch", "-o"])
            .arg(bin.path().join(format!("f{prog}")))
            .arg(format!("{prog}.f"))
            .arg("-L")
            .arg(lib.path())
            .arg(format!("-Wl,-rpath,{}", lib.path().display()))
            .args(["-lfpvm3", "-lpvm3"])
            .current_dir(src.path().join("examples"))
            .output()
            .expect("gfortran");
        assert!(
            out.status.success(),
            "gfortran {prog}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let vm = Vm::start(3);
    let ep = [("PVM_EP", bin.path())];
    let lines = ok_lines(&spawn(
        &vm,
        lib.path(),
        1,
        &bin.path().join("fmaster1"),
        &ep,
    ));
    let got: Vec<&String> = lines.iter().filter(|l| l.contains("I got")).collect();
    assert_eq!(got.len(), 9, "{lines:?}");
    for l in got {
        let w: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(w[2], w[6], "{l}");
    }
    let lines = ok_lines(&spawn(&vm, lib.path(), 4, &bin.path().join("fspmd"), &ep));
    assert!(
        lines.iter().any(|l| l.contains("token ring done")),
        "{lines:?}"
    );
    // gexample: a group of six, a broadcast and two reductions.
    let lines = ok_lines(&spawn(
        &vm,
        lib.path(),
        1,
        &bin.path().join("fgexample"),
        &ep,
    ));
    assert!(
        lines
            .iter()
            .any(|l| l.contains("The 1-Norm is         5050")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("The product of column 1 is   9.33262154439")),
        "{lines:?}"
    );
}

#[test]
fn pvms_mailbox_test_program_gets_the_statuses_its_own_table_expects() {
    // mbox.c (PVM's mailbox test, not built by Debian) lists invocations
    // and the exit status each must give; those that use its current
    // options, in order, on one virtual machine.
    let lib = our_lib();
    let src = pvm_sources();
    let exe = src.path().join("mbox");
    cc(
        &src.path().join("examples/mbox.c"),
        &exe,
        lib.path(),
        &["-w", "-std=gnu89"],
    );
    let vm = Vm::start(2);
    let p = exe.display().to_string();
    let table: &[(&[&str], i32)] = &[
        (&[], 1),
        (&["query"], 0),
        (&["pers"], 1),
        (&["query", "0"], 1),
        (&["query"], 1),
        (&["delete", "0"], 1),
        (&["query"], 0),
        (&["pers", "minst"], 1),
        (&["pers", "minst"], 1),
        (&["pers", "minst"], 1),
        (&["query"], 3),
        (&["delete"], 3),
        (&["query"], 0),
    ];
    for (args, want) in table {
        let mut a = vec!["spawn", "--wait", "--", p.as_str()];
        a.extend_from_slice(args);
        let out = vm.mig(&a);
        assert_eq!(
            out.status.code(),
            Some(*want),
            "mbox {args:?}: {:?}\n{}",
            job_lines(&out),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // PVM 3.3's database on the mailbox: inserts, refused re-inserts,
    // lookups, a delete.
    let out = vm.mig(&["spawn", "--wait", "--", &p, "default33"]);
    let lines = job_lines(&out);
    assert!(
        !lines
            .iter()
            .any(|l| l.contains("Uh-Oh") || l.contains("Mismatch")),
        "{lines:?}"
    );
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("Failed as Expected"))
            .count(),
        8,
        "{lines:?}"
    );
}

/// A real PVM 3.4.6 (Debian's `pvm`): its daemon on this host alone, with
/// a directory of its own (`PVM_TMP`), halted when dropped.
struct RealPvm {
    pvmd: std::process::Child,
    dir: tempfile::TempDir,
}

impl RealPvm {
    fn start() -> RealPvm {
        tool("/usr/lib/pvm3/lib/pvmd", "pvm");
        let dir = tempfile::tempdir().expect("tempdir");
        let hostfile = dir.path().join("hostfile");
        std::fs::write(
            &hostfile,
            format!("* ep=/usr/bin wd={}\n", dir.path().display()),
        )
        .expect("hostfile");
        let mut cmd = Command::new("/usr/lib/pvm3/lib/pvmd");
        cmd.arg(&hostfile)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let mut pvm = RealPvm {
            pvmd: Self::env(&mut tied(cmd), dir.path())
                .spawn()
                .expect("start pvmd"),
            dir,
        };
        // SAFETY: a plain system call.
        let uid = unsafe { libc::getuid() };
        let ready = pvm.dir.path().join(format!("pvmd.{uid}"));
        for _ in 0..200 {
            if ready.exists() {
                return pvm;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        let _ = pvm.pvmd.kill();
        panic!("pvmd did not start (no {})", ready.display());
    }

    /// What PVM's programs need to find this daemon.
    fn env<'a>(cmd: &'a mut Command, dir: &Path) -> &'a mut Command {
        cmd.env("PVM_ROOT", "/usr/lib/pvm3")
            .env("PVM_TMP", dir)
            .env("PVM_ALLOW_ROOT", "1")
            .env_remove("LD_LIBRARY_PATH")
            .current_dir(dir)
    }
}

impl Drop for RealPvm {
    fn drop(&mut self) {
        let _ = self.pvmd.kill();
        let _ = self.pvmd.wait();
    }
}

/// Where a PVM program started from a shell runs: Debian's build on a real
/// pvmd, or on mig (our library first on its path) a build in a directory
/// (Debian's in `/usr/bin`, or ours from PVM's sources).
enum System<'a> {
    Pvm(&'a RealPvm),
    Mig(&'a Vm, &'a Path, &'a Path),
}

impl System<'_> {
    fn command(&self, prog: &str, args: &[&str]) -> Command {
        let dir = match self {
            System::Pvm(_) => Path::new("/usr/bin"),
            System::Mig(_, _, dir) => dir,
        };
        let mut cmd = tied(Command::new(dir.join(prog)));
        cmd.args(args);
        match self {
            System::Pvm(p) => {
                RealPvm::env(&mut cmd, p.dir.path());
            }
            System::Mig(vm, lib, _) => {
                cmd.env("LD_LIBRARY_PATH", lib)
                    .env("MIG_DAEMON", vm.sock())
                    .env("MIG_BIN", bin("mig"));
            }
        }
        cmd
    }

    /// Run `prog` from a shell with `input` on its stdin: its exit status
    /// and what it printed.
    fn run(&self, prog: &str, args: &[&str], input: &str) -> (Option<i32>, String) {
        use std::io::Write;
        let mut child = self
            .command(prog, args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start the program");
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(input.as_bytes()).expect("write its input");
        drop(stdin);
        let out = child.wait_with_output().expect("wait for it");
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        (out.status.code(), text)
    }

    /// PVM's message handler example: `mhf_server` started from one shell,
    /// `mhf_tickle` from another loads a handler in the server, hits it,
    /// and tells the server to end. What each printed.
    fn message_handlers(&self) -> (String, String) {
        let server = self
            .command("mhf_server", &[])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start mhf_server");
        // Load string_catcher1 for (this client, tag 1, any context), hit
        // it with "hello", then SEAT.
        let script = "1\n1\n-1\n1\n4\n1\n0\n1\nhello\n9\n";
        let mut tickle = String::new();
        for _ in 0..40 {
            let (_, out) = self.run("mhf_tickle", &[], script);
            tickle = out;
            if !tickle.contains("Requested key does not exist") {
                break;
            }
            // The server has not registered yet.
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
        let out = server.wait_with_output().expect("mhf_server ends");
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        (tickle, text)
    }
}

/// A program's output with what differs between any two runs made the
/// same: Tids (`t40001`, and in decimal), contexts and other numbers of five
/// digits or more; the lines sorted (tasks print in any order); lines
/// about PVM's own message handlers (the ones libpvm installs for itself)
/// left out.
fn comparable(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| !l.contains("dhandles[") && !l.contains("Display Message Handler"))
        .map(|l| {
            let mut out = String::new();
            let b = l.as_bytes();
            let mut i = 0;
            while i < b.len() {
                let word_start = i == 0 || !b[i - 1].is_ascii_alphanumeric();
                let hex = b[i + 1..]
                    .iter()
                    .take_while(|c| c.is_ascii_hexdigit())
                    .count();
                let digits = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
                if word_start && b[i] == b't' && (5..=8).contains(&hex) {
                    out.push_str("tTID");
                    i += 1 + hex;
                } else if word_start && digits >= 5 {
                    out.push('N');
                    i += digits;
                } else {
                    out.push(b[i] as char);
                    i += 1;
                }
            }
            out.trim_end().to_string()
        })
        .filter(|l| !l.is_empty())
        .collect();
    lines.sort();
    lines
}

/// PVM's C examples built from their sources (`taskf.c` is the mailbox
/// examples' helper) against our `pvm3.h` and library, into one directory,
/// as PVM's `aimk` builds them.
fn examples_built_from_source(lib: &Path) -> tempfile::TempDir {
    let src = pvm_sources();
    let ex = src.path().join("examples");
    let out = tempfile::tempdir().expect("tempdir");
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../pvm3/include");
    let taskf = out.path().join("taskf.o");
    let ok = Command::new("cc")
        .args(["-w", "-std=gnu89", "-c", "-o"])
        .arg(&taskf)
        .arg(ex.join("taskf.c"))
        .arg("-I")
        .arg(&include)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "cc taskf.c");
    let taskf = taskf.display().to_string();
    for prog in [
        "hello",
        "hello_other",
        "master1",
        "slave1",
        "spmd",
        "timing",
        "timing_slave",
        "gexample",
        "inherit1",
        "inherit2",
        "inherit3",
        "inherita",
        "inheritb",
        "mhf_server",
        "mhf_tickle",
        "task0",
        "task1",
        "task_end",
        "gmbi",
        "lmbi",
    ] {
        cc(
            &ex.join(format!("{prog}.c")),
            &out.path().join(prog),
            lib,
            &["-w", "-std=gnu89", &taskf],
        );
    }
    // Debian names hello `hello.pvm`; the comparison runs it by that name.
    std::fs::rename(out.path().join("hello"), out.path().join("hello.pvm")).expect("rename");
    out
}

#[test]
fn the_same_programs_print_what_they_print_under_pvm_itself() {
    // PVM's examples started from a shell, one after another: Debian's
    // builds on a real PVM 3.4.6 of one host, then on a mig virtual
    // machine of one host, Debian's builds and the same C programs built
    // from PVM's sources against our header: the same lines (Tids and
    // contexts aside) and the same exit statuses. gmbi is left out: it
    // lists every mailbox entry, and PVM's group server leaves one of its
    // own there.
    examples();
    let pvm = RealPvm::start();
    let lib = our_lib();
    let ours = examples_built_from_source(lib.path());
    let vm = Vm::start(1);
    let debian = Path::new("/usr/bin");
    let programs: &[(&str, &[&str], &str)] = &[
        ("hello.pvm", &[], ""),
        ("master1", &[], ""),
        ("spmd", &[], ""),
        ("inheritb", &[], ""),
        ("inherita", &["inherit1"], ""),
        ("inherita", &["inherit3"], ""),
        ("lmbi", &[], ""),
        ("task0", &[], ""),
        ("task1", &[], ""),
        ("task_end", &[], ""),
        ("fmaster1", &[], ""),
        ("fspmd", &[], ""),
        ("fgexample", &[], ""),
        // Asks for the matrix's dimension and the number of tasks.
        ("gexample", &[], "10\n4\n"),
    ];
    for (prog, args, input) in programs {
        let (pvm_status, pvm_out) = System::Pvm(&pvm).run(prog, args, input);
        assert!(
            !comparable(&pvm_out).is_empty(),
            "{prog} printed nothing under PVM: is pvmd up? {pvm_out}"
        );
        for dir in [debian, ours.path()] {
            if !dir.join(prog).exists() {
                continue; // the Fortran ones: built by the gfortran test
            }
            let (mig_status, mig_out) = System::Mig(&vm, lib.path(), dir).run(prog, args, input);
            assert_eq!(
                comparable(&mig_out),
                comparable(&pvm_out),
                "{}/{prog} {args:?}: mig (left) and PVM (right) differ\nmig:\n{mig_out}\npvm:\n{pvm_out}",
                dir.display()
            );
            assert_eq!(
                mig_status,
                pvm_status,
                "{}/{prog} {args:?}: exit status",
                dir.display()
            );
        }
    }
    // timing ends by killing its slave (pvm_kill) and exit(1): the same
    // status, and nothing printed after its last line (the slave's end
    // is no failure of the job: its own job killed it).
    let (pvm_status, pvm_out) = System::Pvm(&pvm).run("timing", &[], "");
    assert_eq!(pvm_out.lines().last(), Some("done"), "{pvm_out}");
    for dir in [debian, ours.path()] {
        let (mig_status, mig_out) = System::Mig(&vm, lib.path(), dir).run("timing", &[], "");
        assert_eq!(
            mig_out.lines().last(),
            Some("done"),
            "{}/timing\n{mig_out}",
            dir.display()
        );
        assert_eq!(
            mig_status,
            pvm_status,
            "{}/timing: {mig_out}",
            dir.display()
        );
    }
    let (pvm_tickle, pvm_server) = System::Pvm(&pvm).message_handlers();
    assert!(
        pvm_server.contains("strings match <hello>"),
        "the handler caught the message under PVM: {pvm_server}"
    );
    for dir in [debian, ours.path()] {
        let (mig_tickle, mig_server) = System::Mig(&vm, lib.path(), dir).message_handlers();
        assert_eq!(
            comparable(&mig_tickle),
            comparable(&pvm_tickle),
            "{}/mhf_tickle\nmig:\n{mig_tickle}\npvm:\n{pvm_tickle}",
            dir.display()
        );
        assert_eq!(
            comparable(&mig_server),
            comparable(&pvm_server),
            "{}/mhf_server\nmig:\n{mig_server}\npvm:\n{pvm_server}",
            dir.display()
        );
    }
}

/// `mig spawn -n N --wait` of `prog ARGS` with our library and `env`, in
/// the background, its output piped.
fn start(
    vm: &Vm,
    lib: &Path,
    n: u32,
    prog: &Path,
    args: &[&str],
    env: &[(&str, &Path)],
) -> std::process::Child {
    let mut cmd = mig_tests::command("mig");
    cmd.env("MIG_DAEMON", vm.sock()).args([
        "spawn".to_string(),
        "-n".into(),
        n.to_string(),
        "-e".into(),
        format!("LD_LIBRARY_PATH={}", lib.display()),
    ]);
    for (k, v) in env {
        cmd.args(["-e".to_string(), format!("{k}={}", v.display())]);
    }
    cmd.args(["--wait", "--"])
        .arg(prog)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("mig spawn")
}

/// A VP as `mig ps --json` shows it.
#[derive(Debug, Clone)]
struct Vp {
    vp: u64,
    tid: String,
    host: String,
    state: String,
    pid: u32,
    movable: bool,
}

/// The VPs not ended, by their number in the job.
fn live_vps(vm: &Vm) -> Vec<Vp> {
    let mut v: Vec<Vp> = vm
        .json(&["ps"])
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| {
                    Some(Vp {
                        vp: v["vp"].as_u64()?,
                        tid: v["tid"].as_str()?.to_string(),
                        host: v["host"].as_str().unwrap_or("").to_string(),
                        state: v["state"].as_str()?.to_string(),
                        pid: v["pid"].as_u64().unwrap_or(0) as u32,
                        movable: v["movable"].as_bool() == Some(true),
                    })
                })
                .filter(|v| v.state != "exited")
                .collect()
        })
        .unwrap_or_default();
    v.sort_by_key(|v| v.vp);
    v
}

/// VP number `n` of the job.
fn vp(vm: &Vm, n: u64) -> Vp {
    live_vps(vm)
        .into_iter()
        .find(|v| v.vp == n)
        .unwrap_or_else(|| panic!("no VP {n}: {:?}", live_vps(vm)))
}

/// Wait until the job's `n` VPs run and their hosts have said they can be
/// moved.
fn all_movable(vm: &Vm, n: usize) {
    let ok = mig_tests::wait_until(std::time::Duration::from_secs(60), || {
        let v = live_vps(vm);
        v.len() == n && v.iter().all(|v| v.state == "running" && v.movable)
    });
    assert!(ok, "{:?}\n{}", live_vps(vm), vm.all_logs());
}

/// Move VP number `n` to another host with `mig migrate` (waiting for the
/// move's end), asked again while what it waits for is in the way (a call
/// to the master answered in a moment); where it went.
fn move_vp(vm: &Vm, n: u64) -> String {
    for _ in 0..20 {
        let v = vp(vm, n);
        let to = ["h0", "h1", "h2"]
            .into_iter()
            .find(|h| *h != v.host)
            .expect("another host");
        let out = vm.mig(&["migrate", &v.tid, "--to", to]);
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        if out.status.success() {
            let ran = mig_tests::wait_until(std::time::Duration::from_secs(30), || {
                let v = vp(vm, n);
                v.host == to && v.state == "running"
            });
            assert!(ran, "VP {n}: {:?}\n{}", vp(vm, n), vm.all_logs());
            return to.to_string();
        }
        assert!(said.contains("now:"), "VP {n} not moved: {said}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    panic!("VP {n} was never moved:\n{}", vm.all_logs());
}

/// The program a VP's process runs now (`/proc/PID/comm`).
fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Let VP `n` past its gate (see `GATE`), and wait until its process is
/// `program` and has had a moment to get where it waits.
fn open_gate(vm: &Vm, gates: &Path, n: u64, program: &str) {
    std::fs::write(gates.join(format!("go.{n}")), "").expect("gate");
    // (It may have done its part and ended already.)
    let there = mig_tests::wait_until(std::time::Duration::from_secs(30), || {
        live_vps(vm)
            .into_iter()
            .find(|v| v.vp == n)
            .is_none_or(|v| v.state == "exited" || comm(v.pid) == program)
    });
    assert!(there, "VP {n}: {:?}\n{}", live_vps(vm), vm.all_logs());
    std::thread::sleep(std::time::Duration::from_millis(500));
}

/// A shell that waits until `$GATES/go.$MIG_VP` exists (never speaking to
/// its daemon, while messages for the program it becomes pile up unread
/// in its socket), then becomes Debian's program (exec).
const GATE: &str = "while [ ! -e \"$GATES/go.$MIG_VP\" ]; do sleep 0.05; done; exec";

/// In `gates`, a script named `program` that waits behind its gate (see
/// `GATE`) and then becomes Debian's `program` from `ex`: found first
/// through `PVM_EP` when a PVM program spawns it by name.
fn gate(gates: &Path, ex: &Path, program: &str) {
    let script = gates.join(program);
    std::fs::write(
        &script,
        format!("#!/bin/sh\n{GATE} {}\n", ex.join(program).display()),
    )
    .expect(program);
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
}

/// The lines of a run with every number made `#` (Tids differ from run
/// to run), sorted (workers answer in any order).
fn comparable_lines(lines: &[String]) -> Vec<String> {
    let mut v: Vec<String> = lines
        .iter()
        .filter(|l| !l.starts_with("mig: "))
        .map(|l| {
            l.chars()
                .map(|c| if c.is_ascii_digit() { '#' } else { c })
                .collect()
        })
        .collect();
    v.sort();
    v
}

/// Debian's master1 and its nine slave1s, on our libpvm3, each moved mid-run
/// with `mig migrate` (from outside: they never say they can move), and
/// in the middle of their conversations: master1 waiting for its
/// answers, a slave waiting for its neighbour's sum, slaves not yet
/// started with master1's data and a neighbour's sum unread in their
/// sockets. They print what they print unmoved.
#[test]
fn debians_master1_and_its_slaves_moved_mid_run_print_what_they_print_unmoved() {
    let ex = examples();
    let lib = our_lib();
    let vm = Vm::start(3);
    let gates = tempfile::tempdir().expect("tempdir");
    // master1 finds slave1 through PVM_EP: a gate in front of Debian's.
    gate(gates.path(), &ex, "slave1");
    let env = [("PVM_EP", gates.path()), ("GATES", gates.path())];
    let job = start(&vm, lib.path(), 1, &ex.join("master1"), &[], &env);
    all_movable(&vm, 10);
    // master1 has sent out its data and waits for the slaves' answers.
    move_vp(&vm, 0);
    // Slave 0 takes master1's data, sends its sum on to slave 1 (still at
    // its gate: the message waits there unread) and waits for slave 8's.
    open_gate(&vm, gates.path(), 1, "slave1");
    move_vp(&vm, 1);
    move_vp(&vm, 2);
    move_vp(&vm, 0);
    for n in 2..=5 {
        open_gate(&vm, gates.path(), n, "slave1");
    }
    move_vp(&vm, 1);
    move_vp(&vm, 6);
    move_vp(&vm, 9);
    for n in 6..=9 {
        std::fs::write(gates.path().join(format!("go.{n}")), "").expect("gate");
    }
    let moved = mig_tests::job_succeeds(job, &vm.all_logs());
    master1_answers_right(&moved, 9);
    let unmoved = ok_lines(&spawn(&vm, lib.path(), 1, &ex.join("master1"), &[]));
    master1_answers_right(&unmoved, 9);
    assert_eq!(comparable_lines(&moved), comparable_lines(&unmoved));
}

/// Debian's spmd, four VPs passing a token round a ring on our libpvm3:
/// VP 0 has printed the ring (still in its stdio buffer), sent the token
/// to VP 1 (at its gate: the token waits unread in its socket) and waits
/// for VP 3's, when the owner of its desk comes back. Every VP there moves
/// off; the ring goes round and spmd prints what it prints unmoved, and
/// ends as under PVM (exit 1).
#[test]
fn debians_spmd_moved_off_a_reclaimed_desk_mid_run_prints_what_it_prints_unmoved() {
    let ex = examples();
    let lib = our_lib();
    let vm = Vm::start(3);
    let gates = tempfile::tempdir().expect("tempdir");
    let spmd = ex.join("spmd").display().to_string();
    let script = format!("{GATE} {spmd}");
    let job = start(
        &vm,
        lib.path(),
        4,
        Path::new("/bin/sh"),
        &["-c", &script],
        &[("GATES", gates.path())],
    );
    all_movable(&vm, 4);
    open_gate(&vm, gates.path(), 0, "spmd");
    let desk = vp(&vm, 0).host;
    let out = vm.mig(&["owner", "reclaim", "--host", &desk]);
    assert!(out.status.success(), "{out:?}");
    let cleared = mig_tests::wait_until(std::time::Duration::from_secs(60), || {
        let v = live_vps(&vm);
        v.len() == 4 && v.iter().all(|v| v.host != desk && v.state == "running")
    });
    assert!(cleared, "{:?}\n{}", live_vps(&vm), vm.all_logs());
    for n in 1..4 {
        std::fs::write(gates.path().join(format!("go.{n}")), "").expect("gate");
    }
    let out = job.wait_with_output().expect("the job ends");
    let moved = job_lines(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{moved:?}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        vm.all_logs()
    );
    assert!(
        moved.iter().any(|l| l.contains("token ring done")),
        "{moved:?}"
    );
    let out = vm.mig(&["owner", "release", "--host", &desk]);
    assert!(out.status.success(), "{out:?}");
    let unmoved = job_lines(&spawn(&vm, lib.path(), 4, &ex.join("spmd"), &[]));
    assert_eq!(comparable_lines(&moved), comparable_lines(&unmoved));
}

/// Debian's Fortran fmaster1 and its nine fslave1s (PVM's Fortran wrappers
/// over our C library, gfortran's runtime and its buffers in each
/// process), moved mid-run with `mig migrate` as master1's are: they print
/// what they print unmoved.
#[test]
fn debians_fortran_master_and_slaves_moved_mid_run_print_what_they_print_unmoved() {
    let ex = examples();
    let lib = our_lib();
    let vm = Vm::start(3);
    let gates = tempfile::tempdir().expect("tempdir");
    gate(gates.path(), &ex, "fslave1");
    let env = [("PVM_EP", gates.path()), ("GATES", gates.path())];
    let job = start(&vm, lib.path(), 1, &ex.join("fmaster1"), &[], &env);
    all_movable(&vm, 10);
    // fmaster1 has sent out its data and waits for the answers.
    move_vp(&vm, 0);
    // fslave1 1 takes fmaster1's data and waits for its neighbour's.
    open_gate(&vm, gates.path(), 1, "fslave1");
    move_vp(&vm, 1);
    move_vp(&vm, 0);
    move_vp(&vm, 1);
    for n in 2..=9 {
        std::fs::write(gates.path().join(format!("go.{n}")), "").expect("gate");
    }
    let moved = mig_tests::job_succeeds(job, &vm.all_logs());
    let got: Vec<&String> = moved.iter().filter(|l| l.contains("I got")).collect();
    assert_eq!(got.len(), 9, "{moved:?}");
    for l in got {
        let w: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(w[2], w[6], "{l}");
    }
    let unmoved = ok_lines(&spawn(&vm, lib.path(), 1, &ex.join("fmaster1"), &[]));
    assert_eq!(comparable_lines(&moved), comparable_lines(&unmoved));
}

/// Debian's Fortran fgexample: six members of a group, instance 0 waiting
/// for the others to join (`pvmffreezegroup`, calls to the master) as it
/// is moved, twice, and a member moved as it waits too; then a broadcast,
/// two reductions and a barrier. The answers are PVM's, as unmoved.
#[test]
fn debians_fortran_group_example_moved_mid_run_gets_the_answers_unmoved() {
    let ex = examples();
    let lib = our_lib();
    let vm = Vm::start(3);
    let gates = tempfile::tempdir().expect("tempdir");
    // Instance 0 spawns the others by name through PVM_EP: gates.
    gate(gates.path(), &ex, "fgexample");
    let env = [("PVM_EP", gates.path()), ("GATES", gates.path())];
    let job = start(&vm, lib.path(), 1, &ex.join("fgexample"), &[], &env);
    all_movable(&vm, 6);
    move_vp(&vm, 0);
    for n in 1..=2 {
        open_gate(&vm, gates.path(), n, "fgexample");
    }
    move_vp(&vm, 1);
    move_vp(&vm, 0);
    for n in 3..=5 {
        std::fs::write(gates.path().join(format!("go.{n}")), "").expect("gate");
    }
    let moved = mig_tests::job_succeeds(job, &vm.all_logs());
    let unmoved = ok_lines(&spawn(&vm, lib.path(), 1, &ex.join("fgexample"), &[]));
    for lines in [&moved, &unmoved] {
        assert!(
            lines
                .iter()
                .any(|l| l.contains("The 1-Norm is         5050")),
            "{lines:?}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.contains("The product of column 1 is   9.33262154439")),
            "{lines:?}"
        );
    }
    assert_eq!(comparable_lines(&moved), comparable_lines(&unmoved));
}
