//! The HTML both reports are made of (a run's `report.html` and a soak's):
//! their styles, escaping, a table, and bars split by outcome.

use std::fmt::Write as _;

/// The reports' own styles, inline in each page.
pub const REPORT_CSS: &str = "\
body { margin: 0 auto; padding: 0 1rem 2rem; max-width: 1200px; font: 15px/1.45 system-ui, sans-serif; color: #1a1a1a; }
h1 { font-size: 1.4rem; border-bottom: 2px solid #1a1a1a; padding: 0.6rem 0; }
h2 { font-size: 1.1rem; margin-top: 1.6rem; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
th, td { padding: 0.25rem 0.55rem; border-bottom: 1px solid #ccc; text-align: left; }
thead th { border-bottom: 2px solid #1a1a1a; }
tbody tr:nth-child(even) { background: #f3f3f3; }
.num { text-align: right; }
.note { color: #555; font-size: 0.9rem; }
svg { max-width: 100%; height: auto; }
pre { white-space: pre-wrap; }
#verification th:last-child, #verification td:last-child { text-align: left; }
svg text { font: 11px system-ui, sans-serif; }
";

/// One bar per method, its segments an outcome's share, each segment
/// coloured by the shared stylesheet and named in the legend under it.
pub fn stacked_bars<'a>(
    out: &mut String,
    methods: impl Iterator<Item = (&'a str, Vec<(String, u64)>)>,
) {
    let methods: Vec<_> = methods.collect();
    let (label_w, bar_w, row_h) = (190.0, 560.0, 22.0);
    let height = row_h * methods.len() as f64 + 8.0;
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {} {height}\" width=\"{}\" role=\"img\" aria-label=\"answers by outcome per method\">",
        label_w + bar_w + 10.0,
        label_w + bar_w + 10.0
    );
    for (i, (method, counts)) in methods.iter().enumerate() {
        let y = 4.0 + i as f64 * row_h;
        let total: u64 = counts.iter().map(|(_, c)| c).sum();
        let _ = write!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
            label_w - 6.0,
            y + 14.0,
            esc(method)
        );
        let mut x = label_w;
        for (name, count) in counts.iter().filter(|(_, c)| *c > 0) {
            let w = *count as f64 / total as f64 * bar_w;
            let _ = write!(
                out,
                "<rect data-outcome=\"{n}\" x=\"{x:.1}\" y=\"{y}\" width=\"{w:.1}\" height=\"{}\"><title>{n}: {count}</title></rect>",
                row_h - 6.0,
                n = esc(name),
            );
            // Named in the segment too when it fits, so the bar reads
            // without its colours.
            if w > 8.0 * (name.len() + 6) as f64 {
                let _ = write!(
                    out,
                    "<text x=\"{:.1}\" y=\"{}\" stroke=\"#fff\" stroke-width=\"3\" paint-order=\"stroke\">{} {count}</text>",
                    x + 4.0,
                    y + 12.0,
                    esc(name)
                );
            }
            x += w;
        }
        out.push('\n');
    }
    out.push_str("</svg>\n");
}

/// A table with a row heading and one cell per heading; a cell that reads
/// as a number is right-aligned, and an outcome's heading carries its
/// colour swatch.
pub fn table(
    out: &mut String,
    id: &str,
    first: &str,
    headings: &[&str],
    body: impl Iterator<Item = (String, Vec<String>)>,
) {
    let _ = write!(
        out,
        "<div class=\"scroll\"><table id=\"{id}\">\n<thead><tr><th scope=\"col\">{}</th>",
        esc(first)
    );
    for heading in headings {
        let swatch = if heading.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
            format!(
                "<span class=\"swatch\" data-outcome=\"{}\"></span>",
                esc(heading)
            )
        } else {
            String::new()
        };
        let _ = write!(
            out,
            "<th scope=\"col\" class=\"num\">{swatch}{}</th>",
            esc(heading)
        );
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for (name, cells) in body {
        let _ = write!(
            out,
            "<tr data-method=\"{0}\"><th scope=\"row\">{0}</th>",
            esc(&name)
        );
        for cell in cells {
            let numeric = cell.parse::<f64>().is_ok() || cell == "—";
            let class = if numeric { " class=\"num\"" } else { "" };
            let _ = write!(out, "<td{class}>{}</td>", esc(&cell));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table></div>\n");
}

pub fn esc(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
