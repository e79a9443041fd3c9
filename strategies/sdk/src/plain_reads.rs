//! Stage 1: issue in one transaction at a chosen isolation level, with plain
//! reads and no explicit lock (READ_COMMITTED, REPEATABLE_READ, SERIALIZABLE).
//!
//! Read the coupon row with a plain SELECT, check the member has none (unless
//! the request sends `duplicateCheck: false`), check `issued_count <
//! total_count`, INSERT the issue row, then `UPDATE coupons SET issued_count
//! = issued_count + 1` with no guard in the WHERE. Nothing but the isolation
//! level decides what those reads are worth:
//!
//! - READ COMMITTED and REPEATABLE READ read without locking. Requests in
//!   flight together all see stock left and all write: over-issue. The
//!   unguarded UPDATE queues on the row lock and adds up, so the counter
//!   still matches the rows; both are past the total.
//! - SERIALIZABLE makes every plain SELECT a shared-lock read. Two requests
//!   that both read the coupon row both need its exclusive lock to UPDATE it,
//!   and each waits for the other: one is the deadlock victim (503). The total
//!   holds, at the price of those 503s.
//!
//! Those are the lessons of the stage, so no guard is added here. The
//! UNIQUE(coupon_id, member_id) key still refuses a second row for a member
//! (duplicate key, 409), whichever the level.
//!
//! The reads are shared with the optimistic methods, which take no lock to
//! read either; the member check and the write with PESSIMISTIC, which runs
//! them under its row lock.

use crate::bindings::couponlab::strategy::types::{IssueRequest, IssueResult, Outcome};
use crate::outcome::{Step, settle};
use crate::sql::{self, IsolationLevel, Transaction};
use crate::{coupon, params};

/// The coupon row, as a plain SELECT in `tx` sees it.
pub struct CouponRow {
    pub total: i64,
    pub issued: i64,
    pub version: i64,
}

/// Reads the coupon row with a plain SELECT: no locking clause, so what it
/// locks (nothing, or a shared lock under SERIALIZABLE) is the isolation
/// level's doing.
pub fn read_coupon(tx: &Transaction, coupon_id: u64) -> Step<CouponRow> {
    let [total, issued, version] = coupon_columns(
        tx,
        "SELECT total_count, issued_count, version FROM coupons WHERE id = ?",
        coupon_id,
    )?;
    Ok(CouponRow {
        total,
        issued,
        version,
    })
}

/// The integer columns `query` selects from one coupon's row in `tx`, its
/// one parameter the coupon id (a NULL reads as 0); no row is
/// UNKNOWN_COUPON. Whether the read locks is the query's: [`read_coupon`]
/// reads plainly, PESSIMISTIC and the limited drop's seeding (REDIS_LUA_GATE)
/// `FOR UPDATE`.
pub fn coupon_columns<const N: usize>(
    tx: &Transaction,
    query: &str,
    coupon_id: u64,
) -> Step<[i64; N]> {
    let rows = tx.query(query, &params![coupon_id])?;
    let row = coupon::row(&rows)?;
    Ok(std::array::from_fn(|index| {
        row.get(index).and_then(sql::int).unwrap_or(0)
    }))
}

/// Ends the request as DUPLICATE when the member already has the coupon.
pub fn refuse_second_coupon(tx: &Transaction, coupon_id: u64, member_id: u64) -> Step<()> {
    let held = tx.query(
        "SELECT COUNT(*) FROM coupon_issues WHERE coupon_id = ? AND member_id = ?",
        &params![coupon_id, member_id],
    )?;
    if sql::scalar(&held).unwrap_or(0) > 0 {
        return Err(IssueResult::of(Outcome::Duplicate));
    }
    Ok(())
}

/// Ends the request as SOLD_OUT when the row read shows no stock left.
pub fn refuse_when_sold_out(coupon: &CouponRow, coupon_id: u64) -> Step<()> {
    if coupon.issued >= coupon.total {
        return Err(IssueResult::of(Outcome::SoldOut).detail(format!(
            "coupon {coupon_id} is sold out ({} of {} issued)",
            coupon.issued, coupon.total
        )));
    }
    Ok(())
}

/// The issue row. A second row for the member fails on the UNIQUE key
/// (DUPLICATE); an unknown member fails on the foreign key (UNKNOWN_MEMBER).
pub fn insert_issue(tx: &Transaction, coupon_id: u64, member_id: u64) -> Step<()> {
    tx.execute(
        "INSERT INTO coupon_issues (coupon_id, member_id) VALUES (?, ?)",
        &params![coupon_id, member_id],
    )?;
    Ok(())
}

/// The write: the issue row, then `issued_count + 1` with no guard in the
/// WHERE. It trusts whatever the checks before it decided; what those checks
/// were worth (plain reads at an isolation level, or reads under a row lock)
/// is the calling method's lesson.
pub fn write_issue(tx: &Transaction, coupon_id: u64, member_id: u64) -> Step<()> {
    insert_issue(tx, coupon_id, member_id)?;
    tx.execute(
        "UPDATE coupons SET issued_count = issued_count + 1 WHERE id = ?",
        &params![coupon_id],
    )?;
    Ok(())
}

/// The whole stage-1 flow at `level`.
pub fn issue(level: IsolationLevel, request: &IssueRequest) -> IssueResult {
    settle(try_issue(level, request))
}

fn try_issue(level: IsolationLevel, request: &IssueRequest) -> Step<IssueResult> {
    let (coupon_id, member_id) = (request.coupon_id, request.member_id);
    let tx = sql::begin(level)?;
    let coupon = read_coupon(&tx, coupon_id)?;
    if request.duplicate_check {
        refuse_second_coupon(&tx, coupon_id, member_id)?;
    }
    refuse_when_sold_out(&coupon, coupon_id)?;
    write_issue(&tx, coupon_id, member_id)?;
    tx.commit()?;
    Ok(IssueResult::issued())
}
