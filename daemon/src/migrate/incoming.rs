//! The target end of a move, without I/O on sockets: an image arriving in
//! parts from the VP's previous host, written to its file as it arrives and
//! checked on the way (never held whole), then renamed into place.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::image_check::ImageCheck;
use libmig::msg::StartVp;
use mio::Token;

/// A VP's image arriving in parts, for `T` (how to start its VP, or
/// which job checkpoint's image it is).
#[derive(Debug)]
pub struct Incoming<T = StartVp> {
    /// The link it arrives on.
    from: Token,
    what: T,
    file: File,
    tmp: PathBuf,
    check: ImageCheck,
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
            check: ImageCheck::default(),
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
        self.check.update_at(at, part).map_err(refused)?;
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
                .and_then(|_| std::fs::rename(&tmp, path).map_err(|e| e.to_string()))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The image of a real process, saved from outside (`sleep`, stopped).
    fn outside_image() -> Vec<u8> {
        use std::os::unix::process::CommandExt;
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("60")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0);
        // SAFETY: close_range in the child between fork and exec touches
        // only the child's descriptors (what the test harness left open,
        // such as a build jobserver's pipe).
        unsafe {
            cmd.pre_exec(|| {
                libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
                Ok(())
            });
        }
        let mut child = cmd.spawn().expect("sleep");
        let pid = child.id() as i32;
        // SAFETY: kill takes integers only.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !crate::host::is_stopped(pid as u32) {
            assert!(std::time::Instant::now() < until, "sleep did not stop");
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let mut out = Vec::new();
        let r = mig_ckpt::dump(pid, &mig_ckpt::DumpOptions::default(), &mut out);
        let _ = child.kill();
        let _ = child.wait();
        r.expect("dump");
        out
    }

    fn arrive(image: &[u8], piece: usize, dir: &Path) -> Result<(), String> {
        let mut inc = Incoming::create(Token(1), (), dir.join("in.part")).map_err(|r| r.why)?;
        for (i, part) in image.chunks(piece).enumerate() {
            inc.take((i * piece) as u64, image.len() as u64, part)
                .map_err(|r| r.why)?;
        }
        inc.finish(image.len() as u64, &dir.join("in"))
    }

    #[test]
    fn an_image_saved_from_outside_is_checked_as_it_arrives() {
        let dir = tempfile::tempdir().expect("dir");
        let image = outside_image();
        for piece in [4096, 1 << 20, 777] {
            arrive(&image, piece, dir.path()).expect("a whole image");
            assert_eq!(std::fs::read(dir.path().join("in")).expect("kept"), image);
        }
        let mut damaged = image.clone();
        let last = damaged.len() - 4096 - 1;
        damaged[last] ^= 0x40;
        assert!(arrive(&damaged, 4096, dir.path()).is_err());
        assert!(arrive(&image[..image.len() - 1], 4096, dir.path()).is_err());
        // Out of order: refused at once.
        let mut inc = Incoming::create(Token(1), (), dir.path().join("x.part")).expect("file");
        inc.take(0, 0, &image[..4096]).expect("first piece");
        let e = inc.take(8192, 0, &image[8192..12288]).expect_err("a gap");
        assert!(e.why.contains("where 4096 was next"), "{}", e.why);
    }
}
