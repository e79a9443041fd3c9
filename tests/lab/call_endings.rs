//! A call that ends badly leaves nothing behind: the deadline rolls its
//! transaction back and hands its connection on clean, its strategy undoes
//! what the database does not hold, the database itself cuts a statement
//! that outlives the call, and confirmations that meet a busy instance pool
//! wait for one instead of being dropped.

use std::time::{Duration, Instant};

use couponlab_contract::ISSUE_STREAM;
use futures::future::join_all;
use serde_json::json;

use crate::common::{
    Setup, TestLab, hold_coupon_row, outcome, pubsub_turn, subscriber_listening,
    with_call_deadline_ms,
};

const STALL: &str = "TEST_STALL";

/// A TEST_STALL request that stalls at `where_` until the call's deadline.
async fn stall(lab: &TestLab, coupon: u64, member: u64, where_: &str) -> crate::common::Reply {
    lab.issue_keyed(coupon, member, STALL, where_).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_killed_inside_a_transaction_rolls_back_and_hands_on_a_clean_connection() {
    // One pooled connection: the next borrower gets the very connection the
    // killed call held.
    let lab = Setup::with(&["test_stall", "pessimistic"])
        .tune(|c| {
            c.capabilities.sql.db_pool_size = 1;
            c.request_timeout_ms = 1_000;
        })
        .start()
        .await;
    let (members, coupon) = lab.members_and_coupon(2, 10).await;

    let reply = stall(&lab, coupon, members[0], "in-transaction").await;
    let message = reply.fails_with(504);
    assert!(message.starts_with("TIMED_OUT"), "{message}");
    assert!(lab.issued_members(coupon).await.is_empty(), "rolled back");

    // What the next borrowers write is committed and visible at once.
    let created = lab.coupon(5).await;
    let visible: Option<i64> = sqlx::query_scalar("SELECT id FROM coupons WHERE id = ?")
        .bind(created)
        .fetch_optional(lab.db.mysql())
        .await
        .unwrap();
    assert_eq!(visible, Some(created as i64));
    lab.issue(coupon, members[1], "PESSIMISTIC")
        .await
        .expect_ok();
    assert_eq!(lab.issued_members(coupon).await, vec![members[1]]);
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_killed_after_reserving_is_compensated_by_its_strategy() {
    let lab = with_call_deadline_ms(&["test_stall"], 500).await;
    let (members, coupon) = lab.members_and_coupon(1, 10).await;

    let reply = stall(&lab, coupon, members[0], "after-reserve").await;
    let message = reply.fails_with(504);
    assert!(
        message.contains("compensated: the reservation was removed"),
        "{message}"
    );
    assert!(lab.reserved_members(coupon).await.is_empty());
    let result = lab.result(coupon).await;
    assert_eq!(
        result["requests"]["byMethod"][STALL]["compensations"],
        json!(1),
        "{result}"
    );
    assert_eq!(result["redis"]["strandedMembers"]["count"], json!(0));
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_cuts_a_statement_at_the_call_deadline() {
    let lab = with_call_deadline_ms(&["test_stall"], 1_000).await;
    let (members, coupon) = lab.members_and_coupon(1, 10).await;

    let started = Instant::now();
    let reply = stall(&lab, coupon, members[0], "sql-sleep").await;
    let took = started.elapsed();
    let message = reply.fails_with(503);
    assert!(message.contains("max_statement_time"), "{message}");
    assert!(took < Duration::from_millis(1_500), "took {took:?}");
    // Nothing of it keeps running on the server.
    let sleeping = lab
        .number(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
             WHERE INFO LIKE 'SELECT SLEEP(600)%'",
        )
        .await;
    assert_eq!(sleeping, 0);
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_stuck_in_describe_is_rejected_and_the_server_starts() {
    let lab = with_call_deadline_ms(&["test_stuck_describe", "pessimistic"], 500).await;
    let listing = lab.get("/lab/strategies").await;
    let listing = listing.expect_ok();
    let rejected = &listing["rejected"][0];
    assert!(
        rejected["file"]
            .as_str()
            .unwrap()
            .ends_with("test_stuck_describe.wasm"),
        "{listing}"
    );
    assert!(
        rejected["reason"]
            .as_str()
            .unwrap()
            .contains("describe() failed"),
        "{listing}"
    );
    assert_eq!(listing["strategies"][0]["method"], json!("PESSIMISTIC"));
    lab.finish().await;
}

/// Requests accepted while a single instance slot is shared by every call
/// of the server: confirmations meet BUSY again and again, and wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn confirmations_that_meet_a_busy_instance_pool_are_confirmed_later() {
    let _turn = pubsub_turn().await;
    let lab = Setup::with(&["redis_async", "redis_pubsub", "redis_stream_atomic"])
        .own_redis_db()
        .tune(|c| c.max_instances = 1)
        .start()
        .await;
    subscriber_listening(&lab).await;
    for method in ["REDIS_ASYNC", "REDIS_PUBSUB", "REDIS_STREAM_ATOMIC"] {
        let (members, coupon) = lab.members_and_coupon(30, 30).await;
        // Several clients at once, each asking again until it is accepted:
        // the requests compete for the one slot with the confirmations.
        let lab = &lab;
        let busy: u64 = join_all(members.chunks(6).map(|chunk| async move {
            let mut busy = 0;
            for &member in chunk {
                loop {
                    let reply = lab.issue(coupon, member, method).await;
                    match outcome(&reply).as_str() {
                        "ACCEPTED" => break,
                        "BUSY" => busy += 1,
                        other => panic!("{method}: {other} {}", reply.body),
                    }
                }
            }
            busy
        }))
        .await
        .into_iter()
        .sum();
        assert!(busy > 0, "{method}: the slot was never busy");

        let result = lab.drained(coupon, 30).await;
        assert_eq!(
            result["asyncResults"],
            json!({ "ISSUED": 30 }),
            "{method}: {result}"
        );
        assert_eq!(lab.issued_members(coupon).await, members, "{method}");
    }
    lab.finish().await;
}

/// A stream entry whose confirm waits on a row lock for longer than the
/// claim interval stays with the consumer handling it: delivered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_being_confirmed_is_not_claimed_away_from_its_consumer() {
    let lab = Setup::with(&["redis_stream"])
        .tune(|c| {
            c.consumers.claim_idle_ms = 200;
            c.consumers.claim_interval_ms = 50;
        })
        .own_redis_db()
        .start()
        .await;
    let (members, coupon) = lab.members_and_coupon(1, 5).await;

    let holder = hold_coupon_row(&lab, coupon).await;
    lab.issue(coupon, members[0], "REDIS_STREAM")
        .await
        .expect_ok();
    let mut redis = lab.redis.clone();
    // Held for eight claim intervals' worth of idle time.
    let watch_until = Instant::now() + Duration::from_millis(1_600);
    let mut most = 0;
    while Instant::now() < watch_until {
        let pending: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
            .arg(ISSUE_STREAM.key(coupon))
            .arg(ISSUE_STREAM.group)
            .arg("-")
            .arg("+")
            .arg(10)
            .query_async(&mut redis)
            .await
            .unwrap_or_default();
        most = most.max(pending.iter().map(|p| p.3).max().unwrap_or(0));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    holder.rollback().await.unwrap();
    assert_eq!(
        most, 1,
        "the entry was delivered {most} times while being confirmed"
    );
    lab.drained(coupon, 1).await;
    assert_eq!(lab.issued_members(coupon).await, members);
    lab.finish().await;
}
