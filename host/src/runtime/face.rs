//! What the roles above the runtime read of its capabilities besides
//! calling components, each through one method of [`Runtime`]: the
//! consumers need the brokers' topology, the queued jobs and whether the
//! components' lost database sessions are ended; the results and the
//! listing the database engine and how often Redis was set up again;
//! `/metrics` the gauges of what the capabilities hold. Not the
//! capabilities' insides, nor how `Capabilities` gathers them.

use std::time::Duration;

use tokio::sync::mpsc;

use super::broker::Topology;
use super::engine::Runtime;
use super::jobs::Job;
use super::loaded::Strategy;
use super::sql::engine::Engine;

impl Runtime {
    /// The lab's queue and streams, as the broker consumers declare and
    /// read them.
    pub fn broker_topology(&self) -> &Topology {
        &self.caps.brokers.topology
    }

    /// The jobs components submit, for the job workers; `None` once taken.
    pub fn take_jobs(&self) -> Option<mpsc::Receiver<Job<Strategy>>> {
        self.caps.jobs.take_receiver()
    }

    /// Waits until every lost session of the components' database user
    /// handed over so far is ended on the server, `limit` at most; whether
    /// none is left. What such a session held is settled only then.
    pub async fn lost_sessions_ended(&self, limit: Duration) -> bool {
        self.caps.sql.orphans.until_none(limit).await
    }

    /// The database server the components' statements run on.
    pub fn sql_engine(&self) -> &Engine {
        &self.caps.sql.engine
    }

    /// Sets the gauges of what the capabilities hold now: the components'
    /// pool (and the named locks' one, when apart) and the calls waiting
    /// for it, the lost sessions left to end, the dedicated Redis
    /// connections in use, the queued jobs and each gate's permits held.
    pub fn set_gauges(&self) {
        let (metrics, sql) = (&self.metrics, &self.caps.sql);
        metrics.set_db_connections("strategies", sql.pool.open_and_idle());
        if let Some(locks) = &sql.lock_pool {
            metrics.set_db_connections("locks", locks.open_and_idle());
        }
        metrics.db_waiting.set(sql.waiting());
        metrics.sql_sessions_to_end.set(sql.orphans.left() as i64);
        metrics
            .redis_dedicated_in_use
            .set(self.caps.redis.dedicated_in_use() as i64);
        metrics.job_queue_depth.set(self.caps.jobs.depth() as i64);
        for (gate, held) in self.caps.permits.held() {
            metrics
                .permits_in_use
                .with_label_values(&[&gate])
                .set(held as i64);
        }
    }

    /// Times Redis was set up again since the start because it had
    /// forgotten the components' user (a restart, a node back or new).
    pub fn redis_set_ups_again(&self) -> u64 {
        self.caps.redis.set_ups_again()
    }
}
