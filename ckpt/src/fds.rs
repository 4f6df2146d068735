//! File descriptors of a process to save: what each one is, and whether it
//! can be reopened elsewhere. The decision ([`decide`]) is pure and says in
//! words why a descriptor cannot be saved ("fd 5 is a TCP socket
//! 127.0.0.1:40000 -> 1.2.3.4:80"); [`read_fds`] gathers the facts from
//! `/proc/PID/fd` and `fdinfo`. Reopening them lives in `restore`.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};

use crate::image::{Fd, FdKind};
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

/// How descriptor `f` is saved, or in words why it cannot be. `external`
/// descriptors are given anew by the caller at restore.
pub fn decide(f: &FdFacts, external: bool, net: &NetTables) -> Result<Fd, String> {
    let cloexec = f.flags & libc::O_CLOEXEC != 0;
    if external {
        return Ok(Fd {
            fd: f.fd,
            kind: FdKind::External,
            cloexec,
        });
    }
    let no = |what: String| Err(format!("fd {} is {what}", f.fd));
    let path_fd = || {
        Ok(Fd {
            fd: f.fd,
            kind: FdKind::Path {
                path: f.link.clone(),
                flags: f.flags & !libc::O_CLOEXEC,
                pos: f.pos,
            },
            cloexec,
        })
    };
    if let Some(rest) = f.link.strip_prefix("socket:[") {
        let inode = rest.trim_end_matches(']').parse().unwrap_or(0);
        return no(describe_socket(net, inode));
    }
    if f.link.starts_with("pipe:") {
        return no("a pipe (not one the caller gives anew)".into());
    }
    if let Some(rest) = f.link.strip_prefix("anon_inode:") {
        let what = rest.trim_matches(|c| c == '[' || c == ']');
        return no(format!("an {what} descriptor"));
    }
    if f.link.ends_with(" (deleted)") {
        return no(format!("a deleted file ({})", f.link));
    }
    if f.link.starts_with("/memfd:") {
        return no(format!("a memfd ({})", f.link));
    }
    if !f.link.starts_with('/') {
        return no(format!("{} (not a file)", f.link));
    }
    match f.kind {
        FileKind::Regular | FileKind::Dir => path_fd(),
        FileKind::Char
            if SAFE_DEVICES
                .iter()
                .any(|(p, dev)| *p == f.link && *dev == f.rdev) =>
        {
            path_fd()
        }
        FileKind::Char => no(format!("the device {}", f.link)),
        FileKind::Fifo => no(format!("a FIFO ({})", f.link)),
        FileKind::Socket => no(format!("a socket ({})", f.link)),
        FileKind::Other => no(format!("{} (not a regular file)", f.link)),
    }
}

/// The descriptors of `pid`, each saved or refused in words.
pub fn read_fds(pid: i32, external: &BTreeSet<i32>) -> Result<Vec<Fd>, FdsError> {
    let dir = format!("/proc/{pid}/fd");
    let entries = fs::read_dir(&dir).map_err(|e| FdsError::Proc(format!("{dir}: {e}")))?;
    let mut nums: Vec<i32> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    nums.sort_unstable();
    // The socket tables are read only when a socket is to be named.
    let mut net: Option<NetTables> = None;
    let mut out = Vec::new();
    let mut refused = Vec::new();
    for fd in nums {
        let link_path = format!("/proc/{pid}/fd/{fd}");
        let link = match fs::read_link(&link_path) {
            Ok(l) => l.to_string_lossy().into_owned(),
            Err(e) => return Err(FdsError::Proc(format!("{link_path}: {e}"))),
        };
        let (kind, rdev) = match fs::metadata(&link_path) {
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
                (kind, (libc::major(rdev), libc::minor(rdev)))
            }
            Err(_) => (FileKind::Other, (0, 0)),
        };
        let info_path = format!("/proc/{pid}/fdinfo/{fd}");
        let info = fs::read_to_string(&info_path)
            .map_err(|e| FdsError::Proc(format!("{info_path}: {e}")))?;
        let (pos, flags) = parse_fdinfo(&info)
            .ok_or_else(|| FdsError::Proc(format!("{info_path}: unreadable")))?;
        let facts = FdFacts {
            fd,
            link,
            kind,
            rdev,
            pos,
            flags,
        };
        let is_socket = facts.link.starts_with("socket:") && !external.contains(&fd);
        if is_socket && net.is_none() {
            net = Some(NetTables::read(pid));
        }
        let tables = net.as_ref().filter(|_| is_socket);
        match decide(
            &facts,
            external.contains(&fd),
            tables.unwrap_or(&NetTables::default()),
        ) {
            Ok(f) => out.push(f),
            Err(why) => refused.push(why),
        }
    }
    if !refused.is_empty() {
        return Err(FdsError::Refused(refused.join("; ")));
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

    fn facts(link: &str, kind: FileKind, rdev: (u32, u32)) -> FdFacts {
        FdFacts {
            fd: 5,
            link: link.into(),
            kind,
            rdev,
            pos: 7,
            flags: libc::O_RDWR | libc::O_CLOEXEC,
        }
    }

    #[test]
    fn files_are_reopened_by_path() {
        let net = NetTables::default();
        let f = decide(&facts("/tmp/x", FileKind::Regular, (0, 0)), false, &net).expect("ok");
        assert!(f.cloexec);
        assert_eq!(
            f.kind,
            FdKind::Path {
                path: "/tmp/x".into(),
                flags: libc::O_RDWR,
                pos: 7
            }
        );
        assert!(decide(&facts("/dev/null", FileKind::Char, (1, 3)), false, &net).is_ok());
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
            let e = decide(c, false, &net).expect_err("refused");
            assert!(e.starts_with("fd 5 is "), "{e}");
        }
        assert!(decide(&cases[1], true, &net).is_ok());
        assert!(decide(&cases[3], false, &net)
            .expect_err("io_uring")
            .contains("io_uring"));
    }
}
