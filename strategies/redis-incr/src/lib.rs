//! REDIS_INCR: the Redis counter most engineers reach for before a script.
//! `SADD coupon:issued:{id} member` (0: the member already has one,
//! DUPLICATE), then `INCR coupon:count:{id}`; a count above the total gives
//! both back (the member's reservation and the unit) and answers SOLD_OUT;
//! then the shared confirm step, whose failure gives both back too. Each
//! command is atomic, the sequence is not: in a spike every request INCRs
//! before the refused ones DECR, so the counter overshoots the total while
//! they are in flight (a request arriving then is refused though a unit
//! will come back: stock unsold, members served out of turn). The total
//! holds, because no request passes the INCR with a count above it and the
//! database guards the confirm. A server killed between the INCR and the
//! give-back strands the unit.

use couponlab_sdk::{Compensation, compensate};
use couponlab_sdk::{
    IssueResult, Outcome, Step, args, confirm, coupon, keys, redis, settle, unanswered_write,
};

const GIVE_BACK: &str = include_str!("../../../lua/give_back.lua");

/// Gives back the member's reservation and unit: 1 when there was one.
fn give_back(coupon_id: u64, member_id: u64) -> Result<u32, couponlab_sdk::redis::RedisError> {
    let keys = [keys::issued(coupon_id), keys::count(coupon_id)];
    let given = redis::eval(GIVE_BACK, &keys, &args![member_id])?;
    Ok(u32::from(given.as_int() == Some(1)))
}

fn issue(coupon_id: u64, member_id: u64) -> Step<IssueResult> {
    let total = coupon::total(coupon_id)?;
    let added = redis::execute("SADD", &args![keys::issued(coupon_id), member_id])
        .map_err(unanswered_write)?;
    if added.as_int() == Some(0) {
        return Err(IssueResult::of(Outcome::Duplicate));
    }
    let count = redis::execute("INCR", &args![keys::count(coupon_id)]).map_err(unanswered_write)?;
    if count.as_int().unwrap_or(i64::MAX) > total as i64 {
        let refused = IssueResult::of(Outcome::SoldOut);
        return Err(match give_back(coupon_id, member_id) {
            Ok(given) => refused.compensated(given),
            Err(err) => unanswered_write(err),
        });
    }
    Ok(confirm::confirm_or_undo(
        coupon_id,
        member_id,
        |failed| match give_back(coupon_id, member_id) {
            Ok(given) => failed.compensated(given),
            Err(err) => {
                let detail = format!("the unit could not be given back: {}", err.message());
                failed.detail(detail).settle_later()
            }
        },
    ))
}

/// Gives back the reservation and its unit unless the member has a row.
fn undo(coupon_id: u64, member_id: u64) -> Compensation {
    match compensate::issued(coupon_id, member_id) {
        Ok(true) => Compensation::of(0, "the member's coupon was issued; nothing to give back"),
        Ok(false) => match give_back(coupon_id, member_id) {
            Ok(1) => Compensation::of(1, "the reservation and its unit were given back"),
            Ok(_) => Compensation::of(0, "there was nothing to give back"),
            Err(err) => {
                Compensation::unfinished(0, format!("could not give back: {}", err.message()))
            }
        },
        Err(err) => Compensation::unfinished(
            0,
            format!("the database could not be read: {}", err.message()),
        ),
    }
}

couponlab_sdk::strategy! {
    struct RedisIncr { method: "REDIS_INCR", claims: [Total, Member, Acked], summary: "SADD the member, INCR the counter; above the total give both back (SREM, DECR); then the DB confirm step", reservation_set: true }
    fn issue(request) { settle(issue(request.coupon_id, request.member_id)) }
    fn compensate(request) { undo(request.coupon_id, request.member_id) }
}
