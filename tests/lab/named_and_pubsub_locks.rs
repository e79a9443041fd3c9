//! MYSQL_NAMED_LOCK's lesson — lock waiters holding the connections the
//! holder needs, from one pool — and REDIS_PUBSUB_LOCK's: waiters woken by
//! the unlock, and a watchdog that keeps the lease while the holder works
//! on a slow database, where REDIS_SPIN_LOCK's lease runs out.

use std::time::Duration;

use serde_json::json;

use crate::common::{Setup, outcome, until};
use crate::locks_and_counters::{SecondWaits, race_past_the_lease};

/// 12 members at once on a total of 12. With the named locks' sessions
/// taken from the components' pool of 4, the first holder's transaction
/// waits for a connection that only the waiters' time-outs give back:
/// requests fail that a pool of its own for the locks lets through.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn named_lock_waiters_exhaust_a_shared_pool_and_not_a_pool_of_their_own() {
    for (lock_pool, all_issued) in [(0, false), (16, true)] {
        let lab = Setup::with(&["mysql_named_lock"])
            .tune(move |c| {
                c.capabilities.sql.db_pool_size = 4;
                c.capabilities.sql.lock_pool_size = lock_pool;
            })
            .start()
            .await;
        let (members, coupon) = lab.members_and_coupon(12, 12).await;
        let replies = lab.issue_all(coupon, &members, "MYSQL_NAMED_LOCK").await;
        let timed_out = replies
            .iter()
            .filter(|reply| outcome(reply) == "LOCK_WAIT_TIMEOUT")
            .count();
        let issued = lab.issued_members(coupon).await.len();
        let said = replies
            .iter()
            .map(|reply| reply.body.to_string())
            .collect::<Vec<_>>()
            .join("\n");
        if all_issued {
            assert_eq!(issued, 12, "a pool of its own for the locks:\n{said}");
        } else {
            assert!(
                issued < 12 && timed_out > 0,
                "one pool: {issued} issued, {timed_out} timed out\n{said}"
            );
        }
        // However each call ended, no lock is left behind.
        let name = format!("coupon:lock:{{{coupon}}}");
        let used = lab
            .number(&format!("SELECT IS_USED_LOCK('{name}') IS NOT NULL"))
            .await;
        assert_eq!(used, 0, "a named lock outlived its call");
        lab.finish().await;
    }
}

/// The critical section outlives the 3 s lease (another session holds the
/// coupon row until the second waits), as in REDIS_SPIN_LOCK's lesson: the watchdog renews
/// the lease, so the second request cannot take the lock meanwhile; it is
/// woken by the unlock message once the first is done, before its own 2 s
/// wait is over, and finds the coupon of 1 sold out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_the_lease_and_the_unlock_wakes_the_waiter() {
    let lab = Setup::with(&["redis_pubsub_lock"]).start().await;
    // The second asks past the first lease, which only the watchdog kept;
    // the row is let go once it listens for the unlock.
    let race = race_past_the_lease(
        &lab,
        "REDIS_PUBSUB_LOCK",
        Duration::from_millis(3_200),
        SecondWaits::OnTheLockChannel,
    )
    .await;

    assert_eq!(race.first.status.as_u16(), 200, "{}", race.first.body);
    assert_eq!(outcome(&race.second), "SOLD_OUT", "{}", race.second.body);
    assert_eq!(lab.issued_members(race.coupon).await, [race.members[0]]);
    let result = lab.result(race.coupon).await;
    assert_eq!(result["overIssued"], json!(0), "{result}");
    let labels = &result["requests"]["byMethod"]["REDIS_PUBSUB_LOCK"]["labels"];
    assert!(labels.get("leaseExpired").is_none(), "{result}");

    // Nobody waits any more: the listener leaves the channel.
    let channel = format!("coupon:lock:channel:{{{}}}", race.coupon);
    until(
        "the lock channel is left",
        Duration::from_secs(5),
        || async {
            let counts: Vec<(String, u64)> = lab
                .redis_query(redis::cmd("PUBSUB").arg("NUMSUB").arg(&channel))
                .await;
            counts.first().is_some_and(|(_, n)| *n == 0)
        },
    )
    .await;
    lab.finish().await;
}
