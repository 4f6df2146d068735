//! Small SVG charts for `mig sim --plot`: written by hand (no dependency),
//! meant to be opened in a browser.

use std::fmt::Write;

const COLOURS: &[&str] = &[
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
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
    let ly = top + 20.0 * i as f64;
    let _ = writeln!(
        s,
        r#"<polyline fill="none" stroke="{c}" stroke-width="{width}" points="{points}"/>
<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{c}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
        legend_x + 12.0,
        legend_x + 36.0,
        legend_x + 42.0,
        ly + 4.0,
        escape(name)
    );
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
