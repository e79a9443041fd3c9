//! The representation of the WIT `transaction` resource, the type the
//! bindings' `with:` maps it to. Only its definition lives here, with what
//! it is made of, so the bindings take from a file that takes nothing from
//! them; its methods are in [`super::transaction`].

use std::time::Instant;

use tokio_util::task::TaskTracker;

use super::lent::{Lent, Limits};

/// How much of a result one statement may return.
#[derive(Debug, Clone, Copy)]
pub struct ResultCaps {
    pub rows: usize,
    pub bytes: usize,
}

/// The host side of the WIT `transaction` resource: one lent connection
/// inside BEGIN ... COMMIT/ROLLBACK.
pub struct SqlTransaction {
    /// `Some` while the transaction is open.
    pub(super) lent: Option<Lent>,
    /// Which of its call's transactions it is, and its isolation level, as
    /// its statements' traces say.
    pub(super) traced: (u32, &'static str),
    pub(super) limits: Limits,
    pub(super) result_caps: ResultCaps,
    /// The call's deadline.
    pub(super) deadline: Instant,
    /// The call's clean-up tasks: a transaction torn down with its store
    /// rolls back there, and the host waits for it before compensating.
    pub(super) cleanup: TaskTracker,
}
