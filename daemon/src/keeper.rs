//! The slow work on job checkpoints' image files, off the daemon's loop:
//! reading an image through to check its sum, syncing it to disk, and
//! renaming it into the store. A 256 MiB image takes hundreds of
//! milliseconds to read and seconds to sync on a busy disk, and the loop
//! owes heartbeats, leases and the consensus's messages meanwhile (with
//! this work on the master's loop, a 256 MiB checkpoint held it 1.3-1.7 s
//! and its voters elected another). One thread takes the tasks in order;
//! each result comes back through a channel and wakes the loop.
//!
//! What lives here: the thread and the tasks it does. What does not:
//! which image goes where, or telling anyone (the server).

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

use libmig::checkpoint::{Checker, PREAMBLE};
use libmig::msg::ImageId;

/// Something to do with an image file.
#[derive(Debug)]
pub enum Task {
    /// Check the image at `from` (size, magic, version, sum), sync it, and
    /// rename it to `to` (its directory made and synced): a VP's image of a
    /// job checkpoint, kept where it was written.
    Keep {
        /// Which image.
        image: ImageId,
        /// Where it was written.
        from: PathBuf,
        /// Where it is kept.
        to: PathBuf,
    },
    /// Sync the image at `from` (checked as it arrived) and rename it to
    /// `to`: a copy from another host.
    Seal {
        /// Which image.
        image: ImageId,
        /// Where it arrived.
        from: PathBuf,
        /// Where it is kept.
        to: PathBuf,
    },
    /// Read the image at `path` through and check it.
    Check {
        /// Which image.
        image: ImageId,
        /// Where it is kept.
        path: PathBuf,
    },
}

/// What came of a task.
#[derive(Debug, PartialEq)]
pub enum Done {
    /// `image` is kept, checked and durable: its size and sum.
    Kept {
        /// Which image.
        image: ImageId,
        /// Its size in bytes.
        size: u64,
        /// Its sum, as its preamble says.
        crc: u32,
    },
    /// `image` could not be kept (its files are gone).
    NotKept {
        /// Which image.
        image: ImageId,
        /// Why.
        reason: String,
        /// For lack of space.
        no_space: bool,
    },
    /// `image` was read through: intact, or why not.
    Checked {
        /// Which image.
        image: ImageId,
        /// The verdict.
        result: Result<(), String>,
    },
}

/// The thread, seen from the loop.
#[derive(Debug)]
pub struct Keeper {
    tasks: Sender<Task>,
    done: Receiver<Done>,
}

impl Keeper {
    /// Start the thread; `wake` is called after each result.
    pub fn start(wake: Arc<dyn Fn() + Send + Sync>) -> std::io::Result<Keeper> {
        let (tasks, todo) = channel::<Task>();
        let (tell, done) = channel::<Done>();
        std::thread::Builder::new()
            .name("mig-keeper".into())
            .spawn(move || {
                for t in todo {
                    if tell.send(work(t)).is_err() {
                        return;
                    }
                    wake();
                }
            })?;
        Ok(Keeper { tasks, done })
    }

    /// Hand `task` to the thread. (If it is gone, the task is done here.)
    pub fn send(&self, task: Task) -> Option<Done> {
        match self.tasks.send(task) {
            Ok(()) => None,
            Err(e) => Some(work(e.0)),
        }
    }

    /// The results ready now.
    pub fn done(&self) -> Vec<Done> {
        self.done.try_iter().collect()
    }
}

/// Do `task`.
pub fn work(task: Task) -> Done {
    match task {
        Task::Keep { image, from, to } => {
            let kept = check(&from).and_then(|(size, crc)| {
                seal(&from, &to)?;
                Ok((size, crc))
            });
            kept_or_not(image, kept, &[&from, &to])
        }
        Task::Seal { image, from, to } => {
            let kept = preamble_sum(&from).and_then(|(size, crc)| {
                seal(&from, &to)?;
                Ok((size, crc))
            });
            kept_or_not(image, kept, &[&from, &to])
        }
        Task::Check { image, path } => Done::Checked {
            image,
            result: check(&path).map(|_| ()).map_err(|e| e.reason),
        },
    }
}

/// Why an image file could not be kept.
#[derive(Debug)]
struct Failure {
    reason: String,
    no_space: bool,
}

impl Failure {
    fn io(path: &Path, e: &std::io::Error) -> Failure {
        Failure {
            reason: format!("{}: {e}", path.display()),
            no_space: matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)),
        }
    }
}

fn kept_or_not(image: ImageId, kept: Result<(u64, u32), Failure>, files: &[&Path]) -> Done {
    match kept {
        Ok((size, crc)) => Done::Kept { image, size, crc },
        Err(f) => {
            for p in files {
                crate::discard::remove_later(p);
            }
            Done::NotKept {
                image,
                reason: f.reason,
                no_space: f.no_space,
            }
        }
    }
}

/// Read the image at `path` through, checking it as a restore would: its
/// size and sum.
fn check(path: &Path) -> Result<(u64, u32), Failure> {
    let mut f = File::open(path).map_err(|e| Failure::io(path, &e))?;
    let mut c = Checker::default();
    let mut buf = vec![0u8; 1 << 20];
    let mut pre = Vec::with_capacity(PREAMBLE);
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Failure::io(path, &e)),
        };
        if pre.len() < PREAMBLE {
            let take = (PREAMBLE - pre.len()).min(n);
            pre.extend_from_slice(&buf[..take]);
        }
        c.update(&buf[..n]);
    }
    c.finish().map_err(|e| Failure {
        reason: format!("{}: {e}", path.display()),
        no_space: false,
    })?;
    Ok((c.seen(), sum_of(&pre)))
}

/// The size of the image at `path` and the sum its preamble announces.
fn preamble_sum(path: &Path) -> Result<(u64, u32), Failure> {
    let mut f = File::open(path).map_err(|e| Failure::io(path, &e))?;
    let size = f.metadata().map_err(|e| Failure::io(path, &e))?.len();
    let mut pre = [0u8; PREAMBLE];
    f.read_exact(&mut pre).map_err(|e| Failure::io(path, &e))?;
    Ok((size, sum_of(&pre)))
}

/// The checksum a preamble announces.
fn sum_of(pre: &[u8]) -> u32 {
    pre.get(12..16)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

/// Sync `from` to disk and rename it to `to` (its directory made, and
/// synced once it holds it).
fn seal(from: &Path, to: &Path) -> Result<(), Failure> {
    File::open(from)
        .and_then(|f| f.sync_all())
        .map_err(|e| Failure::io(from, &e))?;
    let dir = to.parent().unwrap_or(Path::new("."));
    crate::store::make_dir(dir).map_err(|e| Failure::io(dir, &e))?;
    std::fs::rename(from, to).map_err(|e| Failure::io(to, &e))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Failure::io(dir, &e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use libmig::checkpoint::{Header, Image, LibState};

    fn image_bytes() -> Vec<u8> {
        Image {
            header: Header {
                tid: 0x40001,
                job: "j1".into(),
                vp: 0,
                program: "p".into(),
                args: vec![],
                cwd: "/".into(),
                env: vec![],
            },
            state: vec![5; 3 << 20],
            lib: LibState::default(),
        }
        .encode()
        .unwrap()
    }

    fn id() -> ImageId {
        ImageId {
            job: "j1".into(),
            gen: 2,
            tid: 0x40001,
        }
    }

    #[test]
    fn an_image_is_checked_synced_and_renamed_or_refused_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = image_bytes();
        let crc = u32::from_le_bytes(bytes[12..16].try_into().unwrap());
        let from = dir.path().join("t40001.snap");
        let to = dir.path().join("ckpt/j1/g2/t40001.img");
        std::fs::write(&from, &bytes).unwrap();
        let image = id();
        let done = work(Task::Keep {
            image: image.clone(),
            from: from.clone(),
            to: to.clone(),
        });
        assert_eq!(
            done,
            Done::Kept {
                image: image.clone(),
                size: bytes.len() as u64,
                crc
            }
        );
        assert!(!from.exists() && std::fs::read(&to).unwrap() == bytes);
        assert_eq!(
            work(Task::Check {
                image: image.clone(),
                path: to.clone()
            }),
            Done::Checked {
                image: image.clone(),
                result: Ok(())
            }
        );
        // A damaged one: refused, naming its file, and gone.
        let mut bad = bytes.clone();
        bad[1000] ^= 1;
        std::fs::write(&from, &bad).unwrap();
        let Done::NotKept {
            reason, no_space, ..
        } = work(Task::Keep {
            image: image.clone(),
            from: from.clone(),
            to: dir.path().join("ckpt/j1/g3/t40001.img"),
        })
        else {
            panic!("kept a damaged image")
        };
        assert!(
            reason.contains("t40001.snap") && reason.contains("corrupted"),
            "{reason}"
        );
        assert!(!no_space);
        assert!(!from.exists());
        let Done::Checked { result, .. } = work(Task::Check {
            image: image.clone(),
            path: dir.path().join("none.img"),
        }) else {
            panic!()
        };
        assert!(result.unwrap_err().contains("none.img"));
        // A copy that arrived (checked on its way) is sealed as it is.
        let part = dir.path().join("t40001.img.part");
        std::fs::write(&part, &bytes).unwrap();
        let sealed = dir.path().join("ckpt/j1/g4/t40001.img");
        assert!(matches!(
            work(Task::Seal { image, from: part, to: sealed.clone() }),
            Done::Kept { crc: c, .. } if c == crc
        ));
        assert!(sealed.exists());
    }

    #[test]
    fn the_thread_answers_and_wakes_the_loop() {
        let dir = tempfile::tempdir().unwrap();
        let woken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let w = Arc::clone(&woken);
        let k = Keeper::start(Arc::new(move || {
            w.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }))
        .unwrap();
        assert!(k
            .send(Task::Check {
                image: id(),
                path: dir.path().join("x"),
            })
            .is_none());
        let t = std::time::Instant::now();
        let mut got = Vec::new();
        while got.is_empty() && t.elapsed() < std::time::Duration::from_secs(10) {
            got = k.done();
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(matches!(&got[..], [Done::Checked { result: Err(_), .. }]));
        assert_eq!(woken.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
