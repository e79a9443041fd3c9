//! Test fixture TEST_PHANTOM: claims `acked` and answers ISSUED to every
//! request without writing a row: the canary must refuse it.

use couponlab_sdk::IssueResult;

couponlab_sdk::strategy! {
    struct Phantom { method: "TEST_PHANTOM", claims: [Total, Member, Acked], summary: "answers ISSUED without a row (test fixture)" }
    fn issue(_request) { IssueResult::issued() }
}
