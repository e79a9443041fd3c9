//! Test fixture: a broken REDIS_LUA (its method name too) that traps when a
//! member asks a second time. Dropped over the real one, the canary must
//! refuse it and leave the real one serving.

use couponlab_sdk::{IssueResult, Outcome, Step, compensate, confirm, reserve, settle};

fn issue(coupon_id: u64, member_id: u64) -> Step<IssueResult> {
    reserve::with_lua(coupon_id, member_id)?;
    Ok(confirm::confirm_or_release(coupon_id, member_id))
}

couponlab_sdk::strategy! {
    struct LuaTrap { method: "REDIS_LUA", claims: [Total, Member, Acked], summary: "REDIS_LUA that traps on a duplicate (test fixture)", reservation_set: true }
    fn issue(request) {
        let result = settle(issue(request.coupon_id, request.member_id));
        assert!(result.outcome != Outcome::Duplicate, "member {} asked twice", request.member_id);
        result
    }
    fn compensate(request) { compensate::release_unless_issued(request.coupon_id, request.member_id) }
}
