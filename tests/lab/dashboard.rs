//! The Grafana dashboard of `loadtest/grafana/` against the real server:
//! every `couponlab_*` metric its queries name is one the server's
//! `/metrics` exposes (and every family exposed has a panel), every query
//! parses and answers in a real Prometheus scraping the server, the k6
//! names are the ones k6's remote-write output writes, the panels use the
//! provisioned datasource, and `promtool` accepts `loadtest/prometheus.yml`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use futures::future::join_all;
use serde_json::{Value, json};

use crate::common::{Setup, TestLab, until};
use crate::metrics::exposition;

/// What `k6 run -o experimental-prometheus-rw` writes for issue.js (k6 1.1,
/// `K6_PROMETHEUS_RW_TREND_STATS=p(50),p(99)` as the runner sets it):
/// counters get `_total`, rates `_rate`, trends one gauge per stat
/// (`_p50`, `_p99`, in seconds), gauges their bare name.
const K6_NAMES: [&str; 8] = [
    "k6_http_reqs_total",
    "k6_http_req_duration_p50",
    "k6_http_req_duration_p99",
    "k6_http_req_failed_rate",
    "k6_issue_answers_total",
    "k6_iterations_total",
    "k6_vus",
    "k6_vus_max",
];

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &str) -> String {
    let path = repository().join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

/// Every panel of the dashboard, those inside collapsed rows too.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut all = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        all.push(panel);
        if let Some(inner) = panel["panels"].as_array() {
            all.extend(inner);
        }
    }
    all
}

/// Each query of the dashboard, with the title of its panel.
fn expressions(dashboard: &Value) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for panel in panels(dashboard) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("a PromQL target");
            found.push((panel["title"].as_str().unwrap().to_string(), expr.into()));
        }
    }
    found
}

/// The metric names an expression selects: identifiers outside label
/// matchers (`{...}`), ranges (`[...]`) and groupings (`by (...)`,
/// `without (...)`, `on (...)`, ...), which name labels; functions and keywords have no
/// `couponlab_` or `k6_` prefix, so the prefixes tell metrics apart.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let chars: Vec<char> = expr.chars().collect();
    let mut i = 0;
    let mut skip_group = false;
    while i < chars.len() {
        let c = chars[i];
        let close = match c {
            '{' => Some('}'),
            '[' => Some(']'),
            '(' if skip_group => Some(')'),
            _ => None,
        };
        if let Some(close) = close {
            skip_group = false;
            // Label values are quoted: a brace inside one is not the end.
            let mut quoted = false;
            i += 1;
            while i < chars.len() && (quoted || chars[i] != close) {
                if chars[i] == '"' && chars[i - 1] != '\\' {
                    quoted = !quoted;
                }
                i += 1;
            }
            i += 1;
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            skip_group = matches!(
                word.as_str(),
                "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
            );
            if word.starts_with("couponlab_") || word.starts_with("k6_") {
                names.insert(word);
            }
            continue;
        }
        if !c.is_whitespace() {
            skip_group = false;
        }
        i += 1;
    }
    names
}

/// The series names each metric family of the exposition has: a
/// histogram's `_bucket`, `_sum` and `_count`, any other family its name.
fn exposed(exposition: &str) -> BTreeMap<String, Vec<String>> {
    exposition
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .map(|declared| {
            let (family, kind) = declared.split_once(' ').expect("# TYPE name kind");
            let series = match kind {
                "histogram" => ["_bucket", "_sum", "_count"]
                    .map(|suffix| format!("{family}{suffix}"))
                    .to_vec(),
                _ => vec![family.to_string()],
            };
            (family.to_string(), series)
        })
        .collect()
}

/// Grafana's interval variables as Prometheus cannot read them.
fn concrete(expr: &str) -> String {
    ["$__rate_interval", "$__interval", "$__range"]
        .iter()
        .fold(expr.to_string(), |expr, variable| {
            expr.replace(variable, "1m")
        })
}

/// Something in every family: a burst that sells a coupon out on a
/// synchronous method, a 202 of a stream method (the stream exists), a call
/// past its deadline (a failure), and a drop gate's permit taken.
async fn every_family(lab: &TestLab) {
    let (members, coupon) = lab.members_and_coupon(20, 5).await;
    join_all(
        members[..10]
            .iter()
            .map(|&m| lab.issue(coupon, m, "REDIS_LUA")),
    )
    .await;
    let streamed = lab.coupon(5).await;
    lab.issue(streamed, members[10], "REDIS_STREAM_ATOMIC")
        .await
        .expect_ok();
    lab.issue(coupon, members[11], "TEST_SPIN")
        .await
        .fails_with(504);
    let dropped = lab.coupon(5).await;
    lab.seed_drop(dropped, 5).await.expect_ok();
    lab.issue_keyed(dropped, members[12], "REDIS_LUA_GATE", "dashboard")
        .await
        .expect_ok();
}

/// Where the shipped Prometheus configuration finds the lab: the host's
/// port 8080 seen from a container.
const COMPOSE_TARGET: &str = "host.docker.internal:8080";

/// A real Prometheus scraping the test server every second, with the
/// shipped `loadtest/prometheus.yml` pointed at it.
pub(crate) struct Prometheus {
    api: String,
    dir: PathBuf,
    process: tokio::process::Child,
}

impl Prometheus {
    pub(crate) fn scraping(lab: &TestLab) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = std::env::temp_dir().join(format!("couponlab-dashboard-{port}"));
        std::fs::create_dir_all(&dir).unwrap();
        // The shipped configuration, scraping this test's server every second.
        let shipped = read("loadtest/prometheus.yml");
        for expected in [COMPOSE_TARGET, "scrape_interval: 5s"] {
            assert!(
                shipped.contains(expected),
                "loadtest/prometheus.yml: no {expected}"
            );
        }
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            shipped
                .replace(COMPOSE_TARGET, lab.base.trim_start_matches("http://"))
                .replace("scrape_interval: 5s", "scrape_interval: 1s"),
        )
        .unwrap();
        let process = tokio::process::Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("prometheus (Debian's prometheus package; cargo xtask test installs it)");
        Prometheus {
            api: format!("http://127.0.0.1:{port}/api/v1/query"),
            dir,
            process,
        }
    }

    /// The answer of `/api/v1/query`, or None while Prometheus is not up.
    pub(crate) async fn query(&self, lab: &TestLab, expr: &str) -> Option<Value> {
        let response = lab
            .client
            .get(&self.api)
            .query(&[("query", expr)])
            .send()
            .await
            .ok()?;
        response.json().await.ok()
    }

    pub(crate) async fn stop(mut self) {
        self.process.kill().await.unwrap();
        std::fs::remove_dir_all(&self.dir).unwrap();
    }
}

#[test]
fn promtool_accepts_the_prometheus_config() {
    let path = repository().join("loadtest/prometheus.yml");
    let checked = std::process::Command::new("promtool")
        .arg("check")
        .arg("config")
        .arg(&path)
        .output()
        .expect("promtool (Debian's prometheus package; cargo xtask test installs it)");
    assert!(
        checked.status.success(),
        "promtool check config {}: {}{}",
        path.display(),
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
}

#[test]
fn the_dashboard_uses_the_provisioned_datasource_and_is_loaded() {
    let dashboard: Value =
        serde_json::from_str(&read("loadtest/grafana/dashboards/couponlab.json"))
            .expect("the dashboard is JSON");
    assert!(
        dashboard["schemaVersion"].as_u64().unwrap() >= 36,
        "{}",
        dashboard["schemaVersion"]
    );
    let provisioned = read("loadtest/grafana/provisioning/datasources/prometheus.yml");
    let uid = provisioned
        .lines()
        .find_map(|line| line.trim().strip_prefix("uid: "))
        .expect("the datasource has a fixed uid");
    assert!(
        provisioned.contains("url: http://prometheus:9090"),
        "{provisioned}"
    );
    let mut ids = BTreeSet::new();
    for panel in panels(&dashboard) {
        let title = panel["title"].as_str().expect("every panel has a title");
        assert!(
            ids.insert(panel["id"].as_u64().unwrap()),
            "{title}: id taken"
        );
        let kind = panel["type"].as_str().unwrap();
        if kind == "row" {
            continue;
        }
        assert!(matches!(kind, "timeseries" | "stat"), "{title}: {kind}");
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no query");
        for source in std::iter::once(&panel["datasource"])
            .chain(targets.iter().map(|target| &target["datasource"]))
        {
            assert_eq!(
                source,
                &json!({ "type": "prometheus", "uid": uid }),
                "{title}"
            );
        }
    }
    // The provider reads the directory docker-compose.yml mounts the dashboards at.
    let provider = read("loadtest/grafana/provisioning/dashboards/couponlab.yml");
    let path = provider
        .lines()
        .find_map(|line| line.trim().strip_prefix("path: "))
        .expect("the file provider's path");
    let compose = read("docker-compose.yml");
    assert!(
        compose.contains(&format!("./loadtest/grafana/dashboards:{path}")),
        "docker-compose.yml mounts no dashboards at {path}"
    );
    assert!(compose.contains("./loadtest/prometheus.yml:"), "{compose}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_query_names_what_the_server_exposes_and_parses() {
    let lab = Setup::with(&[
        "redis_lua",
        "redis_stream_atomic",
        "redis_lua_gate",
        "test_spin",
    ])
    .call_deadline_ms(300)
    .own_redis_db()
    .start()
    .await;
    every_family(&lab).await;
    let text = exposition(&lab).await;
    let families = exposed(&text);
    let series: BTreeSet<&String> = families.values().flatten().collect();

    let dashboard: Value =
        serde_json::from_str(&read("loadtest/grafana/dashboards/couponlab.json")).unwrap();
    let queries = expressions(&dashboard);
    assert!(queries.len() > 10, "{queries:?}");
    let mut used = BTreeSet::new();
    for (title, expr) in &queries {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "{title}: no metric in {expr}");
        for name in names {
            if name.starts_with("k6_") {
                assert!(
                    K6_NAMES.contains(&name.as_str()),
                    "{title}: k6's remote write writes no {name} ({expr})"
                );
            } else {
                assert!(
                    series.contains(&name),
                    "{title}: the server exposes no {name} ({expr}); it has {series:?}"
                );
                used.insert(name);
            }
        }
    }
    for (family, names) in &families {
        assert!(
            names.iter().any(|name| used.contains(name)),
            "no panel shows {family}"
        );
    }

    // Every query parses and runs; those on the server's figures answer
    // something once Prometheus has scraped a few times.
    let prometheus = Prometheus::scraping(&lab);
    until(
        "Prometheus has scraped the server three times",
        Duration::from_secs(60),
        || async {
            let answer = prometheus
                .query(&lab, "count_over_time(couponlab_instances_in_use[1m])")
                .await;
            answer.is_some_and(|answer| {
                answer["data"]["result"][0]["value"][1]
                    .as_str()
                    .and_then(|count| count.parse::<f64>().ok())
                    .is_some_and(|count| count >= 3.0)
            })
        },
    )
    .await;
    let started = Instant::now();
    for (title, expr) in &queries {
        let query = concrete(expr);
        let answer = prometheus
            .query(&lab, &query)
            .await
            .expect("Prometheus answers");
        assert_eq!(answer["status"], "success", "{title}: {query}: {answer}");
        if !metric_names(expr)
            .iter()
            .any(|name| name.starts_with("k6_"))
        {
            let result = answer["data"]["result"].as_array().unwrap();
            assert!(!result.is_empty(), "{title}: {query} answers nothing");
        }
    }
    assert!(started.elapsed() < Duration::from_secs(30));
    prometheus.stop().await;
    lab.finish().await;
}

#[test]
fn metric_names_leave_labels_and_functions_out() {
    let names = metric_names(
        r#"histogram_quantile(0.99, sum by (method, le) (rate(couponlab_issue_duration_seconds_bucket{method=~"A|B", x="{y}"}[$__rate_interval]))) / on (couponlab_method) k6_vus"#,
    );
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["couponlab_issue_duration_seconds_bucket", "k6_vus"]
    );
}
