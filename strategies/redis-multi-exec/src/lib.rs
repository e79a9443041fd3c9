//! REDIS_MULTI_EXEC (stage 3): `MULTI SCARD SADD EXEC` on a dedicated
//! connection. The transaction runs both commands back to back, but it cannot
//! branch: SADD happens whatever SCARD says. The component decides afterwards
//! from EXEC's replies: SADD 0 means the member was already reserved; a count
//! before the add at or above the total means this reservation is over stock
//! and is taken back with SREM. Then the shared DB confirm step.

use couponlab_sdk::redis::Connection;
use couponlab_sdk::{
    IssueResult, Outcome, Reply, Step, args, compensate, confirm, coupon, keys, settle,
    unanswered_write,
};

fn issue(coupon_id: u64, member_id: u64) -> Step<IssueResult> {
    let total = coupon::total(coupon_id)?;
    let issued = keys::issued(coupon_id);

    // MULTI needs connection affinity; the connection goes back to the pool
    // before the database confirm.
    let replies = Connection::open()?
        .pipeline(&[
            ("MULTI", args![]),
            ("SCARD", args![issued]),
            ("SADD", args![issued, member_id]),
            ("EXEC", args![]),
        ])
        // A transaction whose answer was lost may have reserved: settled later.
        .map_err(unanswered_write)?;
    let exec = replies.last().unwrap_or(&Reply::Nil);
    let (reserved_before, added) = match exec.as_array() {
        Some([scard, sadd]) => (scard.expect_int("SCARD")?, sadd.expect_int("SADD")?),
        _ => {
            return Err(IssueResult::of(Outcome::Unavailable)
                .detail(format!("unexpected EXEC reply {exec}")));
        }
    };

    if added == 0 {
        return Err(IssueResult::of(Outcome::Duplicate));
    }
    if reserved_before >= total as i64 {
        return Err(confirm::release(
            coupon_id,
            member_id,
            IssueResult::of(Outcome::SoldOut),
        ));
    }
    Ok(confirm::confirm_or_release(coupon_id, member_id))
}

couponlab_sdk::strategy! {
    struct RedisMultiExec { method: "REDIS_MULTI_EXEC", claims: [Total, Member, Acked], summary: "MULTI SCARD SADD EXEC, decide from the replies (SREM when over stock), then the DB confirm step", reservation_set: true }
    fn issue(request) { settle(issue(request.coupon_id, request.member_id)) }
    fn compensate(request) { compensate::release_unless_issued(request.coupon_id, request.member_id) }
}
