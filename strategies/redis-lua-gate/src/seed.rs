//! Setting the gate from the truth: the seed's seed-if-absent, and the way
//! back after Redis lost the gate (restarted empty, keys expired) or the
//! gate was dropped (switched off, or found behind the rows).
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

use couponlab_sdk::bindings::couponlab::strategy::types::SeedAnswer;
use couponlab_sdk::redis::RedisError;
use couponlab_sdk::sql::{self, IsolationLevel, SqlError};
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
    let mut sold = 0;
    let mut buyers = 0;
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
        store::seed_buyers(coupon_id, &counts, ttl_seconds)?;
        sold += counts.iter().map(|(_, rows)| rows).sum::<i64>();
        buyers += counts.len();
        after = last;
        if counts.len() < PAGE {
            break;
        }
    }
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
    Ok(Set { answer, buyers })
}
