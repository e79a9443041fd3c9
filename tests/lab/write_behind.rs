//! Stages 9-10: write-behind. Redis decides and answers 202; the loader
//! (`couponlab consume write-behind`, or in-process) writes the database in
//! batches; reconcile repairs the database from the Redis set.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use redis::AsyncCommands;
use redis::streams::{StreamInfoGroupsReply, StreamPendingReply, StreamRangeReply};
use serde_json::{Value, json};
use tokio::process::Child;

use couponlab_contract::{WRITE_BEHIND_STREAM, keys};

use crate::common::{
    Reply, Setup, TestLab, assert_accepts_exactly, statuses, stops_cleanly_on_sigterm, until,
};

const COMPONENTS: [&str; 2] = ["redis_write_behind", "redis_write_behind_no_tx"];
const METHODS: [&str; 2] = ["REDIS_WRITE_BEHIND", "REDIS_WRITE_BEHIND_NO_TX"];
/// How long a test waits for the loader.
const DRAIN: Duration = Duration::from_secs(60);

/// A server that runs no loader of its own: the test starts loader
/// processes, and until then what was accepted stays in the stream.
async fn lab_with_loader_processes_only() -> TestLab {
    Setup::with(&COMPONENTS)
        .tune(|c| c.consumers.in_process = false)
        .own_redis_db()
        .start()
        .await
}

/// `couponlab consume write-behind` as a process of its own.
fn loader_process(lab: &TestLab) -> Child {
    lab.consumer_process("write-behind", &[("COUPONLAB_DB_POOL_SIZE", "4")])
}

/// Every row of `coupon` as (member, row id, issued_at): a row written
/// again would change its id or its time.
async fn row_snapshot(lab: &TestLab, coupon: u64) -> Vec<(i64, i64, String)> {
    sqlx::query_as(
        "SELECT member_id, id, CAST(issued_at AS CHAR) FROM coupon_issues \
         WHERE coupon_id = ? ORDER BY member_id",
    )
    .bind(coupon)
    .fetch_all(lab.db.mysql())
    .await
    .unwrap()
}

/// Entries of `coupon`'s stream delivered to the loader and not acked.
async fn pending(lab: &TestLab, coupon: u64) -> usize {
    let reply: redis::RedisResult<StreamPendingReply> = lab
        .redis
        .clone()
        .xpending(WRITE_BEHIND_STREAM.key(coupon), WRITE_BEHIND_STREAM.group)
        .await;
    match reply {
        Ok(reply) => reply.count(),
        Err(err) if err.code() == Some("NOGROUP") => 0,
        Err(err) => panic!("XPENDING failed: {err}"),
    }
}

/// The loader has read every entry of `coupon`'s stream and acked them all.
async fn caught_up(lab: &TestLab, coupon: u64) -> bool {
    let stream = WRITE_BEHIND_STREAM.key(coupon);
    let mut redis = lab.redis.clone();
    let last: StreamRangeReply = redis.xrevrange_count(&stream, "+", "-", 1).await.unwrap();
    let Some(last) = last.ids.first() else {
        return true;
    };
    let groups: redis::RedisResult<StreamInfoGroupsReply> = redis.xinfo_groups(&stream).await;
    let Ok(groups) = groups else {
        return false;
    };
    groups.groups.iter().any(|g| {
        g.name == WRITE_BEHIND_STREAM.group && g.last_delivered_id == last.id && g.pending == 0
    })
}

/// The dead letters of `coupon`'s stream.
async fn dead_letters(lab: &TestLab, coupon: u64) -> Vec<HashMap<String, String>> {
    let dead: StreamRangeReply = lab
        .redis
        .clone()
        .xrange_all(WRITE_BEHIND_STREAM.dead_letters(coupon))
        .await
        .unwrap();
    dead.ids
        .iter()
        .map(|entry| {
            entry
                .map
                .keys()
                .map(|field| (field.clone(), entry.get::<String>(field).unwrap()))
                .collect()
        })
        .collect()
}

async fn reconcile(lab: &TestLab, coupon: u64) -> Reply {
    lab.post(
        &format!("/lab/write-behind/coupons/{coupon}/reconcile"),
        json!({}),
    )
    .await
}

fn ids(list: &Value) -> Vec<u64> {
    list.as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .map(|id| id.as_u64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn both_methods_accept_exactly_the_total_and_the_loader_writes_it() {
    let lab = Setup::with(&COMPONENTS).own_redis_db().start().await;
    let mut coupons = Vec::new();
    for method in METHODS {
        let (members, coupon) = lab.members_and_coupon(400, 100).await;
        coupons.push(coupon);
        let replies = lab.issue_all(coupon, &members, method).await;
        assert_accepts_exactly(&replies, 100, method);
        for reply in replies.iter().filter(|r| r.status == 409) {
            reply.fails_as(409, "SOLD_OUT");
        }

        until(
            "the loader has written every accepted request",
            DRAIN,
            || async { lab.issue_rows(coupon).await == 100 && caught_up(&lab, coupon).await },
        )
        .await;
        let in_db = lab.issued_members(coupon).await;
        assert_eq!(in_db.len(), 100, "{method}");
        assert_eq!(lab.reserved_members(coupon).await, in_db, "{method}");
        let result = lab.result(coupon).await;
        assert_eq!(result["issueRows"], json!(100), "{method}: {result}");
        assert_eq!(result["distinctMembers"], json!(100), "{method}: {result}");
        assert_eq!(
            result["requests"]["byOutcome"],
            json!({ "ACCEPTED": 100, "SOLD_OUT": 300 }),
            "{method}: {result}"
        );
        // The loader writes rows only; the counter is reconcile's to set.
        assert_eq!(result["issuedCount"], json!(0), "{method}: {result}");
        // Every 202 has its outcome: the loader records each load.
        until("every load is recorded", DRAIN, || async {
            lab.result(coupon).await["pending"] == json!(0)
        })
        .await;
        assert_eq!(
            lab.result(coupon).await["asyncResults"],
            json!({ "ISSUED": 100 })
        );

        // An unknown member is refused before Redis is asked anything.
        let coupon = lab.coupon(100).await;
        coupons.push(coupon);
        let unknown = members[399] + 1_000_000;
        let reply = lab.issue(coupon, unknown, method).await;
        reply.fails_as(422, "UNKNOWN_MEMBER");
        assert!(lab.reserved_members(coupon).await.is_empty(), "{method}");
    }
    for coupon in coupons {
        assert!(dead_letters(&lab, coupon).await.is_empty(), "{coupon}");
    }
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconcile_restores_deleted_rows_and_reports_what_redis_lost() {
    let lab = Setup::with(&COMPONENTS).own_redis_db().start().await;
    let (members, coupon) = lab.members_and_coupon(150, 100).await;
    lab.issue_all(coupon, &members[..120], "REDIS_WRITE_BEHIND")
        .await;
    until("the loader has written the 100", DRAIN, || async {
        lab.issue_rows(coupon).await == 100 && caught_up(&lab, coupon).await
    })
    .await;

    // Rows lost in the database: reconcile writes them back from Redis.
    let deleted: Vec<u64> = lab
        .issued_members(coupon)
        .await
        .into_iter()
        .step_by(13)
        .collect();
    for &member in &deleted {
        lab.execute(
            "DELETE FROM coupon_issues WHERE coupon_id = ? AND member_id = ?",
            &[coupon, member],
        )
        .await;
    }
    assert_eq!(lab.issue_rows(coupon).await, 100 - deleted.len());
    let report = reconcile(&lab, coupon).await.expect_ok().clone();
    assert_eq!(ids(&report["inserted"]), deleted, "{report}");
    assert_eq!(report["onlyInDb"], json!([]), "{report}");
    assert_eq!(report["issuedCount"], json!(100), "{report}");
    assert_eq!(report["totalCount"], json!(100), "{report}");
    assert_eq!(report["stockExcess"], json!(0), "{report}");
    assert_eq!(report["restored"], json!([]), "{report}");
    assert_eq!(
        (&report["remainingBefore"], &report["remainingAfter"]),
        (&json!(0), &json!(0)),
        "{report}"
    );
    assert_eq!(report["method"], json!("REDIS_WRITE_BEHIND"), "{report}");
    let result = lab.result(coupon).await;
    assert_eq!(result["issueRows"], json!(100), "{result}");
    assert_eq!(result["issuedCount"], json!(100), "{result}");
    assert_eq!(
        lab.issued_members(coupon).await,
        lab.reserved_members(coupon).await
    );

    // Redis loses members it had (as a restart without persistence or a
    // failover would): their stock is handed out again, and the database
    // ends over the total; reconcile puts the lost members back.
    let lost: Vec<u64> = lab.reserved_members(coupon).await[..5].to_vec();
    let _: u64 = lab
        .redis_query(redis::cmd("SREM").arg(keys::issued(coupon)).arg(&lost))
        .await;
    let latecomers = &members[120..];
    let replies = lab
        .issue_all(coupon, latecomers, "REDIS_WRITE_BEHIND_NO_TX")
        .await;
    assert_eq!(
        statuses(&replies),
        BTreeMap::from([(202, 5), (409, latecomers.len() - 5)])
    );
    until(
        "the loader has written the 5 over-issued",
        DRAIN,
        || async { lab.issue_rows(coupon).await == 105 && caught_up(&lab, coupon).await },
    )
    .await;
    let report = reconcile(&lab, coupon).await.expect_ok().clone();
    assert_eq!(report["inserted"], json!([]), "{report}");
    assert_eq!(ids(&report["onlyInDb"]), lost, "{report}");
    assert_eq!(ids(&report["restored"]), lost, "{report}");
    // The set held 100 (95 kept, 5 latecomers): no room before, and five
    // members beyond the total once the lost are back.
    assert_eq!(
        (&report["remainingBefore"], &report["remainingAfter"]),
        (&json!(0), &json!(-5)),
        "{report}"
    );
    assert_eq!(report["unknownMembers"], json!([]), "{report}");
    assert_eq!(report["issuedCount"], json!(105), "{report}");
    assert_eq!(report["stockExcess"], json!(5), "{report}");
    let refused = lab.issue(coupon, members[149], "REDIS_WRITE_BEHIND").await;
    assert_eq!(
        refused.status, 409,
        "the set is full again: {}",
        refused.body
    );
    let result = lab.result(coupon).await;
    assert_eq!(result["overIssued"], json!(5), "{result}");
    assert_eq!(result["invariants"]["neverOverIssued"], json!(false));

    // Redis holds members no row can be written for (no member row, as
    // after a fuzzed request or a member deleted meanwhile) beside one it
    // can: reconcile writes that one and reports the others, every time.
    let ghosts = [members[149] + 1_000_000, members[149] + 2_000_000];
    let restored = lab.reserved_members(coupon).await[0];
    lab.execute(
        "DELETE FROM coupon_issues WHERE coupon_id = ? AND member_id = ?",
        &[coupon, restored],
    )
    .await;
    let _: u64 = lab
        .redis_query(redis::cmd("SADD").arg(keys::issued(coupon)).arg(&ghosts))
        .await;
    for round in ["first", "again"] {
        let report = reconcile(&lab, coupon).await.expect_ok().clone();
        let inserted = if round == "first" {
            vec![restored]
        } else {
            vec![]
        };
        assert_eq!(ids(&report["inserted"]), inserted, "{round}: {report}");
        assert_eq!(ids(&report["unknownMembers"]), ghosts, "{round}: {report}");
        assert_eq!(report["issuedCount"], json!(105), "{round}: {report}");
    }

    reconcile(&lab, coupon + 1_000).await.fails_with(404);
    lab.finish().await;
}

/// PostgreSQL ends a transaction at its first refused statement ("current
/// transaction is aborted"), where MariaDB rolls back the statement alone:
/// a reconcile that let the foreign key refuse a member with no row wrote
/// none of the members after it, and failed. Here the member with no row
/// lies between members to write back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_on_postgres_writes_every_known_member_and_reports_the_unknown_one() {
    let lab = Setup::with(&COMPONENTS)
        .on_postgres()
        .own_redis_db()
        .start()
        .await;
    let (members, coupon) = lab.members_and_coupon(30, 30).await;
    let replies = lab.issue_all(coupon, &members, "REDIS_WRITE_BEHIND").await;
    assert_eq!(statuses(&replies), BTreeMap::from([(202, 30)]));
    until("the loader has written the 30", DRAIN, || async {
        lab.issue_rows(coupon).await == 30 && caught_up(&lab, coupon).await
    })
    .await;

    // Rows lost in the database, and one member gone with its row: its
    // reservation stays in Redis.
    let restored = [members[3], members[10], members[20], members[27]];
    let gone = members[15];
    for &member in restored.iter().chain([&gone]) {
        lab.execute(
            "DELETE FROM coupon_issues WHERE coupon_id = ? AND member_id = ?",
            &[coupon, member],
        )
        .await;
    }
    lab.execute("DELETE FROM members WHERE id = ?", &[gone])
        .await;
    for round in ["first", "again"] {
        let report = reconcile(&lab, coupon).await.expect_ok().clone();
        let inserted = if round == "first" {
            restored.to_vec()
        } else {
            vec![]
        };
        assert_eq!(ids(&report["inserted"]), inserted, "{round}: {report}");
        assert_eq!(ids(&report["unknownMembers"]), [gone], "{round}: {report}");
        assert_eq!(report["onlyInDb"], json!([]), "{round}: {report}");
        assert_eq!(report["issuedCount"], json!(29), "{round}: {report}");
    }
    let written: Vec<u64> = members.iter().copied().filter(|&m| m != gone).collect();
    assert_eq!(lab.issued_members(coupon).await, written);
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poisoned_entry_is_dead_lettered_after_three_deliveries_and_its_batch_lands() {
    let lab = lab_with_loader_processes_only().await;
    let (members, coupon) = lab.members_and_coupon(20, 50).await;
    lab.issue_all(coupon, &members[..10], "REDIS_WRITE_BEHIND")
        .await;
    // A member that does not exist: its row fails the foreign key, and with
    // it the whole batch's transaction.
    let ghost = members[19] + 1_000_000;
    let poisoned: String = lab
        .redis
        .clone()
        .xadd(
            WRITE_BEHIND_STREAM.key(coupon),
            "*",
            &[
                ("memberId", ghost.to_string()),
                ("couponId", coupon.to_string()),
                ("method", "REDIS_WRITE_BEHIND".to_string()),
                ("acceptedAt", "0".to_string()),
            ],
        )
        .await
        .unwrap();
    lab.issue_all(coupon, &members[10..], "REDIS_WRITE_BEHIND_NO_TX")
        .await;
    // Twenty 202s and not one row: nothing is written on the request path.
    assert_eq!(lab.reserved_members(coupon).await, members);
    assert_eq!(lab.issue_rows(coupon).await, 0);

    // The loader starts with all 21 entries waiting: one batch.
    let loader = loader_process(&lab);
    until("the poisoned entry is dead-lettered", DRAIN, || async {
        !dead_letters(&lab, coupon).await.is_empty()
    })
    .await;
    let dead = dead_letters(&lab, coupon).await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["memberId"], ghost.to_string());
    assert_eq!(dead[0]["originalId"], poisoned);
    assert_eq!(dead[0]["deliveries"], "3", "{dead:?}");
    assert_eq!(lab.issued_members(coupon).await, members);
    until("everything is acked", DRAIN, || caught_up(&lab, coupon)).await;

    stops_cleanly_on_sigterm(loader).await;
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_loader_killed_mid_batch_loses_nothing_and_writes_nothing_twice() {
    let lab = lab_with_loader_processes_only().await;
    const TOTAL: u64 = 2_000;
    let (members, coupon) = lab.members_and_coupon(TOTAL, TOTAL).await;
    for chunk in members.chunks(200) {
        let replies = lab
            .issue_all(coupon, chunk, "REDIS_WRITE_BEHIND_NO_TX")
            .await;
        assert!(replies.iter().all(|r| r.status == 202));
    }

    // A row lock held on one member stops the loader inside the batch that
    // holds it: its transaction is open, its entries delivered, not acked.
    let mut blocker = lab.db.mysql().begin().await.unwrap();
    sqlx::query("INSERT INTO coupon_issues (coupon_id, member_id) VALUES (?, ?)")
        .bind(coupon)
        .bind(members[TOTAL as usize / 2])
        .execute(&mut *blocker)
        .await
        .unwrap();
    let mut loader = loader_process(&lab);
    // The loader waits inside a batch.
    lab.until_row_lock_waits(1, DRAIN).await;
    loader.kill().await.unwrap();
    let held_batch = pending(&lab, coupon).await;
    assert!(
        (1..=100).contains(&held_batch),
        "the loader held {held_batch} entries"
    );
    let first_kill = row_snapshot(&lab, coupon).await;
    assert!(first_kill.len() < TOTAL as usize);
    blocker.rollback().await.unwrap();

    // Killed again, wherever it is this time: reading, writing, or between
    // its commit and its XACK.
    let mut loader = loader_process(&lab);
    until("the restarted loader has written more", DRAIN, || async {
        lab.issue_rows(coupon).await >= first_kill.len() + 300
    })
    .await;
    loader.kill().await.unwrap();
    let second_kill = row_snapshot(&lab, coupon).await;

    let mut loader = loader_process(&lab);
    until("the loader has written everything", DRAIN, || async {
        lab.issue_rows(coupon).await == TOTAL as usize && caught_up(&lab, coupon).await
    })
    .await;
    let all = row_snapshot(&lab, coupon).await;
    let members_in_db: Vec<u64> = all.iter().map(|(m, _, _)| *m as u64).collect();
    assert_eq!(members_in_db, members);
    let rows_now: BTreeSet<_> = all.iter().collect();
    for row in first_kill.iter().chain(&second_kill) {
        assert!(rows_now.contains(row), "row {row:?} was written again");
    }

    // The same entries delivered once more after their commit (what a loader
    // dying between COMMIT and XACK leaves): acked, no row touched.
    let stream = WRITE_BEHIND_STREAM.key(coupon);
    let mut redis = lab.redis.clone();
    let again: StreamRangeReply = redis.xrange_count(&stream, "-", "+", 150).await.unwrap();
    for entry in &again.ids {
        let fields: Vec<(String, String)> = entry
            .map
            .keys()
            .map(|field| (field.clone(), entry.get::<String>(field).unwrap()))
            .collect();
        let _: String = redis.xadd(&stream, "*", &fields).await.unwrap();
    }
    until("the copies are read and acked", DRAIN, || {
        caught_up(&lab, coupon)
    })
    .await;
    assert_eq!(row_snapshot(&lab, coupon).await, all);
    assert!(dead_letters(&lab, coupon).await.is_empty());
    loader.kill().await.unwrap();
    lab.finish().await;
}
