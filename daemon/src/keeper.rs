//! The slow work on job checkpoints' image files, off the daemon's loop:
//! reading an image through to check its sum, syncing it to disk, and
//! renaming it into the store; reading an image being copied to another
//! host, and writing (and summing) one arriving. A 256 MiB image takes
//! hundreds of milliseconds to read and seconds to sync on a busy disk,
//! and a write may wait on the disk for as long; the loop owes heartbeats,
//! leases and the consensus's messages meanwhile (with this work on the
//! master's loop, a 256 MiB checkpoint held it 1.3-1.7 s and its voters
//! elected another). One thread takes the tasks in order; each copy going
//! out or coming in has a thread of its own. Results come back through one
//! channel and wake the loop.
//!
//! What lives here: the threads and the work they do. What does not:
//! which image goes where, or telling anyone (the server).

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, TryRecvError};
use std::sync::Arc;

use libmig::checkpoint::PREAMBLE;

use crate::image_check::ImageCheck;
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
    /// A copy of `image` arriving is written (and summed) up to `upto`.
    Wrote {
        /// Which image.
        image: ImageId,
        /// Bytes written from its start.
        upto: u64,
    },
    /// A part of `image` going out was read: there may be more to send.
    Read {
        /// Which image.
        image: ImageId,
    },
}

/// The thread, seen from the loop.
pub struct Keeper {
    tasks: Sender<Task>,
    done: Receiver<Done>,
    tell: Sender<Done>,
    wake: Arc<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for Keeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keeper")
    }
}

/// Parts of an image going out, read ahead on a thread of their own (two at
/// most: they are read as they go).
#[derive(Debug)]
pub struct Reader {
    parts: Receiver<Result<Vec<u8>, String>>,
    /// The image's size.
    pub total: u64,
    /// Bytes handed out so far.
    pub at: u64,
}

impl Reader {
    /// The next part, if one is read: (where it goes, its bytes), or why
    /// the image cannot be read. `None`: not yet, or all of it went.
    pub fn next_part(&mut self) -> Option<Result<(u64, Vec<u8>), String>> {
        match self.parts.try_recv() {
            Ok(Ok(bytes)) => {
                let at = self.at;
                self.at += bytes.len() as u64;
                Some(Ok((at, bytes)))
            }
            Ok(Err(e)) => Some(Err(e)),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) if self.at < self.total => Some(Err(format!(
                "it ended after {} of {} bytes",
                self.at, self.total
            ))),
            Err(TryRecvError::Disconnected) => None,
        }
    }
}

/// A copy of an image arriving, written and summed on a thread of its own
/// as its parts come (`Done::Wrote` after each, `Done::Kept` or `NotKept`
/// at the end). Dropped before its last part, the copy is given up and its
/// file goes.
#[derive(Debug)]
pub struct Writer {
    parts: Sender<(u64, u64, Vec<u8>)>,
}

impl Writer {
    /// Part `bytes` at `at` of an image of `total` bytes.
    pub fn take(&self, at: u64, total: u64, bytes: Vec<u8>) {
        // (A writer that stopped has said why.)
        let _ = self.parts.send((at, total, bytes));
    }
}

impl Keeper {
    /// Start the thread; `wake` is called after each result.
    pub fn start(wake: Arc<dyn Fn() + Send + Sync>) -> std::io::Result<Keeper> {
        let (tasks, todo) = channel::<Task>();
        let (tell, done) = channel::<Done>();
        let (to_loop, woken) = (tell.clone(), Arc::clone(&wake));
        std::thread::Builder::new()
            .name("mig-keeper".into())
            .spawn(move || {
                for t in todo {
                    if to_loop.send(work(t)).is_err() {
                        return;
                    }
                    woken();
                }
            })?;
        Ok(Keeper {
            tasks,
            done,
            tell,
            wake,
        })
    }

    /// Read `image` at `path` ahead, `part` bytes at a time, on a thread
    /// of its own.
    pub fn read(&self, image: ImageId, path: &Path, part: usize) -> Result<Reader, String> {
        let io = |e: std::io::Error| format!("{}: {e}", path.display());
        let mut f = File::open(path).map_err(io)?;
        let total = f.metadata().map_err(io)?.len();
        let (give, parts) = sync_channel(2);
        let (tell, wake) = (self.tell.clone(), Arc::clone(&self.wake));
        let shown = path.display().to_string();
        std::thread::Builder::new()
            .name("mig-image-out".into())
            .spawn(move || {
                let mut left = total;
                while left > 0 {
                    let mut buf = vec![0u8; part.min(left as usize)];
                    let read = f.read_exact(&mut buf).map_err(|e| format!("{shown}: {e}"));
                    let failed = read.is_err();
                    if give.send(read.map(|()| buf)).is_err() || failed {
                        return;
                    }
                    left -= part.min(left as usize) as u64;
                    let _ = tell.send(Done::Read {
                        image: image.clone(),
                    });
                    wake();
                }
            })
            .map_err(|e| format!("a thread to read {}: {e}", path.display()))?;
        Ok(Reader {
            parts,
            total,
            at: 0,
        })
    }

    /// Take in a copy of `image`, written to `tmp` (made now) and summed
    /// as it arrives on a thread of its own; once whole and intact, synced
    /// and renamed to `to`.
    pub fn write(&self, image: ImageId, tmp: PathBuf, to: PathBuf) -> Writer {
        let (parts, arriving) = channel::<(u64, u64, Vec<u8>)>();
        let (tell, wake) = (self.tell.clone(), Arc::clone(&self.wake));
        let spawned = std::thread::Builder::new()
            .name("mig-image-in".into())
            .spawn({
                let (tell, wake, image) = (tell.clone(), Arc::clone(&wake), image.clone());
                move || {
                    let done = take_in(&image, &tmp, &to, arriving, &|upto| {
                        let _ = tell.send(Done::Wrote {
                            image: image.clone(),
                            upto,
                        });
                        wake();
                    });
                    let _ = tell.send(kept_or_not(image, done, &[&tmp]));
                    wake();
                }
            });
        if let Err(e) = spawned {
            let _ = tell.send(Done::NotKept {
                image,
                reason: format!("no thread to take it in: {e}"),
                no_space: false,
            });
            wake();
        }
        Writer { parts }
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

/// Write the parts of a copy of `image` to `tmp` as they arrive, summing
/// them (`wrote` hears how far), then sync it and rename it to `to`: its
/// size and sum.
fn take_in(
    image: &ImageId,
    tmp: &Path,
    to: &Path,
    arriving: Receiver<(u64, u64, Vec<u8>)>,
    wrote: &dyn Fn(u64),
) -> Result<(u64, u32), Failure> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let dir = tmp.parent().unwrap_or(Path::new("."));
    crate::store::make_dir(dir).map_err(|e| Failure::io(dir, &e))?;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(tmp)
        .map_err(|e| Failure::io(tmp, &e))?;
    let mut check = ImageCheck::default();
    let limit = libmig::checkpoint::MAX_IMAGE + PREAMBLE as u64;
    let refused = |reason: String| Failure {
        reason,
        no_space: false,
    };
    for (at, total, bytes) in arriving {
        let end = at.saturating_add(bytes.len() as u64);
        if total > limit || end > total {
            return Err(refused(format!(
                "{image}: parts beyond its size ({total} bytes)"
            )));
        }
        check
            .update_at(at, &bytes)
            .map_err(|e| refused(format!("{image}: {e}")))?;
        file.write_all_at(&bytes, at)
            .map_err(|e| Failure::io(tmp, &e))?;
        wrote(end);
        if end == total {
            let sum = check
                .finish()
                .map_err(|e| refused(format!("{image}: {e}")))?;
            drop(file);
            seal(tmp, to)?;
            return Ok((total, sum));
        }
    }
    Err(refused(format!(
        "its copy stopped coming after {} bytes",
        check.seen()
    )))
}

/// Read the image at `path` through, checking it as a restore would: its
/// size and sum.
fn check(path: &Path) -> Result<(u64, u32), Failure> {
    let mut f = File::open(path).map_err(|e| Failure::io(path, &e))?;
    let mut c = ImageCheck::default();
    let mut buf = vec![0u8; 1 << 20];
    let bad = |e: String| Failure {
        reason: format!("{}: {e}", path.display()),
        no_space: false,
    };
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Failure::io(path, &e)),
        };
        c.update(&buf[..n]).map_err(bad)?;
    }
    let seen = c.seen();
    let sum = c.finish().map_err(bad)?;
    Ok((seen, sum))
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
    }

    #[test]
    fn a_copy_is_read_ahead_and_one_arriving_is_written_summed_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = image_bytes();
        let from = dir.path().join("from.img");
        std::fs::write(&from, &bytes).unwrap();
        let k = Keeper::start(Arc::new(|| {})).unwrap();
        let mut r = k.read(id(), &from, 1 << 20).unwrap();
        assert_eq!(r.total, bytes.len() as u64);
        let to = dir.path().join("ckpt/j1/g2/t40001.img");
        let w = k.write(id(), to.with_extension("img.part"), to.clone());
        let t = std::time::Instant::now();
        let mut parts = 0;
        while r.at < r.total && t.elapsed() < std::time::Duration::from_secs(10) {
            match r.next_part() {
                Some(Ok((at, part))) => {
                    parts += 1;
                    w.take(at, r.total, part);
                }
                Some(Err(e)) => panic!("{e}"),
                None => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
        }
        assert_eq!(parts, 4, "3 MiB and a little, in parts of 1 MiB");
        let mut got = Vec::new();
        while !got.iter().any(|d| matches!(d, Done::Kept { .. }))
            && t.elapsed() < std::time::Duration::from_secs(10)
        {
            got.extend(k.done());
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let crc = u32::from_le_bytes(bytes[12..16].try_into().unwrap());
        assert!(got.contains(&Done::Kept {
            image: id(),
            size: bytes.len() as u64,
            crc
        }));
        assert!(got.contains(&Done::Wrote {
            image: id(),
            upto: bytes.len() as u64
        }));
        assert_eq!(std::fs::read(&to).unwrap(), bytes);
        // A copy cut short, or damaged, is not kept, and its file goes.
        let w = k.write(
            id(),
            dir.path().join("cut.part"),
            dir.path().join("cut.img"),
        );
        w.take(0, bytes.len() as u64, bytes[..1000].to_vec());
        drop(w);
        let mut bad = bytes.clone();
        bad[5000] ^= 1;
        let w = k.write(
            id(),
            dir.path().join("bad.part"),
            dir.path().join("bad.img"),
        );
        w.take(0, bad.len() as u64, bad);
        let mut reasons = Vec::new();
        while reasons.len() < 2 && t.elapsed() < std::time::Duration::from_secs(10) {
            for d in k.done() {
                if let Done::NotKept { reason, .. } = d {
                    reasons.push(reason);
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        reasons.sort();
        assert!(reasons[0].contains("corrupted"), "{reasons:?}");
        assert!(
            reasons[1].contains("stopped coming after 1000 bytes"),
            "{reasons:?}"
        );
        assert!(!dir.path().join("cut.part").exists() && !dir.path().join("bad.img").exists());
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
