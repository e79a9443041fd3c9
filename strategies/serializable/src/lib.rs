//! SERIALIZABLE (stage 1): the READ_COMMITTED flow in a SERIALIZABLE
//! transaction. InnoDB turns each plain SELECT into a shared-lock read, so
//! two requests that read the coupon row both hold its shared lock, and each
//! waits for the other's to release before its UPDATE can take the exclusive
//! one: a deadlock, and the database rolls one back (503 DEADLOCK). The total
//! holds; the price is those 503s. See `couponlab_sdk::plain_reads`.

use couponlab_sdk::plain_reads;
use couponlab_sdk::sql::IsolationLevel;

couponlab_sdk::strategy! {
    struct Serializable { method: "SERIALIZABLE", claims: [Total, Member, Acked], summary: "plain reads in a SERIALIZABLE transaction (shared locks): never over-issues, deadlocks under concurrency" }
    fn issue(request) { plain_reads::issue(IsolationLevel::Serializable, &request) }
}
