//! `cargo xtask loadtest`: compare methods with k6 and write a report.
//!
//! ```text
//! cargo xtask loadtest compare  --methods PESSIMISTIC,REDIS_LUA [--rate 300] [--duration 10s] [--total 1000]
//! cargo xtask loadtest spike    --methods REDIS_LUA [--members 3000] [--total 100]
//! cargo xtask loadtest capacity --method REDIS_LUA [--start 200] [--step 200] [--max 5000]
//!                               [--duration 5s] [--max-failure-rate 0.01] [--max-p99-ms 100]
//! common: [--base-url http://127.0.0.1:8080] [--serve] [--out DIR] [--prometheus-rw [URL]]
//! cargo xtask loadtest smoke    (the short checked run `cargo xtask test` ends with)
//! cargo xtask loadtest --help   (this usage)
//! ```
//!
//! For each method, one after another: create members (one per request)
//! and a fresh coupon, run `loadtest/issue.js`, wait until every accepted
//! request has its outcome, read the coupon's result. Reports go to
//! `loadtest/reports/<UTC time>/` (report.md, chart.svg, report.html,
//! results.json).
//! `--serve` starts a server of its own on a free port, with a database of
//! its own and Redis database 10, instead of using --base-url.
//! `--prometheus-rw` (or `K6_PROMETHEUS_RW_SERVER_URL` set) adds k6's
//! `experimental-prometheus-rw` output, so k6's figures land in the
//! Prometheus that scrapes the server (`docker compose up -d prometheus grafana`).

mod html;
mod http;
mod k6;
mod report;
mod server;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use serde_json::{Value, json};

pub use self::http::Api;
use self::k6::K6;
use self::report::Row;
pub use self::server::database_url;
use crate::root;

/// How long an asynchronous method may take to confirm what it accepted.
const DRAIN_LIMIT: Duration = Duration::from_secs(300);

/// What `cargo xtask loadtest --help` prints.
const USAGE: &str = "\
usage: cargo xtask loadtest <mode> [options]

  compare   --methods A,B,... [--rate 300] [--duration 10s] [--total 1000]
            each method in turn at a constant arrival rate, on a coupon of its own
  spike     --methods A,B,... [--members 3000] [--total 100]
            every member asks at second zero (the event-open scenario)
  capacity  --method A [--start 200] [--step 200] [--max 5000] [--duration 5s]
            [--max-failure-rate 0.01] [--max-p99-ms 100]
            raise the rate until the failure rate or p99 passes its bound
  smoke     the short checked run `cargo xtask test` ends with

common: [--base-url http://127.0.0.1:8080] [--serve] [--out DIR] [--prometheus-rw [URL]]
  --serve   start a server of its own (own database, Redis db 10) instead of --base-url
  --out     where the report goes (default loadtest/reports/<UTC time>/)
  --prometheus-rw
            k6 also writes its figures to this Prometheus remote-write URL
            (default http://127.0.0.1:9090/api/v1/write, the docker compose
            Prometheus); K6_PROMETHEUS_RW_SERVER_URL set does the same";

/// The options each mode reads; anything else is a typo worth stopping for.
fn known_options(mode: &str) -> Option<&'static [&'static str]> {
    Some(match mode {
        "compare" => &["methods", "rate", "duration", "total"],
        "spike" => &["methods", "members", "total"],
        "capacity" => &[
            "method",
            "start",
            "step",
            "max",
            "duration",
            "max-failure-rate",
            "max-p99-ms",
        ],
        _ => return None,
    })
}

pub fn main(args: &[String]) -> anyhow::Result<()> {
    if args
        .iter()
        .any(|a| matches!(a.as_str(), "--help" | "-h" | "help"))
    {
        println!("{USAGE}");
        return Ok(());
    }
    if args.first().map(String::as_str) == Some("smoke") {
        return smoke();
    }
    let Some((mode, rest)) = args.split_first() else {
        bail!("{USAGE}")
    };
    let mode = mode.as_str();
    let Some(known) = known_options(mode) else {
        bail!("unknown loadtest mode {mode:?}: compare, spike, capacity or smoke")
    };
    let options = Options::parse(rest)?;
    options.check(known)?;
    let server = if options.flag("serve") {
        Some(server::Server::start(true)?)
    } else {
        None
    };
    let base_url = match &server {
        Some(server) => server.base_url(),
        None => options.text("base-url", "http://127.0.0.1:8080"),
    };
    let api = Api::new(&base_url)?;
    let k6 = K6::ensure(options.remote_write())?;
    let out = options
        .get("out")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("loadtest").join("reports").join(timestamp()));
    let outcome = match mode {
        "compare" => compare(&api, &k6, &options, &out, false),
        "spike" => compare(&api, &k6, &options, &out, true),
        _ => capacity(&api, &k6, &options, &out),
    };
    drop(server);
    outcome
}

/// The runner end to end on a short, slow run, checked: `cargo xtask test`
/// ends with it, on the binary the tests just built.
pub fn smoke() -> anyhow::Result<()> {
    println!("load test smoke run: k6 against a server of its own");
    let server = server::Server::start(false)?;
    let api = Api::new(&server.base_url())?;
    // Checked figures only: the smoke run writes to no Prometheus.
    let k6 = K6::ensure(None)?;
    let out = root().join("target").join("loadtest-smoke");
    std::fs::remove_dir_all(&out).ok();
    let args = [
        "--methods",
        "PESSIMISTIC,REDIS_STREAM_ATOMIC",
        "--rate",
        "20",
        "--duration",
        "2s",
        "--total",
        "10",
    ];
    let options = Options::parse(&args.map(String::from))?;
    compare(&api, &k6, &options, &out, false)?;
    drop(server);
    let report = std::fs::read_to_string(out.join("report.md"))?;
    let chart = std::fs::read_to_string(out.join("chart.svg"))?;
    let html = std::fs::read_to_string(out.join("report.html"))?;
    for method in ["PESSIMISTIC", "REDIS_STREAM_ATOMIC"] {
        let row = report
            .lines()
            .find(|line| line.starts_with(&format!("| {method} |")));
        let Some(row) = row else {
            bail!("the smoke report has no row for {method}")
        };
        // Columns: total, rows, over-issued: 10 issued of 10, none over.
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        if cells[11..14] != ["10", "10", "0"] {
            bail!("unexpected smoke figures for {method}: {row}");
        }
        if !chart.contains(&format!(">{method}</text>")) {
            bail!("the smoke chart has no bar for {method}");
        }
        if !html.contains(&format!("<tr data-method=\"{method}\">")) {
            bail!("the smoke report.html has no row for {method}");
        }
    }
    println!("load test smoke run: report and chart as expected");
    Ok(())
}

/// Runs each method on its own coupon and writes the comparison.
fn compare(
    api: &Api,
    k6: &K6,
    options: &Options,
    out: &PathBuf,
    spike: bool,
) -> anyhow::Result<()> {
    let methods = options.list("methods")?;
    let total = options.number("total", if spike { 100 } else { 1000 })?;
    let rate = options.number("rate", 300)?;
    let duration = options.text("duration", "10s");
    let seconds = seconds(&duration)?;
    let members = if spike {
        options.number("members", 3000)?
    } else {
        (rate as f64 * seconds * 1.05) as u64 + 10
    };
    let mut rows = Vec::new();
    let mut raw = BTreeMap::new();
    for (i, method) in methods.iter().enumerate() {
        println!(
            "[{}/{}] {method}: {}",
            i + 1,
            methods.len(),
            if spike {
                format!("{members} members at once on a coupon of {total}")
            } else {
                format!("{rate} req/s for {duration} on a coupon of {total}")
            }
        );
        let run = Run {
            method,
            total,
            members,
            rate,
            duration: &duration,
            spike,
        };
        let (row, k6_figures, result) = run.execute(api, k6, out)?;
        println!(
            "      {:.0} req/s, p99 {:.1} ms, 2xx {}, 409 {}, 503 {}, rows {} of {}{}",
            row.requests_per_second,
            row.p99_ms,
            row.accepted,
            row.conflicts,
            row.unavailable,
            row.issue_rows,
            row.total,
            row.drain_ms
                .map_or(String::new(), |ms| format!(", drained in {ms:.0} ms"))
        );
        raw.insert(
            method.clone(),
            json!({ "k6": k6_figures, "result": result }),
        );
        rows.push(row);
    }
    let (title, description) = if spike {
        (
            "Event open",
            format!(
                "Each method on its own coupon of {total}: {members} distinct members send one request each, all at second zero."
            ),
        )
    } else {
        (
            "Methods side by side",
            format!(
                "Each method on its own coupon of {total}: {rate} requests/s for {duration}, every request from a distinct member."
            ),
        )
    };
    report::write(out, title, &description, &rows, &json!(raw))?;
    println!("\nreport: {}", out.join("report.md").display());
    print!(
        "{}",
        report::markdown(title, &description, &rows)
            .lines()
            .skip(6)
            .collect::<Vec<_>>()
            .join("\n")
    );
    println!();
    Ok(())
}

/// Raises the arrival rate on one method until failures or p99 pass their
/// bound; reports the highest rate that held.
fn capacity(api: &Api, k6: &K6, options: &Options, out: &PathBuf) -> anyhow::Result<()> {
    let method = options
        .get("method")
        .context("--method is required")?
        .to_string();
    let (start, step, max) = (
        options.number("start", 200)?,
        options.number("step", 200)?,
        options.number("max", 5000)?,
    );
    let duration = options.text("duration", "5s");
    let max_failure_rate: f64 = options
        .text("max-failure-rate", "0.01")
        .parse()
        .context("--max-failure-rate")?;
    let max_p99_ms: f64 = options
        .text("max-p99-ms", "100")
        .parse()
        .context("--max-p99-ms")?;
    let seconds = seconds(&duration)?;
    let mut rows = Vec::new();
    let mut raw = BTreeMap::new();
    let mut held = None;
    let mut rate = start;
    while rate <= max {
        // A total no run can exhaust: every request does the full work.
        let members = (rate as f64 * seconds * 1.05) as u64 + 10;
        println!("{method} at {rate} req/s for {duration}");
        let run = Run {
            method: &method,
            total: members,
            members,
            rate,
            duration: &duration,
            spike: false,
        };
        let (mut row, k6_figures, result) = run.execute(api, k6, out)?;
        let holds =
            row.failure_rate() <= max_failure_rate && row.p99_ms <= max_p99_ms && row.dropped == 0;
        println!(
            "      {:.0} req/s achieved, p99 {:.1} ms, failures {:.2}%, dropped {}: {}",
            row.requests_per_second,
            row.p99_ms,
            row.failure_rate() * 100.0,
            row.dropped,
            if holds { "held" } else { "did not hold" }
        );
        row.method = format!("{method} @ {rate}/s");
        raw.insert(
            row.method.clone(),
            json!({ "k6": k6_figures, "result": result }),
        );
        rows.push(row);
        if !holds {
            break;
        }
        held = Some(rate);
        rate += step;
    }
    let verdict = match held {
        // Every step held: the limit lies beyond the search.
        Some(rate) if rate + step > max => format!(
            "{method} held every step up to **{rate} req/s**, the last one below --max {max}; raise --max to search further"
        ),
        Some(rate) => format!("The highest arrival rate that held for {method}: **{rate} req/s**"),
        None => format!("{method} did not hold even {start} req/s"),
    };
    let description = format!(
        "{verdict} (bounds: failures ≤ {:.1}%, p99 ≤ {max_p99_ms} ms, no dropped iterations; {duration} per step, on a coupon no step can sell out).",
        max_failure_rate * 100.0
    );
    report::write(
        out,
        "Capacity of one coupon",
        &description,
        &rows,
        &json!(raw),
    )?;
    println!("\n{verdict}\nreport: {}", out.join("report.md").display());
    Ok(())
}

/// One method, one coupon, one k6 run.
struct Run<'a> {
    method: &'a str,
    total: u64,
    members: u64,
    rate: u64,
    duration: &'a str,
    spike: bool,
}

impl Run<'_> {
    fn execute(&self, api: &Api, k6: &K6, out: &PathBuf) -> anyhow::Result<(Row, Value, Value)> {
        let created = api.post("/lab/members", &json!({ "count": self.members }))?;
        let first_member = created["firstId"].as_u64().context("no firstId")?;
        let coupon = api.post(
            "/lab/coupons",
            &json!({ "name": format!("loadtest {}", self.method), "totalCount": self.total }),
        )?;
        let coupon_id = coupon["id"].as_u64().context("no coupon id")?;

        std::fs::create_dir_all(out)?;
        let summary = out.join(format!("k6-{}-{coupon_id}.json", self.method));
        let env = [
            ("BASE_URL", api.base_url()),
            ("METHOD", self.method.to_string()),
            ("COUPON_ID", coupon_id.to_string()),
            ("FIRST_MEMBER", first_member.to_string()),
            ("MEMBERS", self.members.to_string()),
            (
                "MODE",
                if self.spike { "spike" } else { "rate" }.to_string(),
            ),
            ("RATE", self.rate.to_string()),
            ("DURATION", self.duration.to_string()),
        ];
        let figures = k6.run_issue_script(&env, &summary)?;
        std::fs::remove_file(&summary).ok();

        let drained_at = Instant::now();
        let mut result = api.get(&format!("/lab/coupons/{coupon_id}/result"))?;
        let asynchronous = result.get("accepted").is_some();
        while result["pending"].as_u64().unwrap_or(0) > 0 {
            if drained_at.elapsed() > DRAIN_LIMIT {
                println!(
                    "      still {} pending after {DRAIN_LIMIT:?}; reporting as is",
                    result["pending"]
                );
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
            result = api.get(&format!("/lab/coupons/{coupon_id}/result"))?;
        }
        let drain_ms = asynchronous.then(|| drained_at.elapsed().as_secs_f64() * 1000.0);
        Ok((
            Row::from(self.method, &figures, &result, drain_ms),
            figures,
            result,
        ))
    }
}

/// `--key value` options and `--flag`s.
struct Options(BTreeMap<String, Option<String>>);

impl Options {
    fn parse(args: &[String]) -> anyhow::Result<Self> {
        let mut map = BTreeMap::new();
        let mut args = args.iter().peekable();
        while let Some(arg) = args.next() {
            let Some(key) = arg.strip_prefix("--") else {
                bail!("unexpected argument {arg:?}")
            };
            let value = args.next_if(|next| !next.starts_with("--")).cloned();
            map.insert(key.to_string(), value);
        }
        Ok(Options(map))
    }

    /// Fails on an option the mode does not read (`known` plus the common ones).
    fn check(&self, known: &[&str]) -> anyhow::Result<()> {
        const COMMON: [&str; 4] = ["base-url", "serve", "out", "prometheus-rw"];
        for key in self.0.keys() {
            if !known.contains(&key.as_str()) && !COMMON.contains(&key.as_str()) {
                bail!(
                    "unknown option --{key}; this mode reads --{} and --{}",
                    known.join(", --"),
                    COMMON.join(", --")
                );
            }
        }
        Ok(())
    }

    /// Where k6 also writes its figures: `--prometheus-rw [URL]`, else
    /// `K6_PROMETHEUS_RW_SERVER_URL` when set, else nowhere.
    fn remote_write(&self) -> Option<String> {
        if self.flag("prometheus-rw") {
            return Some(self.text("prometheus-rw", k6::DEFAULT_REMOTE_WRITE));
        }
        std::env::var(k6::REMOTE_WRITE_ENV)
            .ok()
            .filter(|url| !url.is_empty())
    }

    fn flag(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.as_deref())
    }

    fn text(&self, key: &str, default: &str) -> String {
        self.get(key).unwrap_or(default).to_string()
    }

    fn number(&self, key: &str, default: u64) -> anyhow::Result<u64> {
        match self.get(key) {
            Some(text) => text
                .parse()
                .with_context(|| format!("--{key} must be a whole number, got {text}")),
            None => Ok(default),
        }
    }

    fn list(&self, key: &str) -> anyhow::Result<Vec<String>> {
        let text = self
            .get(key)
            .with_context(|| format!("--{key} is required (comma-separated)"))?;
        Ok(text
            .split(',')
            .map(|m| m.trim().to_ascii_uppercase())
            .filter(|m| !m.is_empty())
            .collect())
    }
}

fn seconds(duration: &str) -> anyhow::Result<f64> {
    let (number, unit) = duration.split_at(
        duration
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(duration.len()),
    );
    let number: f64 = number
        .parse()
        .with_context(|| format!("a duration looks like 500ms, 10s or 2m, got {duration}"))?;
    match unit {
        "ms" => Ok(number / 1000.0),
        "s" => Ok(number),
        "m" => Ok(number * 60.0),
        _ => bail!("a duration looks like 500ms, 10s or 2m, got {duration}"),
    }
}

/// `2026-11-29T10-15-00Z`: UTC, sortable, safe in a path.
fn timestamp() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}-{:02}-{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(args: &[&str]) -> Options {
        Options::parse(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn a_mistyped_option_is_refused_by_name() {
        let known = known_options("compare").unwrap();
        let ok = options(&["--methods", "REDIS_LUA", "--rate", "50", "--serve"]);
        assert!(ok.check(known).is_ok());
        let typo = options(&["--methods", "REDIS_LUA", "--rat", "50"]);
        let error = typo.check(known).unwrap_err().to_string();
        assert!(error.contains("unknown option --rat"), "{error}");
        // A rate means nothing to a spike: every member asks at once.
        let spike = options(&["--methods", "REDIS_LUA", "--rate", "50"]);
        assert!(spike.check(known_options("spike").unwrap()).is_err());
    }

    #[test]
    fn prometheus_rw_takes_a_url_or_the_compose_default() {
        let known = known_options("compare").unwrap();
        let given = options(&[
            "--methods",
            "REDIS_LUA",
            "--prometheus-rw",
            "http://p:9090/api/v1/write",
        ]);
        assert!(given.check(known).is_ok());
        assert_eq!(
            given.remote_write().as_deref(),
            Some("http://p:9090/api/v1/write")
        );
        let bare = options(&["--prometheus-rw", "--methods", "REDIS_LUA"]);
        assert_eq!(
            bare.remote_write().as_deref(),
            Some(k6::DEFAULT_REMOTE_WRITE)
        );
    }
}
