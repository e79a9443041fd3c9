//! The limited drop's Redis store (seed 000): its keys, all under
//! `coupon:gate:{couponId}:` so `DELETE /lab/data` clears them, and the
//! scripts of its contract — reserve, cancel, seed-if-absent — with the two
//! that set the gate from the rows (the buyers' counts) and bring it up to
//! a sale it did not see.

use couponlab_sdk::bindings::couponlab::strategy::types::SeedAnswer;
use couponlab_sdk::redis::RedisError;
use couponlab_sdk::{args, keys, redis};

const RESERVE: &str = include_str!("../../../lua/gate_reserve.lua");
const CANCEL: &str = include_str!("../../../lua/gate_cancel.lua");
const SEED: &str = include_str!("../../../lua/gate_seed.lua");
const BUYERS: &str = include_str!("../../../lua/gate_buyers.lua");
const SETTLE: &str = include_str!("../../../lua/gate_settle.lua");
const REBUILD: &str = include_str!("../../../lua/gate_rebuild.lua");

/// String: coupons one member may hold, copied from the coupon row.
fn limit(coupon_id: u64) -> String {
    format!("{}limit", keys::gate(coupon_id))
}

/// String: the coupon row's `version` when the stock was counted. A sale
/// the gate did not make moves the version on (see `rows.rs`).
fn epoch(coupon_id: u64) -> String {
    format!("{}epoch", keys::gate(coupon_id))
}

/// String: coupons the member holds.
fn buyer(coupon_id: u64, member_id: u64) -> String {
    format!("{}buyer:{member_id}", keys::gate(coupon_id))
}

/// String `memberId:quantity`: the reservation made under an idempotency key.
fn reserved(coupon_id: u64, key: &str) -> String {
    format!("{}reserved:{key}", keys::gate(coupon_id))
}

/// The stock's keys, `KEYS[1..3]` of the scripts that set it and bring it
/// up to date: the units left, the per-member limit, the epoch.
fn stock(coupon_id: u64) -> Vec<String> {
    args![
        keys::gate_remaining(coupon_id),
        limit(coupon_id),
        epoch(coupon_id)
    ]
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

/// What the reserve script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reserved {
    /// The gate's verdict, and the version its stock was set at.
    Decided { verdict: Verdict, epoch: i64 },
    /// The drop is not seeded: never, expired, emptied, or dropped.
    Unseeded,
    /// The drop's switch is off.
    Off,
}

/// Runs the reserve script. An error means the gate could not decide; if
/// the connection failed, the script may have reserved all the same.
pub fn reserve(
    coupon_id: u64,
    member_id: u64,
    key: &str,
    quantity: u32,
) -> Result<Reserved, RedisError> {
    let keys = args![
        keys::gate_remaining(coupon_id),
        limit(coupon_id),
        buyer(coupon_id, member_id),
        reserved(coupon_id, key),
        epoch(coupon_id),
        keys::gate_switch(coupon_id)
    ];
    let reply = redis::eval(RESERVE, &keys, &args![quantity, member_id])?;
    let (code, epoch) = match reply.as_array() {
        Some([code, epoch]) => (code.as_int(), epoch.as_int().unwrap_or(0)),
        _ => (None, 0),
    };
    let verdict = match code {
        Some(1) => Verdict::Admitted,
        Some(2) => Verdict::AlreadyReserved,
        Some(0) => Verdict::SoldOut,
        Some(3) => Verdict::PerUserLimitExceeded,
        Some(-1) => return Ok(Reserved::Unseeded),
        Some(-2) => return Ok(Reserved::Off),
        _ => {
            return Err(RedisError::Server(format!(
                "unexpected reserve reply {reply}"
            )));
        }
    };
    Ok(Reserved::Decided { verdict, epoch })
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

/// The stock left if the drop is seeded, `None` if it is not.
pub fn seeded(coupon_id: u64) -> Result<Option<i64>, RedisError> {
    let reply = redis::execute(
        "MGET",
        &args![epoch(coupon_id), keys::gate_remaining(coupon_id)],
    )?;
    Ok(match reply.as_array() {
        Some([epoch, remaining]) if !epoch.is_nil() => Some(remaining.as_int().unwrap_or(0)),
        _ => None,
    })
}

/// The counts the gate holds for `members`, in order (0 for a count it
/// does not hold).
pub fn buyer_counts(coupon_id: u64, members: &[u64]) -> Result<Vec<i64>, RedisError> {
    if members.is_empty() {
        return Ok(Vec::new());
    }
    let keys: Vec<String> = members.iter().map(|&m| buyer(coupon_id, m)).collect();
    let reply = redis::execute("MGET", &keys)?;
    Ok(reply
        .as_array()
        .unwrap_or_default()
        .iter()
        .map(|held| held.as_int().unwrap_or(0))
        .collect())
}

/// The stock's time to live in seconds, `None` when it has none.
pub fn stock_ttl_seconds(coupon_id: u64) -> Result<Option<u32>, RedisError> {
    let ttl = redis::execute("TTL", &args![keys::gate_remaining(coupon_id)])?;
    Ok(ttl.as_int().filter(|&s| s > 0).map(|s| s as u32))
}

/// Sets each member's count to what the rows hold, `(memberId, rows)`,
/// unless it is higher already.
pub fn seed_buyers(
    coupon_id: u64,
    counts: &[(u64, i64)],
    ttl_seconds: u32,
) -> Result<(), RedisError> {
    let keys: Vec<String> = counts
        .iter()
        .map(|&(member, _)| buyer(coupon_id, member))
        .collect();
    let argv: Vec<String> = std::iter::once(ttl_seconds.to_string())
        .chain(counts.iter().map(|(_, rows)| rows.to_string()))
        .collect();
    redis::eval(BUYERS, &keys, &argv)?;
    Ok(())
}

/// Sets the stock, the per-member limit and the epoch unless the drop is
/// seeded already.
pub fn seed(
    coupon_id: u64,
    quantity: i64,
    per_member_limit: i64,
    epoch_version: i64,
    ttl_seconds: u32,
) -> Result<SeedAnswer, RedisError> {
    let argv = args![quantity, per_member_limit, ttl_seconds, epoch_version];
    let reply = redis::eval(SEED, &stock(coupon_id), &argv)?;
    match reply.as_array() {
        Some([seeded, left]) => Ok(SeedAnswer {
            seeded: seeded.as_int() == Some(1),
            remaining: left.as_int().unwrap_or(0),
        }),
        _ => Err(RedisError::Server(format!("unexpected seed reply {reply}"))),
    }
}

/// Sets the stock, the per-member limit and the epoch over what is there,
/// keeping the stock's time to live (`ttl_seconds` when it has none).
pub fn rebuild(
    coupon_id: u64,
    quantity: i64,
    per_member_limit: i64,
    epoch_version: i64,
    ttl_seconds: u32,
) -> Result<(), RedisError> {
    let argv = args![quantity, per_member_limit, epoch_version, ttl_seconds];
    redis::eval(REBUILD, &stock(coupon_id), &argv)?;
    Ok(())
}

/// What [`settle`] did to the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// The gate was set without this sale: it is counted in now.
    CountedIn,
    /// The gate missed sales made without it: its stock is dropped, and the
    /// next request sets it from the rows.
    Dropped,
    /// Set from the rows since this request reserved, and nothing sold.
    Current,
    /// No stock to bring up to date.
    Unseeded,
}

/// Brings the gate up to a confirm of `member_id` under `key` that read
/// the coupon row's `version`, which is not the epoch it reserved at; `sold`
/// when the confirm committed a sale.
pub fn settle(
    coupon_id: u64,
    member_id: u64,
    key: &str,
    version: i64,
    sold: bool,
) -> Result<Settled, RedisError> {
    let mut keys = stock(coupon_id);
    keys.extend([buyer(coupon_id, member_id), reserved(coupon_id, key)]);
    let reply = redis::eval(SETTLE, &keys, &args![version, member_id, u8::from(sold)])?;
    match reply.as_int() {
        Some(1) => Ok(Settled::CountedIn),
        Some(2) => Ok(Settled::Dropped),
        Some(3) => Ok(Settled::Current),
        Some(0) => Ok(Settled::Unseeded),
        _ => Err(RedisError::Server(format!(
            "unexpected settle reply {reply}"
        ))),
    }
}

pub fn redis_failed(err: RedisError) -> String {
    format!("Redis: {}", err.message())
}
