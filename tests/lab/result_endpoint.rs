//! The result endpoint's request figures on a scripted scenario whose every
//! answer is known: outcomes, an out-of-turn win, latencies; and the result
//! of a 202 method as the contract's types read it.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use couponlab_contract::results::{CouponResult, RedisFigures, StreamSummary};
use serde_json::{Value, json};

use crate::common::{Setup, TestLab};

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// The result of `coupon` as the load runner reads it: a field renamed on
/// either side fails here by its name.
async fn read(lab: &TestLab, coupon: u64) -> (CouponResult, Value) {
    let served = lab.result(coupon).await;
    let read = serde_json::from_value(served.clone()).unwrap_or_else(|err| {
        panic!("the result does not read as the contract's: {err}\n{served}")
    });
    (read, served)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_result_reports_a_scripted_scenario_exactly() {
    let lab = Setup::with(&["test_script"]).start().await;
    let coupon = lab.coupon(10).await;
    let started_us = now_us();
    // Arrival order, outcome, milliseconds the component takes.
    let script = [
        ("ISSUED", 10),
        ("SOLD_OUT", 20),
        ("ISSUED", 30),
        ("DUPLICATE", 40),
        ("ISSUED", 50),
    ];
    for (outcome, ms) in script {
        let reply = lab
            .post(
                &format!("/lab/coupons/{coupon}/issue"),
                json!({ "memberId": 1, "method": "TEST_SCRIPT", "idempotencyKey": outcome, "quantity": ms }),
            )
            .await;
        assert_eq!(
            reply.status.is_success(),
            outcome == "ISSUED",
            "{outcome}: {}",
            reply.body
        );
    }

    let (result, served) = read(&lab, coupon).await;
    let requests = &result.requests;
    assert_eq!(requests.total, 5);
    let expected = [("ISSUED", 3), ("SOLD_OUT", 1), ("DUPLICATE", 1)]
        .map(|(outcome, count)| (outcome.to_string(), count));
    assert_eq!(requests.by_outcome, BTreeMap::from(expected));
    // Arrival 2 was refused as sold out; arrivals 3 and 5 were issued after it.
    let fairness = &requests.fairness;
    assert_eq!(fairness.served_after_earlier_sold_out, 2, "{served}");
    let refused_at = fairness.first_sold_out_arrival_us.unwrap();
    assert!(
        refused_at > started_us && refused_at < now_us(),
        "{served}, requests between {started_us} and now"
    );
    // Five requests that take at least 10..50 ms in the component: the median
    // is at least the 30 ms one, the max at least the 50 ms one. The server's
    // own time comes on top and depends on the machine's load, so only the
    // lower bounds are known.
    let latency = requests.latency_ms.unwrap();
    assert!(latency.p50 >= 30.0, "{latency:?}");
    assert!(latency.max >= 50.0, "{latency:?}");
    assert!(
        latency.p50 <= latency.p95 && latency.p95 <= latency.max,
        "{latency:?}"
    );
    assert_eq!(requests.by_method["TEST_SCRIPT"].latency_ms, latency);
    // A method that reserves nothing in Redis: no Redis section, no 202s.
    assert_eq!((result.redis, result.confirmations), (None, None));
    assert!(result.invariants.never_over_issued && result.invariants.one_per_member);
    lab.finish().await;
}

/// A 202 method's result read through the contract: its confirmations, its
/// stream and its Redis section; the sections the host builds from the
/// contract's own types write again exactly as served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_202_method_s_result_reads_through_the_contract_s_types() {
    let lab = Setup::with(&["redis_stream_atomic"])
        .own_redis_db()
        .start()
        .await;
    let (members, coupon) = lab.members_and_coupon(30, 10).await;
    let replies = lab.issue_all(coupon, &members, "REDIS_STREAM_ATOMIC").await;
    lab.result_once_confirmed(coupon, &replies).await;
    let (result, served) = read(&lab, coupon).await;
    let confirmations = result.confirmations.as_ref().expect("its 202s");
    assert_eq!(confirmations.accepted, 10, "{served}");
    assert_eq!(confirmations.async_results.get("ISSUED"), Some(&10));
    assert_eq!((result.pending(), result.issue_rows), (0, 10));
    assert!(confirmations.confirmation_lag_ms.is_some(), "{served}");
    let stream: &StreamSummary = result.stream.as_ref().expect("its stream");
    assert_eq!((stream.length, stream.owed()), (10, 0), "{served}");
    let redis: &RedisFigures = result.redis.as_ref().expect("its Redis section");
    let comparison = redis.comparison.as_ref().expect("a readable set");
    assert_eq!(comparison.set_size, 10);
    assert_eq!(comparison.stranded_members.count, 0);
    for (section, written) in [
        ("redis", serde_json::to_value(&result.redis).unwrap()),
        ("stream", serde_json::to_value(&result.stream).unwrap()),
        (
            "invariants",
            serde_json::to_value(&result.invariants).unwrap(),
        ),
    ] {
        assert_eq!(written, served[section], "{section}");
    }
    assert_eq!(result.engine.name, served["engine"]["name"]);
    lab.finish().await;
}
