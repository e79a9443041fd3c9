//! The payload of a queued job or a pub/sub message: `memberId:couponId`,
//! as in the seed.

pub fn format(coupon_id: u64, member_id: u64) -> String {
    format!("{member_id}:{coupon_id}")
}

/// `(coupon_id, member_id)`, or `None` for a payload of another shape.
pub fn parse(payload: &str) -> Option<(u64, u64)> {
    let (member, coupon) = payload.split_once(':')?;
    Some((coupon.trim().parse().ok()?, member.trim().parse().ok()?))
}
