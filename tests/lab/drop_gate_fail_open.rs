//! REDIS_LUA_GATE when its gate cannot be asked (issue 48, seed 000's
//! BE-03): it fails open to the database path when Redis is down, every
//! request takes that path while the drop's switch is off, and the gate is
//! set from the rows before it admits anyone again — after an empty
//! restart, after the switch, and when Redis comes back with a stock the
//! rows moved past. With fail-open off, Redis down is a 503.

use std::collections::BTreeMap;

use couponlab_contract::keys;
use serde_json::{Value, json};

use crate::common::{Reply, Setup, TestLab, assert_invariants_hold, outcome};
use crate::redis_server::{RedisServer, cli};

const METHOD: &str = "REDIS_LUA_GATE";
const COMPONENT: &str = "redis_lua_gate";

/// Every one of `members` asks for the drop at once (keyless: the key is
/// the member's one reservation); how many got each outcome.
async fn ask(lab: &TestLab, coupon: u64, members: &[u64]) -> BTreeMap<String, usize> {
    let replies = lab.issue_all(coupon, members, METHOD).await;
    tally(&replies)
}

fn tally(replies: &[Reply]) -> BTreeMap<String, usize> {
    let mut tally = BTreeMap::new();
    for reply in replies {
        *tally.entry(outcome(reply)).or_insert(0) += 1;
    }
    tally
}

fn counts(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs
        .iter()
        .map(|&(outcome, count)| (outcome.to_string(), count))
        .collect()
}

async fn switch(lab: &TestLab, coupon: u64, enabled: bool) -> Reply {
    lab.post(
        &format!("/lab/drop/coupons/{coupon}/gate"),
        json!({ "enabled": enabled }),
    )
    .await
}

fn gate_figures(result: &Value) -> &Value {
    &result["requests"]["byMethod"][METHOD]
}

/// The gate's key `name` of `coupon` on the test's own Redis.
fn gate_key(port: u16, coupon: u64, name: &str) -> String {
    cli(port, &["GET", &format!("{}{name}", keys::gate(coupon))])
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drop_of_100_sells_exactly_100_across_a_redis_shutdown_and_an_empty_restart() {
    let mut redis = RedisServer::start();
    // Permits for everyone: this case is about the paths, not the buffer.
    let lab = Setup::with(&[COMPONENT])
        .redis_url(redis.url(0))
        .permits(500, 10_000)
        .start()
        .await;
    let (members, coupon) = lab.members_and_coupon(220, 100).await;

    assert_eq!(
        ask(&lab, coupon, &members[..40]).await,
        counts(&[("ISSUED", 40)])
    );
    assert_eq!(gate_key(redis.port, coupon, "remaining"), "60");

    redis.shutdown_nosave();
    // The gate cannot be asked: new members are sold by the database, and
    // members who bought through the gate are refused by their rows.
    let during = lab.issue_all(coupon, &members[40..70], METHOD).await;
    assert_eq!(tally(&during), counts(&[("ISSUED", 30)]));
    let detail = during[0].expect_ok()["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("the gate could not answer"), "{detail}");
    let repeats = lab.issue_all(coupon, &members[..10], METHOD).await;
    for repeat in &repeats {
        repeat.fails_as(409, "DUPLICATE");
    }

    redis.start_again();
    // Exactly what the rows have left, whichever path each request takes
    // while the server sets Redis up again.
    assert_eq!(
        ask(&lab, coupon, &members[70..]).await,
        counts(&[("ISSUED", 30), ("SOLD_OUT", 120)])
    );
    let result = lab.result(coupon).await;
    assert_eq!(result["issueRows"], json!(100), "{result}");
    assert_eq!(result["distinctMembers"], json!(100));
    assert_invariants_hold(&result);
    // The gate came back from the rows: its stock what they left, and
    // every buyer's count theirs — a buyer of the outage is refused by
    // the gate itself.
    assert_eq!(gate_key(redis.port, coupon, "remaining"), "0");
    assert_eq!(
        gate_key(redis.port, coupon, &format!("buyer:{}", members[40])),
        "1"
    );
    let again = lab.issue(coupon, members[40], METHOD).await;
    again.fails_as(409, "DUPLICATE: PER_USER_LIMIT_EXCEEDED");

    let served = &result["servedBy"];
    assert!(served["fallback"].as_u64().unwrap() >= 40, "{result}");
    // Every request was decided by one path or the other: 40, 30, 10
    // repeats and 150.
    assert_eq!(
        served["gate"].as_u64().unwrap() + served["fallback"].as_u64().unwrap(),
        230,
        "{result}"
    );
    println!(
        "across the restart: served by {served}, gate set {}",
        result["gateReconciled"]
    );
    let set: u64 = result["gateReconciled"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(what, _)| what.starts_with("set from the rows"))
        .map(|(_, count)| count.as_u64().unwrap())
        .sum();
    // The first seed, the one after the restart, and one more for each
    // stock a sale of the database path overtook while Redis came back.
    assert!(set >= 2, "{result}");
    assert!(
        gate_figures(&result)["labels"]["gate"]["UNREACHABLE"]
            .as_u64()
            .is_some_and(|n| n >= 40),
        "{result}"
    );
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_the_switch_off_the_database_sells_exactly_the_drop_and_the_gate_comes_back_from_the_rows()
 {
    let lab = Setup::with(&[COMPONENT]).start().await;
    let (members, coupon) = lab.members_and_coupon(52, 20).await;
    // Seeded: Redis holds a stock of 20 the switch-off must not leave behind.
    lab.seed_drop(coupon, 20).await.expect_ok();
    let path = format!("/lab/drop/coupons/{coupon}/gate");
    assert_eq!(
        lab.get(&path).await.expect_ok(),
        &json!({ "couponId": coupon, "enabled": true })
    );

    assert_eq!(
        switch(&lab, coupon, false).await.expect_ok(),
        &json!({ "couponId": coupon, "enabled": false })
    );
    assert_eq!(lab.get(&path).await.expect_ok()["enabled"], json!(false));
    assert_eq!(
        ask(&lab, coupon, &members[..50]).await,
        counts(&[("ISSUED", 20), ("SOLD_OUT", 30)])
    );
    let remaining: Option<i64> = lab
        .redis_query(redis::cmd("GET").arg(keys::gate_remaining(coupon)))
        .await;
    assert_eq!(
        remaining, None,
        "the first request past the gate dropped its stock"
    );

    switch(&lab, coupon, true).await.expect_ok();
    // The gate is set from the rows, not from the stock it had: sold out,
    // and a buyer of the database path is over its limit.
    let late = lab.issue(coupon, members[50], METHOD).await;
    late.fails_as(409, "SOLD_OUT");
    let remaining: Option<i64> = lab
        .redis_query(redis::cmd("GET").arg(keys::gate_remaining(coupon)))
        .await;
    assert_eq!(remaining, Some(0));
    let buyer = lab.issued_members(coupon).await[0];
    lab.issue(coupon, buyer, METHOD)
        .await
        .fails_as(409, "DUPLICATE: PER_USER_LIMIT_EXCEEDED");

    let result = lab.result(coupon).await;
    assert_eq!(result["issueRows"], json!(20));
    assert_invariants_hold(&result);
    assert_eq!(result["servedBy"], json!({ "fallback": 50, "gate": 2 }));
    assert_eq!(
        result["gateReconciled"],
        json!({ "set from the rows: 0 left, 20 buyers": 1 })
    );
    assert_eq!(
        gate_figures(&result)["labels"]["gate"],
        json!({ "OFF": 50, "SOLD_OUT": 1, "PER_USER_LIMIT_EXCEEDED": 1 })
    );

    // What the switch refuses.
    switch(&lab, coupon + 1_000_000, false)
        .await
        .fails_with(404);
    lab.post(&path, json!({ "enabled": "no" }))
        .await
        .fails_with(400);
    lab.post(&path, json!({})).await.fails_with(400);
    lab.get("/lab/drop/coupons/0/gate").await.fails_with(400);
    lab.finish().await;
}

/// Sells to `by_gate` through the gate, keeps what Redis holds of its
/// stock as a snapshot taken before an outage would, sells to `by_database`
/// with the switch off, and gives Redis that snapshot back: a gate the rows
/// moved past.
async fn behind_the_rows(lab: &TestLab, coupon: u64, by_gate: &[u64], by_database: &[u64]) {
    let issued = counts(&[("ISSUED", by_gate.len())]);
    assert_eq!(ask(lab, coupon, by_gate).await, issued);
    let mut kept = Vec::new();
    for name in ["remaining", "limit", "epoch"] {
        let key = format!("{}{name}", keys::gate(coupon));
        let value: String = lab.redis_query(redis::cmd("GET").arg(&key)).await;
        kept.push((key, value));
    }
    switch(lab, coupon, false).await.expect_ok();
    let issued = counts(&[("ISSUED", by_database.len())]);
    assert_eq!(ask(lab, coupon, by_database).await, issued);
    for (key, value) in &kept {
        let () = lab.redis_query(redis::cmd("SET").arg(key).arg(value)).await;
    }
    switch(lab, coupon, true).await.expect_ok();
}

/// Asserts the end of a drop of 10 whose gate came back behind the rows:
/// sold out exactly, with the gate set from the rows at first use, dropped
/// when it found the sales made without it, and set again as `set_again`
/// says.
async fn assert_sold_out_and_set_again(lab: &TestLab, coupon: u64, set_again: &str) {
    let result = lab.result(coupon).await;
    assert_eq!(result["issueRows"], json!(10));
    assert_invariants_hold(&result);
    assert_eq!(
        result["gateReconciled"],
        json!({
            "set from the rows: 10 left, 0 buyers": 1,
            "dropped: sales were made without it": 1,
            set_again: 1,
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gate_that_comes_back_behind_the_rows_is_dropped_at_its_first_confirm() {
    let lab = Setup::with(&[COMPONENT]).start().await;
    let (members, coupon) = lab.members_and_coupon(12, 10).await;
    // A stock of 7 where the rows leave 2.
    behind_the_rows(&lab, coupon, &members[..3], &members[3..8]).await;

    // The stale gate admits one; its confirm finds the row moved on, sells
    // under the database's guard and drops the stock; the next request
    // sets the gate from the rows.
    assert_eq!(
        ask(&lab, coupon, &members[8..9]).await,
        counts(&[("ISSUED", 1)])
    );
    let remaining: Option<i64> = lab
        .redis_query(redis::cmd("GET").arg(keys::gate_remaining(coupon)))
        .await;
    assert_eq!(remaining, None);
    assert_eq!(
        ask(&lab, coupon, &members[9..12]).await,
        counts(&[("ISSUED", 1), ("SOLD_OUT", 2)])
    );
    assert_sold_out_and_set_again(&lab, coupon, "set from the rows: 1 left, 9 buyers").await;
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gate_behind_a_drop_the_database_sold_out_is_dropped_at_its_first_refusal() {
    let lab = Setup::with(&[COMPONENT]).start().await;
    let (members, coupon) = lab.members_and_coupon(13, 10).await;
    // A stock of 7 where the rows leave none.
    behind_the_rows(&lab, coupon, &members[..3], &members[3..10]).await;

    // The stale gate admits one, which the database refuses; the row's
    // version tells the gate it sold without it, and it is dropped rather
    // than drained one SOLD_OUT_AT_DB at a time.
    let first = lab.issue(coupon, members[10], METHOD).await;
    first.fails_as(409, "SOLD_OUT_AT_DB");
    assert_eq!(
        ask(&lab, coupon, &members[11..13]).await,
        counts(&[("SOLD_OUT", 2)])
    );
    assert_sold_out_and_set_again(&lab, coupon, "set from the rows: 0 left, 10 buyers").await;
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_fail_open_off_redis_down_is_a_503_and_nothing_is_issued() {
    let mut redis = RedisServer::start();
    let lab = Setup::with(&[COMPONENT])
        .redis_url(redis.url(0))
        .tune(|c| c.capabilities.permits.gate_fail_open = false)
        .start()
        .await;
    let (members, coupon) = lab.members_and_coupon(11, 10).await;
    lab.issue(coupon, members[0], METHOD).await.expect_ok();

    redis.shutdown_nosave();
    let replies = lab.issue_all(coupon, &members[1..], METHOD).await;
    for reply in &replies {
        reply.fails_as(503, "UNAVAILABLE");
    }
    assert_eq!(lab.issued_members(coupon).await, vec![members[0]]);
    redis.start_again();
    let result = lab.result(coupon).await;
    assert_eq!(result["issueRows"], json!(1));
    assert_eq!(result["servedBy"], json!({ "gate": 1 }));
    assert_eq!(
        gate_figures(&result)["labels"]["gate"],
        json!({ "ADMITTED": 1, "UNREACHABLE": 10 })
    );
    lab.finish().await;
}
