//! Stage 3: the four Redis reservation methods against real Redis and
//! MariaDB. What atomicity each one really gives under concurrency, the
//! shared confirm step's compensation, WATCH's retries, and Redis being down.

use std::collections::BTreeMap;
use std::time::Duration;

use couponlab_contract::keys;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::common::{REDIS, Setup, TestLab, assert_invariants_hold, outcome};

const COMPONENTS: [&str; 4] = [
    "redis_set_only",
    "redis_multi_exec",
    "redis_watch",
    "redis_lua",
];
const METHODS: [&str; 4] = [
    "REDIS_SET_ONLY",
    "REDIS_MULTI_EXEC",
    "REDIS_WATCH",
    "REDIS_LUA",
];

/// A member id no test ever creates (ids start at 1): what the WATCH tests
/// add to and remove from the set to change it.
const PHANTOM_MEMBER: u64 = 0;

/// How a race of 400 distinct members for a coupon of 60 ended.
struct Race {
    outcomes: BTreeMap<String, u64>,
    /// Members answered 200, sorted.
    answered_issued: Vec<u64>,
    result: Value,
}

/// A server of its own for every Redis method, on which 400 members race
/// for a coupon of 60 with `method`; every answer is checked against the
/// rows, the set and the result.
async fn race_400_for_60(method: &str) -> Race {
    let lab = Setup::with(&COMPONENTS).start().await;
    let (members, coupon) = lab.members_and_coupon(400, 60).await;
    let replies = lab.issue_all(coupon, &members, method).await;

    let mut outcomes = BTreeMap::new();
    let mut answered_issued = Vec::new();
    for (&member, reply) in members.iter().zip(&replies) {
        let outcome = outcome(reply);
        let expected_status = match outcome.as_str() {
            "ISSUED" => 200,
            "SOLD_OUT" | "SOLD_OUT_AT_DB" => 409,
            // REDIS_WATCH giving up after 10 retries.
            "VERSION_CONFLICT" if method == "REDIS_WATCH" => 503,
            other => panic!("{method}: unexpected {other}: {}", reply.body),
        };
        assert_eq!(reply.status.as_u16(), expected_status, "{}", reply.body);
        if outcome == "ISSUED" {
            answered_issued.push(member);
        }
        *outcomes.entry(outcome).or_default() += 1;
    }

    // Every 200 is exactly one row, and nothing else is.
    assert_eq!(
        lab.issued_members(coupon).await,
        answered_issued,
        "{method}"
    );
    // Compensation worked: whatever Redis over-reserved was taken back, so
    // the set is exactly the issued members.
    assert_eq!(
        lab.reserved_members(coupon).await,
        answered_issued,
        "{method}"
    );

    let result = lab.result(coupon).await;
    let issued = answered_issued.len() as u64;
    assert_eq!(result["issueRows"], json!(issued), "{method}");
    assert_eq!(result["issuedCount"], json!(issued), "{method}");
    assert_invariants_hold(&result);
    assert_eq!(
        result["redis"],
        json!({
            "readable": true,
            "setUpAgain": 0,
            "setSize": issued,
            "redisOnlyMembers": { "count": 0, "sample": [] },
            "dbOnlyMembers": { "count": 0, "sample": [] },
            "strandedMembers": { "count": 0, "sample": [] },
        }),
        "{method}"
    );
    let by_outcome: BTreeMap<String, u64> =
        serde_json::from_value(result["requests"]["byMethod"][method]["byOutcome"].clone())
            .unwrap();
    assert_eq!(
        by_outcome, outcomes,
        "{method}: the result counts what was answered"
    );
    lab.finish().await;
    Race {
        outcomes,
        answered_issued,
        result,
    }
}

fn count(race: &Race, outcome: &str) -> u64 {
    race.outcomes.get(outcome).copied().unwrap_or(0)
}

/// How many reservations `method` took back, as `result` counts them.
fn compensations(result: &Value, method: &str) -> u64 {
    result["requests"]["byMethod"][method]["compensations"]
        .as_u64()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_set_only_never_issues_more_than_60_of_400_concurrent_requests() {
    let race = race_400_for_60("REDIS_SET_ONLY").await;
    assert!(
        race.answered_issued.len() <= 60,
        "{} issued",
        race.answered_issued.len()
    );
    // Every reservation the database guard refused was taken back.
    assert_eq!(
        compensations(&race.result, "REDIS_SET_ONLY"),
        count(&race, "SOLD_OUT_AT_DB")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_multi_exec_issues_exactly_60_of_400_concurrent_requests() {
    let race = race_400_for_60("REDIS_MULTI_EXEC").await;
    assert_eq!(race.answered_issued.len(), 60);
    // EXEC serializes the counts, so the database never has to refuse.
    assert_eq!(count(&race, "SOLD_OUT_AT_DB"), 0);
    // SADD ran for every refused request too, so each one took its member back.
    assert_eq!(
        compensations(&race.result, "REDIS_MULTI_EXEC"),
        count(&race, "SOLD_OUT")
    );
    assert_eq!(count(&race, "SOLD_OUT"), 340);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_watch_issues_exactly_60_of_400_concurrent_requests() {
    let race = race_400_for_60("REDIS_WATCH").await;
    assert_eq!(race.answered_issued.len(), 60);
    assert_eq!(count(&race, "SOLD_OUT_AT_DB"), 0);
    assert_eq!(compensations(&race.result, "REDIS_WATCH"), 0);
    let retries = race.result["requests"]["byMethod"]["REDIS_WATCH"]["retries"]
        .as_u64()
        .unwrap();
    // Each give-up spent all ten retries.
    assert!(
        retries >= 10 * count(&race, "VERSION_CONFLICT"),
        "{retries} retries"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_lua_issues_exactly_60_of_400_concurrent_requests() {
    let race = race_400_for_60("REDIS_LUA").await;
    assert_eq!(race.answered_issued.len(), 60);
    assert_eq!(count(&race, "SOLD_OUT"), 340);
    assert_eq!(compensations(&race.result, "REDIS_LUA"), 0);
}

/// A thread that keeps changing a set (SADD then SREM of [`PHANTOM_MEMBER`])
/// from its own connection, so a WATCH on the set sees a change before its
/// EXEC. It sends batches of changes with replies off, each followed by a
/// PING with replies on, and keeps [`Hammer::BACKLOG`] batches queued in
/// Redis: Redis has a change to run even while the thread waits for a CPU.
/// Stopping kills the connection, so nothing queued runs after that.
struct Hammer {
    /// The connection's `CLIENT ID`, to kill it.
    client_id: i64,
    key: String,
    thread: std::thread::JoinHandle<()>,
}

impl Hammer {
    const BACKLOG: usize = 64;

    /// Starts the thread and returns once Redis is running its changes with
    /// a full backlog queued behind.
    async fn start(key: &str) -> Hammer {
        let mut conn = redis::Client::open(format!("{REDIS}/0"))
            .unwrap()
            .get_connection()
            .unwrap();
        let client_id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut conn).unwrap();
        let mut batch = redis::pipe();
        for _ in 0..64 {
            batch.cmd("SADD").arg(key).arg(PHANTOM_MEMBER);
            batch.cmd("SREM").arg(key).arg(PHANTOM_MEMBER);
        }
        batch.cmd("CLIENT").arg("REPLY").arg("ON");
        batch.cmd("PING");
        batch.cmd("CLIENT").arg("REPLY").arg("OFF");
        let batch = batch.get_packed_pipeline();
        let replies_off = redis::cmd("CLIENT")
            .arg("REPLY")
            .arg("OFF")
            .get_packed_command();

        let (primed, is_primed) = tokio::sync::oneshot::channel();
        let thread = std::thread::spawn(move || {
            let mut primed = Some(primed);
            // Sends and reads until `stop` kills the connection: the error
            // that ends the loop is the expected one.
            let _killed = (|| -> redis::RedisResult<()> {
                conn.send_packed_command(&replies_off)?;
                for _ in 0..Self::BACKLOG {
                    conn.send_packed_command(&batch)?;
                }
                loop {
                    // A batch has run when its CLIENT REPLY ON and PING are answered.
                    conn.recv_response()?;
                    conn.recv_response()?;
                    if let Some(primed) = primed.take() {
                        let _ = primed.send(());
                    }
                    conn.send_packed_command(&batch)?;
                }
            })();
        });
        is_primed.await.expect("the hammer ran its first batch");
        Hammer {
            client_id,
            key: key.to_string(),
            thread,
        }
    }

    /// Kills the hammer's connection: Redis frees it at once, so none of
    /// the changes still queued runs afterwards.
    async fn stop(self, lab: &TestLab) {
        let killed: i64 = lab
            .redis_query(
                redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("ID")
                    .arg(self.client_id),
            )
            .await;
        assert_eq!(killed, 1, "the hammer was still connected");
        // A pair cut in half leaves the phantom member behind.
        let _: i64 = lab
            .redis_query(redis::cmd("SREM").arg(&self.key).arg(PHANTOM_MEMBER))
            .await;
        tokio::task::spawn_blocking(move || self.thread.join().unwrap())
            .await
            .unwrap();
    }
}

/// Counts the WATCH commands Redis runs on `key`, as MONITOR reports them.
struct WatchCounter {
    seen: watch::Receiver<Monitored>,
    marker: String,
    task: JoinHandle<()>,
}

/// What MONITOR has shown so far: the WATCHes on the key, and whether the
/// test's marker came by.
#[derive(Clone, Copy, Default)]
struct Monitored {
    watches: u64,
    marker: bool,
}

impl WatchCounter {
    async fn start(key: &str) -> WatchCounter {
        let client = redis::Client::open(format!("{REDIS}/0")).unwrap();
        // MONITOR is on once this returns: no WATCH can be missed.
        let monitor = client.get_async_monitor().await.unwrap();
        let needle = format!("\"WATCH\" \"{key}\"");
        let marker = format!("couponlab-test-monitor-marker-{key}");
        let marker_needle = format!("\"ECHO\" \"{marker}\"");
        let (counted, seen) = watch::channel(Monitored::default());
        let task = tokio::spawn(async move {
            let mut lines = monitor.into_on_message::<String>();
            while let Some(line) = lines.next().await {
                if line.contains(&needle) {
                    counted.send_modify(|seen| seen.watches += 1);
                } else if line.contains(&marker_needle) {
                    counted.send_modify(|seen| seen.marker = true);
                }
            }
        });
        WatchCounter { seen, marker, task }
    }

    /// Waits (at most 10 s) until MONITOR has shown what `shown` asks for.
    async fn until_shown(&self, what: &str, shown: impl Fn(&Monitored) -> bool) {
        let mut seen = self.seen.clone();
        tokio::time::timeout(Duration::from_secs(10), seen.wait_for(shown))
            .await
            .unwrap_or_else(|_| panic!("MONITOR did not show {what} in 10 s"))
            .unwrap();
    }

    /// Waits (at most 10 s) until at least `count` WATCHes were seen.
    async fn reached(&self, count: u64) {
        let what = format!("{count} WATCHes");
        self.until_shown(&what, |seen| seen.watches >= count).await;
    }

    /// Every WATCH Redis ran before now: MONITOR shows commands in the
    /// order Redis runs them, so once it shows a marker sent now, it has
    /// shown each WATCH of a request already answered.
    async fn all_until_now(self, lab: &TestLab) -> u64 {
        let _: String = lab.redis_query(redis::cmd("ECHO").arg(&self.marker)).await;
        self.until_shown("the marker", |seen| seen.marker).await;
        let watches = self.seen.borrow().watches;
        self.task.abort();
        watches
    }
}

/// A REDIS_WATCH server, alone (MONITOR and the hammer load Redis for
/// everyone), with one member and a coupon of 10 whose reservation set the
/// hammer keeps changing while every WATCH on it is counted.
async fn hammered_coupon() -> (TestLab, Vec<u64>, u64, WatchCounter, Hammer) {
    let lab = Setup::with(&["redis_watch"]).alone().start().await;
    let (members, coupon) = lab.members_and_coupon(1, 10).await;
    let key = keys::issued(coupon);
    let watches = WatchCounter::start(&key).await;
    let hammer = Hammer::start(&key).await;
    (lab, members, coupon, watches, hammer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_watch_retries_when_the_set_changes_between_watch_and_exec() {
    let (lab, members, coupon, watches, hammer) = hammered_coupon().await;

    // The set keeps changing while the first attempt runs; the hammer stops
    // once the request has come back for a second WATCH.
    let (reply, ()) = tokio::join!(lab.issue(coupon, members[0], "REDIS_WATCH"), async {
        watches.reached(2).await;
        hammer.stop(&lab).await;
    });

    let answer = reply.expect_ok();
    assert_eq!(answer["outcome"], json!("ISSUED"), "{}", reply.body);
    let retries = answer["retries"].as_u64().unwrap();
    assert!((1..=10).contains(&retries), "{retries} retries");
    let attempts = watches.all_until_now(&lab).await;
    assert_eq!(attempts, retries + 1, "one WATCH per attempt");

    let result = lab.result(coupon).await;
    assert_eq!(
        result["requests"]["byMethod"]["REDIS_WATCH"]["retries"],
        json!(retries)
    );
    assert_eq!(lab.issued_members(coupon).await, members);
    assert_eq!(lab.reserved_members(coupon).await, members);
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_watch_gives_up_with_503_after_10_retries() {
    let (lab, members, coupon, watches, hammer) = hammered_coupon().await;

    let reply = lab.issue(coupon, members[0], "REDIS_WATCH").await;
    hammer.stop(&lab).await;

    let message = reply.fails_with(503);
    assert!(message.starts_with("VERSION_CONFLICT"), "{message}");
    assert!(message.contains("WATCH"), "{message}");
    assert_eq!(
        watches.all_until_now(&lab).await,
        11,
        "the first attempt and 10 retries"
    );

    let result = lab.result(coupon).await;
    assert_eq!(
        result["requests"]["byOutcome"],
        json!({ "VERSION_CONFLICT": 1 })
    );
    assert_eq!(
        result["requests"]["byMethod"]["REDIS_WATCH"]["retries"],
        json!(10)
    );
    // Nothing was reserved or issued.
    assert!(lab.reserved_members(coupon).await.is_empty());
    assert!(lab.issued_members(coupon).await.is_empty());
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_the_database_refuses_is_taken_back() {
    let lab = Setup::with(&COMPONENTS).start().await;
    let members = lab.members(1).await;
    for method in METHODS {
        // The database says sold out while Redis still has room, and does
        // not know the second member.
        let coupon = lab.coupon(5).await;
        lab.assert_database_refuses(coupon, members[0], method)
            .await;

        assert!(lab.reserved_members(coupon).await.is_empty(), "{method}");
        assert!(lab.issued_members(coupon).await.is_empty(), "{method}");
        let result = lab.result(coupon).await;
        assert_eq!(compensations(&result, method), 2, "{method}");
        assert_eq!(
            result["requests"]["byOutcome"],
            json!({ "SOLD_OUT_AT_DB": 1, "UNKNOWN_MEMBER": 1 }),
            "{method}"
        );
    }
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_key_keeps_the_reservation_and_the_result_compares_set_and_rows() {
    let lab = Setup::with(&COMPONENTS).start().await;
    let members = lab.members(2).await;
    for method in METHODS {
        let coupon = lab.coupon(5).await;
        let key = keys::issued(coupon);
        lab.issue(coupon, members[0], method).await.expect_ok();

        // Redis has the reservation: refused before the database.
        let again = lab.issue(coupon, members[0], method).await;
        again.fails_as(409, "DUPLICATE");

        // Redis loses the set: the member is in the database only.
        let _: () = lab.redis_query(redis::cmd("DEL").arg(&key)).await;
        // A member reserved in Redis and never issued.
        let _: () = lab
            .redis_query(redis::cmd("SADD").arg(&key).arg(members[1]))
            .await;
        let result = lab.result(coupon).await;
        assert_eq!(
            result["redis"],
            json!({
                "readable": true,
                "setUpAgain": 0,
                "setSize": 1,
                "redisOnlyMembers": { "count": 1, "sample": [members[1]] },
                "dbOnlyMembers": { "count": 1, "sample": [members[0]] },
                // Reserved with no row and no call in flight: stock nobody can sell.
                "strandedMembers": { "count": 1, "sample": [members[1]] },
            }),
            "{method}"
        );

        // Redis reserves again; the INSERT hits the unique key. The member
        // really has the coupon, so the reservation stays.
        let again = lab.issue(coupon, members[0], method).await;
        again.fails_as(409, "DUPLICATE");
        assert_eq!(lab.reserved_members(coupon).await, members, "{method}");
        assert_eq!(lab.issued_members(coupon).await, [members[0]], "{method}");
        let result = lab.result(coupon).await;
        assert_eq!(result["redis"]["dbOnlyMembers"]["count"], json!(0));
        assert_eq!(compensations(&result, method), 0, "{method}");
    }
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_total_is_re_read_from_the_database_and_set_again() {
    let lab = Setup::with(&COMPONENTS).start().await;
    let members = lab.members(2).await;
    for method in METHODS {
        let coupon = lab.coupon(1).await;
        let total_key = keys::total(coupon);
        let _: () = lab.redis_query(redis::cmd("DEL").arg(&total_key)).await;
        lab.issue(coupon, members[0], method).await.expect_ok();
        let total: Option<String> = lab.redis_query(redis::cmd("GET").arg(&total_key)).await;
        assert_eq!(total.as_deref(), Some("1"), "{method}");
        // The re-read total is the one that counts.
        let sold_out = lab.issue(coupon, members[1], method).await;
        sold_out.fails_as(409, "SOLD_OUT:");
    }
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_gets_503_for_every_redis_method_and_the_server_keeps_answering() {
    // Nothing listens on port 1.
    let lab = Setup::with(&[
        "pessimistic",
        "redis_set_only",
        "redis_multi_exec",
        "redis_watch",
    ])
    .redis_url("redis://127.0.0.1:1/0")
    .start()
    .await;
    let (members, coupon) = lab.members_and_coupon(2, 5).await;
    for method in ["REDIS_SET_ONLY", "REDIS_MULTI_EXEC", "REDIS_WATCH"] {
        let reply = lab.issue(coupon, members[0], method).await;
        let message = reply.fails_with(503);
        assert!(message.starts_with("UNAVAILABLE"), "{method}: {message}");
        assert!(message.contains("Redis"), "{method}: {message}");
    }

    // Other routes still answer, and the result still has its database figures.
    lab.issue(coupon, members[1], "PESSIMISTIC")
        .await
        .expect_ok();
    let listed = lab.get("/lab/strategies").await;
    listed.expect_ok();
    let result = lab.result(coupon).await;
    assert_eq!(result["issueRows"], json!(1));
    assert_eq!(result["redis"]["readable"], json!(false));
    let error = result["redis"]["error"].as_str().unwrap();
    assert!(error.starts_with("Redis could not be read"), "{error}");
    assert_eq!(
        result["requests"]["byOutcome"],
        json!({ "ISSUED": 1, "UNAVAILABLE": 3 })
    );
    lab.finish().await;
}
