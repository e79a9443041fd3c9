//! Test fixture TEST_PROBE: exercises the WIT capabilities end to end and
//! reports what it saw in the response detail. The scenario is chosen by the
//! request's idempotency key; keys and rows are named after the coupon id so
//! concurrent tests stay apart.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use couponlab_sdk::redis::{self, Connection};
use couponlab_sdk::sql::{self, IsolationLevel, SqlError};
use couponlab_sdk::{IssueRequest, IssueResult, Outcome, args, clock, keys, params};

/// Raised by every "memory-reset" call: each call must find it at zero.
static LEFT_BEHIND: AtomicU64 = AtomicU64::new(0);

/// Host pages apart, so that every marker of a "scattered-memory-reset"
/// call dirties a run of pages of its own.
const PAGE_STRIDE: usize = 2 * 4096;
/// More separate dirty runs than a reset's page scan gathers at once (64),
/// inside the part of a slot kept resident (2 MiB): the reset must go on
/// scanning where it stopped, or hand the pages back to the kernel.
const SCATTERED_RUNS: usize = 160;
static SCATTERED: [AtomicU8; SCATTERED_RUNS * PAGE_STRIDE] =
    [const { AtomicU8::new(0) }; SCATTERED_RUNS * PAGE_STRIDE];

couponlab_sdk::strategy! {
    struct Probe { method: "TEST_PROBE", claims: [], summary: "WIT round trips (test fixture)" }
    fn issue(request) {
        let scenario = request.idempotency_key.clone().unwrap_or_default();
        match run(&scenario, &request) {
            Ok(seen) => IssueResult::issued().detail(seen),
            Err(problem) => IssueResult::of(Outcome::Unavailable).detail(problem),
        }
    }
}

fn run(scenario: &str, request: &IssueRequest) -> Result<String, String> {
    let (a, b) = (request.coupon_id, request.member_id);
    match scenario {
        // A nested reply from EXEC, on a dedicated connection, on keys of
        // this coupon's own (the components' Redis user reaches `coupon:*`),
        // under its one hash tag.
        "exec" => {
            let conn = Connection::open().map_err(|e| e.message().to_string())?;
            let tag = keys::tag(a);
            let (key, counter, set) = (
                format!("coupon:probe:{tag}:k"),
                format!("coupon:probe:{tag}:n"),
                format!("coupon:probe:{tag}:s"),
            );
            for (name, args) in [
                ("MULTI", vec![]),
                ("SET", args![key, "v"]),
                ("INCR", args![counter]),
                ("SADD", args![set, 1, 2]),
                ("SMEMBERS", args![set]),
            ] {
                conn.execute(name, &args)
                    .map_err(|e| e.message().to_string())?;
            }
            Ok(conn
                .execute("EXEC", &[])
                .map_err(|e| e.message().to_string())?
                .to_string())
        }
        // Whatever a call leaves in its linear memory is gone for the next:
        // a static the previous call raised reads as zero again, however the
        // host's instance pool keeps its pages.
        "memory-reset" => {
            let seen = LEFT_BEHIND.fetch_add(1, Ordering::Relaxed);
            let mut heap = vec![0u8; 1 << 20];
            heap.iter_mut().for_each(|byte| *byte = 0xAB);
            std::hint::black_box(&heap);
            Ok(format!("found {seen}"))
        }
        // Markers in many separate pages: each call must find none.
        "scattered-memory-reset" => {
            let markers = (0..SCATTERED_RUNS).map(|run| &SCATTERED[run * PAGE_STRIDE]);
            let seen = markers.filter(|marker| marker.swap(0xAB, Ordering::Relaxed) != 0);
            Ok(format!("found {}", seen.count()))
        }
        // A nested Lua table reply.
        "lua-table" => {
            let script = "return {1, 'two', {3, {'four'}}, redis.status_reply('FINE'), false}";
            Ok(redis::eval(script, &[], &[])
                .map_err(|e| e.message().to_string())?
                .to_string())
        }
        // A transaction dropped without commit must leave nothing behind.
        "tx-drop" => {
            let tx =
                sql::begin(IsolationLevel::ReadCommitted).map_err(|e| e.message().to_string())?;
            tx.execute(
                "INSERT INTO coupon_issues (coupon_id, member_id) VALUES (?, ?)",
                &params![a, b],
            )
            .map_err(|e| e.message().to_string())?;
            drop(tx);
            let rows = sql::query(
                "SELECT COUNT(*) FROM coupon_issues WHERE coupon_id = ?",
                &params![a],
            )
            .map_err(|e| e.message().to_string())?;
            Ok(format!(
                "rows after drop: {}",
                sql::scalar(&rows).unwrap_or(-1)
            ))
        }
        // The same issue row twice.
        "duplicate-key" => {
            let insert = "INSERT INTO coupon_issues (coupon_id, member_id) VALUES (?, ?)";
            sql::execute(insert, &params![a, b]).map_err(|e| e.message().to_string())?;
            Ok(kind(sql::execute(insert, &params![a, b]).err()))
        }
        // An issue row for a member that does not exist.
        "foreign-key" => {
            let insert = "INSERT INTO coupon_issues (coupon_id, member_id) VALUES (?, ?)";
            Ok(kind(sql::execute(insert, &params![a, b]).err()))
        }
        // Two transactions of this one request want the same row lock.
        "lock-wait" => {
            let lock = "SELECT id FROM coupons WHERE id = ? FOR UPDATE";
            let first =
                sql::begin(IsolationLevel::RepeatableRead).map_err(|e| e.message().to_string())?;
            first
                .query(lock, &params![a])
                .map_err(|e| e.message().to_string())?;
            let second =
                sql::begin(IsolationLevel::RepeatableRead).map_err(|e| e.message().to_string())?;
            Ok(kind(second.query(lock, &params![a]).err()))
        }
        // Lock coupon a then coupon b; a concurrent "deadlock" request with
        // the ids swapped locks them in the other order.
        "deadlock" => {
            let touch = "UPDATE coupons SET version = version + 1 WHERE id = ?";
            let tx =
                sql::begin(IsolationLevel::RepeatableRead).map_err(|e| e.message().to_string())?;
            tx.execute(touch, &params![a])
                .map_err(|e| e.message().to_string())?;
            clock::sleep(300);
            match tx.execute(touch, &params![b]) {
                Ok(_) => {
                    tx.commit().map_err(|e| e.message().to_string())?;
                    Ok("committed".into())
                }
                Err(err) => Ok(kind(Some(err))),
            }
        }
        // Which engine answers, with its settings.
        "engine" => {
            let engine = sql::engine();
            let settings: Vec<String> = engine
                .settings
                .iter()
                .map(|(name, value)| format!("{name}={value}"))
                .collect();
            Ok(format!("{} {}", engine.name, settings.join(",")))
        }
        // A write to coupon a's row after another transaction of this
        // request changed it since this one's snapshot: a lost update, or
        // the engine's refusal.
        "stale-write" => {
            let touch = "UPDATE coupons SET version = version + 1 WHERE id = ?";
            let stale =
                sql::begin(IsolationLevel::EngineDefault).map_err(|e| e.message().to_string())?;
            stale
                .query("SELECT version FROM coupons WHERE id = ?", &params![a])
                .map_err(|e| e.message().to_string())?;
            sql::execute(touch, &params![a]).map_err(|e| e.message().to_string())?;
            match stale.execute(touch, &params![a]) {
                Ok(_) => {
                    stale.commit().map_err(|e| e.message().to_string())?;
                    Ok("committed".into())
                }
                Err(err) => Ok(kind(Some(err))),
            }
        }
        other => Err(format!("unknown probe scenario {other:?}")),
    }
}

/// The WIT case of an SQL error, or "ok" when there was none.
fn kind(err: Option<SqlError>) -> String {
    match err {
        None => "ok",
        Some(SqlError::Deadlock(_)) => "deadlock",
        Some(SqlError::LockWaitTimeout(_)) => "lock-wait-timeout",
        Some(SqlError::SerializationFailure(_)) => "serialization-failure",
        Some(SqlError::DuplicateKey(_)) => "duplicate-key",
        Some(SqlError::ForeignKey(_)) => "foreign-key",
        Some(SqlError::Connection(_)) => "connection",
        Some(SqlError::Indeterminate(_)) => "indeterminate",
        Some(SqlError::Refused(_)) => "refused",
        Some(SqlError::Other(_)) => "other",
    }
    .to_string()
}
