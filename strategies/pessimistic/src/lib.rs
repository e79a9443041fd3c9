//! PESSIMISTIC (stage 2): lock the coupon row with `SELECT ... FOR UPDATE`,
//! then check and write while holding the lock. Concurrent requests for the
//! same coupon queue on the row lock, so the checks can trust what they read:
//! never over-issued, one per member, at the price of one request at a time.

use couponlab_sdk::sql::{self, IsolationLevel};
use couponlab_sdk::{IssueResult, Outcome, Step, compensate, params, settle};

fn issue(coupon_id: u64, member_id: u64) -> Step<IssueResult> {
    let tx = sql::begin(IsolationLevel::RepeatableRead)?;
    let coupon = tx.query(
        "SELECT total_count, issued_count FROM coupons WHERE id = ? FOR UPDATE",
        &params![coupon_id],
    )?;
    let Some(row) = coupon.rows.first() else {
        return Err(IssueResult::of(Outcome::UnknownCoupon));
    };
    let (total, issued) = (
        sql::int(&row[0]).unwrap_or(0),
        sql::int(&row[1]).unwrap_or(0),
    );

    let held = tx.query(
        "SELECT COUNT(*) FROM coupon_issues WHERE coupon_id = ? AND member_id = ?",
        &params![coupon_id, member_id],
    )?;
    if sql::scalar(&held).unwrap_or(0) > 0 {
        return Err(IssueResult::of(Outcome::Duplicate));
    }
    if issued >= total {
        return Err(IssueResult::of(Outcome::SoldOut));
    }
    tx.execute(
        "INSERT INTO coupon_issues (coupon_id, member_id) VALUES (?, ?)",
        &params![coupon_id, member_id],
    )?;
    tx.execute(
        "UPDATE coupons SET issued_count = issued_count + 1 WHERE id = ?",
        &params![coupon_id],
    )?;
    tx.commit()?;
    Ok(IssueResult::issued())
}

couponlab_sdk::strategy! {
    struct Pessimistic { method: "PESSIMISTIC", summary: "SELECT ... FOR UPDATE on the coupon row, then check and write under the lock" }
    fn issue(request) { settle(issue(request.coupon_id, request.member_id)) }
    fn compensate(_request) { compensate::nothing() }
}
