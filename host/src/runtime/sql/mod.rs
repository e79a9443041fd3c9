//! The `sql` capability: transactions at a chosen isolation level and
//! autocommit statements, over the server's sqlx MySQL pool.
//!
//! - [`lent`]: every statement runs on a connection lent to the call, which
//!   goes back to the pool only from a state the host knows is clean, and is
//!   closed otherwise; [`orphans`]: the sessions of lost connections, ended
//!   on the server;
//! - [`statement`]: which statements a component may run at all;
//! - [`value`]: parameters and rows between WIT and sqlx, and the typed
//!   errors a strategy acts on;
//! - [`user`]: the database user components run as, and their pools;
//! - [`named_lock`]: `GET_LOCK` on a session the call holds to its end.

pub mod lent;
pub mod named_lock;
pub mod orphans;
pub mod statement;
pub mod user;
mod value;

pub use self::user::SqlArgs;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Instant;

use sqlx::mysql::MySqlPool;
use tokio_util::task::TaskTracker;
use wasmtime::component::Resource;

use self::lent::{Lent, Limits};
use self::orphans::Orphans;
use self::value::{ResultCaps, bind, fetch_capped, to_wit_error};
use super::bindings::sql::{self as wit, ExecResult, IsolationLevel, Rows, SqlError};
use super::store::HostState;

/// What a `sql` import answers: a trap (a broken handle), or the call's own
/// result for the component.
type Answer<T> = wasmtime::Result<Result<T, SqlError>>;
type Params = Vec<wit::Value>;
type Tx = Resource<SqlTransaction>;

/// The components' pool and what a call may do with it.
pub struct GuestSql {
    pub pool: MySqlPool,
    /// Where named locks' sessions come from; `None`: from `pool`.
    pub lock_pool: Option<MySqlPool>,
    /// How the server cuts the components' statements.
    pub limits: Limits,
    pub args: SqlArgs,
    /// Sessions of lost connections, to be ended on the server.
    pub orphans: Arc<Orphans>,
    /// Calls waiting for a connection now (sqlx does not count them).
    waiting: AtomicI64,
}

impl GuestSql {
    pub fn new(
        pools: (MySqlPool, Option<MySqlPool>),
        limits: Limits,
        args: SqlArgs,
        orphans: Arc<Orphans>,
    ) -> Self {
        let (pool, lock_pool) = pools;
        Self {
            pool,
            lock_pool,
            limits,
            args,
            orphans,
            waiting: AtomicI64::new(0),
        }
    }

    /// Calls waiting for a connection of the pool now.
    pub fn waiting(&self) -> i64 {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Lends a connection to a call, counted among the waiting until the
    /// pool hands it over (or the call stops waiting).
    async fn lend(&self) -> Result<Lent, sqlx::Error> {
        struct Waiting<'a>(&'a AtomicI64);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let _waiting = Waiting(&self.waiting);
        Lent::borrow(&self.pool, self.orphans.clone()).await
    }
}

/// Whether a transaction may write.
#[derive(Debug, Clone, Copy)]
pub enum Access {
    ReadWrite,
    ReadOnly,
}

/// The host side of the WIT `transaction` resource: one lent connection
/// inside BEGIN ... COMMIT/ROLLBACK.
pub struct SqlTransaction {
    /// `Some` while the transaction is open.
    lent: Option<Lent>,
    limits: Limits,
    result_caps: ResultCaps,
    /// The call's clean-up tasks: a transaction torn down with its store
    /// rolls back there, and the host waits for it before compensating.
    cleanup: TaskTracker,
}

impl SqlTransaction {
    async fn begin(
        sql: &GuestSql,
        limits: Limits,
        result_caps: ResultCaps,
        deadline: Instant,
        cleanup: TaskTracker,
        level: IsolationLevel,
        access: Access,
    ) -> Result<Self, SqlError> {
        let mut lent = sql.lend().await.map_err(to_wit_error)?;
        let level = match level {
            IsolationLevel::ReadUncommitted => "READ UNCOMMITTED",
            IsolationLevel::ReadCommitted => "READ COMMITTED",
            IsolationLevel::RepeatableRead => "REPEATABLE READ",
            IsolationLevel::Serializable => "SERIALIZABLE",
        };
        let access = match access {
            Access::ReadWrite => "READ WRITE",
            Access::ReadOnly => "READ ONLY",
        };
        lent.begin(
            limits,
            deadline,
            &format!("ISOLATION LEVEL {level}, {access}"),
        )
        .await
        .map_err(to_wit_error)?;
        Ok(Self {
            lent: Some(lent),
            limits,
            result_caps,
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

    async fn query(&mut self, statement: &str, params: Vec<wit::Value>) -> Result<Rows, SqlError> {
        let caps = self.result_caps;
        query_on(self.open()?, statement, params, caps).await
    }

    async fn execute(&mut self, statement: &str, params: Params) -> Result<ExecResult, SqlError> {
        let residue = statement::check(statement).map_err(SqlError::Refused)?;
        let done = self
            .open()?
            .statement(residue, async |conn| {
                bind(sqlx::query(statement), params)
                    .execute(&mut **conn)
                    .await
            })
            .await
            .map_err(to_wit_error)?;
        Ok(ExecResult {
            rows_affected: done.rows_affected(),
            last_insert_id: done.last_insert_id(),
        })
    }

    /// Ends the transaction with COMMIT or ROLLBACK; the connection goes
    /// back to the pool only if that succeeded. A COMMIT whose connection
    /// failed may have committed: its outcome is unknown.
    async fn finish(&mut self, end: &'static str) -> Result<(), SqlError> {
        let mut lent = self.lent.take().ok_or_else(|| {
            SqlError::Other("the transaction is already committed or rolled back".into())
        })?;
        if !lent.usable() {
            // Closed when `lent` drops here: the server rolls back.
            return Err(SqlError::Other(
                "the transaction ended: a refused result left its connection to be closed".into(),
            ));
        }
        lent.finish(self.limits, end)
            .await
            .map_err(|err| match (end, to_wit_error(err)) {
                ("COMMIT", SqlError::Connection(message)) => SqlError::Indeterminate(format!(
                    "the COMMIT was sent and its answer lost ({message}); whether it committed is known once the database answers"
                )),
                (_, err) => err,
            })
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

/// A query on `lent`, its result read within `caps`.
async fn query_on(
    lent: &mut Lent,
    statement: &str,
    params: Params,
    caps: ResultCaps,
) -> Result<Rows, SqlError> {
    let residue = statement::check(statement).map_err(SqlError::Refused)?;
    let read = lent
        .statement(residue, async |conn| {
            fetch_capped(bind(sqlx::query(statement), params), conn, caps).await
        })
        .await
        .map_err(to_wit_error)?;
    read.map_err(|cap| {
        lent.abandon();
        SqlError::Refused(cap)
    })
}

impl HostState {
    fn result_caps(&self) -> ResultCaps {
        ResultCaps {
            rows: self.caps.sql.args.max_result_rows,
            bytes: self.caps.sql.args.max_result_bytes,
        }
    }

    async fn begin_transaction(&mut self, isolation: IsolationLevel, access: Access) -> Answer<Tx> {
        let cap = self.caps.sql.args.max_transactions_per_call;
        if self.open_transactions >= cap {
            return Ok(Err(SqlError::Refused(format!(
                "this call already holds {cap} open transactions (COUPONLAB_MAX_TRANSACTIONS_PER_CALL)"
            ))));
        }
        let result_caps = self.result_caps();
        let sql = &self.caps.sql;
        match SqlTransaction::begin(
            sql,
            sql.limits,
            result_caps,
            self.deadline,
            self.cleanup.clone(),
            isolation,
            access,
        )
        .await
        {
            Ok(tx) => {
                self.open_transactions += 1;
                Ok(Ok(self.table.push(tx)?))
            }
            Err(err) => Ok(Err(err)),
        }
    }
}

/// One autocommit statement on a connection lent for it alone.
async fn autocommit<T>(
    sql: &GuestSql,
    statement: &str,
    run: impl AsyncFnOnce(&mut sqlx::pool::PoolConnection<sqlx::MySql>) -> Result<T, sqlx::Error>,
) -> Result<T, SqlError> {
    let residue = statement::check(statement).map_err(SqlError::Refused)?;
    let mut lent = sql.lend().await.map_err(to_wit_error)?;
    lent.statement(residue, run).await.map_err(to_wit_error)
}

impl wit::Host for HostState {
    #[tracing::instrument(name = "sql.begin", level = "debug", skip_all, fields(method = %self.method))]
    async fn begin(&mut self, isolation: IsolationLevel) -> Answer<Tx> {
        self.begin_transaction(isolation, Access::ReadWrite).await
    }

    #[tracing::instrument(name = "sql.begin_read_only", level = "debug", skip_all, fields(method = %self.method))]
    async fn begin_read_only(&mut self, isolation: IsolationLevel) -> Answer<Tx> {
        self.begin_transaction(isolation, Access::ReadOnly).await
    }

    #[tracing::instrument(name = "sql.query", level = "debug", skip_all, fields(method = %self.method))]
    async fn query(&mut self, statement: String, params: Params) -> Answer<Rows> {
        let caps = self.result_caps();
        let mut lent = match self.caps.sql.lend().await {
            Ok(lent) => lent,
            Err(err) => return Ok(Err(to_wit_error(err))),
        };
        Ok(query_on(&mut lent, &statement, params, caps).await)
    }

    #[tracing::instrument(name = "sql.execute", level = "debug", skip_all, fields(method = %self.method))]
    async fn execute(&mut self, statement: String, params: Params) -> Answer<ExecResult> {
        let done = autocommit(&self.caps.sql, &statement, async |conn| {
            bind(sqlx::query(&statement), params)
                .execute(&mut **conn)
                .await
        })
        .await;
        Ok(done.map(|done| ExecResult {
            rows_affected: done.rows_affected(),
            last_insert_id: done.last_insert_id(),
        }))
    }
}

impl wit::HostTransaction for HostState {
    #[tracing::instrument(name = "sql.transaction.query", level = "debug", skip_all, fields(method = %self.method))]
    async fn query(&mut self, tx: Tx, statement: String, params: Params) -> Answer<Rows> {
        Ok(self.table.get_mut(&tx)?.query(&statement, params).await)
    }

    #[tracing::instrument(name = "sql.transaction.execute", level = "debug", skip_all, fields(method = %self.method))]
    async fn execute(&mut self, tx: Tx, statement: String, params: Params) -> Answer<ExecResult> {
        Ok(self.table.get_mut(&tx)?.execute(&statement, params).await)
    }

    #[tracing::instrument(name = "sql.transaction.commit", level = "debug", skip_all, fields(method = %self.method))]
    async fn commit(&mut self, tx: Tx) -> Answer<()> {
        Ok(self.table.get_mut(&tx)?.finish("COMMIT").await)
    }

    #[tracing::instrument(name = "sql.transaction.rollback", level = "debug", skip_all, fields(method = %self.method))]
    async fn rollback(&mut self, tx: Tx) -> Answer<()> {
        Ok(self.table.get_mut(&tx)?.finish("ROLLBACK").await)
    }

    #[tracing::instrument(name = "sql.transaction.drop", level = "debug", skip_all, fields(method = %self.method))]
    async fn drop(&mut self, tx: Tx) -> wasmtime::Result<()> {
        let mut tx = self.table.delete(tx)?;
        self.open_transactions = self.open_transactions.saturating_sub(1);
        if tx.lent.is_some() {
            // Rolled back here, awaited, so the next request on this
            // connection never meets the dropped transaction's locks.
            let _ = tx.finish("ROLLBACK").await;
        }
        Ok(())
    }
}
