//! The report's "why" section: the anomalies each method's result named,
//! with one explanation each, what the database refused instead (an engine
//! that prevents an anomaly refuses a transaction), and one example trace
//! per method — the
//! capability calls of a request, as `GET /lab/coupons/{id}/traces`
//! answers them (an anomaly's witness when there is one).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use couponlab_contract::results::CouponResult;
use serde::Deserialize;
use serde_json::Value;

use super::Row;
use super::markup::{Table, esc};

/// What one method's run says about why.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Why {
    /// By kind: how many, and the first one's explanation.
    pub anomalies: BTreeMap<String, (u64, String)>,
    /// The database's refusals, by outcome: how many.
    pub refusals: BTreeMap<String, u64>,
    /// One request's trace, as the lab's traces route answered it (and
    /// results.json keeps it).
    pub example: Option<Value>,
    /// On the Galera cluster: each node's refusals over the run.
    pub cluster: Option<Vec<crate::galera::NodeConflicts>>,
}

/// A request's trace, as far as the report shows it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Trace {
    member_id: u64,
    outcome: String,
    duration_us: u64,
    kept: String,
    pub calls: Vec<Call>,
}

/// One capability call of a trace.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Call {
    /// `redis`, `sql`, `named-lock`, ...
    pub capability: String,
    op: String,
    target: Option<String>,
    rows: Option<u64>,
    #[serde(default)]
    read: BTreeMap<String, i64>,
    isolation: Option<String>,
    reply: String,
    start_us: u64,
    duration_us: u64,
}

impl Why {
    /// The anomalies a coupon's result lists.
    pub fn of(result: &CouponResult) -> Why {
        let mut anomalies: BTreeMap<String, (u64, String)> = BTreeMap::new();
        for anomaly in &result.anomalies {
            let explanation = anomaly.explanation.clone();
            anomalies
                .entry(anomaly.kind.clone())
                .or_insert((0, explanation))
                .0 += 1;
        }
        let refusals = REFUSALS
            .iter()
            .filter_map(|(outcome, _)| {
                let count = result.requests.answered(outcome);
                (count > 0).then(|| (outcome.to_string(), count))
            })
            .collect();
        Why {
            anomalies,
            refusals,
            example: None,
            cluster: None,
        }
    }

    /// The query that finds the example: a witness of the first anomaly
    /// kind met, else a request the database refused, else a served
    /// request, else any.
    pub fn example_queries(&self) -> Vec<String> {
        let mut queries: Vec<String> = self
            .anomalies
            .keys()
            .map(|kind| format!("anomaly={kind}&limit=1"))
            .chain(
                self.refusals
                    .keys()
                    .map(|outcome| format!("outcome={outcome}&limit=1")),
            )
            .collect();
        queries.extend(
            [
                "outcome=ISSUED&limit=1",
                "outcome=ACCEPTED&limit=1",
                "limit=1",
            ]
            .map(String::from),
        );
        queries
    }
}

/// The outcomes of a transaction the database refused, each with what it
/// means.
const REFUSALS: [(&str, &str); 3] = [
    (
        "SERIALIZATION_FAILURE",
        "the engine refused a transaction a concurrent one changed the reads of",
    ),
    (
        "DEADLOCK",
        "the engine chose the transaction as a deadlock victim",
    ),
    ("LOCK_WAIT_TIMEOUT", "a row lock was not granted in time"),
];

/// The refusals of `why`, one sentence each.
fn refused(why: &Why) -> Vec<String> {
    REFUSALS
        .iter()
        .filter_map(|(outcome, meaning)| {
            let count = why.refusals.get(*outcome)?;
            Some(format!("{outcome} × {count}: {meaning}"))
        })
        .collect()
}

/// A trace's calls, one line each: when (µs from the call's start), how
/// long, what.
fn calls(trace: &Trace) -> Vec<[String; 3]> {
    trace
        .calls
        .iter()
        .map(|call| {
            let mut what = format!("{} {}", call.capability, call.op);
            if let Some(target) = &call.target {
                let _ = write!(what, " {target}");
            }
            match call.rows {
                Some(1) => what.push_str(", 1 row"),
                Some(rows) => {
                    let _ = write!(what, ", {rows} rows");
                }
                None => {}
            }
            for (name, value) in &call.read {
                let _ = write!(what, ", {name} = {value}");
            }
            if let Some(isolation) = &call.isolation {
                let _ = write!(what, " ({isolation})");
            }
            if call.reply != "ok" {
                let _ = write!(what, " → {}", call.reply);
            }
            [
                call.start_us.to_string(),
                call.duration_us.to_string(),
                what,
            ]
        })
        .collect()
}

/// A trace's calls as a table, a call a row.
fn calls_table(trace: &Trace) -> Table<'static> {
    let rows = calls(trace)
        .into_iter()
        .map(|[start, took, what]| (start, vec![took, what]))
        .collect();
    Table {
        id: None,
        first: "start µs",
        headings: vec!["µs", "call"],
        rows,
        row_data: None,
    }
}

fn heading(trace: &Trace) -> String {
    format!(
        "member {} → {} ({} µs, kept as {})",
        trace.member_id, trace.outcome, trace.duration_us, trace.kept
    )
}

/// The example trace of `why`, when it has one the report can read.
fn example(why: &Why) -> Option<Trace> {
    Trace::read(why.example.as_ref()?).ok()
}

impl Trace {
    /// A trace as the lab's traces route answers it; one of another shape
    /// is refused by the field that differs.
    pub fn read(value: &Value) -> anyhow::Result<Trace> {
        Ok(Trace::deserialize(value)?)
    }
}

pub fn markdown(out: &mut String, rows: &[Row]) {
    if rows
        .iter()
        .all(|r| r.why.anomalies.is_empty() && r.why.example.is_none())
    {
        return;
    }
    out.push_str(
        "\n## Why\n\nThe anomalies each method's result named, from the server's request traces \
         (`anomalies` in `result-<METHOD>` of results.json), what the database refused instead, \
         and one request's capability calls.\n",
    );
    for row in rows {
        let _ = writeln!(out, "\n### {}\n", row.method);
        if row.why.anomalies.is_empty() {
            out.push_str("No anomaly.\n");
        }
        for (kind, (count, explanation)) in &row.why.anomalies {
            let _ = writeln!(out, "- **{kind}** × {count}: e.g. {explanation}");
        }
        for refusal in refused(&row.why) {
            let _ = writeln!(out, "- refused: {refusal}");
        }
        super::galera::markdown(out, row.why.cluster.as_deref());
        if let Some(trace) = example(&row.why) {
            let _ = writeln!(out, "\nExample: {}\n", heading(&trace));
            calls_table(&trace).markdown(out);
        }
    }
}

pub fn html(out: &mut String, rows: &[Row]) {
    if rows
        .iter()
        .all(|r| r.why.anomalies.is_empty() && r.why.example.is_none())
    {
        return;
    }
    out.push_str("<h2 id=\"why\">Why</h2>\n<p class=\"note\">The anomalies each method's result named, from the server's request traces, what the database refused instead, and one request's capability calls.</p>\n");
    for row in rows {
        let _ = writeln!(out, "<h3>{}</h3>\n<ul>", esc(&row.method));
        if row.why.anomalies.is_empty() {
            out.push_str("<li>No anomaly.</li>\n");
        }
        for (kind, (count, explanation)) in &row.why.anomalies {
            let _ = writeln!(
                out,
                "<li><strong>{}</strong> × {count}: e.g. {}</li>",
                esc(kind),
                esc(explanation)
            );
        }
        for refusal in refused(&row.why) {
            let _ = writeln!(out, "<li>refused: {}</li>", esc(&refusal));
        }
        super::galera::html(out, row.why.cluster.as_deref());
        out.push_str("</ul>\n");
        if let Some(trace) = example(&row.why) {
            let _ = writeln!(out, "<p>Example: {}</p>", esc(&heading(&trace)));
            calls_table(&trace).html(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::report::tests::{k6, result};

    #[test]
    fn anomalies_are_counted_by_kind_and_a_trace_is_listed_call_by_call() {
        let mut served = result(50, json!({ "ISSUED": 50, "DEADLOCK": 3 }));
        served["anomalies"] = json!([
            { "kind": "lost-update", "explanation": "member 3 read issued_count = 4", "witnesses": [] },
            { "kind": "lost-update", "explanation": "member 9 read issued_count = 4", "witnesses": [] },
            { "kind": "out-of-turn", "explanation": "member 1 was refused", "witnesses": [] },
        ]);
        let served = <CouponResult>::deserialize(&served).unwrap();
        let mut why = Why::of(&served);
        assert_eq!(
            why.anomalies["lost-update"],
            (2, "member 3 read issued_count = 4".into())
        );
        assert_eq!(why.example_queries()[0], "anomaly=lost-update&limit=1");
        assert_eq!(why.refusals, BTreeMap::from([("DEADLOCK".to_string(), 3)]));
        assert_eq!(why.example_queries()[2], "outcome=DEADLOCK&limit=1");
        why.example = Some(json!({
            "memberId": 3, "outcome": "ISSUED", "durationUs": 900, "kept": "served",
            "calls": [
                { "capability": "sql", "op": "SELECT", "target": "coupons", "read": { "issued_count": 4 },
                  "isolation": "READ COMMITTED", "reply": "ok", "startUs": 10, "durationUs": 200 },
                { "capability": "sql", "op": "COMMIT", "reply": "deadlock", "startUs": 500, "durationUs": 90 },
            ],
        }));
        let k6 = crate::k6::Figures::read(&k6()).unwrap();
        let mut row = Row::from("READ_COMMITTED", &k6, &served, None, None);
        row.why = why;
        let mut out = String::new();
        markdown(&mut out, &[row.clone()]);
        assert!(out.contains("**lost-update** × 2"), "{out}");
        assert!(
            out.contains(
                "- refused: DEADLOCK × 3: the engine chose the transaction as a deadlock victim"
            ),
            "{out}"
        );
        assert!(
            out.contains("| 10 | 200 | sql SELECT coupons, issued_count = 4 (READ COMMITTED) |"),
            "{out}"
        );
        assert!(
            out.contains("| 500 | 90 | sql COMMIT → deadlock |"),
            "{out}"
        );
        let mut page = String::new();
        html(&mut page, &[row]);
        assert!(page.contains("<h2 id=\"why\">Why</h2>"));
        assert!(page.contains("sql COMMIT → deadlock"));
    }
}
