//! The JSON-lines event format of `mig sched replay`, and the final-state
//! report it prints.
//!
//! What lives here: parsing one event per line (with the line number in every
//! error), feeding them to a `Scheduler`, and rendering its state. What does
//! not: reading files (the CLI hands in the text).
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

/// Parse every event of `text`; the first bad line is an error naming it.
pub fn parse(text: &str) -> Result<Vec<(usize, Event)>, ReplayError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let malformed = |message: String| ReplayError::Malformed {
            line: i + 1,
            message,
        };
        let mut e: Event = serde_json::from_str(line).map_err(|e| malformed(e.to_string()))?;
        match &mut e {
            Event::NewProcessor { id, host, .. } if host.is_empty() => {
                *host = id.split('/').next().unwrap_or(id).to_string();
            }
            // What only the daemons tell the scheduler is no replay event.
            Event::VpBack { .. } | Event::VpMoved { .. } | Event::VpMovable { .. } => {
                return Err(malformed(
                    "unknown event: a replay has new_processor, processor_exit, submit, \
                     new_vp, vp_exit and job_exit"
                        .into(),
                ))
            }
            _ => {}
        }
        out.push((i + 1, e));
    }
    Ok(out)
}

/// Replay `events` into `sched`; returns the actions of each event.
pub fn run(
    sched: &mut Scheduler,
    events: Vec<(usize, Event)>,
) -> Result<Vec<Vec<Action>>, ReplayError> {
    let mut all = Vec::with_capacity(events.len());
    for (line, e) in events {
        all.push(
            sched
                .on_event(e)
                .map_err(|source| ReplayError::Refused { line, source })?,
        );
    }
    Ok(all)
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
pub fn report(sched: &Scheduler, actions: &[Vec<Action>]) -> Value {
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
        "actions": actions,
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
        let err = run(&mut s, parse(text).unwrap()).unwrap_err();
        assert!(err
            .to_string()
            .starts_with("line 1: processor \"h1/0\": capacity must be"));
        let text = "{\"event\":\"processor_exit\",\"id\":\"nope\"}";
        let err = run(&mut s, parse(text).unwrap()).unwrap_err();
        assert_eq!(err.to_string(), "line 1: unknown processor \"nope\"");
    }

    #[test]
    fn report_lists_slots_jobs_and_actions() {
        let text = r#"
{"event":"new_processor","id":"h1/0","arch":"x86_64","capacity":2.0}
{"event":"new_processor","id":"h2/0","arch":"x86_64","capacity":1.0}
{"event":"submit","job":"j1","vps":{"x86_64":3}}
"#;
        let mut s = Scheduler::default();
        let actions = run(&mut s, parse(text).unwrap()).unwrap();
        let r = report(&s, &actions);
        assert_eq!(r["processors"][0]["host"], "h1");
        assert_eq!(r["slots"].as_array().unwrap().len(), 1);
        assert_eq!(r["slots"][0]["h1/0"]["vps"], json!([0, 1]));
        assert_eq!(r["slots"][0]["h2/0"]["vps"], json!([2]));
        assert_eq!(r["jobs"]["j1"]["t_min"], json!(1.0));
        assert_eq!(r["actions"].as_array().unwrap().len(), 3);
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
}
