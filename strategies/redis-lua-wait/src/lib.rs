//! REDIS_LUA_WAIT: REDIS_LUA whose reservation is on a replica before the
//! database is asked. Redis replicates asynchronously, so a primary that
//! dies right after the EVALSHA takes the reservation with it, and the
//! promoted replica sells that unit again. After the EVALSHA, `WAIT 1
//! <ms>` blocks the lab's connection until one replica acknowledged every
//! write sent on it so far (this reservation among them), or the time
//! passed. No replica in time: the reservation is given back (SREM) and the
//! request answered 503 UNAVAILABLE, as `min-replicas-to-write` would
//! refuse the write. Redis's documentation says what this buys: a lost
//! write less likely, not impossible (a replica that acknowledged may not
//! be the one promoted).
//!
//! A primary with no replica connected (ROLE lists none: one Redis, not a
//! topology) has nobody to wait for, and the method is REDIS_LUA.

use couponlab_sdk::{
    IssueResult, Outcome, Reply, Step, args, compensate, confirm, redis, reserve, settle,
};

/// How long a reservation may wait for a replica's acknowledgement.
const WAIT_MS: u64 = 100;

fn issue(coupon_id: u64, member_id: u64) -> Step<IssueResult> {
    reserve::with_lua(coupon_id, member_id)?;
    if let Err(unreplicated) = on_a_replica() {
        return Ok(confirm::release(coupon_id, member_id, unreplicated));
    }
    Ok(confirm::confirm_or_release(coupon_id, member_id))
}

/// Waits until a replica has every write of the connection, when the
/// primary has one.
fn on_a_replica() -> Step<()> {
    // The primary's ROLE: ["master", offset, [[host, port, offset], ...]].
    let role = redis::execute("ROLE", &[])?;
    let replicas = role
        .as_array()
        .and_then(|role| role.get(2))
        .and_then(Reply::as_array)
        .map_or(0, <[Reply]>::len);
    if replicas == 0 {
        return Ok(());
    }
    let acknowledged = redis::execute("WAIT", &args![1, WAIT_MS])?.expect_int("WAIT")?;
    if acknowledged >= 1 {
        return Ok(());
    }
    Err(IssueResult::of(Outcome::Unavailable).detail(format!(
        "no replica acknowledged the reservation within {WAIT_MS} ms"
    )))
}

couponlab_sdk::strategy! {
    struct RedisLuaWait { method: "REDIS_LUA_WAIT", claims: [Total, Member, Acked], summary: "REDIS_LUA with WAIT 1 100 after the reservation: no replica acknowledged in time → SREM, 503", reservation_set: true }
    fn issue(request) { settle(issue(request.coupon_id, request.member_id)) }
    fn compensate(request) { compensate::release_unless_issued(request.coupon_id, request.member_id) }
}
