//! Test fixture TEST_SPIN: never returns, so the host's deadline must stop it.

couponlab_sdk::strategy! {
    struct Spin { method: "TEST_SPIN", claims: [], summary: "loops forever (test fixture)" }
    fn issue(_request) {
        let mut turns: u64 = 0;
        loop {
            turns = std::hint::black_box(turns.wrapping_add(1));
        }
    }
}
