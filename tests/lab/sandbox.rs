//! A component that misbehaves fails its own request, and only that one.

use std::time::{Duration, Instant};

use couponlab_contract::keys;
use futures::future::join_all;

use crate::common::{Setup, TestLab, until, with_call_deadline_ms};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_looping_component_fails_its_own_request_within_the_deadline() {
    let lab = with_call_deadline_ms(&["pessimistic", "test_spin"], 1_000).await;
    let (members, coupon) = lab.members_and_coupon(1, 10).await;

    let started = Instant::now();
    let reply = lab.issue(coupon, members[0], "TEST_SPIN").await;
    let took = started.elapsed();
    let message = reply.fails_with(504);
    assert!(message.starts_with("TIMED_OUT"), "{message}");
    assert!(
        took >= Duration::from_millis(1_000) && took < Duration::from_millis(3_000),
        "took {took:?}"
    );

    lab.issue(coupon, members[0], "PESSIMISTIC")
        .await
        .expect_ok();
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_looping_component_does_not_hold_up_other_requests() {
    let lab = with_call_deadline_ms(&["pessimistic", "test_spin"], 3_000).await;
    let (members, coupon) = lab.members_and_coupon(20, 20).await;

    // A spinning request holds one core until its deadline while twenty
    // ordinary ones come and go on the other.
    let spinning = join_all((0..1).map(|_| lab.issue(coupon, members[0], "TEST_SPIN")));
    let ordinary = async {
        // The ordinary ones come once the spinning call runs.
        until(
            "the spinning call runs",
            Duration::from_secs(10),
            || async { lab.metric("couponlab_instances_in_use").await >= 1.0 },
        )
        .await;
        let started = Instant::now();
        let replies = join_all(members.iter().map(|&m| lab.issue(coupon, m, "PESSIMISTIC"))).await;
        (started.elapsed(), replies)
    };
    let (spun, (took, replies)) = tokio::join!(spinning, ordinary);
    for reply in &replies {
        reply.expect_ok();
    }
    for reply in &spun {
        reply.fails_with(504);
    }
    assert!(
        took < Duration::from_millis(1_500),
        "ordinary requests took {took:?} behind the spinning ones"
    );
    lab.finish().await;
}

/// A server of `components` whose instances may hold 16 MiB of memory, less
/// than TEST_HOG asks for.
async fn with_small_instances(components: &[&'static str]) -> TestLab {
    Setup::with(components)
        .tune(|c| c.strategy_memory_mib = 16)
        .start()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_greedy_component_fails_its_own_request() {
    let lab = with_small_instances(&["pessimistic", "test_hog"]).await;
    let (members, coupon) = lab.members_and_coupon(1, 10).await;

    let started = Instant::now();
    lab.issue(coupon, members[0], "TEST_HOG")
        .await
        .fails_as(500, "FAILED");
    assert!(started.elapsed() < Duration::from_secs(5));

    lab.issue(coupon, members[0], "PESSIMISTIC")
        .await
        .expect_ok();
    lab.finish().await;
}

/// The instance pool keeps linear memory resident between calls (it resets
/// the pages a call touched instead of handing them back to the kernel):
/// what one call left in memory must still be gone for the next, in one
/// heap allocation or in more separate pages than one page scan gathers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_kept_resident_is_reset_for_every_call() {
    let lab = Setup::with(&["test_probe"]).start().await;
    let coupon = lab.coupon(1).await;
    for scenario in ["memory-reset", "scattered-memory-reset"] {
        for _ in 0..20 {
            let reply = lab.issue_keyed(coupon, 1, "TEST_PROBE", scenario).await;
            assert_eq!(reply.expect_ok()["detail"], "found 0", "{scenario}");
        }
    }
    lab.finish().await;
}

/// A greedy component still fails its own call once many ordinary calls
/// have warmed the pool's slots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_greedy_component_fails_after_the_pool_is_warm() {
    let lab = with_small_instances(&["test_hog", "test_probe"]).await;
    let coupon = lab.coupon(1).await;
    for round in 0..3 {
        join_all((0..20).map(|_| lab.issue_keyed(coupon, 1, "TEST_PROBE", "memory-reset")))
            .await
            .iter()
            .for_each(|reply| assert_eq!(reply.expect_ok()["detail"], "found 0"));
        let message = lab
            .issue(coupon, 1, "TEST_HOG")
            .await
            .fails_with(500)
            .to_string();
        assert!(message.starts_with("FAILED"), "round {round}: {message}");
    }
    lab.finish().await;
}

/// Not a pass/fail test: what one call costs the host, without HTTP —
/// instantiating a component and calling it (TEST_BUILD answers at once),
/// then REDIS_LUA on a sold-out coupon (one EVALSHA).
/// `cargo test --release --workspace --test lab -- call_cost_benchmark --ignored --nocapture`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark; run explicitly"]
async fn call_cost_benchmark() {
    use couponlab::runtime::bindings::types::IssueRequest;
    let lab = Setup::with(&["test_build_a", "redis_lua"]).start().await;
    let (members, coupon) = lab.members_and_coupon(2, 1).await;
    lab.issue(coupon, members[0], "REDIS_LUA").await.expect_ok();
    let server = couponlab::Lab::start(lab.config.clone()).await.unwrap();
    let _canaries = couponlab::canary::start(&server).await.unwrap();
    for method in ["TEST_BUILD", "REDIS_LUA"] {
        let strategy = server.registry.get(method).unwrap();
        let request = IssueRequest {
            coupon_id: coupon,
            member_id: members[1],
            duplicate_check: true,
            idempotency_key: None,
            quantity: 1,
        };
        for _ in 0..500 {
            let _ = server.runtime.issue(&strategy, &request).await;
        }
        let calls = 5_000;
        let started = Instant::now();
        for _ in 0..calls {
            let _ = server.runtime.issue(&strategy, &request).await;
        }
        println!(
            "{method}: {:.1} µs a call, one at a time",
            started.elapsed().as_secs_f64() * 1e6 / calls as f64
        );
    }
    let redis = &server.runtime.capabilities().redis;
    let script = include_str!("../../lua/reserve.lua");
    let script_keys = [keys::issued(coupon), keys::total(coupon)];
    let args = [members[1].to_string()];
    let started = Instant::now();
    for _ in 0..5_000 {
        redis.eval(script, &script_keys, &args).await.unwrap();
    }
    println!(
        "the EVALSHA alone: {:.1} µs",
        started.elapsed().as_secs_f64() * 1e6 / 5_000.0
    );
    lab.finish().await;
}
