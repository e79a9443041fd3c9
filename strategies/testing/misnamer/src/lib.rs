//! Test fixture TEST_MISNAMER: REDIS_LUA, except that it tells an unknown
//! member the coupon is sold out: the canary must refuse it.

use couponlab_sdk::{IssueResult, Outcome, Step, compensate, confirm, reserve, settle};

fn issue(coupon_id: u64, member_id: u64) -> Step<IssueResult> {
    reserve::with_lua(coupon_id, member_id)?;
    Ok(confirm::confirm_or_release(coupon_id, member_id))
}

couponlab_sdk::strategy! {
    struct Misnamer { method: "TEST_MISNAMER", claims: [Total, Member, Acked], summary: "answers SOLD_OUT to an unknown member (test fixture)", reservation_set: true }
    fn issue(request) {
        let result = settle(issue(request.coupon_id, request.member_id));
        if result.outcome == Outcome::UnknownMember {
            return IssueResult::of(Outcome::SoldOut);
        }
        result
    }
    fn compensate(request) { compensate::release_unless_issued(request.coupon_id, request.member_id) }
}
