//! REDIS_LUA (stage 3): one EVALSHA decides in Redis, atomically, whether the
//! member already has a reservation, whether stock is left, and reserves.
//! Then the shared confirm step writes the issue in the database; if that
//! fails, the reservation is removed (except on a duplicate key).

use couponlab_sdk::{
    Compensation, Descriptor, IssueRequest, IssueResult, Step, Strategy, compensate, confirm,
    reserve, settle,
};

struct RedisLua;

impl Strategy for RedisLua {
    fn describe() -> Descriptor {
        Descriptor {
            method: "REDIS_LUA".into(),
            summary: "one Lua script reserves atomically in Redis, then the DB confirm step (SREM on failure)".into(),
        }
    }

    fn issue(request: IssueRequest) -> IssueResult {
        settle(issue(request.coupon_id, request.member_id))
    }

    fn compensate(request: IssueRequest) -> Compensation {
        compensate::release_unless_issued(request.coupon_id, request.member_id)
    }
}

fn issue(coupon_id: u64, member_id: u64) -> Step<IssueResult> {
    reserve::with_lua(coupon_id, member_id)?;
    Ok(confirm::confirm_or_release(coupon_id, member_id))
}

couponlab_sdk::export_issuer!(RedisLua);
