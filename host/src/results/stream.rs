//! The stream behind a coupon's method, as a whole: for the result and
//! for `/metrics`.

use couponlab_contract::Stream;
use redis::{AsyncCommands, RedisResult};

/// A stream as a whole, for the result endpoint.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StreamSummary {
    /// Entries ever added (acked entries stay; the stream is not trimmed).
    pub length: u64,
    /// Delivered to a consumer, not acked yet.
    pub pending: u64,
    /// Entries in its dead-letter stream.
    pub dead_letters: u64,
}

/// Reads the stream's figures; `None` when it does not exist yet.
pub async fn stream_summary(
    redis: &redis::aio::ConnectionManager,
    stream: Stream,
) -> RedisResult<Option<StreamSummary>> {
    let mut redis = redis.clone();
    let length: u64 = redis.xlen(stream.name).await?;
    if length == 0 {
        return Ok(None);
    }
    let pending = match redis::cmd("XPENDING")
        .arg(stream.name)
        .arg(stream.group)
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
    let dead_letters: u64 = redis.xlen(stream.dead_letters).await?;
    Ok(Some(StreamSummary {
        length,
        pending,
        dead_letters,
    }))
}
