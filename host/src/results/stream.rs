//! The coupon's stream behind its method, as a whole: for the result and
//! for `/metrics`.

use couponlab_contract::Stream;
use redis::streams::StreamInfoGroupsReply;
use redis::{AsyncCommands, RedisResult};

use crate::redis_target::RedisConn;

/// A coupon's stream as a whole, for the result endpoint.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StreamSummary {
    /// Entries ever added (acked entries stay; the stream is not trimmed).
    pub length: u64,
    /// Delivered to a consumer, not acked yet.
    pub pending: u64,
    /// Not delivered to any consumer yet (the group's lag). With `pending`,
    /// what the consumers still owe: an entry whose request got no answer
    /// has no 202 on record, yet it is confirmed all the same.
    pub undelivered: u64,
    /// Entries in its dead-letter stream.
    pub dead_letters: u64,
}

/// Reads the figures of `coupon_id`'s stream of `kind`; `None` when it
/// does not exist yet.
pub async fn stream_summary(
    redis: &RedisConn,
    kind: Stream,
    coupon_id: u64,
) -> RedisResult<Option<StreamSummary>> {
    let mut redis = redis.clone();
    let key = kind.key(coupon_id);
    let length: u64 = redis.xlen(&key).await?;
    if length == 0 {
        return Ok(None);
    }
    let groups: StreamInfoGroupsReply = redis.xinfo_groups(&key).await?;
    // No consumer has created the group yet: everything is unread, nothing pending.
    let (pending, undelivered) = match groups.groups.iter().find(|g| g.name == kind.group) {
        Some(group) => (
            group.pending as u64,
            // Redis leaves the lag out only after entries were deleted,
            // which nothing here does: then the read counter tells.
            group.lag.map_or_else(
                || length.saturating_sub(group.entries_read.unwrap_or(0) as u64),
                |lag| lag as u64,
            ),
        ),
        None => (0, length),
    };
    let dead_letters: u64 = redis.xlen(kind.dead_letters(coupon_id)).await?;
    Ok(Some(StreamSummary {
        length,
        pending,
        undelivered,
        dead_letters,
    }))
}
