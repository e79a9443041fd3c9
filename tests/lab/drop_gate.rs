//! REDIS_LUA_GATE, the limited drop of seed 000: the seed's six test cases,
//! the rest of its store contract (cancel, seed) and a spike end to end,
//! over HTTP against real Redis and MariaDB, checking the gate's Redis keys
//! directly.

use std::collections::BTreeMap;
use std::time::Duration;

use couponlab_contract::keys;
use futures::future::join_all;
use serde_json::{Value, json};

use crate::common::{
    Reply, Setup, TestLab, assert_invariants_hold, hold_coupon_row, outcome, until,
};

const METHOD: &str = "REDIS_LUA_GATE";
const COMPONENT: &str = "redis_lua_gate";

async fn issue(lab: &TestLab, coupon: u64, member: u64, key: Option<&str>) -> Reply {
    match key {
        Some(key) => lab.issue_keyed(coupon, member, METHOD, key).await,
        None => lab.issue(coupon, member, METHOD).await,
    }
}

/// How many replies had each status and outcome.
fn tally(replies: &[Reply]) -> BTreeMap<(u16, String), usize> {
    let mut tally = BTreeMap::new();
    for reply in replies {
        *tally
            .entry((reply.status.as_u16(), outcome(reply)))
            .or_insert(0) += 1;
    }
    tally
}

/// A [`tally`] written out: (status, outcome, how many).
fn tallied(counts: &[(u16, &str, usize)]) -> BTreeMap<(u16, String), usize> {
    counts
        .iter()
        .map(|&(status, outcome, count)| ((status, outcome.to_string()), count))
        .collect()
}

/// The gate's key `name` of `coupon`: `coupon:gate:{coupon}:name`.
fn gate_key(coupon: u64, name: &str) -> String {
    format!("{}{name}", keys::gate(coupon))
}

async fn get(lab: &TestLab, key: &str) -> Option<String> {
    lab.redis_query(redis::cmd("GET").arg(key)).await
}

async fn ttl(lab: &TestLab, key: &str) -> i64 {
    lab.redis_query(redis::cmd("TTL").arg(key)).await
}

async fn remaining(lab: &TestLab, coupon: u64) -> Option<i64> {
    get(lab, &keys::gate_remaining(coupon))
        .await
        .map(|v| v.parse().unwrap())
}

async fn held_by(lab: &TestLab, coupon: u64, member: u64) -> Option<String> {
    get(lab, &gate_key(coupon, &format!("buyer:{member}"))).await
}

async fn marker(lab: &TestLab, coupon: u64, key: &str) -> Option<String> {
    get(lab, &gate_key(coupon, &format!("reserved:{key}"))).await
}

/// Asserts that `member`'s count and the marker of its keyless request
/// (keyed `member-{id}` by the gate) are gone: the gate gave them back.
async fn assert_gave_back(lab: &TestLab, coupon: u64, member: u64) {
    assert_eq!(held_by(lab, coupon, member).await, None);
    assert_eq!(marker(lab, coupon, &format!("member-{member}")).await, None);
}

async fn issued_count(lab: &TestLab, coupon: u64) -> i64 {
    sqlx::query_scalar("SELECT issued_count FROM coupons WHERE id = ?")
        .bind(coupon)
        .fetch_one(lab.db.mysql())
        .await
        .unwrap()
}

/// Confirms of this test's database running their UPDATE of the coupon row:
/// while the row is held, each of them holds a permit and waits.
async fn confirms_waiting(lab: &TestLab) -> i64 {
    lab.number(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
         WHERE DB = DATABASE() AND INFO LIKE 'UPDATE coupons SET issued_count%'",
    )
    .await
}

fn gate_labels(result: &Value) -> &Value {
    &result["requests"]["byMethod"][METHOD]["labels"]["gate"]
}

// Seed case 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stock_100_and_500_concurrent_reserves_admit_exactly_100_and_sell_out_400() {
    // Permits for everyone: this case is about the Lua's atomicity alone.
    let lab = Setup::with(&[COMPONENT]).permits(500, 10_000).start().await;
    let (members, coupon) = lab.members_and_coupon(500, 100).await;
    lab.seed_drop(coupon, 100).await.expect_ok();

    let replies = join_all(members.iter().map(|&m| issue(&lab, coupon, m, None))).await;
    assert_eq!(
        tally(&replies),
        tallied(&[(200, "ISSUED", 100), (409, "SOLD_OUT", 400)])
    );
    assert_eq!(remaining(&lab, coupon).await, Some(0));
    let admitted: Vec<u64> = members
        .iter()
        .zip(&replies)
        .filter(|(_, reply)| reply.status == 200)
        .map(|(&member, _)| member)
        .collect();
    assert_eq!(lab.issued_members(coupon).await, admitted);
    for &member in &members {
        let expected = admitted.contains(&member).then(|| "1".to_string());
        assert_eq!(
            held_by(&lab, coupon, member).await,
            expected,
            "member {member}"
        );
    }
    let result = lab.result(coupon).await;
    assert_eq!(
        gate_labels(&result),
        &json!({ "ADMITTED": 100, "SOLD_OUT": 400 })
    );
    assert_eq!(result["issueRows"], json!(100));
    assert_eq!(result["issuedCount"], json!(100));
    // The gate keeps no reservation set: no comparison with one that would
    // show every issued member as missing from Redis.
    assert_eq!(result.get("redis"), None, "{result}");
    lab.finish().await;
}

// Seed case 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_idempotency_key_twice_is_already_reserved_and_takes_stock_once() {
    let lab = Setup::with(&[COMPONENT]).start().await;
    let member = lab.members(1).await[0];
    let coupon = lab.coupon(10).await;
    lab.seed_drop(coupon, 10).await.expect_ok();

    // A client retrying one request twenty times at once.
    let replies = join_all((0..20).map(|_| issue(&lab, coupon, member, Some("order-1")))).await;
    assert_eq!(
        tally(&replies),
        tallied(&[(200, "ISSUED", 1), (409, "DUPLICATE", 19)])
    );
    for reply in replies.iter().filter(|r| r.status == 409) {
        assert!(
            reply.fails_with(409).contains("ALREADY_RESERVED"),
            "{}",
            reply.body
        );
    }
    let late = issue(&lab, coupon, member, Some("order-1")).await;
    assert!(late.fails_with(409).contains("ALREADY_RESERVED"));

    assert_eq!(remaining(&lab, coupon).await, Some(9));
    assert_eq!(held_by(&lab, coupon, member).await.as_deref(), Some("1"));
    assert_eq!(
        marker(&lab, coupon, "order-1").await,
        Some(format!("{member}:1"))
    );
    assert_eq!(lab.issued_members(coupon).await, vec![member]);
    let result = lab.result(coupon).await;
    assert_eq!(
        gate_labels(&result),
        &json!({ "ADMITTED": 1, "ALREADY_RESERVED": 20 })
    );
    lab.finish().await;
}

// Seed case 3, and what a limit above 1 meets in the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_past_the_per_member_limit_is_refused() {
    let lab = Setup::with(&[COMPONENT]).start().await;
    let member = lab.members(1).await[0];

    let created = lab
        .post("/lab/coupons", json!({ "name": "drop", "totalCount": 10 }))
        .await;
    assert_eq!(created.expect_ok()["perMemberLimit"], json!(1));
    let coupon = created.expect_ok()["id"].as_u64().unwrap();
    lab.seed_drop(coupon, 10).await.expect_ok();
    assert_eq!(
        get(&lab, &gate_key(coupon, "limit")).await.as_deref(),
        Some("1")
    );

    issue(&lab, coupon, member, Some("a")).await.expect_ok();
    let second = issue(&lab, coupon, member, Some("b")).await;
    assert!(
        second
            .fails_with(409)
            .starts_with("DUPLICATE: PER_USER_LIMIT_EXCEEDED"),
        "{}",
        second.body
    );
    assert_eq!(remaining(&lab, coupon).await, Some(9));
    assert_eq!(held_by(&lab, coupon, member).await.as_deref(), Some("1"));
    assert_eq!(marker(&lab, coupon, "b").await, None);
    // Asking for two coupons at once is refused before Redis is touched.
    let two = lab
        .post(
            &format!("/lab/coupons/{coupon}/issue"),
            json!({ "memberId": member, "method": METHOD, "idempotencyKey": "c", "quantity": 2 }),
        )
        .await;
    assert!(two.fails_with(409).contains("quantity must be 1"));
    assert_eq!(remaining(&lab, coupon).await, Some(9));

    // A limit of 2 lets Redis admit a second reservation; the database's
    // UNIQUE(coupon_id, member_id) refuses it and the gate gives it back.
    let generous = lab
        .post(
            "/lab/coupons",
            json!({ "name": "generous", "totalCount": 10, "perMemberLimit": 2 }),
        )
        .await;
    let generous = generous.expect_ok()["id"].as_u64().unwrap();
    issue(&lab, generous, member, Some("a")).await.expect_ok();
    for key in ["b", "c"] {
        let again = issue(&lab, generous, member, Some(key)).await;
        assert_eq!(
            again.fails_with(409),
            format!("DUPLICATE: member {member} already has coupon {generous}")
        );
    }
    assert_eq!(remaining(&lab, generous).await, Some(9));
    assert_eq!(held_by(&lab, generous, member).await.as_deref(), Some("1"));
    let result = lab.result(generous).await;
    assert_eq!(
        result["requests"]["byMethod"][METHOD]["compensations"],
        json!(2)
    );

    for bad in [json!(0), json!(-1), json!("two")] {
        lab.post(
            "/lab/coupons",
            json!({ "name": "bad", "totalCount": 10, "perMemberLimit": bad }),
        )
        .await
        .fails_with(400);
    }
    lab.finish().await;
}

// Seed case 4.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_restores_the_stock_exactly_once() {
    let lab = Setup::with(&[COMPONENT]).start().await;
    let (members, coupon) = lab.members_and_coupon(4, 10).await;
    lab.seed_drop(coupon, 10).await.expect_ok();
    for (i, &member) in members[..3].iter().enumerate() {
        issue(&lab, coupon, member, Some(&format!("k{i}")))
            .await
            .expect_ok();
    }
    assert_eq!(remaining(&lab, coupon).await, Some(7));
    assert_eq!(issued_count(&lab, coupon).await, 3);

    let cancelled = lab.cancel_drop(coupon, members[0], "k0").await;
    assert_eq!(
        cancelled.expect_ok(),
        &json!({ "couponId": coupon, "memberId": members[0], "cancelled": true })
    );
    assert_eq!(remaining(&lab, coupon).await, Some(8));
    assert_eq!(held_by(&lab, coupon, members[0]).await, None);
    assert_eq!(marker(&lab, coupon, "k0").await, None);
    // The coupon went back in the database too.
    assert_eq!(lab.issued_members(coupon).await, members[1..3].to_vec());
    assert_eq!(issued_count(&lab, coupon).await, 2);

    // A second cancel, and a key of another member, change nothing.
    let again = lab.cancel_drop(coupon, members[0], "k0").await;
    assert_eq!(again.expect_ok()["cancelled"], json!(false));
    let foreign = lab.cancel_drop(coupon, members[2], "k1").await;
    assert_eq!(foreign.expect_ok()["cancelled"], json!(false));
    assert_eq!(remaining(&lab, coupon).await, Some(8));
    assert_eq!(lab.issued_members(coupon).await, members[1..3].to_vec());

    // Five cancels of one reservation at once: exactly one restores.
    let racing = join_all((0..5).map(|_| lab.cancel_drop(coupon, members[1], "k1"))).await;
    let restored = racing
        .iter()
        .filter(|r| r.expect_ok()["cancelled"] == json!(true))
        .count();
    assert_eq!(restored, 1);
    assert_eq!(remaining(&lab, coupon).await, Some(9));
    assert_eq!(issued_count(&lab, coupon).await, 1);
    assert_eq!(lab.issued_members(coupon).await, vec![members[2]]);

    // The member's count went back with the stock: it may reserve again.
    issue(&lab, coupon, members[0], Some("k3"))
        .await
        .expect_ok();
    assert_eq!(remaining(&lab, coupon).await, Some(8));
    assert_eq!(issued_count(&lab, coupon).await, 2);

    lab.cancel_drop(coupon + 1_000_000, members[0], "k3")
        .await
        .fails_with(404);
    lab.cancel_drop(coupon, 0, "k3").await.fails_with(400);
    lab.cancel_drop(coupon, members[0], "")
        .await
        .fails_with(400);
    lab.finish().await;
}

// Seed case 5.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seeding_twice_keeps_the_stock_at_the_limited_quantity() {
    let lab = Setup::with(&[COMPONENT]).start().await;
    let member = lab.members(1).await[0];
    let coupon = lab.coupon(100).await;

    let seeds = join_all((0..10).map(|_| lab.seed_drop(coupon, 50))).await;
    let fresh = seeds
        .iter()
        .filter(|r| r.expect_ok()["seeded"] == json!(true))
        .count();
    assert_eq!(fresh, 1);
    assert!(
        seeds
            .iter()
            .all(|r| r.expect_ok()["remaining"] == json!(50))
    );
    let remaining_key = keys::gate_remaining(coupon);
    let lives = ttl(&lab, &remaining_key).await;
    assert!((1..=86_400).contains(&lives), "TTL {lives}");
    assert!(ttl(&lab, &gate_key(coupon, "limit")).await > 0);

    issue(&lab, coupon, member, None).await.expect_ok();
    assert_eq!(remaining(&lab, coupon).await, Some(49));
    // The member's count and marker live as long as the stock.
    assert!(ttl(&lab, &gate_key(coupon, &format!("buyer:{member}"))).await > 0);
    assert!(
        ttl(
            &lab,
            &gate_key(coupon, &format!("reserved:member-{member}"))
        )
        .await
            > 0
    );

    let again = lab.seed_drop(coupon, 50).await;
    assert_eq!(
        again.expect_ok(),
        &json!({ "couponId": coupon, "seeded": false, "remaining": 49 })
    );
    assert_eq!(remaining(&lab, coupon).await, Some(49));

    lab.seed_drop(coupon, 0).await.fails_with(400);
    lab.post(
        &format!("/lab/drop/coupons/{coupon}/seed"),
        json!({ "quantity": 5, "ttlSeconds": 0 }),
    )
    .await
    .fails_with(400);
    lab.seed_drop(coupon + 1_000_000, 5).await.fails_with(404);
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drop_seeded_above_the_coupon_drains_at_the_database_guard() {
    let lab = Setup::with(&[COMPONENT]).start().await;
    let (members, coupon) = lab.members_and_coupon(9, 5).await;
    lab.seed_drop(coupon, 8).await.expect_ok();

    let replies = join_all(members[..8].iter().map(|&m| issue(&lab, coupon, m, None))).await;
    assert_eq!(
        tally(&replies),
        tallied(&[(200, "ISSUED", 5), (409, "SOLD_OUT_AT_DB", 3)])
    );
    // The units the database had no stock for stay taken; the members'
    // counts and markers go back.
    assert_eq!(remaining(&lab, coupon).await, Some(0));
    for (&member, reply) in members.iter().zip(&replies) {
        if reply.status == 409 {
            assert_gave_back(&lab, coupon, member).await;
        }
    }
    let late = issue(&lab, coupon, members[8], None).await;
    assert_eq!(outcome(&late), "SOLD_OUT");
    assert_eq!(lab.issued_members(coupon).await.len(), 5);
    lab.finish().await;
}

// Seed case 6.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_the_permits_exhausted_an_admitted_request_is_throttled_and_redis_restored() {
    let lab = Setup::with(&[COMPONENT]).permits(1, 100).start().await;
    let members = lab.members(21).await;
    // Stock for everyone: only the permit can refuse them.
    let coupon = lab.coupon(100).await;
    lab.seed_drop(coupon, 100).await.expect_ok();

    let holder = hold_coupon_row(&lab, coupon).await;
    let first = issue(&lab, coupon, members[0], None);
    let the_rest = async {
        // The first request is in its confirm, waiting for the row: it
        // holds the only permit.
        until(
            "the first confirm waits for the row",
            Duration::from_secs(10),
            || async { confirms_waiting(&lab).await == 1 },
        )
        .await;
        assert_eq!(remaining(&lab, coupon).await, Some(99));
        let replies = join_all(members[1..].iter().map(|&m| issue(&lab, coupon, m, None))).await;
        holder.commit().await.unwrap();
        replies
    };
    let (first, throttled) = tokio::join!(first, the_rest);

    assert_eq!(outcome(&first), "ISSUED", "{}", first.body);
    assert_eq!(tally(&throttled), tallied(&[(503, "THROTTLED", 20)]));
    // Every throttled reservation was given back.
    assert_eq!(remaining(&lab, coupon).await, Some(99));
    for &member in &members[1..] {
        assert_gave_back(&lab, coupon, member).await;
    }
    assert_eq!(lab.issued_members(coupon).await, vec![members[0]]);
    let result = lab.result(coupon).await;
    let gate = &result["requests"]["byMethod"][METHOD];
    assert_eq!(gate["byOutcome"], json!({ "ISSUED": 1, "THROTTLED": 20 }));
    assert_eq!(gate["compensations"], json!(20));
    assert_eq!(gate["labels"]["gate"], json!({ "ADMITTED": 21 }));

    // The permit is back: a throttled member is admitted on its retry.
    issue(&lab, coupon, members[1], None).await.expect_ok();
    assert_eq!(remaining(&lab, coupon).await, Some(98));
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_permit_whose_confirm_failed_comes_back_at_once() {
    let lab = Setup::with(&[COMPONENT])
        .permits(1, 50)
        .tune(|c| c.request_timeout_ms = 500)
        .start()
        .await;
    let (members, coupon) = lab.members_and_coupon(2, 10).await;
    lab.seed_drop(coupon, 10).await.expect_ok();

    // The first request takes the only permit and waits on the coupon row
    // in its confirm until the database cuts the statement at its deadline.
    let holder = hold_coupon_row(&lab, coupon).await;
    let failed = issue(&lab, coupon, members[0], None).await;
    let message = failed.fails_with(503);
    assert!(message.contains("max_statement_time"), "{message}");
    holder.commit().await.unwrap();

    // Its permit and its unit came back with its answer: the next member
    // is admitted at once.
    let next = issue(&lab, coupon, members[1], None).await;
    assert_eq!(outcome(&next), "ISSUED", "{}", next.body);
    assert_eq!(remaining(&lab, coupon).await, Some(9));
    assert_eq!(lab.issued_members(coupon).await, vec![members[1]]);
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drop_never_seeded_is_seeded_from_the_coupon_on_first_use() {
    let lab = Setup::with(&[COMPONENT, "pessimistic"]).start().await;
    let (members, coupon) = lab.members_and_coupon(6, 4).await;
    lab.issue(coupon, members[0], "PESSIMISTIC")
        .await
        .expect_ok();
    assert_eq!(remaining(&lab, coupon).await, None);

    // What the coupon has left (4 - 1) is the stock.
    let replies = join_all(members[1..].iter().map(|&m| issue(&lab, coupon, m, None))).await;
    assert_eq!(
        tally(&replies),
        tallied(&[(200, "ISSUED", 3), (409, "SOLD_OUT", 2)])
    );
    assert_eq!(remaining(&lab, coupon).await, Some(0));
    let lives = ttl(&lab, &keys::gate_remaining(coupon)).await;
    assert!((1..=86_400).contains(&lives), "TTL {lives}");
    assert_eq!(lab.issued_members(coupon).await.len(), 4);
    assert_eq!(issued_count(&lab, coupon).await, 4);

    // DELETE /lab/data-style cleanup: the drop's keys match `coupon:*`.
    // In a KEYS pattern the hash tag's braces are literal characters.
    let mut gate_keys: Vec<String> = lab
        .redis_query(redis::cmd("KEYS").arg(format!("{}*", keys::gate(coupon))))
        .await;
    gate_keys.sort();
    assert_eq!(
        gate_keys.len(),
        3 + 4 + 3,
        "remaining, limit, epoch, 4 buyers (PESSIMISTIC's, counted from its row, and 3), 3 markers: {gate_keys:?}"
    );
    assert_eq!(
        held_by(&lab, coupon, members[0]).await.as_deref(),
        Some("1")
    );

    issue(&lab, coupon + 1_000_000, members[1], None)
        .await
        .fails_with(404);
    lab.finish().await;
}

// End to end: a spike on the default configuration (32 permits, 100 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_spike_of_500_on_100_issues_exactly_100_and_throttled_clients_retry() {
    let lab = Setup::with(&[COMPONENT]).start().await;
    let (members, coupon) = lab.members_and_coupon(500, 100).await;
    let server = &lab;
    let attempt = |member: u64| async move {
        issue(server, coupon, member, Some(&format!("spike-{member}"))).await
    };

    let replies = join_all(members.iter().map(|&m| attempt(m))).await;
    let mut issued = 0;
    let mut retry = Vec::new();
    for (&member, reply) in members.iter().zip(&replies) {
        match (reply.status.as_u16(), outcome(reply).as_str()) {
            (200, "ISSUED") => issued += 1,
            (409, "SOLD_OUT") => {}
            (503, "THROTTLED") => retry.push(member),
            other => panic!("unexpected {other:?}: {}", reply.body),
        }
    }
    assert_eq!(lab.issued_members(coupon).await.len(), issued);
    // Whatever was admitted but not issued went back to the stock.
    assert_eq!(remaining(&lab, coupon).await, Some(100 - issued as i64));

    // Throttled clients retry with their key until the drop is decided.
    for _ in 0..50 {
        if retry.is_empty() {
            break;
        }
        let replies = join_all(retry.iter().map(|&m| attempt(m))).await;
        let mut again = Vec::new();
        for (&member, reply) in retry.iter().zip(&replies) {
            match reply.status.as_u16() {
                200 => issued += 1,
                409 => assert_eq!(outcome(reply), "SOLD_OUT"),
                503 => again.push(member),
                other => panic!("unexpected {other}: {}", reply.body),
            }
        }
        retry = again;
    }
    assert!(retry.is_empty(), "{} still throttled", retry.len());
    assert_eq!(issued, 100);
    assert_eq!(remaining(&lab, coupon).await, Some(0));
    let result = lab.result(coupon).await;
    assert_eq!(result["issueRows"], json!(100));
    assert_eq!(result["issuedCount"], json!(100));
    assert_eq!(result["distinctMembers"], json!(100));
    assert_invariants_hold(&result);
    lab.finish().await;
}
