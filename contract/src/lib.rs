//! The names the couponlab host and its strategy components must agree on.
//!
//! A component writes a Redis stream entry or a key that the host reads (or
//! the other way round); both sides build their names from here, so a
//! renamed field cannot leave one of them reading what nobody writes. The
//! Lua scripts in `lua/` cannot import this crate: a host unit test checks
//! their names against it.
//!
//! Names only one side uses (the host's record of 202s, the drop gate's
//! keys) stay with that side.

#![no_std]

extern crate alloc;

/// Redis keys of one coupon, under the `coupon:` namespace the components'
/// Redis user may reach: a prefix and the coupon id.
pub mod keys {
    use alloc::format;
    use alloc::string::String;

    pub const TOTAL_PREFIX: &str = "coupon:total:";
    pub const ISSUED_PREFIX: &str = "coupon:issued:";

    /// String: the coupon's total, warmed by the host when the coupon is
    /// created and re-read from the database by a component that finds it
    /// missing.
    pub fn total(coupon_id: u64) -> String {
        format!("{TOTAL_PREFIX}{coupon_id}")
    }

    /// Set: the members a method reserved in Redis (some maybe not yet
    /// issued in the database), which the host's result compares with the
    /// issue rows.
    pub fn issued(coupon_id: u64) -> String {
        format!("{ISSUED_PREFIX}{coupon_id}")
    }

    /// String: the stock REDIS_LUA_GATE's drop has left to sell, which the
    /// load runner's verification reads.
    pub fn gate_remaining(coupon_id: u64) -> String {
        format!("coupon:gate:{coupon_id}:remaining")
    }
}

/// The pub/sub channel of stage 5: `memberId:couponId` messages, published
/// by a component and handed back to it by the host's subscriber.
pub const REQUESTS_CHANNEL: &str = "coupon:issue:requests";

/// A Redis stream, the consumer group the host reads it with, and where the
/// host copies the entries delivered too often.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stream {
    pub name: &'static str,
    pub group: &'static str,
    pub dead_letters: &'static str,
}

/// Stage 6: one entry per accepted request, confirmed by the stream
/// consumers. Acked entries stay; the stream is not trimmed.
pub const ISSUE_STREAM: Stream = Stream {
    name: "coupon:issue:stream",
    group: "coupon-issuers",
    dead_letters: "coupon:issue:stream:dead",
};

/// Stages 9-10: one entry per accepted request, written to the database by
/// the write-behind loader.
pub const WRITE_BEHIND_STREAM: Stream = Stream {
    name: "coupon:wb:stream",
    group: "coupon-wb-loaders",
    dead_letters: "coupon:wb:stream:dead",
};

/// The fields of an entry of either stream, as components write them.
pub mod fields {
    pub const MEMBER_ID: &str = "memberId";
    pub const COUPON_ID: &str = "couponId";
    /// The method that accepted the request: the host hands the entry back
    /// to the component serving it.
    pub const METHOD: &str = "method";
    /// When the request was accepted (Unix ms).
    pub const ACCEPTED_AT: &str = "acceptedAt";

    /// Every field of an entry, in the order components write them.
    pub const ENTRY: [&str; 4] = [MEMBER_ID, COUPON_ID, METHOD, ACCEPTED_AT];

    /// Added by the host to a dead letter: the entry's id in its stream.
    pub const ORIGINAL_ID: &str = "originalId";
    /// Added by the host to a dead letter: how often it was delivered.
    pub const DELIVERIES: &str = "deliveries";
}
