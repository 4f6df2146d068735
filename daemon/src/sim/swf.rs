//! Reading workloads: the Standard Workload Format of the Parallel
//! Workloads Archive, and the pyss test-vector format.
//!
//! What lives here: parsing text into `Job`s with counts of what was
//! skipped and why, and errors that name the line. What does not: reading
//! files or gzip (the CLI hands in text).

use thiserror::Error;

/// One job of a workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// Job number as in the trace (text, so pyss ids like `100.3` survive).
    pub id: String,
    /// Submit time, seconds.
    pub submit: f64,
    /// Run time on dedicated speed-1 processors, seconds.
    pub run: f64,
    /// Processors (VPs).
    pub procs: u32,
    /// The user's estimate (requested time), at least `run`.
    pub estimate: f64,
    /// Memory per processor in KB (used, else requested; 0 when unknown):
    /// the state a VP of this job carries when it moves.
    pub memory_kb: f64,
    /// Memory per processor in KB a scheduler must find for it before it
    /// starts (requested, else used; 0 when unknown): what each of its
    /// VPs holds resident on a node (`Conditions::node_memory_mb`).
    pub need_kb: f64,
    /// The trace's partition number (-1 when unknown).
    pub partition: i64,
    /// Architecture (index into the machine's names) its program needs.
    pub arch: u32,
}

impl Job {
    /// A job whose estimate is exactly its run time.
    pub fn new(id: &str, submit: f64, run: f64, procs: u32) -> Job {
        Job {
            id: id.to_string(),
            submit,
            run,
            procs,
            estimate: run,
            memory_kb: 0.0,
            need_kb: 0.0,
            partition: -1,
            arch: 0,
        }
    }
}

/// A workload and what was left out of it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Workload {
    /// Jobs in submit order.
    pub jobs: Vec<Job>,
    /// `MaxProcs` (else `MaxNodes`) from the header, if present.
    pub max_procs: Option<u32>,
    /// Jobs skipped for having no processor count.
    pub skipped_no_procs: usize,
    /// Jobs skipped for an unknown or negative run time.
    pub skipped_no_runtime: usize,
    /// Malformed lines skipped (only with `lenient`).
    pub skipped_malformed: usize,
    /// Jobs whose requested time was below the run time (raised to it).
    pub raised_estimates: usize,
}

/// A line that is not a job.
#[derive(Debug, Error, PartialEq)]
#[error("line {line}: {message}")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

fn field(f: &[&str], i: usize, line: usize) -> Result<f64, ParseError> {
    let s = f.get(i).ok_or_else(|| ParseError {
        line,
        message: format!("expected 18 fields, found {}", f.len()),
    })?;
    let v: f64 = s.parse().map_err(|_| ParseError {
        line,
        message: format!("field {} ({s:?}) is not a number", i + 1),
    })?;
    if !v.is_finite() {
        return Err(ParseError {
            line,
            message: format!("field {} is not finite", i + 1),
        });
    }
    Ok(v)
}

/// Parse SWF text. Keeps jobs with a processor count (allocated, else
/// requested) above 0 and a run time of at least 0; a requested time below
/// the run time counts as the run time. A malformed line is an error, or is
/// skipped and counted when `lenient`.
pub fn parse_swf(text: &str, lenient: bool) -> Result<Workload, ParseError> {
    let mut w = Workload::default();
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(h) = line.strip_prefix(';') {
            let h = h.trim();
            for key in ["MaxProcs:", "MaxNodes:"] {
                if let Some(v) = h
                    .strip_prefix(key)
                    .and_then(|v| v.trim().parse::<u32>().ok())
                {
                    if key == "MaxProcs:" || w.max_procs.is_none() {
                        w.max_procs = Some(v);
                    }
                }
            }
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        let parsed = (|| {
            if f.len() < 18 {
                return Err(ParseError {
                    line: n,
                    message: format!("expected 18 fields, found {}", f.len()),
                });
            }
            Ok((
                field(&f, 1, n)?,
                field(&f, 3, n)?,
                field(&f, 4, n)?,
                field(&f, 7, n)?,
                field(&f, 8, n)?,
                (field(&f, 6, n)?, field(&f, 9, n)?, field(&f, 15, n)?),
            ))
        })();
        let (submit, run, alloc, req_procs, req_time, (used_mem, req_mem, partition)) = match parsed
        {
            Ok(v) => v,
            Err(e) if lenient => {
                let _ = e;
                w.skipped_malformed += 1;
                continue;
            }
            Err(e) => return Err(e),
        };
        let procs = if alloc > 0.0 { alloc } else { req_procs };
        if procs <= 0.0 {
            w.skipped_no_procs += 1;
            continue;
        }
        if run < 0.0 {
            w.skipped_no_runtime += 1;
            continue;
        }
        let estimate = if req_time < run {
            w.raised_estimates += 1;
            run
        } else {
            req_time
        };
        w.jobs.push(Job {
            id: f[0].to_string(),
            submit,
            run,
            procs: procs.min(f64::from(u32::MAX)) as u32,
            estimate,
            memory_kb: if used_mem > 0.0 {
                used_mem
            } else {
                req_mem.max(0.0)
            },
            need_kb: if req_mem > 0.0 {
                req_mem
            } else {
                used_mem.max(0.0)
            },
            partition: if partition >= 1.0 {
                partition.min(1e9) as i64
            } else {
                -1
            },
            arch: 0,
        });
    }
    w.jobs.sort_by(|a, b| a.submit.total_cmp(&b.submit));
    Ok(w)
}

/// Parse the pyss test-vector format: `submit id estimate processors
/// actual ...`, `#` comments. Like pyss, jobs whose estimate is below their
/// run time are dropped (counted as `raised_estimates`).
pub fn parse_pyss(text: &str) -> Result<Workload, ParseError> {
    let mut w = Workload::default();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 5 {
            return Err(ParseError {
                line: i + 1,
                message: format!("expected at least 5 fields, found {}", f.len()),
            });
        }
        let submit = field(&f, 0, i + 1)?;
        let estimate = field(&f, 2, i + 1)?;
        let procs = field(&f, 3, i + 1)?;
        let run = field(&f, 4, i + 1)?;
        if estimate < run {
            w.raised_estimates += 1;
            continue;
        }
        w.jobs.push(Job {
            id: f[1].to_string(),
            submit,
            run,
            procs: procs.max(0.0) as u32,
            estimate,
            memory_kb: 0.0,
            need_kb: 0.0,
            partition: -1,
            arch: 0,
        });
    }
    w.jobs.sort_by(|a, b| a.submit.total_cmp(&b.submit));
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SWF: &str = "; MaxProcs: 128\n; MaxNodes: 64\n\
1 0 5 100 4 -1 2048 4 50 4096 1 1 1 1 1 2 -1 -1\n\
2 10 -1 -1 -1 -1 -1 -1 -1 -1 5 1 1 1 1 -1 -1 -1\n\
3 20 0 30 -1 -1 -1 8 3600 512 1 1 1 1 1 -1 -1 -1\n\
4 30 0 -1 2 -1 -1 2 60 -1 5 1 1 1 1 -1 -1 -1\n";

    #[test]
    fn swf_keeps_usable_jobs_and_counts_the_rest() {
        let w = parse_swf(SWF, false).unwrap();
        assert_eq!(w.max_procs, Some(128));
        assert_eq!(w.jobs.len(), 2);
        assert_eq!(
            w.jobs[0],
            Job {
                id: "1".into(),
                submit: 0.0,
                run: 100.0,
                procs: 4,
                estimate: 100.0,
                memory_kb: 2048.0,
                need_kb: 4096.0,
                partition: 2,
                arch: 0,
            }
        );
        assert_eq!(
            w.jobs[1].need_kb, 512.0,
            "requested memory is what a scheduler finds for it"
        );
        assert_eq!(
            w.jobs[1].memory_kb, 512.0,
            "requested memory when used is unknown"
        );
        assert_eq!(
            w.jobs[1].procs, 8,
            "requested processors when none were allocated"
        );
        assert_eq!(w.raised_estimates, 1);
        assert_eq!(w.skipped_no_procs, 1);
        assert_eq!(w.skipped_no_runtime, 1);
    }

    #[test]
    fn malformed_lines_name_their_number_or_are_counted() {
        let bad = format!("{SWF}5 40 0 nan? 2\n");
        assert_eq!(parse_swf(&bad, false).unwrap_err().line, 7);
        let w = parse_swf(&bad, true).unwrap();
        assert_eq!(w.skipped_malformed, 1);
        assert_eq!(w.jobs.len(), 2);
    }
}
