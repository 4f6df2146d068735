//! Job checkpoints' images kept on this host, per job and generation, in
//! `STATE_DIR/ckpt/JOB/gN/tTID.img` (a copy arriving from another host
//! is written to `tTID.img.part` beside it until it is whole): the image
//! of a VP of this host, kept where the VP wrote it, and copies of other
//! hosts' images.
//!
//! What lives here: the layout, and dropping generations (their files
//! removed off the loop). What does not: writing, checking or sending
//! images (`keeper`, the server), deciding what is kept where (the master).

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use libmig::msg::ImageId;

/// A directory of job checkpoints' images.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

/// A job name as a directory name: nothing that leaves the store.
fn safe(job: &str) -> Option<&str> {
    let ok = !job.is_empty()
        && job
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    ok.then_some(job)
}

/// Make `dir` and its missing parents, private (0700).
pub fn make_dir(dir: &Path) -> std::io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

impl Store {
    /// The store under `dir`.
    pub fn new(dir: PathBuf) -> Store {
        Store { dir }
    }

    /// Where `image` is kept here.
    pub fn path(&self, image: &ImageId) -> Result<PathBuf, String> {
        let job = safe(&image.job)
            .ok_or_else(|| format!("job name {:?} cannot name a directory", image.job))?;
        Ok(self
            .dir
            .join(job)
            .join(format!("g{}", image.gen))
            .join(format!("t{:x}.img", image.tid)))
    }

    /// Where a copy of `image` from another host is written until whole.
    pub fn part_path(&self, image: &ImageId) -> Result<PathBuf, String> {
        Ok(self.path(image)?.with_extension("img.part"))
    }

    /// Drop every generation of `job` but `keep` (none: the job is gone).
    pub fn prune(&self, job: &str, keep: &[u64]) {
        let Some(dir) = safe(job).map(|j| self.dir.join(j)) else {
            return;
        };
        let Ok(entries) = fs::read_dir(&dir) else {
            return;
        };
        for e in entries.flatten() {
            let id = e
                .file_name()
                .to_str()
                .and_then(|n| n.strip_prefix('g'))
                .and_then(|n| n.parse::<u64>().ok());
            if id.is_none_or(|id| !keep.contains(&id)) {
                remove_tree(&e.path());
            }
        }
        if keep.is_empty() {
            let _ = fs::remove_dir(&dir);
        }
    }

    /// Drop everything kept here (a daemon started again, or fenced: the
    /// master counts none of it any more); whether there was anything.
    pub fn clear(&self) -> bool {
        let had = fs::read_dir(&self.dir).is_ok_and(|mut d| d.next().is_some());
        remove_tree(&self.dir);
        had
    }

    /// Where the store is.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Remove `path` and what is under it, the files' pages freed off the loop
/// (`discard`). Nothing is followed out of it.
fn remove_tree(path: &Path) {
    let Ok(meta) = fs::symlink_metadata(path) else {
        return;
    };
    if meta.is_dir() {
        for e in fs::read_dir(path).into_iter().flatten().flatten() {
            remove_tree(&e.path());
        }
        let _ = fs::remove_dir(path);
    } else {
        crate::discard::remove_later(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(job: &str, gen: u64) -> ImageId {
        ImageId {
            job: job.into(),
            gen,
            tid: 0x40001,
        }
    }

    #[test]
    fn images_are_kept_per_job_and_generation_and_old_ones_go() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::new(dir.path().join("ckpt"));
        let p = s.path(&id("j1", 3)).unwrap();
        assert!(p.ends_with("ckpt/j1/g3/t40001.img"), "{}", p.display());
        assert!(s
            .part_path(&id("j1", 3))
            .unwrap()
            .ends_with("g3/t40001.img.part"));
        assert!(s.path(&id("../x", 1)).is_err());
        assert!(s.path(&id("", 1)).is_err());
        for g in [3, 4, 5] {
            let p = s.path(&id("j1", g)).unwrap();
            make_dir(p.parent().unwrap()).unwrap();
            fs::write(&p, b"img").unwrap();
        }
        s.prune("j1", &[4, 5]);
        assert!(!dir.path().join("ckpt/j1/g3").exists());
        assert!(dir.path().join("ckpt/j1/g5/t40001.img").exists());
        s.prune("j1", &[]);
        assert!(!dir.path().join("ckpt/j1").exists());
        fs::write(s.dir().join("stray"), b"x").unwrap();
        assert!(s.clear());
        assert!(!s.dir().exists());
        assert!(!s.clear());
    }
}
