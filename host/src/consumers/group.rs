//! The consumer-group mechanics both stream roles share, the stream
//! consumers ([`super::stream`]) and the write-behind loader
//! ([`super::write_behind`]): a connection that waits for the group,
//! claiming idle entries, keeping entries claimed while they are handled,
//! delivery counts, dead letters.

use std::time::Duration;

use couponlab_contract::{Stream, fields};
use redis::aio::MultiplexedConnection;
use redis::streams::{
    StreamAutoClaimOptions, StreamAutoClaimReply, StreamId, StreamPendingCountReply,
};
use redis::{AsyncCommands, AsyncConnectionConfig, RedisResult};
use tokio_util::sync::CancellationToken;

use super::pause_unless_cancelled;
use crate::lab::Lab;
use crate::runtime::bindings::types::StreamEntry;

/// How long XREADGROUP blocks waiting for new entries.
pub(super) const BLOCK_MS: usize = 1_000;
/// Entries one XAUTOCLAIM takes at a time.
const CLAIM_PAGE: usize = 16;

/// Runs `role` as consumer `name` of `stream`'s group until cancelled, reconnecting
/// after a failure.
pub(super) async fn keep_running<F>(
    lab: &Lab,
    cancel: &CancellationToken,
    stream: Stream,
    name: &str,
    role: F,
) where
    F: AsyncFn(&Lab, &CancellationToken, &str, &mut MultiplexedConnection) -> RedisResult<()>,
{
    loop {
        let outcome = match connect(lab, cancel, stream).await {
            Ok(Some(mut conn)) => role(lab, cancel, name, &mut conn).await,
            Ok(None) => Ok(()),
            Err(err) => Err(err),
        };
        match outcome {
            Ok(()) => return,
            Err(err) => {
                tracing::warn!(consumer = name, stream = stream.name, error = %err, "consumer failed; reconnecting")
            }
        }
        if !pause_unless_cancelled(cancel, Duration::from_secs(1)).await {
            return;
        }
    }
}

/// A connection of its own: XREADGROUP BLOCK would stall a shared one.
/// Returns once the consumer group exists, which needs the stream to;
/// `None` when cancelled first.
async fn connect(
    lab: &Lab,
    cancel: &CancellationToken,
    stream: Stream,
) -> RedisResult<Option<MultiplexedConnection>> {
    let client = redis::Client::open(lab.config.redis_url.as_str())?;
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_response_timeout(Some(Duration::from_millis(BLOCK_MS as u64 + 5_000)));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    loop {
        let exists: bool = conn.exists(stream.name).await?;
        if exists {
            let created: RedisResult<()> = conn.xgroup_create(stream.name, stream.group, "0").await;
            return match created {
                Err(err) if err.code() != Some("BUSYGROUP") => Err(err),
                _ => Ok(Some(conn)),
            };
        }
        // Short: a method's first entries wait this long for their consumers.
        if !pause_unless_cancelled(cancel, Duration::from_millis(100)).await {
            return Ok(None);
        }
    }
}

/// An XAUTOCLAIM of a stream's entries idle past a limit, for a consumer.
pub(super) struct Claim<'a> {
    pub stream: Stream,
    pub consumer: &'a str,
    pub idle_ms: u64,
    /// Claim without reading the entries (XAUTOCLAIM JUSTID), which does not
    /// count a delivery: the consumer reads them as its own pending ones.
    pub just_ids: bool,
}

impl<'a> Claim<'a> {
    /// The pages of entries idle past the limit, whoever held them (a
    /// consumer that died, or this one's predecessor), each claimed as it is
    /// read.
    pub fn pages(self) -> ClaimPages<'a> {
        ClaimPages {
            claim: self,
            cursor: Some("0-0".to_string()),
        }
    }
}

pub(super) struct ClaimPages<'a> {
    claim: Claim<'a>,
    /// Where the next XAUTOCLAIM starts; `None` once the pending list was
    /// looked through.
    cursor: Option<String>,
}

impl ClaimPages<'_> {
    /// The entries the next page claimed (maybe none); `None` after the last
    /// page.
    pub async fn next(
        &mut self,
        conn: &mut MultiplexedConnection,
    ) -> RedisResult<Option<Vec<StreamId>>> {
        let Some(cursor) = self.cursor.take() else {
            return Ok(None);
        };
        let claim = &self.claim;
        let mut options = StreamAutoClaimOptions::default().count(CLAIM_PAGE);
        if claim.just_ids {
            options = options.with_justid();
        }
        let reply: StreamAutoClaimReply = conn
            .xautoclaim_options(
                claim.stream.name,
                claim.stream.group,
                claim.consumer,
                claim.idle_ms,
                &cursor,
                options,
            )
            .await?;
        if reply.next_stream_id != "0-0" {
            self.cursor = Some(reply.next_stream_id);
        }
        Ok(Some(reply.claimed))
    }
}

/// How many times each of `entries` of `stream` has been delivered, this
/// delivery included: one XPENDING per entry, in one round trip.
pub(super) async fn delivery_counts(
    conn: &mut MultiplexedConnection,
    stream: Stream,
    entries: &[StreamId],
) -> RedisResult<Vec<u32>> {
    let mut pipe = redis::pipe();
    for entry in entries {
        pipe.cmd("XPENDING")
            .arg(stream.name)
            .arg(stream.group)
            .arg(&entry.id)
            .arg(&entry.id)
            .arg(1);
    }
    let replies: Vec<StreamPendingCountReply> = pipe.query_async(conn).await?;
    Ok(replies
        .into_iter()
        .map(|reply| reply.ids.first().map_or(1, |p| p.times_delivered as u32))
        .collect())
}

/// Resets the idle time of `ids` of `stream` a few times per claim interval
/// for as long as it is polled (XCLAIM with JUSTID does not count a
/// delivery, and skips an id acked meanwhile).
pub(super) async fn keep_claimed(
    mut conn: MultiplexedConnection,
    stream: Stream,
    consumer: &str,
    ids: &[&str],
    claim_idle: Duration,
) -> std::convert::Infallible {
    let every = (claim_idle / 3).max(Duration::from_millis(10));
    loop {
        tokio::time::sleep(every).await;
        let claimed: RedisResult<redis::Value> = redis::cmd("XCLAIM")
            .arg(stream.name)
            .arg(stream.group)
            .arg(consumer)
            .arg(0)
            .arg(ids)
            .arg("JUSTID")
            .query_async(&mut conn)
            .await;
        if let Err(err) = claimed {
            tracing::warn!(?ids, error = %err, "could not keep stream entries claimed");
        }
    }
}

/// Copies `entry` of `stream` to its dead-letter stream, with its id and
/// the deliveries it had, for someone to look at.
pub(super) async fn copy_to_dead_letters(
    conn: &mut MultiplexedConnection,
    stream: Stream,
    entry: &StreamEntry,
    deliveries: u32,
) -> RedisResult<()> {
    let mut copy = entry.fields.clone();
    copy.push((fields::ORIGINAL_ID.into(), entry.id.clone()));
    copy.push((fields::DELIVERIES.into(), deliveries.to_string()));
    let _: String = conn.xadd(stream.dead_letters, "*", &copy).await?;
    Ok(())
}

pub(super) fn to_wit(entry: StreamId, deliveries: u32) -> StreamEntry {
    let fields = entry
        .map
        .into_iter()
        .filter_map(|(field, value)| Some((field, redis::from_redis_value::<String>(value).ok()?)))
        .collect();
    StreamEntry {
        id: entry.id,
        fields,
        deliveries,
    }
}

/// The value of the entry's field `name`.
pub(super) fn field<'a>(entry: &'a StreamEntry, name: &str) -> Option<&'a str> {
    entry
        .fields
        .iter()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.as_str())
}
