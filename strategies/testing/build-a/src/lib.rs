//! Test fixture TEST_BUILD, build "a": answers at once, naming its build, so
//! a hot-reload test can tell which version served each request.

use couponlab_sdk::{Compensation, Descriptor, IssueRequest, IssueResult, Strategy, compensate};

struct Build;

impl Strategy for Build {
    fn describe() -> Descriptor {
        Descriptor {
            method: "TEST_BUILD".into(),
            summary: "reports its build (test fixture)".into(),
            reservation_set: false,
            result_labels: Vec::new(),
        }
    }

    fn issue(_request: IssueRequest) -> IssueResult {
        IssueResult::issued().detail("build a")
    }

    fn compensate(_request: IssueRequest) -> Compensation {
        compensate::nothing()
    }
}

couponlab_sdk::export_issuer!(Build);
