//! Every file a daemon keeps in its state directory, named in one place.
//!
//! What lives here: the layout (`control.sock`, `addr`, `metrics-addr`, `ckpt/` for job
//! checkpoints' images kept here, and per VP the image it writes for a
//! move or to be parked, `tTID.ckpt`; for a job checkpoint, `tTID.snap`;
//! parked on disk, `tTID.parked`; sent to another host and kept until it
//! runs there, `tTID.sent`; arriving from another host,
//! `tTID.restore.part` then `tTID.restore`), and sweeping those a daemon
//! that ran here before left. What does not: reading or writing them (the
//! server, `store`, libmig's checkpoint writer).

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use libmig::msg::Tid;

/// Make `dir` (and its missing parents) a directory only this user can
/// enter (0700), or check that an existing one is: a real directory, not a
/// symlink, owned by this user, writable by no one else. Another local user
/// who made it first (`/tmp/mig-UID`) could otherwise plant a key, or have
/// our logs overwrite their symlinks' targets. `Err` says what is wrong.
pub fn ensure_private_dir(dir: &Path) -> Result<(), String> {
    let shown = dir.display();
    match std::fs::symlink_metadata(dir) {
        Ok(m) => {
            if m.file_type().is_symlink() {
                return Err(format!(
                    "{shown} is a symbolic link: refusing to keep state through it (remove it, \
                     or choose another state directory)"
                ));
            }
            if !m.is_dir() {
                return Err(format!("{shown} is not a directory"));
            }
            let me = nix::unistd::geteuid().as_raw();
            if m.uid() != me {
                return Err(format!(
                    "{shown} belongs to user {}, not to you ({me}): another user may have made \
                     it first; remove it, or choose another state directory",
                    m.uid()
                ));
            }
            if m.mode() & 0o022 != 0 {
                return Err(format!(
                    "{shown} may be written by other users (mode {:o}): `chmod go-w` it, or \
                     choose another state directory",
                    m.mode() & 0o777
                ));
            }
            if m.mode() & 0o077 != 0 {
                let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("creating {shown}: {e}")),
        Err(e) => Err(format!("{shown}: {e}")),
    }
}

/// What tells a directory from another made later under its name: its
/// device, inode and (where the file system keeps one) birth time, since
/// a new directory may get the inode of a removed one.
type Identity = (u64, u64, Option<std::time::SystemTime>);

/// `dir`'s identity, if it is there.
fn identity_of(dir: &Path) -> Option<Identity> {
    std::fs::metadata(dir).ok().map(|m| identity(&m))
}

fn identity(m: &std::fs::Metadata) -> Identity {
    (m.dev(), m.ino(), m.created().ok())
}

/// A daemon's state directory.
#[derive(Debug, Clone)]
pub struct StateDir {
    root: PathBuf,
    /// The directory's identity when the daemon started.
    identity: Option<Identity>,
}

impl StateDir {
    /// The state directory at `root`.
    pub fn new(root: PathBuf) -> StateDir {
        let identity = identity_of(&root);
        StateDir { root, identity }
    }

    /// Is the directory the daemon started with still there (not removed,
    /// nor replaced by another of the same name)? Its control socket goes
    /// with it: a daemon whose directory is gone can be reached by no
    /// `mig` command.
    /// (Only a directory that is not found, or another one, says no: a
    /// passing error in reading it does not stop the daemon.)
    pub fn still_there(&self) -> bool {
        match std::fs::metadata(&self.root) {
            _ if self.identity.is_none() => true,
            Ok(m) => Some(identity(&m)) == self.identity,
            Err(e) => e.kind() != std::io::ErrorKind::NotFound,
        }
    }

    /// Its path.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The local control socket (`mig` talks to it; VPs too).
    pub fn control_socket(&self) -> PathBuf {
        self.root.join("control.sock")
    }

    /// The daemon's bound TCP address, written when it is ready.
    pub fn addr_file(&self) -> PathBuf {
        self.root.join("addr")
    }

    /// Where `--metrics` serves, once bound (`metrics-addr`).
    pub fn metrics_addr_file(&self) -> PathBuf {
        self.root.join("metrics-addr")
    }

    /// Job checkpoints' images kept here (see `store`).
    pub fn checkpoints(&self) -> PathBuf {
        self.root.join("ckpt")
    }

    /// The image VP `tid` writes when asked to move or to park.
    pub fn move_image(&self, tid: Tid) -> PathBuf {
        self.root.join(format!("t{tid:x}.ckpt"))
    }

    /// Is `path` the file VP `tid` writes its move image into before it
    /// renames it (the name libmig's writer uses)?
    pub fn is_move_image_being_written(&self, tid: Tid, path: &Path) -> bool {
        libmig::checkpoint::is_temp_of(path, &self.move_image(tid))
    }

    /// The image VP `tid` writes for a checkpoint of its job.
    pub fn snap_image(&self, tid: Tid) -> PathBuf {
        self.root.join(format!("t{tid:x}.snap"))
    }

    /// The image of VP `tid`, parked on disk while the owner has the host.
    pub fn parked(&self, tid: Tid) -> PathBuf {
        self.root.join(format!("t{tid:x}.parked"))
    }

    /// The image of VP `tid` sent to another host, kept until it runs there.
    pub fn sent(&self, tid: Tid) -> PathBuf {
        self.root.join(format!("t{tid:x}.sent"))
    }

    /// An image for VP `tid` arriving from another host, until it is whole.
    pub fn restore_part(&self, tid: Tid) -> PathBuf {
        self.root.join(format!("t{tid:x}.restore.part"))
    }

    /// The whole, checked image VP `tid` starts from here.
    pub fn restore(&self, tid: Tid) -> PathBuf {
        self.root.join(format!("t{tid:x}.restore"))
    }
}

/// Is `name` one of a VP's files (above), left by a daemon that ran in
/// this directory before? (Its VPs were started elsewhere once it was
/// gone: nothing in them is wanted now.)
pub fn is_vp_file(name: &str) -> bool {
    let Some((hex, kind)) = name.strip_prefix('t').and_then(|r| r.split_once('.')) else {
        return false;
    };
    let digits = |s: &str, hex: bool| {
        !s.is_empty()
            && s.chars().all(|c| {
                if hex {
                    c.is_ascii_hexdigit()
                } else {
                    c.is_ascii_digit()
                }
            })
    };
    digits(hex, true)
        && (matches!(
            kind,
            "ckpt" | "snap" | "parked" | "sent" | "restore" | "restore.part"
        ) || kind.strip_prefix("tmp.").is_some_and(|p| digits(p, false)))
}

impl StateDir {
    /// Remove the VP files (`is_vp_file`) a daemon that ran here before
    /// left; how many.
    pub fn sweep_vp_files(&self) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return 0;
        };
        entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .filter(|e| e.file_name().to_str().is_some_and(is_vp_file))
            .filter(|e| std::fs::remove_file(e.path()).is_ok())
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removed_or_replaced_state_directory_is_noticed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("h0");
        std::fs::create_dir(&dir).unwrap();
        let s = StateDir::new(dir.clone());
        assert!(s.still_there());
        std::fs::write(dir.join("migd.log"), "x").unwrap();
        assert!(s.still_there());
        let ino = std::fs::metadata(&dir).unwrap().ino();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(!s.still_there());
        // Another directory of the same name, told apart by its inode or,
        // where it got the old one's, by its birth time (ext4, tmpfs, btrfs
        // keep one).
        std::fs::create_dir(&dir).unwrap();
        let new = std::fs::metadata(&dir).unwrap();
        let told_apart = new.ino() != ino || new.created().is_ok();
        assert_eq!(s.still_there(), !told_apart);
    }

    #[test]
    fn a_state_directory_is_made_private_and_an_unsafe_one_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let fresh = tmp.path().join("a/b");
        ensure_private_dir(&fresh).unwrap();
        let mode = std::fs::metadata(&fresh).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
        ensure_private_dir(&fresh).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&fresh, &link).unwrap();
        assert!(ensure_private_dir(&link)
            .unwrap_err()
            .contains("symbolic link"));
        std::fs::set_permissions(&fresh, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(ensure_private_dir(&fresh)
            .unwrap_err()
            .contains("other users"));
        std::fs::set_permissions(&fresh, std::fs::Permissions::from_mode(0o755)).unwrap();
        ensure_private_dir(&fresh).unwrap();
        assert_eq!(std::fs::metadata(&fresh).unwrap().mode() & 0o777, 0o700);
        // Another user's directory (made so here when the tests run as root).
        if nix::unistd::geteuid().is_root() {
            let theirs = tmp.path().join("theirs");
            std::fs::create_dir(&theirs).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
            std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o700)).unwrap();
            assert!(ensure_private_dir(&theirs)
                .unwrap_err()
                .contains("belongs to user 65534"));
        }
    }

    #[test]
    fn every_file_of_a_vp_is_its_own_and_inside_the_directory() {
        let d = StateDir::new(PathBuf::from("/var/lib/migd"));
        let tid = 0x40001;
        let names = [
            d.move_image(tid),
            d.snap_image(tid),
            d.parked(tid),
            d.sent(tid),
            d.restore_part(tid),
            d.restore(tid),
        ];
        for (i, a) in names.iter().enumerate() {
            assert_eq!(a.parent(), Some(d.root()));
            assert!(a.to_string_lossy().contains("t40001."));
            for b in &names[i + 1..] {
                assert_ne!(a, b);
            }
        }
        let tmp = libmig::checkpoint::temp_path(&d.move_image(tid), 77);
        assert!(d.is_move_image_being_written(tid, &tmp));
        assert!(!d.is_move_image_being_written(0x40002, &tmp));
        // Every one of them is a VP's file; nothing else in the directory.
        for p in names.iter().chain([&tmp]) {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap();
            assert!(is_vp_file(name), "{name}");
        }
        for other in [
            "control.sock",
            "addr",
            "migd.log",
            "cluster.key",
            "ckpt",
            "replicas",
            "t.ckpt",
            "tzz.ckpt",
            "t40001.tmp.",
            "t40001.ckpt.old",
        ] {
            assert!(!is_vp_file(other), "{other}");
        }
    }

    #[test]
    fn a_restarted_daemon_sweeps_only_the_vp_files_left_behind() {
        let tmp = tempfile::tempdir().unwrap();
        let d = StateDir::new(tmp.path().to_path_buf());
        for f in [
            "t40001.sent",
            "t40002.parked",
            "t40003.tmp.99",
            "migd.log",
            "addr",
        ] {
            std::fs::write(tmp.path().join(f), b"x").unwrap();
        }
        std::fs::create_dir(d.checkpoints()).unwrap();
        assert_eq!(d.sweep_vp_files(), 3);
        let mut left: Vec<String> = std::fs::read_dir(tmp.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["addr", "ckpt", "migd.log"]);
    }
}
