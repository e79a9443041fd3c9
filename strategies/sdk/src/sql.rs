//! Typed wrappers over the `sql` import.

use crate::bindings::couponlab::strategy::sql as wit;

pub use wit::{EngineInfo, ExecResult, IsolationLevel, Rows, SqlError, Transaction, Value};

/// Which database answers: its name, version and the settings that change
/// what its isolation levels allow.
pub fn engine() -> EngineInfo {
    wit::engine()
}

/// Starts a transaction; dropping it uncommitted rolls it back.
pub fn begin(level: IsolationLevel) -> Result<Transaction, SqlError> {
    wit::begin(level)
}

/// Starts a read-only transaction: what a read-only `@Transactional` costs
/// in round trips, with writes refused.
pub fn begin_read_only(level: IsolationLevel) -> Result<Transaction, SqlError> {
    wit::begin_read_only(level)
}

/// One autocommit query outside any transaction.
pub fn query(statement: &str, params: &[Value]) -> Result<Rows, SqlError> {
    wit::query(statement, params)
}

/// One autocommit statement outside any transaction.
pub fn execute(statement: &str, params: &[Value]) -> Result<ExecResult, SqlError> {
    wit::execute(statement, params)
}

/// A Rust value as an SQL parameter (see the `params!` macro).
pub trait ToSql {
    fn to_sql(&self) -> Value;
}

impl ToSql for u64 {
    fn to_sql(&self) -> Value {
        Value::Uint(*self)
    }
}

impl ToSql for u32 {
    fn to_sql(&self) -> Value {
        Value::Uint(u64::from(*self))
    }
}

impl ToSql for i64 {
    fn to_sql(&self) -> Value {
        Value::Int(*self)
    }
}

impl ToSql for &str {
    fn to_sql(&self) -> Value {
        Value::Text(self.to_string())
    }
}

impl ToSql for String {
    fn to_sql(&self) -> Value {
        Value::Text(self.clone())
    }
}

/// A column as an integer, whichever integer case (or text) it came in.
pub fn int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(i) => Some(*i),
        Value::Uint(u) => i64::try_from(*u).ok(),
        Value::Text(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// The first column of the first row as an integer (COUNT(*), a single id, ...).
pub fn scalar(rows: &Rows) -> Option<i64> {
    rows.rows.first()?.first().and_then(int)
}

impl SqlError {
    /// "kind: message", for details and logs.
    pub fn message(&self) -> String {
        let (kind, message) = match self {
            SqlError::Deadlock(m) => ("deadlock", m),
            SqlError::LockWaitTimeout(m) => ("lock wait timeout", m),
            SqlError::SerializationFailure(m) => ("serialization failure", m),
            SqlError::DuplicateKey(m) => ("duplicate key", m),
            SqlError::ForeignKey(m) => ("foreign key", m),
            SqlError::Connection(m) => ("connection", m),
            SqlError::Indeterminate(m) => ("outcome unknown", m),
            SqlError::Refused(m) => ("refused", m),
            SqlError::Other(m) => ("error", m),
        };
        format!("{kind}: {message}")
    }
}
