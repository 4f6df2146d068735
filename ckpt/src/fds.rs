//! File descriptors of the processes to save: what each one is, whether
//! it can be reopened elsewhere, and which of them share one open file.
//!
//! The decision for one descriptor ([`decide`]) is pure and says in words
//! why it cannot be saved ("fd 5 is a TCP socket 127.0.0.1:40000 ->
//! 1.2.3.4:80"); [`group`] (pure too) puts descriptors that refer to one
//! open file (one file description: `dup`, inheritance across `fork`)
//! together, given a test of sameness, which [`open_files`] asks of the
//! kernel (`kcmp`). [`facts`] gathers the facts from `/proc/PID/fd` and
//! `fdinfo`. Reading a pipe's bytes lives in `dump`, reopening in
//! `restore`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};

use crate::image::{Fd, OpenFile};
use crate::proc::{describe_socket, parse_fdinfo, NetTables};

/// What `/proc/PID/fd/N` shows of one descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FdFacts {
    /// Its number.
    pub fd: i32,
    /// The link's text (`/path`, `pipe:[12]`, `socket:[34]`,
    /// `anon_inode:[eventpoll]`...).
    pub link: String,
    /// The file type of what it refers to.
    pub kind: FileKind,
    /// Device numbers (major, minor) of a character device.
    pub rdev: (u32, u32),
    /// Inode number of what it refers to (a pipe's identity).
    pub inode: u64,
    /// File offset.
    pub pos: u64,
    /// `O_*` flags, `O_CLOEXEC` included.
    pub flags: i32,
}

/// The type of an open file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A regular file.
    Regular,
    /// A directory.
    Dir,
    /// A character device.
    Char,
    /// A FIFO or pipe.
    Fifo,
    /// A socket.
    Socket,
    /// Anything else (anonymous inodes, block devices).
    Other,
}

/// Devices that mean the same everywhere.
const SAFE_DEVICES: [(&str, (u32, u32)); 4] = [
    ("/dev/null", (1, 3)),
    ("/dev/zero", (1, 5)),
    ("/dev/random", (1, 8)),
    ("/dev/urandom", (1, 9)),
];

/// How one descriptor is saved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Saved {
    /// A file reopened by path.
    Path {
        /// Its path.
        path: String,
        /// `O_*` status flags, `O_CLOEXEC` left out.
        flags: i32,
        /// File offset.
        pos: u64,
    },
    /// An end of a pipe of the tree (both ends, if held, are saved).
    Pipe {
        /// The pipe's inode.
        inode: u64,
        /// The write end.
        write: bool,
        /// `O_*` status flags, access mode and `O_CLOEXEC` left out.
        flags: i32,
    },
    /// A memfd, made anew with its bytes.
    Memfd {
        /// Its inode (its identity: descriptors and mappings of one memfd
        /// share the new one).
        inode: u64,
        /// `O_*` status flags, `O_CLOEXEC` left out.
        flags: i32,
        /// File offset.
        pos: u64,
    },
    /// A stream socket the caller said may be cut from its other end.
    Cut {
        /// `O_*` status flags, access mode and `O_CLOEXEC` left out.
        flags: i32,
    },
}

/// How descriptor `f`, which the caller does not give anew, is saved, or
/// in words why it cannot be; `pipes` says whether pipes are saved (a tree
/// or a process holding both ends) or refused; `cut`, the inodes of the
/// sockets that may be cut from their other end.
pub fn decide(
    f: &FdFacts,
    pipes: bool,
    net: &NetTables,
    cut: &BTreeSet<u64>,
) -> Result<Saved, String> {
    let no = |what: String| Err(format!("fd {} is {what}", f.fd));
    let path = || {
        Ok(Saved::Path {
            path: f.link.clone(),
            flags: f.flags & !libc::O_CLOEXEC,
            pos: f.pos,
        })
    };
    if let Some(rest) = f.link.strip_prefix("socket:[") {
        let inode = rest.trim_end_matches(']').parse().unwrap_or(0);
        if cut.contains(&inode) {
            return Ok(Saved::Cut {
                flags: f.flags & !libc::O_CLOEXEC & !libc::O_ACCMODE,
            });
        }
        return no(describe_socket(net, inode));
    }
    if f.link.starts_with("pipe:") {
        if !pipes {
            return no("a pipe (not one the caller gives anew)".into());
        }
        if f.flags & libc::O_DIRECT != 0 {
            return no("a packet-mode pipe (O_DIRECT)".into());
        }
        let write = match f.flags & libc::O_ACCMODE {
            libc::O_RDONLY => false,
            libc::O_WRONLY => true,
            _ => return no("a pipe opened for reading and writing".into()),
        };
        return Ok(Saved::Pipe {
            inode: f.inode,
            write,
            flags: f.flags & !libc::O_CLOEXEC & !libc::O_ACCMODE,
        });
    }
    if let Some(rest) = f.link.strip_prefix("anon_inode:") {
        let what = rest.trim_matches(|c| c == '[' || c == ']');
        return no(format!("an {what} descriptor"));
    }
    if f.link.starts_with("/memfd:") && f.kind == FileKind::Regular {
        return Ok(Saved::Memfd {
            inode: f.inode,
            flags: f.flags & !libc::O_CLOEXEC,
            pos: f.pos,
        });
    }
    if f.link.ends_with(" (deleted)") {
        return no(format!("a deleted file ({})", f.link));
    }
    if !f.link.starts_with('/') {
        return no(format!("{} (not a file)", f.link));
    }
    match f.kind {
        FileKind::Regular | FileKind::Dir => path(),
        FileKind::Char
            if SAFE_DEVICES
                .iter()
                .any(|(p, dev)| *p == f.link && *dev == f.rdev) =>
        {
            path()
        }
        FileKind::Char => no(format!("the device {}", f.link)),
        FileKind::Fifo => no(format!("a FIFO ({})", f.link)),
        FileKind::Socket => no(format!("a socket ({})", f.link)),
        FileKind::Other => no(format!("{} (not a regular file)", f.link)),
    }
}

/// The name a memfd was made with, from what `/proc` shows of it
/// (`/memfd:NAME (deleted)`).
pub fn memfd_name(shown: &str) -> String {
    let name = shown.strip_prefix("/memfd:").unwrap_or(shown);
    name.strip_suffix(" (deleted)").unwrap_or(name).to_string()
}

/// The descriptors of `pid`, in order.
pub fn facts(pid: i32) -> Result<Vec<FdFacts>, FdsError> {
    let dir = format!("/proc/{pid}/fd");
    let entries = fs::read_dir(&dir).map_err(|e| FdsError::Proc(format!("{dir}: {e}")))?;
    let mut nums: Vec<i32> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    nums.sort_unstable();
    let mut out = Vec::new();
    for fd in nums {
        let link_path = format!("/proc/{pid}/fd/{fd}");
        let link = match fs::read_link(&link_path) {
            Ok(l) => l.to_string_lossy().into_owned(),
            Err(e) => return Err(FdsError::Proc(format!("{link_path}: {e}"))),
        };
        let (kind, rdev, inode) = match fs::metadata(&link_path) {
            Ok(m) => {
                let t = m.file_type();
                let kind = if t.is_file() {
                    FileKind::Regular
                } else if t.is_dir() {
                    FileKind::Dir
                } else if t.is_char_device() {
                    FileKind::Char
                } else if t.is_fifo() {
                    FileKind::Fifo
                } else if t.is_socket() {
                    FileKind::Socket
                } else {
                    FileKind::Other
                };
                let rdev = m.rdev();
                (kind, (libc::major(rdev), libc::minor(rdev)), m.ino())
            }
            Err(_) => (FileKind::Other, (0, 0), 0),
        };
        let info_path = format!("/proc/{pid}/fdinfo/{fd}");
        let info = fs::read_to_string(&info_path)
            .map_err(|e| FdsError::Proc(format!("{info_path}: {e}")))?;
        let (pos, flags) = parse_fdinfo(&info)
            .ok_or_else(|| FdsError::Proc(format!("{info_path}: unreadable")))?;
        out.push(FdFacts {
            fd,
            link,
            kind,
            rdev,
            inode,
            pos,
            flags,
        });
    }
    Ok(out)
}

/// Puts `items` into classes of items that are `same`, each class in the
/// order its first item comes; only items with equal `key`s are compared.
/// Returns each item's class.
pub fn group<T, K: Ord>(
    items: &[T],
    key: impl Fn(&T) -> K,
    same: impl Fn(&T, &T) -> bool,
) -> Vec<usize> {
    let mut class = vec![usize::MAX; items.len()];
    let mut firsts: BTreeMap<K, Vec<usize>> = BTreeMap::new();
    let mut next = 0;
    for (i, it) in items.iter().enumerate() {
        let heads = firsts.entry(key(it)).or_default();
        match heads.iter().find(|&&h| same(&items[h], it)) {
            Some(&h) => class[i] = class[h],
            None => {
                class[i] = next;
                next += 1;
                heads.push(i);
            }
        }
    }
    class
}

/// A process whose descriptors are saved: the pid the caller sees it by,
/// and its descriptors' facts.
#[derive(Debug, Clone)]
pub struct Holder {
    /// Its pid in the caller's namespace.
    pub pid: i32,
    /// Its descriptors.
    pub fds: Vec<FdFacts>,
}

/// The saved descriptors of some processes: each one's list, the open
/// files they refer to, and for each pipe, memfd and cut socket where to
/// read it.
#[derive(Debug, Clone, Default)]
pub struct OpenFiles {
    /// Each holder's descriptors, in the holders' order.
    pub fds: Vec<Vec<Fd>>,
    /// The open files.
    pub files: Vec<OpenFile>,
    /// Each pipe: (pid, fd) of a descriptor of it in the caller's view.
    pub pipes: Vec<(i32, i32)>,
    /// Each memfd, by the index `OpenFile::Memfd` gives it: (inode, pid,
    /// fd) of a descriptor of it.
    pub memfds: Vec<(u64, i32, i32)>,
    /// Each cut socket: (index in `files`, pid, fd) of a descriptor of it.
    pub cuts: Vec<(usize, i32, i32)>,
}

/// Decides every descriptor of `holders` (the first is the root, whose
/// `external` descriptors the caller gives anew; `cut`, the inodes of
/// sockets that may be cut) and which share an open file, by `same`
/// ((pid, fd), (pid, fd): one open file). A descriptor of another process
/// that is one of the root's external ones is external too. Every refusal
/// is named.
pub fn open_files(
    holders: &[Holder],
    external: &BTreeSet<i32>,
    cut: &BTreeSet<u64>,
    pipes: bool,
    same: impl Fn((i32, i32), (i32, i32)) -> bool,
) -> Result<OpenFiles, FdsError> {
    let root = holders.first().map_or(0, |h| h.pid);
    let ext: Vec<&FdFacts> = holders
        .first()
        .map(|h| h.fds.iter().filter(|f| external.contains(&f.fd)).collect())
        .unwrap_or_default();
    let mut net: Option<NetTables> = None;
    let mut refused = Vec::new();
    /// One descriptor: its holder, number, inode, close-on-exec, and what
    /// it is: Ok(the root's external fd) or Err(how it is saved).
    struct Item {
        h: usize,
        fd: i32,
        inode: u64,
        cloexec: bool,
        what: Result<i32, Saved>,
    }
    let mut items: Vec<Item> = Vec::new();
    for (h, holder) in holders.iter().enumerate() {
        for f in &holder.fds {
            let cloexec = f.flags & libc::O_CLOEXEC != 0;
            let as_ext = if h == 0 && external.contains(&f.fd) {
                Some(f.fd)
            } else {
                // The same number first (stdout inherited as stdout).
                let mut cands: Vec<&&FdFacts> = ext.iter().filter(|e| e.inode == f.inode).collect();
                cands.sort_by_key(|e| (e.fd != f.fd, e.fd));
                cands
                    .iter()
                    .find(|e| same((root, e.fd), (holder.pid, f.fd)))
                    .map(|e| e.fd)
            };
            let item = |what| Item {
                h,
                fd: f.fd,
                inode: f.inode,
                cloexec,
                what,
            };
            if let Some(n) = as_ext {
                items.push(item(Ok(n)));
                continue;
            }
            if let Some(e) = ext
                .iter()
                .find(|e| e.inode == f.inode && e.link.starts_with("pipe:"))
            {
                refused.push(format!(
                    "fd {} of pid {} is the caller's pipe of fd {} opened anew or its other end",
                    f.fd, holder.pid, e.fd
                ));
                continue;
            }
            if f.link.starts_with("socket:") && net.is_none() {
                net = Some(NetTables::read(holder.pid));
            }
            match decide(f, pipes, net.as_ref().unwrap_or(&NetTables::default()), cut) {
                Ok(s) => items.push(item(Err(s))),
                Err(why) if h == 0 => refused.push(why),
                Err(why) => refused.push(format!("{why} in pid {}", holder.pid)),
            }
        }
    }
    if !refused.is_empty() {
        return Err(FdsError::Refused(refused.join("; ")));
    }
    let class = group(
        &items,
        |it| match &it.what {
            Ok(n) => (0, *n as u64),
            Err(_) => (1, it.inode),
        },
        |a, b| match (&a.what, &b.what) {
            (Ok(x), Ok(y)) => x == y,
            (Err(_), Err(_)) => same((holders[a.h].pid, a.fd), (holders[b.h].pid, b.fd)),
            _ => false,
        },
    );
    let mut out = OpenFiles {
        fds: vec![Vec::new(); holders.len()],
        ..Default::default()
    };
    let mut pipe_index: BTreeMap<u64, u32> = BTreeMap::new();
    for (it, &c) in items.iter().zip(&class) {
        if c == out.files.len() {
            out.files.push(match &it.what {
                Ok(n) => OpenFile::External { fd: *n },
                Err(Saved::Path { path, flags, pos }) => OpenFile::Path {
                    path: path.clone(),
                    flags: *flags,
                    pos: *pos,
                },
                Err(Saved::Pipe {
                    inode,
                    write,
                    flags,
                }) => {
                    let next = pipe_index.len() as u32;
                    let pipe = *pipe_index.entry(*inode).or_insert(next);
                    if pipe == next {
                        out.pipes.push((holders[it.h].pid, it.fd));
                    }
                    OpenFile::Pipe {
                        pipe,
                        write: *write,
                        flags: *flags,
                    }
                }
                Err(Saved::Memfd { inode, flags, pos }) => {
                    let memfd = match out.memfds.iter().position(|m| m.0 == *inode) {
                        Some(i) => i,
                        None => {
                            out.memfds.push((*inode, holders[it.h].pid, it.fd));
                            out.memfds.len() - 1
                        }
                    } as u32;
                    OpenFile::Memfd {
                        memfd,
                        flags: *flags,
                        pos: *pos,
                    }
                }
                Err(Saved::Cut { flags }) => {
                    out.cuts.push((out.files.len(), holders[it.h].pid, it.fd));
                    OpenFile::Cut {
                        unread: Vec::new(),
                        flags: *flags,
                        passed: Vec::new(),
                    }
                }
            });
        }
        out.fds[it.h].push(Fd {
            fd: it.fd,
            file: c as u32,
            cloexec: it.cloexec,
        });
    }
    Ok(out)
}

/// Why descriptors were not saved.
#[derive(Debug, thiserror::Error)]
pub enum FdsError {
    /// `/proc` could not be read.
    #[error("{0}")]
    Proc(String),
    /// Some descriptors cannot be saved (all named).
    #[error("{0}")]
    Refused(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn facts(link: &str, kind: FileKind, rdev: (u32, u32)) -> FdFacts {
        FdFacts {
            fd: 5,
            link: link.into(),
            kind,
            rdev,
            inode: 3,
            pos: 7,
            flags: libc::O_RDWR | libc::O_CLOEXEC,
        }
    }

    #[test]
    fn files_are_reopened_by_path() {
        let net = NetTables::default();
        let f = decide(
            &facts("/tmp/x", FileKind::Regular, (0, 0)),
            false,
            &net,
            &BTreeSet::new(),
        )
        .expect("ok");
        assert_eq!(
            f,
            Saved::Path {
                path: "/tmp/x".into(),
                flags: libc::O_RDWR,
                pos: 7
            }
        );
        assert!(decide(
            &facts("/dev/null", FileKind::Char, (1, 3)),
            false,
            &net,
            &BTreeSet::new()
        )
        .is_ok());
    }

    #[test]
    fn refusals_name_the_descriptor() {
        let net = NetTables::default();
        let cases = [
            facts("pipe:[3]", FileKind::Fifo, (0, 0)),
            facts("socket:[9]", FileKind::Socket, (0, 0)),
            facts("anon_inode:[eventpoll]", FileKind::Other, (0, 0)),
            facts("anon_inode:[io_uring]", FileKind::Other, (0, 0)),
            facts("/tmp/gone (deleted)", FileKind::Regular, (0, 0)),
            facts("/dev/pts/0", FileKind::Char, (136, 0)),
            facts("/dev/null", FileKind::Char, (136, 0)),
        ];
        for c in &cases {
            let e = decide(c, false, &net, &BTreeSet::new()).expect_err("refused");
            assert!(e.starts_with("fd 5 is "), "{e}");
        }
        assert!(decide(&cases[3], false, &net, &BTreeSet::new())
            .expect_err("io_uring")
            .contains("io_uring"));
        // Pipes of a tree are saved, but not one opened read-write.
        let e = decide(&cases[0], true, &net, &BTreeSet::new()).expect_err("O_RDWR pipe");
        assert!(e.contains("reading and writing"), "{e}");
        let mut end = cases[0].clone();
        end.flags = libc::O_WRONLY | libc::O_NONBLOCK;
        assert_eq!(
            decide(&end, true, &net, &BTreeSet::new()),
            Ok(Saved::Pipe {
                inode: 3,
                write: true,
                flags: libc::O_NONBLOCK
            })
        );
        end.flags |= libc::O_DIRECT;
        assert!(decide(&end, true, &net, &BTreeSet::new()).is_err());
    }

    fn fd(fd: i32, link: &str, inode: u64, flags: i32) -> FdFacts {
        FdFacts {
            fd,
            link: link.into(),
            kind: if link.starts_with('/') {
                FileKind::Regular
            } else {
                FileKind::Fifo
            },
            rdev: (0, 0),
            inode,
            pos: 0,
            flags,
        }
    }

    #[test]
    fn a_pipeline_shares_the_callers_stdout_and_one_pipe() {
        // sh (10) with stdout the caller's pipe 100 and a log; a (11)
        // writes pipe 200 to b (12), whose stdout is sh's.
        let holders = [
            Holder {
                pid: 10,
                fds: vec![
                    fd(1, "pipe:[100]", 100, libc::O_WRONLY),
                    fd(4, "/tmp/log", 7, libc::O_WRONLY),
                ],
            },
            Holder {
                pid: 11,
                fds: vec![
                    fd(1, "pipe:[200]", 200, libc::O_WRONLY),
                    fd(4, "/tmp/log", 7, libc::O_WRONLY),
                ],
            },
            Holder {
                pid: 12,
                fds: vec![
                    fd(0, "pipe:[200]", 200, libc::O_RDONLY),
                    fd(1, "pipe:[100]", 100, libc::O_WRONLY),
                ],
            },
        ];
        // Inherited: the log in sh and a is one open file, stdout too.
        let same = |a: (i32, i32), b: (i32, i32)| {
            let desc = |(p, f): (i32, i32)| match (p, f) {
                (10, 1) | (12, 1) => 1,
                (10, 4) | (11, 4) => 2,
                (11, 1) => 3,
                (12, 0) => 4,
                _ => 0,
            };
            desc(a) == desc(b)
        };
        let ext = BTreeSet::from([0, 1, 2]);
        let o = open_files(&holders, &ext, &BTreeSet::new(), true, same).expect("saved");
        assert_eq!(
            o.files,
            vec![
                OpenFile::External { fd: 1 },
                OpenFile::Path {
                    path: "/tmp/log".into(),
                    flags: libc::O_WRONLY,
                    pos: 0
                },
                OpenFile::Pipe {
                    pipe: 0,
                    write: true,
                    flags: 0
                },
                OpenFile::Pipe {
                    pipe: 0,
                    write: false,
                    flags: 0
                },
            ]
        );
        let files = |h: usize| o.fds[h].iter().map(|f| (f.fd, f.file)).collect::<Vec<_>>();
        assert_eq!(files(0), [(1, 0), (4, 1)]);
        assert_eq!(files(1), [(1, 2), (4, 1)]);
        assert_eq!(files(2), [(0, 3), (1, 0)]);
        assert_eq!(o.pipes, [(11, 1)]);
        // The same pipes, not given anew: refused in a single process.
        let e = open_files(
            &holders[2..],
            &BTreeSet::new(),
            &BTreeSet::new(),
            false,
            same,
        )
        .expect_err("pipes");
        assert!(e.to_string().contains("fd 0 is a pipe"), "{e}");
    }

    #[test]
    fn the_callers_pipe_opened_anew_is_refused() {
        let holders = [
            Holder {
                pid: 10,
                fds: vec![fd(1, "pipe:[100]", 100, libc::O_WRONLY)],
            },
            Holder {
                pid: 11,
                fds: vec![fd(0, "pipe:[100]", 100, libc::O_RDONLY)],
            },
        ];
        let e = open_files(
            &holders,
            &BTreeSet::from([1]),
            &BTreeSet::new(),
            true,
            |a, b| a == b,
        )
        .expect_err("refused");
        assert!(e.to_string().contains("fd 0 of pid 11"), "{e}");
    }

    proptest! {
        /// Classes are exactly the sameness classes, numbered by first
        /// appearance.
        #[test]
        fn group_matches_sameness(desc in proptest::collection::vec(0u8..6, 0..40)) {
            let class = group(&desc, |d| d % 2, |a, b| a == b);
            for i in 0..desc.len() {
                for j in 0..desc.len() {
                    prop_assert_eq!(class[i] == class[j], desc[i] == desc[j]);
                }
            }
            let mut seen = 0;
            for &c in &class {
                prop_assert!(c <= seen);
                if c == seen {
                    seen += 1;
                }
            }
        }
    }
}
