//! READ_COMMITTED (stage 1): in one READ COMMITTED transaction, read the
//! coupon row with a plain SELECT, check the member has none and stock is
//! left, INSERT the issue row, add one to `issued_count` with no guard.
//! Each read sees the latest commit and locks nothing, so requests in flight
//! together all see the same stock left and all write: the coupon is
//! over-issued. That is the lesson; see `couponlab_sdk::plain_reads`.

use couponlab_sdk::plain_reads;
use couponlab_sdk::sql::IsolationLevel;

couponlab_sdk::strategy! {
    struct ReadCommitted { method: "READ_COMMITTED", claims: [Member, Acked], summary: "plain reads in a READ COMMITTED transaction, unguarded update: over-issues under concurrency" }
    fn issue(request) { plain_reads::issue(IsolationLevel::ReadCommitted, &request) }
}
