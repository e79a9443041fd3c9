//! REDIS_LUA_GATE, the limited drop (seed 000). One Lua script decides in
//! Redis — idempotency marker → per-member limit → decrement-if-positive —
//! and only then does an admitted request take a permit, so the permits buffer
//! the database, not Redis. No permit in time: the reservation is given back
//! and the answer is THROTTLED (503). A permit: the DB confirm step, then the
//! permit goes back and the Redis reservation stays. A failed confirm gives
//! the reservation back too.
//!
//! When the gate cannot answer (Redis down, its answer lost, the script
//! refused) the request fails open to the database path (`fallback.rs`), as
//! the seed's BE-03 does, unless the operator chose to fail closed
//! (`COUPONLAB_GATE_FAIL_OPEN=off`: 503). The drop's switch sends every
//! request there. A gate Redis lost, or one switched back on, is set from
//! the rows before it admits anyone (`seed.rs`); one the rows moved past
//! without it is found out by its next confirm (`rows.rs`); one that lost
//! sales it made itself (a failover) is set again from the rows when a
//! confirm it admitted finds the coupon sold out at its own epoch, or when
//! the host asks after its Redis primary changed (`reconcile`).
//!
//! Besides `issue`, the component answers the rest of the drop's store
//! contract: `cancel` (give a reservation back, once), `seed` (set the
//! stock unless set) and `reconcile` (set it again if the rows disagree).

mod fallback;
mod rows;
mod seed;
mod store;

use couponlab_sdk::bindings::couponlab::strategy::types::{GateReconciled, SeedAnswer};
use couponlab_sdk::sql::SqlError;
use couponlab_sdk::{
    Compensation, IssueRequest, IssueResult, Outcome, Step, clock, compensate, settle,
    unanswered_write,
};

couponlab_sdk::world!("gate-issuer");

use couponlab::strategy::permits;
use exports::couponlab::strategy::{drop_gate, strategy};
use fallback::Why;
use rows::Confirmed;
use seed::Unanswered;
use store::{Reserved, Restock, Settled, Verdict};

const METHOD: &str = "REDIS_LUA_GATE";

/// One gate for every drop: a permit stands for one confirm in flight on the
/// server's single database pool, whichever coupon it is for.
const GATE: &str = METHOD;

/// How long a drop seeded on first use lives (the seed route says its own).
const FIRST_USE_TTL_SECONDS: u32 = 24 * 60 * 60;

/// The label of every request: `gate` or `fallback`, which path decided it.
const SERVED_BY: &str = "servedBy";

/// The label of a request that set the gate or brought it up to date.
const RECONCILED: &str = "reconciled";

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

fn issue(request: &IssueRequest) -> IssueResult {
    let mut reconciled = None;
    let result = settle(serve(request, &mut reconciled));
    match reconciled {
        Some(what) => result.label(RECONCILED, what),
        None => result,
    }
}

/// Serves the request; `reconciled` says what it did to set the gate from
/// the rows, if it did anything.
fn serve(request: &IssueRequest, reconciled: &mut Option<String>) -> Step<IssueResult> {
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

    let (verdict, epoch) = match reserve(coupon_id, member_id, &key, reconciled) {
        Ok(Reserved::Decided { verdict, epoch }) => (verdict, epoch),
        Ok(Reserved::Off) => return Ok(fallback::serve(request, &key, Why::Off)),
        // Not seeded even right after it was set: the gate cannot answer.
        Ok(Reserved::Unseeded) => {
            return Err(unavailable(format!(
                "the drop of coupon {coupon_id} is not seeded"
            )));
        }
        Err(Unanswered::Redis(err)) if permits::fail_open() => {
            return Ok(fallback::serve(request, &key, Why::Unreachable(err)));
        }
        // Failing closed: the reservation script may have run all the
        // same, and is settled later.
        Err(Unanswered::Redis(err)) => {
            return Err(unanswered_write(err).label("gate", "UNREACHABLE"));
        }
        Err(Unanswered::Refused(result)) => return Err(result),
    };
    let refused = |outcome: Outcome, detail: String| {
        Err(IssueResult::of(outcome)
            .detail(detail)
            .label("gate", verdict.name())
            .label(SERVED_BY, "gate"))
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
                .label("gate", verdict.name())
                .label(SERVED_BY, "gate"),
        );
    }
    let started = clock::now_millis();
    let confirmed = rows::confirm(coupon_id, member_id, epoch);
    let confirm_ms = clock::now_millis().saturating_sub(started);
    // The stock counts what the database can still issue. So, unlike
    // REDIS_LUA's set of members, even a duplicate key gives the unit back
    // (the member's row was never part of the stock); a unit the database
    // had no stock for is not given back, or it would admit the next
    // request in vain.
    let (result, restock) = match confirmed {
        Confirmed::Issued => (IssueResult::issued(), None),
        Confirmed::IssuedPastEpoch(version) => {
            *reconciled = bring_up_to(coupon_id, member_id, &key, version, true);
            (IssueResult::issued(), None)
        }
        Confirmed::Duplicate => (IssueResult::of(Outcome::Duplicate), Some(Restock::Unit)),
        Confirmed::SoldOutAtDb(version) => {
            // A gate still selling what the database sold without it would
            // drain one SOLD_OUT_AT_DB at a time; dropped, it is set from
            // the rows, sold out, by the next request.
            if version != epoch {
                *reconciled = bring_up_to(coupon_id, member_id, &key, version, false);
            } else {
                // Admitted at the current epoch, yet the rows hold the
                // whole total: the gate lost sales it made (a failover).
                *reconciled = match seed::reconcile(coupon_id, FIRST_USE_TTL_SECONDS) {
                    Ok(done) => seed::label(&done),
                    Err(err) => Some(format!("not set from the rows: {}", err.message())),
                };
            }
            (
                IssueResult::of(Outcome::SoldOutAtDb),
                Some(Restock::CountOnly),
            )
        }
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
        .label(SERVED_BY, "gate")
        .label("confirmMs", bucket(confirm_ms)))
}

/// The reserve script's answer, setting the gate from the rows first if it
/// is not set (never seeded, expired, emptied, dropped).
fn reserve(
    coupon_id: u64,
    member_id: u64,
    key: &str,
    reconciled: &mut Option<String>,
) -> Result<Reserved, Unanswered> {
    let reserved = store::reserve(coupon_id, member_id, key, 1)?;
    if reserved != Reserved::Unseeded {
        return Ok(reserved);
    }
    let set = seed::from_rows(coupon_id, None, FIRST_USE_TTL_SECONDS)?;
    if set.answer.seeded {
        *reconciled = Some(set.label());
    }
    Ok(store::reserve(coupon_id, member_id, key, 1)?)
}

/// Brings the gate up to this request's confirm, which read the coupon
/// row's `version` rather than the epoch it reserved at (`sold`: and
/// committed a sale); what it did, as the `reconciled` label. If Redis fails
/// now, a stock that missed sales is dropped by a later confirm; one set
/// just before this sale stays a unit high, which the database guard turns
/// into a SOLD_OUT_AT_DB.
fn bring_up_to(
    coupon_id: u64,
    member_id: u64,
    key: &str,
    version: i64,
    sold: bool,
) -> Option<String> {
    let what = match store::settle(coupon_id, member_id, key, version, sold) {
        // Nothing to reconcile: set since this request reserved and nothing
        // sold, or not set at all (the next request sets it from the rows).
        Ok(Settled::Current | Settled::Unseeded) => return None,
        Ok(Settled::CountedIn) => "counted in a sale made while it was set".into(),
        Ok(Settled::Dropped) => "dropped: sales were made without it".into(),
        Err(err) => format!("not brought up to date: {}", store::redis_failed(err)),
    };
    Some(what)
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
        rows::revoke_issue(coupon_id, member_id)
            .map_err(|err| format!("the database: {}", err.message()))?;
        let restored = store::cancel(coupon_id, member_id, &idempotency_key, Restock::Unit)?;
        permits::release(GATE, &permit_token(coupon_id, &idempotency_key));
        Ok(restored)
    }

    /// Sets the gate as the drop's requests do when they find it unset, with
    /// the stock the operator says: the members' counts from the rows, under
    /// the coupon row's lock, unless it is set already.
    fn seed(coupon_id: u64, quantity: u32, ttl_seconds: u32) -> Result<SeedAnswer, String> {
        seed::from_rows(coupon_id, Some(quantity.into()), ttl_seconds)
            .map(|set| set.answer)
            .map_err(Unanswered::message)
    }

    /// Sets the gate from the rows again if it disagrees with them (see
    /// `seed::reconcile`); the host asks after its Redis primary changed.
    fn reconcile(coupon_id: u64) -> Result<GateReconciled, String> {
        seed::reconcile(coupon_id, FIRST_USE_TTL_SECONDS).map_err(Unanswered::message)
    }
}

couponlab_sdk::strategy! {
    struct RedisLuaGate: strategy::Guest {
        method: METHOD,
        claims: [Total, Member, Acked],
        summary: "limited drop: one Lua gate (idempotency, per-member limit, stock), then a permit, then the DB confirm step; without Redis, the database alone",
        result_labels: [SERVED_BY => "servedBy", RECONCILED => "gateReconciled"],
    }
    fn issue(request) { issue(&request) }
    fn compensate(request) { undo_failed_call(&request) }
}
