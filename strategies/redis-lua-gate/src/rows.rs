//! The drop's database side: the confirm step of an admitted reservation,
//! and the revocation a cancel makes.
//!
//! **The epoch.** The gate's stock is counted from the rows at one version
//! of the coupon row (`coupons.version`), kept with the stock. Every sale
//! the gate does not make moves the version on — the database path bumps
//! it, and so does setting the gate again — while the gate's own confirms
//! leave it alone. So a confirm guarded by `version = epoch` costs nothing
//! while the gate is the truth, and fails exactly when the stock is not: a
//! sale was made without the gate (Redis was down, the switch was off), or
//! the gate was set again from the rows after this request reserved.

use couponlab_sdk::confirm::begin_with_issue_row;
use couponlab_sdk::params;
use couponlab_sdk::sql::{self, IsolationLevel, SqlError};

/// How a confirm ended.
#[derive(Debug)]
pub enum Confirmed {
    /// Issued, and the gate is the truth.
    Issued,
    /// Issued, but the coupon row was at this version, not the gate's
    /// epoch: the gate must be brought up to it (`store::settle`).
    IssuedPastEpoch(i64),
    /// The coupon has no stock left; the row's version, which when it is
    /// not the gate's epoch says the gate sold what the database no longer
    /// has.
    SoldOutAtDb(i64),
    /// The member already has the coupon (UNIQUE violation).
    Duplicate,
    /// The member does not exist (foreign key violation).
    UnknownMember,
    Failed(SqlError),
}

/// Writes the issue in the database: the confirm step every Redis method
/// shares, with the gate's epoch in its guard.
pub fn confirm(coupon_id: u64, member_id: u64, epoch: i64) -> Confirmed {
    match try_confirm(coupon_id, member_id, epoch) {
        Ok(confirmation) => confirmation,
        Err(SqlError::DuplicateKey(_)) => Confirmed::Duplicate,
        Err(SqlError::ForeignKey(_)) => Confirmed::UnknownMember,
        Err(err) => Confirmed::Failed(err),
    }
}

fn try_confirm(coupon_id: u64, member_id: u64, epoch: i64) -> Result<Confirmed, SqlError> {
    let tx = begin_with_issue_row(coupon_id, member_id)?;
    let updated = tx.execute(
        "UPDATE coupons SET issued_count = issued_count + 1 \
         WHERE id = ? AND issued_count < total_count AND version = ?",
        &params![coupon_id, epoch],
    )?;
    if updated.rows_affected == 1 {
        tx.commit()?;
        return Ok(Confirmed::Issued);
    }
    // Sold out, or the row moved past the gate: the database decides the
    // sale alone, as it does for the database path.
    let updated = tx.execute(
        "UPDATE coupons SET issued_count = issued_count + 1 \
         WHERE id = ? AND issued_count < total_count",
        &params![coupon_id],
    )?;
    // Read under the row lock the UPDATE holds to the COMMIT: no setting of
    // the gate and no other sale comes between this version and this sale.
    let rows = tx.query(
        "SELECT version FROM coupons WHERE id = ? FOR UPDATE",
        &params![coupon_id],
    )?;
    let version = sql::scalar(&rows).unwrap_or(-1);
    if updated.rows_affected == 0 {
        tx.rollback()?;
        return Ok(Confirmed::SoldOutAtDb(version));
    }
    tx.commit()?;
    Ok(Confirmed::IssuedPastEpoch(version))
}

/// Deletes the member's issue row and gives its unit back to the coupon.
/// READ COMMITTED: a DELETE that finds no row takes no gap lock, so it never
/// blocks confirms inserting next to it. The version stays: the cancel
/// gives the unit back to the gate's stock itself.
pub fn revoke_issue(coupon_id: u64, member_id: u64) -> Result<(), SqlError> {
    let tx = sql::begin(IsolationLevel::ReadCommitted)?;
    let deleted = tx.execute(
        "DELETE FROM coupon_issues WHERE coupon_id = ? AND member_id = ?",
        &params![coupon_id, member_id],
    )?;
    if deleted.rows_affected > 0 {
        tx.execute(
            "UPDATE coupons SET issued_count = issued_count - 1 WHERE id = ? AND issued_count > 0",
            &params![coupon_id],
        )?;
    }
    tx.commit()
}
