//! REDIS_LUA (stage 3): one EVALSHA decides in Redis, atomically, whether the
//! member already has a reservation, whether stock is left, and reserves.
//! Then the shared confirm step writes the issue in the database; if that
//! fails, the reservation is removed (except on a duplicate key).

use couponlab_sdk::{IssueResult, Step, compensate, confirm, reserve, settle};

fn issue(coupon_id: u64, member_id: u64) -> Step<IssueResult> {
    reserve::with_lua(coupon_id, member_id)?;
    Ok(confirm::confirm_or_release(coupon_id, member_id))
}

couponlab_sdk::strategy! {
    struct RedisLua { method: "REDIS_LUA", claims: [Total, Member, Acked], summary: "one Lua script reserves atomically in Redis, then the DB confirm step (SREM on failure)", reservation_set: true }
    fn issue(request) { settle(issue(request.coupon_id, request.member_id)) }
    fn compensate(request) { compensate::release_unless_issued(request.coupon_id, request.member_id) }
}
