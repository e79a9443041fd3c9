//! The shared state of one server.

use std::ops::Deref;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context;
use sqlx::MySqlPool;

use crate::config::Config;
use crate::db;
use crate::recorder::Recorder;
use crate::runtime::jobs::JobQueue;
use crate::runtime::permits::{PermitSettings, Permits};
use crate::runtime::redis::RedisPools;
use crate::runtime::watcher::{self, DirectoryWatcher};
use crate::runtime::{Capabilities, Limits, Registry, Runtime};

/// Cheap to clone: every handler holds one.
#[derive(Clone)]
pub struct Lab(Arc<LabState>);

pub struct LabState {
    pub config: Config,
    /// Runs components; owns the pools they reach through their imports.
    pub runtime: Runtime,
    /// The strategies this server serves, by method name.
    pub registry: Registry,
    /// What each issue request asked and got.
    pub recorder: Recorder,
    /// Reloads components as the strategy directory changes (when enabled).
    watcher: OnceLock<DirectoryWatcher>,
}

impl Deref for Lab {
    type Target = LabState;
    fn deref(&self) -> &LabState {
        &self.0
    }
}

impl Lab {
    /// Connects the pools (MySQL is migrated; Redis connects lazily, so a
    /// server starts while Redis is down) and loads the strategy directory.
    pub async fn start(config: Config) -> anyhow::Result<Lab> {
        // A lease that ran out under a confirm still in progress would hand
        // its permit to another request: the gate would admit one too many.
        anyhow::ensure!(
            config.permit_lease_ms > config.request_timeout_ms,
            "COUPONLAB_PERMIT_LEASE_MS ({}) must be longer than COUPONLAB_REQUEST_TIMEOUT_MS ({})",
            config.permit_lease_ms,
            config.request_timeout_ms
        );
        let db = db::connect(
            &config.database_url,
            db::PoolSettings {
                max_connections: config.db_pool_size,
                lock_wait_timeout_s: config.lock_wait_timeout_s,
            },
        )
        .await?;
        let redis = RedisPools::new(&config.redis_url, config.redis_connections)?;
        let limits = Limits {
            timeout: config.request_timeout(),
            memory_bytes: usize::try_from(config.strategy_memory_mib.saturating_mul(1 << 20))
                .context("COUPONLAB_STRATEGY_MEMORY_MIB is too large")?,
            max_instances: config.max_instances,
        };
        let jobs = JobQueue::new(config.job_queue);
        let permits = Permits::new(PermitSettings {
            per_gate: config.permits.max(1),
            acquire_timeout: Duration::from_millis(config.permit_timeout_ms),
            lease: Duration::from_millis(config.permit_lease_ms),
        });
        let caps = Capabilities {
            db,
            redis,
            jobs,
            permits,
        };
        let runtime = Runtime::new(Arc::new(caps), limits)?;
        let dir = config.strategy_dir.clone();
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create the strategy directory {}", dir.display()))?;
        let registry = Registry::default();
        registry
            .load_dir(&runtime, &dir)
            .await
            .with_context(|| format!("cannot read {}", dir.display()))?;
        if registry.strategies().is_empty() {
            tracing::warn!(dir = %dir.display(), "no strategy loaded; run `cargo xtask strategies`");
        }
        let watch = config.watch;
        let lab = Lab(Arc::new(LabState {
            config,
            runtime,
            registry,
            recorder: Recorder::default(),
            watcher: OnceLock::new(),
        }));
        if watch {
            let _ = lab
                .watcher
                .set(watcher::watch(&dir, Arc::downgrade(&lab.0))?);
            tracing::info!(dir = %dir.display(), "watching for strategy changes");
        }
        Ok(lab)
    }

    pub fn db(&self) -> &MySqlPool {
        &self.runtime.capabilities().db
    }

    pub fn redis(&self) -> &RedisPools {
        &self.runtime.capabilities().redis
    }
}
