//! `cargo xtask loadtest`: compare methods with k6 and write a report.
//!
//! ```text
//! cargo xtask loadtest compare  --methods PESSIMISTIC,REDIS_LUA [--rate 300] [--duration 10s] [--total 1000]
//! cargo xtask loadtest spike    --methods REDIS_LUA [--members 3000] [--total 100]
//! cargo xtask loadtest capacity --method REDIS_LUA [--start 200] [--step 200] [--max 5000]
//!                               [--duration 5s] [--max-failure-rate 0.01] [--max-p99-ms 100]
//! common: [--base-url http://127.0.0.1:8080[,URL...]] [--serve] [--k6-processes N] [--out DIR]
//!         [--prometheus-rw [URL]] [--fault SPEC]... [--roles-apart] [--allow-broken]
//!         [--database-url URL] [--redis-url URL]
//! cargo xtask loadtest smoke    (the short checked run `cargo xtask test` ends with)
//! cargo xtask loadtest --help   (this usage)
//! ```
//!
//! For each method, one after another: create members (one per request)
//! and a fresh coupon, run `loadtest/issue.js` (k6 writes one record per
//! request), wait until every accepted request has its outcome or nothing
//! moves any more, read the coupon's result, and join the records with the
//! issue rows and the Redis stock read directly (`verification`). Reports go
//! to `loadtest/reports/<UTC time>/` (report.md, chart.svg, report.html,
//! results.json, requests-<METHOD>.csv). A method that breaks a guarantee it claims fails
//! the run unless `--allow-broken`.
//! `--serve` starts a server of its own on a free port, with a database of
//! its own and Redis database 10, instead of using --base-url.
//! `--prometheus-rw` (or `K6_PROMETHEUS_RW_SERVER_URL` set) adds k6's
//! `experimental-prometheus-rw` output, so k6's figures land in the
//! Prometheus that scrapes the server (`docker compose up -d prometheus grafana`).

mod faults;
mod html;
pub mod http;
pub mod idle;
pub mod k6;
mod own_redis;
mod process_log;
mod provenance;
mod records;
mod report;
mod run;
pub mod server;
mod smoke;
pub mod soak;
mod soak_report;
mod truth;
mod verification;
mod why;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};

use self::faults::{FaultPlan, Setup};
pub use self::http::Api;
use self::k6::K6;
use self::run::{Measured, Run, Runner};
pub use self::server::database_url;
pub use self::smoke::smoke;
use crate::root;

/// What `cargo xtask loadtest --help` prints.
const USAGE: &str = "\
usage: cargo xtask loadtest <mode> [options]

  compare   --methods A,B,...|all [--rate 300] [--duration 10s] [--total 1000]
            each method in turn at a constant arrival rate, on a coupon of its own
  spike     --methods A,B,...|all [--members 3000] [--total 100]
            every member asks at second zero (the event-open scenario)
  capacity  --method A [--start 200] [--step 200] [--max 5000] [--duration 5s]
            [--max-failure-rate 0.01] [--max-p99-ms 100]
            raise the rate until the failure rate or p99 passes its bound
  smoke     the short checked run `cargo xtask test` ends with

common: [--base-url http://127.0.0.1:8080[,URL...]] [--serve] [--k6-processes N] [--out DIR]
        [--prometheus-rw [URL]] [--fault SPEC]... [--roles-apart] [--allow-broken]
        [--database-url URL] [--redis-url URL]
  --base-url
            the lab's hosts, comma separated: request n goes to host n mod
            hosts; the first sets the runs up and its result is reported,
            and each host's count of the requests is recorded beside it
  --serve   start a server of its own (own database, Redis db 10) instead of --base-url
  --k6-processes N
            share each run out over N k6 processes (k6's execution
            segments), which start their load at one moment; the report
            merges their records (default 1)
  --database-url, --redis-url
            where the server behind --base-url keeps its data, read directly
            for the verification (default: DATABASE_URL and REDIS_URL, else
            the server's defaults)
  --redis-cluster
            --redis-url is a Redis Cluster's seed nodes, comma separated
  --allow-broken
            report a method that breaks a guarantee it claims, but exit 0
            (for demonstrations of what breaks)
  --fault SPEC (repeatable; all but client-timeout need --serve)
            redis-cut@START+DURATION, db-cut@START+DURATION   the link drops, then comes back
            redis-latency=MS@START+DURATION, db-latency=MS@START+DURATION
            kill-server@START       SIGKILL of the server, restarted at once
            kill-consumers@START    the same for the consumer processes (--roles-apart)
            client-timeout=MS       clients give up after MS
            START and DURATION into the load: 300ms, 0.3s, 2s, 1m
  --roles-apart
            with --serve: `serve --consumers false` plus one `couponlab consume`
            process per consumer role
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
    let fault_specs: Vec<String> = options.all("fault").into_iter().map(String::from).collect();
    let faults = FaultPlan::parse(&fault_specs)?;
    let roles_apart = options.flag("roles-apart");
    faults.check(Setup {
        serve: options.flag("serve"),
        roles_apart,
    })?;
    for fault in faults.describe() {
        println!("fault {fault}");
    }
    let out = options
        .get("out")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("loadtest").join("reports").join(timestamp()));
    let k6 = K6::ensure(options.remote_write())?;
    let k6_processes = options.number("k6-processes", 1)?;
    if k6_processes == 0 || k6_processes > 64 {
        bail!("--k6-processes takes 1 to 64, got {k6_processes}");
    }
    if options.flag("serve")
        && options
            .get("base-url")
            .is_some_and(|urls| urls.contains(','))
    {
        bail!("--serve runs one host of its own; several --base-url hosts are servers you run");
    }
    if options.flag("serve") && options.flag("redis-cluster") {
        bail!(
            "--serve runs on one Redis of its own; --redis-cluster is for servers you run on a cluster (--base-url)"
        );
    }
    let mut runner = if options.flag("serve") {
        Runner::serving(faults, roles_apart, true, k6, out)?
    } else {
        Runner::against(
            &options.text("base-url", "http://127.0.0.1:8080"),
            &options.text("database-url", &env_or("DATABASE_URL", LOCAL_DATABASE)),
            &options.text("redis-url", &env_or("REDIS_URL", LOCAL_REDIS)),
            options.flag("redis-cluster"),
            faults,
            k6,
            out,
        )?
    };
    runner.k6_processes = k6_processes as u32;
    let report = match mode {
        "compare" => compare(&runner, &options, false),
        "spike" => compare(&runner, &options, true),
        _ => capacity(&runner, &options),
    }?;
    drop(runner);
    report.check_claims(options.flag("allow-broken"))
}

/// What the server reads when `DATABASE_URL` and `REDIS_URL` are not set.
const LOCAL_DATABASE: &str = "mysql://root@127.0.0.1:3306/couponlab";
const LOCAL_REDIS: &str = "redis://127.0.0.1:6379/0";

fn env_or(key: &str, default: &str) -> String {
    std::env::var(key)
        .ok()
        .filter(|value| !value.is_empty())
        .unwrap_or_else(|| default.to_string())
}

/// The methods' figures of one invocation, and the claims they broke.
pub(crate) struct Report {
    /// Method → claims it makes that this run broke, with the figure.
    broken: Vec<(String, &'static str, u64)>,
}

impl Report {
    /// A method that claims a guarantee and broke it fails the run, loudly,
    /// unless `allowed` (a demonstration of what breaks).
    pub(crate) fn check_claims(self, allowed: bool) -> anyhow::Result<()> {
        if self.broken.is_empty() {
            return Ok(());
        }
        eprintln!("\n!!! BROKEN CLAIMS: a method broke a guarantee it claims (README, `claims`):");
        for (method, claim, figure) in &self.broken {
            eprintln!("!!!   {method} claims `{claim}`; this run broke it {figure} times");
        }
        if allowed {
            eprintln!("!!! (--allow-broken: reported, not failed)");
            return Ok(());
        }
        bail!(
            "{} broken claims (pass --allow-broken to demonstrate them without failing)",
            self.broken.len()
        )
    }
}

/// Records what each measured run broke of the claims of its method.
fn broken_claims(method: &str, measured: &Measured, into: &mut Vec<(String, &'static str, u64)>) {
    if let Some(verification) = &measured.row.verification {
        for claim in verification.broken_claims(&measured.claims) {
            into.push((
                method.to_string(),
                claim.word(),
                verification.breaking(claim),
            ));
        }
    }
}

/// Runs each method on its own coupon and writes the comparison.
pub(crate) fn compare(runner: &Runner, options: &Options, spike: bool) -> anyhow::Result<Report> {
    let mut methods = options.list("methods")?;
    if methods == ["ALL"] {
        methods = loaded_methods(&runner.api)?;
    }
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
    let mut broken = Vec::new();
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
        let measured = run.execute(runner)?;
        let row = &measured.row;
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
        if let Some(verification) = &row.verification {
            println!("      verified: {}", verification.verdict);
        }
        broken_claims(method, &measured, &mut broken);
        raw.insert(method.clone(), measured.raw);
        rows.push(measured.row);
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
    let provenance = provenance::describe(&runner.sources, &runner.k6, &raw)?;
    report::write(&runner.out, title, &description, &rows, &raw, &provenance)?;
    println!("\nreport: {}", runner.out.join("report.md").display());
    print!(
        "{}",
        report::markdown(title, &description, &rows, &provenance)
            .lines()
            .skip(6)
            .collect::<Vec<_>>()
            .join("\n")
    );
    println!();
    Ok(Report { broken })
}

/// `--methods all`: every method the server has loaded, in its order.
fn loaded_methods(api: &Api) -> anyhow::Result<Vec<String>> {
    let loaded = api.get("/lab/strategies")?;
    let methods: Vec<String> = loaded["strategies"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|strategy| strategy["method"].as_str().map(String::from))
        .collect();
    if methods.is_empty() {
        bail!("--methods all: the server has no method loaded ({loaded})");
    }
    Ok(methods)
}

/// Raises the arrival rate on one method until failures or p99 pass their
/// bound; reports the highest rate that held.
fn capacity(runner: &Runner, options: &Options) -> anyhow::Result<Report> {
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
    let mut broken = Vec::new();
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
        let mut measured = run.execute(runner)?;
        let row = &measured.row;
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
        broken_claims(&method, &measured, &mut broken);
        measured.row.method = format!("{method} @ {rate}/s");
        raw.insert(measured.row.method.clone(), measured.raw);
        rows.push(measured.row);
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
    let provenance = provenance::describe(&runner.sources, &runner.k6, &raw)?;
    report::write(
        &runner.out,
        "Capacity of one coupon",
        &description,
        &rows,
        &raw,
        &provenance,
    )?;
    println!(
        "\n{verdict}\nreport: {}",
        runner.out.join("report.md").display()
    );
    Ok(Report { broken })
}

/// `--key value` options and `--flag`s; a repeated option keeps each value.
pub(crate) struct Options(Vec<(String, Option<String>)>);

impl Options {
    pub(crate) fn parse(args: &[String]) -> anyhow::Result<Self> {
        let mut options = Vec::new();
        let mut args = args.iter().peekable();
        while let Some(arg) = args.next() {
            let Some(key) = arg.strip_prefix("--") else {
                bail!("unexpected argument {arg:?}")
            };
            let value = args.next_if(|next| !next.starts_with("--")).cloned();
            options.push((key.to_string(), value));
        }
        Ok(Options(options))
    }

    /// Fails on an option the mode does not read (`known` plus the common ones).
    fn check(&self, known: &[&str]) -> anyhow::Result<()> {
        const COMMON: [&str; 11] = [
            "base-url",
            "k6-processes",
            "serve",
            "out",
            "prometheus-rw",
            "database-url",
            "redis-url",
            "redis-cluster",
            "allow-broken",
            "fault",
            "roles-apart",
        ];
        for (key, _) in &self.0 {
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
        self.0.iter().any(|(k, _)| k == key)
    }

    /// The last value given for `key`.
    fn get(&self, key: &str) -> Option<&str> {
        self.all(key).last().copied()
    }

    /// Every value given for a repeatable option, in order.
    fn all(&self, key: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .filter_map(|(_, v)| v.as_deref())
            .collect()
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
        .with_context(|| format!("a duration looks like 500ms, 10s, 2m or 1h, got {duration}"))?;
    match unit {
        "ms" => Ok(number / 1000.0),
        "s" => Ok(number),
        "m" => Ok(number * 60.0),
        "h" => Ok(number * 3600.0),
        _ => bail!("a duration looks like 500ms, 10s, 2m or 1h, got {duration}"),
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
