//! The WIT capabilities end to end, through the TEST_PROBE component: reply
//! nesting, rollback of a dropped transaction, typed SQL errors.

use serde_json::Value;

use crate::common::{Setup, TestLab};

pub(crate) async fn probe(lab: &TestLab, scenario: &str, a: u64, b: u64) -> String {
    let reply = lab.issue_keyed(a, b, "TEST_PROBE", scenario).await;
    match &reply.expect_ok()["detail"] {
        Value::String(detail) => detail.clone(),
        other => panic!("no detail: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_and_lua_table_replies_keep_their_nesting() {
    let lab = Setup::with(&["test_probe"]).start().await;
    let coupon = lab.coupon(1).await;
    assert_eq!(
        probe(&lab, "exec", coupon, 1).await,
        r#"[OK, 1, 2, ["1", "2"]]"#
    );
    assert_eq!(
        probe(&lab, "lua-table", coupon, 1).await,
        r#"[1, "two", [3, ["four"]], FINE, nil]"#
    );
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_transaction_rolls_back() {
    let lab = Setup::with(&["test_probe"]).start().await;
    let member = lab.members(1).await[0];
    assert_eq!(
        probe(&lab, "tx-drop", 77, member).await,
        "rows after drop: 0"
    );
    assert_eq!(lab.issue_rows(77).await, 0);
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_errors_arrive_as_their_typed_cases() {
    let lab = Setup::with(&["test_probe"])
        .tune(|c| c.capabilities.sql.lock_wait_timeout_s = 1)
        .start()
        .await;
    let members = lab.members(1).await;
    let (first, second) = (lab.coupon(1).await, lab.coupon(1).await);

    assert_eq!(
        probe(&lab, "duplicate-key", first, members[0]).await,
        "duplicate-key"
    );
    assert_eq!(
        probe(&lab, "foreign-key", first, 999_999_999).await,
        "foreign-key"
    );
    assert_eq!(
        probe(&lab, "lock-wait", first, 1).await,
        "lock-wait-timeout"
    );

    // Two requests lock the two coupons in opposite orders: InnoDB picks one
    // as the deadlock victim and lets the other commit.
    let (one, two) = tokio::join!(
        probe(&lab, "deadlock", first, second),
        probe(&lab, "deadlock", second, first)
    );
    let mut seen = [one, two];
    seen.sort();
    assert_eq!(seen, ["committed".to_string(), "deadlock".to_string()]);
    lab.finish().await;
}

/// A write to a row changed since the transaction's snapshot: MariaDB's
/// REPEATABLE READ loses the other update by default, and refuses the
/// write with a serialization failure once the lab turns
/// `innodb_snapshot_isolation` on for components' sessions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_write_is_a_serialization_failure_under_snapshot_isolation() {
    use couponlab::runtime::sql::user::Switch;
    for (switch, engine, stale_write) in [
        (
            Switch::Off,
            "mariadb innodb_snapshot_isolation=OFF",
            "committed",
        ),
        (
            Switch::On,
            "mariadb innodb_snapshot_isolation=ON",
            "serialization-failure",
        ),
    ] {
        let lab = Setup::with(&["test_probe"])
            .tune(move |c| c.capabilities.sql.snapshot_isolation = Some(switch))
            .start()
            .await;
        let coupon = lab.coupon(1).await;
        assert_eq!(probe(&lab, "engine", coupon, 1).await, engine);
        assert_eq!(probe(&lab, "stale-write", coupon, 1).await, stale_write);
        lab.finish().await;
    }
}
