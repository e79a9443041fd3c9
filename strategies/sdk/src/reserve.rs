//! The REDIS_LUA reservation: one EVALSHA decides duplicate, sold out or
//! reserved, atomically (stage 3, and the first step of stages 4-6).

use crate::bindings::couponlab::strategy::types::{IssueResult, Outcome};
use crate::outcome::Step;
use crate::{args, coupon, keys, redis};

const RESERVE: &str = include_str!("../../../lua/reserve.lua");

/// Reserves the coupon for the member in `coupon:issued:{id}`, or ends the
/// request as DUPLICATE or SOLD_OUT.
pub fn with_lua(coupon_id: u64, member_id: u64) -> Step<()> {
    let keys = args![keys::issued(coupon_id), keys::total(coupon_id)];
    let member = args![member_id];
    let mut verdict = redis::eval(RESERVE, &keys, &member)?;
    if verdict.as_int() == Some(-1) {
        // The total is not in Redis: warm it once and decide again.
        coupon::warm_total(coupon_id)?;
        verdict = redis::eval(RESERVE, &keys, &member)?;
    }
    match verdict.as_int() {
        Some(1) => Ok(()),
        Some(0) => Err(IssueResult::of(Outcome::SoldOut)),
        Some(2) => Err(IssueResult::of(Outcome::Duplicate)),
        _ => Err(IssueResult::of(Outcome::Unavailable)
            .detail(format!("unexpected reservation reply {verdict}"))),
    }
}
