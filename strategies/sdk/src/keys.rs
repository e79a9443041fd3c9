//! The Redis names of the seed, from the contract the host reads them by.
//! Every key of one coupon carries the coupon's hash tag `{couponId}`
//! ([`tag`]), so on a Redis Cluster a script or transaction over them runs
//! in one slot.

pub use couponlab_contract::REQUESTS_CHANNEL;
pub use couponlab_contract::fields;
pub use couponlab_contract::keys::{
    count, gate, gate_remaining, gate_switch, issued, lock, lock_channel, shard_issued,
    shard_stock, tag, total,
};
pub use couponlab_contract::shards;

/// The coupon's stream of stage 6, `coupon:issue:stream:{couponId}`: one
/// entry per accepted request (its [`fields`]), confirmed by the host's
/// stream consumers.
pub fn issue_stream(coupon_id: u64) -> String {
    couponlab_contract::ISSUE_STREAM.key(coupon_id)
}

/// The coupon's stream of stages 9-10, `coupon:wb:stream:{couponId}`: one
/// entry per accepted request (its [`fields`]), read by the host's
/// write-behind loader.
pub fn write_behind_stream(coupon_id: u64) -> String {
    couponlab_contract::WRITE_BEHIND_STREAM.key(coupon_id)
}

/// A lock holder's token, which no other call sets: a Redis lock is
/// released (or renewed) only by the call that took it.
pub fn holder_token(member_id: u64) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(member_id);
    hasher.write_u64(crate::clock::now_millis());
    format!("{member_id}:{:016x}", hasher.finish())
}
