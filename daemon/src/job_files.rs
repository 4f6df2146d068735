//! What the master keeps on disk about jobs for their users: each job's
//! output (`jobs/JOB.out`, what `mig logs` reads, at most `MAX_OUTPUT`
//! bytes a job, removed when `master::history` lets it go) and the history of ended jobs (`history.jsonl`, one JSON
//! line a job, the previous file kept as `history.jsonl.1`), read back when
//! a master starts on the same state directory. What does not live here:
//! which jobs are kept (`master::history`), answering requests (the
//! server).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use libmig::msg::JobInfo;

/// Most output kept for one job; what follows is dropped, and said so.
pub const MAX_OUTPUT: u64 = 16 << 20;

/// Most bytes one `mig logs` answer carries.
pub const LOG_CHUNK: usize = 1 << 20;

/// The history file is started afresh past this size (the previous one is
/// kept beside it).
const MAX_HISTORY: u64 = 8 << 20;

/// Output files kept open at once (the most recently written).
const OPEN_FILES: usize = 64;

/// A job's output file and how much it holds.
struct OutFile {
    file: File,
    len: u64,
}

/// The job files under one state directory.
pub struct JobFiles {
    root: PathBuf,
    open: HashMap<String, OutFile>,
}

/// Is `job` a name that may be a file name (a job id such as `j17`)?
pub fn valid_job(job: &str) -> bool {
    !job.is_empty()
        && job.len() <= 64
        && job
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

impl JobFiles {
    /// The files under state directory `root`.
    pub fn new(root: &Path) -> JobFiles {
        JobFiles {
            root: root.to_path_buf(),
            open: HashMap::new(),
        }
    }

    fn output_path(&self, job: &str) -> PathBuf {
        self.root.join("jobs").join(format!("{job}.out"))
    }

    fn history_path(&self) -> PathBuf {
        self.root.join("history.jsonl")
    }

    /// Add a line to `job`'s output (past `MAX_OUTPUT`, one line saying
    /// the rest is not kept, then nothing).
    pub fn append_output(&mut self, job: &str, line: &str) -> io::Result<()> {
        if !valid_job(job) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "bad job name"));
        }
        if !self.open.contains_key(job) {
            if self.open.len() >= OPEN_FILES {
                self.open.clear();
            }
            std::fs::create_dir_all(self.root.join("jobs"))?;
            let file = open_append(&self.output_path(job))?;
            let len = file.metadata()?.len();
            self.open.insert(job.to_string(), OutFile { file, len });
        }
        let Some(f) = self.open.get_mut(job) else {
            return Ok(());
        };
        if f.len >= MAX_OUTPUT {
            return Ok(());
        }
        let mut bytes = format!("{line}\n").into_bytes();
        if f.len + bytes.len() as u64 > MAX_OUTPUT {
            bytes =
                format!("[mig: output past {} MiB is not kept]\n", MAX_OUTPUT >> 20).into_bytes();
            f.len = MAX_OUTPUT;
        } else {
            f.len += bytes.len() as u64;
        }
        f.file.write_all(&bytes)
    }

    /// `job`'s output from byte `offset` on: at most `LOG_CHUNK` bytes, and
    /// the offset after them (nothing kept yet: empty).
    pub fn read_output(&self, job: &str, offset: u64) -> io::Result<(Vec<u8>, u64)> {
        if !valid_job(job) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "bad job name"));
        }
        let mut file = match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(self.output_path(job))
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((Vec::new(), offset)),
            Err(e) => return Err(e),
        };
        file.seek(SeekFrom::Start(offset))?;
        let mut data = Vec::new();
        file.take(LOG_CHUNK as u64).read_to_end(&mut data)?;
        let next = offset + data.len() as u64;
        Ok((data, next))
    }

    /// `job` ended: its output file is closed (it stays on disk).
    pub fn close(&mut self, job: &str) {
        self.open.remove(job);
    }

    /// `job` left the history: its output goes.
    pub fn forget(&mut self, job: &str) {
        self.open.remove(job);
        if valid_job(job) {
            let _ = std::fs::remove_file(self.output_path(job));
        }
    }

    /// Add an ended job to the history file.
    pub fn append_history(&mut self, info: &JobInfo) -> io::Result<()> {
        let path = self.history_path();
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.len() > MAX_HISTORY) {
            std::fs::rename(&path, path.with_extension("jsonl.1"))?;
        }
        let mut line = serde_json::to_vec(info).map_err(io::Error::other)?;
        line.push(b'\n');
        open_append(&path)?.write_all(&line)
    }

    /// The ended jobs the history files hold, oldest first, and what in
    /// them could not be read (a damaged or cut-off file): one sentence a
    /// file, naming its lines, for the log and the console.
    pub fn read_history(&self) -> (Vec<JobInfo>, Vec<String>) {
        let mut jobs = Vec::new();
        let mut damage = Vec::new();
        let path = self.history_path();
        for p in [path.with_extension("jsonl.1"), path] {
            let Ok(f) = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&p)
            else {
                continue;
            };
            let mut bad = Vec::new();
            for (i, line) in io::BufReader::new(f).split(b'\n').enumerate() {
                match line.map(|l| serde_json::from_slice::<JobInfo>(&l)) {
                    Ok(Ok(j)) if valid_job(&j.job) => jobs.push(j),
                    Ok(Err(_)) | Ok(Ok(_)) | Err(_) => bad.push(i + 1),
                }
            }
            if !bad.is_empty() {
                let mut lines: Vec<String> = bad.iter().take(5).map(usize::to_string).collect();
                if bad.len() > 5 {
                    lines.push("...".into());
                }
                damage.push(format!(
                    "{}: {} not a job's record (line {}), skipped: `mig jobs` does not show \
                     what they held",
                    p.display(),
                    if bad.len() == 1 {
                        "1 line is".to_string()
                    } else {
                        format!("{} lines are", bad.len())
                    },
                    lines.join(", ")
                ));
            }
        }
        (jobs, damage)
    }

    /// The highest job number found in the files under the state
    /// directory (jobs' output, checkpoints and copies of them): a master
    /// starting there numbers its jobs above it, so that no new job meets
    /// an earlier one's files.
    pub fn highest_job(&self) -> u64 {
        ["jobs", "ckpt", "replicas"]
            .iter()
            .flat_map(|d| std::fs::read_dir(self.root.join(d)).into_iter().flatten())
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let n = name.strip_prefix('j')?;
                n.strip_suffix(".out").unwrap_or(n).parse::<u64>().ok()
            })
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(job: &str) -> JobInfo {
        JobInfo {
            job: job.into(),
            program: "/bin/echo".into(),
            args: vec!["hi".into()],
            uid: Some(1000),
            vps: 2,
            hosts: vec!["h0".into(), "h1".into()],
            state: "exited".into(),
            submitted_ms: 1,
            ended_ms: Some(2),
            status: Some(0),

            cpu_ms: 0,
        }
    }

    #[test]
    fn output_is_kept_read_from_an_offset_and_bounded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut f = JobFiles::new(dir.path());
        f.append_output("j1", "[t40001 h0] one").expect("append");
        f.append_output("j1", "[t40001 h0] two").expect("append");
        let (all, next) = f.read_output("j1", 0).expect("read");
        assert_eq!(all, b"[t40001 h0] one\n[t40001 h0] two\n");
        let (rest, _) = f.read_output("j1", 16).expect("read");
        assert_eq!(rest, b"[t40001 h0] two\n");
        assert_eq!(f.read_output("j1", next).expect("read").0, b"");
        assert_eq!(f.read_output("j9", 0).expect("nothing yet").0, b"");
        // Past the bound: one line saying so, then nothing.
        let big = "x".repeat(1 << 20);
        for _ in 0..20 {
            f.append_output("j2", &big).expect("append");
        }
        let size = std::fs::metadata(dir.path().join("jobs/j2.out"))
            .expect("file")
            .len();
        assert!(size <= MAX_OUTPUT, "{size}");
        let mut tail = Vec::new();
        let mut at = 0;
        loop {
            let (d, n) = f.read_output("j2", at).expect("read");
            if d.is_empty() {
                break;
            }
            tail = d;
            at = n;
        }
        assert!(String::from_utf8_lossy(&tail).ends_with("is not kept]\n"));
        f.forget("j2");
        assert!(!dir.path().join("jobs/j2.out").exists());
    }

    #[test]
    fn names_that_are_not_job_ids_touch_no_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut f = JobFiles::new(dir.path());
        for bad in ["../x", "", "a/b", &"j".repeat(65)] {
            assert!(f.append_output(bad, "line").is_err(), "{bad:?}");
            assert!(f.read_output(bad, 0).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn history_survives_as_lines_and_damaged_lines_are_counted_not_fatal() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut f = JobFiles::new(dir.path());
        f.append_history(&info("j1")).expect("append");
        f.append_history(&info("j2")).expect("append");
        // A cut-off last line and a line of garbage.
        let mut h = open_append(&dir.path().join("history.jsonl")).expect("open");
        h.write_all(b"{\"job\":\"j3\",\"prog\n\xff\xfe garbage\n")
            .expect("write");
        let (jobs, bad) = JobFiles::new(dir.path()).read_history();
        assert_eq!(jobs, [info("j1"), info("j2")]);
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert!(
            bad[0].contains("history.jsonl: 2 lines are not a job's record (line 3, 4)"),
            "{bad:?}"
        );
    }

    #[test]
    fn job_numbers_go_above_every_earlier_jobs_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut f = JobFiles::new(dir.path());
        assert_eq!(f.highest_job(), 0);
        f.append_output("j7", "[t40001 h0] one").expect("append");
        std::fs::create_dir_all(dir.path().join("ckpt/j12")).expect("mkdir");
        std::fs::create_dir_all(dir.path().join("replicas/j9")).expect("mkdir");
        std::fs::create_dir_all(dir.path().join("ckpt/other")).expect("mkdir");
        assert_eq!(f.highest_job(), 12);
    }
}
