//! What a row says of one of its columns, read alike by both dialects'
//! decoding ([`super::value`] for MySQL and MariaDB, `postgres` for
//! PostgreSQL): its own file, so neither takes it from the other.

use sqlx::{Row, TypeInfo, ValueRef};

/// The declared type of a column's value; `None` when the value is NULL
/// (or cannot be read at all).
pub fn declared_type<R: Row>(row: &R, index: usize) -> Option<String>
where
    usize: sqlx::ColumnIndex<R>,
{
    let raw = row.try_get_raw(index).ok()?;
    (!raw.is_null()).then(|| raw.type_info().name().to_string())
}
