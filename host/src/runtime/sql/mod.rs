//! The `sql` capability: transactions at a chosen isolation level and
//! autocommit statements, over a sqlx pool of MySQL/MariaDB or PostgreSQL.
//!
//! - [`lent`]: every statement runs on a connection lent to the call, which
//!   goes back to the pool only from a state the host knows is clean, and is
//!   closed otherwise; [`orphans`]: the sessions of lost connections, ended
//!   on the server;
//! - [`statement`]: which statements a component may run at all, and the
//!   text sent for them (`tokens`: how each dialect reads a statement);
//! - [`value`]: parameters and rows between WIT and sqlx, and the typed
//!   errors a strategy acts on (`postgres`: PostgreSQL's; `column`: a
//!   column's declared type, which both read);
//! - [`user`]: the database user (or role) components run as, and their
//!   pools;
//! - [`engine`]: which server answers, and what its levels allow;
//!   [`cluster`]: on a Galera node, its cluster, and a 1213 named for what
//!   it may be there;
//!   [`nodes`]: there, the components' SQL on every node, for a call that
//!   names one (a canary's);
//! - [`named_lock`]: `GET_LOCK` (or an advisory lock) on a session the call
//!   holds to its end;
//! - [`transaction`]: the `transaction` resource ([`resource`]: its
//!   representation, which the bindings name).
//!
//! A host call awaits its statements boxed: with a pool's acquire and a
//! statement inside, they are the bulk of its future, which wasmtime moves
//! by value several times a call (`call_futures` keeps each under 1 KB).

#[cfg(test)]
mod call_futures;
pub mod cluster;
mod column;
pub mod engine;
pub mod lent;
pub mod named_lock;
pub mod nodes;
pub mod orphans;
mod postgres;
pub mod resource;
pub mod statement;
mod tokens;
mod transaction;
pub mod user;
mod value;

pub use self::user::SqlArgs;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use wasmtime::component::{HasData, Resource, ResourceTable};

use self::engine::Engine;
use self::lent::{Conn, Lent, Limits};
use self::named_lock::LockSession;
use self::nodes::Nodes;
use self::orphans::Orphans;
use self::resource::{ResultCaps, SqlTransaction};
use self::transaction::{Access, isolation_name, query_on};
use self::value::{answer_lost, execute, to_wit_error, traced_rows};
use super::bindings::sql::{self as wit, ExecResult, IsolationLevel, Rows, SqlError};
use super::call_context::CallContext;
use super::trace::{Pending, Read, statement_shape};
use crate::db_target::{Dialect, Pool};

/// What a `sql` import answers: a trap (a broken handle), or the call's own
/// result for the component.
type Answer<T> = wasmtime::Result<Result<T, SqlError>>;
type Params = Vec<wit::Value>;
type Tx = Resource<SqlTransaction>;

/// The components' pool and what a call may do with it.
pub struct GuestSql {
    pub pool: Pool,
    /// Where named locks' sessions come from; `None`: from `pool`.
    pub lock_pool: Option<Pool>,
    /// How the server cuts the components' statements.
    pub limits: Limits,
    /// The server components' statements run on.
    pub engine: Engine,
    pub args: SqlArgs,
    /// Sessions of lost connections, to be ended on the server.
    pub orphans: Arc<Orphans>,
    /// Calls waiting for a connection now (sqlx does not count them).
    waiting: AtomicI64,
    /// On a Galera cluster, every node, for the calls that name one.
    nodes: Option<Nodes>,
}

impl GuestSql {
    pub fn new(
        pools: (Pool, Option<Pool>),
        (limits, engine): (Limits, Engine),
        args: SqlArgs,
        orphans: Arc<Orphans>,
    ) -> Self {
        let (pool, lock_pool) = pools;
        Self {
            pool,
            lock_pool,
            limits,
            engine,
            args,
            orphans,
            waiting: AtomicI64::new(0),
            nodes: None,
        }
    }

    /// The same, with the cluster's `nodes` for the calls that name one.
    pub fn with_nodes(self, nodes: Option<Nodes>) -> Self {
        Self { nodes, ..self }
    }

    /// The components' SQL for a call on `node` of the cluster; this
    /// host's own node's for a call that names none, or off a cluster.
    pub fn on_node(&self, node: Option<usize>) -> &GuestSql {
        match (node, &self.nodes) {
            (Some(node), Some(nodes)) => nodes.on(node, self),
            _ => self,
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

/// The `sql` and `named-lock` capabilities as the linker knows them: their
/// imports work on a [`SqlView`].
impl HasData for GuestSql {
    type Data<'a> = SqlView<'a>;
}

/// What one call holds of the database, each against its cap.
#[derive(Default)]
pub struct Held {
    transactions: u32,
    /// The session this call's named locks live on, opened on first use;
    /// its locks are released when the store goes.
    lock_session: Option<LockSession>,
}

impl Held {
    /// Whether the call holds no transaction and no lock session, which its
    /// store's end would roll back or release.
    pub fn nothing(&self) -> bool {
        self.transactions == 0 && self.lock_session.is_none()
    }
}

/// What the database reaches of one call: the components' pool, what the
/// call holds of it, its resources, and the call itself.
pub struct SqlView<'a> {
    pub sql: &'a GuestSql,
    pub held: &'a mut Held,
    pub table: &'a mut ResourceTable,
    pub call: &'a mut CallContext,
}

impl SqlView<'_> {
    fn result_caps(&self) -> ResultCaps {
        ResultCaps {
            rows: self.sql.args.max_result_rows,
            bytes: self.sql.args.max_result_bytes,
        }
    }

    /// Starts the trace of a statement, in `tx` when it runs in one.
    fn trace_statement(&self, statement: &str, tx: Option<&Tx>) -> Pending {
        if !self.call.trace.is_recording() {
            return self.call.trace.start("sql", "");
        }
        let (kind, table) = statement_shape(statement);
        let pending = self.call.trace.start("sql", kind);
        let pending = match table {
            Some(table) => pending.target(table),
            None => pending,
        };
        match tx.and_then(|tx| self.table.get(tx).ok()) {
            Some(tx) => pending.in_transaction(tx.traced.0, tx.traced.1),
            None => pending,
        }
    }

    fn trace_answer<T>(
        &mut self,
        pending: Pending,
        answer: &Result<T, SqlError>,
        read: fn(&T) -> Read,
    ) {
        let answer = answer.as_ref().map(read).map_err(|err| format!("{err:?}"));
        self.call.trace.finish(pending, answer);
    }

    /// Runs `run` on the open transaction `tx`, traced as `statement`.
    async fn on_transaction<T>(
        &mut self,
        tx: &Tx,
        statement: &str,
        read: fn(&T) -> Read,
        run: impl AsyncFnOnce(&mut SqlTransaction) -> Result<T, SqlError>,
    ) -> Answer<T> {
        let pending = self.trace_statement(statement, Some(tx));
        let answer = Box::pin(run(self.table.get_mut(tx)?)).await;
        let at_commit = statement == "COMMIT";
        let answer = self.sql.engine.conflict_named(answer, at_commit);
        self.trace_answer(pending, &answer, read);
        Ok(answer)
    }

    async fn begin_transaction(&mut self, isolation: IsolationLevel, access: Access) -> Answer<Tx> {
        let number = self.call.trace.next_transaction();
        let level = isolation_name(isolation, &self.sql.engine);
        let pending = self
            .call
            .trace
            .start("sql", "BEGIN")
            .in_transaction(number, level);
        let cap = self.sql.args.max_transactions_per_call;
        if self.held.transactions >= cap {
            return Ok(Err(SqlError::Refused(format!(
                "this call already holds {cap} open transactions (COUPONLAB_MAX_TRANSACTIONS_PER_CALL)"
            ))));
        }
        let result_caps = self.result_caps();
        let sql = self.sql;
        let begun = Box::pin(SqlTransaction::begin(
            sql,
            sql.limits,
            result_caps,
            self.call.deadline,
            self.call.cleanup.clone(),
            isolation,
            access,
        ))
        .await
        .map(|mut tx| {
            tx.traced.0 = number;
            tx
        });
        self.trace_answer(pending, &begun, |_| Read::default());
        match begun {
            Ok(tx) => {
                self.held.transactions += 1;
                Ok(Ok(self.table.push(tx)?))
            }
            Err(err) => Ok(Err(err)),
        }
    }
}

fn affected(done: &ExecResult) -> Read {
    Read::rows(done.rows_affected)
}

/// One autocommit statement on a connection lent for it alone; `run` is
/// given the text to send for it.
async fn autocommit<T>(
    sql: &GuestSql,
    statement: &str,
    run: impl AsyncFnOnce(&mut Conn, &str) -> Result<T, sqlx::Error>,
) -> Result<T, SqlError> {
    let dialect = sql.pool.dialect();
    let (residue, text) = statement::to_send(statement, dialect).map_err(SqlError::Refused)?;
    let mut lent = sql.lend().await.map_err(to_wit_error)?;
    lent.statement(residue, async |conn| run(conn, &text).await)
        .await
        .map_err(|err| autocommit_failed(statement, dialect, err))
}

/// What the failure of an autocommit statement, once sent, means. It
/// commits as it runs, so when the answer to one that may write was lost,
/// whether it wrote is unknown, as after a lost COMMIT.
fn autocommit_failed(statement: &str, dialect: Dialect, err: sqlx::Error) -> SqlError {
    if answer_lost(&err) && !statement::only_reads(statement, dialect) {
        SqlError::Indeterminate(format!(
            "the statement was sent and its answer lost ({err}); whether it wrote is known once the database answers"
        ))
    } else {
        to_wit_error(err)
    }
}

impl wit::Host for SqlView<'_> {
    #[tracing::instrument(name = "sql.engine", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn engine(&mut self) -> wasmtime::Result<wit::EngineInfo> {
        let engine = &self.sql.engine;
        Ok(wit::EngineInfo {
            name: engine.name.to_string(),
            version: engine.version.clone(),
            settings: engine.settings.clone().into_iter().collect(),
        })
    }

    #[tracing::instrument(name = "sql.begin", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn begin(&mut self, isolation: IsolationLevel) -> Answer<Tx> {
        self.begin_transaction(isolation, Access::ReadWrite).await
    }

    #[tracing::instrument(name = "sql.begin_read_only", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn begin_read_only(&mut self, isolation: IsolationLevel) -> Answer<Tx> {
        self.begin_transaction(isolation, Access::ReadOnly).await
    }

    #[tracing::instrument(name = "sql.query", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn query(&mut self, statement: String, params: Params) -> Answer<Rows> {
        let pending = self.trace_statement(&statement, None);
        let caps = self.result_caps();
        let sql = self.sql;
        let rows = Box::pin(async {
            let mut lent = sql.lend().await.map_err(to_wit_error)?;
            let dialect = lent.dialect();
            query_on(&mut lent, &statement, params, caps, |err| {
                autocommit_failed(&statement, dialect, err)
            })
            .await
        })
        .await;
        let rows = self.sql.engine.conflict_named(rows, false);
        self.trace_answer(pending, &rows, traced_rows);
        Ok(rows)
    }

    #[tracing::instrument(name = "sql.execute", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn execute(&mut self, statement: String, params: Params) -> Answer<ExecResult> {
        let pending = self.trace_statement(&statement, None);
        let done = Box::pin(autocommit(self.sql, &statement, async |conn, text| {
            execute(conn, text, params).await
        }))
        .await;
        let done = self.sql.engine.conflict_named(done, false);
        self.trace_answer(pending, &done, affected);
        Ok(done)
    }
}

impl wit::HostTransaction for SqlView<'_> {
    #[tracing::instrument(name = "sql.transaction.query", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn query(&mut self, tx: Tx, statement: String, params: Params) -> Answer<Rows> {
        self.on_transaction(&tx, &statement, traced_rows, async |tx| {
            tx.query(&statement, params).await
        })
        .await
    }

    #[tracing::instrument(name = "sql.transaction.execute", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn execute(&mut self, tx: Tx, statement: String, params: Params) -> Answer<ExecResult> {
        self.on_transaction(&tx, &statement, affected, async |tx| {
            tx.execute(&statement, params).await
        })
        .await
    }

    #[tracing::instrument(name = "sql.transaction.commit", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn commit(&mut self, tx: Tx) -> Answer<()> {
        let nothing = |_: &()| Read::default();
        self.on_transaction(&tx, "COMMIT", nothing, async |tx| tx.finish("COMMIT").await)
            .await
    }

    #[tracing::instrument(name = "sql.transaction.rollback", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn rollback(&mut self, tx: Tx) -> Answer<()> {
        let nothing = |_: &()| Read::default();
        self.on_transaction(&tx, "ROLLBACK", nothing, async |tx| {
            tx.finish("ROLLBACK").await
        })
        .await
    }

    #[tracing::instrument(name = "sql.transaction.drop", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn drop(&mut self, tx: Tx) -> wasmtime::Result<()> {
        let pending = self.trace_statement("ROLLBACK", Some(&tx));
        let mut tx = self.table.delete(tx)?;
        self.held.transactions = self.held.transactions.saturating_sub(1);
        if tx.lent.is_some() {
            // Rolled back here, awaited, so the next request on this
            // connection never meets the dropped transaction's locks.
            let done = Box::pin(tx.finish("ROLLBACK")).await;
            self.trace_answer(pending, &done, |_| Read::default());
        }
        Ok(())
    }
}
