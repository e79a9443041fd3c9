//! OPTIMISTIC and OPTIMISTIC_RETRY (stage 2): read without locking, then let
//! the write prove that nothing changed since the read.
//!
//! One attempt: read the coupon row and its `version` (plain SELECT), check
//! the member has none and stock is left, then `UPDATE coupons SET
//! issued_count = ?, version = ? WHERE id = ? AND version = ?` with the
//! values derived from the read, then INSERT the issue row. If another
//! request committed in between, the version moved, the UPDATE changes 0
//! rows, and the attempt rolls back and ends as VERSION_CONFLICT (503). What
//! was read is trusted only because the version proves it is still current,
//! so the total holds without any lock held across the read.
//!
//! The guarded UPDATE comes before the INSERT, so a conflicting attempt has
//! written nothing, and issue rows are inserted only under the coupon row's
//! lock. The other order (the seed's JPA flush order) rolls back inserts on
//! every conflict, and InnoDB hands the requests waiting on a rolled-back
//! duplicate key gap locks on the same gap: when members ask twice at once,
//! two such waiters that then insert deadlock each other.
//!
//! The attempt runs at READ COMMITTED: the version guard does the protecting,
//! and at this level a moved version shows up as "0 rows changed" on MySQL
//! and MariaDB alike, rather than as an error on servers that enforce
//! snapshot isolation at REPEATABLE READ (MariaDB's
//! `innodb_snapshot_isolation`).

use crate::bindings::couponlab::strategy::types::{IssueRequest, IssueResult, Outcome};
use crate::outcome::{Step, settle};
use crate::plain_reads::{insert_issue, read_coupon, refuse_second_coupon, refuse_when_sold_out};
use crate::sql::{self, IsolationLevel};
use crate::{clock, params};

/// One attempt; a conflict ends the request (OPTIMISTIC).
pub fn issue_once(request: &IssueRequest) -> IssueResult {
    settle(attempt(request))
}

fn attempt(request: &IssueRequest) -> Step<IssueResult> {
    let (coupon_id, member_id) = (request.coupon_id, request.member_id);
    let tx = sql::begin(IsolationLevel::ReadCommitted)?;
    let coupon = read_coupon(&tx, coupon_id)?;
    refuse_second_coupon(&tx, coupon_id, member_id)?;
    refuse_when_sold_out(&coupon, coupon_id)?;
    let updated = tx.execute(
        "UPDATE coupons SET issued_count = ?, version = ? WHERE id = ? AND version = ?",
        &params![
            coupon.issued + 1,
            coupon.version + 1,
            coupon_id,
            coupon.version
        ],
    )?;
    if updated.rows_affected == 0 {
        tx.rollback()?;
        return Err(IssueResult::of(Outcome::VersionConflict).detail(format!(
            "optimistic version conflict: coupon {coupon_id} moved past version {} \
             between this request's read and its update (another request issued first)",
            coupon.version
        )));
    }
    insert_issue(&tx, coupon_id, member_id)?;
    tx.commit()?;
    Ok(IssueResult::issued())
}

/// How often, and how patiently, OPTIMISTIC_RETRY tries again.
pub struct RetryPolicy {
    /// Attempts after the first; a conflict on the last one ends the request.
    pub max_retries: u32,
    /// The backoff ceiling before the first retry; it doubles per retry.
    pub first_backoff_ms: u32,
    /// The ceiling stops doubling here.
    pub max_backoff_ms: u32,
}

impl RetryPolicy {
    /// The pause before retry `retry` (1-based): half the ceiling, plus a
    /// random share of the other half, so requests that conflicted together
    /// do not all come back together and conflict again.
    fn backoff_ms(&self, retry: u32, member_id: u64) -> u32 {
        // The shift is capped only to stay defined; the ceiling stops far sooner.
        let doubled = self
            .first_backoff_ms
            .saturating_mul(1 << (retry - 1).min(16));
        let ceiling = doubled.min(self.max_backoff_ms);
        let half = ceiling / 2;
        let seed = clock::now_millis() ^ member_id.rotate_left(32) ^ u64::from(retry);
        half + (splitmix64(seed) % u64::from(ceiling - half + 1)) as u32
    }
}

/// Attempts until one does not conflict or the retries run out
/// (OPTIMISTIC_RETRY). Each attempt's transaction is over before the pause,
/// and the pause holds neither a connection nor a host thread.
pub fn issue_with_retries(request: &IssueRequest, policy: &RetryPolicy) -> IssueResult {
    let mut retries = 0;
    loop {
        let result = issue_once(request);
        if result.outcome != Outcome::VersionConflict {
            return result.retries(retries);
        }
        if retries == policy.max_retries {
            let detail = format!(
                "{}; gave up after {retries} retries",
                result.detail.as_deref().unwrap_or("version conflict")
            );
            return result.retries(retries).detail(detail);
        }
        retries += 1;
        clock::sleep(policy.backoff_ms(retries, request.member_id));
    }
}

/// A well-mixed 64-bit value from any seed (SplitMix64): jitter needs spread,
/// not secrecy.
fn splitmix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
