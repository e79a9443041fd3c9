//! The lab's anomaly names against what the engine allows: every anomaly a
//! method's traces witness at an isolation level is one the engine shows at
//! that level in the Hermitage case behind it — the case run on the same
//! engine as the lab, when the test runs, not read from a table.

use std::collections::BTreeSet;

use serde_json::Value;

use super::cases;
use super::session::{self, Engine, Run};
use crate::common::Setup;

/// The database methods, one per level the lab's SQL components use.
const METHODS: [&str; 4] = [
    "READ_COMMITTED",
    "REPEATABLE_READ",
    "SERIALIZABLE",
    "PESSIMISTIC",
];

/// The levels those methods run at.
const LEVELS: [&str; 3] = ["READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"];

/// The Hermitage case behind each anomaly the lab names that an isolation
/// level can allow or prevent. A lost update (Adya's G-single: the stale
/// reader's write lands on the one it missed) is Hermitage's P4.
const CASES_OF: [(&str, &str); 1] = [("lost-update", "P4")];

/// `(kind, level)` of every witness with an isolation level in `result`.
fn witnessed(result: &Value) -> BTreeSet<(String, String)> {
    let mut found = BTreeSet::new();
    for anomaly in result["anomalies"].as_array().expect("anomalies") {
        let kind = anomaly["kind"].as_str().expect("a kind");
        for witness in anomaly["witnesses"].as_array().expect("witnesses") {
            if let Some(level) = witness["isolation"].as_str() {
                found.insert((kind.to_string(), level.to_string()));
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_lab_names_only_anomalies_the_engine_allows_at_the_witnesses_level() {
    agrees_with(Engine::MariaDb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_postgres_the_lab_names_only_anomalies_postgres_allows_at_the_witnesses_level() {
    agrees_with(Engine::Postgres).await;
}

/// Runs the database methods on a lab of `engine`, then each anomaly they
/// witnessed through its Hermitage case on the same engine.
async fn agrees_with(engine: Engine) {
    let setup = Setup::with(&[
        "read_committed",
        "repeatable_read",
        "serializable",
        "pessimistic",
    ]);
    let lab = match engine {
        Engine::Postgres => setup.on_postgres(),
        _ => setup,
    }
    .start()
    .await;
    let members = lab.members(300).await;
    let mut found = BTreeSet::new();
    for method in METHODS {
        let coupon = lab.coupon(40).await;
        lab.issue_all(coupon, &members, method).await;
        found.extend(witnessed(&lab.result(coupon).await));
    }
    // Stage 1's lesson, so the check below has something to check.
    let read_committed = ("lost-update".to_string(), "READ COMMITTED".to_string());
    assert!(found.contains(&read_committed), "{found:?}");

    for (kind, level) in &found {
        let cased = CASES_OF.iter().any(|(named, _)| named == kind);
        assert!(
            !cased || LEVELS.contains(&level.as_str()),
            "{kind} at {level}: a level not checked"
        );
    }

    session::create_database(engine).await;
    let mut table = Vec::new();
    for level in LEVELS {
        for (kind, case) in CASES_OF {
            let mut run = Run::start_as("agreement", engine, level, case).await;
            let verdict = cases::run(case, &mut run).await;
            run.finish().await;
            let named = found.contains(&(kind.to_string(), level.to_string()));
            table.push(format!(
                "{level}: {case} {}, the lab witnessed {kind}: {named}",
                verdict.cell()
            ));
            assert!(
                !(named && verdict.prevented),
                "the lab names {kind} at {level}, which {engine:?} prevents there (Hermitage's {case}: {})",
                verdict.cell()
            );
        }
    }
    println!("{}", table.join("\n"));
    lab.finish().await;
}
