//! The methods engineers reach for elsewhere — an atomic UPDATE, a Redis
//! counter, a Redis spin lock — under real concurrency, and the spin
//! lock's lesson: a lease that runs out mid-work lets a second holder in.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::json;

use std::process::Stdio;

use reqwest::Method;

use crate::common::{
    Reply, Setup, TestLab, hold_coupon_row, outcome, until, with_call_deadline_ms,
};

/// What each method may answer a member besides 200: 409 for a second ask
/// or no stock, 503 LOCK_WAIT_TIMEOUT for a lock not free in time.
const REFUSALS: [&str; 3] = ["SOLD_OUT", "DUPLICATE", "LOCK_WAIT_TIMEOUT"];

/// 400 members, each asking twice at once, on a total of 80: exactly 80
/// issued, one per member, and every member told 200 holds its row.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_issues_exactly_the_total_to_members_asking_twice() {
    let lab = Setup::with(&[
        "atomic_update",
        "redis_incr",
        "redis_spin_lock",
        "in_process_lock",
        "mysql_named_lock",
        "redis_pubsub_lock",
    ])
    .tune(|c| c.max_instances = 1_000)
    .start()
    .await;
    for method in [
        "ATOMIC_UPDATE",
        "REDIS_INCR",
        "REDIS_SPIN_LOCK",
        "IN_PROCESS_LOCK",
        "MYSQL_NAMED_LOCK",
        "REDIS_PUBSUB_LOCK",
    ] {
        let (members, coupon) = lab.members_and_coupon(400, 80).await;
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
    // The second asks while the first holds the lock, half a second before
    // its lease ends, so its 2 s of trying reach past the lease; the row is
    // let go once the second, holding the lock the lease gave up, waits
    // for the row too.
    let race = race_past_the_lease(
        &lab,
        "REDIS_SPIN_LOCK",
        Duration::from_millis(2_500),
        SecondWaits::AtTheRow,
    )
    .await;

    for reply in [&race.first, &race.second] {
        assert_eq!(reply.status.as_u16(), 200, "{}", reply.body);
    }
    assert_eq!(
        lab.issued_members(race.coupon).await,
        race.members,
        "both held the lock: two rows"
    );
    let result = lab.result(race.coupon).await;
    assert_eq!(result["overIssued"], json!(1), "{result}");
    assert_eq!(
        result["requests"]["byMethod"]["REDIS_SPIN_LOCK"]["labels"]["leaseExpired"],
        json!({ "1": 1 }),
        "{result}"
    );
    lab.finish().await;
}

/// What [`race_past_the_lease`] ran: its coupon of 1, its two members, and
/// how each one's request ended.
pub(crate) struct LeaseRace {
    pub coupon: u64,
    pub members: Vec<u64>,
    pub first: Reply,
    pub second: Reply,
}

/// Where the second request of a [`race_past_the_lease`] is seen waiting
/// before the coupon row is let go.
pub(crate) enum SecondWaits {
    /// At the coupon row, as the first: it holds the lock too.
    AtTheRow,
    /// Subscribed to the lock's channel (`coupon:lock:channel:{id}`), for
    /// the unlock message.
    OnTheLockChannel,
}

/// How long a race waits for a request to be seen where it should be.
const SEEN_WITHIN: Duration = Duration::from_secs(10);

/// Two members ask `method` for a coupon of 1 while another session holds
/// the coupon row, so the first one's critical section (its unguarded
/// `issued_count + 1`) outlasts a 3 s lock lease. The second asks once the
/// first is seen waiting at the row (it holds the lock), and not before
/// `second_at` from the start: where it lands in the lease is the lesson.
/// The row is let go once the second is seen where `second_waits` says.
pub(crate) async fn race_past_the_lease(
    lab: &TestLab,
    method: &str,
    second_at: Duration,
    second_waits: SecondWaits,
) -> LeaseRace {
    let (members, coupon) = lab.members_and_coupon(2, 1).await;
    let holding = hold_coupon_row(lab, coupon).await;
    let started = tokio::time::Instant::now();
    let first = lab.issue(coupon, members[0], method);
    let second_and_release = async {
        lab.until_row_lock_waits(1, SEEN_WITHIN).await;
        tokio::time::sleep_until(started + second_at).await;
        let second = lab.issue(coupon, members[1], method);
        let release = async {
            match second_waits {
                SecondWaits::AtTheRow => lab.until_row_lock_waits(2, SEEN_WITHIN).await,
                SecondWaits::OnTheLockChannel => lock_channel_listened(lab, coupon).await,
            }
            holding.rollback().await.unwrap();
        };
        let (second, ()) = tokio::join!(second, release);
        second
    };
    let (first, second) = tokio::join!(first, second_and_release);
    LeaseRace {
        coupon,
        members,
        first,
        second,
    }
}

/// Waits until a waiter listens on `coupon`'s lock channel.
async fn lock_channel_listened(lab: &TestLab, coupon: u64) {
    let channel = format!("coupon:lock:channel:{{{coupon}}}");
    until(
        "a waiter listens on the lock channel",
        SEEN_WITHIN,
        || async {
            let counts: Vec<(String, u64)> = lab
                .redis_query(redis::cmd("PUBSUB").arg("NUMSUB").arg(&channel))
                .await;
            counts.first().is_some_and(|(_, n)| *n > 0)
        },
    )
    .await;
}

/// IN_PROCESS_LOCK on one host: the second request waits for the first,
/// then finds the coupon sold out. On two hosts, each with its own lock,
/// both run the check-and-insert at once and a coupon of 1 is issued twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_process_lock_holds_on_one_host_and_over_issues_on_two() {
    let lab = Setup::with(&["in_process_lock"]).start().await;
    let other = lab
        .serve_process(&[], Stdio::null, Duration::from_secs(60))
        .await;
    let members = lab.members(4).await;
    let body =
        |member: u64| Some(json!({ "memberId": member, "method": "IN_PROCESS_LOCK" }).to_string());

    for (hosts, issued) in [([&lab.base, &lab.base], 1), ([&lab.base, &other.base], 2)] {
        let coupon = lab.coupon(1).await;
        let path = format!("/lab/coupons/{coupon}/issue");
        let pair = if issued == 1 {
            &members[..2]
        } else {
            &members[2..]
        };
        let holding = hold_coupon_row(&lab, coupon).await;
        let first_body = body(pair[0]);
        let first = lab.request_at(hosts[0], Method::POST, &path, first_body.as_deref());
        // The second asks once the first holds the lock (it waits at the
        // row). The row is let go once the second is seen in its call: on
        // one host waiting for the lock, two instances in use; on two, at
        // the row as well, with a lock of its own.
        let second_and_release = async {
            lab.until_row_lock_waits(1, SEEN_WITHIN).await;
            let second_body = body(pair[1]);
            let second = lab.request_at(hosts[1], Method::POST, &path, second_body.as_deref());
            let release = async {
                if issued == 1 {
                    until("the second waits for the lock", SEEN_WITHIN, || async {
                        lab.metric("couponlab_instances_in_use").await >= 2.0
                    })
                    .await;
                } else {
                    lab.until_row_lock_waits(2, SEEN_WITHIN).await;
                }
                holding.rollback().await.unwrap();
            };
            let (second, ()) = tokio::join!(second, release);
            second
        };
        let (first, second) = tokio::join!(first, second_and_release);
        assert_eq!(first.status.as_u16(), 200, "{}", first.body);
        let rows = lab.issued_members(coupon).await;
        assert_eq!(
            rows.len(),
            issued,
            "{} host(s): {}; rows {rows:?}",
            if issued == 1 { "one" } else { "two" },
            second.body
        );
        if issued == 1 {
            assert_eq!(outcome(&second), "SOLD_OUT", "{}", second.body);
        }
    }
    lab.finish().await;
}

/// A holder whose call ends at its deadline, the lock still taken (its
/// statement waits on a row the test holds), lets the lock go with the
/// call — a process lock, and a MySQL named lock, whose session releases
/// it: the next request takes it and issues.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_is_free_again_when_its_holders_call_ends_at_the_deadline() {
    let lab = with_call_deadline_ms(&["in_process_lock", "mysql_named_lock"], 2_000).await;
    for method in ["IN_PROCESS_LOCK", "MYSQL_NAMED_LOCK"] {
        let (members, coupon) = lab.members_and_coupon(2, 1).await;
        let holding = hold_coupon_row(&lab, coupon).await;
        let started = tokio::time::Instant::now();
        let first = async {
            let reply = lab.issue(coupon, members[0], method).await;
            // The first's call ended at its deadline: the row may go.
            holding.rollback().await.unwrap();
            reply
        };
        // The second asks once the first holds the lock (it waits at the
        // row), a second in, so its 2 s wait for the lock reaches past the
        // first's deadline.
        let second = async {
            lab.until_row_lock_waits(1, SEEN_WITHIN).await;
            tokio::time::sleep_until(started + Duration::from_secs(1)).await;
            let reply = lab.issue(coupon, members[1], method).await;
            (reply, started.elapsed())
        };
        let (first, (second, answered)) = tokio::join!(first, second);
        assert_ne!(
            first.status.as_u16(),
            200,
            "{method}: the first ended at its deadline: {}",
            first.body
        );
        assert_eq!(second.status.as_u16(), 200, "{method}: {}", second.body);
        assert!(
            answered < Duration::from_millis(3_000),
            "{method}: answered after {answered:?}"
        );
        assert_eq!(lab.issued_members(coupon).await, [members[1]], "{method}");
    }
    let metrics = lab.get_text("/metrics").await;
    assert!(
        metrics.contains("couponlab_process_locks_held 0"),
        "{metrics}"
    );
    lab.finish().await;
}
