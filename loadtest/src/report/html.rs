//! The report as one self-contained HTML file (`report.html`): the table,
//! the charts and the figures of results.json, with its styles inline and
//! its charts as inline SVG, so it opens offline, mailed or archived. The
//! outcome colours are the console's own stylesheet, compiled in.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use couponlab_contract::results::Latency;

use super::charts::{self, CHARTS_CSS, Run, UPLOT_CSS};
use super::distribution::Entry;
use super::figures::FIGURES;
use super::markup::{REPORT_CSS, Table, esc, stacked_bars};
use super::{Provenance, Row, shown, svg, verification_rows};
use crate::k6::ClientLatency;

/// One colour and dash pattern per outcome, shared with the console.
const OUTCOMES_CSS: &str = include_str!("../../../host/assets/console/outcomes.css");

/// The whole page for a run: what `report::write` writes as report.html.
pub fn render(
    title: &str,
    description: &str,
    rows: &[Row],
    entries: &BTreeMap<String, Entry>,
    provenance: &Provenance,
) -> String {
    let mut out = page_start(title, description);
    summary(&mut out, rows);
    out.push_str("<h2>Side by side</h2>\n");
    out.push_str(&svg(rows));
    charts::section(
        &mut out,
        &[Run {
            run: None,
            methods: entries,
        }],
    );
    outcomes(&mut out, rows, entries);
    latency(&mut out, rows, entries);
    verification(&mut out, rows);
    super::why::html(&mut out, rows);
    reproduction(&mut out, provenance);
    out.push_str(
        "<p class=\"note\">2xx: issued (200) or accepted (202). Client latencies are k6's; \
         server latencies are the result endpoint's. <em>Out of turn</em>: members served after \
         an earlier arrival was refused as sold out. <em>Drain</em>: from the end of the load \
         until every accepted request had its outcome.</p>\n</body>\n</html>\n",
    );
    out
}

/// A report page's head, with every style inline, its title and what it
/// shows.
pub fn page_start(title: &str, description: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{t}</title>\n<style>\n{OUTCOMES_CSS}{REPORT_CSS}{UPLOT_CSS}\n{CHARTS_CSS}</style>\n</head>\n<body>\n\
         <h1>{t}</h1>\n<p>{d}</p>\n",
        t = esc(title),
        d = esc(description),
    )
}

/// The table of report.md, one row per method, numbers right-aligned.
fn summary(out: &mut String, rows: &[Row]) {
    let headings: Vec<&str> = FIGURES.iter().map(|figure| figure.heading).collect();
    let body = rows.iter().map(|row| {
        let cells: Vec<String> = FIGURES.iter().map(|figure| figure.cell(row)).collect();
        (row.method.clone(), cells)
    });
    out.push_str("<h2>Figures</h2>\n");
    Table::of_methods("summary", headings, body).html(out);
}

/// Answers by outcome per method, as stacked bars named in text and as a
/// table; then what became of the 202s, when any method answered 202.
fn outcomes(out: &mut String, rows: &[Row], entries: &BTreeMap<String, Entry>) {
    let counts = |row: &Row, field: &str| -> Vec<(String, u64)> {
        let Some(result) = entries.get(&row.method).map(|entry| &entry.result) else {
            return Vec::new();
        };
        let map = match field {
            "asyncResults" => result.confirmations.as_ref().map(|c| &c.async_results),
            _ => Some(&result.requests.by_outcome),
        };
        map.into_iter()
            .flatten()
            .map(|(name, count)| (name.clone(), *count))
            .collect()
    };
    for (field, heading) in [
        ("byOutcome", "Answers by outcome (the server's record)"),
        ("asyncResults", "What became of the 202s"),
    ] {
        let names: BTreeSet<String> = rows
            .iter()
            .flat_map(|row| counts(row, field))
            .map(|(name, _)| name)
            .collect();
        if names.is_empty() {
            continue;
        }
        let _ = writeln!(out, "<h2>{heading}</h2>");
        stacked_bars(
            out,
            rows.iter()
                .map(|row| (row.method.as_str(), counts(row, field))),
        );
        let headings: Vec<&str> = names.iter().map(String::as_str).collect();
        let body = rows.iter().map(|row| {
            let found = counts(row, field);
            let cells = names
                .iter()
                .map(|name| {
                    let count = found.iter().find(|(n, _)| n == name).map_or(0, |(_, c)| *c);
                    count.to_string()
                })
                .collect();
            (row.method.clone(), cells)
        });
        Table::of_methods(field, headings, body).html(out);
    }
}

/// Client and server latency percentiles, and the confirmation lag of the
/// methods that answer 202.
fn latency(out: &mut String, rows: &[Row], entries: &BTreeMap<String, Entry>) {
    const KEYS: [&str; 4] = ["p50", "p95", "p99", "max"];
    let figures = |latency: [Option<f64>; 4]| -> Vec<String> {
        latency
            .iter()
            .map(|ms| ms.map_or("—".into(), |ms| format!("{ms:.1}")))
            .collect()
    };
    let server = |latency: Option<&Latency>| {
        latency.map_or([None; 4], |l| [l.p50, l.p95, l.p99, l.max].map(Some))
    };
    let client = |l: &ClientLatency| [l.p50, l.p95, l.p99, l.max];
    let headings = [
        "client p50",
        "client p95",
        "client p99",
        "client max",
        "server p50",
        "server p95",
        "server p99",
        "server max",
    ];
    let measured: Vec<(&Row, &Entry)> = rows
        .iter()
        .filter_map(|row| Some((row, entries.get(&row.method)?)))
        .collect();
    let body = measured.iter().map(|(row, entry)| {
        let mut cells = figures(client(&entry.k6.latency_ms));
        cells.extend(figures(server(entry.result.requests.latency_ms.as_ref())));
        (row.method.clone(), cells)
    });
    out.push_str("<h2>Latency (ms)</h2>\n");
    Table::of_methods("latency", headings.to_vec(), body).html(out);
    let lagging: Vec<(&Row, &Latency)> = measured
        .iter()
        .filter_map(|(row, entry)| {
            let lag = entry
                .result
                .confirmations
                .as_ref()?
                .confirmation_lag_ms
                .as_ref()?;
            Some((*row, lag))
        })
        .collect();
    if lagging.is_empty() {
        return;
    }
    let body = lagging
        .iter()
        .map(|(row, lag)| (row.method.clone(), figures(server(Some(lag)))));
    out.push_str("<h2>Confirmation lag (ms, 202 → committed)</h2>\n");
    Table::of_methods("lag", KEYS.to_vec(), body).html(out);
}

/// The runner's verification of each method, for the methods it verified.
fn verification(out: &mut String, rows: &[Row]) {
    let table = verification_rows(rows);
    if table.rows.is_empty() {
        return;
    }
    out.push_str("<h2>Verification</h2>\n");
    table.html(out);
}

/// The faults that fired, and the command, commit and versions behind the
/// figures.
fn reproduction(out: &mut String, provenance: &Provenance) {
    let faults = &provenance.faults;
    if !faults.is_empty() {
        out.push_str("<h2>Faults</h2>\n<ul id=\"faults\">\n");
        for fault in faults {
            let _ = writeln!(out, "<li>{}</li>", esc(fault));
        }
        out.push_str("</ul>\n");
    }
    let _ = write!(
        out,
        "<h2>Reproduce</h2>\n<pre id=\"command\">{}</pre>\n<p>{}</p>\n",
        esc(shown(&provenance.command)),
        esc(&provenance.environment())
    );
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::report::tests::entry;

    /// A 202 method's entry: 100 accepted and issued, 200 sold out.
    fn accepting() -> Value {
        let mut entry = entry(7, json!({ "ACCEPTED": 100, "SOLD_OUT": 200 }));
        let result = entry["result"].as_object_mut().unwrap();
        result.insert("accepted".into(), json!(100));
        result.insert("asyncResults".into(), json!({ "ISSUED": 100 }));
        result.insert("pending".into(), json!(0));
        let lag = json!({ "p50": 5.0, "p95": 9.0, "p99": 12.0, "max": 30.0 });
        result.insert("confirmationLagMs".into(), lag);
        entry
    }

    fn read(entries: &[(&str, Value)]) -> BTreeMap<String, Entry> {
        entries
            .iter()
            .map(|(method, value)| (method.to_string(), Entry::read(method, value).unwrap()))
            .collect()
    }

    fn row(method: &str, entry: &Entry) -> Row {
        Row::from(
            method,
            &entry.k6,
            &entry.result,
            Some(80.0),
            entry.verification.clone(),
        )
    }

    #[test]
    fn the_page_is_self_contained_with_every_section() {
        let verification = json!({
            "ackedButLost": 0, "issuedButRefused": 0, "outcomeUnknown": 0, "outcomeUnknownIssued": 0, "strandedStock": 0, "overIssued": 0,
            "duplicates": 0, "outOfTurn": 0, "verdict": "kept",
        });
        let latencies = crate::histograms::client(&[crate::records::Record {
            member: 1,
            status: 202,
            outcome: "ACCEPTED".into(),
            latency_ms: 2.5,
            time: "2026-12-01T10:00:00.100Z".into(),
            message: String::new(),
        }]);
        let mut stream = accepting();
        stream["verification"] = verification;
        stream["latencyHistograms"] = json!({ "client": crate::histograms::encode(&latencies) });
        stream["perSecond"] = json!([{ "second": 0, "outcomes": { "ACCEPTED": 1 }, "p50Ms": 2.5,
                                       "p99Ms": 2.5, "issuedSoFar": 1 }]);
        let entries = read(&[("REDIS_STREAM", stream), ("REDIS_LUA <x>", accepting())]);
        let rows: Vec<Row> = entries
            .iter()
            .map(|(method, entry)| row(method, entry))
            .collect();
        let provenance = Provenance::read(&json!({ "command": "cargo xtask loadtest spike --fault kill-server@0.3s", "faults": ["REDIS_LUA: `kill-server@300ms` fired at 300 ms"] })).unwrap();
        let page = render("Event open", "a test run", &rows, &entries, &provenance);
        assert!(
            page.contains(
                "<pre id=\"command\">cargo xtask loadtest spike --fault kill-server@0.3s</pre>"
            ),
            "{page}"
        );
        assert!(
            page.contains("<li>REDIS_LUA: `kill-server@300ms` fired at 300 ms</li>"),
            "{page}"
        );
        assert!(page.starts_with("<!doctype html>"));
        // Nothing the page loads from elsewhere: no link, script file or
        // URL but the SVG namespace and the banner naming uPlot's home.
        for external in ["<link", "src=", "href=", "http://", "https://", "url("] {
            let allowed = match external {
                "http://" => page.matches("xmlns=\"http://www.w3.org/2000/svg\"").count(),
                "https://" => page
                    .matches("/*! https://github.com/leeoniya/uPlot")
                    .count(),
                _ => 0,
            };
            assert_eq!(page.matches(external).count(), allowed, "{external}");
        }
        // The charts' data, uPlot and the code drawing them, inline.
        assert_eq!(page.matches("<script").count(), 3);
        assert!(page.contains("id=\"percentiles\"") && page.contains("var uPlot="));
        assert!(
            page.contains("\"method\":\"REDIS_STREAM\",\"points\":[[0.0,2.5"),
            "{page}"
        );
        for section in [
            "id=\"summary\"",
            "id=\"byOutcome\"",
            "id=\"asyncResults\"",
            "id=\"latency\"",
            "id=\"lag\"",
            "id=\"verification\"",
        ] {
            assert!(page.contains(section), "{section}");
        }
        assert!(
            page.contains("<tr data-method=\"REDIS_LUA &lt;x&gt;\">"),
            "escaped"
        );
        assert!(page.contains("<td>kept</td>"));
        assert!(page.contains("<rect data-outcome=\"SOLD_OUT\""));
        assert!(page.contains("[data-outcome=\"SOLD_OUT\"] { --outcome:"));
        // Only the verified method has a verification row.
        let verified = &page[page.find("id=\"verification\"").unwrap()..];
        assert_eq!(verified.matches("<tr data-method=").count(), 1);
    }

    #[test]
    fn a_run_without_202s_or_verification_leaves_those_sections_out() {
        let entries = read(&[("PESSIMISTIC", entry(7, json!({ "ISSUED": 3 })))]);
        let rows = [row("PESSIMISTIC", &entries["PESSIMISTIC"])];
        let page = render("t", "d", &rows, &entries, &Provenance::default());
        for section in ["id=\"asyncResults\"", "id=\"lag\"", "id=\"verification\""] {
            assert!(!page.contains(section), "{section}");
        }
        assert!(page.contains("id=\"byOutcome\""));
    }
}
