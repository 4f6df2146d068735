//! Job checkpoints on disk: the images of every VP of a job, per
//! generation, in `STATE_DIR/ckpt/JOB/gN/tTID.img` (and copies kept for
//! other hosts under `STATE_DIR/replicas/`).
//!
//! What lives here: writing an image atomically and durably, reading a
//! generation back with every image checked (a bad one is a clear error
//! naming its file), dropping old generations. What does not: deciding
//! when to checkpoint or restart (the master) or talking to anyone.

use std::fs;
use std::path::{Path, PathBuf};

use libmig::checkpoint::{write_bytes, Image};
use libmig::msg::Tid;

/// A directory of job checkpoints.
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

impl Store {
    /// The store under `dir`.
    pub fn new(dir: PathBuf) -> Store {
        Store { dir }
    }

    fn generation(&self, job: &str, id: u64) -> Option<PathBuf> {
        Some(self.dir.join(safe(job)?).join(format!("g{id}")))
    }

    /// Keep VP `tid`'s image of generation `id` of `job`.
    pub fn save(&self, job: &str, id: u64, tid: Tid, image: &[u8]) -> Result<PathBuf, String> {
        let dir = self
            .generation(job, id)
            .ok_or_else(|| format!("job name {job:?} cannot name a directory"))?;
        fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = dir.join(format!("t{tid:x}.img"));
        write_bytes(&path, image, true).map_err(|e| e.to_string())?;
        Ok(path)
    }

    /// The images of `tids` in generation `id` of `job`, each checked
    /// (size, magic, version, checksum) before it is used.
    pub fn load(&self, job: &str, id: u64, tids: &[Tid]) -> Result<Vec<(Tid, Vec<u8>)>, String> {
        let dir = self
            .generation(job, id)
            .ok_or_else(|| format!("job name {job:?} cannot name a directory"))?;
        tids.iter()
            .map(|&tid| {
                let path = dir.join(format!("t{tid:x}.img"));
                let bytes = fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                Image::check(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
                Ok((tid, bytes))
            })
            .collect()
    }

    /// Drop every generation of `job` but `keep`.
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
            if id.is_some_and(|id| !keep.contains(&id)) {
                let _ = fs::remove_dir_all(e.path());
            }
        }
        if keep.is_empty() {
            let _ = fs::remove_dir(&dir);
        }
    }

    /// Where the store is.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libmig::checkpoint::{Header, LibState};

    fn image(tid: Tid) -> Vec<u8> {
        let img = Image {
            header: Header {
                tid,
                job: "j1".into(),
                vp: 0,
                program: "p".into(),
                args: vec![],
                cwd: "/".into(),
                env: vec![],
            },
            state: vec![1, 2, 3],
            lib: LibState::default(),
        };
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x");
        img.write_transient(&p).unwrap();
        fs::read(&p).unwrap()
    }

    #[test]
    fn images_round_trip_and_a_bad_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::new(dir.path().join("ckpt"));
        let p = s.save("j1", 3, 0x40001, &image(0x40001)).unwrap();
        s.save("j1", 3, 0x40002, &image(0x40002)).unwrap();
        assert_eq!(s.load("j1", 3, &[0x40001, 0x40002]).unwrap().len(), 2);
        // Truncated: refused, naming the file.
        let bytes = fs::read(&p).unwrap();
        fs::write(&p, &bytes[..bytes.len() - 1]).unwrap();
        let e = s.load("j1", 3, &[0x40001, 0x40002]).unwrap_err();
        assert!(e.contains("t40001.img"), "{e}");
        // A flipped byte: the checksum says so.
        let mut bad = bytes.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        fs::write(&p, &bad).unwrap();
        assert!(s.load("j1", 3, &[0x40001]).is_err());
        assert!(s.load("j1", 4, &[0x40001]).unwrap_err().contains("g4"));
        assert!(s.save("../x", 1, 1, &bytes).is_err());
        s.save("j1", 5, 0x40001, &image(0x40001)).unwrap();
        s.prune("j1", &[5]);
        assert!(!dir.path().join("ckpt/j1/g3").exists());
        assert!(dir.path().join("ckpt/j1/g5").exists());
    }
}
