//! Test fixture TEST_SPIN: never returns, so the host's deadline must stop it.

use couponlab_sdk::{Compensation, Descriptor, IssueRequest, IssueResult, Strategy, compensate};

struct Spin;

impl Strategy for Spin {
    fn describe() -> Descriptor {
        Descriptor {
            method: "TEST_SPIN".into(),
            summary: "loops forever (test fixture)".into(),
            reservation_set: false,
            result_labels: Vec::new(),
        }
    }

    fn issue(_request: IssueRequest) -> IssueResult {
        let mut turns: u64 = 0;
        loop {
            turns = std::hint::black_box(turns.wrapping_add(1));
        }
    }

    fn compensate(_request: IssueRequest) -> Compensation {
        compensate::nothing()
    }
}

couponlab_sdk::export_issuer!(Spin);
