//! REPEATABLE_READ (stage 1): the READ_COMMITTED flow in a REPEATABLE READ
//! transaction, the InnoDB default. The first plain SELECT fixes a snapshot
//! that locks nothing; the UPDATE, a locking read, sees the latest row and
//! adds one to it without looking at the total. Requests in flight together
//! all read stock left from their snapshots and all write: the coupon is
//! over-issued, as under READ COMMITTED. See `couponlab_sdk::plain_reads`.

use couponlab_sdk::plain_reads;
use couponlab_sdk::sql::IsolationLevel;

couponlab_sdk::strategy! {
    struct RepeatableRead { method: "REPEATABLE_READ", claims: [Member, Acked], summary: "plain reads in a REPEATABLE READ transaction, unguarded update: over-issues under concurrency" }
    fn issue(request) { plain_reads::issue(IsolationLevel::RepeatableRead, &request) }
}
