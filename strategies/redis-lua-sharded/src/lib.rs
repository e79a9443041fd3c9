//! REDIS_LUA_SHARDED: REDIS_LUA with the coupon's stock split over shards
//! (`keys::shards::COUNT`), each under a hash tag of its own so that on a
//! Redis Cluster one hot coupon's requests spread over several nodes. A
//! member always reserves on the same shard (a fixed hash of its id), so
//! one EVALSHA on that shard decides, atomically: already reserved → the
//! shard sold out → reserve. Then the shared confirm step; if it fails, the
//! reservation is removed from the shard's set (except on a duplicate key).
//!
//! What it teaches is the price: a member whose shard sold out is refused
//! while other shards still have stock — stock stranded where fewer members
//! came, and later arrivals served ahead of earlier ones.

use couponlab_sdk::keys::{self, shards};
use couponlab_sdk::{IssueResult, Step, compensate, confirm, reserve, settle};

fn issue(coupon_id: u64, member_id: u64) -> Step<IssueResult> {
    let shard = reserve::on_shard(coupon_id, member_id)?;
    let set = keys::shard_issued(coupon_id, shard);
    Ok(confirm::confirm_or_release_from(&set, coupon_id, member_id))
}

couponlab_sdk::strategy! {
    struct RedisLuaSharded { method: "REDIS_LUA_SHARDED", claims: [Total, Member, Acked], summary: "the stock split over shards: one Lua script reserves on the member's shard, then the DB confirm step (SREM on failure)" }
    fn issue(request) { settle(issue(request.coupon_id, request.member_id)) }
    fn compensate(request) {
        let set = keys::shard_issued(request.coupon_id, shards::of(request.member_id));
        compensate::release_unless_issued_from(&set, request.coupon_id, request.member_id)
    }
}
