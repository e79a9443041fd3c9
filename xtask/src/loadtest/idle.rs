//! `cargo xtask idle`: what a lab costs at rest, as its coupons pile up.
//!
//! ```text
//! cargo xtask idle [--coupons 1,200,2000,10000] [--seconds 10] [--out docs/performance.md | --no-out]
//!                   [--server PATH]
//! ```
//!
//! A served lab on a Redis of its own (so that every command Redis counts
//! is the lab's) and a database of its own. For each number of coupons, in
//! order, the coupons are created (straight into the database, as many
//! load runs leave them), the lab is left alone for two seconds, and then
//! for `--seconds` while Redis's `INFO commandstats` and the server's CPU
//! time are read before and after. No request is sent. `--server` measures
//! another build of the server (an older version, to compare) and writes
//! nothing.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::own_redis::OwnRedis;
use super::server::{Serve, Server, database_url};
use crate::flags::Flags;
use crate::root;

const USAGE: &str = "usage: cargo xtask idle [--coupons 1,200,2000,10000] [--seconds 10] \
     [--out docs/performance.md | --no-out] [--server PATH]";

/// How long the lab is left alone after its coupons were created, before
/// the measurement: its roles find the new coupons meanwhile.
const SETTLE: Duration = Duration::from_secs(2);

struct Options {
    coupons: Vec<u64>,
    seconds: u64,
    out: Option<PathBuf>,
    server: Option<PathBuf>,
}

impl Options {
    fn parse(args: &[String]) -> anyhow::Result<Options> {
        let mut options = Options {
            coupons: vec![1, 200, 2_000, 10_000],
            seconds: 10,
            out: Some(root().join("docs").join("performance.md")),
            server: None,
        };
        let mut flags = Flags::new(args, USAGE);
        while let Some(flag) = flags.next_flag() {
            match flag {
                "--coupons" => {
                    options.coupons = flags
                        .value(flag)?
                        .split(',')
                        .map(|n| {
                            n.trim()
                                .parse::<u64>()
                                .context("--coupons: numbers, comma separated")
                        })
                        .collect::<anyhow::Result<_>>()?;
                }
                "--seconds" => options.seconds = flags.parsed(flag, "whole seconds")?,
                "--out" => options.out = Some(PathBuf::from(flags.value(flag)?)),
                "--no-out" => options.out = None,
                "--server" => options.server = Some(PathBuf::from(flags.value(flag)?)),
                other => return Err(flags.unknown(other)),
            }
        }
        anyhow::ensure!(options.seconds > 0, "--seconds must be at least 1");
        anyhow::ensure!(
            options.coupons.windows(2).all(|w| w[0] < w[1]) && options.coupons[0] > 0,
            "--coupons must grow: 1,200,2000"
        );
        if options.server.is_some() {
            // Another build's figures are not this checkout's.
            options.out = None;
        }
        Ok(options)
    }
}

/// What one number of coupons cost at rest.
#[derive(Debug, Clone, Copy)]
struct AtRest {
    coupons: u64,
    redis_commands_per_second: f64,
    server_cpu_percent: f64,
}

pub fn main(args: &[String]) -> anyhow::Result<()> {
    let options = Options::parse(args)?;
    let figures = measure(
        &options.coupons,
        Duration::from_secs(options.seconds),
        options.server.as_deref(),
    )?;
    let table = markdown(&figures, options.seconds);
    println!("{table}");
    if let Some(out) = &options.out {
        crate::write_between_markers(out, "idle", &table)?;
        println!("written to {}", out.display());
    }
    Ok(())
}

/// Serves a lab (this checkout's, built first, or the `server` binary) on
/// a Redis of its own and measures it at rest with each number of
/// `coupons`, `window` each.
fn measure(
    coupons: &[u64],
    window: Duration,
    server: Option<&Path>,
) -> anyhow::Result<Vec<AtRest>> {
    let redis = OwnRedis::start()?;
    let redis_url = redis.url(0);
    let server = Server::start_with(Serve {
        build: server.is_none(),
        redis_url: Some(&redis_url),
        binary: server,
        ..Serve::default()
    })?;
    let (runtime, db) = scratch_database()?;
    let mut stats = redis::Client::open(redis_url.as_str())?.get_connection()?;
    let mut created = 0;
    let mut figures = Vec::new();
    for &wanted in coupons {
        runtime.block_on(create_coupons(&db, wanted - created))?;
        created = wanted;
        std::thread::sleep(SETTLE);
        let (commands, cpu) = (redis_commands(&mut stats)?, server.cpu_seconds()?);
        let started = Instant::now();
        std::thread::sleep(window);
        let elapsed = started.elapsed().as_secs_f64();
        let (commands_after, cpu_after) = (redis_commands(&mut stats)?, server.cpu_seconds()?);
        let at_rest = AtRest {
            coupons: wanted,
            redis_commands_per_second: (commands_after - commands) as f64 / elapsed,
            server_cpu_percent: (cpu_after - cpu) / elapsed * 100.0,
        };
        println!(
            "{wanted} coupons: {:.1} Redis commands/s, {:.2} % of a core in the server",
            at_rest.redis_commands_per_second, at_rest.server_cpu_percent
        );
        figures.push(at_rest);
    }
    Ok(figures)
}

/// A runtime to block on and one connection to the served lab's database,
/// to create coupons behind its back and count what it holds.
pub(super) fn scratch_database() -> anyhow::Result<(tokio::runtime::Runtime, sqlx::MySqlPool)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let db = runtime.block_on(
        sqlx::mysql::MySqlPoolOptions::new()
            .max_connections(1)
            .connect(&database_url()?),
    )?;
    Ok((runtime, db))
}

/// `count` more coupons, in batches of a thousand rows.
pub(super) async fn create_coupons(db: &sqlx::MySqlPool, count: u64) -> anyhow::Result<()> {
    let mut left = count;
    while left > 0 {
        let batch = left.min(1_000);
        let rows = vec!["('idle', 100, 0, 1)"; batch as usize].join(", ");
        sqlx::query(&format!(
            "INSERT INTO coupons (name, total_count, issued_count, per_member_limit) VALUES {rows}"
        ))
        .execute(db)
        .await
        .context("cannot create coupons")?;
        left -= batch;
    }
    Ok(())
}

/// Commands Redis has run since it started, less the `INFO` this reads
/// them with.
fn redis_commands(stats: &mut redis::Connection) -> anyhow::Result<u64> {
    let info: String = redis::cmd("INFO").arg("commandstats").query(stats)?;
    Ok(info
        .lines()
        .filter(|line| !line.starts_with("cmdstat_info:"))
        .filter_map(|line| {
            let calls = line.split_once("calls=")?.1;
            calls.split(',').next()?.parse::<u64>().ok()
        })
        .sum())
}

fn markdown(figures: &[AtRest], seconds: u64) -> String {
    let mut out = String::from(
        "| coupons | Redis commands/s | server CPU (% of a core) |\n|---:|---:|---:|\n",
    );
    for f in figures {
        let _ = writeln!(
            out,
            "| {} | {:.1} | {:.2} |",
            f.coupons, f.redis_commands_per_second, f.server_cpu_percent
        );
    }
    let _ = writeln!(
        out,
        "\nNo request sent; each row measured over {seconds} s, two seconds after its coupons were created. \
         `cargo xtask idle --coupons {}`",
        figures
            .iter()
            .map(|f| f.coupons.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    out
}
