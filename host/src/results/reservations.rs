//! The Redis section of a coupon's result: the reservation set
//! `coupon:issued:{id}` against the issue rows.

use std::collections::BTreeSet;

use couponlab_contract::keys;
use serde::Serialize;
use utoipa::ToSchema;

use crate::lab::Lab;

/// How many member ids each list of differences shows.
const SAMPLE: usize = 10;

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RedisFigures {
    /// False when Redis could not be read; `error` then says why, and the
    /// figures above still come from the database.
    readable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// Times this host found Redis without the components' user (Redis
    /// restarted empty, a cluster node came back) and set it up again.
    /// Whatever only Redis held then — reservations, streams, the records
    /// of 202s — was lost: the rows it no longer matches show as
    /// `dbOnlyMembers`.
    set_up_again: u64,
    #[serde(flatten)]
    #[schema(schema_with = crate::optional_fields::optional_fields::<SetComparison>)]
    comparison: Option<SetComparison>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct SetComparison {
    /// Members in `coupon:issued:{id}`.
    set_size: usize,
    /// Reserved in Redis, with no issue row: a confirm in flight, or a
    /// reservation a failed confirm did not take back.
    redis_only_members: Difference,
    /// Issued in the database, missing from the set: Redis lost the
    /// reservation (restart without persistence, deleted keys), or the coupon
    /// was issued by a method that does not reserve in Redis.
    db_only_members: Difference,
    /// Reserved in Redis only, with no 202 waiting for its confirmation and
    /// no call running for it on any host (by the hosts' latest records):
    /// left by a process that died between two steps. Nothing releases them
    /// on its own — only the strategy may decide that, and no process can be
    /// sure that another has no call in flight — so they stay stock that
    /// cannot be sold, counted here.
    stranded_members: Difference,
}

#[derive(Serialize, ToSchema)]
struct Difference {
    count: usize,
    /// The smallest member ids, at most [`SAMPLE`].
    sample: Vec<u64>,
}

impl Difference {
    fn between(these: &BTreeSet<u64>, those: &BTreeSet<u64>) -> Self {
        let mut only = these.difference(those).copied();
        let sample: Vec<u64> = only.by_ref().take(SAMPLE).collect();
        Difference {
            count: sample.len() + only.count(),
            sample,
        }
    }
}

impl RedisFigures {
    /// The smallest stranded members, when the set could be compared.
    pub(super) fn stranded_sample(&self) -> &[u64] {
        self.comparison
            .as_ref()
            .map_or(&[], |c| c.stranded_members.sample.as_slice())
    }
}

/// A figure read from Redis, or `None` with the failure noted in the Redis
/// section.
pub(super) fn noting_failure<T>(
    lab: &Lab,
    read: Result<Option<T>, redis::RedisError>,
    redis: &mut Option<RedisFigures>,
) -> Option<T> {
    read.unwrap_or_else(|err| {
        *redis = Some(RedisFigures::unreadable(lab, err));
        None
    })
}

impl RedisFigures {
    fn unreadable(lab: &Lab, err: redis::RedisError) -> Self {
        RedisFigures {
            readable: false,
            error: Some(format!("Redis could not be read: {err}")),
            set_up_again: lab.runtime.capabilities().redis.set_ups_again(),
            comparison: None,
        }
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
            set_up_again: lab.runtime.capabilities().redis.set_ups_again(),
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
        Err(err) => Some(RedisFigures::unreadable(lab, err)),
    }
}
