//! `cargo xtask soak`: hours, not seconds. A served lab under a constant
//! rate for a long while, sampled every few seconds, and judged on whether
//! what it holds stays flat.
//!
//! The requests go round [`METHODS`] (a database method, REDIS_LUA, the
//! stream consumers, write-behind, the drop gate) at `--rate` a second, each
//! from its own worker thread; every [`COUPON_EVERY`] each method gets a new
//! coupon (half as many as the members asking it, so half the answers are
//! sold out), as a lab used for a long time piles coupons up. Every
//! `--every` the sampler reads: the server's RSS and open files, the
//! connections to its database, Redis's memory and keys, the soak's
//! streams' lengths and pending entries, the recorder's live records, how
//! long a result read takes, and the issue requests' p99 since the last
//! sample.
//!
//! What must be flat (fails the run when it grows): RSS, open files,
//! database connections, stream entries pending, the recorder's live
//! records, the result read, the p99 — and with `--trim`
//! (`COUPONLAB_STREAM_TRIM`) the streams' entries. What grows by design is
//! reported per accepted request or per coupon: Redis's memory and keys
//! (reservations, request snapshots; stream entries unless trimmed). The
//! report, in the load runner's form (`report.rs`, the verdict in
//! `verdict.rs`), goes under `--out` (default
//! `loadtest/reports/<UTC time>-soak/`, where the console lists it).
//!
//! `--engine` says which database the lab runs on, as `--engines` names
//! them: MariaDB (the default, or with snapshot isolation) or PostgreSQL,
//! on the load runner's database of that engine; the soak's own reads of
//! it (the coupons it piles up, the connections it counts) are in that
//! engine's words.

mod report;
mod sample;
mod verdict;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::json;

use self::report::Soak;
use crate::api::Api;
use crate::durations::seconds;
use crate::engines::{Engine, engine_list};
use crate::idle::ScratchDatabase;
use crate::own_redis::OwnRedis;
use crate::paths::{self, target_dir};
use crate::server::{Serve, Server};

/// The mix: a database method, a Redis script, both stream worlds, the gate.
const METHODS: [&str; 5] = [
    "PESSIMISTIC",
    "REDIS_LUA",
    "REDIS_STREAM_ATOMIC",
    "REDIS_WRITE_BEHIND",
    "REDIS_LUA_GATE",
];
/// How often each method gets a coupon of its own.
const COUPON_EVERY: Duration = Duration::from_secs(20);
/// Requests in flight at most: each worker sends one at a time.
const WORKERS: usize = 16;
/// A smoke samples every twelfth of its length, however long it lasts: a
/// shorter smoke samples more often, so that its verdict weighs as many
/// samples as the minute's (eleven, the last falling on the end).
const SMOKE_SAMPLES: u32 = 12;

/// `cargo xtask soak [flags]`, or `cargo xtask soak smoke`.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Command {
    #[command(subcommand)]
    smoke: Option<Smoke>,
    #[command(flatten)]
    flags: Flags,
}

#[derive(Subcommand)]
enum Smoke {
    /// The short soak `cargo xtask test` ends with: 300 coupons already
    /// there, the streams trimmed, its report in
    /// target/artifacts/soak/<engine>
    Smoke(SmokeFlags),
}

#[derive(Args)]
struct SmokeFlags {
    /// The database the served lab runs on: mariadb, mariadb-si or postgres
    #[arg(long, value_name = "ENGINE", default_value = "mariadb", value_parser = one_engine)]
    engine: Engine,
    /// How long the load lasts, sampled every twelfth of it; at least the
    /// 20 s after which each method gets a new coupon
    #[arg(long, default_value = "60s", value_parser = duration)]
    duration: Duration,
}

#[derive(Args)]
struct Flags {
    /// The database the served lab runs on: mariadb, mariadb-si or postgres
    #[arg(long, value_name = "ENGINE", default_value = "mariadb", value_parser = one_engine)]
    engine: Engine,
    /// How long the load lasts: 90s, 30m, 2h
    #[arg(long, default_value = "30m", value_parser = duration)]
    duration: Duration,
    /// Issue requests a second, round the methods
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    rate: u32,
    /// How often the figures are sampled; the run holds at least four
    /// samples
    #[arg(long, default_value = "10s", value_parser = duration)]
    every: Duration,
    /// Trim the streams (COUPONLAB_STREAM_TRIM): their entries must then
    /// stay flat too
    #[arg(long)]
    trim: bool,
    /// Coupons created before the run, as earlier runs leave them
    #[arg(long, default_value_t = 0)]
    coupons: u64,
    /// Where the report goes [default: loadtest/reports/<UTC time>-soak/]
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// How a soak runs.
struct Options {
    engine: Engine,
    duration: Duration,
    rate: u32,
    every: Duration,
    trim: bool,
    /// Coupons created before the run, as earlier runs leave them.
    coupons: u64,
    /// `COUPONLAB_RECORD_DORMANT_AFTER_S` for the server.
    record_dormant_after_s: u64,
    out: PathBuf,
}

/// `--engine`: one of the engines `--engines` names.
fn one_engine(text: &str) -> Result<Engine, String> {
    match engine_list(text)?.0.as_slice() {
        [engine] => Ok(*engine),
        _ => Err("name one engine".into()),
    }
}

/// `30m`, `90s`, `2h`: the load runner's durations.
fn duration(text: &str) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(seconds(text)?).with_context(|| format!("not a duration: {text:?}"))
}

pub fn main(command: Command) -> anyhow::Result<()> {
    if let Some(Smoke::Smoke(flags)) = command.smoke {
        return smoke(flags.engine, flags.duration);
    }
    let flags = command.flags;
    anyhow::ensure!(
        flags.duration >= flags.every * 4,
        "--duration must hold at least four samples of --every"
    );
    let options = Options {
        engine: flags.engine,
        duration: flags.duration,
        rate: flags.rate,
        every: flags.every,
        trim: flags.trim,
        coupons: flags.coupons,
        record_dormant_after_s: 60,
        out: flags.out.unwrap_or_else(|| paths::new_report_dir("-soak")),
    };
    let soak = run(&options)?;
    println!("{}", soak.table());
    soak.verdict()
}

/// The short soak `cargo xtask test` ends with, on `engine`: a minute
/// unless told otherwise (half a minute on each engine, in the suite),
/// sampled every twelfth of it, 300 coupons already there, the streams
/// trimmed, and a coupon's record put to sleep after 10 s idle instead of
/// a minute, so that the recorder's live records can level off within the
/// run (a method's coupon changes every 20 s).
fn smoke(engine: Engine, duration: Duration) -> anyhow::Result<()> {
    anyhow::ensure!(
        duration >= COUPON_EVERY,
        "soak smoke --duration must see the methods' coupons change once: {} s at least",
        COUPON_EVERY.as_secs()
    );
    let options = Options {
        engine,
        duration,
        rate: 50,
        every: duration / SMOKE_SAMPLES,
        trim: true,
        coupons: 300,
        record_dormant_after_s: 10,
        out: target_dir()
            .join("artifacts")
            .join("soak")
            .join(engine.name()),
    };
    run(&options)?.verdict()
}

/// What the workers share: the latencies since the last sample, the
/// accepted requests, the coupons in use.
#[derive(Default)]
struct Load {
    latencies_us: Mutex<Vec<u64>>,
    accepted: AtomicU64,
    sent: AtomicU64,
    coupons: Mutex<Vec<u64>>,
    stop: AtomicBool,
}

/// Runs the soak; the samples and the report written.
fn run(options: &Options) -> anyhow::Result<Soak> {
    let redis = OwnRedis::start()?;
    let redis_url = redis.url(0);
    let trim = if options.trim { "true" } else { "false" };
    let dormant_after = options.record_dormant_after_s.to_string();
    let mut env = vec![
        ("COUPONLAB_STREAM_TRIM", trim),
        ("COUPONLAB_RECORD_DORMANT_AFTER_S", dormant_after.as_str()),
    ];
    env.extend_from_slice(options.engine.env());
    let database_url = options.engine.database_url()?;
    let server = Server::start_with(Serve {
        database_url: Some(&database_url),
        redis_url: Some(&redis_url),
        env: &env,
        ..Serve::default()
    })?;
    let api = Api::new(&server.base_url())?;
    let engine = &api.get("/lab/strategies")?["engine"];
    let database = format!(
        "{} {}",
        engine["name"].as_str().unwrap_or("?"),
        engine["version"].as_str().unwrap_or("?")
    );
    let members_per_coupon =
        (u64::from(options.rate) * COUPON_EVERY.as_secs()).div_ceil(METHODS.len() as u64);
    let members = api.post("/lab/members", &json!({ "count": members_per_coupon }))?;
    let first_member = members["firstId"].as_u64().context("no firstId")?;
    let load = Arc::new(Load::default());
    new_coupons(&api, &load, members_per_coupon / 2)?;

    let db = ScratchDatabase::connect(&database_url)?;
    db.create_coupons(options.coupons)?;
    let mut redis_conn = redis::Client::open(redis_url.as_str())?.get_connection()?;

    let started = Instant::now();
    let interval = Duration::from_secs_f64(1.0 / f64::from(options.rate));
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (api, load) = (api.clone(), load.clone());
            std::thread::spawn(move || {
                send(
                    &api,
                    &load,
                    started,
                    interval,
                    first_member,
                    members_per_coupon,
                )
            })
        })
        .collect();

    let mut samples = Vec::new();
    let mut next_coupons = started + COUPON_EVERY;
    let mut next_sample = started + options.every;
    let end = started + options.duration;
    while Instant::now() < end {
        let now = Instant::now();
        if now >= next_coupons {
            next_coupons += COUPON_EVERY;
            new_coupons(&api, &load, members_per_coupon / 2)?;
        }
        if now >= next_sample {
            next_sample += options.every;
            let sample = sample::take(&server, &api, &db, &mut redis_conn, &load, started)?;
            println!("{}", sample::progress(&sample, options.duration));
            samples.push(sample);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    load.stop.store(true, Ordering::Relaxed);
    for worker in workers {
        let _ = worker.join();
    }
    let title = format!(
        "Soak on {}: {} s at {} requests/s, streams {}",
        options.engine.name(),
        options.duration.as_secs(),
        options.rate,
        if options.trim {
            "trimmed"
        } else {
            "kept whole"
        }
    );
    let soak = Soak {
        title,
        engine: options.engine.name(),
        database,
        trim: options.trim,
        samples,
        provenance: crate::provenance::basic(),
        out: options.out.clone(),
    };
    soak.write()?;
    Ok(soak)
}

/// One coupon a method, of `total` coupons, for the requests from now on.
fn new_coupons(api: &Api, load: &Load, total: u64) -> anyhow::Result<()> {
    let mut coupons = Vec::new();
    for method in METHODS {
        let created = api.post(
            "/lab/coupons",
            &json!({ "name": format!("soak {method}"), "totalCount": total.max(1) }),
        )?;
        coupons.push(created["id"].as_u64().context("no coupon id")?);
    }
    *load.coupons.lock().unwrap() = coupons;
    Ok(())
}

/// A worker: takes the next request's turn, waits for its time, sends it.
fn send(
    api: &Api,
    load: &Load,
    started: Instant,
    interval: Duration,
    first_member: u64,
    members: u64,
) {
    while !load.stop.load(Ordering::Relaxed) {
        let turn = load.sent.fetch_add(1, Ordering::Relaxed);
        let due = started + interval * turn as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let method = turn as usize % METHODS.len();
        let coupon = load.coupons.lock().unwrap()[method];
        let member = first_member + (turn / METHODS.len() as u64) % members;
        let body = json!({ "memberId": member, "method": METHODS[method] });
        let asked = Instant::now();
        let status = api.post_status(&format!("/lab/coupons/{coupon}/issue"), &body);
        load.latencies_us
            .lock()
            .unwrap()
            .push(asked.elapsed().as_micros() as u64);
        if matches!(status, Ok(200 | 202)) {
            load.accepted.fetch_add(1, Ordering::Relaxed);
        }
    }
}
