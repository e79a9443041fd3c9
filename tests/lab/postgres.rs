//! The same components on PostgreSQL (`DATABASE_URL=postgres://…`): each
//! is proved by its canary on the second engine, the methods that claim
//! the invariants keep them under real concurrency, and the lessons that
//! flip between the engines flip here, measured: REPEATABLE READ refuses
//! with a serialization failure where MariaDB loses the update.

use std::collections::BTreeMap;

use couponlab::config::CanaryMode;
use futures::future::join_all;

use crate::canary::served;
use crate::common::{Reply, Setup, TestLab, outcome};

/// The methods whose canary must pass on PostgreSQL, by component.
const SERVED: [(&str, &str); 14] = [
    ("read_committed", "READ_COMMITTED"),
    ("repeatable_read", "REPEATABLE_READ"),
    ("serializable", "SERIALIZABLE"),
    ("pessimistic", "PESSIMISTIC"),
    ("atomic_update", "ATOMIC_UPDATE"),
    ("optimistic", "OPTIMISTIC"),
    ("optimistic_retry", "OPTIMISTIC_RETRY"),
    ("redis_lua", "REDIS_LUA"),
    ("py_redis_lua", "PY_REDIS_LUA"),
    ("js_redis_lua", "JS_REDIS_LUA"),
    ("redis_incr", "REDIS_INCR"),
    ("redis_lua_gate", "REDIS_LUA_GATE"),
    ("redis_stream_atomic", "REDIS_STREAM_ATOMIC"),
    ("mysql_named_lock", "MYSQL_NAMED_LOCK"),
];

/// Of those, the methods that sell out exactly: every unit, never more.
const EXACT: [&str; 9] = [
    "PESSIMISTIC",
    "ATOMIC_UPDATE",
    "REDIS_LUA",
    "PY_REDIS_LUA",
    "JS_REDIS_LUA",
    "REDIS_INCR",
    "REDIS_LUA_GATE",
    "REDIS_STREAM_ATOMIC",
    "MYSQL_NAMED_LOCK",
];

/// 360 requests on a coupon of `total`: 300 members, 60 of them twice, all
/// at once. The replies, and the coupon.
async fn three_hundred_sixty_asks_sixty_twice(
    lab: &TestLab,
    method: &str,
    total: u64,
) -> (Vec<Reply>, u64) {
    let (members, coupon) = lab.members_and_coupon(300, total).await;
    let asks = members.iter().chain(&members[..60]);
    let replies = join_all(asks.map(|&member| lab.issue(coupon, member, method))).await;
    (replies, coupon)
}

/// Each outcome's count among `replies`.
fn counted(replies: &[Reply]) -> BTreeMap<String, usize> {
    let mut outcomes = BTreeMap::new();
    for reply in replies {
        *outcomes.entry(outcome(reply)).or_default() += 1;
    }
    outcomes
}

/// The rows of `coupon` and its distinct members, read from PostgreSQL.
async fn rows_and_members(lab: &TestLab, coupon: u64) -> (i64, i64) {
    let rows = "SELECT COUNT(*) FROM coupon_issues WHERE coupon_id = ?";
    let members = "SELECT COUNT(DISTINCT member_id) FROM coupon_issues WHERE coupon_id = ?";
    (
        lab.number_of(rows, &[coupon]).await,
        lab.number_of(members, &[coupon]).await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_method_is_proved_on_postgres_and_the_exact_ones_sell_out_exactly() {
    let components: Vec<&'static str> = SERVED.iter().map(|(file, _)| *file).collect();
    // A Redis database of its own: the stream method's canary counts who
    // confirmed its 202s, and other tests' consumers on a shared database
    // read the announced streams too.
    let lab = Setup::with(&components)
        .on_postgres()
        .own_redis_db()
        .tune(|config| config.canary = CanaryMode::Changed)
        .start()
        .await;
    let strategies = lab.proved().await;
    assert_eq!(strategies["engine"]["name"], "postgresql", "{strategies}");
    for (_, method) in SERVED {
        assert!(
            served(&strategies, method).is_some(),
            "{method} is not served on PostgreSQL: {strategies}"
        );
    }
    for method in EXACT {
        let (replies, coupon) = three_hundred_sixty_asks_sixty_twice(&lab, method, 40).await;
        let result = lab.result_once_confirmed(coupon, &replies).await;
        let (rows, members) = rows_and_members(&lab, coupon).await;
        println!(
            "{method} on PostgreSQL, 360 requests of 300 members on 40: {:?}",
            counted(&replies)
        );
        assert_eq!(rows, 40, "{method} did not sell out exactly: {result}");
        assert_eq!(
            members, rows,
            "{method} gave a member two coupons: {result}"
        );
        assert_eq!(result["overIssued"], 0, "{method}: {result}");
        assert_eq!(result["engine"]["name"], "postgresql", "{result}");
    }
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn read_committed_over_issues_and_repeatable_read_refuses_instead_on_postgres() {
    let lab = Setup::with(&["read_committed", "repeatable_read", "pessimistic"])
        .on_postgres()
        .start()
        .await;

    let (replies, coupon) = three_hundred_sixty_asks_sixty_twice(&lab, "READ_COMMITTED", 40).await;
    let result = lab.result(coupon).await;
    let (rows, members) = rows_and_members(&lab, coupon).await;
    println!(
        "READ_COMMITTED on PostgreSQL: {:?}, {rows} rows",
        counted(&replies)
    );
    assert!(
        rows > 40,
        "READ COMMITTED kept the total on PostgreSQL: {result}"
    );
    assert_eq!(members, rows, "{result}");
    let kinds: Vec<&str> = result["anomalies"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|anomaly| anomaly["kind"].as_str())
        .collect();
    assert!(
        kinds.contains(&"check-then-act") || kinds.contains(&"lost-update"),
        "the over-issue has no witness: {result}"
    );

    let (replies, coupon) = three_hundred_sixty_asks_sixty_twice(&lab, "REPEATABLE_READ", 40).await;
    let outcomes = counted(&replies);
    let (rows, members) = rows_and_members(&lab, coupon).await;
    println!("REPEATABLE_READ on PostgreSQL: {outcomes:?}, {rows} rows");
    assert!(
        rows <= 40,
        "REPEATABLE READ over-issued on PostgreSQL: {outcomes:?}"
    );
    assert_eq!(members, rows);
    assert!(
        outcomes.get("SERIALIZATION_FAILURE").copied().unwrap_or(0) > 0,
        "no request was refused with a serialization failure: {outcomes:?}"
    );
    for reply in &replies {
        if outcome(reply) == "SERIALIZATION_FAILURE" {
            assert_eq!(reply.status, 503, "{}", reply.body);
        }
    }
    assert_eq!(lab.result(coupon).await["overIssued"], 0);

    // PESSIMISTIC runs at the engine's default level, READ COMMITTED here:
    // the waiters of the row lock read the holder's commit and go on.
    let (replies, coupon) = three_hundred_sixty_asks_sixty_twice(&lab, "PESSIMISTIC", 40).await;
    let (rows, _) = rows_and_members(&lab, coupon).await;
    assert_eq!(rows, 40, "{:?}", counted(&replies));
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_refuses_a_hostile_component_its_own_ways_out() {
    let lab = Setup::with(&["test_hostile"])
        .on_postgres()
        .call_deadline_ms(3_000)
        .start()
        .await;
    let (members, coupon) = lab.members_and_coupon(3, 10).await;
    let tables = "SELECT COUNT(*) FROM pg_tables WHERE schemaname = 'public'";
    let tables_before = lab.number(tables).await;
    let refusals = [
        ("pg-read-file", "may not"),
        ("pg-authid", "may not"),
        ("pg-create-role", "CREATE statements are not allowed"),
        ("pg-terminate", "may not"),
        ("pg-temp-table", "may not"),
        ("raise-total", "may not"),
        ("insert-member", "may not"),
        ("pg-sleep", "statement timeout"),
    ];
    for (attack, word) in refusals {
        let reply = lab
            .issue_keyed(coupon, members[0], "TEST_HOSTILE", attack)
            .await;
        let message = reply.body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(word), "{attack}: {}", reply.body);
    }
    assert_eq!(lab.number(tables).await, tables_before);
    let total = "SELECT total_count FROM coupons WHERE id = ?";
    assert_eq!(lab.number_of(total, &[coupon]).await, 10);
    lab.finish().await;
}
