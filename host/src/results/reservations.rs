//! The Redis section of a coupon's result: the reservation set
//! `coupon:issued:{id}` against the issue rows.

use std::collections::BTreeSet;

use couponlab_contract::keys;
use couponlab_contract::results::{Difference, RedisFigures, SetComparison};

use crate::lab::Lab;

/// A figure read from Redis, or `None` with the failure noted in the Redis
/// section.
pub(super) fn noting_failure<T>(
    lab: &Lab,
    read: Result<Option<T>, redis::RedisError>,
    redis: &mut Option<RedisFigures>,
) -> Option<T> {
    read.unwrap_or_else(|err| {
        *redis = Some(unreadable(lab, err));
        None
    })
}

fn unreadable(lab: &Lab, err: redis::RedisError) -> RedisFigures {
    RedisFigures {
        readable: false,
        error: Some(format!("Redis could not be read: {err}")),
        set_up_again: lab.runtime.redis_set_ups_again(),
        comparison: None,
    }
}

/// Reads the reservation set and compares it with the issued members; `None`
/// when there is no set and no method that reserves in it served the coupon.
/// Redis being down is a figure of the result, not a failure of it.
pub(super) async fn redis_figures(
    lab: &Lab,
    coupon_id: u64,
    issued_members: &BTreeSet<u64>,
    waiting: &BTreeSet<u64>,
    reserving: bool,
) -> Option<RedisFigures> {
    let reserved: Result<BTreeSet<u64>, _> = redis::cmd("SMEMBERS")
        .arg(keys::issued(coupon_id))
        .query_async(&mut lab.redis().clone())
        .await;
    match reserved {
        Ok(reserved) if reserved.is_empty() && !reserving => None,
        Ok(reserved) => Some(RedisFigures {
            readable: true,
            error: None,
            set_up_again: lab.runtime.redis_set_ups_again(),
            comparison: Some({
                let redis_only: BTreeSet<u64> =
                    reserved.difference(issued_members).copied().collect();
                SetComparison {
                    set_size: reserved.len(),
                    redis_only_members: Difference::between(&redis_only, &BTreeSet::new()),
                    db_only_members: Difference::between(issued_members, &reserved),
                    stranded_members: Difference::between(&redis_only, waiting),
                }
            }),
        }),
        Err(err) => Some(unreadable(lab, err)),
    }
}
