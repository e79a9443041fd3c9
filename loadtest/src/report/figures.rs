//! The figures of a report's table, shared by report.md, report.html and
//! results.json: each a heading, how it is read off a row, and how it is
//! written — as the median with its range (`12.5 (11.0–14.2)`) when the
//! row combines the rounds of `--rounds N`.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::Row;
use crate::spread::Spread;

/// One figure of the table.
pub struct Figure {
    pub heading: &'static str,
    /// `None`: the row has no such figure (the drain of a synchronous
    /// method).
    pub value: fn(&Row) -> Option<f64>,
    pub decimals: usize,
}

/// Each figure's range over a method's rounds, by heading.
pub type Ranges = BTreeMap<&'static str, Spread<f64>>;

const fn figure(heading: &'static str, value: fn(&Row) -> Option<f64>, decimals: usize) -> Figure {
    Figure {
        heading,
        value,
        decimals,
    }
}

/// The table's figures, in its order.
pub const FIGURES: [Figure; 15] = [
    figure("requests", |r| Some(r.requests as f64), 0),
    figure("req/s", |r| Some(r.requests_per_second), 0),
    figure("p50 ms", |r| Some(r.p50_ms), 1),
    figure("p99 ms", |r| Some(r.p99_ms), 1),
    figure("2xx", |r| Some(r.accepted as f64), 0),
    figure("409", |r| Some(r.conflicts as f64), 0),
    figure("503", |r| Some(r.unavailable as f64), 0),
    figure("errors", |r| Some(r.errors as f64), 0),
    figure("dropped", |r| Some(r.dropped as f64), 0),
    figure("total", |r| Some(r.total as f64), 0),
    figure("rows", |r| Some(r.issue_rows as f64), 0),
    figure("over-issued", |r| Some(r.over_issued as f64), 0),
    figure("duplicates", |r| Some(r.duplicates as f64), 0),
    figure("out of turn", |r| Some(r.out_of_turn as f64), 0),
    figure("drain ms", |r| r.drain_ms, 0),
];

impl Figure {
    /// The figure as the table writes it: `—` when the row has none, the
    /// median and its range when the row combines rounds.
    pub fn cell(&self, row: &Row) -> String {
        let show = |value: f64| format!("{value:.*}", self.decimals);
        match (row.ranges.get(self.heading), (self.value)(row)) {
            (Some(range), _) => range.show(show),
            (None, Some(value)) => show(value),
            (None, None) => "—".to_string(),
        }
    }
}

/// One method's rounds as one row: each figure the median of the rounds
/// that have it, with its range; the verification and the anomalies those
/// of round `detail` (the one that broke the most, for the report to show).
pub fn combined(rounds: &[Row], detail: usize) -> Row {
    let spread = |value: &dyn Fn(&Row) -> Option<f64>| Spread::of(rounds.iter().filter_map(value));
    let median =
        |value: fn(&Row) -> u64| spread(&|r| Some(value(r) as f64)).map_or(0, |s| s.median as u64);
    let median_f64 = |value: fn(&Row) -> f64| spread(&|r| Some(value(r))).map_or(0.0, |s| s.median);
    let shown = &rounds[detail];
    Row {
        method: shown.method.clone(),
        requests: median(|r| r.requests),
        requests_per_second: median_f64(|r| r.requests_per_second),
        p50_ms: median_f64(|r| r.p50_ms),
        p99_ms: median_f64(|r| r.p99_ms),
        accepted: median(|r| r.accepted),
        conflicts: median(|r| r.conflicts),
        unavailable: median(|r| r.unavailable),
        errors: median(|r| r.errors),
        dropped: median(|r| r.dropped),
        total: median(|r| r.total),
        issue_rows: median(|r| r.issue_rows),
        over_issued: median(|r| r.over_issued),
        duplicates: median(|r| r.duplicates),
        out_of_turn: median(|r| r.out_of_turn),
        drain_ms: spread(&|r| r.drain_ms).map(|s| s.median),
        verification: shown.verification.clone(),
        why: shown.why.clone(),
        ranges: FIGURES
            .iter()
            .filter_map(|figure| Some((figure.heading, spread(&figure.value)?)))
            .collect(),
    }
}

/// Each figure's median and range, for results.json.
pub fn spreads_json(row: &Row) -> Value {
    let spreads: serde_json::Map<String, Value> = row
        .ranges
        .iter()
        .map(|(heading, s)| {
            let spread = json!({ "median": s.median, "min": s.min, "max": s.max });
            (heading.to_string(), spread)
        })
        .collect();
    Value::Object(spreads)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_combine_into_medians_with_their_ranges() {
        let round = |p99: f64, rows: u64, drain: Option<f64>| Row {
            method: "REDIS_LUA".into(),
            p99_ms: p99,
            issue_rows: rows,
            drain_ms: drain,
            ..Row::default()
        };
        let rounds = [
            round(9.0, 100, Some(30.0)),
            round(12.0, 103, None),
            round(10.0, 101, Some(10.0)),
        ];
        let row = combined(&rounds, 1);
        assert_eq!((row.p99_ms, row.issue_rows), (10.0, 101));
        assert_eq!(FIGURES[3].cell(&row), "10.0 (9.0–12.0)");
        assert_eq!(FIGURES[10].cell(&row), "101 (100–103)");
        // The drain of the two rounds that have one: their mean.
        assert_eq!(FIGURES[14].cell(&row), "20 (10–30)");
        assert_eq!(
            spreads_json(&row)["rows"],
            json!({ "median": 101.0, "min": 100.0, "max": 103.0 })
        );
        // One run: plain figures, a dash for what it lacks.
        assert_eq!(FIGURES[3].cell(&rounds[1]), "12.0");
        assert_eq!(FIGURES[14].cell(&rounds[1]), "—");
    }
}
