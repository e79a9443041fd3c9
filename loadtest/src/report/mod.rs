//! The report of a run: a Markdown table, an SVG chart of the figures that
//! matter side by side, and the raw results.

pub mod chart;
pub mod charts;
pub mod distribution;
pub mod figures;
pub mod galera;
pub mod html;
pub mod markup;
pub mod why;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use couponlab_contract::results::CouponResult;
use serde::Deserialize;
use serde_json::{Value, json};

pub use self::chart::svg;
use self::distribution::Entry;
use self::figures::{FIGURES, Ranges};
use self::markup::Table;
use self::why::Why;
use crate::k6;
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
        k6: &k6::Figures,
        result: &CouponResult,
        drain_ms: Option<f64>,
        verification: Option<Verification>,
    ) -> Row {
        let status = |code: &str| k6.statuses.get(code).copied().unwrap_or(0);
        let (accepted, conflicts, unavailable) =
            (status("200") + status("202"), status("409"), status("503"));
        let count = |figure: i64| figure.max(0) as u64;
        Row {
            method: method.to_string(),
            requests: k6.requests,
            requests_per_second: k6.requests_per_second,
            p50_ms: k6.latency_ms.p50.unwrap_or(0.0),
            p99_ms: k6.latency_ms.p99.unwrap_or(0.0),
            accepted,
            conflicts,
            unavailable,
            errors: k6
                .requests
                .saturating_sub(accepted + conflicts + unavailable),
            dropped: k6.dropped,
            total: count(result.total_count),
            issue_rows: count(result.issue_rows),
            over_issued: count(result.over_issued),
            duplicates: count(result.duplicate_members),
            out_of_turn: result.requests.fairness.served_after_earlier_sold_out,
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

pub fn markdown(title: &str, description: &str, rows: &[Row], provenance: &Provenance) -> String {
    let mut out = format!("# {title}\n\n{description}\n\n![chart](chart.svg)\n\n");
    let headings: Vec<&str> = FIGURES.iter().map(|figure| figure.heading).collect();
    let body = rows.iter().map(|r| {
        let cells: Vec<String> = FIGURES.iter().map(|figure| figure.cell(r)).collect();
        (r.method.clone(), cells)
    });
    Table::of_methods("summary", headings, body).markdown(&mut out);
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

/// A figure of a table: its column heading, and how it is written.
pub type Column<T> = (&'static str, fn(&T) -> String);

/// The verification figures the runner records per method, in the order
/// shown.
const VERIFICATION: [Column<Verification>; 10] = [
    ("acked but lost", |v| v.acked_but_lost.to_string()),
    ("issued but refused", |v| v.issued_but_refused.to_string()),
    ("outcome unknown (issued)", |v| {
        format!("{} ({})", v.outcome_unknown, v.outcome_unknown_issued)
    }),
    ("stranded stock", |v| v.stranded_stock.to_string()),
    ("sellable twice", |v| v.sellable_twice.to_string()),
    ("over-issued", |v| v.over_issued.to_string()),
    ("duplicates", |v| v.duplicates.to_string()),
    ("out of turn", |v| v.out_of_turn.to_string()),
    ("reservations lost (re-reserved)", |v| {
        format!("{} ({})", v.reservations_lost, v.re_reserved)
    }),
    ("verdict", |v| v.verdict.clone()),
];

/// The verified methods' figures, a row each.
pub fn verification_rows(rows: &[Row]) -> Table<'static> {
    let body = rows.iter().filter_map(|row| {
        let v = row.verification.as_ref()?;
        let cells = VERIFICATION.iter().map(|(_, figure)| figure(v)).collect();
        Some((row.method.clone(), cells))
    });
    let headings = VERIFICATION.iter().map(|(heading, _)| *heading).collect();
    Table::of_methods("verification", headings, body)
}

/// What every client was told against what the database and Redis hold.
fn verification_table(out: &mut String, rows: &[Row]) {
    if rows.iter().all(|row| row.verification.is_none()) {
        return;
    }
    out.push_str(
        "\n## Verification\n\nEach client's answer (k6's record of every request, `requests-<METHOD>.csv`) \
         joined with the issue rows and the Redis stock, read directly after the drain.\n\n",
    );
    verification_rows(rows).markdown(out);
    out.push_str(
        "\n*Acked but lost*: told 2xx, no issue row. *Issued but refused*: has a row, but was told \
         a failure, timed out or got no answer. *Outcome unknown*: told that the answer to its COMMIT \
         or script was lost and the server settles it later (in brackets: those that hold a row). *Stranded stock*: the coupon answered SOLD_OUT while \
         once nothing moves Redis holds reservations no call will confirm (the total less the rows less what Redis would still sell). *Reservations lost*: told 2xx, and Redis's primary holds no reservation for them after the drain (a failover promoted a replica the reservation had not reached); in brackets, those who passed Redis's check again.\n",
    );
}

/// The faults, the commit, the command and the versions behind the figures.
fn reproduction(out: &mut String, provenance: &Provenance) {
    if !provenance.faults.is_empty() {
        out.push_str("\n## Faults\n\n");
        for fault in &provenance.faults {
            let _ = writeln!(out, "- {fault}");
        }
    }
    let _ = write!(
        out,
        "\n## Reproduce\n\n```sh\n{}\n```\n\n{}\n",
        shown(&provenance.command),
        provenance.environment()
    );
}

/// What results.json's `provenance` says of how the figures came about;
/// what it leaves out reads as unknown.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Provenance {
    pub command: Option<String>,
    pub commit: Option<String>,
    pub cores: Option<u64>,
    pub seeds: Option<String>,
    pub versions: Versions,
    /// The faults that fired, one line each.
    pub faults: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Versions {
    pub redis: Option<String>,
    pub database: Option<String>,
    pub k6: Option<String>,
    pub rust: Option<String>,
}

impl Provenance {
    /// The provenance as the runner wrote it; one of another shape is
    /// refused by the name of the field that differs.
    pub fn read(value: &Value) -> anyhow::Result<Provenance> {
        if value.is_null() {
            return Ok(Provenance::default());
        }
        Provenance::deserialize(value).context("an unreadable provenance")
    }

    /// The commit, versions, cores and seeds, as one sentence.
    pub fn environment(&self) -> String {
        let versions = &self.versions;
        format!(
            "commit {}; Redis {}, database {}, {}, {}; {} cores; seeds: {}.",
            shown(&self.commit),
            shown(&versions.redis),
            shown(&versions.database),
            shown(&versions.k6),
            shown(&versions.rust),
            self.cores
                .map_or("unknown".to_string(), |cores| cores.to_string()),
            shown(&self.seeds),
        )
    }
}

/// A figure of the provenance as the report writes it.
pub fn shown(text: &Option<String>) -> &str {
    text.as_deref().unwrap_or("unknown")
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
    let read_provenance = Provenance::read(provenance)?;
    std::fs::write(
        dir.join("report.md"),
        markdown(title, description, rows, &read_provenance),
    )?;
    std::fs::write(dir.join("chart.svg"), svg(rows))?;
    let mut methods = methods.clone();
    distribution::enrich(dir, &mut methods)?;
    let entries = methods
        .iter()
        .map(|(method, value)| Ok((method.clone(), Entry::read(method, value)?)))
        .collect::<anyhow::Result<BTreeMap<String, Entry>>>()?;
    std::fs::write(
        dir.join("report.html"),
        html::render(title, description, rows, &entries, &read_provenance),
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
pub(crate) mod tests {
    use serde_json::json;

    use super::*;

    /// A coupon's result as the lab serves it: a total of 100, the rows
    /// given, and `by_outcome` as its requests' outcomes.
    pub fn result(issue_rows: i64, by_outcome: Value) -> Value {
        json!({
            "couponId": 7, "name": "loadtest", "engine": { "name": "mariadb", "version": "11.8.3", "settings": {} },
            "totalCount": 100, "issuedCount": issue_rows, "issueRows": issue_rows,
            "distinctMembers": issue_rows, "overIssued": (issue_rows - 100).max(0),
            "duplicateMembers": 0, "countMismatch": 0,
            "invariants": { "neverOverIssued": issue_rows <= 100, "onePerMember": true, "countMatchesRows": true },
            "requests": {
                "total": 500, "byOutcome": by_outcome,
                "latencyMs": { "p50": 1.0, "p95": 3.0, "p99": 4.0, "max": 7.5 },
                "fairness": { "firstSoldOutArrivalUs": null, "servedAfterEarlierSoldOut": 4 },
                "byMethod": {}, "hosts": { "merged": [], "gatePermits": 0 },
            },
            "anomalies": [],
        })
    }

    /// k6's figures of a run of 500 requests.
    pub fn k6() -> Value {
        json!({
            "method": "REDIS_LUA", "mode": "spike", "requests": 500, "requestsPerSecond": 250.0, "loadMs": 2000,
            "latencyMs": { "p50": 2.0, "p95": 8.0, "p99": 9.5, "max": 20.0 },
            "statuses": { "200": 100, "409": 390, "503": 7, "0": 3 }, "dropped": 1,
        })
    }

    /// A method's entry in results.json, as a run writes it.
    pub fn entry(coupon_id: u64, by_outcome: Value) -> Value {
        json!({ "couponId": coupon_id, "k6": k6(), "result": result(103, by_outcome) })
    }

    fn row(method: &str) -> Row {
        let k6 = k6::Figures::read(&k6()).unwrap();
        let result = <CouponResult>::deserialize(result(103, json!({}))).unwrap();
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
