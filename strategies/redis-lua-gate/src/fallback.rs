//! The drop's database path (seed 000's BE-03 fails open to it): a request
//! the gate cannot decide — Redis down, its answer lost, the script
//! refused — or every request while the drop's switch is off is decided by
//! the database alone, keeping both invariants without Redis. In one READ
//! COMMITTED transaction:
//!
//! 1. the guarded decrement, `issued_count < total_count` (no row: sold
//!    out). Its row lock, held to the COMMIT, orders the drop's sales, so
//! 2. the member's rows, counted next, are every committed one, and the
//!    per-member limit is checked against them;
//! 3. the INSERT, whose UNIQUE(coupon_id, member_id) refuses a repeat.
//!
//! The decrement also moves the row's `version` on: the gate's stock, if
//! Redis still has it, no longer counts this sale, and the gate's next
//! confirm finds that out (see `rows.rs`).
//!
//! The request takes a permit like an admitted one: the permits bound what
//! the drop puts on the database, and without the gate every request
//! reaches it.

use couponlab_sdk::redis::RedisError;
use couponlab_sdk::sql::{self, IsolationLevel, SqlError};
use couponlab_sdk::{IssueRequest, IssueResult, Outcome, clock, params};

use crate::couponlab::strategy::permits;
use crate::{GATE, SERVED_BY, bucket, permit_token};

/// Why a request is served by the database.
pub enum Why {
    /// The drop's switch is off.
    Off,
    /// The gate could not answer.
    Unreachable(RedisError),
}

/// Serves `request` by the database alone.
pub fn serve(request: &IssueRequest, key: &str, why: Why) -> IssueResult {
    let (coupon_id, member_id) = (request.coupon_id, request.member_id);
    let (gate, because, lost) = match &why {
        Why::Off => ("OFF", "the drop's gate is switched off".to_string(), false),
        Why::Unreachable(err) => (
            "UNREACHABLE",
            format!("the gate could not answer ({})", err.message()),
            matches!(err, RedisError::Connection(_)),
        ),
    };
    let token = permit_token(coupon_id, key);
    let result = if permits::try_acquire(GATE, &token, None) {
        let started = clock::now_millis();
        let result = sell(coupon_id, member_id);
        let took = clock::now_millis().saturating_sub(started);
        permits::release(GATE, &token);
        result.label("fallbackMs", bucket(took))
    } else {
        IssueResult::of(Outcome::Throttled).detail("no permit was free in time")
    };
    let detail = match &result.detail {
        Some(detail) => format!("{detail}; served by the database: {because}"),
        None => format!("served by the database: {because}"),
    };
    let result = result
        .detail(detail)
        .label("gate", gate)
        .label(SERVED_BY, "fallback");
    // A reserve script whose answer was lost may have reserved. A sale
    // matches that reservation; anything else leaves it stranded, so the
    // host settles the request later and `compensate` gives it back unless
    // the member has a row.
    if lost && !matches!(result.outcome, Outcome::Issued) {
        result.settle_later()
    } else {
        result
    }
}

fn sell(coupon_id: u64, member_id: u64) -> IssueResult {
    match try_sell(coupon_id, member_id) {
        Ok(result) => result,
        // A repeat: the UNIQUE key.
        Err(SqlError::DuplicateKey(_)) => IssueResult::of(Outcome::Duplicate)
            .detail(format!("member {member_id} already has coupon {coupon_id}")),
        Err(SqlError::ForeignKey(_)) => IssueResult::of(Outcome::UnknownMember)
            .detail(format!("member {member_id} does not exist")),
        // The database's failure; a COMMIT whose answer was lost is settled
        // later, from the rows.
        Err(err) => IssueResult::from(err),
    }
}

fn try_sell(coupon_id: u64, member_id: u64) -> Result<IssueResult, SqlError> {
    let tx = sql::begin(IsolationLevel::ReadCommitted)?;
    let updated = tx.execute(
        "UPDATE coupons SET issued_count = issued_count + 1, version = version + 1 \
         WHERE id = ? AND issued_count < total_count",
        &params![coupon_id],
    )?;
    if updated.rows_affected == 0 {
        let found = tx.query("SELECT 1 FROM coupons WHERE id = ?", &params![coupon_id])?;
        tx.rollback()?;
        return Ok(if found.rows.is_empty() {
            IssueResult::of(Outcome::UnknownCoupon)
                .detail(format!("coupon {coupon_id} does not exist"))
        } else {
            IssueResult::of(Outcome::SoldOut).detail(format!("coupon {coupon_id} is sold out"))
        });
    }
    let rows = tx.query(
        "SELECT c.per_member_limit, \
                (SELECT COUNT(*) FROM coupon_issues i WHERE i.coupon_id = c.id AND i.member_id = ?) \
         FROM coupons c WHERE c.id = ?",
        &params![member_id, coupon_id],
    )?;
    let row = rows.rows.first();
    let column = |i: usize| row.and_then(|row| row.get(i)).and_then(sql::int);
    let (limit, held) = (column(0).unwrap_or(1), column(1).unwrap_or(0));
    if held + 1 > limit {
        tx.rollback()?;
        return Ok(IssueResult::of(Outcome::Duplicate).detail(format!(
            "PER_USER_LIMIT_EXCEEDED: member {member_id} already holds as many of coupon {coupon_id} as it may"
        )));
    }
    tx.execute(
        "INSERT INTO coupon_issues (coupon_id, member_id) VALUES (?, ?)",
        &params![coupon_id, member_id],
    )?;
    tx.commit()?;
    Ok(IssueResult::issued())
}
