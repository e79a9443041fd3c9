//! The report as one self-contained HTML file (`report.html`): the table,
//! the charts and the figures of results.json, with its styles inline and
//! its charts as inline SVG, so it opens offline, mailed or archived. The
//! outcome colours are the console's own stylesheet, compiled in.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde_json::Value;

use super::charts::{self, CHARTS_CSS, Run, UPLOT_CSS};
use super::figures::FIGURES;
use super::markup::{REPORT_CSS, esc, stacked_bars, table};
use super::{self as report, Row, svg};

/// One colour and dash pattern per outcome, shared with the console.
const OUTCOMES_CSS: &str = include_str!("../../../host/assets/console/outcomes.css");

/// The verification figures the runner records per method, in the order
/// shown: (field of `verification`, column heading).
const VERIFICATION: [(&str, &str); 8] = [
    ("ackedButLost", "acked but lost"),
    ("issuedButRefused", "issued but refused"),
    ("outcomeUnknown", "outcome unknown"),
    ("strandedStock", "stranded stock"),
    ("overIssued", "over-issued"),
    ("duplicates", "duplicates"),
    ("outOfTurn", "out of turn"),
    ("verdict", "verdict"),
];

/// The whole page for a run: what `report::write` writes as report.html.
pub fn render(
    title: &str,
    description: &str,
    rows: &[Row],
    raw: &Value,
    provenance: &Value,
) -> String {
    let mut out = page_start(title, description);
    summary(&mut out, rows);
    out.push_str("<h2>Side by side</h2>\n");
    out.push_str(&svg(rows));
    charts::section(
        &mut out,
        &[Run {
            run: None,
            methods: raw,
        }],
    );
    outcomes(&mut out, rows, raw);
    latency(&mut out, rows, raw);
    verification(&mut out, rows, raw);
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
    table(out, "summary", "method", &headings, body);
}

/// Answers by outcome per method, as stacked bars named in text and as a
/// table; then what became of the 202s, when any method answered 202.
fn outcomes(out: &mut String, rows: &[Row], raw: &Value) {
    let counts = |row: &Row, field: &str| -> Vec<(String, u64)> {
        let map = match field {
            "asyncResults" => &raw[&row.method]["result"]["asyncResults"],
            _ => &raw[&row.method]["result"]["requests"]["byOutcome"],
        };
        map.as_object()
            .into_iter()
            .flatten()
            .map(|(name, count)| (name.clone(), count.as_u64().unwrap_or(0)))
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
        table(out, field, "method", &headings, body);
    }
}

/// Client and server latency percentiles, and the confirmation lag of the
/// methods that answer 202.
fn latency(out: &mut String, rows: &[Row], raw: &Value) {
    const KEYS: [&str; 4] = ["p50", "p95", "p99", "max"];
    let figures = |value: &Value| -> Vec<String> {
        KEYS.iter()
            .map(|key| {
                value[key]
                    .as_f64()
                    .map_or("—".into(), |ms| format!("{ms:.1}"))
            })
            .collect()
    };
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
    let body = rows.iter().map(|row| {
        let run = &raw[&row.method];
        let mut cells = figures(&run["k6"]["latencyMs"]);
        cells.extend(figures(&run["result"]["requests"]["latencyMs"]));
        (row.method.clone(), cells)
    });
    out.push_str("<h2>Latency (ms)</h2>\n");
    table(out, "latency", "method", &headings, body);
    let lagging: Vec<&Row> = rows
        .iter()
        .filter(|row| raw[&row.method]["result"]["confirmationLagMs"].is_object())
        .collect();
    if lagging.is_empty() {
        return;
    }
    let body = lagging.iter().map(|row| {
        let lag = &raw[&row.method]["result"]["confirmationLagMs"];
        (row.method.clone(), figures(lag))
    });
    out.push_str("<h2>Confirmation lag (ms, 202 → committed)</h2>\n");
    table(out, "lag", "method", &KEYS, body);
}

/// The runner's verification of each method, for the methods it verified.
fn verification(out: &mut String, rows: &[Row], raw: &Value) {
    let verified: Vec<(&Row, &Value)> = rows
        .iter()
        .map(|row| (row, &raw[&row.method]["verification"]))
        .filter(|(_, v)| v.is_object())
        .collect();
    if verified.is_empty() {
        return;
    }
    let headings: Vec<&str> = VERIFICATION.iter().map(|(_, heading)| *heading).collect();
    let body = verified.iter().map(|(row, v)| {
        let cells = VERIFICATION
            .iter()
            .map(|(field, _)| match &v[field] {
                Value::String(text) => text.clone(),
                Value::Null => "—".to_string(),
                other => other.to_string(),
            })
            .collect();
        (row.method.clone(), cells)
    });
    out.push_str("<h2>Verification</h2>\n");
    table(out, "verification", "method", &headings, body);
}

/// The faults that fired, and the command, commit and versions behind the
/// figures.
fn reproduction(out: &mut String, provenance: &Value) {
    let faults = report::faults(provenance);
    if !faults.is_empty() {
        out.push_str("<h2>Faults</h2>\n<ul id=\"faults\">\n");
        for fault in faults {
            let _ = writeln!(out, "<li>{}</li>", esc(&fault));
        }
        out.push_str("</ul>\n");
    }
    let _ = write!(
        out,
        "<h2>Reproduce</h2>\n<pre id=\"command\">{}</pre>\n<p>{}</p>\n",
        esc(&report::text(&provenance["command"])),
        esc(&report::environment(provenance))
    );
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn row(method: &str) -> Row {
        let k6 = json!({
            "requests": 300, "requestsPerSecond": 3000.0,
            "latencyMs": { "p50": 2.0, "p95": 8.0, "p99": 9.5, "max": 20.0 },
            "statuses": { "202": 100, "409": 200 }, "dropped": 0,
        });
        Row::from(method, &k6, &result(), Some(80.0), None)
    }

    fn result() -> Value {
        json!({
            "totalCount": 100, "issueRows": 100, "overIssued": 0, "duplicateMembers": 0,
            "requests": {
                "byOutcome": { "ACCEPTED": 100, "SOLD_OUT": 200 },
                "latencyMs": { "p50": 1.0, "p95": 3.0, "p99": 4.0, "max": 7.5 },
                "fairness": { "servedAfterEarlierSoldOut": 0 },
            },
            "accepted": 100, "asyncResults": { "ISSUED": 100 }, "pending": 0,
            "confirmationLagMs": { "p50": 5.0, "p95": 9.0, "p99": 12.0, "max": 30.0 },
        })
    }

    #[test]
    fn the_page_is_self_contained_with_every_section() {
        let rows = [row("REDIS_STREAM"), row("REDIS_LUA <x>")];
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
        let charted = json!({ "client": crate::histograms::encode(&latencies) });
        let raw = json!({
            "REDIS_STREAM": { "k6": {}, "result": result(), "verification": verification,
                              "latencyHistograms": charted, "perSecond": [{ "second": 0,
                              "outcomes": { "ACCEPTED": 1 }, "p50Ms": 2.5, "p99Ms": 2.5, "issuedSoFar": 1 }] },
            "REDIS_LUA <x>": { "k6": {}, "result": result() },
        });
        let provenance = json!({ "command": "cargo xtask loadtest spike --fault kill-server@0.3s", "faults": ["REDIS_LUA: `kill-server@300ms` fired at 300 ms"] });
        let page = render("Event open", "a test run", &rows, &raw, &provenance);
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
        let rows = [row("PESSIMISTIC")];
        let raw = json!({ "PESSIMISTIC": { "k6": {}, "result": { "requests": { "byOutcome": { "ISSUED": 3 } } } } });
        let page = render("t", "d", &rows, &raw, &Value::Null);
        for section in ["id=\"asyncResults\"", "id=\"lag\"", "id=\"verification\""] {
            assert!(!page.contains(section), "{section}");
        }
        assert!(page.contains("id=\"byOutcome\""));
    }
}
