//! The shared state of one server.

use std::hash::{BuildHasher, RandomState};
use std::ops::Deref;
use std::sync::{Arc, Weak};
use std::time::Duration;

use anyhow::Context;
use tokio_util::sync::DropGuard;

use crate::config::Config;
use crate::confirmations::BrokerEvents;
use crate::db;
use crate::db_target::Pool;
use crate::metrics::Metrics;
use crate::recently::Recently;
use crate::recorder::Recorder;
use crate::redis_claim;
use crate::redis_target::{RedisConn, RedisTarget};
use crate::runtime::broker::Topology;
use crate::runtime::broker::message::Names;
use crate::runtime::{Admin, Capabilities, Limits, Registry, Runtime};
use crate::settlements::Settlements;
use crate::traces::Traces;

/// Cheap to clone: every handler holds one.
#[derive(Clone)]
pub struct Lab(Arc<LabState>);

pub struct LabState {
    pub config: Config,
    /// The server's own database pool (routes, results, reset), as
    /// DATABASE_URL's user; components use a restricted one.
    db: Pool,
    /// The server's own Redis connection (results, confirmations, reset), as
    /// REDIS_URL's user; components use a restricted one.
    redis: RedisConn,
    /// REDIS_URL: where the consumers open connections of their own.
    pub redis_target: RedisTarget,
    /// Runs components; owns the pools they reach through their imports.
    pub runtime: Runtime,
    /// The strategies this server serves, by method name.
    pub registry: Registry,
    /// What each issue request asked and got.
    pub recorder: Recorder,
    /// Requests whose outcome is to be settled later.
    pub settlements: Settlements,
    /// Broker events counted while Redis could not take them.
    pub broker_events: BrokerEvents,
    /// What each request's component did, call by call: the traces kept.
    pub traces: Traces,
    /// The coupons whose streams this process announced lately, by stream
    /// kind (the announcements, a floor above).
    pub announced: Recently<(&'static str, u64)>,
    /// This process among all those sharing the lab's Redis: its stream
    /// consumers, its loader and its request snapshots go by it.
    pub identity: String,
    /// The lab's own id, the same on all its hosts ([`db::Server::lab_id`]).
    pub lab_id: String,
    /// Renews the lab's claim of its Redis database until the lab is gone
    /// (none when the database is shared).
    _claim: Option<DropGuard>,
}

impl Deref for Lab {
    type Target = LabState;
    fn deref(&self) -> &LabState {
        &self.0
    }
}

impl Lab {
    /// Connects the pools (MySQL is migrated; Redis connects lazily, so a
    /// server starts while Redis is down) and claims the Redis database. No
    /// component is loaded yet: the canary's start loads them, once the
    /// roles their canaries need run.
    pub async fn start(mut config: Config) -> anyhow::Result<Lab> {
        // A lease that ran out under a confirm still in progress would hand
        // its permit to another request: the gate would admit one too many.
        let lease_ms = config.capabilities.permits.permit_lease_ms;
        anyhow::ensure!(
            lease_ms > config.request_timeout_ms,
            "COUPONLAB_PERMIT_LEASE_MS ({lease_ms}) must be longer than COUPONLAB_REQUEST_TIMEOUT_MS ({})",
            config.request_timeout_ms
        );
        let database = db::connect(&config).await?;
        let redis_target =
            RedisTarget::open(&config.redis_url, config.redis_cluster).context("REDIS_URL")?;
        let redis = redis_target
            .shared(Duration::from_secs(5))
            .context("cannot set up the server's Redis connection")?;
        let admin = Admin {
            sql: database.admin(&config.database_url),
            redis: &redis,
            redis_url: &config.redis_url,
            cluster: config.redis_cluster,
        };
        let metrics = Arc::new(Metrics::new());
        // Named after the lab's id: every process of the lab, and no other
        // lab, reads the same queues and streams.
        let database_name = database.target.database().unwrap_or("couponlab");
        let topology = Topology {
            lab_id: database.lab_id.clone(),
            names: Names::for_lab(database_name, &database.lab_id),
            max_deliveries: config.consumers.max_deliveries,
        };
        let caps = Capabilities::build(
            &config.capabilities,
            admin,
            config.request_timeout(),
            &metrics,
            topology,
        )
        .await?;
        let limits = Limits {
            timeout: config.request_timeout(),
            memory_bytes: usize::try_from(config.strategy_memory_mib.saturating_mul(1 << 20))
                .context("COUPONLAB_STRATEGY_MEMORY_MIB is too large")?,
            max_instances: config.max_instances,
            trace_calls: config.traces.enabled,
        };
        let traces = Traces::new(config.traces.clone(), metrics.clone());
        let runtime = Runtime::new(Arc::new(caps), limits, config.compile_cache(), metrics)?;
        std::fs::create_dir_all(&config.strategy_dir).with_context(|| {
            format!(
                "cannot create the strategy directory {}",
                config.strategy_dir.display()
            )
        })?;
        // One form of every component's path, whether the directory was
        // named relative (the default) or not, and whichever way a path
        // reaches the registry: the first load's and the watcher's are the
        // same file.
        config.strategy_dir = std::fs::canonicalize(&config.strategy_dir).with_context(|| {
            format!(
                "cannot resolve the strategy directory {}",
                config.strategy_dir.display()
            )
        })?;
        // Claimed last: a start refused for anything else leaves no claim
        // to hold another lab back.
        let claim = if config.share_redis_database {
            None
        } else {
            let identity = redis_claim::identity(&database.pool, &database.lab_id).await?;
            redis_claim::claim_at_start(&redis, &identity, &config.redis_url).await?;
            Some(redis_claim::keep(redis.clone(), identity))
        };
        let recorder = Recorder::sleeping_after(Duration::from_secs(config.record_dormant_after_s));
        Ok(Lab(Arc::new(LabState {
            config,
            db: database.pool,
            redis,
            redis_target,
            runtime,
            registry: Registry::default(),
            recorder,
            settlements: Settlements::default(),
            broker_events: BrokerEvents::default(),
            traces,
            announced: Recently::default(),
            identity: process_identity(),
            lab_id: database.lab_id,
            _claim: claim,
        })))
    }

    /// A handle that does not keep the server alive: the background work
    /// that holds one ends when the server is gone.
    pub fn downgrade(&self) -> WeakLab {
        WeakLab(Arc::downgrade(&self.0))
    }

    /// The server's own database pool.
    pub fn db(&self) -> &Pool {
        &self.db
    }

    /// The server's own Redis connection.
    pub fn redis(&self) -> &RedisConn {
        &self.redis
    }
}

/// A [`Lab`] that may be gone.
#[derive(Clone)]
pub struct WeakLab(Weak<LabState>);

impl WeakLab {
    pub fn upgrade(&self) -> Option<Lab> {
        self.0.upgrade().map(Lab)
    }
}

/// Host name, pid and a random part, computed once. Containers often run
/// every process as pid 1 and may share a host name; the random part keeps
/// them apart, and gives a restarted process a name of its own.
fn process_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|name| name.trim().replace(|c: char| !c.is_ascii_graphic(), "_"))
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "host".to_string());
    let pid = std::process::id();
    // Seeded from the operating system's randomness.
    let random = RandomState::new().hash_one(pid) & 0xffff_ffff_ffff;
    format!("{host}-{pid}-{random:012x}")
}
