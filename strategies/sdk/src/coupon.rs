//! The coupon: its row as a query found it, and step [0] of every Redis
//! method, its total.

use crate::bindings::couponlab::strategy::types::{IssueResult, Outcome};
use crate::outcome::Step;
use crate::sql::{Rows, Value};
use crate::{args, keys, params, redis, sql};

/// The first row of a query for one coupon by id (its columns are the
/// query's); no row means there is no such coupon: UNKNOWN_COUPON.
pub fn row(rows: &Rows) -> Step<&[Value]> {
    rows.rows
        .first()
        .map(Vec::as_slice)
        .ok_or_else(|| IssueResult::of(Outcome::UnknownCoupon))
}

/// The total from `coupon:total:{id}`; when the key is missing (Redis
/// restarted, keys deleted) it is re-read from the database and set again.
pub fn total(coupon_id: u64) -> Step<u64> {
    let cached = redis::execute("GET", &args![keys::total(coupon_id)])?;
    if let Some(total) = cached.as_int() {
        return Ok(total.max(0) as u64);
    }
    warm_total(coupon_id)
}

/// Reads the total from the database and sets `coupon:total:{id}`.
pub fn warm_total(coupon_id: u64) -> Step<u64> {
    let rows = sql::query(
        "SELECT total_count FROM coupons WHERE id = ?",
        &params![coupon_id],
    )?;
    let total = sql::scalar(&rows).ok_or_else(|| IssueResult::of(Outcome::UnknownCoupon))?;
    redis::execute("SET", &args![keys::total(coupon_id), total])?;
    Ok(total.max(0) as u64)
}
