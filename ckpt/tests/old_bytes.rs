//! Old bytes stay readable: a process image written by an earlier version,
//! kept in `tests/fixtures/`, decodes to the same state, or is refused with
//! a clear version error once `image::FORMAT_VERSION` has moved on. A change
//! of the image's types without a bump fails here.
//!
//! After a bump, write the new version's fixture beside the old one with
//! `MIG_WRITE_FIXTURES=1 cargo test -p mig-ckpt --test old_bytes` and keep
//! both.

use std::path::{Path, PathBuf};

use mig_ckpt::image::{
    self, Cpu, Fd, FdKind, Meta, MmFields, Prot, Region, RegionKind, Run, SigAction, SigInfo,
    Special, Thread, FORMAT_VERSION, PAGE,
};
use mig_ckpt::ImageError;

fn fixture(version: u32) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/image-v{version}.bin"))
}

/// A state with every kind of region and descriptor.
fn state() -> Meta {
    let rw = Prot {
        r: true,
        w: true,
        x: false,
    };
    Meta {
        pid: 4242,
        exe: "/usr/bin/prog".into(),
        regions: vec![
            Region {
                start: 0x40_0000,
                end: 0x40_2000,
                prot: Prot {
                    r: true,
                    w: false,
                    x: true,
                },
                kind: RegionKind::FilePrivate {
                    path: "/usr/bin/prog".into(),
                    offset: 0x1000,
                },
                advice: vec![],
                runs: vec![Run {
                    addr: 0x40_1000,
                    pages: 1,
                    offset: 0,
                }],
            },
            Region {
                start: 0x50_0000,
                end: 0x50_4000,
                prot: rw,
                kind: RegionKind::Anon,
                advice: vec![libc::MADV_DONTDUMP],
                runs: vec![Run {
                    addr: 0x50_0000,
                    pages: 2,
                    offset: PAGE,
                }],
            },
            Region {
                start: 0x60_0000,
                end: 0x60_1000,
                prot: rw,
                kind: RegionKind::FileShared {
                    path: "/tmp/shared".into(),
                    offset: 0,
                    may_write: true,
                },
                advice: vec![],
                runs: vec![],
            },
            Region {
                start: 0x7ffd_0000_0000,
                end: 0x7ffd_0000_2000,
                prot: rw,
                kind: RegionKind::Stack,
                advice: vec![],
                runs: vec![Run {
                    addr: 0x7ffd_0000_1000,
                    pages: 1,
                    offset: 3 * PAGE,
                }],
            },
        ],
        specials: vec![Special {
            name: "[vdso]".into(),
            start: 0x7fff_0000_0000,
            end: 0x7fff_0000_2000,
        }],
        vdso_hash: vec![7; 32],
        threads: vec![Thread {
            tid: 4242,
            regs: (0..27).collect(),
            xstate: vec![1; 64],
            sigmask: 1 << 9,
            pending: vec![SigInfo(vec![2; 128])],
            rseq: Some((0x7000, 32, 0x53053053)),
            robust_list: (0x7100, 24),
            clear_child_tid: 0x7200,
            altstack: (0x8000, 0, 8192),
            comm: "prog".into(),
            cached_tid_at: Some(0x72d0),
        }],
        sigactions: vec![SigAction {
            signo: 10,
            handler: 0x40_1234,
            flags: 0x0400_0000,
            restorer: 0x40_5678,
            mask: 0,
        }],
        shared_pending: vec![],
        fds: vec![
            Fd {
                fd: 0,
                kind: FdKind::External,
                cloexec: false,
            },
            Fd {
                fd: 3,
                kind: FdKind::Path {
                    path: "/tmp/log".into(),
                    flags: libc::O_WRONLY | libc::O_APPEND,
                    pos: 77,
                },
                cloexec: true,
            },
        ],
        cwd: "/tmp".into(),
        umask: 0o022,
        rlimits: vec![(7, 1024, 4096)],
        mm: MmFields {
            start_code: 0x40_0000,
            end_code: 0x40_2000,
            start_data: 0x40_3000,
            end_data: 0x40_4000,
            start_brk: 0x50_0000,
            brk: 0x50_4000,
            start_stack: 0x7ffd_0000_1f00,
            arg_start: 0x7ffd_0000_1f10,
            arg_end: 0x7ffd_0000_1f20,
            env_start: 0x7ffd_0000_1f20,
            env_end: 0x7ffd_0000_1f80,
        },
        auxv: vec![0; 16],
        itimers: vec![(0, 0), (0, 0), (1000, 500)],
        cpu: Cpu {
            flags: vec!["sse2".into(), "avx2".into()],
            xstate_len: 2696,
        },
    }
}

fn pages() -> Vec<u8> {
    (0..4 * PAGE).map(|i| (i % 251) as u8).collect()
}

#[test]
fn version_1_image_still_decodes() {
    let path = fixture(1);
    if std::env::var_os("MIG_WRITE_FIXTURES").is_some() && FORMAT_VERSION == 1 {
        std::fs::create_dir_all(path.parent().expect("dir")).expect("mkdir");
        std::fs::write(&path, image::encode(&state(), &pages()).expect("encode")).expect("write");
    }
    let bytes = std::fs::read(&path).expect("fixture");
    match image::decode(&bytes, true) {
        Ok((h, meta)) => {
            assert_eq!(FORMAT_VERSION, 1);
            assert_eq!(meta, state());
            let data = &bytes[h.data_offset as usize..(h.data_offset + h.data_len) as usize];
            assert_eq!(data, &pages()[..]);
        }
        Err(e) => {
            assert_ne!(FORMAT_VERSION, 1, "version 1 refused by version 1: {e}");
            assert_eq!(e, ImageError::Version { found: 1 });
        }
    }
}
