//! REDIS_SET_ONLY (stage 3): the seed's three checks as three separate
//! commands on the shared connection: SISMEMBER (already reserved?), SCARD
//! (sold out?), SADD (reserve). Other requests run their commands in between,
//! so many can read the same SCARD below the total and all reserve: Redis
//! over-reserves, and only the database guard of the confirm step keeps the
//! total (SOLD_OUT_AT_DB, then SREM).

use couponlab_sdk::{
    IssueResult, Outcome, Step, args, compensate, confirm, coupon, keys, redis, settle,
    unanswered_write,
};

fn issue(coupon_id: u64, member_id: u64) -> Step<IssueResult> {
    let total = coupon::total(coupon_id)?;
    let issued = keys::issued(coupon_id);

    let already_reserved =
        redis::execute("SISMEMBER", &args![issued, member_id])?.expect_int("SISMEMBER")?;
    if already_reserved == 1 {
        return Err(IssueResult::of(Outcome::Duplicate));
    }
    let reserved = redis::execute("SCARD", &args![issued])?.expect_int("SCARD")?;
    if reserved >= total as i64 {
        return Err(IssueResult::of(Outcome::SoldOut));
    }
    // An SADD whose answer was lost may have reserved: settled later.
    let added = redis::execute("SADD", &args![issued, member_id])
        .map_err(unanswered_write)?
        .expect_int("SADD")?;
    if added == 0 {
        // The same member's other request reserved between our SISMEMBER and
        // SADD; the reservation is that request's, not ours to confirm or remove.
        return Err(IssueResult::of(Outcome::Duplicate)
            .detail("reserved by the same member's concurrent request"));
    }
    Ok(confirm::confirm_or_release(coupon_id, member_id))
}

couponlab_sdk::strategy! {
    struct RedisSetOnly { method: "REDIS_SET_ONLY", claims: [Total, Member, Acked], summary: "SISMEMBER, SCARD, SADD as separate commands (not atomic), then the DB confirm step (SREM on failure)", reservation_set: true }
    fn issue(request) { settle(issue(request.coupon_id, request.member_id)) }
    fn compensate(request) { compensate::release_unless_issued(request.coupon_id, request.member_id) }
}
