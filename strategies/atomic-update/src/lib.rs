//! ATOMIC_UPDATE: the conditional UPDATE most engineers reach for first. In
//! one READ COMMITTED transaction, `UPDATE coupons SET issued_count =
//! issued_count + 1 WHERE id = ? AND issued_count < total_count` decides
//! the stock in the database itself (0 rows: sold out, or no such coupon),
//! then the INSERT of the issue row (a duplicate key: the member already has
//! one, and the rollback gives the unit back). No explicit lock, no Redis:
//! the UPDATE's row lock, held to the COMMIT, is the lock — requests for one
//! coupon commit one at a time, like PESSIMISTIC, with one statement fewer
//! and no read before the write.

use couponlab_sdk::plain_reads::insert_issue;
use couponlab_sdk::sql::{self, IsolationLevel};
use couponlab_sdk::{IssueResult, Outcome, Step, coupon, params, settle};

fn issue(coupon_id: u64, member_id: u64) -> Step<IssueResult> {
    let tx = sql::begin(IsolationLevel::ReadCommitted)?;
    let updated = tx.execute(
        "UPDATE coupons SET issued_count = issued_count + 1 WHERE id = ? AND issued_count < total_count",
        &params![coupon_id],
    )?;
    if updated.rows_affected == 0 {
        // Sold out, or no such coupon: the row says which.
        let found = tx.query(
            "SELECT total_count FROM coupons WHERE id = ?",
            &params![coupon_id],
        )?;
        coupon::row(&found)?;
        return Err(IssueResult::of(Outcome::SoldOut));
    }
    insert_issue(&tx, coupon_id, member_id)?;
    tx.commit()?;
    Ok(IssueResult::issued())
}

couponlab_sdk::strategy! {
    struct AtomicUpdate { method: "ATOMIC_UPDATE", claims: [Total, Member, Acked], summary: "one conditional UPDATE takes a unit (issued_count < total_count), then the INSERT; a duplicate rolls both back" }
    fn issue(request) { settle(issue(request.coupon_id, request.member_id)) }
}
