//! `cargo xtask bench`: how much of an answer is the method and how much is
//! the lab. Runs couponlab's `REDIS_LUA` and `native-twin` (the same work
//! written natively: `host/src/bin/native-twin.rs`) side by side, in one
//! run, alternating A B A B, under `wrk`, and writes `docs/performance.md`.
//!
//! `--budget` measures instead where one sold-out request's time goes at
//! one connection, stage by stage (see `budget`); `--instructions` counts
//! the instructions each server spends per request under callgrind, part
//! by part (see `instructions`).
//!
//! Two pairs:
//!
//! - **sold out**: a coupon already sold out, so every request is Redis
//!   only (one EVALSHA: GET the total, SISMEMBER, SCARD → SOLD_OUT);
//! - **issue**: a coupon with stock for everyone, a fresh member per
//!   request (the EVALSHA reservation, then the confirm transaction).
//!
//! For each pair: throughput and p99 at `--connections`, p50 at one
//! connection, each the median of the rounds (a comparison of the two
//! servers with its range over the rounds; the document is written only
//! from three rounds or more); and `redis-benchmark` of the
//! EVALSHA alone as the physical limit. A third server, couponlab with
//! `COUPONLAB_TRACES=off`, runs beside them: the difference is what
//! recording and keeping each request's trace costs. The sold-out pair is
//! also run, on the lab alone, with REDIS_LUA written in Python and
//! JavaScript (`PY_REDIS_LUA`, `JS_REDIS_LUA`): what each language costs. The servers share one
//! database (`couponlab_bench_<migrations>`) and Redis database 11.

mod budget;
mod instructions;
mod report;
mod wrk;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use couponlab_contract::keys;
use serde_json::json;

use self::report::Report;
use self::wrk::{ISSUE_MEMBERS, issue_script, sold_out_script, write_script, wrk_run};
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
/// Fewest rounds whose figures are written into the document.
const MIN_ROUNDS_WRITTEN: u32 = 3;

/// The lab with `COUPONLAB_TRACES=off`, as the report names it.
const UNTRACED: &str = "couponlab, traces off";

#[derive(Args)]
pub struct Options {
    /// Measure instead where one sold-out request's time goes at one
    /// connection, stage by stage
    #[arg(long, conflicts_with = "instructions")]
    budget: bool,
    /// Count instead the instructions each server spends per request, under
    /// callgrind, and split the lab's by what they are spent in
    #[arg(long)]
    instructions: bool,
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
    if options.instructions {
        return instructions::main(options.rounds);
    }

    let database = database_url()?;
    let lab = start_lab(&database, ("COUPONLAB_TRACES", "on"))?;
    let api = Api::new(&lab.base_url())?;
    let untraced = start_lab(&database, ("COUPONLAB_TRACES", "off"))?;
    let twin = start_twin(&database, &[], None)?;
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
    println!("\n{markdown}");
    // One run is one draw of a shared machine: a figure written down for
    // others to compare with has its spread.
    if options.rounds < MIN_ROUNDS_WRITTEN {
        println!(
            "not written to {}: a figure there comes from at least {MIN_ROUNDS_WRITTEN} rounds",
            options.out().display()
        );
        return Ok(());
    }
    markers::write_between(&options.out(), "bench", &markdown)?;
    println!("written to {}", options.out().display());
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
/// besides, once it listens; `binary` runs it another way (under a tool).
fn start_twin(
    database: &str,
    settings: &[(&'static str, String)],
    binary: Option<PathBuf>,
) -> anyhow::Result<Launched> {
    let mut env = vec![
        ("DATABASE_URL", database.to_string()),
        ("REDIS_URL", REDIS_URL.to_string()),
    ];
    env.extend_from_slice(settings);
    let mut twin = Launched::start(Launch {
        binary: binary.unwrap_or_else(|| release_binary("native-twin")),
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
