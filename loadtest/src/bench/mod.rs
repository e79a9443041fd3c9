//! `cargo xtask bench`: how much of an answer is the method and how much is
//! the lab. Runs couponlab's `REDIS_LUA` and `native-twin` (the same work
//! written natively: `host/src/bin/native-twin.rs`) side by side, in one
//! run, alternating A B A B, under `wrk`, and writes `docs/performance.md`.
//!
//! ```text
//! cargo xtask bench [--budget] [--duration 10s] [--rounds 3] [--connections 50] [--out docs/performance.md]
//! ```
//!
//! `--budget` measures instead where one sold-out request's time goes at
//! one connection, stage by stage (see `budget`).
//!
//! Two pairs:
//!
//! - **sold out**: a coupon already sold out, so every request is Redis
//!   only (one EVALSHA: GET the total, SISMEMBER, SCARD → SOLD_OUT);
//! - **issue**: a coupon with stock for everyone, a fresh member per
//!   request (the EVALSHA reservation, then the confirm transaction).
//!
//! For each pair: throughput and p99 at `--connections`, p50 at one
//! connection, each the median of the rounds; and `redis-benchmark` of the
//! EVALSHA alone as the physical limit. A third server, couponlab with
//! `COUPONLAB_TRACES=off`, runs beside them: the difference is what
//! recording and keeping each request's trace costs. The sold-out pair is
//! also run, on the lab alone, with REDIS_LUA written in Python and
//! JavaScript (`PY_REDIS_LUA`, `JS_REDIS_LUA`): what each language costs. The servers share one
//! database (`couponlab_bench_<migrations>`) and Redis database 11.

mod budget;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use couponlab_contract::keys;
use serde_json::json;

use crate::api::Api;
use crate::launcher::{Bind, Launch, Launched};
use crate::paths::{release_binary, root};
use crate::server::{Serve, Server};
use crate::{markers, proc_stats};

const REDIS_URL: &str = "redis://127.0.0.1:6379/11";
/// How long the native twin may take to listen.
const TWIN_START_LIMIT: Duration = Duration::from_secs(30);
/// REDIS_LUA written in other languages, and the pair each is reported as.
const LANGUAGES: [(&str, &str); 2] = [
    ("PY_REDIS_LUA", "sold out, Python"),
    ("JS_REDIS_LUA", "sold out, JavaScript"),
];
/// The lab with `COUPONLAB_TRACES=off`, as the report names it.
const UNTRACED: &str = "couponlab, traces off";

#[derive(Args)]
pub struct Options {
    /// Measure instead where one sold-out request's time goes at one
    /// connection, stage by stage
    #[arg(long)]
    budget: bool,
    /// How long each wrk run lasts (wrk's form: 10s, 1m)
    #[arg(long, default_value = "10s")]
    duration: String,
    /// Rounds of each pair; each figure is the median of the rounds
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// Connections of the loaded runs
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    connections: u32,
    /// The document the figures are written into, between their markers
    /// [default: docs/performance.md]
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

impl Options {
    fn out(&self) -> PathBuf {
        self.out
            .clone()
            .unwrap_or_else(|| root().join("docs").join("performance.md"))
    }
}

pub fn main(options: &Options) -> anyhow::Result<()> {
    let wrk = Path::new("wrk");
    if options.budget {
        return budget::main(options, wrk);
    }

    let database = database_url()?;
    let lab = start_lab(&database, ("COUPONLAB_TRACES", "on"))?;
    let api = Api::new(&lab.base_url())?;
    let untraced = start_lab(&database, ("COUPONLAB_TRACES", "off"))?;
    let twin = start_twin(&database, &[])?;
    let servers = [
        ("couponlab", lab.process()),
        (UNTRACED, untraced.process()),
        ("native twin", &twin),
    ];

    let (sold_out, first) = sold_out_coupon(&api)?;
    let sold_out_body = json!({ "memberId": first + 1, "method": "REDIS_LUA" }).to_string();
    let script = write_script("sold-out.lua", &sold_out_script(&sold_out_body))?;

    let mut report = Report::default();
    for (_, process) in &servers {
        wrk_run(wrk, process, &script, &sold_out, options.connections, "2s")?;
    }
    let mut bench = Bench {
        options,
        wrk,
        servers: &servers,
        report: &mut report,
    };
    bench.pair("sold out", &script, || Ok(sold_out.clone()))?;
    // The same sold-out path in Python and JavaScript, on the lab alone.
    for (method, pair) in LANGUAGES {
        let body = json!({ "memberId": first + 1, "method": method }).to_string();
        let script = write_script(&format!("sold-out-{method}.lua"), &sold_out_script(&body))?;
        bench.alone(pair, "couponlab", lab.process(), &script, &sold_out)?;
    }

    // Issue: a fresh member per request and a fresh coupon per run, so the
    // same million members serve every run.
    let members = api.post("/lab/members", &json!({ "count": ISSUE_MEMBERS }))?;
    let pool = members["firstId"].as_u64().context("firstId")?;
    let script = write_script("issue.lua", &issue_script(pool))?;
    bench.pair("issue", &script, || create_coupon(&api, 100_000_000))?;

    // What recording and keeping a request's trace costs, measured alone.
    let trace_cost = figure(
        &host_benchmark("trace_cost_benchmark")?,
        "trace cost per request: ",
    )?;
    let raw = redis_benchmark(sold_out.parse().context("coupon id")?, first + 1)?;
    println!("redis-benchmark EVALSHA of lua/reserve.lua: {raw:.0} requests/s");
    let rss = servers.map(|(server, process)| (server, proc_stats::rss_kib(process.pid())));
    let mut markdown = report.markdown(options, raw, &rss);
    let _ = writeln!(
        markdown,
        "\nThe same, measured alone on the request's path (`cargo test --release --workspace --lib -- trace_cost_benchmark --ignored`: a REDIS_LUA request's calls recorded and its trace kept or sampled, a million times): {trace_cost}."
    );
    markers::write_between(&options.out(), "bench", &markdown)?;
    println!("\n{markdown}\nwritten to {}", options.out().display());
    Ok(())
}

/// What every pair is measured with.
struct Bench<'a> {
    options: &'a Options,
    wrk: &'a Path,
    servers: &'a [(&'static str, &'a Launched)],
    report: &'a mut Report,
}

impl Bench<'_> {
    /// `options.rounds` rounds of one pair, alternating the servers: each
    /// round runs `options.connections` connections, then one, each on the
    /// coupon `coupon` gives (a fresh one per run where stock runs out).
    fn pair(
        &mut self,
        pair: &'static str,
        script: &Path,
        mut coupon: impl FnMut() -> anyhow::Result<String>,
    ) -> anyhow::Result<()> {
        let options = self.options;
        println!(
            "{pair} pair: {} rounds of {}",
            options.rounds, options.duration
        );
        for round in 0..options.rounds {
            for &(server, process) in self.servers {
                self.round(pair, round, server, process, script, &mut coupon)?;
            }
        }
        Ok(())
    }

    /// `options.rounds` rounds of one pair on one server alone.
    fn alone(
        &mut self,
        pair: &'static str,
        server: &'static str,
        process: &Launched,
        script: &Path,
        coupon: &str,
    ) -> anyhow::Result<()> {
        println!(
            "{pair}: {} rounds of {}",
            self.options.rounds, self.options.duration
        );
        for round in 0..self.options.rounds {
            self.round(pair, round, server, process, script, &mut || {
                Ok(coupon.to_string())
            })?;
        }
        Ok(())
    }

    /// One run at `options.connections` connections, then one at one.
    fn round(
        &mut self,
        pair: &'static str,
        round: u32,
        server: &'static str,
        process: &Launched,
        script: &Path,
        coupon: &mut impl FnMut() -> anyhow::Result<String>,
    ) -> anyhow::Result<()> {
        let options = self.options;
        let loaded = wrk_run(
            self.wrk,
            process,
            script,
            &coupon()?,
            options.connections,
            &options.duration,
        )?;
        let single = wrk_run(self.wrk, process, script, &coupon()?, 1, &options.duration)?;
        println!(
            "  round {}: {server}: {loaded}, c=1 p50 {:.0} µs",
            round + 1,
            single.p50_us
        );
        self.report.add(pair, server, loaded, single);
        Ok(())
    }
}

/// A lab on the bench's database and Redis, with one more setting.
fn start_lab(database: &str, setting: (&'static str, &str)) -> anyhow::Result<Server> {
    Server::start_with(Serve {
        database_url: Some(database),
        redis_url: Some(REDIS_URL),
        env: &[("COUPONLAB_WATCH", "false"), setting],
        ..Serve::default()
    })
}

/// The native twin on the bench's database and Redis, with `settings`
/// besides, once it listens.
fn start_twin(database: &str, settings: &[(&'static str, String)]) -> anyhow::Result<Launched> {
    let mut env = vec![
        ("DATABASE_URL", database.to_string()),
        ("REDIS_URL", REDIS_URL.to_string()),
    ];
    env.extend_from_slice(settings);
    let mut twin = Launched::start(Launch {
        binary: release_binary("native-twin"),
        args: Vec::new(),
        env,
        bind: Bind::Flag("--bind"),
    })?;
    twin.wait_listening(TWIN_START_LIMIT)?;
    Ok(twin)
}

/// A coupon of total 1, issued once: its id, and the member it went to (the
/// next member is refused it).
fn sold_out_coupon(api: &Api) -> anyhow::Result<(String, u64)> {
    let members = api.post("/lab/members", &json!({ "count": 2 }))?;
    let first = members["firstId"].as_u64().context("firstId")?;
    let sold_out = create_coupon(api, 1)?;
    api.post(
        &format!("/lab/coupons/{sold_out}/issue"),
        &json!({ "memberId": first, "method": "REDIS_LUA" }),
    )?;
    Ok((sold_out, first))
}

fn create_coupon(api: &Api, total: u64) -> anyhow::Result<String> {
    let coupon = api.post(
        "/lab/coupons",
        &json!({ "name": "bench", "totalCount": total }),
    )?;
    Ok(coupon["id"].as_u64().context("coupon id")?.to_string())
}

/// What one of the host's benchmark tests (`test`, ignored unless asked
/// for) prints.
fn host_benchmark(test: &str) -> anyhow::Result<String> {
    let output = Command::new("cargo")
        .args(["test", "--release", "--workspace", "--lib", "--"])
        .args([test, "--ignored", "--nocapture"])
        .current_dir(root())
        .output()
        .with_context(|| format!("cannot run {test}"))?;
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The figure a benchmark's output prints after `prefix`.
fn figure(output: &str, prefix: &str) -> anyhow::Result<String> {
    output
        .lines()
        .find_map(|line| line.strip_prefix(prefix))
        .map(str::to_string)
        .with_context(|| format!("no line starts with {prefix:?} in: {output}"))
}

/// The scratch database, named after the migrations it holds.
fn database_url() -> anyhow::Result<String> {
    Ok(crate::server::database_url()?.replace("couponlab_loadtest_", "couponlab_bench_"))
}

fn write_script(name: &str, source: &str) -> anyhow::Result<PathBuf> {
    let dir = root().join("target").join("bench");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(name);
    std::fs::write(&path, source)?;
    Ok(path)
}

/// The same POST again and again.
fn sold_out_script(body: &str) -> String {
    let body = body.replace('\\', "\\\\").replace('"', "\\\"");
    format!(
        "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\nwrk.body = \"{body}\"\n"
    )
}

/// Members one issue run may use: each of wrk's (at most two) threads
/// counts through its own half, at up to 50,000 requests a second for 10 s.
const ISSUE_MEMBERS: u64 = 1_000_000;

/// A fresh member per request, from the pool starting at `first`.
fn issue_script(first: u64) -> String {
    format!(
        r#"wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local threads = 0
function setup(thread)
  thread:set("id", threads)
  threads = threads + 1
end
function init(args)
  next_member = {first} + id * {half}
end
function request()
  next_member = next_member + 1
  return wrk.format(nil, nil, nil, '{{"memberId": ' .. next_member .. ', "method": "REDIS_LUA"}}')
end
function response(status, headers, body)
  if status ~= 200 then
    io.write("REFUSED ", status, " ", body, "\n")
  end
end
"#,
        half = ISSUE_MEMBERS / 2 - 1
    )
}

/// What one wrk run measured.
#[derive(Debug, Clone, Copy)]
struct Run {
    requests_per_s: f64,
    /// Answers other than 2xx, per second (the sold-out pair's 409s).
    refused_per_s: f64,
    p50_us: f64,
    p99_us: f64,
    /// wrk's mean latency: the figure a budget's stages add up to.
    mean_us: f64,
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.0} req/s, p50 {:.0} µs, p99 {:.0} µs",
            self.requests_per_s, self.p50_us, self.p99_us
        )
    }
}

fn wrk_run(
    wrk: &Path,
    process: &Launched,
    script: &Path,
    coupon: &str,
    connections: u32,
    duration: &str,
) -> anyhow::Result<Run> {
    let threads = connections.min(2);
    let url = format!("{}/lab/coupons/{coupon}/issue", process.base_url());
    let output = Command::new(wrk)
        .args([
            "--latency",
            "-t",
            &threads.to_string(),
            "-c",
            &connections.to_string(),
        ])
        .args(["-d", duration, "-s"])
        .arg(script)
        .arg(&url)
        .output()
        .context("cannot run wrk")?;
    let text = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(output.status.success(), "wrk failed: {text}");
    if let Some(refused) = text.lines().find(|line| line.starts_with("REFUSED ")) {
        println!("  (refused answers, the first: {refused})");
    }
    parse_wrk(&text).with_context(|| format!("cannot read wrk's report:\n{text}"))
}

/// Reads `Requests/sec` and the 50 % and 99 % lines of `--latency`.
fn parse_wrk(text: &str) -> Option<Run> {
    let percentile = |label: &str| {
        text.lines()
            .map(str::trim)
            .find_map(|line| line.strip_prefix(label))
            .and_then(|value| micros(value.trim()))
    };
    let requests_per_s: f64 = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("Requests/sec:"))?
        .trim()
        .parse()
        .ok()?;
    // "  120000 requests in 10.00s, 20.00MB read"
    let seconds = text.lines().find_map(|line| {
        let (_, rest) = line.trim().split_once(" requests in ")?;
        Some(micros(rest.split(',').next()?.trim())? / 1e6)
    })?;
    let refused: f64 = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("Non-2xx or 3xx responses:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0.0);
    // "    Latency   251.00us  120.00us   3.00ms   90.00%"
    let mean_us = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("Latency "))
        .and_then(|rest| micros(rest.split_whitespace().next()?))?;
    Some(Run {
        mean_us,
        requests_per_s,
        refused_per_s: refused / seconds,
        p50_us: percentile("50.000%").or_else(|| percentile("50%"))?,
        p99_us: percentile("99.000%").or_else(|| percentile("99%"))?,
    })
}

/// `221.00us`, `7.10ms`, `1.02s` in microseconds.
fn micros(value: &str) -> Option<f64> {
    let (number, factor) = if let Some(n) = value.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = value.strip_suffix("ms") {
        (n, 1_000.0)
    } else if let Some(n) = value.strip_suffix('s') {
        (n, 1_000_000.0)
    } else {
        return None;
    };
    Some(number.trim().parse::<f64>().ok()? * factor)
}

/// `redis-benchmark` of the reservation script alone: what one Redis core
/// can do for this coupon at 50 clients.
fn redis_benchmark(coupon: u64, member: u64) -> anyhow::Result<f64> {
    let script = std::fs::read_to_string(root().join("lua").join("reserve.lua"))?;
    let load = Command::new("redis-cli")
        .args(["-n", "11", "SCRIPT", "LOAD", &script])
        .output()
        .context("cannot run redis-cli")?;
    let sha = String::from_utf8_lossy(&load.stdout).trim().to_string();
    let output = Command::new("redis-benchmark")
        .args([
            "-n", "200000", "-c", "50", "-q", "--dbnum", "11", "EVALSHA", &sha, "2",
        ])
        .arg(keys::issued(coupon))
        .arg(keys::total(coupon))
        .arg(member.to_string())
        .output()
        .context("cannot run redis-benchmark")?;
    let text = String::from_utf8_lossy(&output.stdout);
    // Progress lines end in \r; the last one says
    // "EVALSHA ...: 93632.96 requests per second, p50=0.271 msec".
    let last = text
        .rsplit('\r')
        .find(|line| line.contains("requests per second"));
    last.and_then(|line| line.rsplit(": ").next())
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("cannot read redis-benchmark's report: {text}"))
}

/// Every run, by pair and server.
#[derive(Default)]
struct Report {
    runs: Vec<(&'static str, &'static str, Run, Run)>,
}

impl Report {
    /// What request traces cost: couponlab against itself with
    /// `COUPONLAB_TRACES=off`, at one connection (latency) and saturated
    /// (the time per request the two cores spend, 2 s / req/s).
    fn traces_cost(&self) -> String {
        let mut out = String::from(
            "\nRequest traces, on (the default) against `COUPONLAB_TRACES=off`:\n\n| pair | p50 c=1 on | off | added | req/s on | off | core time per request on | off | added |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for pair in ["sold out", "issue"] {
            let p50 = |server| self.median(pair, server, |_, s| s.p50_us);
            let rps = |server| self.median(pair, server, |l, _| l.requests_per_s);
            let (on, off) = (p50("couponlab"), p50(UNTRACED));
            let (rps_on, rps_off) = (rps("couponlab"), rps(UNTRACED));
            let core_us = |rps: f64| 2e6 / rps;
            let _ = writeln!(
                out,
                "| {pair} | {on:.0} µs | {off:.0} µs | {:+.0} µs | {rps_on:.0} | {rps_off:.0} | {:.1} µs | {:.1} µs | {:+.1} µs |",
                on - off,
                core_us(rps_on),
                core_us(rps_off),
                core_us(rps_on) - core_us(rps_off),
            );
        }
        out
    }

    /// The sold-out path in Python and JavaScript against REDIS_LUA in
    /// Rust, on the same server in the same run.
    fn languages(&self) -> String {
        let rust_rps = self.median("sold out", "couponlab", |l, _| l.requests_per_s);
        let rust_p50 = self.median("sold out", "couponlab", |_, s| s.p50_us);
        let mut out = format!(
            "\nThe sold-out path in other languages (the same `lua/reserve.lua`), against REDIS_LUA in Rust on the same server:\n\n| method | req/s | of Rust's | p50 c=1 | added to Rust's |\n|---|---:|---:|---:|---:|\n| REDIS_LUA | {rust_rps:.0} | 1.00× | {rust_p50:.0} µs | — |\n"
        );
        for (method, pair) in LANGUAGES {
            let rps = self.median(pair, "couponlab", |l, _| l.requests_per_s);
            let p50 = self.median(pair, "couponlab", |_, s| s.p50_us);
            if rps.is_nan() {
                continue;
            }
            let _ = writeln!(
                out,
                "| {method} | {rps:.0} | {:.2}× | {p50:.0} µs | {:+.0} µs |",
                rps / rust_rps,
                p50 - rust_p50
            );
        }
        out
    }

    fn add(&mut self, pair: &'static str, server: &'static str, loaded: Run, single: Run) {
        self.runs.push((pair, server, loaded, single));
    }

    /// The median of `figure` over a server's rounds of a pair.
    fn median(&self, pair: &str, server: &str, figure: impl Fn(&Run, &Run) -> f64) -> f64 {
        let mut values: Vec<f64> = self
            .runs
            .iter()
            .filter(|(p, s, ..)| *p == pair && *s == server)
            .map(|(_, _, loaded, single)| figure(loaded, single))
            .collect();
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
    }

    fn markdown(&self, options: &Options, raw: f64, rss: &[(&str, Option<u64>)]) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "Measured by `cargo xtask bench --duration {} --rounds {} --connections {}` on this \
             machine (2 cores, server, twin, wrk, MariaDB and Redis together), alternating \
             couponlab and `native-twin` run by run; each figure is the median of the rounds.\n",
            options.duration, options.rounds, options.connections
        );
        let _ = writeln!(
            out,
            "| pair | couponlab req/s | twin req/s | throughput ratio | couponlab p99 | twin p99 | p99 ratio | couponlab p50 c=1 | twin p50 c=1 | overhead per request |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for pair in ["sold out", "issue"] {
            // What counts for the issue pair is what issued.
            let answered = |run: &Run| match pair {
                "issue" => run.requests_per_s - run.refused_per_s,
                _ => run.requests_per_s,
            };
            let lab_rps = self.median(pair, "couponlab", |l, _| answered(l));
            let twin_rps = self.median(pair, "native twin", |l, _| answered(l));
            let lab_p99 = self.median(pair, "couponlab", |l, _| l.p99_us);
            let twin_p99 = self.median(pair, "native twin", |l, _| l.p99_us);
            let lab_p50 = self.median(pair, "couponlab", |_, s| s.p50_us);
            let twin_p50 = self.median(pair, "native twin", |_, s| s.p50_us);
            let _ = writeln!(
                out,
                "| {pair} | {lab_rps:.0} | {twin_rps:.0} | {:.2}× | {:.2} ms | {:.2} ms | {:.2}× | {lab_p50:.0} µs | {twin_p50:.0} µs | {:+.0} µs |",
                lab_rps / twin_rps,
                lab_p99 / 1000.0,
                twin_p99 / 1000.0,
                lab_p99 / twin_p99,
                lab_p50 - twin_p50,
            );
        }
        out.push_str(&self.traces_cost());
        out.push_str(&self.languages());
        let _ = writeln!(
            out,
            "\n`redis-benchmark` of the same EVALSHA (50 clients): {raw:.0} requests/s — the \
             physical limit of the sold-out path on one Redis core.\n"
        );
        for (server, kib) in rss {
            if let Some(kib) = kib {
                let _ = writeln!(
                    out,
                    "- resident memory of {server} after the run: {:.0} MiB",
                    *kib as f64 / 1024.0
                );
            }
        }
        out.push_str("\nEvery run (refused: answers other than 2xx, the sold-out pair's 409s):\n\n| pair | server | c | req/s | refused/s | p50 | p99 | c=1 p50 |\n|---|---|---:|---:|---:|---:|---:|---:|\n");
        for (pair, server, loaded, single) in &self.runs {
            let _ = writeln!(
                out,
                "| {pair} | {server} | {} | {:.0} | {:.0} | {:.0} µs | {:.0} µs | {:.0} µs |",
                options.connections,
                loaded.requests_per_s,
                loaded.refused_per_s,
                loaded.p50_us,
                loaded.p99_us,
                single.p50_us
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrk_reports_are_read() {
        let text = "Running 10s test @ http://x\n  2 threads and 50 connections\n  Thread Stats   Avg      Stdev     Max   +/- Stdev\n    Latency   301.50us  120.00us   9.00ms   90.00%\n  Latency Distribution\n     50%  221.00us\n     75%  400.00us\n     90%    1.20ms\n     99%    7.10ms\n  120000 requests in 10.00s, 20.00MB read\nRequests/sec:  12200.50\nTransfer/sec:      2.00MB\n";
        let run = parse_wrk(text).unwrap();
        assert_eq!(run.requests_per_s, 12200.5);
        assert_eq!(run.refused_per_s, 0.0);
        assert_eq!(run.p50_us, 221.0);
        assert_eq!(run.p99_us, 7100.0);
        assert_eq!(run.mean_us, 301.5);
        assert_eq!(micros("1.5s"), Some(1_500_000.0));
    }
}
