//! The representation of the WIT `connection` resource, the type the
//! bindings' `with:` maps it to, with the pool and the state it is made
//! of. Only their definitions live here, taking nothing from the bindings,
//! so the bindings take from no file that takes from them; what they do is
//! in [`super::dedicated`].

use std::sync::Arc;

use parking_lot::Mutex;
use redis::cluster_routing::Route;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::redis_target::{RedisConn, RedisTarget};

/// Dedicated connections: at most `permits` exist at once; returned ones idle
/// here for the next borrower.
pub(super) struct DedicatedPool {
    pub(super) target: RedisTarget,
    pub(super) permits: Arc<Semaphore>,
    pub(super) idle: Mutex<Vec<RedisConn>>,
}

/// What a guest left on a dedicated connection, so it can be undone before
/// the connection serves another request.
#[derive(Default)]
pub(super) struct ConnectionState {
    pub(super) in_multi: bool,
    pub(super) watching: bool,
    /// Broken, or with a command in flight: its state is unknown.
    pub(super) broken: bool,
}

/// The host side of the WIT `connection` resource. Dropped without
/// `release` (its store torn down by a trap or a deadline), the connection
/// is closed, not pooled.
pub struct RedisConnection {
    /// `None` once released.
    pub(super) conn: Option<RedisConn>,
    /// On a cluster, the node this connection's commands go to, once a
    /// command named a key.
    pub(super) node: Option<Route>,
    /// On a cluster, a MULTI sent before any command named a key: held
    /// until the transaction's first key tells the node, then sent ahead of
    /// it (sent at once, it would open a transaction on some other node).
    pub(super) held_multi: bool,
    pub(super) state: ConnectionState,
    pub(super) pool: Arc<DedicatedPool>,
    /// Held for as long as the connection is borrowed; dropping it (also when
    /// a trapped guest's store is torn down) frees the slot.
    pub(super) _permit: OwnedSemaphorePermit,
}
