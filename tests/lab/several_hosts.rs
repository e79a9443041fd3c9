//! Several hosts, one lab: two `couponlab serve` processes on one Redis and
//! one MySQL database, the requests split between them. Each host's result
//! covers both hosts' requests; the stream consumers and the loaders of both
//! drain everything once; and when one is killed holding pending entries,
//! the other claims them.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use futures::future::join_all;
use reqwest::Method;
use serde_json::{Value, json};
use tokio::process::Child;

use couponlab_contract::{ISSUE_STREAM, Stream, WRITE_BEHIND_STREAM};

use crate::common::{Reply, ServerProcess, Setup, TestLab, hold_coupon_row, outcome, until};

const COMPONENTS: [&str; 3] = ["redis_lua", "redis_stream_atomic", "redis_write_behind"];
const WAIT: Duration = Duration::from_secs(60);

/// One `couponlab serve` process of the test.
struct Host {
    base: String,
    pid: u32,
    process: Child,
}

impl Host {
    async fn start(lab: &TestLab) -> Host {
        let ServerProcess { process, base } = lab
            .serve_process(
                &[
                    ("COUPONLAB_WATCH", "false"),
                    ("COUPONLAB_DB_POOL_SIZE", "16"),
                    ("COUPONLAB_STREAM_CLAIM_IDLE_MS", "500"),
                    ("COUPONLAB_STREAM_CLAIM_INTERVAL_MS", "200"),
                    // Entries wait on row locks the test holds: no entry may
                    // spend its deliveries meanwhile.
                    ("COUPONLAB_STREAM_MAX_DELIVERIES", "20"),
                    ("COUPONLAB_LOCK_WAIT_TIMEOUT_S", "30"),
                ],
                Stdio::null,
                WAIT,
            )
            .await;
        Host {
            base,
            pid: process.id().expect("the process runs"),
            process,
        }
    }

    /// Whether `consumer` is one of this process's.
    fn owns(&self, consumer: &str) -> bool {
        consumer.contains(&format!("-{}-", self.pid))
    }

    async fn issue(&self, lab: &TestLab, coupon: u64, member: u64, method: &str) -> Reply {
        let body = json!({ "memberId": member, "method": method }).to_string();
        let path = format!("/lab/coupons/{coupon}/issue");
        lab.request_at(&self.base, Method::POST, &path, Some(&body))
            .await
    }

    async fn result(&self, lab: &TestLab, coupon: u64) -> Value {
        let path = format!("/lab/coupons/{coupon}/result");
        let reply = lab.request_at(&self.base, Method::GET, &path, None).await;
        reply.expect_ok().clone()
    }
}

/// Every member asks at once, even members at the first host and odd ones
/// at the second; the answers by outcome name, and by host.
async fn split(
    lab: &TestLab,
    hosts: &[Host; 2],
    coupon: u64,
    members: &[u64],
    method: &str,
) -> BTreeMap<String, u64> {
    let replies = join_all(
        members
            .iter()
            .map(|&member| hosts[(member % 2) as usize].issue(lab, coupon, member, method)),
    )
    .await;
    let mut outcomes = BTreeMap::new();
    for reply in &replies {
        *outcomes.entry(outcome(reply)).or_default() += 1;
    }
    outcomes
}

/// Waits until `host`'s result of `coupon` counts `requests` requests (the
/// other host publishes its record within its snapshot interval) and, for
/// an asynchronous method, until every 202 has its outcome; returns it.
async fn until_counted_and_confirmed(
    lab: &TestLab,
    host: &Host,
    coupon: u64,
    requests: u64,
) -> Value {
    let started = Instant::now();
    loop {
        let result = host.result(lab, coupon).await;
        if result["requests"]["total"] == json!(requests)
            && (result["accepted"].is_null() || result["pending"] == json!(0))
        {
            return result;
        }
        assert!(started.elapsed() < WAIT, "not settled: {result}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Asserts that `result` reports the requests both hosts answered: the
/// outcomes the clients were told, latency, each host's share.
fn reports_every_request(result: &Value, told: &BTreeMap<String, u64>, method: &str) {
    let requests = &result["requests"];
    let total: u64 = told.values().sum();
    assert_eq!(requests["byOutcome"], json!(told), "{result}");
    assert_eq!(
        requests["byMethod"][method]["total"],
        json!(total),
        "{result}"
    );
    assert_eq!(requests["byMethod"][method]["byOutcome"], json!(told));
    let latency = &requests["latencyMs"];
    assert!(latency["p50"].as_f64().unwrap() > 0.0, "{latency}");
    assert!(
        latency["p50"].as_f64() <= latency["max"].as_f64(),
        "{latency}"
    );
    let hosts = requests["hosts"]["merged"].as_array().unwrap();
    assert_eq!(hosts.len(), 2, "{result}");
    assert_eq!(hosts[0]["thisHost"], json!(true));
    assert_ne!(hosts[0]["id"], hosts[1]["id"]);
    // Even members at one host, odd at the other: half each.
    for host in hosts {
        assert_eq!(host["requests"], json!(total / 2), "{result}");
    }
    // Each host has a gate of its own: together, twice the permits.
    assert_eq!(requests["hosts"]["gatePermits"], json!(2 * 32));
}

/// Pending entries of the group of `coupon`'s stream, by consumer; none
/// while the hosts have not yet created the group of the coupon's new
/// stream (they look for new streams every 200 ms).
async fn pending_by_consumer(lab: &TestLab, stream: Stream, coupon: u64) -> BTreeMap<String, u64> {
    let reply: redis::RedisResult<redis::streams::StreamPendingReply> = redis::cmd("XPENDING")
        .arg(stream.key(coupon))
        .arg(stream.group)
        .query_async(&mut lab.redis.clone())
        .await;
    let reply = match reply {
        Ok(reply) => reply,
        Err(err) if err.code() == Some("NOGROUP") => return BTreeMap::new(),
        Err(err) => panic!("XPENDING failed: {err}"),
    };
    let redis::streams::StreamPendingReply::Data(data) = reply else {
        return BTreeMap::new();
    };
    data.consumers
        .into_iter()
        .map(|consumer| (consumer.name, consumer.pending as u64))
        .collect()
}

/// The consumers of the group of `coupon`'s stream.
async fn consumers(lab: &TestLab, stream: Stream, coupon: u64) -> Vec<String> {
    let reply: redis::streams::StreamInfoConsumersReply = lab
        .redis_query(
            redis::cmd("XINFO")
                .arg("CONSUMERS")
                .arg(stream.key(coupon))
                .arg(stream.group),
        )
        .await;
    reply.consumers.into_iter().map(|c| c.name).collect()
}

/// Rows of `coupon`, and members with more than one.
async fn rows_and_duplicates(lab: &TestLab, coupon: u64) -> (i64, i64) {
    let rows = lab.issue_rows(coupon).await as i64;
    let distinct = lab
        .number(&format!(
            "SELECT COUNT(DISTINCT member_id) FROM coupon_issues WHERE coupon_id = {coupon}"
        ))
        .await;
    (rows, rows - distinct)
}

/// The test's own server, which only prepares the data (no consumers,
/// no requests), and two hosts of its lab.
async fn two_hosts(setup: Setup) -> (TestLab, [Host; 2]) {
    let lab = setup
        .tune(|c| c.consumers.in_process = false)
        .own_redis_db()
        .start()
        .await;
    let hosts = [Host::start(&lab).await, Host::start(&lab).await];
    (lab, hosts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hosts_report_and_drain_as_one_lab() {
    let (lab, hosts) = two_hosts(Setup::with(&COMPONENTS)).await;
    report_and_drain_as_one_lab(&lab, &hosts).await;
    killed_host_entries_are_claimed_by_the_other(&lab, hosts).await;
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hosts_on_postgres_report_and_drain_as_one_lab() {
    let (lab, hosts) = two_hosts(Setup::with(&COMPONENTS).on_postgres()).await;
    report_and_drain_as_one_lab(&lab, &hosts).await;
    lab.finish().await;
}

/// Each host's result covers both hosts' requests, and the consumers and
/// loaders of both drain everything once, each under its own name.
async fn report_and_drain_as_one_lab(lab: &TestLab, hosts: &[Host; 2]) {
    // A synchronous method: 200 requests for 50 coupons.
    let (members, coupon) = lab.members_and_coupon(200, 50).await;
    let told = split(lab, hosts, coupon, &members, "REDIS_LUA").await;
    assert_eq!(told["ISSUED"], 50, "{told:?}");
    for host in hosts {
        let result = until_counted_and_confirmed(lab, host, coupon, 200).await;
        reports_every_request(&result, &told, "REDIS_LUA");
        assert_eq!(result["issueRows"], json!(50));
    }

    // The stream and write-behind methods: 300 requests for 200 coupons,
    // confirmed by the consumers and loaders of both processes.
    for (method, stream) in [
        ("REDIS_STREAM_ATOMIC", ISSUE_STREAM),
        ("REDIS_WRITE_BEHIND", WRITE_BEHIND_STREAM),
    ] {
        let (members, coupon) = lab.members_and_coupon(300, 200).await;
        let told = split(lab, hosts, coupon, &members, method).await;
        assert_eq!(told["ACCEPTED"], 200, "{method}: {told:?}");
        for host in hosts {
            let result = until_counted_and_confirmed(lab, host, coupon, 300).await;
            reports_every_request(&result, &told, method);
            assert_eq!(result["accepted"], json!(200), "{result}");
        }
        until("every entry is loaded and acked", WAIT, || async {
            pending_by_consumer(lab, stream, coupon).await.is_empty()
                && lab.issue_rows(coupon).await == 200
        })
        .await;
        assert_eq!(rows_and_duplicates(lab, coupon).await, (200, 0), "{method}");
        // Whoever read the coupon's stream did so under a name of its own
        // process. (Redis names a consumer in the group only once it was
        // handed an entry: a host that got none is not listed.)
        let names = consumers(lab, stream, coupon).await;
        assert!(!names.is_empty(), "{method}");
        for name in &names {
            let owners = hosts.iter().filter(|host| host.owns(name)).count();
            assert_eq!(owners, 1, "{method}: {name} of {names:?}");
        }
    }
}

/// One host is killed while its stream consumers and its loader hold
/// pending entries; the other claims them and confirms every one once.
async fn killed_host_entries_are_claimed_by_the_other(lab: &TestLab, hosts: [Host; 2]) {
    let (stream_members, stream_coupon) = lab.members_and_coupon(60, 60).await;
    let (wb_members, wb_coupon) = lab.members_and_coupon(150, 150).await;
    // Every stream confirm waits at the held coupon row; the loader whose
    // batch holds the locked member waits inside that batch.
    let stream_holder = hold_coupon_row(lab, stream_coupon).await;
    let mut wb_holder = lab.db.mysql().begin().await.unwrap();
    sqlx::query("INSERT INTO coupon_issues (coupon_id, member_id) VALUES (?, ?)")
        .bind(wb_coupon)
        .bind(wb_members[75])
        .execute(&mut *wb_holder)
        .await
        .unwrap();
    let told = split(
        lab,
        &hosts,
        stream_coupon,
        &stream_members,
        "REDIS_STREAM_ATOMIC",
    )
    .await;
    assert_eq!(told["ACCEPTED"], 60, "{told:?}");
    let told = split(lab, &hosts, wb_coupon, &wb_members, "REDIS_WRITE_BEHIND").await;
    assert_eq!(told["ACCEPTED"], 150, "{told:?}");

    // The victim: the host whose loader waits in the batch, once its
    // stream consumers hold entries too.
    let started = Instant::now();
    let victim = loop {
        let loading = pending_by_consumer(lab, WRITE_BEHIND_STREAM, wb_coupon).await;
        let confirming = pending_by_consumer(lab, ISSUE_STREAM, stream_coupon).await;
        let holding = hosts.iter().position(|host| {
            loading.keys().any(|name| host.owns(name))
                && confirming.keys().any(|name| host.owns(name))
        });
        if let Some(holding) = holding {
            break holding;
        }
        assert!(
            started.elapsed() < WAIT,
            "no host holds entries of both: {loading:?} {confirming:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let [first, second] = hosts;
    let (mut victim, survivor) = if victim == 0 {
        (first, second)
    } else {
        (second, first)
    };
    // A result read publishes the host's whole record as of now; then SIGKILL.
    victim.result(lab, stream_coupon).await;
    victim.process.kill().await.unwrap();
    let held = pending_by_consumer(lab, ISSUE_STREAM, stream_coupon).await;
    assert!(
        held.iter().any(|(name, n)| victim.owns(name) && *n > 0),
        "{held:?}"
    );
    stream_holder.rollback().await.unwrap();
    wb_holder.rollback().await.unwrap();

    for (coupon, total, stream) in [
        (stream_coupon, 60, ISSUE_STREAM),
        (wb_coupon, 150, WRITE_BEHIND_STREAM),
    ] {
        until("the survivor has confirmed everything", WAIT, || async {
            pending_by_consumer(lab, stream, coupon).await.is_empty()
                && lab.issue_rows(coupon).await == total
        })
        .await;
        assert_eq!(rows_and_duplicates(lab, coupon).await, (total as i64, 0));
        let result = until_counted_and_confirmed(lab, &survivor, coupon, total as u64).await;
        assert_eq!(result["accepted"], json!(total), "{result}");
        assert_eq!(result["stream"]["pending"], json!(0), "{result}");
        // The dead host's requests still count, from its last snapshot.
        let merged = result["requests"]["hosts"]["merged"].as_array().unwrap();
        assert_eq!(merged.len(), 2, "{result}");
        // Its consumers stay in the group, holding nothing.
        let names = consumers(lab, stream, coupon).await;
        assert!(names.iter().any(|name| victim.owns(name)), "{names:?}");
    }
}
