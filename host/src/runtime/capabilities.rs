//! What every capability works through: the server's pools and queues,
//! shared by every call.

use sqlx::MySqlPool;

use super::jobs::JobQueue;
use super::permits::Permits;
use super::redis::GuestRedis;
use super::sql::lent::Limits as SqlLimits;
use crate::config::CallCaps;

/// What every capability works through: the server's pools and queues.
pub struct Capabilities {
    pub db: MySqlPool,
    /// How the server cuts strategy statements.
    pub sql_limits: SqlLimits,
    pub redis: GuestRedis,
    pub jobs: JobQueue,
    pub permits: Permits,
    /// What one call may use.
    pub caps: CallCaps,
}
