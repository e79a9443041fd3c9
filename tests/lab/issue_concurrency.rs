//! The two invariants under real concurrency, for every method that
//! promises to keep them.

use std::collections::BTreeMap;

use futures::future::join_all;
use serde_json::json;

use crate::common::{Setup, assert_invariants_hold};

/// 500 distinct members race for a coupon of 100.
async fn exactly_the_total_is_issued(method: &str) {
    let lab = Setup::with(&["pessimistic", "redis_lua", "atomic_update", "redis_incr"])
        .start()
        .await;
    let (members, coupon) = lab.members_and_coupon(500, 100).await;

    let replies = join_all(
        members
            .iter()
            .map(|&member| lab.issue(coupon, member, method)),
    )
    .await;

    let mut statuses = BTreeMap::new();
    let mut answered_issued = Vec::new();
    for (member, reply) in members.iter().zip(&replies) {
        *statuses.entry(reply.status.as_u16()).or_insert(0) += 1;
        match reply.status.as_u16() {
            200 => {
                assert_eq!(reply.expect_ok()["outcome"], json!("ISSUED"));
                answered_issued.push(*member);
            }
            409 => {
                reply.fails_with(409);
            }
            other => panic!("unexpected {other}: {}", reply.body),
        }
    }
    assert_eq!(
        statuses,
        BTreeMap::from([(200, 100), (409, 400)]),
        "{method}"
    );

    // Every 200 is exactly one row, and nothing else is.
    assert_eq!(lab.issued_members(coupon).await, answered_issued);

    let result = lab.result(coupon).await;
    assert_eq!(result["totalCount"], json!(100));
    assert_eq!(result["issuedCount"], json!(100));
    assert_eq!(result["issueRows"], json!(100));
    assert_eq!(result["distinctMembers"], json!(100));
    assert_eq!(result["overIssued"], json!(0));
    assert_invariants_hold(&result);
    assert_eq!(result["requests"]["total"], json!(500));
    assert_eq!(
        result["requests"]["byOutcome"],
        json!({ "ISSUED": 100, "SOLD_OUT": 400 })
    );
    assert_eq!(result["requests"]["byMethod"][method]["total"], json!(500));
    if method == "REDIS_INCR" {
        let tag = format!("{{{coupon}}}");
        let counted: u64 = lab
            .redis_query(redis::cmd("GET").arg(format!("coupon:count:{tag}")))
            .await;
        assert_eq!(counted, 100, "the counter after the spike");
        assert_eq!(lab.reserved_members(coupon).await, answered_issued);
    }
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pessimistic_issues_exactly_the_total_under_500_concurrent_requests() {
    exactly_the_total_is_issued("PESSIMISTIC").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_lua_issues_exactly_the_total_under_500_concurrent_requests() {
    exactly_the_total_is_issued("REDIS_LUA").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn atomic_update_issues_exactly_the_total_under_500_concurrent_requests() {
    exactly_the_total_is_issued("ATOMIC_UPDATE").await;
}

/// And once the spike is over, every refused request gave its unit back:
/// the counter equals the reservations, which equal the rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_incr_issues_exactly_the_total_under_500_concurrent_requests() {
    exactly_the_total_is_issued("REDIS_INCR").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_lua_leaves_the_redis_set_equal_to_the_issued_members() {
    let lab = Setup::with(&["redis_lua"]).start().await;
    let (members, coupon) = lab.members_and_coupon(300, 50).await;
    // Every member asks twice at once: duplicates race the stock too.
    let requests = members
        .iter()
        .chain(&members)
        .map(|&member| lab.issue(coupon, member, "REDIS_LUA"));
    let replies = join_all(requests).await;
    let issued = replies.iter().filter(|r| r.status == 200).count();
    assert_eq!(issued, 50);
    let in_db = lab.issued_members(coupon).await;
    assert_eq!(in_db.len(), 50);
    assert_eq!(lab.reserved_members(coupon).await, in_db);
    lab.finish().await;
}
