//! Jobs that have ended, as `mig jobs` and `mig show` list them: a bounded
//! record kept with the master's replicated state (so a new master has it)
//! and written by the server to `history.jsonl` (so a master started again
//! on the same state directory has it). No I/O here.

use std::collections::VecDeque;

use libmig::msg::JobInfo;
use serde::{Deserialize, Serialize};

/// Jobs kept; the oldest go first.
pub const MAX_JOBS: usize = 10_000;

/// Ended jobs whose output is kept (at most 16 MiB each): the newest; an
/// older one's output goes, its record stays.
pub const OUTPUT_KEPT: usize = 1_000;

/// Ended jobs, oldest first.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct History {
    jobs: VecDeque<JobInfo>,
}

impl History {
    /// Keep `info` (a job that ended); the jobs whose kept output may go
    /// now (the one that fell out of the newest `OUTPUT_KEPT`, and any
    /// pushed out of the history).
    pub fn record(&mut self, info: JobInfo) -> Vec<String> {
        self.jobs.retain(|j| j.job != info.job);
        self.jobs.push_back(info);
        let mut gone = Vec::new();
        while self.jobs.len() > MAX_JOBS {
            if let Some(old) = self.jobs.pop_front() {
                gone.push(old.job);
            }
        }
        if let Some(old) = self
            .jobs
            .len()
            .checked_sub(OUTPUT_KEPT + 1)
            .and_then(|i| self.jobs.get(i))
        {
            gone.push(old.job.clone());
        }
        gone
    }

    /// Take jobs read back from disk (oldest first), under those already
    /// known.
    pub fn load(&mut self, read: Vec<JobInfo>) {
        let known: std::collections::HashSet<String> =
            self.jobs.iter().map(|j| j.job.clone()).collect();
        let mut all: VecDeque<JobInfo> = read
            .into_iter()
            .filter(|j| !known.contains(&j.job))
            .collect();
        all.extend(self.jobs.drain(..));
        while all.len() > MAX_JOBS {
            all.pop_front();
        }
        self.jobs = all;
    }

    /// An ended job.
    pub fn find(&self, job: &str) -> Option<&JobInfo> {
        self.jobs.iter().rev().find(|j| j.job == job)
    }

    /// Every ended job kept, oldest first.
    pub fn all(&self) -> impl Iterator<Item = &JobInfo> {
        self.jobs.iter()
    }

    /// The highest job number seen (`j17` -> 17), so that ids are not
    /// given out again after a master starts over.
    pub fn last_number(&self) -> u64 {
        self.jobs
            .iter()
            .filter_map(|j| j.job.strip_prefix('j')?.parse().ok())
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(n: usize) -> JobInfo {
        JobInfo {
            job: format!("j{n}"),
            program: "/bin/true".into(),
            args: vec![],
            uid: None,
            vps: 1,
            hosts: vec!["h0".into()],
            state: "exited".into(),
            submitted_ms: n as u64,
            ended_ms: Some(n as u64 + 1),
            status: Some(0),

            cpu_ms: 0,
        }
    }

    #[test]
    fn it_keeps_the_newest_jobs_and_says_which_went() {
        let mut h = History::default();
        for n in 1..=OUTPUT_KEPT {
            assert!(h.record(job(n)).is_empty());
        }
        // Past OUTPUT_KEPT, each new job lets the output of the one that
        // falls out of the newest go (its record stays).
        assert_eq!(h.record(job(OUTPUT_KEPT + 1)), ["j1"]);
        assert!(h.find("j1").is_some());
        for n in OUTPUT_KEPT + 2..=MAX_JOBS {
            assert_eq!(h.record(job(n)), [format!("j{}", n - OUTPUT_KEPT)]);
        }
        assert_eq!(
            h.record(job(MAX_JOBS + 1)),
            ["j1", &format!("j{}", MAX_JOBS + 1 - OUTPUT_KEPT)]
        );
        assert!(h.find("j1").is_none());
        assert_eq!(h.find("j2").map(|j| j.submitted_ms), Some(2));
        assert_eq!(h.all().count(), MAX_JOBS);
        assert_eq!(h.last_number(), MAX_JOBS as u64 + 1);
    }

    #[test]
    fn jobs_read_back_go_under_those_known_and_are_not_doubled() {
        let mut h = History::default();
        h.record(job(5));
        h.load(vec![job(1), job(2), job(5)]);
        let ids: Vec<&str> = h.all().map(|j| j.job.as_str()).collect();
        assert_eq!(ids, ["j1", "j2", "j5"]);
    }
}
