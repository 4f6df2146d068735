//! Drawing the allocation map as text, like Figure 1 of seed 000: one row
//! per processor, one column per time slot, each cell the job holding it
//! (`job×n` when n of its VPs share the processor), `.` when free.

use migd::sched::TableCell;

/// Draw `slots` (per slot, the occupied cells) over the processors `procs`,
/// each with its capacity when known (`caps`, in the same order).
/// `running` marks the slot that is running now, if known.
pub fn map(
    procs: &[String],
    caps: &[Option<f64>],
    slots: &[Vec<TableCell>],
    running: Option<usize>,
    independent: &[String],
) -> String {
    // A free cell an independent job's VP on that processor fills.
    let filler = |p: &str| -> Option<String> {
        slots
            .iter()
            .flatten()
            .find(|c| c.processor == p && independent.contains(&c.job))
            .map(|c| format!("({})", c.job))
    };
    let cell = |s: usize, p: &str| -> String {
        slots[s]
            .iter()
            .find(|c| c.processor == p)
            .map(|c| {
                if c.vps.len() > 1 {
                    format!("{}×{}", c.job, c.vps.len())
                } else {
                    c.job.clone()
                }
            })
            .or_else(|| filler(p))
            .unwrap_or_else(|| ".".into())
    };
    let head = procs
        .iter()
        .map(|p| p.chars().count())
        .max()
        .unwrap_or(0)
        .max(9);
    let width: Vec<usize> = (0..slots.len())
        .map(|s| {
            procs
                .iter()
                .map(|p| cell(s, p).chars().count())
                .max()
                .unwrap_or(1)
                .max(format!("T{}", s + 1).len())
        })
        .collect();
    let cap = |i: usize| match caps.get(i).copied().flatten() {
        Some(c) => format!("×{c:.2}"),
        None => String::new(),
    };
    let capw = (0..procs.len())
        .map(|i| cap(i).chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for (i, p) in procs.iter().enumerate() {
        out.push_str(&format!("{p:<head$}"));
        if capw > 0 {
            out.push_str(&format!(" {:>capw$}", cap(i)));
        }
        for (s, w) in width.iter().enumerate() {
            out.push_str(&format!("  {:<w$}", cell(s, p)));
        }
        out.push('\n');
    }
    out.push_str(&format!("{:<head$}", "slot"));
    if capw > 0 {
        out.push_str(&format!(" {:>capw$}", ""));
    }
    for (s, w) in width.iter().enumerate() {
        let label = if running == Some(s) {
            format!("T{}*", s + 1)
        } else {
            format!("T{}", s + 1)
        };
        out.push_str(&format!("  {label:<w$}"));
    }
    out.push('\n');
    if slots.is_empty() {
        out.push_str("(no slots: nothing is scheduled)\n");
    }
    out
}

/// The map as the daemon answers `Request::Map` (`slots` per slot, the
/// slot running `now`), each processor's capacity taken from `hosts`
/// (`h1/0`: host h1).
pub fn map_reply(
    processors: &[String],
    slots: &[Vec<libmig::msg::MapCell>],
    now: Option<u32>,
    hosts: &[libmig::msg::HostInfo],
) -> String {
    let mut independent: Vec<String> = slots
        .iter()
        .flatten()
        .filter(|c| c.independent)
        .map(|c| c.job.clone())
        .collect();
    independent.sort();
    independent.dedup();
    let cells: Vec<Vec<TableCell>> = slots
        .iter()
        .map(|s| {
            s.iter()
                .map(|c| TableCell {
                    processor: c.processor.clone(),
                    job: c.job.clone(),
                    vps: c.vps.clone(),
                })
                .collect()
        })
        .collect();
    let caps: Vec<Option<f64>> = processors
        .iter()
        .map(|p| {
            let host = p.split('/').next().unwrap_or(p);
            hosts
                .iter()
                .find(|h| h.facts.name == host)
                .map(|h| h.facts.capacity)
        })
        .collect();
    map(
        processors,
        &caps,
        &cells,
        now.map(|n| n as usize),
        &independent,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_jobs_and_free_cells() {
        let slots = vec![
            vec![TableCell {
                processor: "p1".into(),
                job: "J1".into(),
                vps: vec![0, 1],
            }],
            vec![TableCell {
                processor: "p2".into(),
                job: "J2".into(),
                vps: vec![0],
            }],
        ];
        let text = map(
            &["p1".into(), "p2".into()],
            &[Some(1.0), Some(2.5)],
            &slots,
            Some(1),
            &[],
        );
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("p1")
                && lines[0].contains("×1.00")
                && lines[0].contains("J1×2")
                && lines[0].trim_end().ends_with('.')
        );
        assert!(lines[1].contains("×2.50"), "{text}");
        assert!(lines[1].contains("J2"));
        assert!(lines[2].contains("T2*"));
    }

    #[test]
    fn a_free_cell_an_independent_vp_fills_is_marked() {
        let cell = |p: &str, job: &str| TableCell {
            processor: p.into(),
            job: job.into(),
            vps: vec![0],
        };
        // J2 (independent) holds p2 in slot 1; slot 2 has p2 free: J2
        // fills it. p1 is free in slot 1 and no independent job is there.
        let slots = vec![vec![cell("p2", "J2")], vec![cell("p1", "J1")]];
        let text = map(
            &["p1".into(), "p2".into()],
            &[None, None],
            &slots,
            None,
            &["J2".into()],
        );
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].contains(". ") || lines[0].contains(".  "),
            "{text}"
        );
        assert!(!lines[0].contains("(J"), "{text}");
        assert!(
            lines[1].contains("J2") && lines[1].contains("(J2)"),
            "{text}"
        );
    }
}
