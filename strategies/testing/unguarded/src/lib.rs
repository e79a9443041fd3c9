//! Test fixture TEST_UNGUARDED: claims `total` but checks the stock with a
//! plain read and writes without a lock or a guard, pausing between the two
//! so requests in flight together all see stock left: the canary must
//! refuse it for over-issuing.

use couponlab_sdk::plain_reads::{
    read_coupon, refuse_second_coupon, refuse_when_sold_out, write_issue,
};
use couponlab_sdk::sql::{self, IsolationLevel};
use couponlab_sdk::{IssueResult, Step, clock, settle};

fn issue(coupon_id: u64, member_id: u64) -> Step<IssueResult> {
    let tx = sql::begin(IsolationLevel::ReadCommitted)?;
    let coupon = read_coupon(&tx, coupon_id)?;
    refuse_second_coupon(&tx, coupon_id, member_id)?;
    refuse_when_sold_out(&coupon, coupon_id)?;
    clock::sleep(20);
    write_issue(&tx, coupon_id, member_id)?;
    tx.commit()?;
    Ok(IssueResult::issued())
}

couponlab_sdk::strategy! {
    struct Unguarded { method: "TEST_UNGUARDED", claims: [Total, Member, Acked], summary: "check-then-insert without a lock, claiming the total (test fixture)" }
    fn issue(request) { settle(issue(request.coupon_id, request.member_id)) }
}
