//! Request traces and the anomalies they explain, against real servers: a
//! READ_COMMITTED burst that over-issues names a stale-read witness for
//! every row past the total; REDIS_SET_ONLY's over-reservation names the
//! requests whose SCARD and SADD interleaved; the methods that keep the
//! total name no isolation anomaly under the same burst; a trace lists its
//! calls in order, and a 202's trace links its confirmation's.

use serde_json::Value;

use crate::common::{Setup, TestLab};

/// Anomalies of the isolation kinds (out of turn is fairness, which any
/// method under a burst may show).
const ISOLATION: [&str; 5] = [
    "lost-update",
    "check-then-act",
    "acked-lost",
    "refused-but-issued",
    "stranded-stock",
];

fn anomalies<'a>(result: &'a Value, kind: &str) -> Vec<&'a Value> {
    result["anomalies"]
        .as_array()
        .expect("the result lists its anomalies")
        .iter()
        .filter(|anomaly| anomaly["kind"] == kind)
        .collect()
}

fn int(value: &Value) -> i64 {
    value
        .as_i64()
        .unwrap_or_else(|| panic!("not an integer: {value}"))
}

/// Bursts of `members` on fresh coupons of `total` with `method` until one
/// ends as `until` says (at most five); that coupon and its result.
async fn burst_until(
    lab: &TestLab,
    method: &str,
    total: u64,
    members: &[u64],
    until: impl Fn(&Value) -> bool,
) -> (u64, Value) {
    for _ in 0..5 {
        let coupon = lab.coupon(total).await;
        lab.issue_all(coupon, members, method).await;
        let result = lab.result(coupon).await;
        if until(&result) {
            return (coupon, result);
        }
    }
    panic!(
        "{method}: five bursts of {} on {total} never did it",
        members.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_row_past_the_total_has_a_stale_read_witness_under_read_committed() {
    let lab = Setup::with(&["read_committed", "pessimistic", "redis_lua"])
        .start()
        .await;
    let members = lab.members(60).await;
    let (_, result) = burst_until(&lab, "READ_COMMITTED", 5, &members, |r| {
        int(&r["overIssued"]) > 0
    })
    .await;
    let over = int(&result["overIssued"]);
    let lost = anomalies(&result, "lost-update");
    assert_eq!(
        lost.len() as i64,
        over,
        "one witness a row past the total: {result:#}"
    );
    for anomaly in lost {
        assert_eq!(anomaly["taxonomy"], "G-single");
        let witnesses = anomaly["witnesses"].as_array().unwrap();
        assert!(witnesses.len() >= 2, "a pair at least: {anomaly:#}");
        let stale = &witnesses[0];
        assert_eq!(stale["role"], "stale-read");
        for witness in witnesses {
            // Committed, having read a count below the total, at READ COMMITTED.
            assert_eq!(witness["outcome"], "ISSUED");
            assert!(int(&witness["read"]["issued_count"]) < 5, "{witness}");
            assert_eq!(witness["isolation"], "READ COMMITTED");
            assert!(int(&witness["readAtUs"]) < int(&witness["wroteAtUs"]));
        }
        for between in &witnesses[1..] {
            // It committed while the stale reader was between its read
            // and its commit: the two overlapped.
            assert_eq!(between["role"], "committed-between");
            assert!(int(&between["wroteAtUs"]) > int(&stale["readAtUs"]));
            assert!(int(&between["wroteAtUs"]) < int(&stale["wroteAtUs"]));
        }
    }
    // The same burst on the methods that keep the total: no anomaly of
    // isolation.
    for method in ["PESSIMISTIC", "REDIS_LUA"] {
        let coupon = lab.coupon(5).await;
        lab.issue_all(coupon, &members, method).await;
        let result = lab.result(coupon).await;
        assert_eq!(result["overIssued"], 0, "{method}");
        for kind in ISOLATION {
            assert!(anomalies(&result, kind).is_empty(), "{method}: {result:#}");
        }
    }
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_set_only_over_reservations_are_witnessed_by_interleaved_scard_and_sadd() {
    let lab = Setup::with(&["redis_set_only"]).start().await;
    let members = lab.members(200).await;
    let (coupon, result) = burst_until(&lab, "REDIS_SET_ONLY", 10, &members, |r| {
        !anomalies(r, "check-then-act").is_empty()
    })
    .await;
    assert_eq!(result["overIssued"], 0, "the database guard kept the total");
    for anomaly in anomalies(&result, "check-then-act") {
        let witnesses = anomaly["witnesses"].as_array().unwrap();
        let stale = &witnesses[0];
        assert!(
            int(&stale["read"]["reply"]) < 10,
            "its SCARD read below the total"
        );
        assert!(witnesses.len() >= 2, "{anomaly:#}");
        for between in &witnesses[1..] {
            // Its SADD landed between the other's SCARD and SADD.
            assert!(int(&between["wroteAtUs"]) > int(&stale["readAtUs"]));
            assert!(int(&between["wroteAtUs"]) < int(&stale["wroteAtUs"]));
        }
    }
    // The traces filtered by the anomaly are its witnesses, and their calls
    // show the SCARD before the SADD.
    let listed = lab
        .get(&format!(
            "/lab/coupons/{coupon}/traces?anomaly=check-then-act&limit=1000"
        ))
        .await;
    let traces = listed.expect_ok()["traces"].as_array().unwrap().clone();
    assert!(!traces.is_empty());
    for trace in &traces {
        let ops: Vec<&str> = trace["calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|call| call["op"].as_str().unwrap())
            .collect();
        let scard = ops.iter().position(|op| *op == "SCARD").expect("a SCARD");
        let sadd = ops.iter().position(|op| *op == "SADD").expect("an SADD");
        assert!(scard < sadd, "{ops:?}");
    }
    lab.finish().await;
}

/// The ops of a trace's calls with their row counts, in order.
fn calls(trace: &Value) -> Vec<(String, Option<u64>)> {
    trace["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|call| {
            (
                call["op"].as_str().unwrap().to_string(),
                call["rows"].as_u64(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_trace_lists_its_calls_in_order_and_a_202_links_its_confirmation() {
    let lab = Setup::with(&["redis_lua", "redis_stream_atomic"])
        .own_redis_db()
        .start()
        .await;
    let (members, coupon) = lab.members_and_coupon(2, 5).await;
    lab.issue(coupon, members[0], "REDIS_LUA").await.expect_ok();
    let listed = lab
        .get(&format!(
            "/lab/coupons/{coupon}/traces?outcome=issued&method=redis_lua"
        ))
        .await;
    let traces = listed.expect_ok()["traces"].as_array().unwrap().clone();
    assert_eq!(traces.len(), 1);
    let served = calls(&traces[0]);
    let begin = served
        .iter()
        .position(|(op, _)| op == "BEGIN")
        .expect("BEGIN");
    assert_eq!(served[begin - 1].0, "EVALSHA", "{served:?}");
    let confirm: Vec<(&str, Option<u64>)> = served[begin..]
        .iter()
        .map(|(op, rows)| (op.as_str(), *rows))
        .collect();
    assert_eq!(
        confirm,
        [
            ("BEGIN", None),
            ("INSERT", Some(1)),
            ("UPDATE", Some(1)),
            ("COMMIT", None)
        ]
    );
    assert_eq!(traces[0]["kept"], "served");
    assert_eq!(traces[0]["calls"][begin]["isolation"], "REPEATABLE READ");

    let streamed = lab.coupon(5).await;
    lab.issue(streamed, members[1], "REDIS_STREAM_ATOMIC")
        .await
        .expect_ok();
    lab.drained(streamed, 1).await;
    let listed = lab
        .get(&format!("/lab/coupons/{streamed}/traces?outcome=ACCEPTED"))
        .await;
    let accepted = &listed.expect_ok()["traces"][0];
    assert_eq!(calls(accepted)[0].0, "EVALSHA");
    let confirmation = &accepted["confirmation"];
    assert_eq!(confirmation["kept"], "confirmation", "{accepted:#}");
    assert_eq!(confirmation["memberId"], members[1]);
    assert_eq!(confirmation["outcome"], "ISSUED");
    assert!(
        calls(confirmation)
            .iter()
            .any(|(op, rows)| op == "INSERT" && *rows == Some(1))
    );

    // Bad filters are 400s in the envelope.
    for query in ["limit=0", "limit=1001", "anomaly=phantom", "limit=x"] {
        lab.get(&format!("/lab/coupons/{streamed}/traces?{query}"))
            .await
            .fails_with(400);
    }
    lab.get("/lab/coupons/999999999/traces")
        .await
        .fails_with(404);
    lab.finish().await;
}
