//! The target end of a move, without I/O on sockets: an image arriving in
//! parts from the VP's previous host, written to its file as it arrives and
//! checked on the way (never held whole), then renamed into place.

use std::fs::File;
use std::path::{Path, PathBuf};

use libmig::checkpoint::Checker;
use libmig::msg::StartVp;
use mio::Token;

/// A checkpoint image arriving in parts.
#[derive(Debug)]
pub struct Incoming {
    /// The link it arrives on.
    from: Token,
    start: StartVp,
    file: File,
    tmp: PathBuf,
    check: Checker,
}

impl Incoming {
    /// An image for `start` arriving on `from`, written to `tmp`.
    pub fn create(from: Token, start: StartVp, tmp: PathBuf) -> Result<Incoming, String> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| format!("{}: {e}", tmp.display()))?;
        Ok(Incoming {
            from,
            start,
            file,
            tmp,
            check: Checker::default(),
        })
    }

    /// The link it arrives on.
    pub fn from(&self) -> Token {
        self.from
    }

    /// How its VP starts.
    pub fn start(&self) -> &StartVp {
        &self.start
    }

    /// Bytes taken in so far.
    pub fn seen(&self) -> u64 {
        self.check.seen()
    }

    /// Take in `part` at offset `at` of an image of `total` bytes (0:
    /// not known yet). An error means the image is refused.
    pub fn take(&mut self, at: u64, total: u64, part: &[u8]) -> Result<(), String> {
        use std::os::unix::fs::FileExt;
        let end = at.saturating_add(part.len() as u64);
        if total > 0 && end > total {
            return Err("image parts overflow its size".into());
        }
        self.check.update_at(at, part).map_err(|e| e.to_string())?;
        self.file.write_all_at(part, at).map_err(|e| e.to_string())
    }

    /// The last part arrived and the image was `total` bytes: checked, it
    /// becomes `path`. How to start its VP, or why not (the file is gone).
    pub fn finish(self, total: u64, path: &Path) -> Result<StartVp, String> {
        let Incoming {
            start,
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
            Ok(()) => Ok(start),
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
