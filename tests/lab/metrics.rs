//! `GET /metrics`: the figures agree with the result endpoint, the
//! exposition is valid for Prometheus's own tools, a real Prometheus scrapes
//! it, and JSON logs are JSON.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use futures::future::join_all;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::common::{ServerProcess, Setup, TestLab};
use crate::dashboard::Prometheus;

const METHODS: [&str; 2] = ["PESSIMISTIC", "REDIS_LUA"];

/// The samples of one metric family, by their labels as written
/// (`method="REDIS_LUA",outcome="ISSUED"`).
fn samples(exposition: &str, name: &str) -> BTreeMap<String, f64> {
    exposition
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (metric, labels) = match series.split_once('{') {
                Some((metric, labels)) => (metric, labels.trim_end_matches('}')),
                None => (series, ""),
            };
            (metric == name).then(|| (labels.to_string(), value.parse().unwrap()))
        })
        .collect()
}

/// The server's `/metrics`, checked to be the text format.
pub(crate) async fn exposition(lab: &TestLab) -> String {
    let response = lab
        .client
        .get(format!("{}/metrics", lab.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"].to_str().unwrap();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    response.text().await.unwrap()
}

/// A burst of 40 members on a coupon of 10, per method, at once.
async fn forty_ask_for_ten_per_method(lab: &TestLab) -> Vec<u64> {
    let members = lab.members(40).await;
    let mut coupons = Vec::new();
    for method in METHODS {
        let coupon = lab.coupon(10).await;
        coupons.push(coupon);
        join_all(members.iter().map(|&m| lab.issue(coupon, m, method))).await;
    }
    coupons
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_count_what_the_result_reports() {
    let lab = Setup::with(&["pessimistic", "redis_lua"]).start().await;
    let coupons = forty_ask_for_ten_per_method(&lab).await;
    let text = exposition(&lab).await;
    let requests = samples(&text, "couponlab_issue_requests_total");
    let durations = samples(&text, "couponlab_issue_duration_seconds_count");
    for (method, coupon) in METHODS.into_iter().zip(coupons) {
        let result = lab.result(coupon).await;
        let by_outcome = result["requests"]["byMethod"][method]["byOutcome"]
            .as_object()
            .unwrap();
        let mut counted = 0.0;
        for (outcome, count) in by_outcome {
            let labels = format!("method=\"{method}\",outcome=\"{outcome}\"");
            assert_eq!(
                requests.get(&labels),
                Some(&count.as_f64().unwrap()),
                "{labels} in {requests:?}"
            );
            counted += count.as_f64().unwrap();
        }
        assert_eq!(counted, 40.0, "{method}: {by_outcome:?}");
        let in_metrics: f64 = requests
            .iter()
            .filter(|(labels, _)| labels.starts_with(&format!("method=\"{method}\",")))
            .map(|(_, count)| count)
            .sum();
        assert_eq!(in_metrics, counted, "{method}: no outcome the result lacks");
        assert_eq!(
            durations.get(&format!("method=\"{method}\"")),
            Some(&counted),
            "{method}: one latency observation per request"
        );
    }
    // The gauges of what a run exhausts are there, and nothing is in use
    // once the burst is over.
    for gauge in [
        "couponlab_instances_in_use",
        "couponlab_db_waiting",
        "couponlab_redis_dedicated_in_use",
        "couponlab_job_queue_depth",
    ] {
        assert_eq!(samples(&text, gauge).get(""), Some(&0.0), "{gauge}");
    }
    let changes = samples(&text, "couponlab_component_changes_total");
    assert_eq!(
        changes.get("change=\"loaded\",method=\"REDIS_LUA\""),
        Some(&1.0),
        "{changes:?}"
    );

    // Prometheus's own linter accepts the exposition.
    let mut promtool = tokio::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package; cargo xtask test installs it)");
    use tokio::io::AsyncWriteExt;
    let mut stdin = promtool.stdin.take().unwrap();
    stdin.write_all(text.as_bytes()).await.unwrap();
    drop(stdin);
    let checked = promtool.wait_with_output().await.unwrap();
    assert!(
        checked.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scrapes_the_issue_counter() {
    let lab = Setup::with(&["pessimistic", "redis_lua"]).start().await;
    let coupons = forty_ask_for_ten_per_method(&lab).await;
    let issued: f64 = {
        let result = lab.result(coupons[1]).await;
        result["requests"]["byMethod"]["REDIS_LUA"]["byOutcome"]["ISSUED"]
            .as_f64()
            .unwrap()
    };
    let prometheus = Prometheus::scraping(&lab);
    let query = "couponlab_issue_requests_total{method=\"REDIS_LUA\",outcome=\"ISSUED\"}";
    // Scraped every second: the value Prometheus holds is the counter's.
    let started = std::time::Instant::now();
    let answered = loop {
        let value = prometheus.query(&lab, query).await.and_then(|body| {
            body["data"]["result"][0]["value"][1]
                .as_str()
                .and_then(|value| value.parse::<f64>().ok())
        });
        if value.is_some() || started.elapsed() > Duration::from_secs(60) {
            break value;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(answered, Some(issued));
    prometheus.stop().await;
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_one_object_a_line() {
    // The in-process server only prepares the data; the one under test is
    // a process of its own, logging JSON.
    let lab = Setup::with(&["pessimistic", "test_spin"]).start().await;
    let ServerProcess {
        process: mut server,
        base,
    } = lab
        .serve_process(
            &[
                ("COUPONLAB_LOG_FORMAT", "json"),
                ("COUPONLAB_CONSUMERS", "false"),
                ("COUPONLAB_REQUEST_TIMEOUT_MS", "500"),
                ("RUST_LOG", "info"),
            ],
            Stdio::piped,
            Duration::from_secs(30),
        )
        .await;
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    // A burst with failures in it: a spinning component past its deadline
    // logs errors, unknown methods warnings.
    let (members, coupon) = lab.members_and_coupon(10, 5).await;
    join_all(members.iter().map(|member| {
        let method = ["PESSIMISTIC", "TEST_SPIN", "NO_SUCH_METHOD"][(*member % 3) as usize];
        lab.client
            .post(format!("{base}/lab/coupons/{coupon}/issue"))
            .json(&serde_json::json!({ "memberId": member, "method": method }))
            .send()
    }))
    .await;
    server.start_kill().unwrap();
    let mut count = 0;
    while let Some(line) = lines.next_line().await.unwrap() {
        let parsed: Value = serde_json::from_str(&line)
            .unwrap_or_else(|err| panic!("a log line that is not JSON ({err}): {line}"));
        assert!(parsed.is_object(), "{line}");
        assert!(parsed["level"].is_string(), "{line}");
        count += 1;
    }
    // At least the two components loaded and each spinning call's failure.
    assert!(count >= 3, "only {count} log lines");
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_confirmed_issue_has_its_lag_observed() {
    let lab = Setup::with(&["redis_async"]).start().await;
    let (members, coupon) = lab.members_and_coupon(20, 10).await;
    let replies = lab.issue_all(coupon, &members, "REDIS_ASYNC").await;
    let accepted = replies.iter().filter(|reply| reply.status == 202).count() as u64;
    let result = lab.drained(coupon, accepted).await;
    let issued = result["asyncResults"]["ISSUED"].as_f64().unwrap();
    assert_eq!(issued, 10.0, "{result}");
    let text = exposition(&lab).await;
    let lags = samples(&text, "couponlab_confirmation_lag_seconds_count");
    assert_eq!(
        lags.get("method=\"REDIS_ASYNC\""),
        Some(&issued),
        "{lags:?}"
    );
    lab.finish().await;
}
