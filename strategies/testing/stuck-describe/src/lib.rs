//! Test fixture TEST_STUCK_DESCRIBE: never finishes `describe()`, so the host
//! must reject it at load time within its deadline and start without it.

use couponlab_sdk::{Compensation, Descriptor, IssueRequest, IssueResult, Strategy, compensate};

struct StuckDescribe;

impl Strategy for StuckDescribe {
    fn describe() -> Descriptor {
        let mut turns: u64 = 0;
        loop {
            turns = std::hint::black_box(turns.wrapping_add(1));
        }
    }

    fn issue(_request: IssueRequest) -> IssueResult {
        IssueResult::issued()
    }

    fn compensate(_request: IssueRequest) -> Compensation {
        compensate::nothing()
    }
}

couponlab_sdk::export_issuer!(StuckDescribe);
