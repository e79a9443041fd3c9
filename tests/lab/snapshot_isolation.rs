//! MariaDB with `innodb_snapshot_isolation` on for the components'
//! sessions (`COUPONLAB_SNAPSHOT_ISOLATION=on`): REPEATABLE READ refuses a
//! write to a row changed since its snapshot (error 1020) instead of
//! losing the update, and the lab answers it as a serialization failure,
//! a refusal the canary judges and the result does not call an anomaly.

use std::collections::BTreeMap;

use couponlab::config::CanaryMode;
use couponlab::runtime::sql::user::Switch;

use crate::canary::served;
use crate::common::{Setup, outcome};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeatable_read_under_snapshot_isolation_refuses_instead_of_over_issuing() {
    let lab = Setup::with(&["repeatable_read"])
        .tune(|config| {
            config.canary = CanaryMode::Changed;
            config.capabilities.sql.snapshot_isolation = Some(Switch::On);
        })
        .start()
        .await;
    let strategies = lab.proved().await;
    assert!(
        served(&strategies, "REPEATABLE_READ").is_some(),
        "the canary refused it: {strategies}"
    );
    assert_eq!(
        strategies["engine"]["settings"]["innodb_snapshot_isolation"],
        "ON"
    );

    let (members, coupon) = lab.members_and_coupon(300, 40).await;
    let replies = lab.issue_all(coupon, &members, "REPEATABLE_READ").await;
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    for reply in &replies {
        let name = outcome(reply);
        let status = match name.as_str() {
            "ISSUED" => 200,
            "SOLD_OUT" => 409,
            "SERIALIZATION_FAILURE" => 503,
            other => panic!("unexpected outcome {other}: {}", reply.body),
        };
        assert_eq!(reply.status.as_u16(), status, "{}", reply.body);
        *outcomes.entry(name).or_default() += 1;
    }
    let issued = outcomes.get("ISSUED").copied().unwrap_or(0);
    let refused = outcomes.get("SERIALIZATION_FAILURE").copied().unwrap_or(0);
    assert!(refused > 0, "no stale write was refused: {outcomes:?}");
    // Every issued answer is one row, and no more rows than the total.
    assert_eq!(lab.issue_rows(coupon).await, issued, "{outcomes:?}");
    assert!(issued <= 40, "over-issued: {outcomes:?}");
    let result = lab.result(coupon).await;
    assert_eq!(result["overIssued"], 0, "{result}");
    assert_eq!(result["engine"]["name"], "mariadb");
    // A refusal is no anomaly; who was served before whom (out-of-turn)
    // is fairness, which no level promises.
    let kinds: Vec<&str> = result["anomalies"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|anomaly| anomaly["kind"].as_str())
        .filter(|kind| *kind != "out-of-turn")
        .collect();
    assert!(kinds.is_empty(), "anomalies besides fairness: {result}");
    println!("REPEATABLE_READ under snapshot isolation, 300 members on 40: {outcomes:?}");
    lab.finish().await;
}
