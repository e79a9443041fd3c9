//! Test fixture TEST_HOG: grows memory without bound, so the host's memory
//! limit must stop it.

couponlab_sdk::strategy! {
    struct Hog { method: "TEST_HOG", claims: [], summary: "allocates until it fails (test fixture)" }
    fn issue(_request) {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            hoard.push(std::hint::black_box(vec![1u8; 1 << 20]));
        }
    }
}
