//! The result of one coupon (`GET /lab/coupons/{couponId}/result`): what
//! happened to it, and whether the two invariants held.
//!
//! The Redis section compares the reservation set `coupon:issued:{id}` with
//! the issue rows; it is left out for a coupon no method reserved in Redis.
//! Reads come in the order that keeps the figures consistent: the outcomes
//! of 202s, then the rows, then the reservation set. A reservation whose
//! confirm is still running shows up as Redis-only, but a committed issue
//! never shows up as DB-only for having committed between the two reads.

use std::collections::{BTreeMap, BTreeSet};

use redis::{AsyncCommands, RedisResult};
use serde::Serialize;
use sqlx::Row;
use utoipa::ToSchema;

use crate::confirmations::{self, AsyncSummary};
use crate::consumers::stream::{self, Group};
use crate::consumers::write_behind;
use crate::lab::Lab;
use crate::recorder::RequestSummary;
use crate::runtime::World;

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CouponResult {
    coupon_id: u64,
    name: String,
    total_count: i64,
    /// The `issued_count` column.
    issued_count: i64,
    /// Rows in `coupon_issues` for this coupon.
    issue_rows: i64,
    distinct_members: i64,
    /// Rows beyond the total (0 when the total held).
    over_issued: i64,
    /// Rows beyond one per member.
    duplicate_members: i64,
    /// `issued_count` minus the rows: non-zero when the counter and the rows disagree.
    count_mismatch: i64,
    invariants: Invariants,
    /// Requests this server answered for this coupon.
    requests: RequestSummary,
    /// The Redis reservation set against the issue rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    redis: Option<RedisFigures>,
    /// Requests answered 202 and what became of them (every process's).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = crate::http::optional_fields::<AsyncSummary>)]
    confirmations: Option<AsyncSummary>,
    /// REDIS_PUBSUB: requests by how many subscribers received the message.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    publish_receivers: BTreeMap<String, u64>,
    /// The stream a stream or write-behind method served this coupon through.
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<StreamSummary>,
}

/// How many member ids each list of differences shows.
const SAMPLE: usize = 10;

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct RedisFigures {
    /// False when Redis could not be read; `error` then says why, and the
    /// figures above still come from the database.
    readable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(flatten)]
    #[schema(schema_with = crate::http::optional_fields::<SetComparison>)]
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
    /// no call running for it in this process: left by a process that died
    /// between two steps. Nothing releases them on its own — only the
    /// strategy may decide that, and no process can tell that another has
    /// no call in flight — so they stay stock that cannot be sold, counted
    /// here.
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

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct Invariants {
    /// Never more issued than the total (rows and counter alike).
    never_over_issued: bool,
    /// At most one coupon per member.
    one_per_member: bool,
    /// The counter equals the rows.
    count_matches_rows: bool,
}

/// Reads the result of `coupon_id`; `None` when there is no such coupon.
/// Only the database failing fails it: Redis being down is a figure of the
/// result.
pub async fn read(lab: &Lab, coupon_id: u64) -> Result<Option<CouponResult>, sqlx::Error> {
    // The outcomes of 202s are read before the rows: a consumer records an
    // outcome after its commit, so every outcome read here has its row in
    // the reads below, and `pending: 0` means every row is counted.
    let confirmations_read = confirmations::summary(lab.redis(), coupon_id).await;
    let row = sqlx::query(
        "SELECT c.name, c.total_count, c.issued_count, \
                (SELECT COUNT(*) FROM coupon_issues i WHERE i.coupon_id = c.id) AS issue_rows, \
                (SELECT COUNT(DISTINCT i.member_id) FROM coupon_issues i WHERE i.coupon_id = c.id) AS distinct_members \
         FROM coupons c WHERE c.id = ?",
    )
    .bind(coupon_id)
    .fetch_optional(lab.db())
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };

    let total_count: i32 = row.try_get("total_count")?;
    let issued_count: i32 = row.try_get("issued_count")?;
    let issue_rows: i64 = row.try_get("issue_rows")?;
    let distinct_members: i64 = row.try_get("distinct_members")?;
    let (total_count, issued_count) = (i64::from(total_count), i64::from(issued_count));
    let issued_members: BTreeSet<u64> =
        sqlx::query_scalar::<_, i64>("SELECT member_id FROM coupon_issues WHERE coupon_id = ?")
            .bind(coupon_id)
            .fetch_all(lab.db())
            .await?
            .into_iter()
            .map(|member| member as u64)
            .collect();
    let requests = lab.recorder.summary(coupon_id);
    let publish_receivers = requests
        .by_method
        .values()
        .filter_map(|method| method.labels.get("receivers"))
        .flatten()
        .fold(BTreeMap::new(), |mut all, (receivers, count)| {
            *all.entry(receivers.clone()).or_default() += count;
            all
        });
    // The methods that served the coupon: those this process answered for,
    // and those any process answered 202 for (a restarted server's record
    // of requests starts empty, Redis's does not).
    let accepting = confirmations::accepting_methods(lab.redis(), coupon_id).await;
    let mut methods: BTreeSet<String> = requests.by_method.keys().cloned().collect();
    methods.extend(accepting.as_ref().cloned().unwrap_or_default());
    // A coupon served by no method that reserves in `coupon:issued:{id}` has
    // no Redis section: database-only methods never touch Redis, and the
    // drop gate keeps keys of its own (`coupon:gate:*`).
    let used_redis = methods.iter().any(|method| {
        lab.registry
            .get(method)
            .is_some_and(|s| s.uses_redis && !matches!(s.world, World::GateIssuer(_)))
    });
    // A reservation waiting for its 202's confirmation, or for a call
    // running now, is not stranded.
    let mut waiting = lab.recorder.in_flight(coupon_id);
    if let Ok(Some(read)) = &confirmations_read {
        waiting.extend(&read.pending_members);
    }
    let mut redis = redis_figures(lab, coupon_id, &issued_members, &waiting, used_redis).await;
    let confirmations = noting_failure(confirmations_read, &mut redis);
    noting_failure(accepting.map(Some), &mut redis);
    // The stream behind the coupon's asynchronous method, if it has one.
    let group = methods
        .iter()
        .find_map(|method| match lab.registry.get(method)?.world {
            World::StreamIssuer(_) => Some(stream::ISSUERS),
            World::WriteBehindIssuer(_) => Some(write_behind::LOADERS),
            _ => None,
        });
    let stream = match group {
        Some(group) => noting_failure(stream_summary(lab.redis(), group).await, &mut redis),
        None => None,
    };
    Ok(Some(CouponResult {
        coupon_id,
        name: row.try_get("name")?,
        total_count,
        issued_count,
        issue_rows,
        distinct_members,
        over_issued: (issue_rows - total_count).max(0),
        duplicate_members: issue_rows - distinct_members,
        count_mismatch: issued_count - issue_rows,
        invariants: Invariants {
            never_over_issued: issue_rows <= total_count && issued_count <= total_count,
            one_per_member: issue_rows == distinct_members,
            count_matches_rows: issued_count == issue_rows,
        },
        requests,
        redis,
        confirmations,
        publish_receivers,
        stream,
    }))
}

/// A figure read from Redis, or `None` with the failure noted in the Redis
/// section.
fn noting_failure<T>(
    read: Result<Option<T>, redis::RedisError>,
    redis: &mut Option<RedisFigures>,
) -> Option<T> {
    read.unwrap_or_else(|err| {
        *redis = Some(RedisFigures::unreadable(err));
        None
    })
}

impl RedisFigures {
    fn unreadable(err: redis::RedisError) -> Self {
        RedisFigures {
            readable: false,
            error: Some(format!("Redis could not be read: {err}")),
            comparison: None,
        }
    }
}

/// Reads the reservation set and compares it with the issued members; `None`
/// when there is no set and no method that uses Redis served the coupon.
/// Redis being down is a figure of the result, not a failure of it.
async fn redis_figures(
    lab: &Lab,
    coupon_id: u64,
    issued_members: &BTreeSet<u64>,
    waiting: &BTreeSet<u64>,
    used_redis: bool,
) -> Option<RedisFigures> {
    let reserved: Result<BTreeSet<u64>, _> = redis::cmd("SMEMBERS")
        .arg(format!("coupon:issued:{coupon_id}"))
        .query_async(&mut lab.redis().clone())
        .await;
    match reserved {
        Ok(reserved) if reserved.is_empty() && !used_redis => None,
        Ok(reserved) => Some(RedisFigures {
            readable: true,
            error: None,
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
        Err(err) => Some(RedisFigures::unreadable(err)),
    }
}

/// A stream as a whole, for the result endpoint.
#[derive(Debug, serde::Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct StreamSummary {
    /// Entries ever added (acked entries stay; the stream is not trimmed).
    pub length: u64,
    /// Delivered to a consumer, not acked yet.
    pub pending: u64,
    /// Entries in its dead-letter stream.
    pub dead_letters: u64,
}

/// Reads the stream's figures; `None` when it does not exist yet.
async fn stream_summary(
    redis: &redis::aio::ConnectionManager,
    group: Group,
) -> RedisResult<Option<StreamSummary>> {
    let mut redis = redis.clone();
    let length: u64 = redis.xlen(group.stream).await?;
    if length == 0 {
        return Ok(None);
    }
    let pending = match redis::cmd("XPENDING")
        .arg(group.stream)
        .arg(group.name)
        .query_async::<redis::Value>(&mut redis)
        .await
    {
        Ok(redis::Value::Array(summary)) => summary
            .into_iter()
            .next()
            .and_then(|count| redis::from_redis_value::<u64>(count).ok())
            .unwrap_or(0),
        Ok(_) => 0,
        // No consumer has created the group yet: everything is unread, nothing pending.
        Err(err) if err.code() == Some("NOGROUP") => 0,
        Err(err) => return Err(err),
    };
    let dead_letters: u64 = redis.xlen(group.dead_letters).await?;
    Ok(Some(StreamSummary {
        length,
        pending,
        dead_letters,
    }))
}
