//! Test fixture TEST_GALERA_NAMED_LOCK: MYSQL_NAMED_LOCK's check-and-insert
//! under `GET_LOCK`, which still claims `total` on Galera, where the lock is
//! each node's own. It pauses between the plain read of the stock and the
//! write ([`PAUSE_MS`]), as TEST_UNGUARDED does, so that holders of the name on two nodes
//! at once both see stock left and the later writer comes after the other
//! node's commit was applied, with nothing left for certification to
//! refuse: the canary, its requests spread over the nodes, must refuse it
//! for over-issuing. On one server the lock makes it correct.

use couponlab_sdk::plain_reads::{
    read_coupon, refuse_second_coupon, refuse_when_sold_out, write_issue,
};
use couponlab_sdk::sql::{self, IsolationLevel};
use couponlab_sdk::{IssueResult, Outcome, Step, clock, keys, named_lock, settle};

/// The pause between the read and the write: long beside the time a
/// commit takes to reach the other nodes (tens of ms on a busy machine),
/// so that of two holders on two nodes the later one writes after the
/// other's commit was applied. Measured, 20 canaries each: refused in 17
/// at 20 ms, in 18 at 100 ms; in the others certification refused every
/// second writer at the sold-out boundary.
const PAUSE_MS: u32 = 100;

fn issue(coupon_id: u64, member_id: u64) -> Step<IssueResult> {
    let name = keys::lock(coupon_id);
    if !named_lock::acquire(&name, 2_000)? {
        return Err(IssueResult::of(Outcome::LockWaitTimeout));
    }
    let tx = sql::begin(IsolationLevel::ReadCommitted)?;
    let coupon = read_coupon(&tx, coupon_id)?;
    refuse_second_coupon(&tx, coupon_id, member_id)?;
    refuse_when_sold_out(&coupon, coupon_id)?;
    clock::sleep(PAUSE_MS);
    write_issue(&tx, coupon_id, member_id)?;
    tx.commit()?;
    // The host releases what a call still holds when it ends.
    let _ = named_lock::release(&name);
    Ok(IssueResult::issued())
}

couponlab_sdk::strategy! {
    struct GaleraNamedLock {
        method: "TEST_GALERA_NAMED_LOCK", claims: [Total, Member, Acked],
        summary: "GET_LOCK, then a paused check-and-insert, claiming the total on Galera too (test fixture)",
        engine_claims: [{
            engine: "galera", claims: [Total, Member, Acked],
            why: "a test fixture that claims on Galera what GET_LOCK, each node's own, cannot keep there",
        }],
    }
    fn issue(request) { settle(issue(request.coupon_id, request.member_id)) }
}
