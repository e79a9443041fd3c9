//! `cargo xtask idle`: what a lab costs at rest, as its coupons pile up.
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
use clap::Args;

use crate::markers;
use crate::own_redis::OwnRedis;
use crate::paths::root;
use crate::server::{Serve, Server, database_url};
use crate::truth::Database;

/// How long the lab is left alone after its coupons were created, before
/// the measurement: its roles find the new coupons meanwhile.
const SETTLE: Duration = Duration::from_secs(2);

#[derive(Args)]
pub struct Options {
    /// The numbers of coupons measured, in turn, each larger than the last
    #[arg(long, value_name = "N,N,...", default_value = "1,200,2000,10000", value_parser = growing_counts)]
    coupons: Counts,
    /// How long each number is measured
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    seconds: u64,
    /// The document the table is written into, between its `idle` markers
    /// [default: docs/performance.md]
    #[arg(long, value_name = "FILE", conflicts_with = "no_out")]
    out: Option<PathBuf>,
    /// Write the table nowhere, only print it
    #[arg(long)]
    no_out: bool,
    /// Another build of the server to measure (an older version, to
    /// compare); its figures are written nowhere
    #[arg(long, value_name = "PATH")]
    server: Option<PathBuf>,
}

/// Numbers of coupons, each larger than the last.
#[derive(Clone)]
struct Counts(Vec<u64>);

fn growing_counts(text: &str) -> anyhow::Result<Counts> {
    let counts = text
        .split(',')
        .map(|n| {
            n.trim()
                .parse::<u64>()
                .context("--coupons: numbers, comma separated")
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    anyhow::ensure!(
        counts.windows(2).all(|w| w[0] < w[1]) && counts[0] > 0,
        "--coupons must grow: 1,200,2000"
    );
    Ok(Counts(counts))
}

impl Options {
    /// Where the table goes: nowhere for another build's figures, which
    /// are not this checkout's.
    fn out(&self) -> Option<PathBuf> {
        if self.no_out || self.server.is_some() {
            return None;
        }
        Some(
            self.out
                .clone()
                .unwrap_or_else(|| root().join("docs").join("performance.md")),
        )
    }
}

/// What one number of coupons cost at rest.
#[derive(Debug, Clone, Copy)]
struct AtRest {
    coupons: u64,
    redis_commands_per_second: f64,
    server_cpu_percent: f64,
}

pub fn main(options: &Options) -> anyhow::Result<()> {
    let figures = measure(
        &options.coupons.0,
        Duration::from_secs(options.seconds),
        options.server.as_deref(),
    )?;
    let table = markdown(&figures, options.seconds);
    println!("{table}");
    if let Some(out) = &options.out() {
        markers::write_between(out, "idle", &table)?;
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
        redis_url: Some(&redis_url),
        binary: server,
        ..Serve::default()
    })?;
    let db = ScratchDatabase::connect(&database_url()?)?;
    let mut stats = redis::Client::open(redis_url.as_str())?.get_connection()?;
    let mut created = 0;
    let mut figures = Vec::new();
    for &wanted in coupons {
        db.create_coupons(wanted - created)?;
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

/// The served lab's database reached behind its back, on either engine:
/// coupons created straight into it, as load runs leave them, and what it
/// holds counted without asking the lab being measured.
pub struct ScratchDatabase {
    /// Idle and the soak run on threads, not in async code: each query is
    /// blocked on.
    runtime: tokio::runtime::Runtime,
    pool: Database,
}

impl ScratchDatabase {
    /// Connects to `database_url` (`mysql://…` or `postgres://…`).
    pub fn connect(database_url: &str) -> anyhow::Result<ScratchDatabase> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let pool = Database::connect(&runtime, database_url)?;
        Ok(ScratchDatabase { runtime, pool })
    }

    /// `count` more coupons, in batches of a thousand rows.
    pub fn create_coupons(&self, count: u64) -> anyhow::Result<()> {
        let mut left = count;
        while left > 0 {
            let batch = left.min(1_000);
            let rows = vec!["('idle', 100, 0, 1)"; batch as usize].join(", ");
            let insert = format!(
                "INSERT INTO coupons (name, total_count, issued_count, per_member_limit) VALUES {rows}"
            );
            self.runtime
                .block_on(async {
                    match &self.pool {
                        Database::MySql(db) => sqlx::query(&insert).execute(db).await.map(drop),
                        Database::Postgres(db) => sqlx::query(&insert).execute(db).await.map(drop),
                    }
                })
                .context("cannot create coupons")?;
            left -= batch;
        }
        Ok(())
    }

    /// The coupons the lab holds.
    pub fn coupons(&self) -> anyhow::Result<u64> {
        self.count("SELECT COUNT(*) FROM coupons")
    }

    /// The client connections to the lab's database, this one included:
    /// every pool of the server's (its own and its components' users'),
    /// as each engine lists its sessions.
    pub fn connections(&self) -> anyhow::Result<u64> {
        self.count(match self.pool {
            Database::MySql(_) => {
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE()"
            }
            // Client backends only: PostgreSQL lists its autovacuum
            // workers on a database too, which MariaDB's PROCESSLIST
            // does not hold.
            Database::Postgres(_) => {
                "SELECT COUNT(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND backend_type = 'client backend'"
            }
        })
    }

    /// The one figure `sql` reads.
    fn count(&self, sql: &str) -> anyhow::Result<u64> {
        let count: i64 = self.runtime.block_on(async {
            match &self.pool {
                Database::MySql(db) => sqlx::query_scalar(sql).fetch_one(db).await,
                Database::Postgres(db) => sqlx::query_scalar(sql).fetch_one(db).await,
            }
        })?;
        Ok(count.max(0) as u64)
    }
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
