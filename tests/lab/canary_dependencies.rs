//! The canary and the servers it depends on: a lab started while Redis is
//! down proves and serves what never touches Redis, tells a request for
//! the rest why it waits (503, with `Retry-After`), and serves it once
//! Redis answers; a second lab on another Redis database hears only its own
//! messages; a component whose 202s are never confirmed is refused within
//! the canary's bound while the others serve, and a request for it is told
//! why (503, no `Retry-After`); and two labs are never let
//! onto one Redis database.

use std::time::{Duration, Instant};

use couponlab::canary::LIMIT;
use couponlab::config::{CanaryMode, Config};
use serde_json::{Value, json};
use sqlx::Executor;

use crate::canary::served;
use crate::common::{MYSQL, Reply, Setup, TestLab, pubsub_turn, until};
use crate::redis_server::RedisServer;

fn with_canary(components: &[&'static str]) -> Setup {
    Setup::with(components).tune(|config| config.canary = CanaryMode::Changed)
}

async fn listing(lab: &TestLab) -> Value {
    lab.get("/lab/strategies").await.expect_ok().clone()
}

/// An issue request's answer and its `Retry-After` header, which [`Reply`]
/// leaves out.
async fn issue_told_when(
    lab: &TestLab,
    coupon: u64,
    member: u64,
    method: &str,
) -> (Reply, Option<String>) {
    let body = json!({ "memberId": member, "method": method });
    let response = lab
        .client
        .post(format!("{}/lab/coupons/{coupon}/issue", lab.base))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("the server answers");
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|value| value.to_str().unwrap().to_string());
    let status = response.status();
    let body = response.json().await.expect("a JSON envelope");
    (Reply { status, body }, retry_after)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_a_database_method_serves_and_a_redis_one_once_redis_answers() {
    let mut redis = RedisServer::start();
    redis.until_answering();
    redis.kill();
    let lab = with_canary(&["pessimistic", "redis_lua"])
        .redis_url(redis.url(0))
        .start()
        .await;
    let took = lab
        .until_listed_as_serving("PESSIMISTIC", Duration::from_secs(20))
        .await;
    eprintln!("PESSIMISTIC proved and served {took:?} after a start with Redis down");
    let members = lab.members(2).await;
    let coupon = lab.coupon(1).await;

    // REDIS_LUA's canary has no verdict while Redis is away: it awaits,
    // and a request for it is told so, with the canary's reason and when
    // to ask again (before its first canary ends, that it is on trial).
    const WAITING: &str = "REDIS_LUA is waiting for its canary: ";
    let bound = LIMIT + lab.config.request_timeout() + Duration::from_secs(10);
    let started = Instant::now();
    let told = loop {
        let (reply, retry_after) = issue_told_when(&lab, coupon, members[1], "redis_lua").await;
        let message = reply.fails_with(503).to_string();
        assert!(
            reply.body["error"].get("outcome").is_none(),
            "{}",
            reply.body
        );
        assert_eq!(retry_after.as_deref(), Some("2"), "{message}");
        if message.starts_with(WAITING) {
            // The document describes this 503, which carries no outcome.
            let document = crate::openapi::document(&lab).await;
            crate::openapi::conforms(&document, "POST", "/lab/coupons/{couponId}/issue", &reply);
            break message;
        }
        assert!(message.starts_with("REDIS_LUA is on trial"), "{message}");
        assert!(
            started.elapsed() < bound,
            "no canary of REDIS_LUA ended without a verdict within {bound:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(told.contains("failing dependency"), "{told}");
    let (nobody, retry_after) = issue_told_when(&lab, coupon, members[1], "NO_SUCH_METHOD").await;
    assert!(
        nobody.fails_with(400).starts_with("unknown method"),
        "{}",
        nobody.body
    );
    assert_eq!(retry_after, None);

    let waiting = listing(&lab).await;
    assert_eq!(waiting["rejected"], json!([]), "{waiting}");
    assert!(served(&waiting, "REDIS_LUA").is_none(), "{waiting}");
    assert!(
        waiting["awaiting"]
            .as_array()
            .unwrap()
            .iter()
            .any(|file| file.as_str().unwrap().ends_with("redis_lua.wasm")),
        "{waiting}"
    );
    let reply = lab.issue(coupon, members[0], "PESSIMISTIC").await;
    assert_eq!(reply.status, 200, "{}", reply.body);

    redis.start_again();
    let took = lab
        .until_listed_as_serving("REDIS_LUA", Duration::from_secs(20))
        .await;
    eprintln!("REDIS_LUA proved and served {took:?} after Redis answered again");
    assert_eq!(listing(&lab).await["rejected"], json!([]));
    lab.finish().await;
}

/// Pub/Sub channels are the Redis server's, not a database's: a lab on
/// database 0 serving REDIS_PUBSUB must not be taken for the subscriber of
/// a lab on another database, whose canary would then publish before its
/// own subscriber listened, and wait for confirmations that never come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_lab_on_another_redis_database_proves_redis_pubsub_beside_the_first() {
    let _turn = pubsub_turn().await;
    let first = Setup::with(&["redis_pubsub"]).start().await;
    crate::common::subscriber_listening(&first).await;
    let second = with_canary(&["redis_pubsub"]).own_redis_db().start().await;
    let started = Instant::now();
    let proved = second.proved().await;
    assert_eq!(proved["rejected"], json!([]), "{proved}");
    let canary = &served(&proved, "REDIS_PUBSUB").unwrap()["canary"];
    assert_eq!(canary["passed"], true, "{proved}");
    assert!(
        started.elapsed() < LIMIT,
        "{:?}: {proved}",
        started.elapsed()
    );

    // Each lab confirms its own 202s, and only those.
    for lab in [&first, &second] {
        let members = lab.members(3).await;
        let coupon = lab.coupon(3).await;
        for reply in lab.issue_all(coupon, &members, "REDIS_PUBSUB").await {
            assert_eq!(reply.status, 202, "{}", reply.body);
        }
        lab.drained(coupon, 3).await;
        assert_eq!(lab.issue_rows(coupon).await, 3);
    }
    second.finish().await;
    first.finish().await;
}

/// With no stream consumer running, REDIS_STREAM_ATOMIC's 202s are never
/// confirmed: its canary refuses it within the bound, and the components
/// beside it serve while it is on trial.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_whose_confirmations_never_come_is_refused_within_the_bound() {
    let lab = with_canary(&["redis_stream_atomic", "pessimistic", "redis_lua"])
        .own_redis_db()
        .tune(|config| config.consumers.in_process = false)
        .start()
        .await;
    let started = Instant::now();
    lab.until_listed_as_serving("PESSIMISTIC", LIMIT).await;
    lab.until_listed_as_serving("REDIS_LUA", LIMIT).await;
    let bound = LIMIT + lab.config.request_timeout() + Duration::from_secs(5);
    until("REDIS_STREAM_ATOMIC is refused", bound, || async {
        listing(&lab).await["rejected"]
            .as_array()
            .is_some_and(|r| !r.is_empty())
    })
    .await;
    let strategies = listing(&lab).await;
    let reason = strategies["rejected"][0]["reason"].as_str().unwrap();
    eprintln!("refused {:?} after the start: {reason}", started.elapsed());
    // A request for it is told so and why, with no time to ask again:
    // nothing changes until its file does.
    let (members, coupon) = lab.members_and_coupon(1, 1).await;
    let (reply, retry_after) =
        issue_told_when(&lab, coupon, members[0], "REDIS_STREAM_ATOMIC").await;
    let message = reply.fails_with(503);
    assert!(
        message.starts_with("REDIS_STREAM_ATOMIC was refused by its canary"),
        "{message}"
    );
    assert!(message.contains(reason), "{message}");
    assert_eq!(retry_after, None, "{message}");
    assert!(reason.contains("every 202 is confirmed"), "{strategies}");
    lab.finish().await;
}

/// A second lab (another MySQL database) on a Redis database a lab uses
/// refuses to start, naming the other; a second host of the same lab starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_lab_on_the_same_redis_database_refuses_to_start() {
    let lab = Setup::with(&[])
        .own_redis_db()
        .tune(|config| config.share_redis_database = false)
        .start()
        .await;
    let other_host = couponlab::Lab::start(lab.config.clone()).await;
    assert!(other_host.is_ok(), "{:?}", other_host.err());
    drop(other_host);

    let other_database = format!("couponlab_test_{}_other", std::process::id());
    let other_lab = Config {
        database_url: format!("{MYSQL}/{other_database}"),
        ..lab.config.clone()
    };
    let refused = couponlab::Lab::start(other_lab).await;
    let message = format!("{:#}", refused.err().expect("the second lab is refused"));
    assert!(message.contains("in use by another lab"), "{message}");
    assert!(message.contains(&lab.db_name), "{message}");
    lab.db
        .mysql()
        .execute(format!("DROP DATABASE IF EXISTS `{other_database}`").as_str())
        .await
        .unwrap();
    lab.finish().await;
}
