//! The confirm step every Redis method shares (seed 004, step [2]), and its
//! compensation (step [3]).
//!
//! In its own transaction: INSERT the issue row (UNIQUE(coupon_id,
//! member_id)), then `UPDATE coupons SET issued_count = issued_count + 1
//! WHERE id = ? AND issued_count < total_count`. No row updated means the
//! database has no stock left: SOLD_OUT_AT_DB. The database guard is what
//! keeps the total when a Redis method reserved too many.

use crate::bindings::couponlab::strategy::types::{Confirmation, IssueResult, Outcome};
use crate::sql::{self, IsolationLevel, SqlError, Transaction};
use crate::{args, keys, params, redis};

/// How a confirm ended.
#[derive(Debug)]
pub enum Confirmed {
    Issued,
    SoldOutAtDb,
    /// The member already has the coupon (UNIQUE violation).
    Duplicate,
    /// The member does not exist (foreign key violation).
    UnknownMember,
    Failed(SqlError),
}

/// Writes the issue in the database.
pub fn confirm(coupon_id: u64, member_id: u64) -> Confirmed {
    match try_confirm(coupon_id, member_id) {
        Ok(confirmation) => confirmation,
        Err(SqlError::DuplicateKey(_)) => Confirmed::Duplicate,
        Err(SqlError::ForeignKey(_)) => Confirmed::UnknownMember,
        Err(err) => Confirmed::Failed(err),
    }
}

/// Starts a confirm step: its transaction, with the issue row inserted
/// first, so a member's second row fails on the UNIQUE key before the
/// coupon row is touched. The limited drop's confirm (REDIS_LUA_GATE),
/// whose UPDATE adds the gate's epoch to the guard, starts the same way.
pub fn begin_with_issue_row(coupon_id: u64, member_id: u64) -> Result<Transaction, SqlError> {
    let tx = sql::begin(IsolationLevel::EngineDefault)?;
    tx.execute(
        "INSERT INTO coupon_issues (coupon_id, member_id) VALUES (?, ?)",
        &params![coupon_id, member_id],
    )?;
    Ok(tx)
}

fn try_confirm(coupon_id: u64, member_id: u64) -> Result<Confirmed, SqlError> {
    let tx = begin_with_issue_row(coupon_id, member_id)?;
    let updated = tx.execute(
        "UPDATE coupons SET issued_count = issued_count + 1 WHERE id = ? AND issued_count < total_count",
        &params![coupon_id],
    )?;
    if updated.rows_affected == 0 {
        tx.rollback()?;
        return Ok(Confirmed::SoldOutAtDb);
    }
    tx.commit()?;
    Ok(Confirmed::Issued)
}

/// Confirms a reservation; when the confirm fails, removes the reservation
/// with SREM, except on a duplicate key (the member really has the coupon,
/// so the reservation is right) and when the outcome is unknown (the COMMIT
/// was sent and its answer lost): the reservation then stays until the
/// host settles the request, which reads the database first.
pub fn confirm_or_release(coupon_id: u64, member_id: u64) -> IssueResult {
    confirm_or_release_from(&keys::issued(coupon_id), coupon_id, member_id)
}

/// The same, for a request already answered 202: what became of it.
pub fn confirm_later(coupon_id: u64, member_id: u64) -> Confirmation {
    confirm_or_release(coupon_id, member_id).confirmation(coupon_id, member_id)
}

/// [`confirm_or_release`] for a reservation kept in the set `set` rather
/// than the coupon's (REDIS_LUA_SHARDED's shard sets).
pub fn confirm_or_release_from(set: &str, coupon_id: u64, member_id: u64) -> IssueResult {
    confirm_or_undo(coupon_id, member_id, |failed| {
        release_from(set, member_id, failed)
    })
}

/// Confirms; when the confirm fails (not on a duplicate key, not when the
/// outcome is unknown), answers what `undo` makes of the failure: the
/// method gives back what it reserved its own way.
pub fn confirm_or_undo(
    coupon_id: u64,
    member_id: u64,
    undo: impl FnOnce(IssueResult) -> IssueResult,
) -> IssueResult {
    let result = match confirm(coupon_id, member_id) {
        Confirmed::Issued => return IssueResult::issued(),
        Confirmed::Duplicate => return IssueResult::of(Outcome::Duplicate),
        Confirmed::SoldOutAtDb => IssueResult::of(Outcome::SoldOutAtDb),
        Confirmed::UnknownMember => IssueResult::of(Outcome::UnknownMember),
        Confirmed::Failed(err @ SqlError::Indeterminate(_)) => return IssueResult::from(err),
        Confirmed::Failed(err) => IssueResult::from(err),
    };
    undo(result)
}

/// Removes the member's reservation and counts the compensation. If Redis
/// cannot be reached the reservation stays, the result says so, and the
/// host settles the request later (`compensate` removes it then, unless
/// the member has a row).
pub fn release(coupon_id: u64, member_id: u64, result: IssueResult) -> IssueResult {
    release_from(&keys::issued(coupon_id), member_id, result)
}

fn release_from(set: &str, member_id: u64, result: IssueResult) -> IssueResult {
    match redis::execute("SREM", &args![set, member_id]) {
        Ok(_) => result.compensated(1),
        Err(err) => {
            let detail = format!(
                "{}; the reservation could not be removed ({})",
                result
                    .detail
                    .clone()
                    .unwrap_or_else(|| "confirm failed".into()),
                err.message()
            );
            result.detail(detail).settle_later()
        }
    }
}
