//! Clients that hang up change nothing: a burst of issue requests whose
//! clients close their sockets a few milliseconds after sending, then
//! ordinary clients for the same coupon. Every method must still sell the
//! coupon out exactly, answer the ordinary clients as if the hang-ups had
//! been ordinary too, and leave its reservation record equal to the rows.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use futures::future::join_all;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::common::{Reply, Setup, TestLab, outcome, pubsub_turn, subscriber_listening};

/// Every method, with the component that serves it.
pub const SYNC_METHODS: [(&str, &str); 22] = [
    ("READ_COMMITTED", "read_committed"),
    ("REPEATABLE_READ", "repeatable_read"),
    ("SERIALIZABLE", "serializable"),
    ("PESSIMISTIC", "pessimistic"),
    ("OPTIMISTIC", "optimistic"),
    ("OPTIMISTIC_RETRY", "optimistic_retry"),
    ("REDIS_SET_ONLY", "redis_set_only"),
    ("REDIS_MULTI_EXEC", "redis_multi_exec"),
    ("REDIS_WATCH", "redis_watch"),
    ("REDIS_LUA", "redis_lua"),
    ("REDIS_LUA_GATE", "redis_lua_gate"),
    ("REDIS_LUA_SHARDED", "redis_lua_sharded"),
    ("ATOMIC_UPDATE", "atomic_update"),
    ("REDIS_INCR", "redis_incr"),
    ("REDIS_SPIN_LOCK", "redis_spin_lock"),
    ("IN_PROCESS_LOCK", "in_process_lock"),
    ("MYSQL_NAMED_LOCK", "mysql_named_lock"),
    ("REDIS_PUBSUB_LOCK", "redis_pubsub_lock"),
    ("PY_REDIS_LUA", "py_redis_lua"),
    ("PY_PESSIMISTIC", "py_pessimistic"),
    ("JS_REDIS_LUA", "js_redis_lua"),
    ("JS_PESSIMISTIC", "js_pessimistic"),
];
pub const ASYNC_METHODS: [(&str, &str); 8] = [
    ("REDIS_ASYNC", "redis_async"),
    ("REDIS_PUBSUB", "redis_pubsub"),
    ("REDIS_STREAM", "redis_stream"),
    ("REDIS_STREAM_ATOMIC", "redis_stream_atomic"),
    ("REDIS_WRITE_BEHIND", "redis_write_behind"),
    ("REDIS_WRITE_BEHIND_NO_TX", "redis_write_behind_no_tx"),
    ("PY_REDIS_STREAM_ATOMIC", "py_redis_stream_atomic"),
    ("JS_REDIS_STREAM_ATOMIC", "js_redis_stream_atomic"),
];

/// Methods whose over-issue under concurrency is their lesson.
const OVER_ISSUING: [&str; 2] = ["READ_COMMITTED", "REPEATABLE_READ"];
/// Methods that reserve members in a set: `coupon:issued:{id}`, or the
/// shards' sets of REDIS_LUA_SHARDED.
fn reserves_in_set(method: &str) -> bool {
    // The Python and JavaScript methods do what their Rust namesakes do.
    let method = method.trim_start_matches("PY_").trim_start_matches("JS_");
    method.starts_with("REDIS_")
        && !["REDIS_LUA_GATE", "REDIS_SPIN_LOCK", "REDIS_PUBSUB_LOCK"].contains(&method)
}
/// Answers that are a method's own lesson under contention, not damage left
/// by the hang-ups.
const CONTENTION: [&str; 4] = [
    "DEADLOCK",
    "VERSION_CONFLICT",
    "LOCK_WAIT_TIMEOUT",
    "THROTTLED",
];

/// How big a burst is: the suite's default, or `HANG_UPS`, `ORDINARY` and
/// `TOTAL` from the environment for the report.
pub struct Size {
    pub hang_ups: u64,
    pub ordinary: u64,
    pub total: u64,
}

impl Size {
    fn from_env(default: Size) -> Size {
        let var = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        Size {
            hang_ups: var("HANG_UPS", default.hang_ups),
            ordinary: var("ORDINARY", default.ordinary),
            total: var("TOTAL", default.total),
        }
    }
}

/// What one method did with a burst.
pub struct Burst {
    pub method: &'static str,
    pub total: u64,
    /// Answers to the ordinary clients, by outcome name (`NO_ANSWER` when
    /// the request itself failed).
    pub ordinary: BTreeMap<String, u64>,
    /// Ordinary clients' answers that are damage, with a sample message.
    pub damaged: Vec<String>,
    /// Clients asked one at a time after the burst until one was refused as
    /// sold out.
    pub one_by_one: u64,
    pub rows: u64,
    /// Members in the method's reservation sets (methods that reserve in one).
    pub set_size: Option<u64>,
    /// Members in the set without a row, and the reverse.
    pub set_mismatch: Option<(u64, u64)>,
    /// Requests the server recorded for the coupon, out of all it was sent
    /// (of which `hang_ups` were hung up on).
    pub recorded: u64,
    pub sent: u64,
    pub hang_ups: u64,
    pub compensations: u64,
}

/// Sends one issue request on a socket of its own and resets the
/// connection `after` later, whatever the server is doing by then.
async fn hang_up(lab: &TestLab, coupon: u64, member: u64, method: &str, after: Duration) {
    let address = lab.base.trim_start_matches("http://");
    let Ok(mut socket) = TcpStream::connect(address).await else {
        return;
    };
    let body = json!({ "memberId": member, "method": method }).to_string();
    let request = format!(
        "POST /lab/coupons/{coupon}/issue HTTP/1.1\r\nhost: {address}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    if socket.write_all(request.as_bytes()).await.is_err() {
        return;
    }
    tokio::time::sleep(after).await;
    // A zero linger turns the close into a reset, as a killed client's is.
    let _ = socket2::SockRef::from(&socket).set_linger(Some(Duration::ZERO));
    drop(socket);
}

/// 2 to 50 ms, spread over the burst.
fn hang_up_delay(index: u64) -> Duration {
    Duration::from_millis(2 + (index * 7919) % 49)
}

async fn try_issue(lab: &TestLab, coupon: u64, member: u64, method: &str) -> Option<Reply> {
    let response = lab
        .client
        .post(format!("{}/lab/coupons/{coupon}/issue", lab.base))
        .json(&json!({ "memberId": member, "method": method }))
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .ok()?;
    let status = response.status();
    let body = response.json().await.ok()?;
    Some(Reply { status, body })
}

/// The coupon's result, if the server answers it.
async fn try_result(lab: &TestLab, coupon: u64) -> Option<Value> {
    let response = lab
        .client
        .get(format!("{}/lab/coupons/{coupon}/result", lab.base))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .ok()?;
    if !response.status().is_success() {
        return None;
    }
    let body: Value = response.json().await.ok()?;
    Some(body["response"].clone())
}

/// Waits until nothing is left moving on the coupon, as the server shows
/// it: no call running (its instances in use), no request waiting to be
/// settled, no 202 waiting for its confirmation, and the rows (read on the
/// test's own connection) and the recorded requests as the last look found
/// them (a hang-up the server read just before its reset may still be on
/// its way to its call). Returns the rows and the last result the server
/// gave; after a minute, what they are then (a 202 that is never confirmed,
/// a lost message, stays pending: the check fails on the figures).
async fn until_still(lab: &TestLab, coupon: u64) -> (u64, Option<Value>) {
    let mut last = (u64::MAX, u64::MAX);
    let started = std::time::Instant::now();
    loop {
        let metrics = lab.get_text("/metrics").await;
        let idle = [
            "couponlab_instances_in_use",
            "couponlab_settlements_pending",
        ]
        .iter()
        .all(|gauge| gauge_is_zero(&metrics, gauge));
        let rows = lab.issued_members(coupon).await.len() as u64;
        let result = try_result(lab, coupon).await;
        let recorded = result
            .as_ref()
            .and_then(|r| r["requests"]["total"].as_u64())
            .unwrap_or(0);
        let pending = result
            .as_ref()
            .and_then(|r| r["pending"].as_u64())
            .unwrap_or(0);
        let still = idle && pending == 0 && (rows, recorded) == last;
        if still || started.elapsed() > Duration::from_secs(60) {
            return (rows, result);
        }
        last = (rows, recorded);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether the unlabelled gauge `name` of a `/metrics` text is 0.
fn gauge_is_zero(metrics: &str, name: &str) -> bool {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .is_some_and(|value| value.trim() == "0")
}

/// The whole scenario for one method on `lab`.
pub async fn hang_ups_then_ordinary_asks(
    lab: &TestLab,
    method: &'static str,
    size: &Size,
) -> Burst {
    let members = lab
        .members(size.hang_ups + size.ordinary + size.total)
        .await;
    let (hang_ups, rest) = members.split_at(size.hang_ups as usize);
    let (ordinary, spare) = rest.split_at(size.ordinary as usize);
    let coupon = lab.coupon(size.total).await;

    join_all(
        hang_ups
            .iter()
            .zip(0..)
            .map(|(&member, i)| hang_up(lab, coupon, member, method, hang_up_delay(i))),
    )
    .await;
    // Whatever the hang-ups started finishes (or is left behind) first.
    until_still(lab, coupon).await;

    let answers = join_all(
        ordinary
            .iter()
            .map(|&member| try_issue(lab, coupon, member, method)),
    )
    .await;
    let mut counts = BTreeMap::new();
    let mut damaged = Vec::new();
    for answer in &answers {
        let name = match answer {
            Some(reply) => outcome(reply),
            None => "NO_ANSWER".to_string(),
        };
        let is_damage = !matches!(
            name.as_str(),
            "ISSUED" | "ACCEPTED" | "SOLD_OUT" | "SOLD_OUT_AT_DB"
        ) && !CONTENTION.contains(&name.as_str());
        if is_damage {
            damaged.push(answer.as_ref().map_or(name.clone(), |r| r.body.to_string()));
        }
        *counts.entry(name).or_default() += 1;
    }

    // One more client at a time, each once the coupon is still, until one
    // is refused as sold out (or a minute has gone by: a server that lost
    // stock may answer slowly). Asked while a 202's confirmation was still
    // running, a sold-out answer would not be the last word: a confirmation
    // that fails gives its unit back, to be sold again.
    let mut one_by_one = 0;
    let started = std::time::Instant::now();
    for &member in spare {
        if started.elapsed() > Duration::from_secs(60) {
            damaged.push("not sold out after a minute of one-by-one requests".into());
            break;
        }
        until_still(lab, coupon).await;
        one_by_one += 1;
        let Some(reply) = try_issue(lab, coupon, member, method).await else {
            damaged.push("NO_ANSWER (one by one)".into());
            continue;
        };
        match outcome(&reply).as_str() {
            "SOLD_OUT" | "SOLD_OUT_AT_DB" => break,
            "ISSUED" | "ACCEPTED" => {}
            other if CONTENTION.contains(&other) => {}
            _ => damaged.push(reply.body.to_string()),
        }
    }

    let (rows, result) = until_still(lab, coupon).await;
    let result = result.unwrap_or(Value::Null);
    let (set_size, set_mismatch) = if reserves_in_set(method) {
        let in_db = lab.issued_members(coupon).await;
        let in_set = if method == "REDIS_LUA_SHARDED" {
            lab.reserved_on_shards(coupon).await
        } else {
            lab.reserved_members(coupon).await
        };
        let only_set = in_set.iter().filter(|m| !in_db.contains(m)).count() as u64;
        let only_db = in_db.iter().filter(|m| !in_set.contains(m)).count() as u64;
        (Some(in_set.len() as u64), Some((only_set, only_db)))
    } else {
        (None, None)
    };
    Burst {
        method,
        total: size.total,
        ordinary: counts,
        damaged,
        one_by_one,
        rows,
        set_size,
        set_mismatch,
        recorded: result["requests"]["total"].as_u64().unwrap_or(0),
        sent: size.hang_ups + size.ordinary + one_by_one,
        hang_ups: size.hang_ups,
        compensations: result["requests"]["byMethod"][method]["compensations"]
            .as_u64()
            .unwrap_or(0),
    }
}

impl Burst {
    /// What a method that loses nothing to hang-ups must show.
    fn check(&self) {
        let what = format!("{}: {self:?}", self.method);
        if OVER_ISSUING.contains(&self.method) {
            assert!(self.rows >= self.total, "{what}");
        } else {
            assert_eq!(self.rows, self.total, "{what}");
        }
        assert!(self.damaged.is_empty(), "{what}");
        if let Some(mismatch) = self.set_mismatch {
            assert_eq!(mismatch, (0, 0), "{what}");
        }
        // A hang-up whose reset reached the server before its request did
        // never arrived; every other request is recorded.
        assert!(
            self.recorded >= self.sent - self.hang_ups && self.recorded <= self.sent,
            "every request that arrived is recorded: {what}"
        );
    }
}

impl std::fmt::Debug for Burst {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rows {}/{}, ordinary {:?}, one by one {}, set {:?} (only in set, only in db: {:?}), \
             recorded {}/{}, compensations {}, damaged {:?}",
            self.rows,
            self.total,
            self.ordinary,
            self.one_by_one,
            self.set_size,
            self.set_mismatch,
            self.recorded,
            self.sent,
            self.compensations,
            self.damaged.iter().take(3).collect::<Vec<_>>()
        )
    }
}

async fn subscriber_listening_if_any(lab: &TestLab, methods: &[(&str, &str)]) {
    if methods.iter().any(|(method, _)| *method == "REDIS_PUBSUB") {
        subscriber_listening(lab).await;
    }
}

fn components(methods: &[(&'static str, &'static str)]) -> Vec<&'static str> {
    methods.iter().map(|(_, component)| *component).collect()
}

async fn lab_for(methods: &[(&'static str, &'static str)]) -> TestLab {
    Setup::with(&components(methods))
        .own_redis_db()
        .tune(|c| c.max_instances = 1_000)
        .start()
        .await
}

/// Enough hang-ups to reset at every delay of [`hang_up_delay`] and to buy
/// the whole coupon three times over, and enough ordinary clients to buy
/// it again: every method's burst still queues calls on two cores.
const SUITE: Size = Size {
    hang_ups: 60,
    ordinary: 60,
    total: 20,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hang_ups_change_nothing_for_the_synchronous_methods() {
    let lab = lab_for(&SYNC_METHODS).await;
    for (method, _) in SYNC_METHODS {
        hang_ups_then_ordinary_asks(&lab, method, &SUITE)
            .await
            .check();
    }
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hang_ups_change_nothing_for_the_methods_that_answer_202() {
    let _turn = pubsub_turn().await;
    let lab = lab_for(&ASYNC_METHODS).await;
    subscriber_listening(&lab).await;
    for (method, _) in ASYNC_METHODS {
        hang_ups_then_ordinary_asks(&lab, method, &SUITE)
            .await
            .check();
    }
    lab.finish().await;
}

/// Not a pass/fail test: the figures of the hang-up burst for every method
/// (or those `METHODS` names, comma-separated), as a Markdown table.
/// `HANG_UPS=600 ORDINARY=600 TOTAL=100 cargo xtask test -- hang_up_report
/// --ignored --nocapture`
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "report; run explicitly"]
async fn hang_up_report() {
    let size = Size::from_env(Size {
        hang_ups: 600,
        ordinary: 600,
        total: 100,
    });
    let _turn = pubsub_turn().await;
    let mut table = String::from(
        "| method | rows / total | ordinary answers | one by one | set (only in set / only in DB) | recorded / sent | compensations |\n|---|---|---|---|---|---|---|\n",
    );
    // A server of its own for each method: what one method's hang-ups left
    // behind never shows up in another's figures.
    let only = std::env::var("METHODS").unwrap_or_default();
    for (method, component) in SYNC_METHODS.iter().chain(&ASYNC_METHODS) {
        if !only.is_empty() && !only.split(',').any(|m| m == *method) {
            continue;
        }
        let methods = [(*method, *component)];
        let lab = lab_for(&methods).await;
        subscriber_listening_if_any(&lab, &methods).await;
        {
            let burst = hang_ups_then_ordinary_asks(&lab, method, &size).await;
            let answers: Vec<String> = burst
                .ordinary
                .iter()
                .map(|(name, n)| format!("{name} {n}"))
                .collect();
            let set = match (burst.set_size, burst.set_mismatch) {
                (Some(size), Some((only_set, only_db))) => {
                    format!("{size} ({only_set} / {only_db})")
                }
                _ => "—".into(),
            };
            let _ = writeln!(
                table,
                "| `{}` | {} / {} | {} | {} | {} | {} / {} | {} |",
                burst.method,
                burst.rows,
                burst.total,
                answers.join(", "),
                burst.one_by_one,
                set,
                burst.recorded,
                burst.sent,
                burst.compensations
            );
            eprintln!("{}: {burst:?}", burst.method);
        }
        lab.finish().await;
    }
    println!(
        "hang-up burst: {} hang-ups, {} ordinary, total {}\n\n{table}",
        size.hang_ups, size.ordinary, size.total
    );
}
