//! Command line and environment configuration (flags with environment fallbacks).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::db_target::Dialect;
use crate::redis_target::sentinel::is_sentinel;
use crate::redis_target::url as redis_url_text;
use crate::runtime::CapabilityArgs;
use crate::traces::TraceArgs;

#[derive(Debug, Parser)]
#[command(
    name = "couponlab",
    version,
    about = "A lab for first-come-first-served coupon issuance"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the /lab API (the default), with the consumer roles in-process.
    Serve(Config),
    /// Run one consumer alone, like the seed's consumer profiles.
    Consume {
        #[arg(value_enum)]
        consumer: Consumer,
        #[command(flatten)]
        config: Config,
    },
    /// Run the canary of each component file against the configured
    /// servers, as a server would before serving it, and print its report;
    /// exits 1 unless every one passed. The strategy directory serves
    /// meanwhile as on another host sharing the lab.
    Check {
        #[arg(required = true, value_name = "FILE.wasm")]
        files: Vec<PathBuf>,
        #[command(flatten)]
        config: Config,
    },
}

/// A consumer `couponlab consume` can run alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Consumer {
    /// The pub/sub subscriber of stage 5.
    Pubsub,
    /// The stream consumers (and claimer) of stage 6.
    Stream,
    /// The write-behind loader of stages 9-10.
    WriteBehind,
    /// The RabbitMQ and JetStream consumers of the broker methods.
    Brokers,
}

impl Default for Command {
    fn default() -> Self {
        Command::Serve(Config::parse_from_env())
    }
}

/// The database `cargo xtask run` uses: the local MariaDB or MySQL as root.
const LOCAL_DATABASE: &str = "mysql://root@127.0.0.1:3306/couponlab";

/// Where `cargo xtask strategies` installs the components.
const INSTALLED_COMPONENTS: &str = "strategies/dist";

/// Where `cargo xtask loadtest` writes its reports, one directory a run.
const LOAD_TEST_REPORTS: &str = "loadtest/reports";
const COMPILE_CACHE: &str = "target/compile-cache";

/// Everything a server needs to start.
#[derive(Debug, Clone, Args)]
pub struct Config {
    /// Address the HTTP API listens on.
    #[arg(long, env = "COUPONLAB_BIND", default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,

    /// MySQL/MariaDB or PostgreSQL URL; the database is created if missing
    /// and migrated at start.
    #[arg(long, env = "DATABASE_URL", default_value = LOCAL_DATABASE, value_parser = database_url)]
    pub database_url: String,

    /// Redis URL; the path selects the logical database. With
    /// `--redis-cluster`, a comma-separated list of the cluster's seed nodes;
    /// `redis+sentinel://HOST:PORT,HOST:PORT/MASTER/DB`, the Sentinels of a
    /// primary the lab follows across failovers.
    #[arg(long, env = "REDIS_URL", default_value = "redis://127.0.0.1:6379/0", value_parser = redis_url)]
    pub redis_url: String,

    /// REDIS_URL names a Redis Cluster: every command goes to the node that
    /// owns its key (a coupon's keys share one slot).
    #[arg(long, env = "COUPONLAB_REDIS_CLUSTER")]
    pub redis_cluster: bool,

    /// Let several labs share one Redis database, each keeping its coupon
    /// ids apart from the others' (the test suite's servers do). Off, a
    /// server refuses to start on a Redis database another lab uses.
    #[arg(long, env = "COUPONLAB_SHARE_REDIS_DATABASE", default_value_t = false, action = clap::ArgAction::Set)]
    pub share_redis_database: bool,

    /// Directory of strategy components (`*.wasm`).
    #[arg(long, env = "COUPONLAB_STRATEGY_DIR", default_value = INSTALLED_COMPONENTS)]
    pub strategy_dir: PathBuf,

    /// Reload components when files in the strategy directory change.
    #[arg(long, env = "COUPONLAB_WATCH", default_value_t = true, action = clap::ArgAction::Set)]
    pub watch: bool,

    /// Directory of load test reports the console lists (`GET /lab/reports`).
    #[arg(long, env = "COUPONLAB_REPORTS_DIR", default_value = LOAD_TEST_REPORTS)]
    pub reports_dir: PathBuf,

    /// Wall-clock budget of one strategy call, host calls included.
    #[arg(long, env = "COUPONLAB_REQUEST_TIMEOUT_MS", default_value_t = 10_000)]
    pub request_timeout_ms: u64,

    /// When a component proves its claims on a scratch coupon before it
    /// serves: `changed` (a file whose sha256 has not passed here before),
    /// `always` (at every load) or `off`.
    #[arg(long, env = "COUPONLAB_CANARY", value_enum, default_value_t = CanaryMode::Changed)]
    pub canary: CanaryMode,

    /// Linear memory one strategy instance may grow to.
    #[arg(long, env = "COUPONLAB_STRATEGY_MEMORY_MIB", default_value_t = 32)]
    pub strategy_memory_mib: u64,

    /// Where compiled components are kept between runs (wasmtime's cache,
    /// keyed by a component's content and the engine's settings), so a
    /// start compiles only what it has not compiled before; `off` keeps
    /// none. What is there is native code the server runs unchecked: only
    /// the server's user may write to it, and it is never the strategy
    /// directory.
    #[arg(long, env = "COUPONLAB_COMPILE_CACHE", default_value = COMPILE_CACHE)]
    pub compile_cache: PathBuf,

    /// Strategy instances that may run at once (the pooling allocator's size).
    #[arg(long, env = "COUPONLAB_MAX_INSTANCES", default_value_t = 1000)]
    pub max_instances: u32,

    /// How often this server publishes its record of requests to Redis for
    /// the other hosts' result endpoints (when it changed).
    #[arg(long, env = "COUPONLAB_SNAPSHOT_INTERVAL_MS", default_value_t = 200)]
    pub snapshot_interval_ms: u64,

    /// How long a coupon's published record stays idle before it is kept
    /// encoded (a live record holds two 168 KiB histograms).
    #[arg(long, env = "COUPONLAB_RECORD_DORMANT_AFTER_S", default_value_t = 60)]
    pub record_dormant_after_s: u64,

    /// Connections in the server's own database pool (routes, results, reset).
    #[arg(long, env = "COUPONLAB_ADMIN_DB_POOL_SIZE", default_value_t = 8)]
    pub admin_db_pool_size: u32,

    /// Every capability's settings: pools, queues, gates, and what one
    /// strategy call may use of them.
    #[command(flatten)]
    pub capabilities: CapabilityArgs,

    #[command(flatten)]
    pub consumers: ConsumerConfig,

    /// Which request traces are kept (see `traces`).
    #[command(flatten)]
    pub traces: TraceArgs,
}

/// The confirmation roles: the pub/sub subscriber and the stream consumers.
#[derive(Debug, Clone, Args)]
pub struct ConsumerConfig {
    /// Run the subscriber and the stream consumers inside `serve`; turn off
    /// to run them with `couponlab consume` elsewhere.
    #[arg(long = "consumers", env = "COUPONLAB_CONSUMERS", default_value_t = true, action = clap::ArgAction::Set)]
    pub in_process: bool,

    /// Stream consumers in this process's group member set (the seed runs 4).
    #[arg(long, env = "COUPONLAB_STREAM_CONSUMERS", default_value_t = 4)]
    pub stream_consumers: usize,

    /// A pending stream entry idle this long is claimed and delivered again.
    #[arg(long, env = "COUPONLAB_STREAM_CLAIM_IDLE_MS", default_value_t = 5_000)]
    pub claim_idle_ms: u64,

    /// How often pending entries are looked at for claiming.
    #[arg(
        long,
        env = "COUPONLAB_STREAM_CLAIM_INTERVAL_MS",
        default_value_t = 1_000
    )]
    pub claim_interval_ms: u64,

    /// Trim from each stream the entries its group has acknowledged (XTRIM
    /// MINID, every second). Off by default, as the seed runs: the streams
    /// keep their history, to be read, and grow by an entry per accepted
    /// request.
    #[arg(long, env = "COUPONLAB_STREAM_TRIM", default_value_t = false, action = clap::ArgAction::Set)]
    pub stream_trim: bool,

    /// Deliveries after which an entry goes to the dead-letter stream.
    #[arg(long, env = "COUPONLAB_STREAM_MAX_DELIVERIES", default_value_t = 3)]
    pub max_deliveries: u32,

    /// Messages the subscriber confirms at once.
    #[arg(long, env = "COUPONLAB_SUBSCRIBER_WORKERS", default_value_t = 4)]
    pub subscriber_workers: usize,
}

/// What DATABASE_URL takes, for every error about it.
const DATABASE_URLS: &str = "DATABASE_URL takes mysql://USER[:PASSWORD]@HOST[:PORT]/DATABASE \
     (MySQL or MariaDB) or postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE (postgresql:// alike)";

/// DATABASE_URL, refused at once when its scheme is no engine's the lab
/// runs on.
fn database_url(text: &str) -> Result<String, String> {
    match (Dialect::of_url(text), text.split_once("://")) {
        (Some(_), _) => Ok(text.to_string()),
        (None, Some((scheme, _))) => Err(format!(
            "DATABASE_URL's scheme {scheme}:// is no engine's the lab runs on; {DATABASE_URLS}"
        )),
        (None, None) => Err(format!(
            "DATABASE_URL is not a URL: it has no scheme (`mysql://`, `postgres://`); \
             {DATABASE_URLS}"
        )),
    }
}

/// REDIS_URL, refused at once when the lab cannot use it. A list is checked
/// as a cluster's seed nodes (unless it names Sentinels); whether
/// `--redis-cluster` says so is checked at start.
fn redis_url(text: &str) -> Result<String, String> {
    let seed_list = text.contains(',') && !is_sentinel(text);
    redis_url_text::check(text, seed_list)?;
    Ok(text.to_string())
}

impl Config {
    /// The configuration from the environment and defaults alone.
    pub fn parse_from_env() -> Self {
        #[derive(Parser)]
        struct Only {
            #[command(flatten)]
            config: Config,
        }
        Only::parse_from(["couponlab"]).config
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    /// The compile cache's directory, unless it is `off`.
    pub fn compile_cache(&self) -> Option<&std::path::Path> {
        (self.compile_cache.as_os_str() != "off").then_some(self.compile_cache.as_path())
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// Every capability's settings are flattened into one command: their
    /// flags, environment variables and ids must not collide.
    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn a_count_that_must_be_positive_is_refused_at_zero() {
        for (flag, value) in [
            ("--permits", "0"),
            ("--job-workers", "0"),
            ("--job-queue", "0"),
        ] {
            let parsed = Cli::try_parse_from(["couponlab", "serve", flag, value]);
            let error = parsed.err().map(|err| err.to_string()).unwrap_or_default();
            assert!(error.contains("is not in 1.."), "{flag} {value}: {error}");
        }
        let parsed = Cli::try_parse_from(["couponlab", "serve", "--permits", "2"]).unwrap();
        let Some(Command::Serve(config)) = parsed.command else {
            panic!("serve parses to Serve");
        };
        assert_eq!(config.capabilities.permits.per_gate, 2);
    }

    #[test]
    fn a_url_the_lab_cannot_use_is_refused_naming_the_setting_and_what_it_takes() {
        for (flag, value, problem, accepted) in [
            (
                "--redis-url",
                "redis+sentinel://127.0.0.1:26379",
                "names no master",
                "REDIS_URL takes redis://",
            ),
            (
                "--database-url",
                "sqlite://lab.db",
                "scheme sqlite://",
                "DATABASE_URL takes mysql://",
            ),
            (
                "--database-url",
                "127.0.0.1:3306/lab",
                "no scheme",
                "DATABASE_URL takes mysql://",
            ),
        ] {
            let parsed = Cli::try_parse_from(["couponlab", "serve", flag, value]);
            let error = parsed.err().map(|err| err.to_string()).unwrap_or_default();
            for told in [flag, problem, accepted] {
                assert!(error.contains(told), "{flag} {value}: {error}");
            }
        }
        let parsed = Cli::try_parse_from([
            "couponlab",
            "serve",
            "--database-url",
            "postgres://postgres@127.0.0.1:5432/lab",
            "--redis-url",
            "redis://127.0.0.1:6379/3",
        ]);
        assert!(parsed.is_ok(), "{:?}", parsed.err());
    }
}

/// When a component proves its claims before it serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum CanaryMode {
    /// Never: every component that passes the registry's checks serves.
    Off,
    /// A file whose sha256 has not passed a canary on this database.
    #[default]
    Changed,
    /// At every load, passed before or not.
    Always,
}
