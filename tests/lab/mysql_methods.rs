//! Stages 1 and 2, the database-only methods: which keep the invariants under
//! real concurrency, and each MySQL error they meet, produced for real and
//! mapped to its outcome and status.
//!
//! Races that must end one exact way are staged with a lock of the test's
//! own: the test holds the coupon row, lets two requests run until both are
//! waiting on it, then lets go. Both requests have read the row by then (or
//! both queue to read it), whatever the machine's speed.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::future::join_all;
use serde_json::{Value, json};
use sqlx::{MySql, Transaction};

use crate::common::{self, Reply, Setup, TestLab, assert_invariants_hold, hold_coupon_row};

pub(crate) const COMPONENTS: [&str; 7] = [
    "atomic_update",
    "read_committed",
    "repeatable_read",
    "serializable",
    "pessimistic",
    "optimistic",
    "optimistic_retry",
];

const METHODS: [&str; 6] = [
    "READ_COMMITTED",
    "REPEATABLE_READ",
    "SERIALIZABLE",
    "PESSIMISTIC",
    "OPTIMISTIC",
    "OPTIMISTIC_RETRY",
];

/// How each method may answer a race of distinct members; anything else is a bug.
fn expected_outcomes(method: &str) -> &'static [&'static str] {
    match method {
        "READ_COMMITTED" | "REPEATABLE_READ" | "PESSIMISTIC" => &["ISSUED", "SOLD_OUT"],
        "SERIALIZABLE" => &["ISSUED", "SOLD_OUT", "DEADLOCK", "LOCK_WAIT_TIMEOUT"],
        "OPTIMISTIC" | "OPTIMISTIC_RETRY" => &["ISSUED", "SOLD_OUT", "VERSION_CONFLICT"],
        other => panic!("no expectations for {other}"),
    }
}

async fn issue(
    lab: &TestLab,
    coupon: u64,
    member: u64,
    method: &str,
    duplicate_check: bool,
) -> Reply {
    lab.post(
        &format!("/lab/coupons/{coupon}/issue"),
        json!({ "memberId": member, "method": method, "duplicateCheck": duplicate_check }),
    )
    .await
}

/// The outcome a reply names, checking the envelope and the status the
/// contract gives that outcome on the way.
fn outcome(reply: &Reply) -> String {
    let outcome = common::outcome(reply);
    let status = match outcome.as_str() {
        "ISSUED" => 200,
        "SOLD_OUT" | "DUPLICATE" => 409,
        "DEADLOCK" | "LOCK_WAIT_TIMEOUT" | "VERSION_CONFLICT" => 503,
        other => panic!("unexpected outcome {other}: {}", reply.body),
    };
    assert_eq!(reply.status.as_u16(), status, "{}", reply.body);
    outcome
}

fn message(reply: &Reply) -> &str {
    reply.body["error"]["message"].as_str().unwrap_or_default()
}

/// Rows of `coupon` per member, straight from the table.
async fn rows_per_member(lab: &TestLab, coupon: u64) -> BTreeMap<u64, usize> {
    let mut rows = BTreeMap::new();
    for member in lab.issued_members(coupon).await {
        *rows.entry(member).or_default() += 1;
    }
    rows
}

struct Race {
    rows: usize,
    outcomes: BTreeMap<String, u64>,
    retries_answered: u64,
    result: Value,
}

/// 300 distinct members ask for a coupon of 50 at once, and every answer is
/// checked against the rows: each 2xx is exactly one row, no member has two.
async fn race_300_for_50(method: &str) -> Race {
    let lab = Setup::with(&COMPONENTS).start().await;
    let (members, coupon) = lab.members_and_coupon(300, 50).await;
    let replies = join_all(
        members
            .iter()
            .map(|&member| issue(&lab, coupon, member, method, true)),
    )
    .await;

    let mut outcomes = BTreeMap::new();
    let mut answered_issued = Vec::new();
    let mut retries_answered = 0;
    for (member, reply) in members.iter().zip(&replies) {
        let outcome = outcome(reply);
        assert!(
            expected_outcomes(method).contains(&outcome.as_str()),
            "{method}: {}",
            reply.body
        );
        if reply.status.is_success() {
            answered_issued.push(*member);
            retries_answered += reply.expect_ok()["retries"].as_u64().unwrap();
        }
        *outcomes.entry(outcome).or_default() += 1;
    }

    let rows_by_member = rows_per_member(&lab, coupon).await;
    assert!(
        rows_by_member.values().all(|&n| n == 1),
        "{method}: {rows_by_member:?}"
    );
    let issued_members: Vec<u64> = rows_by_member.keys().copied().collect();
    assert_eq!(
        issued_members, answered_issued,
        "{method}: 2xx answers vs rows"
    );

    let rows = issued_members.len();
    let result = lab.result(coupon).await;
    let rows_json = json!(rows);
    assert_eq!(result["issueRows"], rows_json, "{method}");
    assert_eq!(result["distinctMembers"], rows_json, "{method}");
    assert_eq!(result["duplicateMembers"], json!(0), "{method}");
    assert_eq!(
        result["overIssued"],
        json!(rows.saturating_sub(50)),
        "{method}"
    );
    // Every method adds one to the counter per committed row.
    assert_eq!(result["issuedCount"], rows_json, "{method}");
    assert_eq!(result["countMismatch"], json!(0), "{method}");
    assert_eq!(result["requests"]["total"], json!(300), "{method}");
    assert_eq!(
        result["requests"]["byOutcome"],
        serde_json::to_value(&outcomes).unwrap(),
        "{method}"
    );
    lab.finish().await;
    Race {
        rows,
        outcomes,
        retries_answered,
        result,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pessimistic_issues_exactly_50_of_50_to_300_concurrent_members() {
    let race = race_300_for_50("PESSIMISTIC").await;
    assert_eq!(race.rows, 50, "{:?}", race.outcomes);
    assert_eq!(race.result["invariants"]["neverOverIssued"], json!(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn optimistic_retry_issues_exactly_50_of_50_to_300_concurrent_members() {
    let race = race_300_for_50("OPTIMISTIC_RETRY").await;
    assert_eq!(race.rows, 50, "{:?}", race.outcomes);
    let method = &race.result["requests"]["byMethod"]["OPTIMISTIC_RETRY"];
    // The result counts every retry, including those of requests that gave up.
    assert!(method["retries"].as_u64().unwrap() >= race.retries_answered);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn serializable_never_exceeds_50_of_50_under_300_concurrent_members() {
    let race = race_300_for_50("SERIALIZABLE").await;
    assert!(race.rows <= 50, "{:?}", race.outcomes);
    assert_eq!(race.result["invariants"]["neverOverIssued"], json!(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn optimistic_never_exceeds_50_of_50_under_300_concurrent_members() {
    let race = race_300_for_50("OPTIMISTIC").await;
    assert!(race.rows <= 50, "{:?}", race.outcomes);
    assert_eq!(race.result["invariants"]["neverOverIssued"], json!(true));
}

/// The lesson of stage 1: these may over-issue, and the result must say by
/// how much. They never issue fewer than the total: they refuse only when
/// the committed counter reached it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn read_committed_and_repeatable_read_issue_at_least_50_and_report_any_excess() {
    for method in ["READ_COMMITTED", "REPEATABLE_READ"] {
        let race = race_300_for_50(method).await;
        assert!(race.rows >= 50, "{method}: {:?}", race.outcomes);
        assert_eq!(
            race.result["invariants"]["neverOverIssued"],
            json!(race.rows == 50),
            "{method}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_method_leaves_two_rows_for_a_member_who_asks_twice_at_once() {
    let lab = Setup::with(&COMPONENTS).start().await;
    let members = lab.members(60).await;
    for method in METHODS {
        let coupon = lab.coupon(1_000).await;
        // No member check for the isolation methods: only the UNIQUE key is left.
        let requests = members
            .iter()
            .chain(&members)
            .map(|&member| issue(&lab, coupon, member, method, false));
        let replies = join_all(requests).await;
        let mut issued_answers = BTreeMap::<u64, usize>::new();
        for (member, reply) in members.iter().chain(&members).zip(&replies) {
            let outcome = outcome(reply);
            assert!(
                outcome == "DUPLICATE" || expected_outcomes(method).contains(&outcome.as_str()),
                "{method}: {}",
                reply.body
            );
            if reply.status.is_success() {
                *issued_answers.entry(*member).or_default() += 1;
            }
        }
        let rows = rows_per_member(&lab, coupon).await;
        assert!(rows.values().all(|&n| n == 1), "{method}: {rows:?}");
        assert_eq!(issued_answers, rows, "{method}: 2xx answers vs rows");
    }
    lab.finish().await;
}

/// Connections of this test's server running a statement that starts with
/// `statement`. While the test holds the coupon row, a statement that needs
/// the row's lock cannot finish: running means waiting. (PROCESSLIST rather
/// than INNODB_TRX: InnoDB refreshes that view only after 100 ms without a
/// reader, so polling it can keep it stale.)
async fn running(hold: &mut Transaction<'static, MySql>, statement: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
         WHERE DB = DATABASE() AND INFO LIKE CONCAT(?, '%')",
    )
    .bind(statement)
    .fetch_one(&mut **hold)
    .await
    .unwrap()
}

/// The statement on which each method waits for the held coupon row: plain
/// reads do not wait for it, locking reads do.
fn blocked_at(method: &str) -> &'static str {
    match method {
        "SERIALIZABLE" | "PESSIMISTIC" => "SELECT total_count",
        _ => "UPDATE coupons",
    }
}

/// Two members ask at once while the test holds the coupon row; the test
/// lets go once both requests wait on a lock. Plain reads do not wait for
/// the row, so READ COMMITTED, REPEATABLE READ and the optimistic methods
/// have read it and wait at their UPDATE; SERIALIZABLE and PESSIMISTIC wait
/// to read it, and are let in together.
async fn two_at_once_behind_a_held_row(
    lab: &TestLab,
    coupon: u64,
    members: &[u64],
    method: &str,
    duplicate_check: bool,
) -> [Reply; 2] {
    let mut hold = hold_coupon_row(lab, coupon).await;
    let release = async move {
        let started = Instant::now();
        loop {
            let waiting = running(&mut hold, blocked_at(method)).await;
            if waiting == 2 {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "{method}: {waiting} requests wait on the held row"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        hold.commit().await.unwrap();
    };
    let (first, second, ()) = tokio::join!(
        issue(lab, coupon, members[0], method, duplicate_check),
        issue(lab, coupon, members[1], method, duplicate_check),
        release
    );
    [first, second]
}

async fn staged_lab() -> TestLab {
    // Lock waits here last as long as the staging takes, never until a timeout.
    Setup::with(&COMPONENTS)
        .tune(|c| c.capabilities.sql.lock_wait_timeout_s = 30)
        .start()
        .await
}

fn sorted_outcomes(replies: &[Reply]) -> Vec<String> {
    let mut outcomes: Vec<String> = replies.iter().map(outcome).collect();
    outcomes.sort();
    outcomes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn read_committed_and_repeatable_read_over_issue_when_both_read_before_either_writes() {
    let lab = staged_lab().await;
    let members = lab.members(2).await;
    for method in ["READ_COMMITTED", "REPEATABLE_READ"] {
        let coupon = lab.coupon(1).await;
        let replies = two_at_once_behind_a_held_row(&lab, coupon, &members, method, true).await;
        assert_eq!(sorted_outcomes(&replies), ["ISSUED", "ISSUED"], "{method}");
        let result = lab.result(coupon).await;
        assert_eq!(result["totalCount"], json!(1));
        assert_eq!(result["issueRows"], json!(2), "{method}");
        assert_eq!(result["issuedCount"], json!(2), "{method}");
        assert_eq!(result["overIssued"], json!(1), "{method}");
        assert_eq!(result["countMismatch"], json!(0), "{method}");
        assert_eq!(
            result["invariants"],
            json!({ "neverOverIssued": false, "onePerMember": true, "countMatchesRows": true }),
            "{method}"
        );
    }
    lab.finish().await;
}

/// The same race under SERIALIZABLE: both reads take the row's shared lock,
/// and the real MySQL deadlock (1213) comes back as 503 DEADLOCK.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn serializable_turns_the_race_into_a_deadlock_answered_503() {
    let lab = staged_lab().await;
    let members = lab.members(2).await;
    // With the member check the shared locks also cover the issue rows' gap;
    // without it only the coupon row is shared: a deadlock either way.
    for duplicate_check in [true, false] {
        let coupon = lab.coupon(1).await;
        let replies =
            two_at_once_behind_a_held_row(&lab, coupon, &members, "SERIALIZABLE", duplicate_check)
                .await;
        assert_eq!(sorted_outcomes(&replies), ["DEADLOCK", "ISSUED"]);
        let (winner, victim) = if replies[0].status == 200 {
            (members[0], &replies[1])
        } else {
            (members[1], &replies[0])
        };
        let message = message(victim);
        assert!(message.starts_with("DEADLOCK: deadlock:"), "{message}");
        assert!(message.contains("1213"), "{message}");
        assert_eq!(lab.issued_members(coupon).await, [winner]);
        let result = lab.result(coupon).await;
        assert_eq!(result["overIssued"], json!(0));
        assert_eq!(
            result["requests"]["byOutcome"],
            json!({ "ISSUED": 1, "DEADLOCK": 1 })
        );
    }
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn optimistic_answers_503_version_conflict_to_the_loser_while_stock_is_left() {
    let lab = staged_lab().await;
    let (members, coupon) = lab.members_and_coupon(2, 5).await;
    let replies = two_at_once_behind_a_held_row(&lab, coupon, &members, "OPTIMISTIC", true).await;
    assert_eq!(sorted_outcomes(&replies), ["ISSUED", "VERSION_CONFLICT"]);
    let loser = replies.iter().find(|r| r.status == 503).unwrap();
    let message = message(loser);
    assert!(
        message.starts_with("VERSION_CONFLICT: optimistic version conflict"),
        "{message}"
    );
    // The loser wrote nothing.
    assert_eq!(lab.issued_members(coupon).await.len(), 1);
    let result = lab.result(coupon).await;
    assert_eq!(result["issuedCount"], json!(1));
    assert_eq!(
        result["requests"]["byOutcome"],
        json!({ "ISSUED": 1, "VERSION_CONFLICT": 1 })
    );
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn optimistic_retry_issues_to_the_loser_on_its_second_attempt() {
    let lab = staged_lab().await;
    let (members, coupon) = lab.members_and_coupon(2, 5).await;
    let replies =
        two_at_once_behind_a_held_row(&lab, coupon, &members, "OPTIMISTIC_RETRY", true).await;
    assert_eq!(sorted_outcomes(&replies), ["ISSUED", "ISSUED"]);
    let mut retries: Vec<u64> = replies
        .iter()
        .map(|r| r.expect_ok()["retries"].as_u64().unwrap())
        .collect();
    retries.sort();
    assert_eq!(retries, [0, 1]);
    assert_eq!(lab.issued_members(coupon).await, members);
    let result = lab.result(coupon).await;
    assert_eq!(result["issuedCount"], json!(2));
    assert_eq!(
        result["requests"]["byMethod"]["OPTIMISTIC_RETRY"]["retries"],
        json!(1)
    );
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pessimistic_queues_the_race_and_refuses_the_second_as_sold_out() {
    let lab = staged_lab().await;
    let (members, coupon) = lab.members_and_coupon(2, 1).await;
    let replies = two_at_once_behind_a_held_row(&lab, coupon, &members, "PESSIMISTIC", true).await;
    assert_eq!(sorted_outcomes(&replies), ["ISSUED", "SOLD_OUT"]);
    assert_eq!(lab.result(coupon).await["issueRows"], json!(1));
    lab.finish().await;
}

/// A row held longer than `innodb_lock_wait_timeout`: the real 1205 comes
/// back as 503 LOCK_WAIT_TIMEOUT from every method, and nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_row_held_past_the_lock_wait_timeout_answers_503_from_every_method() {
    let lab = Setup::with(&COMPONENTS)
        .tune(|c| c.capabilities.sql.lock_wait_timeout_s = 1)
        .start()
        .await;
    let members = lab.members(METHODS.len() as u64).await;
    let coupon = lab.coupon(10).await;
    let hold = hold_coupon_row(&lab, coupon).await;
    let replies = join_all(
        METHODS
            .iter()
            .zip(&members)
            .map(|(method, &member)| issue(&lab, coupon, member, method, true)),
    )
    .await;
    hold.rollback().await.unwrap();
    for (method, reply) in METHODS.iter().zip(&replies) {
        assert_eq!(outcome(reply), "LOCK_WAIT_TIMEOUT", "{method}");
        let message = message(reply);
        assert!(
            message.starts_with("LOCK_WAIT_TIMEOUT: lock wait timeout:"),
            "{method}: {message}"
        );
        assert!(message.contains("1205"), "{method}: {message}");
    }
    assert!(lab.issued_members(coupon).await.is_empty());
    let result = lab.result(coupon).await;
    assert_eq!(result["issuedCount"], json!(0));
    assert_eq!(
        result["requests"]["byOutcome"],
        json!({ "LOCK_WAIT_TIMEOUT": METHODS.len() })
    );
    lab.finish().await;
}

/// `duplicateCheck: false` skips the member check, so a second coupon for a
/// member reaches the INSERT, and the real duplicate key (1062) is a 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_member_check_the_duplicate_key_answers_409() {
    let lab = Setup::with(&COMPONENTS).start().await;
    let members = lab.members(1).await;
    for method in ["READ_COMMITTED", "REPEATABLE_READ", "SERIALIZABLE"] {
        let coupon = lab.coupon(10).await;
        issue(&lab, coupon, members[0], method, true)
            .await
            .expect_ok();

        let checked = issue(&lab, coupon, members[0], method, true).await;
        let message = checked.fails_with(409);
        assert!(
            message.starts_with("DUPLICATE: member"),
            "{method}: {message}"
        );

        let unchecked = issue(&lab, coupon, members[0], method, false).await;
        let message = unchecked.fails_with(409);
        // The database's key refused it, told without its text.
        assert!(
            message.starts_with("DUPLICATE: member") && message.contains("unique key"),
            "{method}: {message}"
        );
        assert!(!message.contains("1062"), "{method}: {message}");

        assert_eq!(lab.issued_members(coupon).await, members, "{method}");
        assert_eq!(
            lab.result(coupon).await["issuedCount"],
            json!(1),
            "{method}"
        );
    }
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_method_answers_the_same_member_twice_and_unknown_ids_per_contract() {
    let lab = Setup::with(&COMPONENTS).start().await;
    let members = lab.members(1).await;
    for method in METHODS {
        let coupon = lab.coupon(10).await;
        assert_eq!(
            outcome(&lab.issue(coupon, members[0], method).await),
            "ISSUED"
        );
        assert_eq!(
            outcome(&lab.issue(coupon, members[0], method).await),
            "DUPLICATE"
        );
        let unknown_member = lab.issue(coupon, 999_999_999, method).await;
        unknown_member.fails_as(422, "UNKNOWN_MEMBER");
        let unknown_coupon = lab.issue(coupon + 999_999, members[0], method).await;
        unknown_coupon.fails_as(404, "UNKNOWN_COUPON");
        assert_eq!(lab.issued_members(coupon).await, members, "{method}");
    }
    lab.finish().await;
}

/// Over-issue written straight into the tables: the result reports rows
/// beyond the total, and the counter's disagreement with the rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_result_reports_over_issue_as_rows_minus_total() {
    let lab = Setup::with(&[]).start().await;
    let members = lab.members(5).await;
    let over = lab.coupon(3).await;
    let within = lab.coupon(3).await;
    for (coupon, holders) in [(over, &members[..]), (within, &members[..2])] {
        for &member in holders {
            lab.execute(
                "INSERT INTO coupon_issues (coupon_id, member_id) VALUES (?, ?)",
                &[coupon, member],
            )
            .await;
        }
    }
    for (coupon, issued_count) in [(over, 4), (within, 2)] {
        lab.execute(
            "UPDATE coupons SET issued_count = ? WHERE id = ?",
            &[issued_count, coupon],
        )
        .await;
    }

    let result = lab.result(over).await;
    assert_eq!(result["totalCount"], json!(3));
    assert_eq!(result["issueRows"], json!(5));
    assert_eq!(result["overIssued"], json!(2));
    assert_eq!(result["issuedCount"], json!(4));
    assert_eq!(result["countMismatch"], json!(-1));
    assert_eq!(result["duplicateMembers"], json!(0));
    assert_eq!(
        result["invariants"],
        json!({ "neverOverIssued": false, "onePerMember": true, "countMatchesRows": false })
    );

    let result = lab.result(within).await;
    assert_eq!(result["overIssued"], json!(0));
    assert_eq!(result["countMismatch"], json!(0));
    assert_invariants_hold(&result);
    lab.finish().await;
}
