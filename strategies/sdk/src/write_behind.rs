//! Write-behind (stages 9-10): Redis decides and answers 202; the database
//! catches up in batches, and reconcile repairs what it missed.
//!
//! - [`accept`]: given the rows of the method's member check, one EVALSHA
//!   does duplicate → stock → XADD `coupon:wb:stream:{couponId}` → SADD. Nothing is
//!   written to the database.
//! - [`load_batch`], [`load_entry`]: what the host's loader asks for, as
//!   `INSERT ... ON DUPLICATE KEY UPDATE` so an entry delivered again (its
//!   loader died between commit and XACK) neither fails nor rewrites its row.
//!   The coupon row is not touched: Redis already enforced the total. Each
//!   loaded entry's request is ISSUED.
//! - [`dead_letter`]: an entry delivered too often is UNAVAILABLE; its
//!   reservation stays for reconcile.
//! - [`reconcile`]: the database first, then the Redis set; inserts the
//!   members only Redis has (those with no member row are reported, not
//!   inserted), puts the members only the database has back into the set,
//!   and sets `issued_count` to the row count.
//!
//! Redis is the source of truth: there is no guarded UPDATE in the database
//! to catch an over-issue. If Redis loses reservations whose rows are
//! written (a failover promoted a replica they had not reached), the same
//! stock is handed out again until reconcile puts them back — which the
//! host asks for once it sees its Redis primary change. What was sold
//! meanwhile can only be reported (`stock-excess`).

use std::collections::BTreeSet;

use crate::bindings::couponlab::strategy::types::{
    Confirmation, IssueResult, Outcome, StreamEntry,
};
use crate::outcome::Step;
use crate::sql::{self, IsolationLevel, SqlError, ToSql, Transaction, Value};
use crate::{args, keys, params, redis, reserve, stream};

pub use crate::bindings::couponlab::strategy::types::ReconcileReport;

/// Rows one reconcile INSERT writes (two parameters each).
const INSERT_CHUNK: usize = 500;

const RESTORE: &str = include_str!("../../../lua/restore_reservations.lua");

/// After the member check (`member`: the rows its query found; how it ran,
/// in a transaction or not, is the method's own), reserves and enqueues in
/// one EVALSHA (the stage 6 atomic script with this stream): ACCEPTED (202),
/// DUPLICATE or SOLD_OUT, or UNKNOWN_MEMBER when the check found no row.
/// `method` goes into the entry so the loader hands it back here.
pub fn accept(
    member: &sql::Rows,
    coupon_id: u64,
    member_id: u64,
    method: &str,
) -> Step<IssueResult> {
    if member.rows.is_empty() {
        return Err(IssueResult::of(Outcome::UnknownMember)
            .detail(format!("member {member_id} does not exist")));
    }
    reserve::and_enqueue(coupon_id, member_id, keys::write_behind_stream, method)?;
    Ok(IssueResult::of(Outcome::Accepted))
}

/// Writes every entry in one transaction; an error means none was written.
/// Each entry's request is then issued: its row exists, written now or by
/// an earlier delivery.
pub fn load_batch(entries: &[StreamEntry]) -> Result<Vec<Confirmation>, String> {
    let issues = entries
        .iter()
        .map(issue_of)
        .collect::<Result<Vec<_>, _>>()?;
    let ordered: BTreeSet<(u64, u64)> = issues.iter().copied().collect();
    let tx = sql::begin(IsolationLevel::ReadCommitted).map_err(|e| e.message())?;
    insert_issues(&tx, &ordered.into_iter().collect::<Vec<_>>()).map_err(|e| e.message())?;
    tx.commit().map_err(|e| e.message())?;
    Ok(issues.into_iter().map(issued).collect())
}

/// Writes one entry alone (one autocommit statement).
pub fn load_entry(entry: &StreamEntry) -> Result<Confirmation, String> {
    let (coupon_id, member_id) = issue_of(entry)?;
    sql::execute(&upsert(1), &params![coupon_id, member_id])
        .map_err(|e| format!("entry {}: {}", entry.id, e.message()))?;
    Ok(issued((coupon_id, member_id)))
}

/// The entry was delivered too often: its request is unavailable for now.
/// Nothing is undone: the reservation stays in Redis, and reconcile writes
/// the row.
pub fn dead_letter(entry: &StreamEntry) -> Confirmation {
    let detail = format!(
        "dead-lettered after {} deliveries; reconcile writes it",
        entry.deliveries
    );
    match stream::ids(entry) {
        Some((coupon_id, member_id)) => IssueResult::of(Outcome::Unavailable)
            .detail(detail)
            .confirmation(coupon_id, member_id),
        None => stream::unreadable(detail),
    }
}

fn issued((coupon_id, member_id): (u64, u64)) -> Confirmation {
    IssueResult::issued().confirmation(coupon_id, member_id)
}

/// Repairs the database from the Redis set of `coupon_id`, and the set
/// from the database.
///
/// The database is read first: every row was a Redis member before the
/// loader wrote it, so a row missing from the Redis set read afterwards is a
/// real loss of Redis data, not a member that arrived in between; it goes
/// back into the set.
pub fn reconcile(coupon_id: u64) -> Result<ReconcileReport, String> {
    let tx = sql::begin(IsolationLevel::EngineDefault).map_err(|e| e.message())?;
    let total = sql::scalar(
        &tx.query(
            "SELECT total_count FROM coupons WHERE id = ?",
            &params![coupon_id],
        )
        .map_err(|e| e.message())?,
    )
    .ok_or_else(|| format!("coupon {coupon_id} does not exist"))?
    .max(0) as u64;
    let in_db: BTreeSet<u64> = tx
        .query(
            "SELECT member_id FROM coupon_issues WHERE coupon_id = ?",
            &params![coupon_id],
        )
        .map_err(|e| e.message())?
        .rows
        .iter()
        .filter_map(|row| sql::int(row.first()?).map(|id| id as u64))
        .collect();
    let reply = redis::execute("SMEMBERS", &args![keys::issued(coupon_id)])
        .map_err(|e| format!("Redis: {}", e.message()))?;
    let in_redis: BTreeSet<u64> = reply
        .as_array()
        .unwrap_or_default()
        .iter()
        .filter_map(|member| member.as_str()?.parse().ok())
        .collect();

    let only_in_redis: Vec<u64> = in_redis.difference(&in_db).copied().collect();
    let only_in_db: Vec<u64> = in_db.difference(&in_redis).copied().collect();
    let mut inserted = Vec::new();
    let mut unknown_members = Vec::new();
    for chunk in only_in_redis.chunks(INSERT_CHUNK) {
        let (written, refused) = insert_known(&tx, coupon_id, chunk)?;
        inserted.extend(written);
        unknown_members.extend(refused);
    }
    // The rows read are committed, so their members go back into the set
    // whatever becomes of this transaction.
    let restored = restore(coupon_id, total, &only_in_db)?;
    // On MySQL a locking read: its gap locks make the loader's inserts for
    // this coupon wait until the commit, so the count written is the count
    // at commit. PostgreSQL locks rows, never the gaps between them, and
    // refuses a locking clause on a count: a row loaded while this commits
    // is counted by the next reconcile.
    let count = if on_postgres() {
        "SELECT COUNT(*) FROM coupon_issues WHERE coupon_id = ?"
    } else {
        "SELECT COUNT(*) FROM coupon_issues WHERE coupon_id = ? LOCK IN SHARE MODE"
    };
    let rows = sql::scalar(
        &tx.query(count, &params![coupon_id])
            .map_err(|e| e.message())?,
    )
    .unwrap_or(0)
    .max(0) as u64;
    tx.execute(
        "UPDATE coupons SET issued_count = ? WHERE id = ?",
        &params![rows, coupon_id],
    )
    .map_err(|e| e.message())?;
    tx.commit().map_err(|e| e.message())?;
    Ok(ReconcileReport {
        inserted,
        only_in_db,
        unknown_members,
        restored: restored.members,
        remaining_before: restored.remaining_before,
        remaining_after: restored.remaining_after,
        issued_count: rows,
        total,
        stock_excess: rows.saturating_sub(total),
    })
}

/// What putting members back into the reservation set did.
struct Restored {
    members: Vec<u64>,
    remaining_before: i64,
    remaining_after: i64,
}

/// Puts `members` (issue rows the set lacked) back into the reservation
/// set, and the total if Redis lost it, in one script: a reservation
/// decided meanwhile sees the set either before or after, never halfway.
fn restore(coupon_id: u64, total: u64, members: &[u64]) -> Result<Restored, String> {
    let argv: Vec<String> = std::iter::once(total.to_string())
        .chain(members.iter().map(u64::to_string))
        .collect();
    let reply = redis::eval(
        RESTORE,
        &args![keys::issued(coupon_id), keys::total(coupon_id)],
        &argv,
    )
    .map_err(|e| format!("Redis: {}", e.message()))?;
    let numbers: Vec<i64> = reply
        .as_array()
        .unwrap_or_default()
        .iter()
        .filter_map(|n| n.as_int())
        .collect();
    let [before, after, total, put_back @ ..] = numbers.as_slice() else {
        return Err(format!("unexpected restore reply {reply}"));
    };
    Ok(Restored {
        members: put_back.iter().map(|&m| m as u64).collect(),
        remaining_before: total - before,
        remaining_after: total - after,
    })
}

/// `(coupon_id, member_id)` of an entry, or why it cannot be loaded.
fn issue_of(entry: &StreamEntry) -> Result<(u64, u64), String> {
    stream::ids(entry).ok_or_else(|| format!("entry {} has no couponId/memberId", entry.id))
}

/// Writes the issues of `members` (ascending) but those with no member row,
/// which the foreign key would refuse: a member deleted while Redis held
/// its reservation, or an id that never was one. Answers (written,
/// refused). The members are looked up first, so no insert is refused:
/// PostgreSQL ends the whole transaction at a refused statement ("current
/// transaction is aborted"), where MySQL rolls back the statement alone.
/// A member deleted between the look-up and the insert fails the
/// reconcile, which writes nothing and can run again.
fn insert_known(
    tx: &Transaction,
    coupon_id: u64,
    members: &[u64],
) -> Result<(Vec<u64>, Vec<u64>), String> {
    let known = existing_members(tx, members).map_err(|e| e.message())?;
    let (written, refused): (Vec<u64>, Vec<u64>) =
        members.iter().partition(|member| known.contains(member));
    let issues: Vec<(u64, u64)> = written.iter().map(|&m| (coupon_id, m)).collect();
    insert_issues(tx, &issues).map_err(|err| match err {
        SqlError::ForeignKey(_) => format!(
            "a member was deleted while this reconcile ran, and nothing was written: reconcile again ({})",
            err.message()
        ),
        err => err.message(),
    })?;
    Ok((written, refused))
}

/// Which of `members` have a member row.
fn existing_members(tx: &Transaction, members: &[u64]) -> Result<BTreeSet<u64>, SqlError> {
    if members.is_empty() {
        return Ok(BTreeSet::new());
    }
    let marks = vec!["?"; members.len()].join(", ");
    let params: Vec<Value> = members.iter().map(ToSql::to_sql).collect();
    let rows = tx.query(
        &format!("SELECT id FROM members WHERE id IN ({marks})"),
        &params,
    )?;
    Ok(rows
        .rows
        .iter()
        .filter_map(|row| sql::int(row.first()?).map(|id| id as u64))
        .collect())
}

/// One multi-row upsert, in (coupon, member) order so two writers of the
/// same rows lock them in the same order.
fn insert_issues(tx: &Transaction, issues: &[(u64, u64)]) -> Result<(), SqlError> {
    if issues.is_empty() {
        return Ok(());
    }
    let params: Vec<Value> = issues
        .iter()
        .flat_map(|&(coupon_id, member_id)| params![coupon_id, member_id])
        .collect();
    tx.execute(&upsert(issues.len()), &params).map(drop)
}

/// `INSERT ... ON DUPLICATE KEY UPDATE` (PostgreSQL: `ON CONFLICT ... DO
/// NOTHING`) of `rows` issues; a row that exists is left exactly as it is.
fn upsert(rows: usize) -> String {
    let values = vec!["(?, ?)"; rows].join(", ");
    let existing = if on_postgres() {
        "ON CONFLICT (coupon_id, member_id) DO NOTHING"
    } else {
        "ON DUPLICATE KEY UPDATE member_id = member_id"
    };
    format!("INSERT INTO coupon_issues (coupon_id, member_id) VALUES {values} {existing}")
}

/// Whether the lab's database is PostgreSQL, whose SQL differs from
/// MySQL's in the two statements above.
fn on_postgres() -> bool {
    sql::engine().name == "postgresql"
}

/// Implements a `write-behind-issuer` crate's `write-behind` export with
/// [`load_batch`], [`load_entry`], [`dead_letter`] and [`reconcile`]: the
/// write-behind methods differ only in how they accept a request, not in how
/// the database catches up.
///
/// ```ignore
/// couponlab_sdk::write_behind_loader!(RedisWriteBehind: loader::Guest);
/// ```
#[macro_export]
macro_rules! write_behind_loader {
    ($ty:ident: $guest:path) => {
        impl $guest for $ty {
            fn load_batch(
                entries: ::std::vec::Vec<$crate::StreamEntry>,
            ) -> ::std::result::Result<::std::vec::Vec<$crate::Confirmation>, ::std::string::String>
            {
                $crate::write_behind::load_batch(&entries)
            }

            fn load_entry(
                entry: $crate::StreamEntry,
            ) -> ::std::result::Result<$crate::Confirmation, ::std::string::String> {
                $crate::write_behind::load_entry(&entry)
            }

            fn dead_letter(entry: $crate::StreamEntry) -> $crate::Confirmation {
                $crate::write_behind::dead_letter(&entry)
            }

            fn reconcile(
                coupon_id: u64,
            ) -> ::std::result::Result<$crate::write_behind::ReconcileReport, ::std::string::String>
            {
                $crate::write_behind::reconcile(coupon_id)
            }
        }
    };
}
