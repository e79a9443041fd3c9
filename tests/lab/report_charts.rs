//! The load report's charts in a real browser: the runner's own report
//! code (`couponlab-loadtest loadtest redraw`) draws report.html from
//! recorded inputs — results.json and 3,000 request records for each of
//! three methods — and headless Chromium opens it offline. The percentile
//! chart has a line per method, each reaching past the 99.9th percentile;
//! hovering the chart shows a value; each method's seconds have one point
//! per second of the run, and the 202 method's confirmation lag its own
//! chart. `loadtest diff` of two such runs overlays both runs' curves
//! beside a table of differences.
//!
//! Leaves `target/artifacts/report-charts.png` and `report-diff.png`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use fantoccini::Locator;
use fantoccini::actions::{InputSource, MouseActions, PointerAction};
use serde_json::{Value, json};

use crate::common::until;
use crate::console::Browser;

const METHODS: [&str; 3] = ["REDIS_LUA", "REDIS_STREAM_ATOMIC", "PESSIMISTIC"];
/// The method of the three that answers 202.
const ACCEPTING: &str = "REDIS_STREAM_ATOMIC";
/// The run's first request, 2026-12-01T10:00:00Z, in ms since the epoch.
const START_MS: u64 = 1_796_119_200_000;
const REQUESTS: u64 = 3000;
/// The coupon's total: the first this many members are issued.
const TOTAL: u64 = 100;

/// The load runner of this build, beside the directory of this test binary
/// (built by the same `cargo test --release --workspace`).
fn runner_binary() -> PathBuf {
    let test = std::env::current_exe().expect("the test binary's path");
    let binary = test
        .parent()
        .and_then(Path::parent)
        .expect("the test binary lies in <target>/<profile>/deps")
        .join("couponlab-loadtest");
    assert!(
        binary.exists(),
        "{} is missing: build the workspace",
        binary.display()
    );
    binary
}

fn runner(args: &[&str]) {
    let status = Command::new(runner_binary())
        .arg("loadtest")
        .args(args)
        .status()
        .expect("the load runner starts");
    assert!(
        status.success(),
        "couponlab-loadtest loadtest {args:?}: {status}"
    );
}

/// A heavy-tailed latency (Pareto), microseconds, from a deterministic
/// sequence: most requests fast, a few hundred times slower.
fn latency_us(seed: &mut u64, scale: f64) -> u64 {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let uniform = ((*seed >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
    (scale * 1000.0 * (0.5 + uniform.powf(-0.4))) as u64
}

/// Writes a run as the runner leaves it: each method's request records
/// (one request sent each millisecond) and a results.json without the
/// histograms. Returns the seconds from the first request sent to the last
/// answer, as the report should draw them.
fn recorded_run(dir: &Path, scale: f64) -> u64 {
    std::fs::create_dir_all(dir).unwrap();
    let mut methods = serde_json::Map::new();
    let mut last_answer_us = 0;
    for (n, method) in METHODS.iter().enumerate() {
        let accepting = *method == ACCEPTING;
        let (served, served_outcome) = if accepting {
            (202, "ACCEPTED")
        } else {
            (200, "ISSUED")
        };
        // The 202s are confirmed as issued 20 ms after they were accepted,
        // and 5 ms more for each member before: a lag that grows.
        let mut confirmations = Vec::new();
        let mut seed = n as u64 + 1;
        let mut csv = String::from("method,coupon,member,status,outcome,latency_ms,time,message\n");
        for member in 0..REQUESTS {
            let latency = latency_us(&mut seed, scale * (n + 1) as f64);
            let answered = member * 1000 + latency;
            last_answer_us = last_answer_us.max(answered);
            let (status, outcome) = if member < TOTAL {
                (served, served_outcome)
            } else {
                (409, "SOLD_OUT")
            };
            if accepting && member < TOTAL {
                let accepted_at_ms = START_MS + answered / 1000;
                let confirmed_at_ms = accepted_at_ms + 20 + 5 * member;
                confirmations.push(
                    json!({ "acceptedAtMs": accepted_at_ms, "confirmedAtMs": confirmed_at_ms }),
                );
            }
            csv.push_str(&format!(
                "{method},1,{member},{status},{outcome},{}.{:03},2026-12-01T10:{:02}:{:02}.{:06}Z,\"\"\n",
                latency / 1000,
                latency % 1000,
                answered / 60_000_000,
                answered / 1_000_000 % 60,
                answered % 1_000_000,
            ));
        }
        let records = format!("requests-{method}.csv");
        std::fs::write(dir.join(&records), csv).unwrap();
        let k6 = json!({
            "method": method, "mode": "spike", "requests": REQUESTS, "requestsPerSecond": 1000.0,
            "loadMs": 3000.0, "dropped": 0,
            "latencyMs": { "p50": 1.0, "p95": 2.0, "p99": 3.0, "max": 4.0 },
            "statuses": { served.to_string(): TOTAL, "409": REQUESTS - TOTAL },
        });
        let mut result = json!({
            "couponId": 1, "name": "loadtest", "engine": { "name": "mariadb", "version": "11.8.3", "settings": {} },
            "totalCount": TOTAL, "issuedCount": TOTAL, "issueRows": TOTAL, "distinctMembers": TOTAL,
            "overIssued": 0, "duplicateMembers": 0, "countMismatch": 0,
            "invariants": { "neverOverIssued": true, "onePerMember": true, "countMatchesRows": true },
            "requests": {
                "total": REQUESTS, "byOutcome": { served_outcome: TOTAL, "SOLD_OUT": REQUESTS - TOTAL },
                "latencyMs": null, "fairness": { "firstSoldOutArrivalUs": null, "servedAfterEarlierSoldOut": 0 },
                "byMethod": {}, "hosts": { "merged": [], "gatePermits": 0 },
            },
            "anomalies": [],
        });
        if accepting {
            let lag = json!({ "p50": 270.0, "p95": 495.0, "p99": 515.0, "max": 515.0 });
            let confirmed = json!({ "accepted": TOTAL, "asyncResults": { "ISSUED": TOTAL },
                                    "pending": 0, "confirmationLagMs": lag });
            result
                .as_object_mut()
                .unwrap()
                .extend(confirmed.as_object().unwrap().clone());
        }
        let fault = json!({ "fault": "kill-server@1s", "firedAtMs": 1000.0, "endedAtMs": 1400.0, "note": "" });
        let entry = json!({
            "couponId": 1, "k6": k6, "result": result, "requestRecords": records,
            "faults": [fault], "confirmations": confirmations,
        });
        methods.insert(method.to_string(), entry);
    }
    let results = json!({
        "title": "Event open", "description": "Recorded inputs, drawn by the runner's report code.",
        "provenance": { "command": "cargo xtask loadtest spike", "commit": format!("scale-{scale}") },
        "methods": methods,
    });
    std::fs::write(dir.join("results.json"), results.to_string()).unwrap();
    last_answer_us / 1_000_000 + 1
}

/// A list of texts the page returned.
fn texts(list: &Value) -> Vec<&str> {
    let list = list.as_array().expect("a list");
    list.iter()
        .map(|text| text.as_str().expect("a text"))
        .collect()
}

fn url(page: &Path) -> String {
    format!("file://{}", page.display())
}

#[tokio::test]
async fn the_report_draws_each_methods_percentiles_and_seconds_and_a_diff_overlays_two_runs() {
    let dir = std::env::temp_dir().join(format!("couponlab-report-charts-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    let (run_a, run_b, diff) = (dir.join("a"), dir.join("b"), dir.join("diff"));
    let seconds = recorded_run(&run_a, 1.0);
    recorded_run(&run_b, 1.5);
    let (a, b, out) = (
        run_a.to_str().unwrap(),
        run_b.to_str().unwrap(),
        diff.to_str().unwrap(),
    );
    runner(&["redraw", a]);
    runner(&["redraw", b]);
    runner(&["diff", a, b, "--out", out]);

    let page = run_a.join("report.html");
    let bytes = std::fs::metadata(&page).unwrap().len();
    let browser = Browser::start().await;
    browser.open(&url(&page)).await;
    let opened_ms = browser
        .read("return performance.getEntriesByType('navigation')[0].loadEventEnd;")
        .await;
    println!("report.html of 3 methods: {bytes} bytes, opened in {opened_ms} ms (load event end)");

    // A line per method (client; no server histogram in these inputs), each
    // ending at or past the 99.9th percentile: x is 1/(1-p).
    let lines = browser
        .read(
            "const u = window.couponlabCharts.percentiles;
             return u.series.slice(1).map((s, i) => {
               const ys = u.data[i + 1];
               let last = ys.length - 1;
               while (last > 0 && ys[last] == null) last--;
               return { label: s.label, lastX: u.data[0][last], points: ys.filter(y => y != null).length };
             });",
        )
        .await;
    let lines = lines.as_array().unwrap();
    assert_eq!(lines.len(), METHODS.len(), "{lines:?}");
    for (line, method) in lines.iter().zip(
        METHODS
            .iter()
            .copied()
            .collect::<std::collections::BTreeSet<_>>(),
    ) {
        assert!(
            line["label"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{method} · client")),
            "{line}"
        );
        let last_percentile = 1.0 - 1.0 / line["lastX"].as_f64().unwrap();
        assert!(
            last_percentile >= 0.999,
            "{method}'s line ends at p{}",
            last_percentile * 100.0
        );
        assert!(line["points"].as_u64().unwrap() > 20, "{line}");
    }

    // Hovering the chart shows the percentile and each line's value there.
    let legend = "return [...document.querySelectorAll('#percentiles .u-legend .u-value')].map(v => v.textContent);";
    let over = browser
        .client
        .find(Locator::Css("#percentiles .u-over"))
        .await
        .unwrap();
    let hover = MouseActions::new("mouse".into()).then(PointerAction::MoveToElement {
        element: over,
        duration: None,
        x: 150.0,
        y: 0.0,
    });
    browser.client.perform_actions(hover).await.unwrap();
    // uPlot updates its legend on the next frame after the pointer moved.
    let hovered = "return document.querySelector('#percentiles .u-legend .u-value').textContent.endsWith(' %');";
    until(
        "the hovered percentile is shown",
        Duration::from_secs(5),
        || async { browser.read(hovered).await == json!(true) },
    )
    .await;
    let shown = browser.read(legend).await;
    let shown = texts(&shown);
    assert!(
        shown[0].ends_with(" %"),
        "the percentile hovered: {shown:?}"
    );
    assert!(
        shown[1..].iter().all(|value| value.ends_with(" ms")),
        "values hovered: {shown:?}"
    );

    // Each method's seconds: one point a second, from the first request
    // sent to the last answer.
    let points: Value = browser
        .read("return window.couponlabCharts.timelines.map(u => u.data[0].length);")
        .await;
    assert_eq!(
        points,
        json!(vec![seconds; 2 * METHODS.len() + 1]),
        "two charts a method, and the lag of the one answering 202"
    );
    // The 202s' lag: all confirmed in the first second, 20 to 515 ms after
    // their 202, so its p50 and p99 lie there; none after.
    let lag = browser
        .read(
            "const lag = window.couponlabCharts.timelines
               .filter(u => u.root.parentElement.classList.contains('lag'));
             return lag.map(u => ({ method: u.root.parentElement.dataset.method,
                                    p50: u.data[1], p99: u.data[2], confirmed: u.data[3] }));",
        )
        .await;
    let lag = lag.as_array().unwrap();
    assert_eq!(lag.len(), 1, "{lag:?}");
    assert_eq!(lag[0]["method"], json!(ACCEPTING));
    let first = |series: &str| lag[0][series][0].as_f64().unwrap();
    assert!((20.0..=530.0).contains(&first("p50")), "{lag:?}");
    assert!(
        first("p50") < first("p99") && first("p99") <= 530.0,
        "{lag:?}"
    );
    assert_eq!(first("confirmed"), TOTAL as f64, "{lag:?}");
    assert!(
        lag[0]["p50"][1].is_null(),
        "no confirmation after the first second"
    );
    browser.screenshot("report-charts.png").await;

    // Two runs overlaid: both runs' curves, and their differences.
    browser.open(&url(&diff.join("report.html"))).await;
    let labels = browser
        .read("return window.couponlabCharts.percentiles.series.slice(1).map(s => s.label);")
        .await;
    let labels = texts(&labels);
    for run in ["A", "B"] {
        let of_run = labels
            .iter()
            .filter(|l| l.contains(&format!("client · {run} ")))
            .count();
        assert_eq!(of_run, METHODS.len(), "{labels:?}");
    }
    let differences = browser
        .read(
            "return [...document.querySelectorAll('#differences tr[data-method]')]
               .map(tr => [...tr.children].map(c => c.textContent));",
        )
        .await;
    let p99 = differences
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row[0] == "PESSIMISTIC · client p99.9 ms")
        .unwrap_or_else(|| panic!("no client p99.9 row: {differences}"));
    let (in_a, in_b): (f64, f64) = (
        p99[1].as_str().unwrap().parse().unwrap(),
        p99[2].as_str().unwrap().parse().unwrap(),
    );
    assert!(in_b > in_a, "B is the slower run: {p99}");
    let commits = browser
        .read("return [...document.querySelectorAll('#changed tr[data-method=\"commit\"] td')].map(c => c.textContent);")
        .await;
    assert_eq!(commits, json!(["scale-1", "scale-1.5", "changed"]));
    browser.screenshot("report-diff.png").await;
    browser.close().await;
    std::fs::remove_dir_all(&dir).ok();
}
