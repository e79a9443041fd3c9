//! Pooled connections lent to one strategy call, and how they come back.
//!
//! A connection goes back to the pool only from a state the host knows is
//! clean: no statement in flight, no transaction open, no session state a
//! statement left behind. Dropped in any other state — a call cancelled
//! mid-statement, a store torn down by a trap, a COMMIT that failed — it is
//! closed, and the server rolls back whatever it held. sqlx cannot tell on
//! its own: a connection dropped while its `BEGIN` was in flight would
//! otherwise be pinged and pooled inside the transaction.
//!
//! Closing is not enough when the connection was lost (a cut link, a lost
//! answer): the server keeps the session, and its locks, until its own
//! timeouts. A connection closed inside or at the end of a transaction
//! hands the transaction's session to [`Orphans`], which ends it on the
//! server.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::{Executor, MySql, Postgres, Row};

use super::orphans::Orphans;
use super::statement::Residue;
use crate::db_target::{Dialect, Pool};

/// How long before the call's deadline the server ends a statement, and
/// the host stops waiting for a COMMIT.
pub const STATEMENT_MARGIN: Duration = Duration::from_millis(100);

/// How the server cuts a statement that outlives its call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatementLimit {
    /// MariaDB's `max_statement_time`, in seconds: every statement kind.
    MariaDb,
    /// MySQL's `max_execution_time`, in milliseconds: `SELECT` only; other
    /// statements are bounded by the host closing their connection.
    MySql,
    /// PostgreSQL's `statement_timeout`, in milliseconds: every statement.
    Postgres,
}

impl StatementLimit {
    /// `SET SESSION ...` limiting every statement of the session to `limit`
    /// (never 0, which would mean no limit).
    pub fn set(self, limit: Duration) -> String {
        match self {
            StatementLimit::MariaDb => format!(
                "SET SESSION max_statement_time = {:.3}",
                limit.as_secs_f64().max(0.001)
            ),
            StatementLimit::MySql => format!(
                "SET SESSION max_execution_time = {}",
                limit.as_millis().max(1)
            ),
            StatementLimit::Postgres => {
                format!("SET statement_timeout = {}", limit.as_millis().max(1))
            }
        }
    }
}

/// What statements on lent connections are bounded by.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub statement: StatementLimit,
    /// One call's whole budget.
    pub call: Duration,
}

impl Limits {
    /// The session's limit between transactions: a call's budget (less the
    /// margin), which is where an autocommit statement that starts a call
    /// must end. A later one ends at most that long after it started; the
    /// host closes its connection at the call's deadline.
    pub fn session_default(&self) -> String {
        self.statement
            .set(self.call.saturating_sub(STATEMENT_MARGIN))
    }

    /// BEGIN with `characteristics`, its statements cut after `left`, and
    /// the session's id, as one batch. MySQL's `SET TRANSACTION` applies to
    /// the next transaction and its limit to the session, which
    /// [`Lent::finish`] restores; PostgreSQL's `SET LOCAL` lasts to the
    /// transaction's end.
    fn begin(&self, left: Duration, characteristics: &str) -> String {
        match self.statement {
            StatementLimit::Postgres => format!(
                "BEGIN {characteristics}; SET LOCAL statement_timeout = {}; SELECT pg_backend_pid()",
                left.as_millis().max(1)
            ),
            limit => format!(
                "{}; SET TRANSACTION {characteristics}; BEGIN; SELECT CONNECTION_ID()",
                limit.set(left)
            ),
        }
    }

    /// What puts the session's limit back to its default after the
    /// transaction's end, where BEGIN changed it (PostgreSQL's lasts only
    /// the transaction).
    fn restore(&self) -> Option<String> {
        match self.statement {
            StatementLimit::Postgres => None,
            _ => Some(self.session_default()),
        }
    }
}

/// A pooled connection of either engine.
pub enum Conn {
    MySql(PoolConnection<MySql>),
    Postgres(PoolConnection<Postgres>),
}

impl Conn {
    pub fn dialect(&self) -> Dialect {
        match self {
            Conn::MySql(_) => Dialect::MySql,
            Conn::Postgres(_) => Dialect::Postgres,
        }
    }

    /// Runs `batch`, statements without parameters separated by `;`, in one
    /// round trip; the first column of the first row it returns, as a
    /// session id.
    pub async fn batch(&mut self, batch: &str) -> Result<Option<u64>, sqlx::Error> {
        Ok(match self {
            Conn::MySql(conn) => {
                let rows = conn.fetch_all(batch).await?;
                rows.first().and_then(|row| row.try_get::<u64, _>(0).ok())
            }
            Conn::Postgres(conn) => {
                let rows = conn.fetch_all(batch).await?;
                let pid = rows.first().and_then(|row| row.try_get::<i32, _>(0).ok());
                pid.and_then(|pid| u64::try_from(pid).ok())
            }
        })
    }

    fn close_on_drop(&mut self) {
        match self {
            Conn::MySql(conn) => conn.close_on_drop(),
            Conn::Postgres(conn) => conn.close_on_drop(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Idle, autocommit, nothing left behind: may go back to the pool.
    Clean,
    /// Inside BEGIN ... COMMIT/ROLLBACK, idle between statements.
    InTransaction,
    /// A statement or a transaction boundary in flight, or one that failed
    /// in a way that leaves the connection's state unknown.
    Unknown,
}

/// A connection lent to one call.
pub struct Lent {
    conn: Option<Conn>,
    state: State,
    /// A statement left session state (a user variable, a named lock): the
    /// connection is closed when it comes back, whatever its state.
    tainted: bool,
    /// The server's id of the session, read with the last BEGIN.
    session: Option<u64>,
    /// PostgreSQL refused a statement of the open transaction, which it
    /// then rolls back whatever ends it: its COMMIT answers `ROLLBACK`
    /// without an error.
    aborted: bool,
    orphans: Arc<Orphans>,
}

impl Lent {
    pub async fn borrow(pool: &Pool, orphans: Arc<Orphans>) -> Result<Self, sqlx::Error> {
        let conn = match pool {
            Pool::MySql(pool) => Conn::MySql(pool.acquire().await?),
            Pool::Postgres(pool) => Conn::Postgres(pool.acquire().await?),
        };
        Ok(Lent {
            conn: Some(conn),
            state: State::Clean,
            tainted: false,
            session: None,
            aborted: false,
            orphans,
        })
    }

    pub fn dialect(&self) -> Dialect {
        self.conn.as_ref().map_or(Dialect::MySql, Conn::dialect)
    }

    pub fn in_transaction(&self) -> bool {
        self.state == State::InTransaction
    }

    /// The connection was left mid-result (a cap stopped reading): it can
    /// only be closed.
    pub fn abandon(&mut self) {
        self.state = State::Unknown;
    }

    /// Whether the open transaction can only roll back (see `aborted`).
    pub fn aborted(&self) -> bool {
        self.aborted
    }

    /// Whether statements may still run: not after it was abandoned.
    pub fn usable(&self) -> bool {
        self.state != State::Unknown
    }

    /// Runs `run` on the connection. While it is in flight the state is
    /// unknown; afterwards it is `after` on success, `refused` when the
    /// server answered with an error (the connection is still in step), and
    /// unknown on any other error.
    async fn on<T>(
        &mut self,
        after: State,
        refused: State,
        run: impl AsyncFnOnce(&mut Conn) -> Result<T, sqlx::Error>,
    ) -> Result<T, sqlx::Error> {
        let in_transaction = self.state == State::InTransaction;
        self.state = State::Unknown;
        let conn = self.conn.as_mut().ok_or(sqlx::Error::PoolClosed)?;
        let result = run(conn).await;
        self.aborted |= in_transaction
            && matches!(conn, Conn::Postgres(_))
            && matches!(result, Err(sqlx::Error::Database(_)));
        self.state = match &result {
            Ok(_) => after,
            Err(sqlx::Error::Database(_)) => refused,
            Err(_) => State::Unknown,
        };
        result
    }

    /// Runs a component's statement; `residue` is what the check found it
    /// leaves behind.
    pub async fn statement<T>(
        &mut self,
        residue: Residue,
        run: impl AsyncFnOnce(&mut Conn) -> Result<T, sqlx::Error>,
    ) -> Result<T, sqlx::Error> {
        self.tainted |= residue == Residue::Session;
        let keep = self.state;
        self.on(keep, keep, run).await
    }

    /// Reads the session's id, with which the server ends the session if
    /// the connection is lost while it holds something (named locks).
    pub async fn identify(&mut self) -> Result<(), sqlx::Error> {
        let keep = self.state;
        self.session = self
            .on(keep, keep, async |conn| {
                let query = match conn.dialect() {
                    Dialect::MySql => "SELECT CONNECTION_ID()",
                    Dialect::Postgres => "SELECT pg_backend_pid()",
                };
                conn.batch(query).await
            })
            .await?;
        Ok(())
    }

    /// Opens a transaction whose statements the server cuts at `deadline`.
    /// `SET TRANSACTION` applies to the next transaction only, so the
    /// statement limit, the characteristics and BEGIN travel in one round
    /// trip on the same connection, with the session's id, which ends the
    /// session on the server if the connection is lost.
    pub async fn begin(
        &mut self,
        limits: Limits,
        deadline: Instant,
        characteristics: &str,
    ) -> Result<(), sqlx::Error> {
        // The server ends a statement a little before the call's deadline,
        // so the component still hears why and can answer.
        let left = deadline
            .saturating_duration_since(Instant::now())
            .saturating_sub(STATEMENT_MARGIN);
        let begin = limits.begin(left, characteristics);
        self.aborted = false;
        // A refusal part way leaves the session's limit changed: unknown.
        let session = self
            .on(State::InTransaction, State::Unknown, async |conn| {
                conn.batch(&begin).await
            })
            .await?;
        self.session = session;
        Ok(())
    }

    /// COMMIT or ROLLBACK, then the session's statement limit back to its
    /// default. Only a clean end makes the connection reusable; a failed one
    /// leaves it to be closed.
    ///
    /// The end travels alone, so its answer is its own: a Galera node
    /// answers OK to a COMMIT that failed certification followed by another
    /// statement in one batch, reports the failure at that statement, and,
    /// as it is an autocommit one, runs it again (`wsrep_retry_autocommit`)
    /// and answers OK — a client told of a commit that never happened
    /// (docs/learning/19-past-one-node.md).
    pub async fn finish(&mut self, limits: Limits, end: &'static str) -> Result<(), sqlx::Error> {
        // After a refusal, whether the server ended the transaction is not known.
        self.on(State::Clean, State::Unknown, async |conn| {
            conn.batch(end).await.map(drop)
        })
        .await?;
        if let Some(restore) = limits.restore() {
            // The transaction has ended either way: a session whose limit
            // was not restored is closed rather than lent again.
            let _ = self
                .on(State::Clean, State::Unknown, async |conn| {
                    conn.batch(&restore).await.map(drop)
                })
                .await;
        }
        Ok(())
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        if self.state != State::Clean || self.tainted {
            conn.close_on_drop();
        }
        // Closed inside a transaction, or with its end unknown: the session
        // may outlive the connection on the server, locks and all.
        if self.state != State::Clean
            && let Some(session) = self.session
        {
            self.orphans.end(session);
        }
    }
}
