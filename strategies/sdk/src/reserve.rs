//! The Lua reservations: one EVALSHA decides duplicate, sold out or
//! reserved, atomically — alone (stage 3, and the first step of stages 4-6)
//! or together with the stream entry that carries the request on (stage 6's
//! atomic variant, stages 9-10).

use crate::bindings::couponlab::strategy::types::{IssueResult, Outcome};
use crate::outcome::Step;
use crate::{args, clock, coupon, keys, redis};

const RESERVE: &str = include_str!("../../../lua/reserve.lua");
const RESERVE_AND_ENQUEUE: &str = include_str!("../../../lua/reserve_and_enqueue.lua");

/// Reserves the coupon for the member in `coupon:issued:{id}`, or ends the
/// request as DUPLICATE or SOLD_OUT.
pub fn with_lua(coupon_id: u64, member_id: u64) -> Step<()> {
    let keys = args![keys::issued(coupon_id), keys::total(coupon_id)];
    decide(coupon_id, RESERVE, &keys, &args![member_id])
}

/// Reserves as [`with_lua`] and, in the same script, XADDs the entry
/// `memberId couponId method acceptedAt` to `stream`: the reservation and
/// its entry exist together or not at all.
pub fn and_enqueue(coupon_id: u64, member_id: u64, stream: &str, method: &str) -> Step<()> {
    let keys = args![keys::issued(coupon_id), keys::total(coupon_id), stream];
    let argv = args![member_id, coupon_id, method, clock::now_millis()];
    decide(coupon_id, RESERVE_AND_ENQUEUE, &keys, &argv)
}

/// Runs a reservation script (reply 1 reserved, 0 sold out, 2 duplicate,
/// -1 no total in Redis).
fn decide(coupon_id: u64, script: &str, keys: &[String], argv: &[String]) -> Step<()> {
    let mut verdict = redis::eval(script, keys, argv)?;
    if verdict.as_int() == Some(-1) {
        // The total is not in Redis: warm it once and decide again.
        coupon::warm_total(coupon_id)?;
        verdict = redis::eval(script, keys, argv)?;
    }
    match verdict.as_int() {
        Some(1) => Ok(()),
        Some(0) => Err(IssueResult::of(Outcome::SoldOut)),
        Some(2) => Err(IssueResult::of(Outcome::Duplicate)),
        _ => Err(IssueResult::of(Outcome::Unavailable)
            .detail(format!("unexpected reservation reply {verdict}"))),
    }
}
