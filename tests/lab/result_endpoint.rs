//! The result endpoint's request figures on a scripted scenario whose every
//! answer is known: outcomes, an out-of-turn win, latencies.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::json;

use crate::common::Setup;

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
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

    let requests = &lab.result(coupon).await["requests"];
    assert_eq!(requests["total"], json!(5));
    assert_eq!(
        requests["byOutcome"],
        json!({ "ISSUED": 3, "SOLD_OUT": 1, "DUPLICATE": 1 })
    );
    // Arrival 2 was refused as sold out; arrivals 3 and 5 were issued after it.
    let fairness = &requests["fairness"];
    assert_eq!(
        fairness["servedAfterEarlierSoldOut"],
        json!(2),
        "{fairness}"
    );
    let refused_at = fairness["firstSoldOutArrivalUs"].as_u64().unwrap();
    assert!(
        refused_at > started_us && refused_at < now_us(),
        "{fairness}, requests between {started_us} and now"
    );
    // Five requests that take at least 10..50 ms in the component: the median
    // is at least the 30 ms one, the max at least the 50 ms one. The server's
    // own time comes on top and depends on the machine's load, so only the
    // lower bounds are known.
    let latency = &requests["latencyMs"];
    let figure = |name: &str| latency[name].as_f64().unwrap();
    assert!(figure("p50") >= 30.0, "{latency}");
    assert!(figure("max") >= 50.0, "{latency}");
    assert!(
        figure("p50") <= figure("p95") && figure("p95") <= figure("max"),
        "{latency}"
    );
    assert_eq!(requests["byMethod"]["TEST_SCRIPT"]["latencyMs"], *latency);
    lab.finish().await;
}
