//! PESSIMISTIC (stage 2): lock the coupon row with `SELECT ... FOR UPDATE`,
//! then check and write while holding the lock. Concurrent requests for the
//! same coupon queue on the row lock, so the checks can trust what they read:
//! never over-issued, one per member, at the price of one request at a time.
//! The member check and the write are stage 1's (`couponlab_sdk::plain_reads`):
//! what changes is only that the row is locked before they run.

use couponlab_sdk::sql::{self, IsolationLevel};
use couponlab_sdk::{IssueResult, Outcome, Step, plain_reads, settle};

fn issue(coupon_id: u64, member_id: u64) -> Step<IssueResult> {
    let tx = sql::begin(IsolationLevel::EngineDefault)?;
    let [total, issued] = plain_reads::coupon_columns(
        &tx,
        "SELECT total_count, issued_count FROM coupons WHERE id = ? FOR UPDATE",
        coupon_id,
    )?;

    // This first plain read takes the transaction's snapshot with the row
    // lock held, so it sees the rows of every request that held it before.
    plain_reads::refuse_second_coupon(&tx, coupon_id, member_id)?;
    if issued >= total {
        return Err(IssueResult::of(Outcome::SoldOut));
    }
    // The unguarded write of stage 1: under the lock, the checks above still hold.
    plain_reads::write_issue(&tx, coupon_id, member_id)?;
    tx.commit()?;
    Ok(IssueResult::issued())
}

couponlab_sdk::strategy! {
    struct Pessimistic { method: "PESSIMISTIC", claims: [Total, Member, Acked], summary: "SELECT ... FOR UPDATE on the coupon row, then check and write under the lock" }
    fn issue(request) { settle(issue(request.coupon_id, request.member_id)) }
}
