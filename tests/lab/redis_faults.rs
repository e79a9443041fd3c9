//! What Redis itself does not bound, and the lab does: a script that never
//! ends, a script that reaches another database, and a Redis that restarts
//! empty. Each test runs its own `redis-server`, which it blocks, shuts
//! down and starts again without touching anyone else's.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{Setup, TestLab, outcome};
use crate::redis_server::{RedisServer, cli};

const HOSTILE: &str = "TEST_HOSTILE";
const DEADLINE: Duration = Duration::from_millis(1_500);

async fn lab_on(redis: &RedisServer, db: u8, components: &[&'static str]) -> TestLab {
    Setup::with(components)
        .redis_url(redis.url(db))
        .tune(|c| c.request_timeout_ms = DEADLINE.as_millis() as u64)
        .start()
        .await
}

/// `redis-cli PING` from another client until it answers PONG; when.
async fn until_pong(port: u16, limit: Duration) -> Instant {
    let started = Instant::now();
    loop {
        let pong = tokio::task::spawn_blocking(move || cli(port, &["ping"]))
            .await
            .unwrap();
        if pong.trim() == "PONG" {
            return Instant::now();
        }
        assert!(
            started.elapsed() < limit,
            "Redis still answers {pong:?} after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn method_figures<'a>(result: &'a Value, method: &str) -> &'a Value {
    &result["requests"]["byMethod"][method]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_script_is_killed_at_its_calls_deadline_and_redis_serves_everyone_again() {
    let redis = RedisServer::start();
    let lab = lab_on(&redis, 0, &["test_hostile", "redis_lua"]).await;
    let members = lab.members(2).await;
    let (looped, other) = (lab.coupon(10).await, lab.coupon(10).await);

    let started = Instant::now();
    let looping = lab.issue_keyed(looped, members[0], HOSTILE, "lua-loop");
    let meanwhile = async {
        // Past the busy threshold: every other client is answered BUSY.
        tokio::time::sleep(Duration::from_millis(800)).await;
        let busy = lab.issue(other, members[1], "REDIS_LUA").await;
        let pong = until_pong(redis.port, DEADLINE + Duration::from_secs(3)).await;
        (busy, pong)
    };
    let (looped_reply, (busy, pong)) = tokio::join!(looping, meanwhile);

    let answered = started.elapsed();
    assert_eq!(looped_reply.status, 504, "{}", looped_reply.body);
    assert!(
        answered >= DEADLINE && answered < DEADLINE + Duration::from_secs(1),
        "the looping call answered after {answered:?}"
    );
    let message = busy.fails_as(503, "UNAVAILABLE");
    assert!(message.contains("busy running a script"), "{message}");
    let serving_again = pong.duration_since(started);
    assert!(
        serving_again < DEADLINE + Duration::from_secs(1),
        "Redis served again only {serving_again:?} after the call started"
    );
    println!(
        "a read-only endless script: Redis answered PONG {serving_again:?} after its call started (deadline {DEADLINE:?})"
    );

    lab.issue(other, members[1], "REDIS_LUA").await.expect_ok();
    let result = lab.result(looped).await;
    assert_eq!(method_figures(&result, HOSTILE)["scriptsKilled"], json!(1));
    let metrics = lab.get_text("/metrics").await;
    assert!(
        metrics.contains("couponlab_redis_scripts_killed_total{method=\"TEST_HOSTILE\"} 1"),
        "{metrics}"
    );
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_that_wrote_and_never_ends_quarantines_its_component_until_redis_is_shut_down() {
    let mut redis = RedisServer::start();
    let lab = lab_on(&redis, 0, &["test_hostile", "redis_lua"]).await;
    let members = lab.members(3).await;
    let (looped, other) = (lab.coupon(10).await, lab.coupon(10).await);

    let reply = lab
        .issue_keyed(looped, members[0], HOSTILE, "lua-write-loop")
        .await;
    assert_eq!(reply.status, 504, "{}", reply.body);

    // Quarantined, with its reason, in the listing and in its answers.
    let listing = lab.get("/lab/strategies").await;
    let hostile = listing.expect_ok()["strategies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["method"] == HOSTILE)
        .cloned()
        .unwrap();
    let reason = hostile["quarantined"]["reason"].as_str().unwrap();
    assert!(reason.contains("UNKILLABLE"), "{reason}");
    let refused = lab.issue_keyed(looped, members[1], HOSTILE, "keys").await;
    let message = refused.fails_as(503, "UNAVAILABLE");
    assert!(message.contains("quarantined"), "{message}");
    println!("a quarantined component's method answers 503: {message}");

    // Redis answers everyone BUSY; what needs no Redis still answers.
    let busy = lab.issue(other, members[1], "REDIS_LUA").await;
    assert!(
        busy.fails_as(503, "UNAVAILABLE")
            .contains("busy running a script")
    );
    lab.members(5).await;
    lab.coupon(3).await;
    lab.get("/lab/coupons").await.expect_ok();
    assert!(cli(redis.port, &["ping"]).contains("BUSY"));

    // The only end Redis allows; the lab serves again without a restart.
    redis.shutdown_nosave();
    let back = redis.start_again();
    lab.until_an_issue_is_served(other, "REDIS_LUA", Duration::from_secs(10))
        .await;
    println!(
        "after SHUTDOWN NOSAVE: REDIS_LUA served {:?} after Redis answered",
        back.elapsed()
    );
    // Still quarantined: only a new file serves it again.
    let refused = lab.issue_keyed(looped, members[2], HOSTILE, "keys").await;
    assert!(refused.fails_as(503, "UNAVAILABLE").contains("quarantined"));
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_reaches_its_own_database_only() {
    let redis = RedisServer::start();
    let lab = lab_on(&redis, 3, &["test_hostile"]).await;
    let (members, coupon) = lab.members_and_coupon(1, 10).await;
    for (attack, word) in [
        ("lua-select", "can't run this command"),
        ("select", "SELECT is not allowed"),
    ] {
        let reply = lab.issue_keyed(coupon, members[0], HOSTILE, attack).await;
        let message = reply.fails_as(503, "UNAVAILABLE");
        assert!(message.contains(word), "{attack}: {message}");
    }
    for db in (0..16).filter(|&db| db != 3) {
        let size = cli(redis.port, &["-n", &db.to_string(), "dbsize"]);
        assert_eq!(size.trim(), "0", "database {db} was written");
    }
    lab.finish().await;
}

/// Issues once with `method` on a coupon of its own; the coupon.
async fn served_once(lab: &TestLab, method: &str) -> u64 {
    let coupon = lab.coupon_for(method, 50).await;
    lab.until_an_issue_is_served(coupon, method, Duration::from_secs(5))
        .await;
    coupon
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restarted_empty_serves_every_kind_of_method_again_within_two_seconds() {
    let mut redis = RedisServer::start();
    let methods = [
        "REDIS_LUA",
        "REDIS_MULTI_EXEC",
        "REDIS_STREAM_ATOMIC",
        "REDIS_LUA_GATE",
    ];
    let lab = lab_on(
        &redis,
        2,
        &[
            "redis_lua",
            "redis_multi_exec",
            "redis_stream_atomic",
            "redis_lua_gate",
        ],
    )
    .await;
    let mut coupons = Vec::new();
    for method in methods {
        coupons.push(served_once(&lab, method).await);
    }

    redis.shutdown_nosave();
    let refused = lab
        .issue(coupons[0], lab.members(1).await[0], "REDIS_LUA")
        .await;
    assert_eq!(outcome(&refused), "UNAVAILABLE", "{}", refused.body);
    let back = redis.start_again();

    for (method, coupon) in methods.into_iter().zip(&coupons) {
        if method == "REDIS_LUA_GATE" {
            // The drop's stock was only in Redis: the operator seeds it again.
            lab.seed_drop(*coupon, 50).await.expect_ok();
        }
        lab.until_an_issue_is_served(*coupon, method, Duration::from_secs(2))
            .await;
        println!(
            "{method}: served again {:?} after Redis answered",
            back.elapsed()
        );
    }
    let since_back = back.elapsed();
    assert!(
        since_back < Duration::from_secs(2) + Duration::from_millis(500),
        "every method served again only {since_back:?} after Redis answered"
    );
    // The stream's consumers came back too: the 202s after the restart are
    // confirmed.
    let result = lab.drained(coupons[2], 1).await;
    assert_eq!(result["asyncResults"]["ISSUED"], json!(1), "{result}");
    let restarts = lab.result(coupons[0]).await;
    assert!(
        restarts["redis"]["setUpAgain"].as_u64().unwrap() >= 1,
        "{restarts}"
    );
    lab.finish().await;
}
