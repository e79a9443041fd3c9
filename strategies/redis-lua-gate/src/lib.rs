//! REDIS_LUA_GATE, the limited drop (seed 000). One Lua script decides in
//! Redis — idempotency marker → per-member limit → decrement-if-positive —
//! and only then does an admitted request take a permit, so the permits buffer
//! the database, not Redis. No permit in time: the reservation is given back
//! and the answer is THROTTLED (503). A permit: the DB confirm step, then the
//! permit goes back and the Redis reservation stays. A failed confirm gives
//! the reservation back too.
//!
//! Besides `issue`, the component answers the rest of the drop's store
//! contract: `cancel` (give a reservation back, once) and `seed` (SET NX).

mod store;

use couponlab_sdk::bindings::couponlab::strategy::types::SeedAnswer;
use couponlab_sdk::confirm::{self, Confirmed};
use couponlab_sdk::sql::{self, IsolationLevel, SqlError};
use couponlab_sdk::{
    Compensation, IssueRequest, IssueResult, Outcome, Step, clock, compensate, coupon, params,
    settle,
};

couponlab_sdk::world!("gate-issuer");

use couponlab::strategy::permits;
use exports::couponlab::strategy::{drop_gate, strategy};
use store::{Restock, Verdict};

const METHOD: &str = "REDIS_LUA_GATE";

/// One gate for every drop: a permit stands for one confirm in flight on the
/// server's single database pool, whichever coupon it is for.
const GATE: &str = METHOD;

/// How long a drop seeded on first use lives (the seed route says its own).
const FIRST_USE_TTL_SECONDS: u32 = 24 * 60 * 60;

/// The failed call may have reserved, taken a permit, or both. The permit
/// goes back whatever happened; the reservation stays only if its confirm
/// committed, and is otherwise cancelled like a THROTTLED one (stock, the
/// member's count and the idempotency marker restored).
fn undo_failed_call(request: &IssueRequest) -> Compensation {
    let (coupon_id, member_id) = (request.coupon_id, request.member_id);
    let key = idempotency_key(request);
    let released = u32::from(permits::release(GATE, &permit_token(coupon_id, &key)));
    match compensate::issued(coupon_id, member_id) {
        Ok(true) => Compensation::of(
            released,
            "the member's coupon was issued; the reservation stays",
        ),
        Ok(false) => match store::cancel(coupon_id, member_id, &key, Restock::Unit) {
            Ok(restored) => Compensation::of(
                released + u32::from(restored),
                if restored {
                    "the reservation was given back"
                } else {
                    "there was no reservation to give back"
                },
            ),
            Err(err) => Compensation::unfinished(
                released,
                format!("the reservation could not be given back: {err}"),
            ),
        },
        Err(err) => Compensation::unfinished(
            released,
            format!(
                "the issue rows could not be read ({}); the reservation stays",
                err.message()
            ),
        ),
    }
}

/// The key a reservation is made under: the client's, or without one the
/// member's single reservation (a repeat of it is ALREADY_RESERVED).
fn idempotency_key(request: &IssueRequest) -> String {
    request
        .idempotency_key
        .clone()
        .unwrap_or_else(|| format!("member-{}", request.member_id))
}

fn issue(request: &IssueRequest) -> Step<IssueResult> {
    let (coupon_id, member_id) = (request.coupon_id, request.member_id);
    // The confirm step writes one row per member (UNIQUE(coupon_id,
    // member_id)): a reservation of several coupons could not be recorded.
    if request.quantity != 1 {
        return Err(IssueResult::of(Outcome::Duplicate).detail(format!(
            "a member holds at most one issue row per coupon, so quantity must be 1, got {}",
            request.quantity
        )));
    }
    let key = idempotency_key(request);

    let verdict = reserve(coupon_id, member_id, &key, request.quantity)?;
    let refused = |outcome: Outcome, detail: String| {
        Err(IssueResult::of(outcome)
            .detail(detail)
            .label("gate", verdict.name()))
    };
    match verdict {
        Verdict::Admitted => {}
        Verdict::SoldOut => {
            return refused(Outcome::SoldOut, format!("coupon {coupon_id} is sold out"));
        }
        Verdict::AlreadyReserved => {
            return refused(
                Outcome::Duplicate,
                format!(
                    "ALREADY_RESERVED: idempotency key {key:?} already reserved coupon {coupon_id}"
                ),
            );
        }
        Verdict::PerUserLimitExceeded => {
            return refused(
                Outcome::Duplicate,
                format!(
                    "PER_USER_LIMIT_EXCEEDED: member {member_id} already holds as many of coupon {coupon_id} as it may"
                ),
            );
        }
    }

    let token = permit_token(coupon_id, &key);
    if !permits::try_acquire(GATE, &token, None) {
        let throttled = IssueResult::of(Outcome::Throttled)
            .detail("no permit was free in time; the reservation was given back");
        return Ok(
            give_back(coupon_id, member_id, &key, Restock::Unit, throttled)
                .label("gate", verdict.name()),
        );
    }
    let started = clock::now_millis();
    let confirmed = confirm::confirm(coupon_id, member_id);
    let confirm_ms = clock::now_millis().saturating_sub(started);
    // The stock counts what the database can still issue. So, unlike
    // REDIS_LUA's set of members, even a duplicate key gives the unit back
    // (the member's row was never part of the stock); a unit the database
    // had no stock for is not given back, or it would admit the next
    // request in vain.
    let (result, restock) = match confirmed {
        Confirmed::Issued => (IssueResult::issued(), None),
        Confirmed::Duplicate => (IssueResult::of(Outcome::Duplicate), Some(Restock::Unit)),
        Confirmed::SoldOutAtDb => (
            IssueResult::of(Outcome::SoldOutAtDb),
            Some(Restock::CountOnly),
        ),
        Confirmed::UnknownMember => (IssueResult::of(Outcome::UnknownMember), Some(Restock::Unit)),
        // The COMMIT's answer was lost: the reservation stays until the host
        // settles the request (`compensate` reads the rows first).
        Confirmed::Failed(err @ SqlError::Indeterminate(_)) => (IssueResult::from(err), None),
        Confirmed::Failed(err) => (IssueResult::from(err), Some(Restock::Unit)),
    };
    let result = match restock {
        Some(restock) => give_back(coupon_id, member_id, &key, restock, result),
        None => result,
    };
    permits::release(GATE, &token);
    Ok(result
        .label("gate", verdict.name())
        .label("confirmMs", bucket(confirm_ms)))
}

/// The reserve script's verdict, seeding the drop from the coupon row first
/// if it was never seeded (or its keys expired).
fn reserve(coupon_id: u64, member_id: u64, key: &str, quantity: u32) -> Step<Verdict> {
    if let Some(verdict) = store::reserve(coupon_id, member_id, key, quantity)? {
        return Ok(verdict);
    }
    seed_from_coupon(coupon_id)?;
    store::reserve(coupon_id, member_id, key, quantity)?
        .ok_or_else(|| unavailable(format!("the drop of coupon {coupon_id} is not seeded")))
}

/// Seeds the drop with what the coupon has left to issue, and its
/// per-member limit. SET NX: concurrent first requests agree on one stock.
fn seed_from_coupon(coupon_id: u64) -> Step<()> {
    let rows = sql::query(
        "SELECT GREATEST(total_count - issued_count, 0), per_member_limit FROM coupons WHERE id = ?",
        &params![coupon_id],
    )?;
    let row = coupon::row(&rows)?;
    let left = row.first().and_then(sql::int).unwrap_or(0);
    let per_member_limit = row.get(1).and_then(sql::int).unwrap_or(1);
    store::seed(
        coupon_id,
        left.max(0) as u64,
        per_member_limit.max(1) as u64,
        FIRST_USE_TTL_SECONDS,
    )
    .map_err(unavailable)?;
    Ok(())
}

/// Cancels the reservation: gives back the member's count and, with
/// [`Restock::Unit`], the unit. If Redis cannot be reached the stock stays
/// taken (the drop under-issues, never over-issues), and the result says so.
fn give_back(
    coupon_id: u64,
    member_id: u64,
    key: &str,
    restock: Restock,
    result: IssueResult,
) -> IssueResult {
    match store::cancel(coupon_id, member_id, key, restock) {
        Ok(true) => result.compensated(1),
        // A cancel request got there first.
        Ok(false) => result,
        Err(err) => {
            let detail = format!(
                "{}; the reservation could not be given back ({err})",
                result
                    .detail
                    .clone()
                    .unwrap_or_else(|| "confirm failed".into())
            );
            result.detail(detail).settle_later()
        }
    }
}

fn permit_token(coupon_id: u64, key: &str) -> String {
    format!("{coupon_id}:{key}")
}

fn unavailable(detail: String) -> IssueResult {
    IssueResult::of(Outcome::Unavailable).detail(detail)
}

/// Coarse buckets of the confirm step's time (pool wait, row-lock wait and
/// four round trips), so the result shows how long admitted requests waited
/// on the database.
fn bucket(millis: u64) -> &'static str {
    match millis {
        0..=1 => "0-1",
        2..=9 => "2-9",
        10..=99 => "10-99",
        100..=999 => "100-999",
        _ => "1000+",
    }
}

impl drop_gate::Guest for RedisLuaGate {
    /// Gives the reservation back: the issue row first (if the confirm
    /// committed), then the Redis stock and count, then the permit. Each
    /// step is idempotent on its own, so a cancel that failed halfway can be
    /// sent again; a cancel with nothing left to give back answers false.
    fn cancel(coupon_id: u64, member_id: u64, idempotency_key: String) -> Result<bool, String> {
        if store::reserved_by(coupon_id, &idempotency_key)? != Some(member_id) {
            return Ok(false);
        }
        revoke_issue(coupon_id, member_id)
            .map_err(|err| format!("the database: {}", err.message()))?;
        let restored = store::cancel(coupon_id, member_id, &idempotency_key, Restock::Unit)?;
        permits::release(GATE, &permit_token(coupon_id, &idempotency_key));
        Ok(restored)
    }

    fn seed(coupon_id: u64, quantity: u32, ttl_seconds: u32) -> Result<SeedAnswer, String> {
        let rows = sql::query(
            "SELECT per_member_limit FROM coupons WHERE id = ?",
            &params![coupon_id],
        )
        .map_err(|err| format!("the database: {}", err.message()))?;
        let per_member_limit =
            sql::scalar(&rows).ok_or_else(|| format!("coupon {coupon_id} does not exist"))?;
        store::seed(
            coupon_id,
            quantity.into(),
            per_member_limit.max(1) as u64,
            ttl_seconds,
        )
    }
}

/// Deletes the member's issue row and gives its unit back to the coupon.
/// READ COMMITTED: a DELETE that finds no row takes no gap lock, so it never
/// blocks confirms inserting next to it.
fn revoke_issue(coupon_id: u64, member_id: u64) -> Result<(), SqlError> {
    let tx = sql::begin(IsolationLevel::ReadCommitted)?;
    let deleted = tx.execute(
        "DELETE FROM coupon_issues WHERE coupon_id = ? AND member_id = ?",
        &params![coupon_id, member_id],
    )?;
    if deleted.rows_affected > 0 {
        tx.execute(
            "UPDATE coupons SET issued_count = issued_count - 1 WHERE id = ? AND issued_count > 0",
            &params![coupon_id],
        )?;
    }
    tx.commit()
}

couponlab_sdk::strategy! {
    struct RedisLuaGate: strategy::Guest { method: METHOD, claims: [Total, Member, Acked], summary: "limited drop: one Lua gate (idempotency, per-member limit, stock), then a permit, then the DB confirm step" }
    fn issue(request) { settle(issue(&request)) }
    fn compensate(request) { undo_failed_call(&request) }
}
