//! Test fixture TEST_SCRIPT: answers what the request scripts — the outcome
//! named by its idempotency key (`SOLD_OUT`, `ISSUED`, ...) after sleeping
//! `quantity` milliseconds — so a test knows every figure the result
//! endpoint should report.

use couponlab_sdk::{IssueResult, Outcome, clock};

couponlab_sdk::strategy! {
    struct Script { method: "TEST_SCRIPT", claims: [], summary: "answers as scripted (test fixture)" }
    fn issue(request) {
        clock::sleep(request.quantity);
        let outcome = match request.idempotency_key.as_deref() {
            Some("ISSUED") => Outcome::Issued,
            Some("ACCEPTED") => Outcome::Accepted,
            Some("SOLD_OUT") => Outcome::SoldOut,
            Some("DUPLICATE") => Outcome::Duplicate,
            other => {
                return IssueResult::of(Outcome::Unavailable)
                    .detail(format!("no script for {other:?}"));
            }
        };
        IssueResult::of(outcome)
    }
}
