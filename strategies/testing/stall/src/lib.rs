//! Test fixture TEST_STALL: starts real work, then never finishes it, so the
//! host's deadline ends the call halfway. The request's idempotency key
//! picks where it stalls:
//!
//! - `in-transaction`: inside a transaction, after inserting the member's
//!   issue row;
//! - `after-reserve`: after reserving the member in `coupon:issued:{id}`;
//! - `sql-sleep`: inside a transaction, in `SELECT SLEEP(600)`, which the
//!   database itself must cut at the deadline.

use couponlab_sdk::sql::{self, IsolationLevel};
use couponlab_sdk::{IssueResult, Outcome, compensate, params, reserve};

couponlab_sdk::strategy! {
    struct Stall { method: "TEST_STALL", claims: [], summary: "stalls halfway through an issue (test fixture)", reservation_set: true }
    fn issue(request) {
        let (coupon_id, member_id) = (request.coupon_id, request.member_id);
        match request.idempotency_key.as_deref() {
            Some("in-transaction") => {
                let Ok(tx) = sql::begin(IsolationLevel::RepeatableRead) else {
                    return IssueResult::of(Outcome::Unavailable);
                };
                let inserted = tx.execute(
                    "INSERT INTO coupon_issues (coupon_id, member_id) VALUES (?, ?)",
                    &params![coupon_id, member_id],
                );
                if inserted.is_err() {
                    return IssueResult::of(Outcome::Unavailable);
                }
                spin()
            }
            Some("after-reserve") => {
                if let Err(refused) = reserve::with_lua(coupon_id, member_id) {
                    return refused;
                }
                spin()
            }
            Some("sql-sleep") => {
                let Ok(tx) = sql::begin(IsolationLevel::RepeatableRead) else {
                    return IssueResult::of(Outcome::Unavailable);
                };
                match tx.query("SELECT SLEEP(600)", &[]) {
                    Ok(_) => IssueResult::issued().detail("SLEEP(600) returned"),
                    Err(err) => IssueResult::of(Outcome::Unavailable).detail(err.message()),
                }
            }
            other => IssueResult::of(Outcome::Unavailable).detail(format!("no stall {other:?}")),
        }
    }
    fn compensate(request) {
        match request.idempotency_key.as_deref() {
            Some("after-reserve") => {
                compensate::release_unless_issued(request.coupon_id, request.member_id)
            }
            _ => compensate::nothing(),
        }
    }
}

/// Busy until the host's epoch deadline traps the call.
fn spin() -> ! {
    let mut turns: u64 = 0;
    loop {
        turns = std::hint::black_box(turns.wrapping_add(1));
    }
}
