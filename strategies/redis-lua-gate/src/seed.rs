//! Setting the gate from the truth: the seed's seed-if-absent, the way
//! back after Redis lost the gate (restarted empty, keys expired) or the
//! gate was dropped (switched off, or found behind the rows), and the
//! reconcile that sets it again when it is set but disagrees with the rows
//! (a failover lost sales the gate made).
//!
//! One transaction holds the coupon row (`SELECT ... FOR UPDATE`) from the
//! first read to the last Redis write, so:
//!
//! - setters take turns, and one finding the gate set by the one before it
//!   leaves it as it is (no second stock);
//! - every sale that updates the row — the gate's confirm, the database
//!   path, a cancel — either committed before the count, and is in it, or
//!   waits for the setting to end; a sale of the second kind finds the row's
//!   version moved on by the setting and brings the gate up to itself
//!   (`store::settle`);
//! - the members' counts are written before the stock, and the reserve
//!   script admits nobody without a stock: no one is admitted before the
//!   whole gate is set.

use couponlab_sdk::bindings::couponlab::strategy::types::{GateReconciled, SeedAnswer};
use couponlab_sdk::redis::RedisError;
use couponlab_sdk::sql::{self, IsolationLevel, SqlError, Transaction};
use couponlab_sdk::{IssueResult, params, plain_reads};

use crate::store;

/// Buyers read and written per round trip.
const PAGE: usize = 500;

/// Why the gate could not be asked or set.
pub enum Unanswered {
    /// Redis failed: the gate's verdict cannot be had.
    Redis(RedisError),
    /// Anything else ends the request with this result (the database
    /// failed, no such coupon).
    Refused(IssueResult),
}

impl From<RedisError> for Unanswered {
    fn from(err: RedisError) -> Self {
        Unanswered::Redis(err)
    }
}

impl From<IssueResult> for Unanswered {
    fn from(result: IssueResult) -> Self {
        Unanswered::Refused(result)
    }
}

impl From<SqlError> for Unanswered {
    fn from(err: SqlError) -> Self {
        Unanswered::Refused(IssueResult::from(err))
    }
}

impl Unanswered {
    /// The failure as the drop-gate export reports it.
    pub fn message(self) -> String {
        match self {
            Unanswered::Redis(err) => store::redis_failed(err),
            Unanswered::Refused(result) => result
                .detail
                .unwrap_or_else(|| format!("{:?}", result.outcome)),
        }
    }
}

/// What setting the gate did.
pub struct Set {
    pub answer: SeedAnswer,
    /// Members whose counts were read from the rows.
    pub buyers: usize,
}

impl Set {
    /// The `reconciled` label of the request that set the gate.
    pub fn label(&self) -> String {
        format!(
            "set from the rows: {} left, {} buyers",
            self.answer.remaining, self.buyers
        )
    }
}

/// Sets the gate unless it is set: the stock to `quantity`, or without one
/// to the total less the rows; each member's count to its rows; the
/// per-member limit from the coupon row. `answer.seeded` is false when the
/// gate was set already (nothing is changed then).
pub fn from_rows(
    coupon_id: u64,
    quantity: Option<u64>,
    ttl_seconds: u32,
) -> Result<Set, Unanswered> {
    let tx = sql::begin(IsolationLevel::ReadCommitted)?;
    let [total, per_member_limit, version] = plain_reads::coupon_columns(
        &tx,
        "SELECT total_count, per_member_limit, version FROM coupons WHERE id = ? FOR UPDATE",
        coupon_id,
    )?;
    let per_member_limit = per_member_limit.max(1);
    if let Some(remaining) = store::seeded(coupon_id)? {
        tx.rollback()?;
        return Ok(Set {
            answer: SeedAnswer {
                seeded: false,
                remaining,
            },
            buyers: 0,
        });
    }
    // A new epoch: a confirm of a reservation made before now, committing
    // after this setting, fails its guard and brings the gate up to itself.
    tx.execute(
        "UPDATE coupons SET version = version + 1 WHERE id = ?",
        &params![coupon_id],
    )?;
    let buyers = buyer_rows(&tx, coupon_id)?;
    for page in buyers.chunks(PAGE) {
        store::seed_buyers(coupon_id, page, ttl_seconds)?;
    }
    let sold: i64 = buyers.iter().map(|(_, rows)| rows).sum();
    let stock = quantity.map_or(total - sold, |quantity| quantity as i64);
    let answer = store::seed(
        coupon_id,
        stock.max(0),
        per_member_limit,
        version + 1,
        ttl_seconds,
    )?;
    if answer.seeded {
        tx.commit()?;
    } else {
        // Set by a setter that did not hold the row: its epoch stands.
        tx.rollback()?;
    }
    Ok(Set {
        answer,
        buyers: buyers.len(),
    })
}

/// Every member's rows of the coupon, `(memberId, rows)` by member, read a
/// page at a time.
fn buyer_rows(tx: &Transaction, coupon_id: u64) -> Result<Vec<(u64, i64)>, SqlError> {
    let mut buyers = Vec::new();
    let mut after = 0u64;
    loop {
        let page = tx.query(
            &format!(
                "SELECT member_id, COUNT(*) FROM coupon_issues WHERE coupon_id = ? AND member_id > ? \
                 GROUP BY member_id ORDER BY member_id LIMIT {PAGE}"
            ),
            &params![coupon_id, after],
        )?;
        let counts: Vec<(u64, i64)> = page
            .rows
            .iter()
            .filter_map(|row| {
                let member = row.first().and_then(sql::int)?;
                Some((member as u64, row.get(1).and_then(sql::int)?))
            })
            .collect();
        let Some(&(last, _)) = counts.last() else {
            break;
        };
        let full = counts.len() == PAGE;
        buyers.extend(counts);
        after = last;
        if !full {
            break;
        }
    }
    Ok(buyers)
}

/// Compares a set gate with the rows, holding the coupon row: a stock above
/// what the rows leave, or a member's count below its rows, means Redis
/// lost sales the rows hold (a failover promoted a replica they had not
/// reached; the epoch did not move, as the gate made those sales itself).
/// Then the gate is set from the rows again, at a new epoch. A stock below
/// what the rows leave is not a disagreement: reservations in flight hold
/// units whose rows are not committed yet. `ttl_seconds` is the stock's
/// time to live if it has none left.
pub fn reconcile(coupon_id: u64, ttl_seconds: u32) -> Result<GateReconciled, Unanswered> {
    let tx = sql::begin(IsolationLevel::ReadCommitted)?;
    let [total, per_member_limit, version] = plain_reads::coupon_columns(
        &tx,
        "SELECT total_count, per_member_limit, version FROM coupons WHERE id = ? FOR UPDATE",
        coupon_id,
    )?;
    let Some(before) = store::seeded(coupon_id)? else {
        tx.rollback()?;
        return Ok(GateReconciled {
            remaining_before: None,
            remaining_after: None,
            buyers_behind: 0,
            rebuilt: false,
        });
    };
    let buyers = buyer_rows(&tx, coupon_id)?;
    let mut behind = 0;
    for page in buyers.chunks(PAGE) {
        let members: Vec<u64> = page.iter().map(|&(member, _)| member).collect();
        let held = store::buyer_counts(coupon_id, &members)?;
        behind += page
            .iter()
            .zip(held)
            .filter(|((_, rows), held)| held < rows)
            .count() as u32;
    }
    let sold: i64 = buyers.iter().map(|(_, rows)| rows).sum();
    let left = (total - sold).max(0);
    if before <= left && behind == 0 {
        tx.rollback()?;
        return Ok(GateReconciled {
            remaining_before: Some(before),
            remaining_after: Some(before),
            buyers_behind: 0,
            rebuilt: false,
        });
    }
    // A new epoch: a reservation taken from the old stock confirms past it
    // and is counted into the new one (`store::settle`).
    tx.execute(
        "UPDATE coupons SET version = version + 1 WHERE id = ?",
        &params![coupon_id],
    )?;
    let ttl = store::stock_ttl_seconds(coupon_id)?.unwrap_or(ttl_seconds);
    for page in buyers.chunks(PAGE) {
        store::seed_buyers(coupon_id, page, ttl)?;
    }
    store::rebuild(coupon_id, left, per_member_limit.max(1), version + 1, ttl)?;
    tx.commit()?;
    Ok(GateReconciled {
        remaining_before: Some(before),
        remaining_after: Some(left),
        buyers_behind: behind,
        rebuilt: true,
    })
}

/// The `reconciled` label of a request whose confirm found the gate
/// disagreeing with the rows.
pub fn label(reconciled: &GateReconciled) -> Option<String> {
    reconciled.rebuilt.then(|| {
        format!(
            "set from the rows again: {} left, was {}; {} buyers' counts behind",
            reconciled.remaining_after.unwrap_or(0),
            reconciled.remaining_before.unwrap_or(0),
            reconciled.buyers_behind
        )
    })
}
