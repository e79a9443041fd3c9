//! REDIS_WATCH (stage 3): optimistic locking in Redis. On a dedicated
//! connection, WATCH the reservation set, read it (SISMEMBER, SCARD), decide,
//! then `MULTI SADD EXEC`. If any client changed the set after the WATCH,
//! EXEC answers nil and nothing was added: read and try again, at most
//! [`MAX_RETRIES`] times, then give up with a 503 (VERSION_CONFLICT). Then the
//! shared DB confirm step.

use couponlab_sdk::redis::Connection;
use couponlab_sdk::{
    IssueResult, Outcome, Step, args, compensate, confirm, coupon, keys, settle, unanswered_write,
};

/// Retries after a nil EXEC, as in the seed: 11 attempts in all.
const MAX_RETRIES: u32 = 10;

fn issue(coupon_id: u64, member_id: u64, retries: &mut u32) -> Step<IssueResult> {
    let total = coupon::total(coupon_id)?;
    reserve(coupon_id, member_id, total, retries)?;
    Ok(confirm::confirm_or_release(coupon_id, member_id))
}

/// Reserves the member in `coupon:issued:{id}`, counting in `retries` the
/// attempts lost to a concurrent change.
fn reserve(coupon_id: u64, member_id: u64, total: u64, retries: &mut u32) -> Step<()> {
    let issued = keys::issued(coupon_id);
    // WATCH is connection state. Dropping the connection on the way out (also
    // on an early return) gives it back to the pool unwatched.
    let conn = Connection::open()?;
    loop {
        let read = conn.pipeline(&[
            ("WATCH", args![issued]),
            ("SISMEMBER", args![issued, member_id]),
            ("SCARD", args![issued]),
        ])?;
        let [_, already_reserved, reserved] = read.as_slice() else {
            return Err(IssueResult::of(Outcome::Unavailable).detail(format!(
                "expected 3 replies to WATCH, SISMEMBER, SCARD; got {}",
                read.len()
            )));
        };
        if already_reserved.expect_int("SISMEMBER")? == 1 {
            return Err(IssueResult::of(Outcome::Duplicate));
        }
        if reserved.expect_int("SCARD")? >= total as i64 {
            return Err(IssueResult::of(Outcome::SoldOut));
        }

        let written = conn
            .pipeline(&[
                ("MULTI", args![]),
                ("SADD", args![issued, member_id]),
                ("EXEC", args![]),
            ])
            // A transaction whose answer was lost may have reserved: settled later.
            .map_err(unanswered_write)?;
        match written.last() {
            Some(exec) if exec.as_array().is_some() => return Ok(()),
            Some(exec) if exec.is_nil() => {}
            other => {
                return Err(IssueResult::of(Outcome::Unavailable).detail(format!(
                    "unexpected EXEC reply {}",
                    other.map_or("(none)".to_string(), ToString::to_string)
                )));
            }
        }
        if *retries == MAX_RETRIES {
            return Err(IssueResult::of(Outcome::VersionConflict).detail(format!(
                "WATCH: {issued} changed between WATCH and EXEC in all {} attempts",
                MAX_RETRIES + 1
            )));
        }
        *retries += 1;
    }
}

couponlab_sdk::strategy! {
    struct RedisWatch { method: "REDIS_WATCH", claims: [Total, Member, Acked], summary: "WATCH, SISMEMBER + SCARD, MULTI SADD EXEC; retry on a nil EXEC (at most 10), then the DB confirm step", reservation_set: true }
    fn issue(request) {
        let mut retries = 0;
        settle(issue(request.coupon_id, request.member_id, &mut retries)).retries(retries)
    }
    fn compensate(request) { compensate::release_unless_issued(request.coupon_id, request.member_id) }
}
