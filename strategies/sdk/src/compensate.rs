//! What a strategy undoes when its `issue` call ended without an answer: it
//! trapped or ran past its deadline, somewhere between two of its steps. The
//! host then calls `compensate` in a fresh instance with the same request,
//! after it rolled back the failed call's open transactions, so the
//! database shows only what the failed call committed. The strategy decides
//! what is left to undo:
//!
//! - [`nothing`]: methods that only write in one database transaction — the
//!   rollback was the whole undo;
//! - [`release_unless_issued`]: methods that reserve in `coupon:issued:{id}`
//!   (or a shard's set, [`release_unless_issued_from`]) and then confirm in
//!   the database — a reservation whose member has no issue row is
//!   removed; one with a row stays (the confirm committed);
//! - [`carried_by_entry`]: methods whose reservation and stream entry are
//!   written by one script — the entry carries the request to its consumer,
//!   which finishes or compensates it, so nothing is undone here.
//!
//! The host also calls `compensate` for an answer that asked to be settled
//! later (an outcome unknown, an undo that could not run), and calls it
//! again while it answers [`Compensation::unfinished`]: each undo here
//! happens once however often it runs (SREM of a member who is not there
//! removes nothing).

use crate::bindings::couponlab::strategy::types::Compensation;
use crate::sql::{self, SqlError};
use crate::{args, keys, params, redis};

impl Compensation {
    pub fn of(undone: u32, detail: impl Into<String>) -> Self {
        Compensation {
            undone,
            detail: Some(detail.into()),
            unfinished: false,
        }
    }

    /// Not finished: a dependency did not answer, and the host calls
    /// `compensate` again later.
    pub fn unfinished(undone: u32, detail: impl Into<String>) -> Self {
        Compensation {
            unfinished: true,
            ..Compensation::of(undone, detail)
        }
    }
}

/// Nothing to undo: the failed call's transaction was rolled back.
pub fn nothing() -> Compensation {
    Compensation::of(0, "nothing to undo: the transaction was rolled back")
}

/// The reservation is carried by its stream entry: nothing to undo here.
pub fn carried_by_entry() -> Compensation {
    Compensation::of(
        0,
        "the reservation and its stream entry were written together; the consumer finishes it",
    )
}

/// Whether the member has an issue row for the coupon (the confirm
/// committed). An autocommit read: it sees only committed rows.
pub fn issued(coupon_id: u64, member_id: u64) -> Result<bool, SqlError> {
    let rows = sql::query(
        "SELECT 1 FROM coupon_issues WHERE coupon_id = ? AND member_id = ?",
        &params![coupon_id, member_id],
    )?;
    Ok(!rows.rows.is_empty())
}

/// Removes the member's reservation from `coupon:issued:{id}` unless the
/// member has an issue row. When the database cannot be read, the
/// reservation stays: a reservation without a row only leaves stock unsold,
/// while removing one whose row exists would let Redis admit one more.
///
/// A hand-off the failed call made before it ended (a queued job, a
/// published message) may still confirm the member later; the confirm
/// step's guarded UPDATE keeps the total whatever Redis admits.
pub fn release_unless_issued(coupon_id: u64, member_id: u64) -> Compensation {
    release_unless_issued_from(&keys::issued(coupon_id), coupon_id, member_id)
}

/// The same for a reservation kept in the set `set` rather than the
/// coupon's (REDIS_LUA_SHARDED's shard sets).
pub fn release_unless_issued_from(set: &str, coupon_id: u64, member_id: u64) -> Compensation {
    match issued(coupon_id, member_id) {
        Ok(true) => Compensation::of(0, "the member's coupon was issued; the reservation stays"),
        Ok(false) => match redis::execute("SREM", &args![set, member_id]) {
            Ok(removed) if removed.as_int() == Some(1) => {
                Compensation::of(1, "the reservation was removed")
            }
            Ok(_) => Compensation::of(0, "there was no reservation to remove"),
            Err(err) => Compensation::unfinished(
                0,
                format!("the reservation could not be removed: {}", err.message()),
            ),
        },
        Err(err) => Compensation::unfinished(
            0,
            format!(
                "the issue rows could not be read ({}); the reservation stays",
                err.message()
            ),
        ),
    }
}
