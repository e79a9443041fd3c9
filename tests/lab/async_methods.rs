//! Stages 4-6: requests answered 202 before the DB write, confirmed later by
//! the job workers, the pub/sub subscriber or the stream consumers — and
//! where each can lose work.

use std::collections::BTreeMap;

use couponlab_contract::ISSUE_STREAM;
use serde_json::json;
use tokio::process::Child;

use crate::common::{
    DRAIN, Setup, TestLab, assert_accepts_exactly, hold_coupon_row, pubsub_turn, statuses,
    stops_cleanly_on_sigterm, until,
};

const ASYNC_COMPONENTS: [&str; 4] = [
    "redis_async",
    "redis_pubsub",
    "redis_stream",
    "redis_stream_atomic",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_async_method_accepts_exactly_the_total_and_confirms_it() {
    let _turn = pubsub_turn().await;
    let lab = Setup::with(&ASYNC_COMPONENTS).own_redis_db().start().await;
    for method in [
        "REDIS_ASYNC",
        "REDIS_PUBSUB",
        "REDIS_STREAM",
        "REDIS_STREAM_ATOMIC",
    ] {
        let (members, coupon) = lab.members_and_coupon(400, 80).await;
        let replies = lab.issue_all(coupon, &members, method).await;
        assert_accepts_exactly(&replies, 80, method);

        let result = lab.drained(coupon, 80).await;
        assert_eq!(
            result["asyncResults"],
            json!({ "ISSUED": 80 }),
            "{method}: {result}"
        );
        assert_eq!(result["issueRows"], json!(80), "{method}");
        assert_eq!(result["distinctMembers"], json!(80), "{method}");
        assert_eq!(result["issuedCount"], json!(80), "{method}");
        assert!(result["confirmationLagMs"]["p99"].as_f64().unwrap() >= 0.0);
        let in_db = lab.issued_members(coupon).await;
        assert_eq!(lab.reserved_members(coupon).await, in_db, "{method}");
        if method == "REDIS_PUBSUB" {
            assert_eq!(
                result["publishReceivers"],
                json!({ "1": 80 }),
                "{method}: {result}"
            );
        }
        if method.starts_with("REDIS_STREAM") {
            assert_eq!(result["stream"]["pending"], json!(0), "{method}: {result}");
        }
    }
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_job_queue_answers_503_and_leaves_no_reservation_behind() {
    let lab = Setup::with(&["redis_async"])
        .tune(|c| {
            c.capabilities.jobs.job_queue = 1;
            c.capabilities.jobs.job_workers = 1;
        })
        .start()
        .await;
    let (members, coupon) = lab.members_and_coupon(300, 300).await;
    let replies = lab.issue_all(coupon, &members, "REDIS_ASYNC").await;
    let statuses = statuses(&replies);
    let (accepted, refused) = (
        statuses.get(&202).copied().unwrap_or(0),
        statuses.get(&503).copied().unwrap_or(0),
    );
    assert_eq!(accepted + refused, 300, "{statuses:?}");
    assert!(refused > 0, "the queue of one never filled: {statuses:?}");
    for reply in replies.iter().filter(|r| r.status == 503) {
        reply.fails_as(503, "QUEUE_FULL");
    }

    lab.drained(coupon, accepted as u64).await;
    // Every 202 became a row; every 503 took its reservation back.
    let in_db = lab.issued_members(coupon).await;
    assert_eq!(in_db.len(), accepted);
    assert_eq!(lab.reserved_members(coupon).await, in_db);
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pubsub_without_a_subscriber_loses_the_messages_and_the_result_shows_it() {
    let _turn = pubsub_turn().await;
    let lab = Setup::with(&["redis_pubsub"])
        .tune(|c| c.consumers.in_process = false)
        .own_redis_db()
        .start()
        .await;
    let (members, coupon) = lab.members_and_coupon(20, 20).await;
    for &member in &members {
        lab.issue(coupon, member, "REDIS_PUBSUB").await.expect_ok();
    }
    // Each PUBLISH answered that nobody received it: the witness that no
    // subscriber will confirm these, so nothing was issued and the
    // reservations remain.
    until("the 20 publishes reached nobody", DRAIN, || async {
        let result = lab.result(coupon).await;
        result["accepted"] == json!(20) && result["publishReceivers"] == json!({ "0": 20 })
    })
    .await;
    let result = lab.result(coupon).await;
    assert_eq!(result["publishReceivers"], json!({ "0": 20 }), "{result}");
    assert_eq!(result["pending"], json!(20), "{result}");
    assert_eq!(result["issueRows"], json!(0));
    assert_eq!(
        result["redis"]["redisOnlyMembers"]["count"],
        json!(20),
        "{result}"
    );
    assert_eq!(lab.reserved_members(coupon).await, members);
    lab.finish().await;
}

/// `couponlab consume stream` as a process of its own, claiming quickly.
fn stream_consumer_process(lab: &TestLab) -> Child {
    lab.consumer_process(
        "stream",
        &[
            ("COUPONLAB_STREAM_CLAIM_IDLE_MS", "500"),
            ("COUPONLAB_STREAM_CLAIM_INTERVAL_MS", "200"),
            ("COUPONLAB_DB_POOL_SIZE", "8"),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stream_consumer_killed_mid_drain_loses_nothing_and_writes_nothing_twice() {
    let lab = Setup::with(&["redis_stream"])
        .tune(|c| c.consumers.in_process = false)
        .own_redis_db()
        .start()
        .await;
    const TOTAL: u64 = 1_000;
    let (members, coupon) = lab.members_and_coupon(TOTAL, TOTAL).await;
    for chunk in members.chunks(200) {
        let replies = lab.issue_all(coupon, chunk, "REDIS_STREAM").await;
        assert!(replies.iter().all(|r| r.status == 202));
    }
    // No consumer yet: the stream owes every entry, none delivered.
    let waiting = lab.result(coupon).await;
    assert_eq!(waiting["stream"]["undelivered"], json!(TOTAL), "{waiting}");
    assert_eq!(waiting["stream"]["pending"], json!(0), "{waiting}");

    let mut consumer = stream_consumer_process(&lab);
    until("the consumer has confirmed some", DRAIN, || async {
        lab.issue_rows(coupon).await >= 50
    })
    .await;
    consumer.kill().await.unwrap();
    let at_kill = lab.issue_rows(coupon).await;
    assert!(
        at_kill < TOTAL as usize,
        "the drain finished before the kill; nothing was tested"
    );

    let consumer = stream_consumer_process(&lab);
    let result = lab.drained(coupon, TOTAL).await;
    assert_eq!(result["issueRows"], json!(TOTAL), "{result}");
    assert_eq!(result["distinctMembers"], json!(TOTAL));
    assert_eq!(result["issuedCount"], json!(TOTAL));
    assert_eq!(lab.issued_members(coupon).await, members);
    assert_eq!(result["stream"]["pending"], json!(0), "{result}");
    assert_eq!(result["stream"]["undelivered"], json!(0), "{result}");

    stops_cleanly_on_sigterm(consumer).await;
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_that_always_fails_is_dead_lettered_after_three_deliveries() {
    let lab = Setup::with(&["redis_stream"])
        .tune(|c| {
            c.capabilities.sql.lock_wait_timeout_s = 1;
            c.consumers.claim_idle_ms = 300;
            c.consumers.claim_interval_ms = 100;
        })
        .own_redis_db()
        .start()
        .await;
    let (members, coupon) = lab.members_and_coupon(1, 5).await;

    // Hold the coupon row: every confirm waits out the lock and fails.
    let blocker = hold_coupon_row(&lab, coupon).await;
    lab.issue(coupon, members[0], "REDIS_STREAM")
        .await
        .expect_ok();

    until("the entry is dead-lettered", DRAIN, || async {
        lab.redis_query::<u64>(redis::cmd("XLEN").arg(ISSUE_STREAM.dead_letters(coupon)))
            .await
            > 0
    })
    .await;
    blocker.rollback().await.unwrap();

    let dead: Vec<(String, Vec<(String, String)>)> = lab
        .redis_query(
            redis::cmd("XRANGE")
                .arg(ISSUE_STREAM.dead_letters(coupon))
                .arg("-")
                .arg("+"),
        )
        .await;
    assert_eq!(dead.len(), 1);
    let fields: BTreeMap<String, String> = dead[0].1.iter().cloned().collect();
    assert_eq!(fields["memberId"], members[0].to_string());
    assert_eq!(fields["deliveries"], "3", "{fields:?}");
    // The reservation is gone, nothing was issued, and the outcome is recorded.
    until("the outcome is recorded", DRAIN, || async {
        lab.result(coupon).await["pending"] == json!(0)
    })
    .await;
    assert!(lab.reserved_members(coupon).await.is_empty());
    assert!(lab.issued_members(coupon).await.is_empty());
    let result = lab.result(coupon).await;
    assert_eq!(
        result["asyncResults"],
        json!({ "UNAVAILABLE": 1 }),
        "{result}"
    );
    assert_eq!(result["stream"]["deadLetters"], json!(1), "{result}");
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_delivery_is_acked_without_a_second_row() {
    let lab = Setup::with(&["redis_stream"]).own_redis_db().start().await;
    let (members, coupon) = lab.members_and_coupon(1, 5).await;
    lab.issue(coupon, members[0], "REDIS_STREAM")
        .await
        .expect_ok();
    lab.drained(coupon, 1).await;

    // The same request delivered again, as after a crash between commit and
    // XACK: added to the coupon's stream.
    let stream = ISSUE_STREAM.key(coupon);
    let mut redis = lab.redis.clone();
    let again: String = redis::cmd("XADD")
        .arg(&stream)
        .arg("*")
        .arg(&[
            "memberId",
            &members[0].to_string(),
            "couponId",
            &coupon.to_string(),
            "method",
            "REDIS_STREAM",
        ])
        .query_async(&mut redis)
        .await
        .unwrap();
    until("the redelivery is read and acked", DRAIN, || async {
        let groups: Vec<Vec<redis::Value>> = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(&stream)
            .query_async(&mut redis.clone())
            .await
            .unwrap();
        let last_delivered = groups[0]
            .iter()
            .skip_while(|v| **v != redis::Value::BulkString(b"last-delivered-id".to_vec()))
            .nth(1);
        let read = last_delivered == Some(&redis::Value::BulkString(again.clone().into_bytes()));
        read && lab.result(coupon).await["stream"]["pending"] == json!(0)
    })
    .await;
    // The first outcome stands; the redelivery added no row.
    assert_eq!(
        lab.result(coupon).await["asyncResults"],
        json!({ "ISSUED": 1 })
    );
    assert_eq!(lab.issued_members(coupon).await, members);
    assert_eq!(lab.reserved_members(coupon).await, members);
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_still_reports_what_was_accepted_and_its_stream() {
    let mut lab = Setup::with(&["redis_stream"]).own_redis_db().start().await;
    let (members, coupon) = lab.members_and_coupon(5, 5).await;
    for &member in &members {
        assert_eq!(lab.issue(coupon, member, "REDIS_STREAM").await.status, 202);
    }
    lab.drained(coupon, 5).await;

    lab.restart().await;
    // The new process answered nothing for this coupon; Redis remembers,
    // the requests too: the record its predecessor published as it stopped.
    let result = lab.result(coupon).await;
    let hosts = &result["requests"]["hosts"]["merged"];
    assert_eq!(hosts[0]["requests"], json!(0), "{result}");
    assert_eq!(hosts[1]["requests"], json!(5), "{result}");
    assert_eq!(result["requests"]["total"], json!(5), "{result}");
    assert_eq!(result["accepted"], json!(5), "{result}");
    assert_eq!(result["asyncResults"], json!({ "ISSUED": 5 }), "{result}");
    assert_eq!(result["stream"]["pending"], json!(0), "{result}");
    assert_eq!(result["stream"]["length"], json!(5), "{result}");
    assert_eq!(result["redis"]["setSize"], json!(5), "{result}");
    lab.finish().await;
}
