//! The Redis key names of seed 004.

/// String: the coupon's total, warmed when the coupon is created.
pub fn total(coupon_id: u64) -> String {
    format!("coupon:total:{coupon_id}")
}

/// Set: members reserved in Redis (including some not yet issued in the DB).
pub fn issued(coupon_id: u64) -> String {
    format!("coupon:issued:{coupon_id}")
}
