//! Old bytes stay readable: a process image written by an earlier version,
//! kept in `tests/fixtures/`, decodes to the same state, or is refused with
//! a clear version error once it is no longer read. A change of the
//! image's types without a bump fails here. Version 1 (one process) is
//! read as an image of one process whose pid is not kept.
//!
//! After a bump, write the new version's fixture beside the old one with
//! `MIG_WRITE_FIXTURES=1 cargo test -p mig-ckpt --test old_bytes` and keep
//! both.

use std::path::{Path, PathBuf};

use mig_ckpt::image::{
    self, v1, Cpu, Fd, Image, Memfd, MemfdBytes, Meta, MmFields, OpenFile, PendingInput, Pipe,
    Proc, ProcState, Prot, Region, RegionKind, Run, SigAction, SigInfo, SocketState, Special,
    Thread, FORMAT_VERSION, PAGE, READS,
};
use mig_ckpt::{Fingerprint, ImageError};

fn fixture(version: u32) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/image-v{version}.bin"))
}

/// A version 1 state with every kind of region and descriptor.
fn state_v1() -> v1::Meta {
    let rw = Prot {
        r: true,
        w: true,
        x: false,
    };
    v1::Meta {
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
            v1::Fd {
                fd: 0,
                kind: v1::FdKind::External,
                cloexec: false,
            },
            v1::Fd {
                fd: 3,
                kind: v1::FdKind::Path {
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

/// A version 2 state: a tree of a shell (the version 1 state's process
/// with its descriptors in open files) and a zombie child, a log both
/// share, and a pipe holding bytes.
fn state_v2() -> Image {
    let old = state_v1();
    let meta = Meta {
        exe: old.exe,
        regions: old.regions,
        specials: old.specials,
        vdso_hash: old.vdso_hash,
        threads: old.threads,
        sigactions: old.sigactions,
        shared_pending: old.shared_pending,
        fds: vec![
            Fd {
                fd: 0,
                file: 0,
                cloexec: false,
            },
            Fd {
                fd: 3,
                file: 1,
                cloexec: true,
            },
            Fd {
                fd: 5,
                file: 2,
                cloexec: false,
            },
        ],
        cwd: old.cwd,
        umask: old.umask,
        rlimits: old.rlimits,
        mm: old.mm,
        auxv: old.auxv,
        itimers: old.itimers,
        cpu: old.cpu,
    };
    Image {
        keep_pids: true,
        procs: vec![
            Proc {
                pid: 2,
                ppid: 0,
                pgid: 2,
                sid: 0,
                state: ProcState::Live(Box::new(meta)),
            },
            Proc {
                pid: 3,
                ppid: 2,
                pgid: 2,
                sid: 0,
                state: ProcState::Zombie { status: 15 },
            },
        ],
        files: vec![
            OpenFile::External { fd: 0 },
            OpenFile::Path {
                path: "/tmp/log".into(),
                flags: libc::O_WRONLY | libc::O_APPEND,
                pos: 77,
            },
            OpenFile::Pipe {
                pipe: 0,
                write: false,
                flags: libc::O_NONBLOCK,
            },
        ],
        pipes: vec![Pipe {
            size: 65536,
            data: b"in flight\n".to_vec(),
        }],
        needs: None,
        inputs: vec![],
        sockets: vec![],
        memfds: vec![],
    }
}

/// A version 3 state: version 2's, and what the source machine had.
fn state_v3() -> Image {
    Image {
        needs: Some(Fingerprint {
            files: [
                ("/usr/bin/prog".to_string(), Some(vec![7; 32])),
                ("/usr/lib/gone.so".to_string(), None),
            ]
            .into(),
            vdso: vec![1; 32],
            cpu_flags: vec!["avx2".into(), "sse4_2".into()],
            xstate_len: 2696,
        }),
        inputs: vec![PendingInput {
            fd: 0,
            data: b"typed ahead\n".to_vec(),
            closed: false,
        }],
        ..state_v2()
    }
}

/// A version 4 state: version 3's, and the bytes on their way both ways
/// through the socket to the caller.
fn state_v4() -> Image {
    Image {
        sockets: vec![SocketState {
            fd: 3,
            unread: b"MG for it".to_vec(),
            unfinished: b"MG half".to_vec(),
            notes: b"heard 7".to_vec(),
            passed: vec![],
        }],
        ..state_v3()
    }
}

/// A version 5 state: version 4's, and a memfd held and mapped shared,
/// and a socket cut from its other end.
fn state_v5() -> Image {
    let mut img = state_v4();
    if let ProcState::Live(m) = &mut img.procs[0].state {
        m.regions.push(Region {
            start: 0x70_0000,
            end: 0x70_2000,
            prot: Prot {
                r: true,
                w: true,
                x: false,
            },
            kind: RegionKind::Memfd {
                memfd: 0,
                offset: 0,
                may_write: true,
            },
            advice: vec![],
            runs: vec![],
        });
        m.fds.push(Fd {
            fd: 7,
            file: 3,
            cloexec: true,
        });
        m.fds.push(Fd {
            fd: 8,
            file: 4,
            cloexec: true,
        });
    }
    img.files.push(OpenFile::Memfd {
        memfd: 0,
        flags: libc::O_RDWR,
        pos: 5,
    });
    img.files.push(OpenFile::Cut {
        unread: b"MG from a peer".to_vec(),
        flags: libc::O_NONBLOCK,
        passed: vec![Memfd {
            name: "mig-pooled".into(),
            size: 0x3000,
            seals: libc::F_SEAL_SHRINK | libc::F_SEAL_GROW,
            data: MemfdBytes::Held(b"200 KiB".to_vec()),
        }],
    });
    img.sockets[0].passed.push(Memfd {
        name: "mig-message".into(),
        size: 7,
        seals: libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE | libc::F_SEAL_SEAL,
        data: MemfdBytes::Held(b"message".to_vec()),
    });
    img.memfds.push(Memfd {
        name: "mig-ring".into(),
        size: 0x2000,
        seals: libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
        data: MemfdBytes::Held(b"tail".to_vec()),
    });
    img
}

fn pages() -> Vec<u8> {
    (0..4 * PAGE).map(|i| (i % 251) as u8).collect()
}

#[test]
fn version_1_image_still_decodes() {
    // Written by version 1 (before trees); no longer written.
    let bytes = std::fs::read(fixture(1)).expect("fixture");
    match image::decode(&bytes, true) {
        Ok((h, img)) => {
            assert!(READS.contains(&1));
            assert_eq!(h.version, 1);
            assert_eq!(img, Image::from(state_v1()));
            assert!(!img.keep_pids);
            assert_eq!(img.procs[0].pid, 4242);
            let data = &bytes[h.data_offset as usize..(h.data_offset + h.data_len) as usize];
            assert_eq!(data, &pages()[..]);
        }
        Err(e) => {
            assert!(!READS.contains(&1), "version 1 refused: {e}");
            assert_eq!(e, ImageError::Version { found: 1 });
        }
    }
}

#[test]
fn version_2_image_still_decodes() {
    let path = fixture(2);
    // Written by version 2 (before the source's needs were recorded):
    // read with its needs unknown.
    let bytes = std::fs::read(&path).expect("fixture");
    match image::decode(&bytes, true) {
        Ok((h, img)) => {
            assert_eq!(h.version, 2);
            assert_eq!(img, state_v2());
            assert_eq!(img.needs, None);
            let data = &bytes[h.data_offset as usize..(h.data_offset + h.data_len) as usize];
            assert_eq!(data, &pages()[..]);
        }
        Err(e) => {
            assert!(!READS.contains(&2), "version 2 refused: {e}");
            assert_eq!(e, ImageError::Version { found: 2 });
        }
    }
}

#[test]
fn version_3_image_still_decodes() {
    // Written by version 3 (before the sockets' bytes were kept): read
    // with none.
    let bytes = std::fs::read(fixture(3)).expect("fixture");
    match image::decode(&bytes, true) {
        Ok((h, img)) => {
            assert_eq!(h.version, 3);
            assert_eq!(img, state_v3());
            assert!(img.sockets.is_empty());
            let data = &bytes[h.data_offset as usize..(h.data_offset + h.data_len) as usize];
            assert_eq!(data, &pages()[..]);
        }
        Err(e) => {
            assert!(!READS.contains(&3), "version 3 refused: {e}");
            assert_eq!(e, ImageError::Version { found: 3 });
        }
    }
}

#[test]
fn version_4_image_still_decodes() {
    let path = fixture(4);
    if std::env::var_os("MIG_WRITE_FIXTURES").is_some() && FORMAT_VERSION == 4 {
        std::fs::create_dir_all(path.parent().expect("dir")).expect("mkdir");
        std::fs::write(&path, image::encode(&state_v4(), &pages()).expect("encode"))
            .expect("write");
    }
    let bytes = std::fs::read(&path).expect("fixture");
    match image::decode(&bytes, true) {
        Ok((h, img)) => {
            assert_eq!(h.version, 4);
            assert_eq!(img, state_v4());
            let data = &bytes[h.data_offset as usize..(h.data_offset + h.data_len) as usize];
            assert_eq!(data, &pages()[..]);
        }
        Err(e) => {
            assert!(!READS.contains(&4), "version 4 refused: {e}");
            assert_eq!(e, ImageError::Version { found: 4 });
        }
    }
}

#[test]
fn version_5_image_still_decodes() {
    let path = fixture(5);
    if std::env::var_os("MIG_WRITE_FIXTURES").is_some() && FORMAT_VERSION == 5 {
        std::fs::create_dir_all(path.parent().expect("dir")).expect("mkdir");
        std::fs::write(&path, image::encode(&state_v5(), &pages()).expect("encode"))
            .expect("write");
    }
    let bytes = std::fs::read(&path).expect("fixture");
    match image::decode(&bytes, true) {
        Ok((h, img)) => {
            assert_eq!(h.version, 5);
            assert_eq!(img, state_v5());
            let data = &bytes[h.data_offset as usize..(h.data_offset + h.data_len) as usize];
            assert_eq!(data, &pages()[..]);
        }
        Err(e) => {
            assert!(!READS.contains(&5), "version 5 refused: {e}");
            assert_eq!(e, ImageError::Version { found: 5 });
        }
    }
}

/// A version 6 state: version 5's, each memfd's bytes in the data after
/// the pages instead of in the metadata; and those data.
fn state_v6() -> (Image, Vec<u8>) {
    let mut img = state_v5();
    let mut data = pages();
    for m in img.memfds_in_order_mut() {
        let bytes = m.data.held().expect("held").to_vec();
        m.data = MemfdBytes::Image {
            offset: data.len() as u64,
            len: bytes.len() as u64,
        };
        data.extend_from_slice(&bytes);
        data.resize(image::page_up(data.len() as u64) as usize, 0);
    }
    (img, data)
}

#[test]
fn version_6_image_still_decodes() {
    let path = fixture(6);
    let (state, data) = state_v6();
    if std::env::var_os("MIG_WRITE_FIXTURES").is_some() && FORMAT_VERSION == 6 {
        std::fs::create_dir_all(path.parent().expect("dir")).expect("mkdir");
        std::fs::write(&path, image::encode(&state, &data).expect("encode")).expect("write");
    }
    let bytes = std::fs::read(&path).expect("fixture");
    match image::decode(&bytes, true) {
        Ok((h, img)) => {
            assert_eq!(h.version, 6);
            assert_eq!(img, state);
            let got = &bytes[h.data_offset as usize..(h.data_offset + h.data_len) as usize];
            assert_eq!(got, &data[..]);
            let ring = image::memfd_bytes(&bytes, &h, &img.memfds[0]);
            assert_eq!(ring, Some(&b"tail"[..]));
        }
        Err(e) => {
            assert!(!READS.contains(&6), "version 6 refused: {e}");
            assert_eq!(e, ImageError::Version { found: 6 });
        }
    }
}
