//! IN_PROCESS_LOCK: Java's `synchronized` around the issue. A lock of the
//! serving process, named after the coupon, taken with a 2 s wait (503
//! LOCK_WAIT_TIMEOUT), then stage 1's plain check-and-insert (READ
//! COMMITTED reads, INSERT, `issued_count + 1` unguarded), then released;
//! the host releases it too when a call ends without doing so. It keeps
//! both invariants on one host. On two hosts each has its own lock: a
//! request on each runs the check-and-insert at once, both read the stock
//! left, and the coupon is over-issued — only the UNIQUE key still holds.

use couponlab_sdk::sql::IsolationLevel;
use couponlab_sdk::{IssueResult, Outcome, Step, keys, plain_reads, process_lock, settle};

/// How long a request waits for the lock.
const WAIT_MS: u32 = 2_000;

fn issue(request: &couponlab_sdk::IssueRequest) -> Step<IssueResult> {
    let name = keys::lock(request.coupon_id);
    match process_lock::acquire(&name, WAIT_MS) {
        Ok(true) => {}
        Ok(false) => {
            return Err(IssueResult::of(Outcome::LockWaitTimeout)
                .detail(format!("the lock was not free within {WAIT_MS} ms")));
        }
        Err(refused) => return Err(IssueResult::of(Outcome::Unavailable).detail(refused)),
    }
    let result = plain_reads::issue(IsolationLevel::ReadCommitted, request);
    process_lock::release(&name);
    Ok(result)
}

couponlab_sdk::strategy! {
    struct InProcessLock { method: "IN_PROCESS_LOCK", claims: [Total, Member, Acked], summary: "a lock of the serving process (synchronized), the plain check-and-insert under it: holds on one host, over-issues on two" }
    fn issue(request) { settle(issue(&request)) }
}
