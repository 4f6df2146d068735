//! A restore of a tree that fails once its processes exist leaves none
//! behind: the namespace is killed and every process reaped. (A test
//! binary of its own: it counts the children of this process.)

mod common;

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use common::{scratch, stdio_options};
use mig_ckpt::{dump_tree, restore_tree, spawn_in_namespace, ImageFile, RestoreOptions, Spawn};

/// The children of this process, every thread's.
fn our_children() -> Vec<i32> {
    mig_ckpt::proc::children(std::process::id() as i32).expect("children")
}

#[test]
fn a_tree_whose_program_cannot_run_is_not_left_half_made() {
    // A copy of the program, made unrunnable after the dump: the restore
    // gets as far as the program's exec.
    let exe = scratch().join("heap-unrunnable");
    std::fs::copy(common::program("heap"), &exe).expect("copy");
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
    let mut tree = spawn_in_namespace(Spawn {
        program: exe.clone(),
        argv: vec!["heap".into(), "4".into(), "100000".into()],
        fds: BTreeMap::from([(1, w)]),
        die_with_caller: true,
        ..Default::default()
    })
    .expect("spawn");
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(File::from(r)), &mut line)
        .expect("first line");
    tree.stop(Duration::from_secs(10)).expect("stop");
    let path = scratch().join("unrunnable.img");
    let mut f = File::create(&path).expect("create");
    dump_tree(tree.init(), &stdio_options(), &mut f).expect("dump");
    tree.kill().expect("kill");
    tree.wait().expect("wait");
    assert!(our_children().is_empty());

    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let img = ImageFile::open(File::open(&path).expect("open"), true).expect("image");
    let null = || -> std::os::fd::OwnedFd { File::open("/dev/null").expect("null").into() };
    let fds = BTreeMap::from([(0, null()), (1, null()), (2, null())]);
    let e = restore_tree(&img, fds, &RestoreOptions::default()).expect_err("refused");
    assert!(e.to_string().contains("heap-unrunnable"), "{e}");
    assert!(
        e.to_string().contains("ermission denied"),
        "the exec's error: {e}"
    );
    assert_eq!(our_children(), Vec::<i32>::new(), "nothing left behind");
}
