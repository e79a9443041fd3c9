//! MYSQL_NAMED_LOCK: the named-lock recipe of Spring courses.
//! `GET_LOCK('coupon:lock:{id}', 2 s)` on a session of the call's own (503
//! LOCK_WAIT_TIMEOUT when not taken in time); under it, stage 1's plain
//! check-and-insert (READ COMMITTED reads, INSERT, `issued_count + 1` with
//! no guard) in a transaction on another connection; then
//! `RELEASE_LOCK`. It keeps both invariants, on any number of hosts of one
//! database server: the database holds the lock. Its cost is connections:
//! every request waiting
//! for the lock holds one, and the holder needs a second for its
//! transaction. From one pool (`COUPONLAB_LOCK_POOL_SIZE=0`) the waiters
//! can hold them all, and the holder's transaction waits for a connection
//! nobody gives back until the waits time out; a pool of its own for the
//! locks is the recipe's fix.
//!
//! On a Galera cluster the lock is each node's own, so it claims only
//! `member` and `acked` there (`engine_claims`): the total rests on
//! certification, which lets some second writers through.

use couponlab_sdk::sql::IsolationLevel;
use couponlab_sdk::{IssueResult, Outcome, Step, keys, named_lock, plain_reads, settle};

/// How long a request waits for the lock.
const WAIT_MS: u32 = 2_000;

fn issue(request: &couponlab_sdk::IssueRequest) -> Step<IssueResult> {
    let name = keys::lock(request.coupon_id);
    if !named_lock::acquire(&name, WAIT_MS)? {
        return Err(IssueResult::of(Outcome::LockWaitTimeout)
            .detail(format!("the named lock was not free within {WAIT_MS} ms")));
    }
    let result = plain_reads::issue(IsolationLevel::ReadCommitted, request);
    // A release that fails leaves the lock to the host, which releases it
    // when the call ends; what the transaction did stands either way.
    Ok(match named_lock::release(&name) {
        Ok(_) => result,
        Err(_) => result.label("releaseFailed", 1),
    })
}

couponlab_sdk::strategy! {
    struct MysqlNamedLock {
        method: "MYSQL_NAMED_LOCK", claims: [Total, Member, Acked],
        summary: "GET_LOCK on a session of its own, the plain check-and-insert under it, RELEASE_LOCK; waiters hold connections",
        engine_claims: [{
            engine: "galera", claims: [Member, Acked],
            why: "GET_LOCK is per node on Galera: two hosts on two nodes hold one name at once and both run the unguarded check-and-insert; certification refuses most second writers, not all (one over 50 in every round across three nodes: docs/learning/19-past-one-node.md)",
        }],
    }
    fn issue(request) { settle(issue(&request)) }
}
