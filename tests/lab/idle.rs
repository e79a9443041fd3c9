//! What a lab costs at rest as its coupons pile up (Redis commands counted
//! by `INFO commandstats` of a Redis of the test's own, so every command is
//! the lab's), and that a brand-new coupon's stream is read as soon as
//! before: cheap discovery must not be slow discovery. And the streams'
//! growth, by policy: kept whole by default, trimmed of what was
//! acknowledged when asked.

use std::time::{Duration, Instant};

use couponlab_contract::{ISSUE_STREAM, WRITE_BEHIND_STREAM};

use crate::cluster::LocalCluster;
use crate::common::{Setup, TestLab, until};
use crate::redis_server::{RedisServer, cli};

const STREAM_METHODS: [(&str, &str); 2] = [
    ("redis_stream_atomic", "REDIS_STREAM_ATOMIC"),
    ("redis_write_behind", "REDIS_WRITE_BEHIND"),
];
/// How soon a new coupon's first accepted request must be confirmed.
const FIRST_ENTRY_CONFIRMED_WITHIN: Duration = Duration::from_secs(1);
/// What the idle figure may exceed the one-coupon figure by: noise, and the
/// few commands a look at the coupons costs once.
const IDLE_SLACK_PER_SECOND: f64 = 10.0;

/// Commands the Redis servers on `ports` ran, less the `INFO`s that read it.
fn commands_run(ports: &[u16]) -> u64 {
    ports
        .iter()
        .map(|&port| {
            let stats = cli(port, &["info", "commandstats"]);
            stats
                .lines()
                .filter(|line| !line.starts_with("cmdstat_info:"))
                .filter_map(|line| {
                    line.split("calls=")
                        .nth(1)?
                        .split(',')
                        .next()?
                        .parse::<u64>()
                        .ok()
                })
                .sum::<u64>()
        })
        .sum()
}

/// Redis commands a second over `span` of the lab left alone.
async fn commands_per_second(ports: &[u16], span: Duration) -> f64 {
    let before = commands_run(ports);
    tokio::time::sleep(span).await;
    (commands_run(ports) - before) as f64 / span.as_secs_f64()
}

/// Creates `count` coupons straight in the database, as load runs leave
/// them.
async fn create_coupons(lab: &TestLab, count: usize) {
    for batch in (0..count).collect::<Vec<_>>().chunks(1_000) {
        let rows = vec!["('idle', 10, 0, 1)"; batch.len()].join(", ");
        let insert = format!(
            "INSERT INTO coupons (name, total_count, issued_count, per_member_limit) VALUES {rows}"
        );
        lab.execute(&insert, &[]).await;
    }
}

/// The Redis cost at rest with one coupon, then with 10,000: no more than
/// the first and a small constant.
async fn idle_cost_does_not_grow(lab: &TestLab, ports: &[u16], span: Duration) {
    lab.coupon(10).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let one = commands_per_second(ports, span).await;
    create_coupons(lab, 9_999).await;
    // The roles look at every coupon once when they connect, not again.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let many = commands_per_second(ports, span).await;
    eprintln!("idle: {one:.1} Redis commands/s with one coupon, {many:.1} with 10,000");
    assert!(
        many <= one + IDLE_SLACK_PER_SECOND,
        "idle: {one:.1} Redis commands/s with one coupon, {many:.1} with 10,000"
    );
}

/// A new coupon's first request of each stream method, answered 202, is
/// confirmed (its issue row written) within a second.
async fn first_entries_confirmed_promptly(lab: &TestLab) {
    for (_, method) in STREAM_METHODS {
        let (members, coupon) = lab.members_and_coupon(1, 10).await;
        let reply = lab.issue(coupon, members[0], method).await;
        assert_eq!(reply.status.as_u16(), 202, "{method}: {}", reply.body);
        let accepted = Instant::now();
        until(
            &format!("{method}'s first entry is confirmed"),
            FIRST_ENTRY_CONFIRMED_WITHIN,
            || async { lab.issue_rows(coupon).await == 1 },
        )
        .await;
        eprintln!(
            "{method}: first entry confirmed {:?} after its 202",
            accepted.elapsed()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_coupons_cost_nothing_at_rest_and_a_new_coupons_stream_is_read_at_once() {
    let redis = RedisServer::start();
    let components = STREAM_METHODS.map(|(component, _)| component);
    let lab = Setup::with(&components)
        .redis_url(redis.url(0))
        .start()
        .await;
    idle_cost_does_not_grow(&lab, &[redis.port], Duration::from_secs(10)).await;
    first_entries_confirmed_promptly(&lab).await;
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_cluster_too_ten_thousand_coupons_cost_nothing_at_rest_and_a_new_stream_is_read_at_once()
 {
    let cluster = LocalCluster::start();
    let components = STREAM_METHODS.map(|(component, _)| component);
    let lab = Setup::with(&components)
        .redis_url(cluster.seeds())
        .tune(|config| config.redis_cluster = true)
        .start()
        .await;
    idle_cost_does_not_grow(&lab, &cluster.ports, Duration::from_secs(5)).await;
    first_entries_confirmed_promptly(&lab).await;
    lab.finish().await;
}

/// The length of each of `coupon`'s streams of the stream methods, once
/// `members` were accepted by each and confirmed.
async fn stream_lengths_after_accepting(lab: &TestLab, members: &[u64]) -> Vec<u64> {
    let mut lengths = Vec::new();
    for (stream, (_, method)) in [ISSUE_STREAM, WRITE_BEHIND_STREAM]
        .into_iter()
        .zip(STREAM_METHODS)
    {
        let coupon = lab.coupon(members.len() as u64).await;
        for reply in lab.issue_all(coupon, members, method).await {
            assert_eq!(reply.status.as_u16(), 202, "{method}: {}", reply.body);
        }
        lab.drained(coupon, members.len() as u64).await;
        assert_eq!(lab.issue_rows(coupon).await, members.len(), "{method}");
        // A trim runs every second; two are enough.
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        let length = redis::cmd("XLEN").arg(stream.key(coupon)).clone();
        lengths.push(lab.redis_query(&length).await);
        // The result counts the entries ever added, trimmed or not.
        let result = lab.result(coupon).await;
        assert_eq!(
            result["stream"]["length"],
            members.len(),
            "{method}: {result}"
        );
        assert_eq!(result["stream"]["undelivered"], 0, "{method}: {result}");
    }
    lengths
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_keep_their_entries_by_default_and_lose_the_acknowledged_ones_when_trimmed() {
    let components = STREAM_METHODS.map(|(component, _)| component);
    let kept = Setup::with(&components).own_redis_db().start().await;
    let members = kept.members(20).await;
    assert_eq!(
        stream_lengths_after_accepting(&kept, &members).await,
        [20, 20]
    );
    kept.finish().await;

    let trimmed = Setup::with(&components)
        .own_redis_db()
        .tune(|config| config.consumers.stream_trim = true)
        .start()
        .await;
    let members = trimmed.members(20).await;
    assert_eq!(
        stream_lengths_after_accepting(&trimmed, &members).await,
        [0, 0]
    );
    trimmed.finish().await;
}

/// DELETE /lab/data deletes the announcements and the groups with the
/// data: the next coupon's stream is read at once, though this process
/// announced a coupon (by a request refused before it added an entry) less
/// than a second before the data was deleted. Coupon ids are not reused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_data_is_deleted_the_next_coupons_stream_is_read_at_once() {
    let components = STREAM_METHODS.map(|(component, _)| component);
    let lab = Setup::with(&components).own_redis_db().start().await;
    for (_, method) in STREAM_METHODS {
        lab.request(reqwest::Method::DELETE, "/lab/data", None)
            .await
            .expect_ok();
        // Coupon 1 does not exist yet, nor member 1: refused as either.
        let old = 1;
        let refused = lab.issue(old, 1, method).await;
        assert!(matches!(refused.status.as_u16(), 404 | 422), "{refused:?}");

        lab.request(reqwest::Method::DELETE, "/lab/data", None)
            .await
            .expect_ok();
        let (members, next) = lab.members_and_coupon(1, 10).await;
        assert!(next > old, "coupon ids are not reused: {next} after {old}");
        let reply = lab.issue(next, members[0], method).await;
        assert_eq!(reply.status.as_u16(), 202, "{method}: {}", reply.body);
        until(
            &format!("{method}: the next coupon's entry is confirmed"),
            FIRST_ENTRY_CONFIRMED_WITHIN * 2,
            || async { lab.issue_rows(next).await == 1 },
        )
        .await;
    }
    lab.finish().await;
}

/// CPU seconds process `pid` has used so far (`/proc/PID/stat`, fields 14
/// and 15, in clock ticks of 1/100 s).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the process runs");
    // The fields after the command name, which is in parentheses and may
    // hold spaces: state is field 3, utime 14, stime 15.
    let fields: Vec<&str> = stat[stat.rfind(')').expect("a stat line") + 2..]
        .split(' ')
        .collect();
    let ticks = |n: usize| fields[n - 3].parse::<f64>().expect("a tick count");
    (ticks(14) + ticks(15)) / 100.0
}

/// A server with every installed component, left alone, spends almost no
/// CPU: nothing re-reads (and re-hashes) a component it has not written —
/// the watcher wakes only for writes, and a file whose size and
/// modification time are unchanged is not read again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_every_component_spends_almost_no_cpu_at_rest() {
    const AT_MOST: f64 = 5.0;
    let dist = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../strategies/dist");
    let installed = std::fs::read_dir(&dist)
        .expect("strategies/dist: run `cargo xtask strategies`")
        .filter(|entry| {
            entry
                .as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|ext| ext == "wasm"))
        })
        .count();
    let lab = Setup::with(&[]).start().await;
    let crate::common::ServerProcess {
        process: server,
        base,
    } = lab
        .serve_process(
            &[("COUPONLAB_STRATEGY_DIR", dist.to_str().unwrap())],
            std::process::Stdio::null,
            Duration::from_secs(60),
        )
        .await;
    let pid = server.id().expect("the server runs");
    until(
        "every component serves",
        Duration::from_secs(300),
        || async {
            let listing = lab
                .request_at(&base, reqwest::Method::GET, "/lab/strategies", None)
                .await;
            listing.expect_ok()["strategies"]
                .as_array()
                .is_some_and(|s| s.len() == installed)
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (before, started) = (cpu_seconds(pid), Instant::now());
    tokio::time::sleep(Duration::from_secs(10)).await;
    let percent = (cpu_seconds(pid) - before) / started.elapsed().as_secs_f64() * 100.0;
    eprintln!("idle: {percent:.1}% of a core with {installed} components");
    assert!(
        percent <= AT_MOST,
        "an idle server with {installed} components used {percent:.1}% of a core"
    );
    drop(server);
    lab.finish().await;
}
