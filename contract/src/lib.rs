//! The names the couponlab host and its strategy components must agree on.
//!
//! A component writes a Redis stream entry or a key that the host reads (or
//! the other way round); both sides build their names from here, so a
//! renamed field cannot leave one of them reading what nobody writes. The
//! Lua scripts in `lua/` cannot import this crate: a host unit test checks
//! their names against it.
//!
//! Names only one side uses (the host's record of 202s, the drop gate's
//! keys) stay with that side. The one sum here is REDIS_LUA_SHARDED's
//! split of a coupon's stock ([`shards`]), which the component applies and
//! the host and the load runner read back.
//!
//! With the `results` feature, [`results`]: the result of a coupon as the
//! lab serves it, which the host writes and the load runner and the tests
//! read; with `schema`, its OpenAPI schema too. Without them the crate has
//! no dependency, as the wasm32 components build it.

// utoipa's derived schemas need std's prelude: with `schema`, the crate
// is the host's alone.
#![cfg_attr(not(feature = "schema"), no_std)]

extern crate alloc;

#[cfg(feature = "results")]
pub mod results;
#[cfg(feature = "schema")]
pub mod schema;

pub mod keys {
    //! Redis keys of one coupon, under the `coupon:` namespace the
    //! components' Redis user may reach: a prefix and the coupon id.
    //!
    //! Every key of one coupon carries `{couponId}` with literal braces:
    //! the coupon id is the key's hash tag, so on a Redis Cluster all of a
    //! coupon's keys share one slot and any script or transaction over
    //! them runs on one node. (REDIS_LUA_SHARDED's shard keys are the one
    //! exception: their tag names the shard, to spread one coupon.)

    use alloc::format;
    use alloc::string::String;

    pub const TOTAL_PREFIX: &str = "coupon:total:";
    pub const ISSUED_PREFIX: &str = "coupon:issued:";
    /// Locks: the components' Redis user may DEL and PEXPIRE these (a
    /// holder releases and renews its lock), and no other key but the drop
    /// gate's.
    pub const LOCK_PREFIX: &str = "coupon:lock:";

    /// `{couponId}`: the hash tag of the coupon's keys.
    pub fn tag(coupon_id: u64) -> String {
        format!("{{{coupon_id}}}")
    }

    /// String: the coupon's total, warmed by the host when the coupon is
    /// created and re-read from the database by a component that finds it
    /// missing.
    pub fn total(coupon_id: u64) -> String {
        format!("{TOTAL_PREFIX}{{{coupon_id}}}")
    }

    /// Set: the members a method reserved in Redis (some maybe not yet
    /// issued in the database), which the host's result compares with the
    /// issue rows.
    pub fn issued(coupon_id: u64) -> String {
        format!("{ISSUED_PREFIX}{{{coupon_id}}}")
    }

    /// The coupon's lock, with a lease: a string whose value is its
    /// holder's token (REDIS_SPIN_LOCK), or a hash of its holder and hold
    /// count (REDIS_PUBSUB_LOCK); also the name of MYSQL_NAMED_LOCK's and
    /// IN_PROCESS_LOCK's locks.
    pub fn lock(coupon_id: u64) -> String {
        format!("{LOCK_PREFIX}{{{coupon_id}}}")
    }

    /// Channel: where REDIS_PUBSUB_LOCK's holder announces the unlock to
    /// the requests waiting for the coupon's lock.
    pub fn lock_channel(coupon_id: u64) -> String {
        format!("{LOCK_PREFIX}channel:{{{coupon_id}}}")
    }

    /// String: REDIS_INCR's counter of the units taken, given back by the
    /// requests refused above the total.
    pub fn count(coupon_id: u64) -> String {
        format!("coupon:count:{{{coupon_id}}}")
    }

    /// The prefix of REDIS_LUA_GATE's keys of one coupon (its stock, limit,
    /// buyers' counts and idempotency markers).
    pub fn gate(coupon_id: u64) -> String {
        format!("coupon:gate:{{{coupon_id}}}:")
    }

    /// Hash: member → when the host answered its request 202 (ms since the
    /// Unix epoch), which the host writes and the load runner reads.
    pub fn accepted(coupon_id: u64) -> String {
        format!("coupon:accepted:{{{coupon_id}}}")
    }

    /// Hash: member → the first outcome of its 202's confirmation and when
    /// it was recorded (`ISSUED 1765000000000`, ms since the Unix epoch).
    pub fn confirmed(coupon_id: u64) -> String {
        format!("coupon:confirmed:{{{coupon_id}}}")
    }

    /// String: the stock REDIS_LUA_GATE's drop has left to sell, which the
    /// load runner's verification reads.
    pub fn gate_remaining(coupon_id: u64) -> String {
        format!("{}remaining", gate(coupon_id))
    }

    /// String `off` while the drop's gate is switched off (the host's
    /// `POST /lab/drop/coupons/{id}/gate` writes it, the component reads
    /// it): every request then takes the component's database path.
    pub fn gate_switch(coupon_id: u64) -> String {
        format!("{}switch", gate(coupon_id))
    }

    /// String: REDIS_LUA_SHARDED's stock on one shard, its part of the
    /// total ([`crate::shards::stock`]). Never decremented: what the shard
    /// still sells is this less the shard's set, so setting it again from
    /// the total cannot give back stock already reserved.
    ///
    /// The braces make `{couponId-shard}` the key's hash tag: on a Redis
    /// Cluster each shard's two keys share a slot (one script reads both),
    /// and the shards of one coupon fall on different slots.
    pub fn shard_stock(coupon_id: u64, shard: u32) -> String {
        format!("coupon:shard:{{{coupon_id}-{shard}}}:stock")
    }

    /// Set: the members REDIS_LUA_SHARDED reserved on one shard.
    pub fn shard_issued(coupon_id: u64, shard: u32) -> String {
        format!("coupon:shard:{{{coupon_id}-{shard}}}:issued")
    }
}

/// REDIS_LUA_SHARDED's split of one coupon's stock: how many shards, which
/// shard a member reserves on, and each shard's part of the total.
///
/// The count is fixed here rather than a server setting: a component has to
/// know it before it picks the shard to send its one script to, and reading
/// it from Redis per request would put every request on one key again — the
/// hot key sharding removes. The host reads it too, to report every shard.
pub mod shards {
    /// Shards of each coupon's stock.
    pub const COUNT: u32 = 4;

    /// The shard `member_id` always reserves on: the splitmix64 finaliser
    /// of the id, modulo [`COUNT`]. Fixed, so one member's requests meet in
    /// one shard's set (one per member holds in one script); mixed, so
    /// members with neighbouring ids (registered together) spread over the
    /// shards instead of taking turns.
    pub fn of(member_id: u64) -> u32 {
        let mut z = member_id.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z % u64::from(COUNT)) as u32
    }

    /// Shard `shard`'s part of `total`: the total split as evenly as
    /// possible, the first `total % COUNT` shards one more. The parts sum to
    /// the total.
    pub fn stock(total: u64, shard: u32) -> u64 {
        let count = u64::from(COUNT);
        total / count + u64::from(u64::from(shard) < total % count)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn the_parts_sum_to_the_total_and_differ_by_one_at_most() {
            for total in [0, 1, 3, 4, 5, 100, 101, 1003] {
                let parts: alloc::vec::Vec<u64> = (0..COUNT).map(|s| stock(total, s)).collect();
                assert_eq!(parts.iter().sum::<u64>(), total, "{total}");
                assert!(parts.windows(2).all(|w| w[0] >= w[1] && w[0] - w[1] <= 1));
            }
        }

        #[test]
        fn neighbouring_members_spread_over_every_shard() {
            let mut per_shard = [0u32; COUNT as usize];
            for member in 1..=4_000 {
                per_shard[of(member) as usize] += 1;
            }
            assert!(
                per_shard.iter().all(|&n| (900..1_100).contains(&n)),
                "{per_shard:?}"
            );
            assert_eq!(of(42), of(42));
        }
    }
}

/// The pub/sub channel of stage 5: `memberId:couponId` messages
/// ([`message`]), published by a component and handed back to it by the
/// host's subscriber.
pub const REQUESTS_CHANNEL: &str = "coupon:issue:requests";

pub mod message {
    //! The payload of a queued job or a pub/sub message: `memberId:couponId`,
    //! as in the seed. The host reads its coupon to find a canary's
    //! component on trial.

    use alloc::format;
    use alloc::string::String;

    pub fn format(coupon_id: u64, member_id: u64) -> String {
        format!("{member_id}:{coupon_id}")
    }

    /// `(coupon_id, member_id)`, or `None` for a payload of another shape.
    pub fn parse(payload: &str) -> Option<(u64, u64)> {
        let (member, coupon) = payload.split_once(':')?;
        Some((coupon.trim().parse().ok()?, member.trim().parse().ok()?))
    }
}

/// A kind of Redis stream: one stream per coupon, so a script can reserve
/// and enqueue in one slot of a Redis Cluster; the consumer group the host
/// reads every coupon's stream with; and where the host copies the entries
/// delivered too often.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stream {
    /// The streams' names before the coupon's hash tag.
    pub prefix: &'static str,
    pub group: &'static str,
}

impl Stream {
    /// The coupon's stream, `{prefix}{couponId}` with the coupon's hash tag.
    pub fn key(&self, coupon_id: u64) -> alloc::string::String {
        alloc::format!("{}{{{coupon_id}}}", self.prefix)
    }

    /// The coupon's dead letters, in the coupon's slot too.
    pub fn dead_letters(&self, coupon_id: u64) -> alloc::string::String {
        alloc::format!("{}{{{coupon_id}}}:dead", self.prefix)
    }
}

/// Stage 6: one entry per accepted request, confirmed by the stream
/// consumers. Acked entries stay unless the lab trims its streams (`COUPONLAB_STREAM_TRIM`).
pub const ISSUE_STREAM: Stream = Stream {
    prefix: "coupon:issue:stream:",
    group: "coupon-issuers",
};

/// Stages 9-10: one entry per accepted request, written to the database by
/// the write-behind loader.
pub const WRITE_BEHIND_STREAM: Stream = Stream {
    prefix: "coupon:wb:stream:",
    group: "coupon-wb-loaders",
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
    /// Added by the host to a broker message: the id of the lab that
    /// published it, whose consumers alone may confirm it.
    pub const LAB: &str = "lab";

    /// Every field of an entry, in the order components write them.
    pub const ENTRY: [&str; 4] = [MEMBER_ID, COUPON_ID, METHOD, ACCEPTED_AT];

    /// Added by the host to a dead letter: the entry's id in its stream.
    pub const ORIGINAL_ID: &str = "originalId";
    /// Added by the host to a dead letter: how often it was delivered.
    pub const DELIVERIES: &str = "deliveries";
}
