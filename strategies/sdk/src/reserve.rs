//! The Lua reservations: one EVALSHA decides duplicate, sold out or
//! reserved, atomically — alone (stage 3, and the first step of stages 4-6),
//! on one shard of the stock (REDIS_LUA_SHARDED), or together with the
//! stream entry that carries the request on (stage 6's atomic variant,
//! stages 9-10).

use crate::bindings::couponlab::strategy::types::{IssueResult, Outcome};
use crate::keys::shards;
use crate::outcome::{Step, unanswered_write};
use crate::{args, clock, coupon, keys, redis};

const RESERVE: &str = include_str!("../../../lua/reserve.lua");
const RESERVE_AND_ENQUEUE: &str = include_str!("../../../lua/reserve_and_enqueue.lua");

/// Reserves the coupon for the member in `coupon:issued:{id}`, or ends the
/// request as DUPLICATE or SOLD_OUT.
pub fn with_lua(coupon_id: u64, member_id: u64) -> Step<()> {
    let keys = args![keys::issued(coupon_id), keys::total(coupon_id)];
    decide(RESERVE, &keys, &args![member_id], || {
        coupon::warm_total(coupon_id).map(drop)
    })
}

/// Reserves the coupon for the member on the member's shard
/// ([`shards::of`]), or ends the request as DUPLICATE or SOLD_OUT — sold out
/// on that shard, whatever the others have left. The same script as
/// [`with_lua`], given the shard's set and stock instead of the coupon's:
/// one EVALSHA, on keys of one hash tag. Answers the shard.
pub fn on_shard(coupon_id: u64, member_id: u64) -> Step<u32> {
    let shard = shards::of(member_id);
    let keys = args![
        keys::shard_issued(coupon_id, shard),
        keys::shard_stock(coupon_id, shard)
    ];
    decide(RESERVE, &keys, &args![member_id], || split_stock(coupon_id)).map_err(|refused| {
        match refused.outcome {
            Outcome::SoldOut => refused.detail(format!(
                "shard {shard} of coupon {coupon_id} is sold out (its other shards may have stock left)"
            )),
            _ => refused,
        }
    })?;
    Ok(shard)
}

/// Sets every shard's stock from the coupon's total (re-read from the
/// database if Redis lost it), each with SET NX. Concurrent first requests
/// all write the same parts and the first write stays; and since a shard's
/// stock is never decremented (its set counts what it sold), setting it
/// again after that key alone was lost cannot sell a unit twice. Every
/// shard at once, so a shard nobody asked yet shows its stock in the result
/// and in what the load runner counts as still for sale.
fn split_stock(coupon_id: u64) -> Step<()> {
    let total = coupon::total(coupon_id)?;
    for shard in 0..shards::COUNT {
        let key = keys::shard_stock(coupon_id, shard);
        redis::execute("SET", &args![key, shards::stock(total, shard), "NX"])?;
    }
    Ok(())
}

/// Reserves as [`with_lua`] and, in the same script, XADDs the entry
/// `memberId couponId method acceptedAt` to the coupon's `stream`
/// ([`keys::issue_stream`] or [`keys::write_behind_stream`]): the
/// reservation and its entry exist together or not at all. The script's
/// three keys share the coupon's hash tag.
pub fn and_enqueue(
    coupon_id: u64,
    member_id: u64,
    stream: fn(u64) -> String,
    method: &str,
) -> Step<()> {
    let keys = args![
        keys::issued(coupon_id),
        keys::total(coupon_id),
        stream(coupon_id)
    ];
    let argv = args![member_id, coupon_id, method, clock::now_millis()];
    decide(RESERVE_AND_ENQUEUE, &keys, &argv, || {
        coupon::warm_total(coupon_id).map(drop)
    })
}

/// Runs a reservation script (reply 1 reserved, 0 sold out, 2 duplicate,
/// -1 no total in Redis); `warm` sets the total the script reads.
fn decide(
    script: &str,
    keys: &[String],
    argv: &[String],
    warm: impl FnOnce() -> Step<()>,
) -> Step<()> {
    // A script whose answer was lost may have reserved: settled later.
    let mut verdict = redis::eval(script, keys, argv).map_err(unanswered_write)?;
    if verdict.as_int() == Some(-1) {
        // The total is not in Redis: warm it once and decide again.
        warm()?;
        verdict = redis::eval(script, keys, argv).map_err(unanswered_write)?;
    }
    match verdict.as_int() {
        Some(1) => Ok(()),
        Some(0) => Err(IssueResult::of(Outcome::SoldOut)),
        Some(2) => Err(IssueResult::of(Outcome::Duplicate)),
        _ => Err(IssueResult::of(Outcome::Unavailable)
            .detail(format!("unexpected reservation reply {verdict}"))),
    }
}
