//! `--rounds N`: each method measured N times, every round of all the
//! methods before the next, so a drift of the shared machine meets them
//! alike. The report gives each figure as the median with its range (the
//! mean of the two middle rounds for an even number); its
//! verification, anomalies and example trace come from the round that
//! broke the most claims (the first when none broke any), and
//! results.json keeps every round.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::report::Row;
use crate::report::figures;
use crate::run::Measured;

/// One method's rounds, in the order they ran.
pub struct MethodRounds {
    pub method: String,
    pub rounds: Vec<Measured>,
}

/// Each method's rounds as the report's row and its results.json entry,
/// in the order given. One round is reported as it is.
pub fn combine(methods: Vec<MethodRounds>) -> (Vec<Row>, BTreeMap<String, Value>) {
    let mut rows = Vec::new();
    let mut raw = BTreeMap::new();
    for MethodRounds { method, mut rounds } in methods {
        if rounds.len() == 1 {
            let measured = rounds.remove(0);
            rows.push(measured.row);
            raw.insert(method, measured.raw);
            continue;
        }
        let detail = most_broken(&rounds);
        let round_rows: Vec<Row> = rounds.iter().map(|m| m.row.clone()).collect();
        rows.push(figures::combined(&round_rows, detail));
        let mut entry = rounds[detail].raw.clone();
        if let Some(entry) = entry.as_object_mut() {
            entry.insert("detailRound".into(), json!(detail + 1));
            let every: Vec<&Value> = rounds.iter().map(|m| &m.raw).collect();
            entry.insert("rounds".into(), json!(every));
        }
        raw.insert(method, entry);
    }
    (rows, raw)
}

/// The round whose verification broke the most of the method's claims;
/// the first of those tied.
fn most_broken(rounds: &[Measured]) -> usize {
    let broken = |m: &Measured| {
        m.row
            .verification
            .as_ref()
            .map_or(0, |v| v.broken_claims(&m.claims).len())
    };
    let most = rounds.iter().map(broken).max().unwrap_or(0);
    rounds.iter().position(|m| broken(m) == most).unwrap_or(0)
}

/// How the report says what its figures are.
pub fn described(rounds: u32) -> String {
    if rounds <= 1 {
        return String::new();
    }
    format!(
        " {rounds} rounds, each of every method in turn: each figure is the median (of an even number of rounds, the mean of the two middle ones), with the lowest and highest round in brackets; the verification, anomalies and trace are those of the round that broke the most claims (the first when none broke any)."
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verification::{Claim, Verification};

    fn measured(p99: f64, lost: u64) -> Measured {
        let verification = Verification {
            acked_but_lost: lost,
            ..Verification::default()
        };
        Measured {
            row: Row {
                method: "REDIS_LUA".into(),
                p99_ms: p99,
                verification: Some(verification),
                ..Row::default()
            },
            raw: json!({ "p99": p99 }),
            claims: vec![Claim::Acked],
        }
    }

    #[test]
    fn rounds_combine_and_the_round_that_broke_the_most_is_shown() {
        let methods = vec![MethodRounds {
            method: "REDIS_LUA".into(),
            rounds: vec![measured(5.0, 0), measured(9.0, 2), measured(7.0, 0)],
        }];
        let (rows, raw) = combine(methods);
        assert_eq!(rows[0].p99_ms, 7.0);
        assert_eq!(rows[0].verification.as_ref().unwrap().acked_but_lost, 2);
        assert_eq!(raw["REDIS_LUA"]["detailRound"], json!(2));
        assert_eq!(raw["REDIS_LUA"]["p99"], json!(9.0));
        assert_eq!(raw["REDIS_LUA"]["rounds"].as_array().unwrap().len(), 3);
        // One round: as it is, no spread.
        let (rows, raw) = combine(vec![MethodRounds {
            method: "REDIS_LUA".into(),
            rounds: vec![measured(5.0, 0)],
        }]);
        assert!(rows[0].ranges.is_empty());
        assert_eq!(raw["REDIS_LUA"], json!({ "p99": 5.0 }));
        assert_eq!(described(1), "");
        assert!(described(3).contains("3 rounds"));
    }
}
