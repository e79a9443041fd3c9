//! The host side of the WIT `transaction` resource: BEGIN at a chosen
//! isolation level on a lent connection, its statements, COMMIT or
//! ROLLBACK, and the rollback of one its store was torn down with.

use std::time::Instant;

use tokio_util::task::TaskTracker;

use super::GuestSql;
use super::engine::Engine;
use super::lent::{Lent, Limits, STATEMENT_MARGIN};
use super::resource::{ResultCaps, SqlTransaction};
use super::statement;
use super::value::{answer_lost, execute, fetch_capped, to_wit_error};
use crate::runtime::bindings::sql::{self as wit, ExecResult, IsolationLevel, Rows, SqlError};

type Params = Vec<wit::Value>;

/// Whether a transaction may write.
#[derive(Debug, Clone, Copy)]
pub enum Access {
    ReadWrite,
    ReadOnly,
}

impl SqlTransaction {
    pub(super) async fn begin(
        sql: &GuestSql,
        limits: Limits,
        result_caps: ResultCaps,
        deadline: Instant,
        cleanup: TaskTracker,
        level: IsolationLevel,
        access: Access,
    ) -> Result<Self, SqlError> {
        let mut lent = sql.lend().await.map_err(to_wit_error)?;
        let access = match access {
            Access::ReadWrite => "READ WRITE",
            Access::ReadOnly => "READ ONLY",
        };
        let characteristics = match level {
            // Left to the session, which has the server's default level.
            IsolationLevel::EngineDefault => access.to_string(),
            _ => format!(
                "ISOLATION LEVEL {}, {access}",
                isolation_name(level, &sql.engine)
            ),
        };
        lent.begin(limits, deadline, &characteristics)
            .await
            .map_err(to_wit_error)?;
        Ok(Self {
            lent: Some(lent),
            traced: (0, isolation_name(level, &sql.engine)),
            limits,
            result_caps,
            deadline,
            cleanup,
        })
    }

    fn open(&mut self) -> Result<&mut Lent, SqlError> {
        match self.lent.as_mut() {
            Some(lent) if lent.usable() => Ok(lent),
            Some(_) => Err(SqlError::Other(
                "the transaction ended: a refused result left its connection to be closed".into(),
            )),
            None => Err(SqlError::Other(
                "the transaction is already committed or rolled back".into(),
            )),
        }
    }

    pub(super) async fn query(
        &mut self,
        statement: &str,
        params: Vec<wit::Value>,
    ) -> Result<Rows, SqlError> {
        let caps = self.result_caps;
        // A transaction's statement never commits by itself: whatever
        // happened to its answer, the server rolls it back.
        query_on(self.open()?, statement, params, caps, to_wit_error).await
    }

    pub(super) async fn execute(
        &mut self,
        statement: &str,
        params: Params,
    ) -> Result<ExecResult, SqlError> {
        let lent = self.open()?;
        let (residue, text) =
            statement::to_send(statement, lent.dialect()).map_err(SqlError::Refused)?;
        lent.statement(residue, async |conn| execute(conn, &text, params).await)
            .await
            .map_err(to_wit_error)
    }

    /// Ends the transaction with COMMIT or ROLLBACK; the connection goes
    /// back to the pool only if that succeeded. A COMMIT whose connection
    /// failed may have committed: its outcome is unknown.
    ///
    /// So is one still unanswered just before the call's deadline, and the
    /// component hears so while it can still answer. No statement limit
    /// ends a COMMIT: on a Galera node it waits for the cluster's
    /// certification as long as a dead or paused node stalls it, and it
    /// commits afterwards whatever became of its session. A call torn down
    /// at its deadline with its COMMIT in flight would be told its
    /// transaction rolled back.
    pub(super) async fn finish(&mut self, end: &'static str) -> Result<(), SqlError> {
        let mut lent = self.lent.take().ok_or_else(|| {
            SqlError::Other("the transaction is already committed or rolled back".into())
        })?;
        if !lent.usable() {
            // Closed when `lent` drops here: the server rolls back.
            return Err(SqlError::Other(
                "the transaction ended: a refused result left its connection to be closed".into(),
            ));
        }
        if end == "COMMIT" && lent.aborted() {
            lent.finish(self.limits, "ROLLBACK")
                .await
                .map_err(to_wit_error)?;
            return Err(SqlError::Other(
                "the transaction was rolled back, not committed: PostgreSQL refused one of its statements, and a PostgreSQL transaction with a refused statement can only roll back".into(),
            ));
        }
        if end != "COMMIT" {
            return lent.finish(self.limits, end).await.map_err(to_wit_error);
        }
        let answer_by = self
            .deadline
            .checked_sub(STATEMENT_MARGIN)
            .unwrap_or(self.deadline);
        // Unanswered by then, `lent` drops mid-COMMIT: its connection is
        // closed and its session ended on the server, which the settling
        // of this outcome waits for.
        match tokio::time::timeout_at(answer_by.into(), lent.finish(self.limits, end)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(err)) if answer_lost(&err) => Err(SqlError::Indeterminate(format!(
                "the COMMIT was sent and its answer lost ({err}); whether it committed is known once the database answers"
            ))),
            Ok(Err(err)) => Err(to_wit_error(err)),
            Err(_) => Err(SqlError::Indeterminate(
                "the COMMIT was sent and not answered by the call's deadline; whether it committed is known once its session is gone".into(),
            )),
        }
    }
}

impl Drop for SqlTransaction {
    /// A transaction still open here belongs to a store torn down by a trap
    /// or a deadline (a guest that drops its handle is rolled back, awaited,
    /// in `HostTransaction::drop`). Idle between statements, it is rolled
    /// back on the call's clean-up tracker; any other state closes the
    /// connection, which makes the server roll back.
    fn drop(&mut self) {
        let Some(mut lent) = self.lent.take() else {
            return;
        };
        if lent.in_transaction() && tokio::runtime::Handle::try_current().is_ok() {
            let limits = self.limits;
            self.cleanup.spawn(async move {
                let _ = lent.finish(limits, "ROLLBACK").await;
            });
        }
    }
}

/// The level a transaction runs at, as the engine's SQL names it.
pub(super) fn isolation_name(level: IsolationLevel, engine: &Engine) -> &'static str {
    match level {
        IsolationLevel::EngineDefault => engine.default_isolation,
        IsolationLevel::ReadUncommitted => "READ UNCOMMITTED",
        IsolationLevel::ReadCommitted => "READ COMMITTED",
        IsolationLevel::RepeatableRead => "REPEATABLE READ",
        IsolationLevel::Serializable => "SERIALIZABLE",
    }
}

/// A query on `lent`, its result read within `caps`; `failed` says what
/// the statement's own failure means.
pub(super) async fn query_on(
    lent: &mut Lent,
    statement: &str,
    params: Params,
    caps: ResultCaps,
    failed: impl FnOnce(sqlx::Error) -> SqlError,
) -> Result<Rows, SqlError> {
    let (residue, text) =
        statement::to_send(statement, lent.dialect()).map_err(SqlError::Refused)?;
    let read = lent
        .statement(residue, async |conn| {
            fetch_capped(conn, &text, params, caps).await
        })
        .await
        .map_err(failed)?;
    read.map_err(|cap| {
        lent.abandon();
        SqlError::Refused(cap)
    })
}
