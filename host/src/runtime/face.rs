//! What the roles above the runtime read of its capabilities besides
//! calling components, each through one method of [`Runtime`]: the
//! consumers need the brokers' topology, the queued jobs and whether the
//! components' lost database sessions are ended; the results and the
//! listing the database engine and how often Redis was set up again. Not
//! the capabilities' insides, nor how `Capabilities` gathers them.

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

    /// Times Redis was set up again since the start because it had
    /// forgotten the components' user (a restart, a node back or new).
    pub fn redis_set_ups_again(&self) -> u64 {
        self.caps.redis.set_ups_again()
    }
}
