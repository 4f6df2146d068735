//! The target end of a move, without I/O on sockets: an image arriving in
//! parts from the VP's previous host, written to its file as it arrives and
//! checked on the way (never held whole), then renamed into place.

use std::fs::File;
use std::path::{Path, PathBuf};

use libmig::checkpoint::Checker;
use libmig::msg::StartVp;
use mio::Token;

/// A checkpoint image arriving in parts, for `T` (how to start its VP, or
/// which job checkpoint's image it is).
#[derive(Debug)]
pub struct Incoming<T = StartVp> {
    /// The link it arrives on.
    from: Token,
    what: T,
    file: File,
    tmp: PathBuf,
    check: Checker,
}

/// Why an image arriving is refused.
#[derive(Debug)]
pub struct Refused {
    /// Why.
    pub why: String,
    /// Its file could not be written for lack of space (ENOSPC, EDQUOT).
    pub no_space: bool,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

impl Refused {
    fn io(path: &Path, e: &std::io::Error) -> Refused {
        Refused {
            why: format!("{}: {e}", path.display()),
            no_space: matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)),
        }
    }
}

impl<T> Incoming<T> {
    /// An image for `what` arriving on `from`, written to `tmp`.
    pub fn create(from: Token, what: T, tmp: PathBuf) -> Result<Incoming<T>, Refused> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| Refused::io(&tmp, &e))?;
        Ok(Incoming {
            from,
            what,
            file,
            tmp,
            check: Checker::default(),
        })
    }

    /// The link it arrives on.
    pub fn from(&self) -> Token {
        self.from
    }

    /// What it is for (how its VP starts).
    pub fn what(&self) -> &T {
        &self.what
    }

    /// Bytes taken in so far.
    pub fn seen(&self) -> u64 {
        self.check.seen()
    }

    /// Take in `part` at offset `at` of an image of `total` bytes (0:
    /// not known yet). An error means the image is refused.
    pub fn take(&mut self, at: u64, total: u64, part: &[u8]) -> Result<(), Refused> {
        use std::os::unix::fs::FileExt;
        let end = at.saturating_add(part.len() as u64);
        let refused = |why: String| Refused {
            why,
            no_space: false,
        };
        if total > 0 && end > total {
            return Err(refused("image parts overflow its size".into()));
        }
        self.check
            .update_at(at, part)
            .map_err(|e| refused(e.to_string()))?;
        self.file
            .write_all_at(part, at)
            .map_err(|e| Refused::io(&self.tmp, &e))
    }

    /// The last part arrived and the image was `total` bytes: checked, it
    /// becomes `path`. What it was for, or why not (the file is gone).
    pub fn finish(self, total: u64, path: &Path) -> Result<T, String> {
        let Incoming {
            what,
            file,
            tmp,
            check,
            ..
        } = self;
        drop(file);
        let seen = check.seen();
        let ready = if seen != total {
            Err(format!("{seen} bytes of an image of {total} arrived"))
        } else {
            check
                .finish()
                .map_err(|e| e.to_string())
                .and_then(|()| std::fs::rename(&tmp, path).map_err(|e| e.to_string()))
        };
        match ready {
            Ok(()) => Ok(what),
            Err(e) => {
                crate::discard::remove_later(&tmp);
                Err(e)
            }
        }
    }

    /// Given up: its file goes.
    pub fn discard(self) {
        crate::discard::remove_later(&self.tmp);
    }
}
