//! Test fixture TEST_HOG: grows memory without bound, so the host's memory
//! limit must stop it.

use couponlab_sdk::{Compensation, Descriptor, IssueRequest, IssueResult, Strategy, compensate};

struct Hog;

impl Strategy for Hog {
    fn describe() -> Descriptor {
        Descriptor {
            method: "TEST_HOG".into(),
            summary: "allocates until it fails (test fixture)".into(),
            reservation_set: false,
            result_labels: Vec::new(),
        }
    }

    fn issue(_request: IssueRequest) -> IssueResult {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            hoard.push(std::hint::black_box(vec![1u8; 1 << 20]));
        }
    }

    fn compensate(_request: IssueRequest) -> Compensation {
        compensate::nothing()
    }
}

couponlab_sdk::export_issuer!(Hog);
