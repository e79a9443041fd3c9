//! The coupon's stream behind its method, as a whole: for the result and
//! for `/metrics`.

use std::collections::HashMap;

use couponlab_contract::Stream;
use couponlab_contract::results::StreamSummary;
use redis::streams::StreamInfoGroupsReply;
use redis::{AsyncCommands, RedisResult, Value};

use crate::redis_target::RedisConn;

/// Reads the figures of `coupon_id`'s stream of `kind`; `None` when it
/// does not exist yet.
pub async fn stream_summary(
    redis: &RedisConn,
    kind: Stream,
    coupon_id: u64,
) -> RedisResult<Option<StreamSummary>> {
    let mut redis = redis.clone();
    let key = kind.key(coupon_id);
    let Some(length) = entries_added(&mut redis, &key).await? else {
        return Ok(None);
    };
    let groups: StreamInfoGroupsReply = redis.xinfo_groups(&key).await?;
    // No consumer has created the group yet: everything is unread, nothing pending.
    let (pending, undelivered) = match groups.groups.iter().find(|g| g.name == kind.group) {
        Some(group) => (
            group.pending as u64,
            // Redis leaves the lag out only after entries past the group's
            // last delivered one were deleted, which nothing here does:
            // then the read counter tells.
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

/// How many entries the stream at `key` was ever given (`entries-added`
/// of XINFO STREAM: a trim leaves it as it was), or its length on a Redis
/// older than 7; `None` when it does not exist.
async fn entries_added(redis: &mut RedisConn, key: &str) -> RedisResult<Option<u64>> {
    let info: RedisResult<HashMap<String, Value>> = redis::cmd("XINFO")
        .arg("STREAM")
        .arg(key)
        .query_async(redis)
        .await;
    let info = match info {
        // ERR no such key
        Err(err) if err.code() == Some("ERR") => return Ok(None),
        other => other?,
    };
    let added = info
        .get("entries-added")
        .or_else(|| info.get("length"))
        .cloned()
        .map(redis::from_redis_value::<u64>)
        .transpose()?;
    Ok(added)
}
