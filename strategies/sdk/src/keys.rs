//! The Redis names of the seed, from the contract the host reads them by.

pub use couponlab_contract::REQUESTS_CHANNEL;
pub use couponlab_contract::fields;
pub use couponlab_contract::keys::{gate_remaining, issued, shard_issued, shard_stock, total};
pub use couponlab_contract::shards;

/// Stream of stage 6: one entry per accepted request (its [`fields`]),
/// confirmed by the host's stream consumers.
pub const ISSUE_STREAM: &str = couponlab_contract::ISSUE_STREAM.name;

/// Stream of stages 9-10: one entry per accepted request (its [`fields`]),
/// read by the host's write-behind loader.
pub const WRITE_BEHIND_STREAM: &str = couponlab_contract::WRITE_BEHIND_STREAM.name;
