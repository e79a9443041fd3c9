//! The report's "why" section: the anomalies each method's result named,
//! with one explanation each, what the database refused instead (an engine
//! that prevents an anomaly refuses a transaction), and one example trace
//! per method — the
//! capability calls of a request, as `GET /lab/coupons/{id}/traces`
//! answers them (an anomaly's witness when there is one).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

use super::Row;
use super::markup::esc;

/// What one method's run says about why.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Why {
    /// By kind: how many, and the first one's explanation.
    pub anomalies: BTreeMap<String, (u64, String)>,
    /// The database's refusals, by outcome: how many.
    pub refusals: BTreeMap<String, u64>,
    /// One request's trace.
    pub example: Option<Value>,
}

impl Why {
    /// The anomalies a coupon's result lists.
    pub fn of(result: &Value) -> Why {
        let mut anomalies: BTreeMap<String, (u64, String)> = BTreeMap::new();
        for anomaly in result["anomalies"].as_array().into_iter().flatten() {
            let kind = anomaly["kind"].as_str().unwrap_or("unknown").to_string();
            let explanation = anomaly["explanation"].as_str().unwrap_or("").to_string();
            anomalies.entry(kind).or_insert((0, explanation)).0 += 1;
        }
        let refusals = REFUSALS
            .iter()
            .filter_map(|(outcome, _)| {
                let count = result["requests"]["byOutcome"][outcome].as_u64()?;
                (count > 0).then(|| (outcome.to_string(), count))
            })
            .collect();
        Why {
            anomalies,
            refusals,
            example: None,
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
fn calls(trace: &Value) -> Vec<[String; 3]> {
    trace["calls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|call| {
            let mut what = format!(
                "{} {}",
                call["capability"].as_str().unwrap_or(""),
                call["op"].as_str().unwrap_or("")
            );
            if let Some(target) = call["target"].as_str() {
                let _ = write!(what, " {target}");
            }
            match call["rows"].as_u64() {
                Some(1) => what.push_str(", 1 row"),
                Some(rows) => {
                    let _ = write!(what, ", {rows} rows");
                }
                None => {}
            }
            if let Some(read) = call["read"].as_object() {
                for (name, value) in read {
                    let _ = write!(what, ", {name} = {value}");
                }
            }
            if let Some(isolation) = call["isolation"].as_str() {
                let _ = write!(what, " ({isolation})");
            }
            match call["reply"].as_str() {
                Some("ok") | None => {}
                Some(reply) => {
                    let _ = write!(what, " → {reply}");
                }
            }
            [
                call["startUs"].to_string(),
                call["durationUs"].to_string(),
                what,
            ]
        })
        .collect()
}

fn heading(trace: &Value) -> String {
    format!(
        "member {} → {} ({} µs, kept as {})",
        trace["memberId"],
        trace["outcome"].as_str().unwrap_or("?"),
        trace["durationUs"],
        trace["kept"].as_str().unwrap_or("?")
    )
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
        if let Some(trace) = &row.why.example {
            let _ = writeln!(
                out,
                "\nExample: {}\n\n| start µs | µs | call |\n|---:|---:|---|",
                heading(trace)
            );
            for [start, took, what] in calls(trace) {
                let _ = writeln!(out, "| {start} | {took} | {what} |");
            }
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
        out.push_str("</ul>\n");
        if let Some(trace) = &row.why.example {
            let _ = writeln!(
                out,
                "<p>Example: {}</p>\n<div class=\"scroll\"><table class=\"trace\"><thead><tr><th class=\"num\">start µs</th><th class=\"num\">µs</th><th>call</th></tr></thead><tbody>",
                esc(&heading(trace))
            );
            for [start, took, what] in calls(trace) {
                let _ = writeln!(
                    out,
                    "<tr><td class=\"num\">{start}</td><td class=\"num\">{took}</td><td>{}</td></tr>",
                    esc(&what)
                );
            }
            out.push_str("</tbody></table></div>\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn anomalies_are_counted_by_kind_and_a_trace_is_listed_call_by_call() {
        let result = json!({ "anomalies": [
            { "kind": "lost-update", "explanation": "member 3 read issued_count = 4" },
            { "kind": "lost-update", "explanation": "member 9 read issued_count = 4" },
            { "kind": "out-of-turn", "explanation": "member 1 was refused" },
        ], "requests": { "byOutcome": { "ISSUED": 50, "DEADLOCK": 3 } } });
        let mut why = Why::of(&result);
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
        let mut row = Row::from("READ_COMMITTED", &json!({}), &json!({}), None, None);
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
