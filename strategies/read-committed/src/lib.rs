//! READ_COMMITTED (stage 1): in one READ COMMITTED transaction, read the
//! coupon row with a plain SELECT, check the member has none and stock is
//! left, INSERT the issue row, add one to `issued_count` with no guard.
//! Each read sees the latest commit and locks nothing, so requests in flight
//! together all see the same stock left and all write: the coupon is
//! over-issued. That is the lesson; see `couponlab_sdk::plain_reads`.

use couponlab_sdk::sql::IsolationLevel;
use couponlab_sdk::{
    Compensation, Descriptor, IssueRequest, IssueResult, Strategy, compensate, plain_reads,
};

struct ReadCommitted;

impl Strategy for ReadCommitted {
    fn describe() -> Descriptor {
        Descriptor {
            method: "READ_COMMITTED".into(),
            summary: "plain reads in a READ COMMITTED transaction, unguarded update: over-issues under concurrency".into(),
        }
    }

    fn issue(request: IssueRequest) -> IssueResult {
        plain_reads::issue(IsolationLevel::ReadCommitted, &request)
    }

    fn compensate(_request: IssueRequest) -> Compensation {
        compensate::nothing()
    }
}

couponlab_sdk::export_issuer!(ReadCommitted);
