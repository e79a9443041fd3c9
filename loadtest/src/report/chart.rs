//! chart.svg: small multiples, one horizontal bar chart per figure, the
//! methods side by side; over several rounds each bar is the median, with
//! a whisker from the lowest round to the highest.

use std::fmt::Write as _;

use super::Row;
use crate::verification::Verification;

/// One panel: its title, the figure (`None`: the method has none, drawn
/// as a dash, not as a zero), and the heading its range is kept under.
type Panel = (&'static str, fn(&Row) -> Option<f64>, Option<&'static str>);

fn verified(r: &Row, figure: fn(&Verification) -> u64) -> Option<f64> {
    r.verification.as_ref().map(|v| figure(v) as f64)
}

const PANELS: [Panel; 9] = [
    (
        "throughput (req/s)",
        |r| Some(r.requests_per_second),
        Some("req/s"),
    ),
    ("p99 latency (ms)", |r| Some(r.p99_ms), Some("p99 ms")),
    (
        "over-issued",
        |r| Some(r.over_issued as f64),
        Some("over-issued"),
    ),
    (
        "duplicate members",
        |r| Some(r.duplicates as f64),
        Some("duplicates"),
    ),
    (
        "served out of turn",
        |r| Some(r.out_of_turn as f64),
        Some("out of turn"),
    ),
    ("drain time (ms)", |r| r.drain_ms, Some("drain ms")),
    (
        "acked but lost",
        |r| verified(r, |v| v.acked_but_lost),
        None,
    ),
    (
        "issued but refused",
        |r| verified(r, |v| v.issued_but_refused),
        None,
    ),
    (
        "stranded stock",
        |r| verified(r, |v| v.stranded_stock),
        None,
    ),
];

/// The chart of `rows`.
pub fn svg(rows: &[Row]) -> String {
    let (label_w, bar_w, row_h, top) = (170.0, 230.0, 20.0, 30.0);
    // Room after the bar for its figure: a range takes more.
    let ranged = rows.iter().any(|row| !row.ranges.is_empty());
    let figure_w = if ranged { 140.0 } else { 60.0 };
    let panel_w = label_w + bar_w + figure_w;
    let panel_h = top + row_h * rows.len() as f64 + 15.0;
    let (columns, width) = (2.0, 2.0 * panel_w);
    let height = (PANELS.len() as f64 / columns).ceil() * panel_h;
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    for (i, (title, value, ranged)) in PANELS.iter().enumerate() {
        let x0 = (i as f64 % columns) * panel_w;
        let y0 = (i as f64 / columns).floor() * panel_h;
        let range = |row: &Row| ranged.and_then(|heading| row.ranges.get(heading).copied());
        let highest = |row: &Row| range(row).map(|r| r.max).or_else(|| value(row));
        let max = rows.iter().filter_map(highest).fold(0.0_f64, f64::max);
        let scale = |v: f64| if max > 0.0 { v / max * bar_w } else { 0.0 };
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" font-weight=\"bold\">{title}</text>",
            x0 + 10.0,
            y0 + 18.0
        );
        for (j, row) in rows.iter().enumerate() {
            let y = y0 + top + j as f64 * row_h;
            let v = value(row);
            let w = v.map_or(0.0, scale);
            let number = |v: f64| {
                if v.fract() == 0.0 {
                    format!("{v:.0}")
                } else {
                    format!("{v:.1}")
                }
            };
            let (text, end) = match (v, range(row)) {
                (None, _) => ("—".to_string(), w),
                (Some(_), Some(r)) => (r.show(number), scale(r.max).max(w)),
                (Some(v), None) => (number(v), w),
            };
            let x = x0 + label_w + 5.0;
            let _ = write!(
                out,
                "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text><rect x=\"{x}\" y=\"{}\" width=\"{w:.1}\" height=\"{}\" fill=\"#4a7ab8\"/>",
                x0 + label_w,
                y + 13.0,
                escape(&row.method),
                y + 3.0,
                row_h - 6.0,
            );
            if let Some(r) = range(row) {
                let _ = write!(
                    out,
                    "<line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{mid}\" y2=\"{mid}\" stroke=\"#1d3557\" stroke-width=\"2\"/>",
                    x + scale(r.min),
                    x + scale(r.max),
                    mid = y + row_h / 2.0,
                );
            }
            let _ = writeln!(
                out,
                "<text x=\"{:.1}\" y=\"{}\">{text}</text>",
                x + end + 5.0,
                y + 13.0,
            );
        }
    }
    out.push_str("</svg>\n");
    out
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
