//! The Redis key names of seed 004.

/// String: the coupon's total, warmed when the coupon is created.
pub fn total(coupon_id: u64) -> String {
    format!("coupon:total:{coupon_id}")
}

/// Set: members reserved in Redis (including some not yet issued in the DB).
pub fn issued(coupon_id: u64) -> String {
    format!("coupon:issued:{coupon_id}")
}

/// Pub/sub channel of stage 5: `memberId:couponId` messages.
pub const REQUESTS_CHANNEL: &str = "coupon:issue:requests";

/// Stream of stage 6: one entry per accepted request (fields `memberId`,
/// `couponId`, `method`). Acked entries stay; the stream is not trimmed.
pub const ISSUE_STREAM: &str = "coupon:issue:stream";
