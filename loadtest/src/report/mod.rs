//! The report of a run: a Markdown table, an SVG chart of the figures that
//! matter side by side, and the raw results.

pub mod chart;
pub mod charts;
pub mod distribution;
pub mod figures;
pub mod html;
pub mod markup;
pub mod why;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde_json::{Value, json};

pub use self::chart::svg;
use self::figures::{FIGURES, Ranges};
use self::why::Why;
use crate::verification::Verification;

/// One method's figures in one run, or over its rounds.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Row {
    pub method: String,
    /// Requests k6 sent and got an answer for.
    pub requests: u64,
    pub requests_per_second: f64,
    /// Client-side latency of the issue requests, milliseconds.
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub accepted: u64,
    pub conflicts: u64,
    pub unavailable: u64,
    /// 400, 404, 422, 500, 504 and no answer.
    pub errors: u64,
    /// k6 could not start these on time (the server or k6 fell behind).
    pub dropped: u64,
    pub total: u64,
    pub issue_rows: u64,
    pub over_issued: u64,
    pub duplicates: u64,
    /// Members served after an earlier arrival was refused as sold out.
    pub out_of_turn: u64,
    /// From the end of the load to the last confirmation (asynchronous methods).
    pub drain_ms: Option<f64>,
    /// What every client was told, joined with the database and Redis.
    pub verification: Option<Verification>,
    /// The anomalies the server named, and one request's trace.
    pub why: Why,
    /// Over several rounds: each figure's range, the figures above being
    /// the medians; empty for one run.
    pub ranges: Ranges,
}

impl Row {
    /// Combines k6's figures with the server's result for the method's coupon.
    pub fn from(
        method: &str,
        k6: &Value,
        result: &Value,
        drain_ms: Option<f64>,
        verification: Option<Verification>,
    ) -> Row {
        let status = |code: &str| k6["statuses"][code].as_u64().unwrap_or(0);
        let number = |value: &Value| value.as_u64().unwrap_or(0);
        let requests = number(&k6["requests"]);
        let (accepted, conflicts, unavailable) =
            (status("200") + status("202"), status("409"), status("503"));
        Row {
            method: method.to_string(),
            requests,
            requests_per_second: k6["requestsPerSecond"].as_f64().unwrap_or(0.0),
            p50_ms: k6["latencyMs"]["p50"].as_f64().unwrap_or(0.0),
            p99_ms: k6["latencyMs"]["p99"].as_f64().unwrap_or(0.0),
            accepted,
            conflicts,
            unavailable,
            errors: requests.saturating_sub(accepted + conflicts + unavailable),
            dropped: number(&k6["dropped"]),
            total: number(&result["totalCount"]),
            issue_rows: number(&result["issueRows"]),
            over_issued: number(&result["overIssued"]),
            duplicates: number(&result["duplicateMembers"]),
            out_of_turn: number(&result["requests"]["fairness"]["servedAfterEarlierSoldOut"]),
            drain_ms,
            verification,
            why: Why::of(result),
            ranges: Ranges::new(),
        }
    }

    /// The share of requests that got 503 or an error.
    pub fn failure_rate(&self) -> f64 {
        if self.requests == 0 {
            return 1.0;
        }
        (self.unavailable + self.errors) as f64 / self.requests as f64
    }
}

pub fn markdown(title: &str, description: &str, rows: &[Row], provenance: &Value) -> String {
    let mut out = format!("# {title}\n\n{description}\n\n![chart](chart.svg)\n\n");
    let headings: Vec<&str> = FIGURES.iter().map(|figure| figure.heading).collect();
    let _ = writeln!(out, "| method | {} |", headings.join(" | "));
    let _ = writeln!(out, "|---|{}", "---:|".repeat(FIGURES.len()));
    for r in rows {
        let cells: Vec<String> = FIGURES.iter().map(|figure| figure.cell(r)).collect();
        let _ = writeln!(out, "| {} | {} |", r.method, cells.join(" | "));
    }
    out.push_str(
        "\n2xx: issued (200) or accepted (202). Latencies are k6's, client side. *Out of turn*: \
         members served after an earlier arrival was refused as sold out. *Drain*: from the end \
         of the load until every accepted request had its outcome.\n",
    );
    verification_table(&mut out, rows);
    why::markdown(&mut out, rows);
    reproduction(&mut out, provenance);
    out
}

/// What every client was told against what the database and Redis hold.
fn verification_table(out: &mut String, rows: &[Row]) {
    let verified: Vec<(&Row, &Verification)> = rows
        .iter()
        .filter_map(|r| r.verification.as_ref().map(|v| (r, v)))
        .collect();
    if verified.is_empty() {
        return;
    }
    out.push_str(
        "\n## Verification\n\nEach client's answer (k6's record of every request, `requests-<METHOD>.csv`) \
         joined with the issue rows and the Redis stock, read directly after the drain.\n\n\
         | method | acked but lost | issued but refused | outcome unknown (issued) | stranded stock | over-issued | duplicates | out of turn | verdict |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for (r, v) in verified {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} ({}) | {} | {} | {} | {} | {} |",
            r.method,
            v.acked_but_lost,
            v.issued_but_refused,
            v.outcome_unknown,
            v.outcome_unknown_issued,
            v.stranded_stock,
            v.over_issued,
            v.duplicates,
            v.out_of_turn,
            v.verdict
        );
    }
    out.push_str(
        "\n*Acked but lost*: told 2xx, no issue row. *Issued but refused*: has a row, but was told \
         a failure, timed out or got no answer. *Outcome unknown*: told that the answer to its COMMIT \
         or script was lost and the server settles it later (in brackets: those that hold a row). *Stranded stock*: the coupon answered SOLD_OUT while \
         once nothing moves Redis holds reservations no call will confirm (the total less the rows less what Redis would still sell).\n",
    );
}

/// The faults, the commit, the command and the versions behind the figures.
fn reproduction(out: &mut String, provenance: &Value) {
    let faults = faults(provenance);
    if !faults.is_empty() {
        out.push_str("\n## Faults\n\n");
        for fault in faults {
            let _ = writeln!(out, "- {fault}");
        }
    }
    let _ = write!(
        out,
        "\n## Reproduce\n\n```sh\n{}\n```\n\n{}\n",
        text(&provenance["command"]),
        environment(provenance)
    );
}

/// The faults that fired, one line each.
pub fn faults(provenance: &Value) -> Vec<String> {
    provenance["faults"]
        .as_array()
        .into_iter()
        .flatten()
        .map(text)
        .collect()
}

/// The commit, versions, cores and seeds, as one sentence.
pub fn environment(provenance: &Value) -> String {
    let versions = &provenance["versions"];
    format!(
        "commit {}; Redis {}, database {}, {}, {}; {} cores; seeds: {}.",
        text(&provenance["commit"]),
        text(&versions["redis"]),
        text(&versions["database"]),
        text(&versions["k6"]),
        text(&versions["rust"]),
        provenance["cores"],
        text(&provenance["seeds"]),
    )
}

pub fn text(value: &Value) -> String {
    value.as_str().unwrap_or("unknown").to_string()
}

/// Writes `report.md`, `chart.svg`, `report.html` and `results.json`
/// (`provenance`, and each method's figures under `methods`, with its
/// latency histograms and seconds from its request records) into `dir`.
pub fn write(
    dir: &Path,
    title: &str,
    description: &str,
    rows: &[Row],
    methods: &BTreeMap<String, Value>,
    provenance: &Value,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(
        dir.join("report.md"),
        markdown(title, description, rows, provenance),
    )?;
    std::fs::write(dir.join("chart.svg"), svg(rows))?;
    let mut methods = methods.clone();
    distribution::enrich(dir, &mut methods)?;
    std::fs::write(
        dir.join("report.html"),
        html::render(title, description, rows, &json!(methods), provenance),
    )?;
    // Over rounds, each method's entry carries its figures' spreads.
    for row in rows.iter().filter(|row| !row.ranges.is_empty()) {
        if let Some(entry) = methods.get_mut(&row.method).and_then(Value::as_object_mut) {
            entry.insert("spread".into(), figures::spreads_json(row));
        }
    }
    let results = json!({
        "title": title, "description": description, "provenance": provenance, "methods": methods,
    });
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(&results)?,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn row(method: &str) -> Row {
        let k6 = json!({
            "requests": 500, "requestsPerSecond": 250.0,
            "latencyMs": { "p50": 2.0, "p99": 9.5, "max": 20.0 },
            "statuses": { "200": 100, "409": 390, "503": 7, "0": 3 }, "dropped": 1,
        });
        let result = json!({
            "totalCount": 100, "issueRows": 103, "overIssued": 3, "duplicateMembers": 0,
            "requests": { "fairness": { "servedAfterEarlierSoldOut": 4 } },
        });
        Row::from(method, &k6, &result, Some(120.0), None)
    }

    #[test]
    fn a_row_combines_k6_and_the_server_result() {
        let r = row("READ_COMMITTED");
        assert_eq!(
            (r.accepted, r.conflicts, r.unavailable, r.errors),
            (100, 390, 7, 3)
        );
        assert_eq!(
            (r.issue_rows, r.over_issued, r.out_of_turn, r.dropped),
            (103, 3, 4, 1)
        );
        assert!((r.failure_rate() - 0.02).abs() < 1e-9);
    }

    #[test]
    fn the_report_has_a_row_per_method_and_a_chart() {
        let rows = [row("PESSIMISTIC"), row("REDIS_LUA")];
        let dir = std::env::temp_dir().join(format!("couponlab-report-{}", std::process::id()));
        let provenance = json!({ "command": "cargo xtask loadtest spike", "faults": ["kill-server@0.3s: fired at 300 ms"] });
        write(
            &dir,
            "test",
            "a test run",
            &rows,
            &BTreeMap::new(),
            &provenance,
        )
        .unwrap();
        let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
        for method in ["PESSIMISTIC", "REDIS_LUA"] {
            let line = report
                .lines()
                .find(|l| l.starts_with(&format!("| {method} |")))
                .expect("a row");
            assert!(line.contains("| 500 | 250 | 2.0 | 9.5 | 100 | 390 | 7 | 3 | 1 | 100 | 103 | 3 | 0 | 4 | 120 |"), "{line}");
        }
        assert!(
            report.contains("- kill-server@0.3s: fired at 300 ms"),
            "{report}"
        );
        assert!(
            report.contains("cargo xtask loadtest spike\n```"),
            "{report}"
        );
        let chart = std::fs::read_to_string(dir.join("chart.svg")).unwrap();
        assert!(chart.starts_with("<svg"));
        assert_eq!(
            chart.matches(">REDIS_LUA</text>").count(),
            9,
            "one bar per panel"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
