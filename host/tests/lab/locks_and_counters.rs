//! The methods engineers reach for elsewhere — an atomic UPDATE, a Redis
//! counter, a Redis spin lock — under real concurrency, and the spin
//! lock's lesson: a lease that runs out mid-work lets a second holder in.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::json;

use crate::common::{Setup, outcome};

/// What each method may answer a member besides 200: 409 for a second ask
/// or no stock, 503 LOCK_WAIT_TIMEOUT for a lock not free in time.
const REFUSALS: [&str; 3] = ["SOLD_OUT", "DUPLICATE", "LOCK_WAIT_TIMEOUT"];

/// 400 members, each asking twice at once, on a total of 80: exactly 80
/// issued, one per member, and every member told 200 holds its row.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_issues_exactly_the_total_to_members_asking_twice() {
    let lab = Setup::with(&["atomic_update", "redis_incr", "redis_spin_lock"])
        .tune(|c| c.max_instances = 1_000)
        .start()
        .await;
    for method in ["ATOMIC_UPDATE", "REDIS_INCR", "REDIS_SPIN_LOCK"] {
        let members = lab.members(400).await;
        let coupon = lab.coupon(80).await;
        let twice: Vec<u64> = members.iter().flat_map(|m| [*m, *m]).collect();
        let replies = lab.issue_all(coupon, &twice, method).await;
        let mut told_issued = BTreeSet::new();
        for (member, reply) in twice.iter().zip(&replies) {
            match reply.status.as_u16() {
                200 => assert!(
                    told_issued.insert(*member),
                    "{method}: member {member} told 200 twice"
                ),
                _ => {
                    let said = outcome(reply);
                    assert!(
                        REFUSALS.contains(&said.as_str()),
                        "{method}: {}",
                        reply.body
                    );
                }
            }
        }
        let issued: BTreeSet<u64> = lab.issued_members(coupon).await.into_iter().collect();
        assert_eq!(issued.len(), 80, "{method}: rows");
        assert_eq!(issued, told_issued, "{method}: the rows are the 200s");
        let result = lab.result(coupon).await;
        assert_eq!(result["issuedCount"], json!(80), "{method}: {result}");
        assert_eq!(result["duplicateMembers"], json!(0), "{method}: {result}");
    }
    lab.finish().await;
}

/// A critical section that outlives REDIS_SPIN_LOCK's 3 s lease — here
/// because another session holds the coupon row, so the unguarded
/// `issued_count + 1` waits — lets a second request take the lock while the
/// first still works: both read the stock left, and a coupon of 1 is
/// issued twice. The first finds its lock gone when it releases it
/// (`leaseExpired`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spin_lock_whose_lease_runs_out_mid_work_has_two_holders_and_over_issues() {
    let lab = Setup::with(&["redis_spin_lock"]).start().await;
    let members = lab.members(2).await;
    let coupon = lab.coupon(1).await;
    let mut holding = lab.db.begin().await.unwrap();
    sqlx::query("SELECT id FROM coupons WHERE id = ? FOR UPDATE")
        .bind(coupon)
        .execute(&mut *holding)
        .await
        .unwrap();

    let first = lab.issue(coupon, members[0], "REDIS_SPIN_LOCK");
    let second = async {
        // While the first holds the lock, shortly before its lease ends.
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        lab.issue(coupon, members[1], "REDIS_SPIN_LOCK").await
    };
    let release = async {
        // Once the second has taken the lock the lease gave up.
        tokio::time::sleep(Duration::from_millis(4_500)).await;
        holding.rollback().await.unwrap();
    };
    let (first, second, ()) = tokio::join!(first, second, release);

    for reply in [&first, &second] {
        assert_eq!(reply.status.as_u16(), 200, "{}", reply.body);
    }
    assert_eq!(
        lab.issued_members(coupon).await,
        members,
        "both held the lock: two rows"
    );
    let result = lab.result(coupon).await;
    assert_eq!(result["overIssued"], json!(1), "{result}");
    assert_eq!(
        result["requests"]["byMethod"]["REDIS_SPIN_LOCK"]["labels"]["leaseExpired"],
        json!({ "1": 1 }),
        "{result}"
    );
    lab.finish().await;
}
