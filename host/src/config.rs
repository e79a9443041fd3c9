//! Command line and environment configuration (flags with environment fallbacks).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

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
    /// Serve the /lab API (the default).
    Serve(Config),
}

impl Default for Command {
    fn default() -> Self {
        Command::Serve(Config::parse_from_env())
    }
}

/// Everything a server needs to start.
#[derive(Debug, Clone, Args)]
pub struct Config {
    /// Address the HTTP API listens on.
    #[arg(long, env = "COUPONLAB_BIND", default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,

    /// MySQL/MariaDB URL; the database is created if missing and migrated at start.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "mysql://root@127.0.0.1:3306/couponlab"
    )]
    pub database_url: String,

    /// Redis URL; the path selects the logical database.
    #[arg(long, env = "REDIS_URL", default_value = "redis://127.0.0.1:6379/0")]
    pub redis_url: String,

    /// Directory of strategy components (`*.wasm`).
    #[arg(
        long,
        env = "COUPONLAB_STRATEGY_DIR",
        default_value = "strategies/dist"
    )]
    pub strategy_dir: PathBuf,

    /// Reload components when files in the strategy directory change.
    #[arg(long, env = "COUPONLAB_WATCH", default_value_t = true, action = clap::ArgAction::Set)]
    pub watch: bool,

    /// Wall-clock budget of one strategy call, host calls included.
    #[arg(long, env = "COUPONLAB_REQUEST_TIMEOUT_MS", default_value_t = 10_000)]
    pub request_timeout_ms: u64,

    /// Linear memory one strategy instance may grow to.
    #[arg(long, env = "COUPONLAB_STRATEGY_MEMORY_MIB", default_value_t = 32)]
    pub strategy_memory_mib: u64,

    /// Strategy instances that may run at once (the pooling allocator's size).
    #[arg(long, env = "COUPONLAB_MAX_INSTANCES", default_value_t = 1000)]
    pub max_instances: u32,

    /// Connections in the MySQL pool.
    #[arg(long, env = "COUPONLAB_DB_POOL_SIZE", default_value_t = 32)]
    pub db_pool_size: u32,

    /// innodb_lock_wait_timeout of every pooled connection, in seconds. Kept
    /// below the request timeout so a long lock wait surfaces as the typed
    /// lock-wait-timeout error rather than as a cancelled request.
    #[arg(long, env = "COUPONLAB_LOCK_WAIT_TIMEOUT_S", default_value_t = 5)]
    pub lock_wait_timeout_s: u32,

    /// Dedicated Redis connections (for WATCH and MULTI/EXEC) open at once.
    #[arg(long, env = "COUPONLAB_REDIS_CONNECTIONS", default_value_t = 64)]
    pub redis_connections: usize,
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
}
