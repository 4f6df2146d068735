//! The JSON-lines event format of `mig sched replay`, and the final-state
//! report it prints.
//!
//! What lives here: parsing one event per line (with the line number in every
//! error), feeding them to a `Scheduler` as they are read (memory does not
//! grow with the number of events: each event's actions go to the caller,
//! counted for the report), and rendering its state. What does not: opening
//! files (the CLI hands in a reader).
//!
//! Events, one JSON object a line (blank lines and lines starting with `#`
//! are skipped):
//!
//! ```text
//! {"event":"new_processor","id":"h1/0","arch":"x86_64","capacity":2.0}   host = id before '/'
//! {"event":"processor_exit","id":"h1/0"}
//! {"event":"submit","job":"j1","vps":{"x86_64":4}}
//! {"event":"new_vp","job":"j1","arch":"x86_64"}
//! {"event":"vp_exit","job":"j1","vp":3}
//! {"event":"job_exit","job":"j1"}
//! ```

use serde::Serialize;
use serde_json::{json, Map, Value};
use thiserror::Error;

use super::scheduler::{Action, Event, SchedError, Scheduler};

/// A replay line that could not be used.
#[derive(Debug, Error)]
pub enum ReplayError {
    /// Not a JSON object of a known event.
    #[error("line {line}: {message}")]
    Malformed {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The input could not be read (or a line is longer than `MAX_LINE`).
    #[error("line {line}: {message}")]
    Read {
        /// 1-based line number.
        line: usize,
        /// What went wrong.
        message: String,
    },
    /// A well-formed event the scheduler refused.
    #[error("line {line}: {source}")]
    Refused {
        /// 1-based line number.
        line: usize,
        /// Why.
        #[source]
        source: SchedError,
    },
}

/// The longest line read (an event is far shorter).
pub const MAX_LINE: usize = 1 << 20;

/// The event on line `line` (1-based) of `raw`, or `None` for a blank or
/// comment line.
pub fn parse_line(line: usize, raw: &str) -> Result<Option<Event>, ReplayError> {
    let text = raw.trim();
    if text.is_empty() || text.starts_with('#') {
        return Ok(None);
    }
    let malformed = |message: String| ReplayError::Malformed { line, message };
    let mut e: Event = serde_json::from_str(text).map_err(|e| malformed(e.to_string()))?;
    match &mut e {
        Event::NewProcessor { id, host, .. } if host.is_empty() => {
            *host = id.split('/').next().unwrap_or(id).to_string();
        }
        // What only the daemons tell the scheduler is no replay event.
        Event::VpBack { .. } | Event::VpMoved { .. } | Event::VpMovable { .. } => {
            return Err(malformed(
                "not a replay event (only migd sends it): a replay has new_processor, \
                 processor_exit, submit, new_vp, vp_exit, job_exit, suspend and resume"
                    .into(),
            ))
        }
        _ => {}
    }
    Ok(Some(e))
}

/// Parse every event of `text`; the first bad line is an error naming it.
pub fn parse(text: &str) -> Result<Vec<(usize, Event)>, ReplayError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        if let Some(e) = parse_line(i + 1, raw)? {
            out.push((i + 1, e));
        }
    }
    Ok(out)
}

/// What a replay did, for the report: events replayed and actions of each
/// kind.
#[derive(Debug, Default)]
pub struct Tally {
    /// Events replayed.
    pub events: usize,
    /// Actions by kind (`start`, `migrate`, ...).
    pub actions: std::collections::BTreeMap<String, u64>,
}

/// Replay the events read from `input` into `sched` as they come, handing
/// each event's actions (with its line) to `each`; the tally. The first bad
/// line, or the first error of `each`, ends it.
pub fn run(
    sched: &mut Scheduler,
    mut input: impl std::io::BufRead,
    mut each: impl FnMut(usize, &[Action]) -> std::io::Result<()>,
) -> Result<Tally, ReplayError> {
    use std::io::{BufRead, Read};
    let mut tally = Tally::default();
    let mut buf = Vec::new();
    let mut line = 0;
    loop {
        line += 1;
        buf.clear();
        let read = (&mut input)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|e| ReplayError::Read {
                line,
                message: e.to_string(),
            })?;
        if read == 0 {
            return Ok(tally);
        }
        if buf.len() > MAX_LINE {
            return Err(ReplayError::Read {
                line,
                message: format!("longer than {MAX_LINE} bytes"),
            });
        }
        let text = std::str::from_utf8(&buf).map_err(|_| ReplayError::Malformed {
            line,
            message: "not UTF-8".into(),
        })?;
        let Some(e) = parse_line(line, text)? else {
            continue;
        };
        let actions = sched
            .on_event(e)
            .map_err(|source| ReplayError::Refused { line, source })?;
        tally.events += 1;
        for a in &actions {
            *tally.actions.entry(a.kind().to_string()).or_default() += 1;
        }
        each(line, &actions).map_err(|e| ReplayError::Read {
            line,
            message: format!("writing its actions: {e}"),
        })?;
    }
}

/// One processor in the report.
#[derive(Debug, Serialize)]
struct ProcessorOut<'a> {
    id: &'a str,
    host: &'a str,
    arch: &'a str,
    capacity: f64,
}

/// The final state as the JSON document `mig sched replay --json` prints.
pub fn report(sched: &Scheduler, tally: &Tally) -> Value {
    let map = sched.map();
    let processors: Vec<ProcessorOut> = map
        .processors()
        .map(|(_, p)| ProcessorOut {
            id: &p.id,
            host: &p.host,
            arch: &p.arch,
            capacity: p.capacity,
        })
        .collect();
    let slots: Vec<Value> = sched
        .table()
        .into_iter()
        .map(|cells| {
            Value::Object(
                cells
                    .into_iter()
                    .map(|c| (c.processor, json!({"job": c.job, "vps": c.vps})))
                    .collect(),
            )
        })
        .collect();
    let mut jobs = Map::new();
    for id in sched.job_ids() {
        if let Some(v) = sched.job_view(&id) {
            let vps: Map<String, Value> = v
                .vps
                .iter()
                .map(|(k, a)| (k.to_string(), json!(a)))
                .collect();
            let placement: Map<String, Value> = v
                .placement
                .iter()
                .map(|(k, p)| (k.to_string(), json!(p)))
                .collect();
            jobs.insert(
                id,
                json!({"vps": vps, "placement": placement, "waiting": v.waiting, "slots": v.slots, "t_min": v.t_min}),
            );
        }
    }
    json!({
        "processors": processors,
        "slots": slots,
        "jobs": jobs,
        "events": tally.events,
        "action_counts": tally.actions,
        "migrations": sched.migrations(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_lines_are_named() {
        let text = "{\"event\":\"new_processor\",\"id\":\"h1/0\",\"arch\":\"x86_64\",\"capacity\":1}\n\nnot json\n";
        match parse(text) {
            Err(ReplayError::Malformed { line, .. }) => assert_eq!(line, 3),
            other => panic!("expected a malformed line 3, got {other:?}"),
        }
        let text = "{\"event\":\"teleport\",\"job\":\"j\"}";
        assert!(matches!(
            parse(text),
            Err(ReplayError::Malformed { line: 1, .. })
        ));
        let text =
            "{\"event\":\"new_processor\",\"id\":\"a\",\"arch\":\"x\",\"capacity\":1,\"colour\":2}";
        assert!(matches!(
            parse(text),
            Err(ReplayError::Malformed { line: 1, .. })
        ));
    }

    #[test]
    fn refused_events_are_named() {
        let text =
            "{\"event\":\"new_processor\",\"id\":\"h1/0\",\"arch\":\"x86_64\",\"capacity\":0}";
        let mut s = Scheduler::default();
        let err = run(&mut s, text.as_bytes(), |_, _| Ok(())).unwrap_err();
        assert!(err
            .to_string()
            .starts_with("line 1: processor \"h1/0\": capacity must be"));
        let text = "\n# a comment\n{\"event\":\"processor_exit\",\"id\":\"nope\"}";
        let err = run(&mut s, text.as_bytes(), |_, _| Ok(())).unwrap_err();
        assert_eq!(err.to_string(), "line 3: unknown processor \"nope\"");
        // A line past MAX_LINE is refused, not read whole.
        let long = format!(
            "{{\"event\":\"job_exit\",\"job\":\"{}\"}}",
            "x".repeat(MAX_LINE)
        );
        let err = run(&mut s, long.as_bytes(), |_, _| Ok(())).unwrap_err();
        assert!(err.to_string().contains("longer than"), "{err}");
    }

    #[test]
    fn report_lists_slots_jobs_and_actions() {
        let text = r#"
{"event":"new_processor","id":"h1/0","arch":"x86_64","capacity":2.0}
{"event":"new_processor","id":"h2/0","arch":"x86_64","capacity":1.0}
{"event":"submit","job":"j1","vps":{"x86_64":3}}
"#;
        let mut s = Scheduler::default();
        let mut each = Vec::new();
        let tally = run(&mut s, text.as_bytes(), |line, a| {
            each.push((line, a.len()));
            Ok(())
        })
        .unwrap();
        assert_eq!(tally.events, 3);
        assert_eq!(each.iter().map(|(l, _)| *l).collect::<Vec<_>>(), [2, 3, 4]);
        let r = report(&s, &tally);
        assert_eq!(r["processors"][0]["host"], "h1");
        assert_eq!(r["slots"].as_array().unwrap().len(), 1);
        assert_eq!(r["slots"][0]["h1/0"]["vps"], json!([0, 1]));
        assert_eq!(r["slots"][0]["h2/0"]["vps"], json!([2]));
        assert_eq!(r["jobs"]["j1"]["t_min"], json!(1.0));
        assert_eq!(r["events"], 3);
        assert_eq!(
            r["action_counts"]
                .as_object()
                .unwrap()
                .values()
                .filter_map(Value::as_u64)
                .sum::<u64>(),
            each.iter().map(|(_, n)| *n as u64).sum::<u64>()
        );
        assert_eq!(r["migrations"], 0);
    }

    #[test]
    fn replay_lines_are_scheduler_events_with_the_host_optional() {
        let text = r#"{"event":"new_processor","id":"h1/0","arch":"x86","capacity":1}
{"event":"new_processor","id":"p9","host":"h2","arch":"x86","capacity":2}
{"event":"submit","job":"j","vps":{"x86":2}}"#;
        let events = parse(text).expect("parses");
        assert!(matches!(&events[0].1, Event::NewProcessor { host, .. } if host == "h1"));
        assert!(matches!(&events[1].1, Event::NewProcessor { host, .. } if host == "h2"));
        assert_eq!(events[2].0, 3);
        for bad in [
            r#"{"event":"vp_back","job":"j","vp":0,"arch":"x86"}"#,
            r#"{"event":"submit","job":"j","vps":{},"extra":1}"#,
            r#"{"event":"warp"}"#,
        ] {
            assert!(
                matches!(parse(bad), Err(ReplayError::Malformed { line: 1, .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn an_actions_kind_is_its_json_tag() {
        let on: std::sync::Arc<str> = "p1".into();
        for a in [
            Action::Start {
                job: on.clone(),
                vp: 0,
                arch: on.clone(),
                processor: on.clone(),
                host: on.clone(),
                restore: false,
            },
            Action::Migrate {
                job: on.clone(),
                vp: 0,
                from: on.clone(),
                from_host: on.clone(),
                to: on.clone(),
                to_host: on.clone(),
            },
            Action::Hold {
                job: on.clone(),
                vp: 0,
                processor: None,
                host: None,
            },
            Action::Kill {
                job: on.clone(),
                vp: 0,
                processor: on.clone(),
                host: on.clone(),
            },
            Action::SlotTables {
                generation: 1,
                slots: 1,
                all: true,
                hosts: Vec::new(),
            },
        ] {
            let v = serde_json::to_value(&a).unwrap();
            assert_eq!(v["action"], a.kind(), "{a:?}");
        }
    }
}
