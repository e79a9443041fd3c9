//! What the reports are made of: their styles, escaping, bars split by
//! outcome (a run's `report.html` and a soak's), and the tables of a run's
//! report, written as Markdown or HTML from the same cells.

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

/// A table of a run's report: a row heading (the row's name) and one cell
/// per heading, written as Markdown (report.md) or HTML (report.html), each
/// escaped for its format. A cell that reads as a number (its first word,
/// so a median with its range too) or a dash is right-aligned, and in
/// Markdown a column of them.
pub struct Table<'a> {
    /// The HTML table's id, when it has one.
    pub id: Option<&'a str>,
    /// The row headings' column heading.
    pub first: &'a str,
    pub headings: Vec<&'a str>,
    pub rows: Vec<(String, Vec<String>)>,
    /// The data attribute each HTML row carries its name in (`method`:
    /// `data-method`), for the page's scripts and the tests.
    pub row_data: Option<&'a str>,
}

impl<'a> Table<'a> {
    /// A table of one row per method, `id` in HTML.
    pub fn of_methods(
        id: &'a str,
        headings: Vec<&'a str>,
        rows: impl Iterator<Item = (String, Vec<String>)>,
    ) -> Self {
        Table {
            id: Some(id),
            first: "method",
            headings,
            rows: rows.collect(),
            row_data: Some("method"),
        }
    }

    pub fn markdown(&self, out: &mut String) {
        let escaped = |text: &str| text.replace('|', "\\|").replace('\n', " ");
        let _ = write!(out, "| {} |", escaped(self.first));
        for heading in &self.headings {
            let _ = write!(out, " {} |", escaped(heading));
        }
        out.push_str("\n|");
        for column in 0..=self.headings.len() {
            let mut cells = self.rows.iter().map(|(name, cells)| match column {
                0 => name.as_str(),
                n => cells.get(n - 1).map_or("", String::as_str),
            });
            let right = !self.rows.is_empty() && cells.all(numeric);
            out.push_str(if right { "---:|" } else { "---|" });
        }
        out.push('\n');
        for (name, cells) in &self.rows {
            let _ = write!(out, "| {} |", escaped(name));
            for cell in cells {
                let _ = write!(out, " {} |", escaped(cell));
            }
            out.push('\n');
        }
    }

    /// An outcome's heading carries its colour swatch.
    pub fn html(&self, out: &mut String) {
        let id = self
            .id
            .map_or(String::new(), |id| format!(" id=\"{}\"", esc(id)));
        let _ = write!(
            out,
            "<div class=\"scroll\"><table{id}>\n<thead><tr><th scope=\"col\">{}</th>",
            esc(self.first)
        );
        for heading in &self.headings {
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
        for (name, cells) in &self.rows {
            let data = self.row_data.map_or(String::new(), |attribute| {
                format!(" data-{attribute}=\"{}\"", esc(name))
            });
            let _ = write!(out, "<tr{data}><th scope=\"row\">{}</th>", esc(name));
            for cell in cells {
                let class = if numeric(cell) { " class=\"num\"" } else { "" };
                let _ = write!(out, "<td{class}>{}</td>", esc(cell));
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</tbody></table></div>\n");
    }
}

/// Whether a cell reads as a number: its first word is one, or it is a
/// dash (no figure).
fn numeric(cell: &str) -> bool {
    cell == "—"
        || cell
            .split_whitespace()
            .next()
            .is_some_and(|word| word.parse::<f64>().is_ok())
}

/// `text` escaped for HTML, in an element or an attribute.
pub fn esc(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Table<'static> {
        Table::of_methods(
            "figures",
            vec!["p99 ms", "verdict"],
            [
                (
                    "A|B".to_string(),
                    vec!["12.5 (11.0–14.2)".into(), "kept".into()],
                ),
                ("<C>".to_string(), vec!["—".into(), "two\nlines".into()]),
            ]
            .into_iter(),
        )
    }

    #[test]
    fn one_table_is_written_as_markdown_and_as_html_each_escaped() {
        let mut markdown = String::new();
        table().markdown(&mut markdown);
        assert_eq!(
            markdown,
            "| method | p99 ms | verdict |\n|---|---:|---|\n\
             | A\\|B | 12.5 (11.0–14.2) | kept |\n| <C> | — | two lines |\n"
        );
        let mut html = String::new();
        table().html(&mut html);
        assert!(html.starts_with("<div class=\"scroll\"><table id=\"figures\">"));
        assert!(html.contains(
            "<tr data-method=\"&lt;C&gt;\"><th scope=\"row\">&lt;C&gt;</th><td class=\"num\">—</td><td>two\nlines</td></tr>"
        ));
        assert!(html.contains("<td class=\"num\">12.5 (11.0–14.2)</td>"));
    }
}
