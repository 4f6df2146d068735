//! Format version 1: one process, its descriptors given anew by number or
//! reopened by path. Read only, and turned into the current [`Image`] of
//! one process whose pid need not be kept (as version 1 restored it). The
//! types here are frozen: postcard is positional, so they are what version
//! 1 wrote, field by field.

use serde::{Deserialize, Serialize};

use super::{
    Cpu, Image, MmFields, OpenFile, Proc, ProcState, Region, SigAction, SigInfo, Special, Thread,
};

/// A version 1 image's metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// The pid it had.
    pub pid: i32,
    /// Its program file.
    pub exe: String,
    /// Its memory, in address order.
    pub regions: Vec<Region>,
    /// The vDSO and its data pages.
    pub specials: Vec<Special>,
    /// sha256 of the vDSO.
    #[serde(with = "serde_bytes")]
    pub vdso_hash: Vec<u8>,
    /// Its threads, the main one first.
    pub threads: Vec<Thread>,
    /// Signal dispositions other than the default.
    pub sigactions: Vec<SigAction>,
    /// Signals pending for the whole process.
    pub shared_pending: Vec<SigInfo>,
    /// Its file descriptors.
    pub fds: Vec<Fd>,
    /// Working directory.
    pub cwd: String,
    /// File creation mask.
    pub umask: u32,
    /// Resource limits.
    pub rlimits: Vec<(u32, u64, u64)>,
    /// The `mm` fields.
    pub mm: MmFields,
    /// The auxiliary vector.
    #[serde(with = "serde_bytes")]
    pub auxv: Vec<u8>,
    /// Interval timers.
    pub itimers: Vec<(u64, u64)>,
    /// What restore needs of the machine.
    pub cpu: Cpu,
}

/// A version 1 descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fd {
    /// Its number.
    pub fd: i32,
    /// What it is.
    pub kind: FdKind,
    /// `FD_CLOEXEC`.
    pub cloexec: bool,
}

/// What a version 1 descriptor refers to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FdKind {
    /// Given anew by the caller at restore.
    External,
    /// Reopened by path.
    Path {
        /// Its path.
        path: String,
        /// `O_*` status flags.
        flags: i32,
        /// File offset.
        pos: u64,
    },
}

impl From<Meta> for Image {
    /// One process, each descriptor an open file of its own (version 1 did
    /// not know which were shared).
    fn from(m: Meta) -> Image {
        let mut files = Vec::new();
        let fds = m
            .fds
            .into_iter()
            .map(|f| {
                files.push(match f.kind {
                    FdKind::External => OpenFile::External { fd: f.fd },
                    FdKind::Path { path, flags, pos } => OpenFile::Path { path, flags, pos },
                });
                super::Fd {
                    fd: f.fd,
                    file: files.len() as u32 - 1,
                    cloexec: f.cloexec,
                }
            })
            .collect();
        let meta = super::Meta {
            exe: m.exe,
            regions: m.regions,
            specials: m.specials,
            vdso_hash: m.vdso_hash,
            threads: m.threads,
            sigactions: m.sigactions,
            shared_pending: m.shared_pending,
            fds,
            cwd: m.cwd,
            umask: m.umask,
            rlimits: m.rlimits,
            mm: m.mm,
            auxv: m.auxv,
            itimers: m.itimers,
            cpu: m.cpu,
        };
        Image {
            keep_pids: false,
            procs: vec![Proc {
                pid: m.pid,
                ppid: 0,
                pgid: 0,
                sid: 0,
                state: ProcState::Live(Box::new(meta)),
            }],
            needs: None,
            inputs: Vec::new(),
            sockets: Vec::new(),
            memfds: Vec::new(),
            files,
            pipes: Vec::new(),
        }
    }
}
