//! The canary and the servers it depends on: a lab started while Redis is
//! down proves and serves what never touches Redis, and the rest once
//! Redis answers; a second lab on another Redis database hears only its own
//! messages; a component whose 202s are never confirmed is refused within
//! the canary's bound while the others serve; and two labs are never let
//! onto one Redis database.

use std::time::{Duration, Instant};

use couponlab::canary::LIMIT;
use couponlab::config::{CanaryMode, Config};
use serde_json::{Value, json};
use sqlx::Executor;

use crate::canary::served;
use crate::common::{MYSQL, PUBSUB, Setup, TestLab, until};
use crate::redis_server::RedisServer;

fn with_canary(components: &[&'static str]) -> Setup {
    Setup::with(components).tune(|config| config.canary = CanaryMode::Changed)
}

async fn listing(lab: &TestLab) -> Value {
    lab.get("/lab/strategies").await.ok().clone()
}

/// Waits until `method` serves; answers how long that took.
async fn until_served(lab: &TestLab, method: &str, limit: Duration) -> Duration {
    until(&format!("{method} serves"), limit, || async {
        served(&listing(lab).await, method).is_some()
    })
    .await
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
    let took = until_served(&lab, "PESSIMISTIC", Duration::from_secs(20)).await;
    eprintln!("PESSIMISTIC proved and served {took:?} after a start with Redis down");
    // REDIS_LUA's canary has no verdict while Redis is away: it awaits.
    tokio::time::sleep(Duration::from_secs(3)).await;
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
    let members = lab.members(2).await;
    let coupon = lab.coupon(1).await;
    let reply = lab.issue(coupon, members[0], "PESSIMISTIC").await;
    assert_eq!(reply.status, 200, "{}", reply.body);

    redis.start_again();
    let took = until_served(&lab, "REDIS_LUA", Duration::from_secs(20)).await;
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
    let _turn = PUBSUB.lock().await;
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
    until_served(&lab, "PESSIMISTIC", LIMIT).await;
    until_served(&lab, "REDIS_LUA", LIMIT).await;
    let bound = LIMIT + lab.config.request_timeout() + Duration::from_secs(5);
    until("REDIS_STREAM_ATOMIC is refused", bound, || async {
        listing(&lab).await["rejected"]
            .as_array()
            .is_some_and(|r| !r.is_empty())
    })
    .await;
    let strategies = listing(&lab).await;
    let reason = strategies["rejected"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("every 202 is confirmed"), "{strategies}");
    eprintln!("refused {:?} after the start: {reason}", started.elapsed());
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
