//! Test fixture TEST_SCRIPT: answers what the request scripts — the outcome
//! named by its idempotency key (`SOLD_OUT`, `ISSUED`, ...) after sleeping
//! `quantity` milliseconds — so a test knows every figure the result
//! endpoint should report.

use couponlab_sdk::{
    Compensation, Descriptor, IssueRequest, IssueResult, Outcome, Strategy, clock, compensate,
};

struct Script;

impl Strategy for Script {
    fn describe() -> Descriptor {
        Descriptor {
            method: "TEST_SCRIPT".into(),
            summary: "answers as scripted (test fixture)".into(),
            reservation_set: false,
            result_labels: Vec::new(),
        }
    }

    fn issue(request: IssueRequest) -> IssueResult {
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

    fn compensate(_request: IssueRequest) -> Compensation {
        compensate::nothing()
    }
}

couponlab_sdk::export_issuer!(Script);
