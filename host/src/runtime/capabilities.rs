//! What every capability works through, and the one place that builds it
//! all from the server's configuration.

use std::sync::Arc;
use std::time::Duration;

use super::broker::{BrokerArgs, Brokers, Topology};
use super::jobs::{JobQueue, JobsArgs};
use super::log::LogArgs;
use super::permits::{Permits, PermitsArgs};
use super::process_lock::{ProcessLockArgs, ProcessLocks};
use super::redis;
use super::redis::pools::{GuestRedis, RedisArgs};
use super::sql::user::SqlArgs;
use super::sql::{self, GuestSql};
use super::store::Shared;
use crate::metrics::Metrics;
use crate::redis_target::RedisConn;

/// The settings of every capability, one group each, flattened into the
/// server's configuration.
#[derive(Debug, Clone, clap::Args)]
pub struct CapabilityArgs {
    #[command(flatten)]
    pub sql: SqlArgs,
    #[command(flatten)]
    pub redis: RedisArgs,
    #[command(flatten)]
    pub jobs: JobsArgs,
    #[command(flatten)]
    pub permits: PermitsArgs,
    #[command(flatten)]
    pub process_lock: ProcessLockArgs,
    #[command(flatten)]
    pub log: LogArgs,
    #[command(flatten)]
    pub broker: BrokerArgs,
}

/// The server's pools and queues, shared by every call. `S` is what runs a
/// queued job (the runtime's loaded component), which no capability needs
/// to know.
pub struct Capabilities<S> {
    pub sql: Arc<GuestSql>,
    pub redis: Arc<GuestRedis>,
    pub jobs: JobQueue<S>,
    pub permits: Arc<Permits>,
    pub process_locks: Arc<ProcessLocks>,
    pub log: LogArgs,
    pub brokers: Arc<Brokers>,
}

/// The server's own connections, through which the components' users are
/// set up.
pub struct Admin<'a> {
    pub sql: sql::user::Admin<'a>,
    pub redis: &'a RedisConn,
    /// REDIS_URL.
    pub redis_url: &'a str,
    /// REDIS_URL names a Redis Cluster's seed nodes.
    pub cluster: bool,
}

impl<S: Send + Sync + 'static> Capabilities<S> {
    /// Builds every capability: the components' SQL pool and Redis
    /// connections as their restricted users, the job queue, the gates,
    /// the process locks, the brokers' publishers (connected on first use).
    /// `call` is one call's budget, which statements are cut within;
    /// `topology` is where the lab's broker messages go.
    pub async fn build(
        args: &CapabilityArgs,
        admin: Admin<'_>,
        call: Duration,
        metrics: &Metrics,
        topology: Topology,
    ) -> anyhow::Result<Self> {
        let admin_redis = (admin.redis, admin.redis_url, admin.cluster);
        let redis = redis::connect(&args.redis, admin_redis, metrics).await?;
        Ok(Self {
            sql: Arc::new(
                sql::user::connect(
                    &args.sql,
                    admin.sql,
                    call,
                    metrics.sql_sessions_ended.clone(),
                )
                .await?,
            ),
            redis: Arc::new(redis),
            jobs: JobQueue::new(&args.jobs),
            permits: Arc::new(Permits::new(args.permits.settings())),
            process_locks: Arc::new(ProcessLocks::new(
                &args.process_lock,
                metrics.process_locks_held.clone(),
            )),
            log: args.log,
            brokers: Arc::new(Brokers::new(&args.broker, topology)),
        })
    }

    /// What a call's store holds of each capability: the server's side,
    /// shared.
    pub(super) fn shared(&self) -> Shared {
        Shared {
            sql: self.sql.clone(),
            redis: self.redis.clone(),
            permits: self.permits.clone(),
            process_locks: self.process_locks.clone(),
            log: self.log,
            brokers: self.brokers.clone(),
        }
    }
}
