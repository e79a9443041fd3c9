//! The `sql` capability: transactions at a chosen isolation level and
//! autocommit statements, over the server's sqlx MySQL pool.

use sqlx::mysql::{MySql, MySqlArguments, MySqlDatabaseError, MySqlPool, MySqlRow};
use sqlx::pool::PoolConnection;
use sqlx::query::Query;
use sqlx::{Column, Executor, Row, TypeInfo, ValueRef};
use wasmtime::component::Resource;

use super::bindings::sql::{self as wit, ExecResult, IsolationLevel, Rows, SqlError};
use super::store::HostState;

/// Whether a transaction may write.
#[derive(Debug, Clone, Copy)]
pub enum Access {
    ReadWrite,
    ReadOnly,
}

/// The host side of the WIT `transaction` resource: one pooled connection
/// inside BEGIN ... COMMIT/ROLLBACK.
pub struct SqlTransaction {
    /// `Some` while the transaction is open.
    conn: Option<PoolConnection<MySql>>,
}

impl SqlTransaction {
    /// Starts a transaction: `SET TRANSACTION ISOLATION LEVEL` applies to the
    /// next transaction of the session only, so both statements travel
    /// together in one round trip on the same connection.
    pub async fn begin(
        pool: &MySqlPool,
        level: IsolationLevel,
        access: Access,
    ) -> Result<Self, SqlError> {
        let mut conn = pool.acquire().await.map_err(to_wit_error)?;
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
        let begin = format!("SET TRANSACTION ISOLATION LEVEL {level}, {access}; BEGIN");
        conn.execute(begin.as_str()).await.map_err(to_wit_error)?;
        Ok(Self { conn: Some(conn) })
    }

    fn open(&mut self) -> Result<&mut PoolConnection<MySql>, SqlError> {
        self.conn.as_mut().ok_or_else(|| {
            SqlError::Other("the transaction is already committed or rolled back".into())
        })
    }

    pub async fn query(
        &mut self,
        statement: &str,
        params: Vec<wit::Value>,
    ) -> Result<Rows, SqlError> {
        let conn = self.open()?;
        let rows = bind(sqlx::query(statement), params)
            .fetch_all(&mut **conn)
            .await
            .map_err(to_wit_error)?;
        Ok(to_rows(&rows))
    }

    pub async fn execute(
        &mut self,
        statement: &str,
        params: Vec<wit::Value>,
    ) -> Result<ExecResult, SqlError> {
        let conn = self.open()?;
        let done = bind(sqlx::query(statement), params)
            .execute(&mut **conn)
            .await
            .map_err(to_wit_error)?;
        Ok(ExecResult {
            rows_affected: done.rows_affected(),
            last_insert_id: done.last_insert_id(),
        })
    }

    /// Ends the transaction with COMMIT or ROLLBACK. The connection goes back
    /// to the pool only if the statement succeeded; otherwise its state is
    /// unknown and it is closed.
    pub async fn finish(&mut self, statement: &'static str) -> Result<(), SqlError> {
        let mut conn = self.conn.take().ok_or_else(|| {
            SqlError::Other("the transaction is already committed or rolled back".into())
        })?;
        match conn.execute(statement).await {
            Ok(_) => Ok(()),
            Err(err) => {
                conn.close_on_drop();
                Err(to_wit_error(err))
            }
        }
    }
}

impl Drop for SqlTransaction {
    /// A transaction still open here belongs to a guest that dropped it, or
    /// whose store was torn down (trap, deadline). Roll it back before the
    /// connection can serve anyone else.
    fn drop(&mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if conn.execute("ROLLBACK").await.is_err() {
                        conn.close_on_drop();
                    }
                });
            }
            // No runtime to run the rollback on: closing the connection makes
            // the server roll back.
            Err(_) => conn.close_on_drop(),
        }
    }
}

fn bind<'q>(
    mut query: Query<'q, MySql, MySqlArguments>,
    params: Vec<wit::Value>,
) -> Query<'q, MySql, MySqlArguments> {
    for param in params {
        query = match param {
            wit::Value::Null => query.bind(None::<i64>),
            wit::Value::Int(v) => query.bind(v),
            wit::Value::Uint(v) => query.bind(v),
            wit::Value::Float(v) => query.bind(v),
            wit::Value::Text(v) => query.bind(v),
            wit::Value::Bytes(v) => query.bind(v),
        };
    }
    query
}

fn to_rows(rows: &[MySqlRow]) -> Rows {
    let columns = rows
        .first()
        .map(|row| row.columns().iter().map(|c| c.name().to_string()).collect())
        .unwrap_or_default();
    let rows = rows
        .iter()
        .map(|row| (0..row.columns().len()).map(|i| to_value(row, i)).collect())
        .collect();
    Rows { columns, rows }
}

/// Decodes one column by its declared type; anything without a closer WIT
/// case (DECIMAL, JSON, ENUM, ...) travels as text.
fn to_value(row: &MySqlRow, index: usize) -> wit::Value {
    let Ok(raw) = row.try_get_raw(index) else {
        return wit::Value::Null;
    };
    if raw.is_null() {
        return wit::Value::Null;
    }
    let type_name = raw.type_info().name().to_string();
    let decoded = match type_name.as_str() {
        "BOOLEAN" | "TINYINT" | "SMALLINT" | "MEDIUMINT" | "INT" | "BIGINT" | "YEAR" => {
            row.try_get_unchecked::<i64, _>(index).map(wit::Value::Int)
        }
        name if name.ends_with("UNSIGNED") => {
            row.try_get_unchecked::<u64, _>(index).map(wit::Value::Uint)
        }
        "FLOAT" | "DOUBLE" => row
            .try_get_unchecked::<f64, _>(index)
            .map(wit::Value::Float),
        "DATETIME" | "TIMESTAMP" => row
            .try_get_unchecked::<chrono::NaiveDateTime, _>(index)
            .map(|t| wit::Value::Text(t.format("%Y-%m-%d %H:%M:%S%.3f").to_string())),
        "DATE" => row
            .try_get_unchecked::<chrono::NaiveDate, _>(index)
            .map(|d| wit::Value::Text(d.to_string())),
        "BINARY" | "VARBINARY" | "BLOB" | "TINYBLOB" | "MEDIUMBLOB" | "LONGBLOB" | "BIT" => row
            .try_get_unchecked::<Vec<u8>, _>(index)
            .map(wit::Value::Bytes),
        _ => row
            .try_get_unchecked::<String, _>(index)
            .map(wit::Value::Text),
    };
    decoded.unwrap_or_else(|err| wit::Value::Text(format!("<undecodable {type_name}: {err}>")))
}

/// MySQL error numbers a strategy acts on.
const ER_DUP_ENTRY: u16 = 1062;
const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;
const ER_LOCK_DEADLOCK: u16 = 1213;
const ER_NO_REFERENCED_ROW_2: u16 = 1452;

pub fn to_wit_error(err: sqlx::Error) -> SqlError {
    let message = err.to_string();
    match &err {
        sqlx::Error::Database(db) => match db
            .try_downcast_ref::<MySqlDatabaseError>()
            .map(|e| e.number())
        {
            Some(ER_LOCK_DEADLOCK) => SqlError::Deadlock(message),
            Some(ER_LOCK_WAIT_TIMEOUT) => SqlError::LockWaitTimeout(message),
            Some(ER_DUP_ENTRY) => SqlError::DuplicateKey(message),
            Some(ER_NO_REFERENCED_ROW_2) => SqlError::ForeignKey(message),
            _ => SqlError::Other(message),
        },
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => {
            SqlError::Connection(format!("the database is unavailable: {message}"))
        }
        _ => SqlError::Other(message),
    }
}

impl HostState {
    async fn begin_transaction(
        &mut self,
        isolation: IsolationLevel,
        access: Access,
    ) -> wasmtime::Result<Result<Resource<SqlTransaction>, SqlError>> {
        match SqlTransaction::begin(&self.caps.db, isolation, access).await {
            Ok(tx) => Ok(Ok(self.table.push(tx)?)),
            Err(err) => Ok(Err(err)),
        }
    }
}

impl wit::Host for HostState {
    async fn begin(
        &mut self,
        isolation: IsolationLevel,
    ) -> wasmtime::Result<Result<Resource<SqlTransaction>, SqlError>> {
        self.begin_transaction(isolation, Access::ReadWrite).await
    }

    async fn begin_read_only(
        &mut self,
        isolation: IsolationLevel,
    ) -> wasmtime::Result<Result<Resource<SqlTransaction>, SqlError>> {
        self.begin_transaction(isolation, Access::ReadOnly).await
    }

    async fn query(
        &mut self,
        statement: String,
        params: Vec<wit::Value>,
    ) -> wasmtime::Result<Result<Rows, SqlError>> {
        let result = bind(sqlx::query(&statement), params)
            .fetch_all(&self.caps.db)
            .await;
        Ok(result.map(|rows| to_rows(&rows)).map_err(to_wit_error))
    }

    async fn execute(
        &mut self,
        statement: String,
        params: Vec<wit::Value>,
    ) -> wasmtime::Result<Result<ExecResult, SqlError>> {
        let result = bind(sqlx::query(&statement), params)
            .execute(&self.caps.db)
            .await;
        Ok(result
            .map(|done| ExecResult {
                rows_affected: done.rows_affected(),
                last_insert_id: done.last_insert_id(),
            })
            .map_err(to_wit_error))
    }
}

impl wit::HostTransaction for HostState {
    async fn query(
        &mut self,
        tx: Resource<SqlTransaction>,
        statement: String,
        params: Vec<wit::Value>,
    ) -> wasmtime::Result<Result<Rows, SqlError>> {
        Ok(self.table.get_mut(&tx)?.query(&statement, params).await)
    }

    async fn execute(
        &mut self,
        tx: Resource<SqlTransaction>,
        statement: String,
        params: Vec<wit::Value>,
    ) -> wasmtime::Result<Result<ExecResult, SqlError>> {
        Ok(self.table.get_mut(&tx)?.execute(&statement, params).await)
    }

    async fn commit(
        &mut self,
        tx: Resource<SqlTransaction>,
    ) -> wasmtime::Result<Result<(), SqlError>> {
        Ok(self.table.get_mut(&tx)?.finish("COMMIT").await)
    }

    async fn rollback(
        &mut self,
        tx: Resource<SqlTransaction>,
    ) -> wasmtime::Result<Result<(), SqlError>> {
        Ok(self.table.get_mut(&tx)?.finish("ROLLBACK").await)
    }

    async fn drop(&mut self, tx: Resource<SqlTransaction>) -> wasmtime::Result<()> {
        let mut tx = self.table.delete(tx)?;
        if tx.conn.is_some() {
            // Roll back here, awaited, so the next request on this connection
            // never sees the dropped transaction's locks.
            let _ = tx.finish("ROLLBACK").await;
        }
        Ok(())
    }
}
