//! OPTIMISTIC (stage 2): read the coupon row and its `version` without a
//! lock, check the member and the stock, write `issued_count` and the next
//! version `WHERE version = ?` the version read, then INSERT the issue row.
//! If another request committed in between, 0 rows change: the attempt rolls
//! back and the request ends as VERSION_CONFLICT (503). Never over-issued,
//! but under contention many requests are refused while stock is left. See
//! `couponlab_sdk::optimistic`.

use couponlab_sdk::optimistic;

couponlab_sdk::strategy! {
    struct Optimistic { method: "OPTIMISTIC", claims: [Total, Member, Acked], summary: "version-checked update, no lock to read; a conflict is a 503" }
    fn issue(request) { optimistic::issue_once(&request) }
}
