//! Removing VP images off the daemon's loop. The last name of a file of
//! hundreds of MiB going frees its pages there and then: unlinking 256 MiB
//! takes 55-85 ms on the machines we measure on, and a daemon moving a
//! host's VPs off would stop routing, watching the owner and answering for
//! that long, once a VP. Here the name goes at once, but the file is held
//! open and closed by a thread of its own, where the pages are freed.
//!
//! What lives here: `remove_later`. What does not: which files go when
//! (the server, `migrate`).

use std::fs::File;
use std::path::Path;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Mutex, OnceLock};

/// The thread that closes the files, started on first use (`None`: it
/// could not be started, and files are removed in place).
fn closer() -> Option<&'static Mutex<Sender<File>>> {
    static CLOSER: OnceLock<Option<Mutex<Sender<File>>>> = OnceLock::new();
    CLOSER
        .get_or_init(|| {
            let (tx, rx) = channel::<File>();
            std::thread::Builder::new()
                .name("mig-discard".into())
                .spawn(move || rx.into_iter().for_each(drop))
                .ok()
                .map(|_| Mutex::new(tx))
        })
        .as_ref()
}

/// Remove `path` now; the memory or disk its file held is freed by another
/// thread (in place when it cannot be). A file that is not there is no
/// error: there is nothing to remove.
pub fn remove_later(path: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    let held = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()
        .filter(|f| f.metadata().is_ok_and(|m| m.is_file()));
    let _ = std::fs::remove_file(path);
    if let (Some(file), Some(closer)) = (held, closer()) {
        if let Ok(tx) = closer.lock() {
            // (Sent, it is closed there; if the thread is gone, here.)
            let _ = tx.send(file);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_goes_at_once_and_a_missing_file_is_no_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t1.sent");
        std::fs::write(&p, vec![7u8; 1 << 20]).unwrap();
        remove_later(&p);
        assert!(!p.exists());
        remove_later(&p);
        // A symbolic link goes, not what it points at.
        let target = dir.path().join("kept");
        std::fs::write(&target, b"x").unwrap();
        let link = dir.path().join("t2.sent");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        remove_later(&link);
        assert!(!link.exists() && target.exists());
    }
}
