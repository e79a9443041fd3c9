//! The console in a real browser: headless Chromium, driven through
//! chromedriver (WebDriver), against a real server. The page must show what
//! the API answers: a coupon's figures and outcome counts equal to its
//! result, a component dropped into the directory without a reload, a
//! refused file's reason, a 404's message, and the reports it lists; a
//! request's waterfall bar for bar as its trace's calls, and the
//! anomalies with the witnesses the result names.
//!
//! Each run writes screenshots to `target/artifacts/`: the console during
//! a spike, at 1280 px and at a phone's 390 px, and a waterfall under a
//! READ_COMMITTED over-issue's anomalies. (The load-test smoke run
//! adds one of a report the runner rendered.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder};
use serde_json::{Value, json};

use crate::common::{Setup, TestLab, component, until};

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";
/// How long the page may take to show what the API answers (it polls
/// every second).
const SHOWN: Duration = Duration::from_secs(15);

/// A headless Chromium session and the chromedriver serving it; both end
/// when it is dropped or closed. The report's charts use it too.
pub(crate) struct Browser {
    pub(crate) client: Client,
    _driver: tokio::process::Child,
}

impl Browser {
    pub(crate) async fn start() -> Browser {
        assert!(
            Path::new(CHROMEDRIVER).exists() && Path::new(CHROMIUM).exists(),
            "chromium and chromedriver are missing: `cargo xtask test` installs them \
             (apt-get install chromium chromium-driver)"
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = tokio::process::Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver starts");
        let capabilities = json!({
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,900"],
            }
        });
        let capabilities = capabilities.as_object().unwrap().clone();
        let url = format!("http://127.0.0.1:{port}");
        let started = std::time::Instant::now();
        let client = loop {
            let connected =
                ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                    .capabilities(capabilities.clone())
                    .connect(&url)
                    .await;
            match connected {
                Ok(client) => break client,
                Err(err) if started.elapsed() < Duration::from_secs(20) => {
                    let _ = err;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(err) => panic!("no WebDriver session on {url}: {err}"),
            }
        };
        Browser {
            client,
            _driver: driver,
        }
    }

    pub(crate) async fn open(&self, url: &str) {
        self.client.goto(url).await.unwrap();
    }

    /// What `script` (a function body) returns, run in the page: one
    /// snapshot of elements the page redraws every second.
    pub(crate) async fn read(&self, script: &str) -> Value {
        self.client.execute(script, vec![]).await.unwrap()
    }

    /// Waits until `script` returns what `expected` says it should.
    async fn until_shows(
        &self,
        what: &str,
        script: &str,
        expected: impl Fn(&Value) -> bool,
    ) -> Value {
        until(what, SHOWN, || async { expected(&self.read(script).await) }).await;
        self.read(script).await
    }

    /// Waits until `script` returns `expected`.
    async fn until_is(&self, what: &str, script: &str, expected: Value) {
        self.until_shows(what, script, |shown| shown == &expected)
            .await;
    }

    pub(crate) async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.unwrap();
        std::fs::create_dir_all(artifacts()).unwrap();
        std::fs::write(artifacts().join(name), png).unwrap();
    }

    pub(crate) async fn close(self) {
        self.client.close().await.unwrap();
    }
}

/// Where test runs leave what a person looks at afterwards.
fn artifacts() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("artifacts")
}

/// The figures of one coupon's row of the coupons table, by field.
fn coupon_row(coupon: u64) -> String {
    format!(
        "const row = document.querySelector('#coupons tr[data-coupon=\"{coupon}\"]');
         if (!row) return null;
         return Object.fromEntries([...row.querySelectorAll('[data-field]')]
           .map((td) => [td.dataset.field, td.textContent]));"
    )
}

/// The open coupon's requests by outcome, as the page shows them.
const OUTCOME_COUNTS: &str = "return Object.fromEntries([...document.querySelectorAll(
    '#outcome-counts tr[data-outcome]')].map((tr) => [tr.dataset.outcome, tr.querySelector('.count').textContent]));";

/// Text of the API as the page writes it: a number's own digits.
fn shown(value: &Value) -> String {
    value.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_console_shows_a_coupons_figures_as_its_result_answers_them() {
    let lab = Setup::with(&["redis_lua"]).start().await;
    let (members, coupon) = lab.members_and_coupon(600, 100).await;
    let browser = Browser::start().await;
    browser
        .open(&format!("{}/#/coupons/{coupon}", lab.base))
        .await;

    // A spike in waves, a quarter of a second apart, so the page reads it
    // while it goes on.
    let burst = {
        let (base, client) = (lab.base.clone(), lab.client.clone());
        tokio::spawn(async move {
            for wave in members.chunks(50) {
                let requests = wave.iter().map(|&member| {
                    client
                        .post(format!("{base}/lab/coupons/{coupon}/issue"))
                        .json(&json!({ "memberId": member, "method": "REDIS_LUA" }))
                        .send()
                });
                futures::future::join_all(requests).await;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    browser.client.set_window_size(1280, 1500).await.unwrap();
    browser.screenshot("console-spike.png").await;
    burst.await.unwrap();

    let result = lab.result(coupon).await;
    assert_eq!(result["issueRows"], json!(100), "{result}");
    let row = browser
        .until_shows(
            "the row shows the last result",
            &coupon_row(coupon),
            |row| {
                row["issueRows"] == json!(shown(&result["issueRows"]))
                    && row["outOfTurn"]
                        == json!(shown(
                            &result["requests"]["fairness"]["servedAfterEarlierSoldOut"]
                        ))
            },
        )
        .await;
    for (field, expected) in [
        ("totalCount", &result["totalCount"]),
        ("issueRows", &result["issueRows"]),
        ("setSize", &result["redis"]["setSize"]),
        ("overIssued", &result["overIssued"]),
        ("duplicateMembers", &result["duplicateMembers"]),
    ] {
        assert_eq!(
            row[field],
            json!(shown(expected)),
            "{field}: {row} against {result}"
        );
    }
    let expected: BTreeMap<String, String> = result["requests"]["byOutcome"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(outcome, count)| (outcome.clone(), shown(count)))
        .collect();
    assert_eq!(expected.get("ISSUED").map(String::as_str), Some("100"));
    let same_counts = "the outcome counts are the result's";
    browser
        .until_is(same_counts, OUTCOME_COUNTS, json!(expected))
        .await;
    // The time series are uPlot's: issued against the total, the last
    // reading at the result's rows.
    let issued = "const p = window.consolePlots['chart-issued']; if (!p) return null; \
         const rows = p.plot.data[1]; return [p.plot.series.map((s) => s.label), rows[rows.length - 1]];";
    let issued = browser
        .until_shows("the issued chart reaches the rows", issued, |shown| {
            shown[1] == result["issueRows"]
        })
        .await;
    assert_eq!(
        issued[0],
        json!(["since the first reading", "issue rows", "total 100"])
    );
    browser.screenshot("console-after-spike.png").await;
    browser.client.set_window_size(390, 1500).await.unwrap();
    browser.screenshot("console-phone.png").await;

    // An unknown coupon gets the API's own answer, not a blank page.
    let unknown = coupon + 999_999;
    let message = lab.get(&format!("/lab/coupons/{unknown}/result")).await;
    let message = message.fails_with(404).to_string();
    browser
        .open(&format!("{}/#/coupons/{unknown}", lab.base))
        .await;
    let error = "const e = document.getElementById('coupon-error'); return e.hidden ? null : e.textContent;";
    browser
        .until_is("the 404's message is shown", error, json!(message))
        .await;
    browser.close().await;
    lab.finish().await;
}

/// The anomalies the page shows: each one's kind and its witnesses' trace,
/// role, member, outcome, values read, and read and write times; `null`
/// until the page has drawn the open coupon's anomalies.
const ANOMALIES: &str = "const shown = document.getElementById('anomalies');
    if (shown.dataset.count === undefined) return null;
    const field = (tr, name) => tr.querySelector(`[data-field=\"${name}\"]`).textContent;
    return [...shown.querySelectorAll('.anomaly')].map((a) => ({ kind: a.dataset.kind,
      witnesses: [...a.querySelectorAll('tbody tr')].map((tr) => [tr.dataset.trace, tr.dataset.role,
        field(tr, 'memberId'), field(tr, 'outcome'), field(tr, 'read'), field(tr, 'readAt'), field(tr, 'wroteAt')]) }));";

/// What the page should show of the result's anomalies: as [`ANOMALIES`]
/// reads them, times in µs after the first witness read (or arrived).
fn anomalies_of(result: &Value) -> Value {
    let anomalies = result["anomalies"]
        .as_array()
        .expect("the result's anomalies");
    let read = |read: &Value| {
        let values: Vec<String> = read
            .as_object()
            .into_iter()
            .flatten()
            .map(|(name, value)| match name.as_str() {
                "reply" => format!("→ {value}"),
                _ => format!("{name}={value}"),
            })
            .collect();
        if values.is_empty() {
            "—".to_string()
        } else {
            values.join(" ")
        }
    };
    let shown: Vec<Value> = anomalies
        .iter()
        .map(|anomaly| {
            let witnesses = anomaly["witnesses"].as_array().unwrap();
            let first = witnesses.first().unwrap_or(&Value::Null);
            let base = first["readAtUs"].as_i64().or(first["arrivedUs"].as_i64());
            let after = |at: &Value| match (at.as_i64(), base) {
                (Some(at), Some(base)) if at > base => format!("+{}", at - base),
                (Some(at), Some(base)) => (at - base).to_string(),
                _ => "—".to_string(),
            };
            let witnesses: Vec<Value> = witnesses
                .iter()
                .map(|w| {
                    json!([
                        shown(&w["traceId"]),
                        w["role"],
                        shown(&w["memberId"]),
                        w["outcome"],
                        read(&w["read"]),
                        after(&w["readAtUs"]),
                        after(&w["wroteAtUs"]),
                    ])
                })
                .collect();
            json!({ "kind": anomaly["kind"], "witnesses": witnesses })
        })
        .collect();
    json!(shown)
}

/// The waterfall drawn of `part` (`request` or its `confirmation`): its
/// trace and, bar by bar, the call's op, capability, start and how many
/// bars it has; `null` before one is drawn.
fn waterfall(part: &str) -> String {
    format!(
        "const figure = document.getElementById('waterfall-{part}');
         if (!figure) return null;
         return {{ trace: figure.dataset.trace, calls: [...figure.querySelectorAll('.call')].map((g) =>
           [g.dataset.op, g.dataset.capability, g.dataset.start, g.querySelectorAll('rect').length]) }};"
    )
}

/// What [`waterfall`] should read of `trace`: one bar a call, in order.
fn waterfall_of(trace: &Value) -> Value {
    let calls: Vec<Value> = trace["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|call| json!([call["op"], call["capability"], shown(&call["startUs"]), 1]))
        .collect();
    json!({ "trace": shown(&trace["id"]), "calls": calls })
}

/// Clicks the first element `selector` finds, once the page shows it.
async fn click(browser: &Browser, what: &str, selector: &str) {
    let found = format!("return document.querySelector('{selector}') !== null;");
    browser.until_is(what, &found, json!(true)).await;
    browser
        .read(&format!(
            "document.querySelector('{selector}').click(); return true;"
        ))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_console_draws_a_requests_calls_and_an_anomalys_witnesses_as_the_api_lists_them() {
    let lab = Setup::with(&["redis_lua", "read_committed"]).start().await;
    let members = lab.members(60).await;

    // One REDIS_LUA request: its waterfall is its trace's calls, one bar
    // each, in order; the coupon's anomalies are the result's (none).
    let coupon = lab.coupon(5).await;
    lab.issue(coupon, members[0], "REDIS_LUA").await.expect_ok();
    let listed = lab
        .get(&format!(
            "/lab/coupons/{coupon}/traces?outcome=ISSUED&method=REDIS_LUA"
        ))
        .await;
    let trace = listed.expect_ok()["traces"][0].clone();
    let ops = trace["calls"].as_array().unwrap();
    assert!(ops.iter().any(|c| c["op"] == "EVALSHA"), "{trace:#}");
    assert!(ops.iter().any(|c| c["op"] == "COMMIT"), "{trace:#}");
    let browser = Browser::start().await;
    browser
        .open(&format!("{}/#/coupons/{coupon}", lab.base))
        .await;
    let result = lab.result(coupon).await;
    let expected = anomalies_of(&result);
    browser
        .until_is("the anomalies are the result's", ANOMALIES, expected)
        .await;
    let id = &trace["id"];
    let listed = format!("#traces tbody button[data-trace=\"{id}\"]");
    click(&browser, "the trace is listed", &listed).await;
    let drawn = waterfall("request");
    browser
        .until_is(
            "the waterfall is the trace's calls",
            &drawn,
            waterfall_of(&trace),
        )
        .await;
    let labels = browser
        .read("return [...document.querySelectorAll('#waterfall-request .call .label')].map((t) => t.textContent);")
        .await;
    let insert = labels
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l.as_str().unwrap().starts_with("INSERT"));
    assert!(
        insert.is_some_and(|l| l.as_str().unwrap().contains("1 row")),
        "{labels}"
    );

    // A READ_COMMITTED burst over-issues: each anomaly's witnesses are the
    // result's, and a witness's trace is drawn as the API lists it.
    let mut over = None;
    for _ in 0..5 {
        let coupon = lab.coupon(5).await;
        lab.issue_all(coupon, &members[1..], "READ_COMMITTED").await;
        let result = lab.result(coupon).await;
        if result["overIssued"].as_i64().unwrap() > 0 {
            over = Some((coupon, result));
            break;
        }
    }
    let (coupon, result) = over.expect("five bursts of 59 on 5 never over-issued");
    browser
        .open(&format!("{}/#/coupons/{coupon}", lab.base))
        .await;
    let expected = anomalies_of(&result);
    assert!(expected.to_string().contains("stale-read"), "{result:#}");
    browser
        .until_is("the anomalies are the result's", ANOMALIES, expected)
        .await;
    let lost = result["anomalies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["kind"] == "lost-update")
        .unwrap();
    let witness = &lost["witnesses"][1];
    let listed = lab
        .get(&format!(
            "/lab/coupons/{coupon}/traces?anomaly=lost-update&limit=1000"
        ))
        .await;
    let trace = listed.expect_ok()["traces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == witness["traceId"])
        .expect("the witness's trace is listed")
        .clone();
    let button = format!(
        "#anomalies .anomaly[data-kind=\"lost-update\"] tr[data-trace=\"{}\"] button",
        witness["traceId"]
    );
    click(&browser, "the witness is shown", &button).await;
    browser
        .until_is(
            "the witness's calls are drawn",
            &drawn,
            waterfall_of(&trace),
        )
        .await;
    browser.client.set_window_size(1280, 2400).await.unwrap();
    browser.screenshot("console-anomalies.png").await;
    browser.close().await;
    lab.finish().await;
}

/// Installs `bytes` as `name` the way `cargo xtask strategies` does: a
/// temporary file, then a rename.
fn install(dir: &Path, name: &str, bytes: &[u8]) {
    let partial = dir.join(format!("{name}.partial"));
    std::fs::write(&partial, bytes).unwrap();
    std::fs::rename(&partial, dir.join(name)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_strategies_list_follows_the_directory_without_a_reload() {
    let lab = Setup::with(&[]).start().await;
    let browser = Browser::start().await;
    browser.open(&format!("{}/", lab.base)).await;
    // A mark on this page: gone if it were ever reloaded.
    browser
        .read("window.notReloaded = true; return true;")
        .await;
    let method = |name: &str| {
        format!(
            "return document.querySelector('#strategies tr[data-method=\"{name}\"]') !== null && window.notReloaded === true;"
        )
    };

    let pessimistic = std::fs::read(component("pessimistic")).unwrap();
    install(&lab.strategy_dir, "pessimistic.wasm", &pessimistic);
    let listed = method("PESSIMISTIC");
    browser
        .until_is("the dropped component is listed", &listed, json!(true))
        .await;

    // The engine the lab's SQL runs on, as the lab names it.
    let engine = lab.get("/lab/strategies").await.expect_ok()["engine"].clone();
    let engine_shown = format!(
        "{} {} (innodb_snapshot_isolation={})",
        engine["name"].as_str().unwrap(),
        engine["version"].as_str().unwrap(),
        engine["settings"]["innodb_snapshot_isolation"]
            .as_str()
            .unwrap()
    );
    let shown_engine =
        "const e = document.getElementById('engine'); return e ? e.textContent : null;";
    browser
        .until_is("the engine is named", shown_engine, json!(engine_shown))
        .await;

    install(&lab.strategy_dir, "broken.wasm", b"not a component");
    let reason = until_rejected(&lab, "broken.wasm").await;
    let shown_reason =
        "const r = document.querySelector('#rejected tr[data-file=\"broken.wasm\"] .reason');
        return r && window.notReloaded === true ? r.textContent : null;";
    let refused = "the refused file's reason is shown";
    browser.until_is(refused, shown_reason, json!(reason)).await;

    std::fs::remove_file(lab.strategy_dir.join("pessimistic.wasm")).unwrap();
    browser
        .until_is("the removed component is gone", &listed, json!(false))
        .await;
    browser.close().await;
    lab.finish().await;
}

/// Waits until the server refused `file`; its reason.
async fn until_rejected(lab: &TestLab, file: &str) -> String {
    let rejected = |listing: &Value| {
        listing["rejected"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["file"].as_str().is_some_and(|f| f.ends_with(file)))
            .map(|r| r["reason"].as_str().unwrap().to_string())
    };
    until("the file is refused", SHOWN, || async {
        rejected(lab.get("/lab/strategies").await.expect_ok()).is_some()
    })
    .await;
    rejected(lab.get("/lab/strategies").await.expect_ok()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_lists_the_reports_and_opens_one() {
    let reports = std::env::temp_dir().join(format!("couponlab-reports-{}", std::process::id()));
    let dir = reports.clone();
    let lab = Setup::with(&["redis_stream_atomic"])
        .own_redis_db()
        .tune(move |config| config.reports_dir = dir)
        .start()
        .await;
    // A run's directory as the load runner leaves it, with the figures of
    // a real run: 200 members at once on a coupon of 50. (What the runner
    // renders is checked by its own tests and the smoke run.)
    let (members, coupon) = lab.members_and_coupon(200, 50).await;
    lab.issue_all(coupon, &members, "REDIS_STREAM_ATOMIC").await;
    let result = lab.drained(coupon, 50).await;
    let method = "REDIS_STREAM_ATOMIC";
    let run = "2026-01-01T10-00-00Z";
    let title = "Event open";
    let dir = reports.join(run);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("report.html"),
        format!(
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title></head>\
             <body><h1>{title}</h1><table id=\"summary\"><tr data-method=\"{method}\"><th>{method}</th>\
             <td>{}</td></tr></table></body></html>",
            result["issueRows"]
        ),
    )
    .unwrap();
    std::fs::write(dir.join("report.md"), format!("# {title}\n")).unwrap();
    std::fs::write(
        dir.join("results.json"),
        json!({ "title": title, "methods": { method: { "result": result } } }).to_string(),
    )
    .unwrap();

    // A name that climbs out of the directory gets the envelope.
    for (path, status) in [
        (format!("/lab/reports/{run}/..%2Fresults.json"), 400),
        ("/lab/reports/..%2F..%2Fetc/passwd".to_string(), 400),
        (format!("/lab/reports/{run}/.hidden"), 400),
        (format!("/lab/reports/{run}/missing.html"), 404),
    ] {
        lab.get(&path).await.fails_with(status);
    }

    // A run of rounds leaves files of long names: the panel holds them.
    for round in 1..=3 {
        std::fs::write(
            dir.join(format!("requests-{method}@mariadb-si-round{round}.csv")),
            "",
        )
        .unwrap();
    }

    let browser = Browser::start().await;
    browser.open(&format!("{}/", lab.base)).await;
    // At 1280 px a strategy is one line high (a long cell told whole on
    // hover) and the reports panel stays inside the page.
    let strategy_lines = "return [...document.querySelectorAll('#strategies tbody tr[data-method]')].map(tr => \
         tr.getBoundingClientRect().height / parseFloat(getComputedStyle(tr.querySelector('td')).lineHeight));";
    let lines = browser
        .until_shows("the strategy is listed", strategy_lines, |lines| {
            lines.as_array().is_some_and(|lines| !lines.is_empty())
        })
        .await;
    assert!(
        lines
            .as_array()
            .unwrap()
            .iter()
            .all(|lines| lines.as_f64().unwrap() < 2.0),
        "rows of more than one line: {lines}"
    );
    let listed =
        format!("return document.querySelector('#reports tr[data-run=\"{run}\"]') !== null;");
    browser
        .until_is("the run is listed", &listed, json!(true))
        .await;
    let inside = browser
        .read(
            "const page = document.documentElement.clientWidth; \
             const panel = document.getElementById('reports').closest('section').getBoundingClientRect(); \
             return [panel.right <= page, document.documentElement.scrollWidth <= page];",
        )
        .await;
    assert_eq!(
        inside,
        json!([true, true]),
        "the reports panel runs off the page"
    );
    let link = format!(
        "const a = document.querySelector('#reports tr[data-run=\"{run}\"] th a'); return a ? a.href : null;"
    );
    let href = browser
        .until_shows("the report is listed", &link, |href| href.is_string())
        .await;
    assert!(
        href.as_str()
            .unwrap()
            .ends_with(&format!("/lab/reports/{run}/report.html")),
        "{href}"
    );
    browser
        .read(&format!(
            "document.querySelector('#reports tr[data-run=\"{run}\"] th a').click(); return true;"
        ))
        .await;
    let heading = "const h = document.querySelector('h1'); return h ? h.textContent : null;";
    browser
        .until_is("the report opens", heading, json!(title))
        .await;
    let rows_shown = browser
        .read(&format!(
            "return document.querySelector('#summary tr[data-method=\"{method}\"]').textContent;"
        ))
        .await;
    assert!(rows_shown.as_str().unwrap().contains("50"), "{rows_shown}");
    browser.close().await;
    lab.finish().await;
    std::fs::remove_dir_all(&reports).ok();
}
