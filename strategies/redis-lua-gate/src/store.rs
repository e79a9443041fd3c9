//! The limited drop's Redis store (seed 000): its keys, all under
//! `coupon:gate:{couponId}:` so `DELETE /lab/data` clears them, and the three
//! scripts of its contract — reserve, cancel, seed-if-absent.

use couponlab_sdk::bindings::couponlab::strategy::types::SeedAnswer;
use couponlab_sdk::{IssueResult, Outcome, Step, args, keys, redis, unanswered_write};

const RESERVE: &str = include_str!("../../../lua/gate_reserve.lua");
const CANCEL: &str = include_str!("../../../lua/gate_cancel.lua");
const SEED: &str = include_str!("../../../lua/gate_seed.lua");

/// String: coupons one member may hold, copied from the coupon row.
fn limit(coupon_id: u64) -> String {
    format!("{}limit", keys::gate(coupon_id))
}

/// String: coupons the member holds.
fn buyer(coupon_id: u64, member_id: u64) -> String {
    format!("{}buyer:{member_id}", keys::gate(coupon_id))
}

/// String `memberId:quantity`: the reservation made under an idempotency key.
fn reserved(coupon_id: u64, key: &str) -> String {
    format!("{}reserved:{key}", keys::gate(coupon_id))
}

/// What the reserve script decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Admitted,
    AlreadyReserved,
    SoldOut,
    PerUserLimitExceeded,
}

impl Verdict {
    /// The seed's name for it, as the `gate` label the result counts.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Admitted => "ADMITTED",
            Verdict::AlreadyReserved => "ALREADY_RESERVED",
            Verdict::SoldOut => "SOLD_OUT",
            Verdict::PerUserLimitExceeded => "PER_USER_LIMIT_EXCEEDED",
        }
    }
}

/// Runs the reserve script; `None` when the drop is not seeded. A script
/// whose answer was lost may have reserved: the request is settled later.
pub fn reserve(coupon_id: u64, member_id: u64, key: &str, quantity: u32) -> Step<Option<Verdict>> {
    let keys = args![
        keys::gate_remaining(coupon_id),
        limit(coupon_id),
        buyer(coupon_id, member_id),
        reserved(coupon_id, key)
    ];
    let reply =
        redis::eval(RESERVE, &keys, &args![quantity, member_id]).map_err(unanswered_write)?;
    match reply.as_int() {
        Some(1) => Ok(Some(Verdict::Admitted)),
        Some(2) => Ok(Some(Verdict::AlreadyReserved)),
        Some(0) => Ok(Some(Verdict::SoldOut)),
        Some(3) => Ok(Some(Verdict::PerUserLimitExceeded)),
        Some(-1) => Ok(None),
        _ => Err(IssueResult::of(Outcome::Unavailable)
            .detail(format!("unexpected reserve reply {reply}"))),
    }
}

/// What a cancelled reservation gives back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restock {
    /// The unit and the member's count.
    Unit,
    /// Only the member's count: the database had no stock for the unit.
    CountOnly,
}

/// Restores what the reservation under `key` took, if it is `member_id`'s
/// and still there; false when there was nothing to restore.
pub fn cancel(coupon_id: u64, member_id: u64, key: &str, restock: Restock) -> Result<bool, String> {
    let keys = args![
        keys::gate_remaining(coupon_id),
        buyer(coupon_id, member_id),
        reserved(coupon_id, key)
    ];
    let argv = args![member_id, u8::from(restock == Restock::Unit)];
    let reply = redis::eval(CANCEL, &keys, &argv).map_err(redis_failed)?;
    match reply.as_int() {
        Some(restored) => Ok(restored == 1),
        None => Err(format!("unexpected cancel reply {reply}")),
    }
}

/// The member whose reservation `key` is, if there is one.
pub fn reserved_by(coupon_id: u64, key: &str) -> Result<Option<u64>, String> {
    let marker = redis::execute("GET", &args![reserved(coupon_id, key)]).map_err(redis_failed)?;
    Ok(marker
        .as_str()
        .and_then(|marker| marker.split_once(':'))
        .and_then(|(member, _)| member.parse().ok()))
}

/// Seeds the stock and the per-member limit unless the stock is already set.
pub fn seed(
    coupon_id: u64,
    quantity: u64,
    per_member_limit: u64,
    ttl_seconds: u32,
) -> Result<SeedAnswer, String> {
    let keys = args![keys::gate_remaining(coupon_id), limit(coupon_id)];
    let argv = args![quantity, per_member_limit, ttl_seconds];
    let reply = redis::eval(SEED, &keys, &argv).map_err(redis_failed)?;
    match reply.as_array() {
        Some([seeded, left]) => Ok(SeedAnswer {
            seeded: seeded.as_int() == Some(1),
            remaining: left.as_int().unwrap_or(0),
        }),
        _ => Err(format!("unexpected seed reply {reply}")),
    }
}

fn redis_failed(err: redis::RedisError) -> String {
    format!("Redis: {}", err.message())
}
