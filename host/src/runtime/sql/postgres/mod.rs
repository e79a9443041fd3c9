//! PostgreSQL's side of [`super::value`]: parameters and rows between WIT
//! and sqlx, and the SQLSTATEs a strategy acts on, each with its own WIT case.

use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::types::Oid;
use sqlx::postgres::{PgArgumentBuffer, PgArguments, PgDatabaseError, PgRow, PgTypeInfo, Postgres};
use sqlx::query::Query;
use sqlx::{Encode, Row, Type};

use super::column::declared_type;
use crate::runtime::bindings::sql::{self as wit, SqlError};

/// Binds each parameter as the PostgreSQL type closest to its WIT case. An
/// `Int` is an INT8, which PostgreSQL compares with, and assigns to, INT2
/// and INT4 columns (out of range: 22003), but passes to no function taking
/// an INT4 without a cast (`repeat('x', $1)`: 42883). A `Text` is TEXT, which
/// a TIMESTAMP or integer column takes only through a cast (`$1::timestamp`).
///
/// The statement is prepared anew on each run: sqlx keeps a prepared
/// statement by its text alone, with its first run's parameter types, and
/// sends a later run's values as binary for those types, unconverted, so a
/// `Float` where an `Int` had been would be stored as another number.
pub fn bind<'q>(
    query: Query<'q, Postgres, PgArguments>,
    params: Vec<wit::Value>,
) -> Query<'q, Postgres, PgArguments> {
    let mut query = query.persistent(false);
    for param in params {
        query = match param {
            wit::Value::Null => query.bind(UntypedNull),
            wit::Value::Int(v) => query.bind(v),
            wit::Value::Uint(v) => match i64::try_from(v) {
                Ok(v) => query.bind(v),
                Err(_) => query.bind(NumericUint(v)),
            },
            wit::Value::Float(v) => query.bind(v),
            wit::Value::Text(v) => query.bind(v),
            wit::Value::Bytes(v) => query.bind(v),
        };
    }
    query
}

/// A NULL of no declared type, which the server types by its place in the
/// statement: a typed one (INT8, say) could not go into a TIMESTAMP or
/// BYTEA column. A statement that only tests it (`$1 IS NULL`) casts it.
struct UntypedNull;

impl Type<Postgres> for UntypedNull {
    fn type_info() -> PgTypeInfo {
        PgTypeInfo::with_oid(Oid(0))
    }
}

impl Encode<'_, Postgres> for UntypedNull {
    fn encode_by_ref(&self, _: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        Ok(IsNull::Yes)
    }
}

/// A `Uint` above `i64::MAX`, which no PostgreSQL integer holds, as the exact
/// NUMERIC: a NUMERIC column keeps it and an integer one refuses it as out
/// of range, where FLOAT8 would round it and TEXT reach no numeric column.
struct NumericUint(u64);

impl Type<Postgres> for NumericUint {
    fn type_info() -> PgTypeInfo {
        PgTypeInfo::with_oid(Oid(1700)) // NUMERIC's fixed OID
    }
}

impl Encode<'_, Postgres> for NumericUint {
    /// NUMERIC's binary form: its digit count, the weight of its first
    /// digit, its sign (0: positive) and display scale, then its digits in
    /// base 10000, first the most significant.
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        let mut digits = Vec::new();
        let mut rest = self.0;
        while rest > 0 {
            digits.insert(0, (rest % 10_000) as i16);
            rest /= 10_000;
        }
        let count = digits.len() as i16;
        for word in [count, count - 1, 0, 0].into_iter().chain(digits) {
            buf.extend(word.to_be_bytes());
        }
        Ok(IsNull::No)
    }
}

/// Decodes one column by its declared type; anything without a closer WIT
/// case travels as text. A prepared statement's results come in binary, so
/// only a text type reads as text: any other (UUID, JSONB, ...) is
/// `<undecodable ...>` unless the statement casts it (`id::text`).
pub fn to_value(row: &PgRow, index: usize) -> wit::Value {
    let Some(type_name) = declared_type(row, index) else {
        return wit::Value::Null;
    };
    let decoded = match type_name.as_str() {
        "INT2" | "INT4" | "INT8" => row.try_get_unchecked::<i64, _>(index).map(wit::Value::Int),
        "OID" => row
            .try_get_unchecked::<Oid, _>(index)
            .map(|oid| wit::Value::Int(oid.0.into())),
        // As MySQL's BOOLEAN reads.
        "BOOL" => row
            .try_get_unchecked::<bool, _>(index)
            .map(|b| wit::Value::Int(b.into())),
        "FLOAT4" => row
            .try_get_unchecked::<f32, _>(index)
            .map(|f| wit::Value::Float(f.into())),
        "FLOAT8" => row
            .try_get_unchecked::<f64, _>(index)
            .map(wit::Value::Float),
        "NUMERIC" => row
            .try_get_raw(index)
            .and_then(|raw| {
                raw.as_bytes()
                    .and_then(numeric_text)
                    .map_err(sqlx::Error::Decode)
            })
            .map(wit::Value::Text),
        "TIMESTAMP" => row
            .try_get_unchecked::<chrono::NaiveDateTime, _>(index)
            .map(|t| wit::Value::Text(t.format("%Y-%m-%d %H:%M:%S%.3f").to_string())),
        // In UTC, without an offset, as a MySQL DATETIME reads.
        "TIMESTAMPTZ" => row
            .try_get_unchecked::<chrono::DateTime<chrono::Utc>, _>(index)
            .map(|t| wit::Value::Text(t.format("%Y-%m-%d %H:%M:%S%.3f").to_string())),
        "DATE" => row
            .try_get_unchecked::<chrono::NaiveDate, _>(index)
            .map(|d| wit::Value::Text(d.to_string())),
        "BYTEA" => row
            .try_get_unchecked::<Vec<u8>, _>(index)
            .map(wit::Value::Bytes),
        // What a function returning nothing (`SELECT pg_sleep(0)`) gives:
        // an empty value, not a NULL.
        "VOID" => Ok(wit::Value::Null),
        _ => row.try_get::<String, _>(index).map(wit::Value::Text),
    };
    decoded.unwrap_or_else(|err| wit::Value::Text(format!("<undecodable {type_name}: {err}>")))
}

/// NUMERIC's binary form (see [`NumericUint`]) as PostgreSQL writes it:
/// sqlx reads NUMERIC only into `bigdecimal` or `rust_decimal`, which the
/// host does not build.
fn numeric_text(bytes: &[u8]) -> Result<String, BoxDynError> {
    let words: Vec<i16> = bytes
        .chunks_exact(2)
        .map(|word| i16::from_be_bytes([word[0], word[1]]))
        .collect();
    let [_, weight, sign, scale, ref digits @ ..] = words[..] else {
        return Err("a NUMERIC shorter than its header".into());
    };
    let digit = |i: i32| {
        usize::try_from(i)
            .ok()
            .and_then(|i| digits.get(i))
            .map_or(0, |d| *d)
    };
    let mut text = match sign as u16 {
        0xC000 => return Ok("NaN".into()),
        0xD000 => return Ok("Infinity".into()),
        0xF000 => return Ok("-Infinity".into()),
        0x4000 => String::from("-"),
        _ => String::new(),
    };
    let weight = i32::from(weight);
    text += &if weight < 0 { 0 } else { digit(0) }.to_string();
    for i in 1..=weight {
        text += &format!("{:04}", digit(i));
    }
    if scale > 0 {
        let fraction: String = (weight + 1..)
            .take((scale as usize).div_ceil(4))
            .map(|i| format!("{:04}", digit(i)))
            .collect();
        text = text + "." + &fraction[..scale as usize];
    }
    Ok(text)
}

/// SQLSTATEs a strategy acts on.
/// serialization_failure: REPEATABLE READ refusing to update a row changed
/// since its snapshot, or SERIALIZABLE a transaction it cannot order.
const SERIALIZATION_FAILURE: &str = "40001";
/// deadlock_detected
const DEADLOCK_DETECTED: &str = "40P01";
/// lock_not_available: `lock_timeout` expired, or NOWAIT found the lock held.
const LOCK_NOT_AVAILABLE: &str = "55P03";
/// unique_violation
const UNIQUE_VIOLATION: &str = "23505";
/// foreign_key_violation
const FOREIGN_KEY_VIOLATION: &str = "23503";
/// insufficient_privilege: the grants refused the statement.
const INSUFFICIENT_PRIVILEGE: &str = "42501";

pub fn to_wit_error(err: &PgDatabaseError, message: String) -> SqlError {
    match err.code() {
        SERIALIZATION_FAILURE => SqlError::SerializationFailure(message),
        DEADLOCK_DETECTED => SqlError::Deadlock(message),
        LOCK_NOT_AVAILABLE => SqlError::LockWaitTimeout(message),
        UNIQUE_VIOLATION => SqlError::DuplicateKey(message),
        FOREIGN_KEY_VIOLATION => SqlError::ForeignKey(message),
        INSUFFICIENT_PRIVILEGE => {
            SqlError::Refused(format!("the component's database user may not: {message}"))
        }
        // query_canceled (57014), which `statement_timeout` raises, among
        // the rest: MySQL's max_statement_time error is Other too.
        _ => SqlError::Other(message),
    }
}

#[cfg(test)]
mod tests;
