//! Parameters and rows between WIT and sqlx, and the errors a strategy is
//! expected to act on, each with its own WIT case.

use futures::{Stream, TryStreamExt};
use sqlx::mysql::{MySql, MySqlArguments, MySqlDatabaseError, MySqlRow};
use sqlx::postgres::PgDatabaseError;
use sqlx::query::Query;
use sqlx::{Column, Row};

use super::column::declared_type;
use super::lent::Conn;
use super::postgres;
use super::resource::ResultCaps;
use crate::runtime::bindings::sql::{self as wit, ExecResult, Rows, SqlError};
use crate::runtime::trace::Read;

/// Runs a statement, as [`super::statement::to_send`] gives it for the
/// engine, with its parameters on `conn`. PostgreSQL has no last insert id (a component that needs one
/// reads it with `RETURNING`): 0.
pub async fn execute(
    conn: &mut Conn,
    statement: &str,
    params: Vec<wit::Value>,
) -> Result<ExecResult, sqlx::Error> {
    Ok(match conn {
        Conn::MySql(conn) => {
            let done = bind(sqlx::query(statement), params)
                .execute(&mut **conn)
                .await?;
            ExecResult {
                rows_affected: done.rows_affected(),
                last_insert_id: done.last_insert_id(),
            }
        }
        Conn::Postgres(conn) => {
            let done = postgres::bind(sqlx::query(statement), params)
                .execute(&mut **conn)
                .await?;
            ExecResult {
                rows_affected: done.rows_affected(),
                last_insert_id: 0,
            }
        }
    })
}

/// Runs a query with its parameters on `conn`, its result read within
/// `caps` (see [`read_capped`]).
pub async fn fetch_capped(
    conn: &mut Conn,
    statement: &str,
    params: Vec<wit::Value>,
    caps: ResultCaps,
) -> Result<Result<Rows, String>, sqlx::Error> {
    match conn {
        Conn::MySql(conn) => {
            let rows = bind(sqlx::query(statement), params).fetch(&mut **conn);
            read_capped(rows, caps, to_value).await
        }
        Conn::Postgres(conn) => {
            let rows = postgres::bind(sqlx::query(statement), params).fetch(&mut **conn);
            read_capped(rows, caps, postgres::to_value).await
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

/// Reads a result row by row into WIT rows, stopping at the caps:
/// `Ok(Err(why))` when one was reached, the rest of the result left unread
/// on the connection.
async fn read_capped<R: Row>(
    stream: impl Stream<Item = Result<R, sqlx::Error>>,
    caps: ResultCaps,
    to_value: fn(&R, usize) -> wit::Value,
) -> Result<Result<Rows, String>, sqlx::Error> {
    let mut stream = std::pin::pin!(stream);
    let mut rows = Rows {
        columns: Vec::new(),
        rows: Vec::new(),
    };
    let mut bytes = 0;
    while let Some(row) = stream.try_next().await? {
        if rows.rows.is_empty() {
            rows.columns = row.columns().iter().map(|c| c.name().to_string()).collect();
        }
        if rows.rows.len() == caps.rows {
            return Ok(Err(format!(
                "the result has more than {} rows (COUPONLAB_MAX_RESULT_ROWS)",
                caps.rows
            )));
        }
        let values: Vec<wit::Value> = (0..row.columns().len())
            .map(|i| to_value(&row, i))
            .collect();
        bytes += values.iter().map(weight).sum::<usize>();
        if bytes > caps.bytes {
            return Ok(Err(format!(
                "the result is over {} bytes (COUPONLAB_MAX_RESULT_BYTES)",
                caps.bytes
            )));
        }
        rows.rows.push(values);
    }
    Ok(Ok(rows))
}

/// What a trace keeps of a result: its rows, and a single row's integers.
pub fn traced_rows(rows: &Rows) -> Read {
    let first = rows.rows.first().map(Vec::as_slice).unwrap_or_default();
    let integers = rows.columns.iter().zip(first).map(|(name, value)| {
        let value = match value {
            wit::Value::Int(i) => Some(*i),
            wit::Value::Uint(u) => i64::try_from(*u).ok(),
            _ => None,
        };
        (name.as_str(), value)
    });
    Read::result(rows.rows.len(), integers)
}

/// Roughly the bytes a value takes in a WIT row.
fn weight(value: &wit::Value) -> usize {
    16 + match value {
        wit::Value::Text(text) => text.len(),
        wit::Value::Bytes(bytes) => bytes.len(),
        _ => 0,
    }
}

/// Decodes one column by its declared type; anything without a closer WIT
/// case (DECIMAL, JSON, ENUM, ...) travels as text.
fn to_value(row: &MySqlRow, index: usize) -> wit::Value {
    let Some(type_name) = declared_type(row, index) else {
        return wit::Value::Null;
    };
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
/// ER_CHECKREAD: "Record has changed since last read", REPEATABLE READ's
/// refusal of a stale write under `innodb_snapshot_isolation`.
const ER_CHECKREAD: u16 = 1020;
const ER_DUP_ENTRY: u16 = 1062;
const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;
const ER_LOCK_DEADLOCK: u16 = 1213;
const ER_NO_REFERENCED_ROW_2: u16 = 1452;
/// Errors of a privilege the component's database user lacks: the grants
/// refused the statement.
const PRIVILEGE_ERRORS: [u16; 6] = [
    1044, // ER_DBACCESS_DENIED_ERROR
    1045, // ER_ACCESS_DENIED_ERROR
    1142, // ER_TABLEACCESS_DENIED_ERROR
    1143, // ER_COLUMNACCESS_DENIED_ERROR
    1227, // ER_SPECIFIC_ACCESS_DENIED_ERROR
    1370, // ER_PROCACCESS_DENIED_ERROR
];

pub fn to_wit_error(err: sqlx::Error) -> SqlError {
    let message = err.to_string();
    match &err {
        sqlx::Error::Database(db) if let Some(db) = db.try_downcast_ref::<PgDatabaseError>() => {
            postgres::to_wit_error(db, message)
        }
        sqlx::Error::Database(db) => match db
            .try_downcast_ref::<MySqlDatabaseError>()
            .map(|e| e.number())
        {
            Some(ER_LOCK_DEADLOCK) => SqlError::Deadlock(message),
            Some(ER_LOCK_WAIT_TIMEOUT) => SqlError::LockWaitTimeout(message),
            Some(ER_CHECKREAD) => SqlError::SerializationFailure(message),
            Some(ER_DUP_ENTRY) => SqlError::DuplicateKey(message),
            Some(ER_NO_REFERENCED_ROW_2) => SqlError::ForeignKey(message),
            Some(number) if PRIVILEGE_ERRORS.contains(&number) => {
                SqlError::Refused(format!("the component's database user may not: {message}"))
            }
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

/// Whether `err`, raised by a statement a lent connection carried, may
/// have come after the server received the statement: an I/O, TLS or
/// protocol failure loses the answer, not the statement. (The pool's
/// failures come before anything is sent, and never from a lent
/// connection.)
pub fn answer_lost(err: &sqlx::Error) -> bool {
    matches!(
        err,
        sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::WorkerCrashed
    )
}

#[cfg(test)]
mod tests {
    use sqlx::Connection;

    use super::*;
    use wit::Value::{Bytes, Float, Int, Null, Text, Uint};

    /// The MariaDB every test of the repository runs against.
    const SERVER: &str = "mysql://root@127.0.0.1:3306";

    async fn fetch(statement: &str, caps: ResultCaps) -> Result<Rows, String> {
        let mut conn = sqlx::MySqlConnection::connect(SERVER)
            .await
            .expect("MariaDB on 127.0.0.1:3306");
        let rows = bind(sqlx::query(statement), Vec::new()).fetch(&mut conn);
        read_capped(rows, caps, to_value)
            .await
            .expect("the statement runs")
    }

    const ANY: ResultCaps = ResultCaps {
        rows: 100,
        bytes: 1 << 20,
    };

    #[test]
    fn a_broken_connection_loses_the_answer_and_the_pool_sends_nothing() {
        for kind in crate::runtime::BROKEN_CONNECTION {
            assert!(answer_lost(&sqlx::Error::Io(kind.into())), "{kind:?}");
        }
        assert!(answer_lost(&sqlx::Error::Protocol(
            "a packet cut short".into()
        )));
        for sent_nothing in [sqlx::Error::PoolTimedOut, sqlx::Error::PoolClosed] {
            assert!(!answer_lost(&sent_nothing), "{sent_nothing}");
            assert!(matches!(
                to_wit_error(sent_nothing),
                SqlError::Connection(_)
            ));
        }
        assert!(!answer_lost(&sqlx::Error::RowNotFound));
    }

    #[tokio::test]
    async fn each_column_type_becomes_its_wit_case() {
        let rows = fetch(
            "SELECT CAST(-7 AS SIGNED) AS i, CAST(7 AS UNSIGNED) AS u, 1.5e0 AS f, 'x' AS t, \
                    NULL AS n, X'0102' AS b, DATE '2026-01-02' AS d, \
                    TIMESTAMP '2026-01-02 03:04:05.678' AS ts, CAST(1.25 AS DECIMAL(5,2)) AS amount",
            ANY,
        )
        .await
        .unwrap();
        assert_eq!(
            rows.columns,
            ["i", "u", "f", "t", "n", "b", "d", "ts", "amount"]
        );
        assert_eq!(
            rows.rows,
            [vec![
                Int(-7),
                Uint(7),
                Float(1.5),
                Text("x".into()),
                Null,
                Bytes(vec![1, 2]),
                Text("2026-01-02".into()),
                Text("2026-01-02 03:04:05.678".into()),
                Text("1.25".into()),
            ]]
        );
    }

    #[tokio::test]
    async fn a_result_past_its_caps_is_refused() {
        let three_rows = "SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3";
        let rows = fetch(three_rows, ResultCaps { rows: 2, ..ANY }).await;
        assert!(rows.unwrap_err().contains("more than 2 rows"));
        let wide = fetch(
            "SELECT REPEAT('x', 2000)",
            ResultCaps { bytes: 1000, ..ANY },
        )
        .await;
        assert!(wide.unwrap_err().contains("over 1000 bytes"));
        assert_eq!(fetch(three_rows, ANY).await.unwrap().rows.len(), 3);
    }
}
