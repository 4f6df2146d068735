//! Small SVG charts for `mig sim --plot` and `mig stats --plot`: written
//! by hand (no dependency), meant to be opened in a browser.

use std::fmt::Write;

/// Ten colours that tell apart (matplotlib's "tab10"): one a policy of
/// `mig sim` (there are ten), one a job of `mig stats --plot`; past ten,
/// lines are also dashed (see `series_line`).
const COLOURS: &[&str] = &[
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

/// Cumulative distribution of response times per policy, log-scaled x axis.
pub fn response_cdf(title: &str, series: &[(String, Vec<f64>)]) -> String {
    let (w, h, left, right, top, bottom) = (760.0, 460.0, 70.0, 170.0, 40.0, 50.0);
    let values = || {
        series
            .iter()
            .flat_map(|(_, v)| v.iter().copied())
            .filter(|&x| x > 0.0)
    };
    let lo = values().fold(f64::INFINITY, f64::min).max(1e-3);
    let hi = values().fold(0.0, f64::max).max(lo * 10.0);
    let (lx, hx) = (lo.log10().floor(), hi.log10().ceil());
    // Clamped at the axis' start (a decade), not at the smallest value: a
    // tick at 10^lx is drawn where 10^lx is.
    let px = |x: f64| left + (x.max(10f64.powf(lx)).log10() - lx) / (hx - lx) * (w - left - right);
    let py = |y: f64| top + (1.0 - y) * (h - top - bottom);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
        (w - right + left) / 2.0,
        escape(title)
    );
    for d in (lx as i32)..=(hx as i32) {
        let x = px(10f64.powi(d));
        let _ = writeln!(
            s,
            r##"<line x1="{x}" y1="{top}" x2="{x}" y2="{}" stroke="#ddd"/><text x="{x}" y="{}" text-anchor="middle">{}</text>"##,
            h - bottom,
            h - bottom + 18.0,
            decade(d)
        );
    }
    for k in 0..=4 {
        let y = py(f64::from(k) / 4.0);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" y1="{y}" x2="{}" y2="{y}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{:.2}</text>"##,
            w - right,
            left - 6.0,
            y + 4.0,
            f64::from(k) / 4.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">response time (s, log scale)</text>
<text x="18" y="{}" transform="rotate(-90 18 {})" text-anchor="middle">fraction of jobs</text>"#,
        (w - right + left) / 2.0,
        h - 12.0,
        (h - bottom + top) / 2.0,
        (h - bottom + top) / 2.0
    );
    for (i, (name, v)) in series.iter().enumerate() {
        let mut sorted = v.clone();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len().max(1) as f64;
        // At most ~400 points per line.
        let step = (sorted.len() / 400).max(1);
        let mut points = String::new();
        for (k, &x) in sorted
            .iter()
            .enumerate()
            .step_by(step)
            .chain(sorted.iter().enumerate().next_back())
        {
            let _ = write!(points, "{:.1},{:.1} ", px(x), py((k + 1) as f64 / n));
        }
        series_line(
            &mut s,
            i,
            name,
            &points,
            width_of(i, series.len()),
            w - right,
            top,
        );
    }
    s.push_str("</svg>\n");
    s
}

/// `10^d` as a tick label: 0.01, 0.1, 1, 10, 100, 1000, then 1e4...
fn decade(d: i32) -> String {
    match d {
        -2..=3 => format!("{}", 10f64.powi(d)),
        _ => format!("1e{d}"),
    }
}

/// A line's width: earlier policies' lines drawn wider, so that one lying
/// exactly on another (fcfs and easy at one slot) still shows at its edges.
fn width_of(i: usize, n: usize) -> f64 {
    1.5 + 0.8 * (n.saturating_sub(i + 1)) as f64
}

/// A tick value: whole numbers without decimals.
fn tick(y: f64) -> String {
    if (y - y.round()).abs() < 1e-9 {
        format!("{}", y.round())
    } else {
        format!("{y:.2}")
    }
}

/// A value over virtual time per policy (averaged into ~300 buckets), time
/// in days on the x axis.
///
/// `smooth`: each point is the mean of the `smooth` buckets around it (1:
/// none), so that policies whose values jump about can be compared.
pub fn over_time(
    title: &str,
    ylabel: &str,
    series: &[(String, Vec<(f64, f64)>)],
    smooth: usize,
) -> String {
    let (w, h, left, right, top, bottom) = (760.0, 460.0, 70.0, 170.0, 40.0, 50.0);
    let t0 = series
        .iter()
        .flat_map(|(_, v)| v.first().map(|p| p.0))
        .fold(f64::INFINITY, f64::min);
    let t1 = series
        .iter()
        .flat_map(|(_, v)| v.last().map(|p| p.0))
        .fold(f64::NEG_INFINITY, f64::max);
    let (t0, t1) = if t0.is_finite() && t1 > t0 {
        (t0, t1)
    } else {
        (0.0, 1.0)
    };
    const BUCKETS: usize = 300;
    let bucketed: Vec<(String, Vec<(f64, f64)>)> = series
        .iter()
        .map(|(name, v)| {
            let mut sum = vec![0.0; BUCKETS];
            let mut n = vec![0usize; BUCKETS];
            for &(t, y) in v {
                let b = (((t - t0) / (t1 - t0)) * (BUCKETS - 1) as f64) as usize;
                sum[b.min(BUCKETS - 1)] += y;
                n[b.min(BUCKETS - 1)] += 1;
            }
            let means: Vec<(usize, f64)> = (0..BUCKETS)
                .filter(|&b| n[b] > 0)
                .map(|b| (b, sum[b] / n[b] as f64))
                .collect();
            let half = smooth.max(1) / 2;
            let pts = (0..means.len())
                .map(|i| {
                    let win = &means[i.saturating_sub(half)..(i + half + 1).min(means.len())];
                    let y = win.iter().map(|p| p.1).sum::<f64>() / win.len() as f64;
                    (t0 + (t1 - t0) * means[i].0 as f64 / (BUCKETS - 1) as f64, y)
                })
                .collect();
            (name.clone(), pts)
        })
        .collect();
    let ymax = bucketed
        .iter()
        .flat_map(|(_, v)| v.iter().map(|p| p.1))
        .fold(0.0, f64::max)
        .max(1.0);
    let ymax = if ymax <= 1.0 { 1.0 } else { ymax.ceil() };
    let px = |t: f64| left + (t - t0) / (t1 - t0) * (w - left - right);
    let py = |y: f64| top + (1.0 - y / ymax) * (h - top - bottom);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
        (w - right + left) / 2.0,
        escape(title)
    );
    for k in 0..=4 {
        let y = ymax * f64::from(k) / 4.0;
        let _ = writeln!(
            s,
            r##"<line x1="{left}" y1="{0}" x2="{1}" y2="{0}" stroke="#ddd"/><text x="{2}" y="{3}" text-anchor="end">{4}</text>"##,
            py(y),
            w - right,
            left - 6.0,
            py(y) + 4.0,
            tick(y)
        );
        let t = t0 + (t1 - t0) * f64::from(k) / 4.0;
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{:.0}</text>"#,
            px(t),
            h - bottom + 18.0,
            t / 86400.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">time (days)</text>
<text x="18" y="{}" transform="rotate(-90 18 {})" text-anchor="middle">{}</text>"#,
        (w - right + left) / 2.0,
        h - 12.0,
        (h - bottom + top) / 2.0,
        (h - bottom + top) / 2.0,
        escape(ylabel)
    );
    for (i, (name, v)) in bucketed.iter().enumerate() {
        let points: String = v
            .iter()
            .map(|&(t, y)| format!("{:.1},{:.1} ", px(t), py(y)))
            .collect();
        series_line(
            &mut s,
            i,
            name,
            &points,
            width_of(i, bucketed.len()),
            w - right,
            top,
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Policy `i`'s line and its legend entry at the right of the plot area.
fn series_line(
    s: &mut String,
    i: usize,
    name: &str,
    points: &str,
    width: f64,
    legend_x: f64,
    top: f64,
) {
    let c = COLOURS[i % COLOURS.len()];
    // The second ten dashed, the third dotted: still one look a line.
    let dash = match i / COLOURS.len() {
        0 => "",
        1 => r#" stroke-dasharray="8 4""#,
        _ => r#" stroke-dasharray="2 3""#,
    };
    let ly = top + 20.0 * i as f64;
    let _ = writeln!(
        s,
        r#"<polyline fill="none" stroke="{c}" stroke-width="{width}"{dash} points="{points}"/>
<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{c}" stroke-width="3"{dash}/><text x="{}" y="{}">{}</text>"#,
        legend_x + 12.0,
        legend_x + 36.0,
        legend_x + 42.0,
        ly + 4.0,
        escape(name)
    );
}

/// `mig stats --plot`: a row per host, a bar per slot between two of its
/// switches coloured by the job(s) that slot ran, a red tick where each
/// switch actually happened (its lateness), over the last (up to 40) slots.
///
/// `until`: with one slot a round nothing switches until the table
/// changes, so each host's last switch holds until then (the time of the
/// question, ns since the Unix epoch); the chart ends there.
pub fn slot_timeline(
    quantum_ns: u64,
    hosts: &[libmig::msg::HostTimeline],
    until: Option<u64>,
) -> String {
    const QUANTA: u64 = 40;
    let q = quantum_ns.max(1);
    let last = hosts
        .iter()
        .flat_map(|h| h.switches.last())
        .map(|s| s.ideal_ns + q)
        .max()
        .unwrap_or(q);
    let end = until.map_or(last, |u| u.max(last));
    // The last QUANTA slots, or fewer if the hosts have switched fewer.
    let first = hosts
        .iter()
        .flat_map(|h| h.switches.first())
        .map(|s| s.ideal_ns)
        .min()
        .unwrap_or(0);
    let start = end.saturating_sub(QUANTA * q).max(first);
    let shown_quanta = (end - start).div_ceil(q);
    let (w, row, left, right, top) = (900.0, 34.0, 70.0, 20.0, 50.0);
    let bottom = 70.0;
    let h = top + row * hosts.len().max(1) as f64 + bottom;
    let px = |t: u64| {
        left + (t.saturating_sub(start)) as f64 / (end - start).max(1) as f64 * (w - left - right)
    };
    // The legend names the jobs drawn, not those of slots before the window.
    let mut jobs: Vec<&str> = hosts
        .iter()
        .flat_map(|h| h.switches.iter())
        .filter(|s| s.ideal_ns + q > start)
        .flat_map(|s| s.jobs.iter().map(String::as_str))
        .collect();
    jobs.sort_unstable();
    jobs.dedup();
    let colour = |j: &str| {
        let i = jobs.iter().position(|x| *x == j).unwrap_or(0);
        COLOURS[i % COLOURS.len()]
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
        (w + left - right) / 2.0,
        if until.is_some() {
            format!(
                "gang slicing: one slot a round, the last {:.1} s on each host",
                (end - start) as f64 / 1e9
            )
        } else {
            format!(
                "gang slicing: the last {shown_quanta} slots of {} ms on each host",
                q as f64 / 1e6
            )
        }
    );
    let mut worst: u64 = 0;
    for (i, host) in hosts.iter().enumerate() {
        let y = top + row * i as f64;
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
            left - 8.0,
            y + row / 2.0 + 4.0,
            escape(&host.host)
        );
        let shown: Vec<&libmig::msg::TimelineSwitch> = host
            .switches
            .iter()
            .filter(|s| s.ideal_ns + q > start)
            .collect();
        for (k, s) in shown.iter().enumerate() {
            let held = if until.is_some() { end } else { s.ideal_ns + q };
            let next = shown.get(k + 1).map_or(held, |n| n.ideal_ns).min(end);
            let (x0, x1) = (px(s.ideal_ns.max(start)), px(next));
            let fill = s.jobs.first().map_or("#eee", |j| colour(j));
            let _ = writeln!(
                out,
                r##"<rect x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{fill}" stroke="white"><title>slot {} : {}</title></rect>"##,
                y + 4.0,
                (x1 - x0).max(0.5),
                row - 8.0,
                s.slot + 1,
                escape(&s.jobs.join(", "))
            );
            if x1 - x0 > 7.0 * s.jobs.join(",").len() as f64 && !s.jobs.is_empty() {
                let _ = writeln!(
                    out,
                    r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="white">{}</text>"#,
                    (x0 + x1) / 2.0,
                    y + row / 2.0 + 4.0,
                    escape(&s.jobs.join(","))
                );
            }
            if s.ideal_ns >= start {
                worst = worst.max(s.late_ns);
                let xl = px(s.ideal_ns + s.late_ns);
                let _ = writeln!(
                    out,
                    r##"<line x1="{xl:.1}" y1="{:.1}" x2="{xl:.1}" y2="{:.1}" stroke="#d62728" stroke-width="1.5"><title>switch {:.3} ms late</title></line>"##,
                    y + 1.0,
                    y + row - 1.0,
                    s.late_ns as f64 / 1e6
                );
            }
        }
    }
    let axis_y = top + row * hosts.len().max(1) as f64 + 16.0;
    for k in (0..=shown_quanta).step_by(5) {
        let t = start + k * q;
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{axis_y:.1}" text-anchor="middle">{}</text>"#,
            px(t),
            (k * q) as f64 / 1e6
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">ms (red: where each switch happened; the latest was {:.3} ms after its boundary at worst)</text>"#,
        (w + left - right) / 2.0,
        axis_y + 18.0,
        worst as f64 / 1e6
    );
    let mut x = left;
    for j in &jobs {
        let _ = writeln!(
            out,
            r#"<rect x="{x:.1}" y="{:.1}" width="12" height="12" fill="{}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            axis_y + 30.0,
            colour(j),
            x + 16.0,
            axis_y + 40.0,
            escape(j)
        );
        x += 24.0 + 8.0 * j.len() as f64;
    }
    out.push_str("</svg>\n");
    out
}

fn escape(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slot_timeline_names_in_its_legend_only_the_jobs_it_draws() {
        let q = 100_000_000;
        let switch = |k: u64, job: &str| libmig::msg::TimelineSwitch {
            ideal_ns: k * q,
            late_ns: 50_000,
            slot: (k % 2) as u32,
            jobs: vec![job.to_string()],
        };
        // j1 ran long before the last 40 slots; j2 and j3 since.
        let mut switches = vec![switch(1, "j1")];
        switches.extend((100..150).map(|k| switch(k, if k % 2 == 0 { "j2" } else { "j3" })));
        let svg = slot_timeline(
            q,
            &[libmig::msg::HostTimeline {
                host: "h0".into(),
                switches,
            }],
            None,
        );
        assert!(svg.contains("the last 40 slots"), "{svg}");
        assert!(svg.contains(">j2</text>") && svg.contains(">j3</text>"));
        assert!(!svg.contains("j1"), "{svg}");
        assert_eq!(
            svg.matches("<line").count(),
            40,
            "one tick per switch drawn"
        );
    }

    #[test]
    fn with_one_slot_the_job_is_drawn_running_until_the_question() {
        let q = 100_000_000;
        // One switch (the table installed), then nothing for 3 s.
        let switches = vec![libmig::msg::TimelineSwitch {
            ideal_ns: 10 * q,
            late_ns: 50_000,
            slot: 0,
            jobs: vec!["j1".into()],
        }];
        let hosts = [libmig::msg::HostTimeline {
            host: "h0".into(),
            switches,
        }];
        let svg = slot_timeline(q, &hosts, Some(40 * q));
        let bar = svg
            .lines()
            .find(|l| l.contains("<title>slot 1 : j1</title>"))
            .expect("j1's bar");
        let width: f64 = bar
            .split("width=\"")
            .nth(1)
            .and_then(|w| w.split('"').next())
            .and_then(|w| w.parse().ok())
            .expect("its width");
        // The plot area is 900 - 70 - 20 wide: all of it.
        assert!((width - 810.0).abs() < 1.0, "{bar}");
        assert!(svg.contains("one slot a round, the last 3.0 s"), "{svg}");
    }

    #[test]
    fn every_policy_of_the_simulator_has_a_look_of_its_own() {
        let series: Vec<(String, Vec<f64>)> = migd::sim::POLICIES
            .iter()
            .map(|p| (p.to_string(), vec![1.0, 2.0]))
            .collect();
        let svg = response_cdf("t", &series);
        let looks: Vec<String> = svg
            .lines()
            .filter(|l| l.starts_with("<polyline"))
            .map(|l| {
                let stroke = l
                    .split("stroke=\"")
                    .nth(1)
                    .and_then(|s| s.split('"').next());
                let dash = l
                    .split("stroke-dasharray=\"")
                    .nth(1)
                    .and_then(|s| s.split('"').next());
                format!("{stroke:?} {dash:?}")
            })
            .collect();
        assert_eq!(looks.len(), migd::sim::POLICIES.len());
        let mut distinct = looks.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), looks.len(), "{looks:?}");
    }

    #[test]
    fn cdf_has_one_line_per_policy_and_escapes_names() {
        let svg = response_cdf(
            "a <trace>",
            &[
                ("easy".into(), vec![1.0, 10.0, 100.0]),
                ("mtat".into(), vec![5.0]),
            ],
        );
        assert!(svg.starts_with("<svg"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("a &lt;trace&gt;"));
        let svg = over_time(
            "u",
            "utilisation",
            &[("easy".into(), vec![(0.0, 0.5), (86400.0, 1.0)])],
            1,
        );
        assert_eq!(svg.matches("<polyline").count(), 1);
        assert!(svg.trim_end().ends_with("</svg>"));
    }

    #[test]
    fn ticks_sit_where_their_values_are_and_whole_numbers_have_no_decimals() {
        // Response times from 2 s: the axis starts at 1, and the tick "1"
        // is at its left edge, not where 2 s is.
        let svg = response_cdf("r", &[("easy".into(), vec![2.0, 30.0, 400.0])]);
        let x_of = |label: &str| -> f64 {
            let at = svg
                .find(&format!(">{label}</text>"))
                .unwrap_or_else(|| panic!("tick {label}"));
            let tag = &svg[svg[..at].rfind("<text").expect("text")..at];
            let x = tag
                .split("x=\"")
                .nth(1)
                .expect("x")
                .split('"')
                .next()
                .expect("x");
            x.parse().expect("number")
        };
        assert_eq!(x_of("1"), 70.0, "the first decade at the left edge");
        let (a, b, c) = (x_of("1"), x_of("10"), x_of("100"));
        assert!(((b - a) - (c - b)).abs() < 1e-6, "decades evenly spaced");
        // Slots: whole ticks print whole.
        let svg = over_time(
            "s",
            "slots",
            &[("easy".into(), vec![(0.0, 1.0), (86400.0, 8.0)])],
            1,
        );
        assert!(
            svg.contains(">8</text>") && !svg.contains(">8.00</text>"),
            "{svg}"
        );
        // Smoothing evens out a value that jumps between 0 and 1.
        let jumpy: Vec<(f64, f64)> = (0..300).map(|i| (i as f64, (i % 2) as f64)).collect();
        let smooth = over_time("u", "utilisation", &[("a".into(), jumpy.clone())], 15);
        let raw = over_time("u", "utilisation", &[("a".into(), jumpy)], 1);
        let ys = |svg: &str| -> Vec<f64> {
            let pts = svg
                .split("points=\"")
                .nth(1)
                .expect("points")
                .split('"')
                .next()
                .expect("end");
            pts.split_whitespace()
                .filter_map(|p| p.split(',').nth(1)?.parse().ok())
                .collect()
        };
        let spread = |v: Vec<f64>| {
            v.iter().cloned().fold(f64::MIN, f64::max) - v.iter().cloned().fold(f64::MAX, f64::min)
        };
        assert!(spread(ys(&smooth)) < spread(ys(&raw)) / 2.0);
    }
}
