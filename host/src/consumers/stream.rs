//! The stream consumers (stage 6): group `coupon-issuers` on
//! `coupon:issue:stream`, as the seed runs them.
//!
//! - Several consumers XREADGROUP new entries and hand each one to the
//!   component its `method` field names; the component confirms and says
//!   ack (XACK after the commit) or retry (leave it pending).
//! - A claimer, every second, XAUTOCLAIMs entries idle for 5 s — including
//!   those of a consumer that died — and delivers them again.
//! - An entry delivered more than 3 times is copied to
//!   `coupon:issue:stream:dead`, its component removes the reservation, and
//!   it is acked.
//!
//! Entries are never deleted or trimmed. The consumer group is created when
//! the stream first exists (nothing is created in a Redis no stream method
//! uses), starting at the stream's first entry, so entries added before any
//! consumer ran are read too.

use std::sync::Arc;
use std::time::Duration;

use couponlab_contract::{ISSUE_STREAM, Stream, fields};
use redis::aio::MultiplexedConnection;
use redis::streams::{
    StreamAutoClaimOptions, StreamAutoClaimReply, StreamId, StreamPendingCountReply,
    StreamReadOptions, StreamReadReply,
};
use redis::{AsyncCommands, AsyncConnectionConfig, RedisResult};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{pause_unless_cancelled, record, until_answered};
use crate::lab::Lab;
use crate::runtime::Strategy;
use crate::runtime::bindings::types::{Disposition, StreamEntry};

/// Entries one XREADGROUP or XAUTOCLAIM takes at a time.
const BATCH: usize = 16;
/// How long XREADGROUP blocks waiting for new entries.
pub(super) const BLOCK_MS: usize = 1_000;

pub fn spawn(lab: &Lab, cancel: CancellationToken) -> Vec<JoinHandle<()>> {
    let pid = std::process::id();
    let mut names: Vec<String> = (0..lab.config.consumers.stream_consumers.max(1))
        .map(|n| format!("consumer-{pid}-{n}"))
        .collect();
    names.push(format!("consumer-{pid}-claimer"));
    names
        .into_iter()
        .map(|name| {
            let (lab, cancel) = (lab.clone(), cancel.clone());
            tokio::spawn(async move {
                if name.ends_with("claimer") {
                    keep_running(&lab, &cancel, ISSUE_STREAM, &name, claim_idle).await
                } else {
                    keep_running(&lab, &cancel, ISSUE_STREAM, &name, read_new).await
                }
            })
        })
        .collect()
}

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

/// A consumer: new entries, one batch at a time, until cancelled. A batch
/// in hand is finished before stopping.
async fn read_new(
    lab: &Lab,
    cancel: &CancellationToken,
    name: &str,
    conn: &mut MultiplexedConnection,
) -> RedisResult<()> {
    let options = StreamReadOptions::default()
        .group(ISSUE_STREAM.group, name)
        .count(BATCH)
        .block(BLOCK_MS);
    while !cancel.is_cancelled() {
        let reply: Option<StreamReadReply> = conn
            .xread_options(&[ISSUE_STREAM.name], &[">"], &options)
            .await?;
        for entry in reply.into_iter().flat_map(|r| r.keys).flat_map(|k| k.ids) {
            deliver(lab, conn, name, entry, 1).await?;
        }
    }
    Ok(())
}

/// The claimer: every interval, entries idle past the limit are claimed and
/// delivered again, or dead-lettered once delivered too often.
async fn claim_idle(
    lab: &Lab,
    cancel: &CancellationToken,
    name: &str,
    conn: &mut MultiplexedConnection,
) -> RedisResult<()> {
    let settings = &lab.config.consumers;
    let every = Duration::from_millis(settings.claim_interval_ms.max(10));
    while pause_unless_cancelled(cancel, every).await {
        let mut cursor = "0-0".to_string();
        loop {
            let options = StreamAutoClaimOptions::default().count(BATCH);
            let reply: StreamAutoClaimReply = conn
                .xautoclaim_options(
                    ISSUE_STREAM.name,
                    ISSUE_STREAM.group,
                    name,
                    settings.claim_idle_ms,
                    &cursor,
                    options,
                )
                .await?;
            if !reply.claimed.is_empty() {
                // XAUTOCLAIM counted this claim as a delivery; read the count
                // of exactly the entries claimed.
                let deliveries = delivery_counts(conn, ISSUE_STREAM, &reply.claimed).await?;
                for (entry, delivered) in reply.claimed.into_iter().zip(deliveries) {
                    if delivered > settings.max_deliveries {
                        // This claim is not a delivery to the component.
                        dead_letter(lab, conn, entry, delivered - 1).await?;
                    } else {
                        deliver(lab, conn, name, entry, delivered).await?;
                    }
                }
            }
            if reply.next_stream_id == "0-0" || cancel.is_cancelled() {
                break;
            }
            cursor = reply.next_stream_id;
        }
    }
    Ok(())
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

/// Hands one entry to its component; acks it when the component says so.
/// While the component works, the entry is kept claimed by `consumer`, so
/// the claimer never hands an entry still being confirmed to anyone else.
async fn deliver(
    lab: &Lab,
    conn: &mut MultiplexedConnection,
    consumer: &str,
    entry: StreamId,
    deliveries: u32,
) -> RedisResult<()> {
    let Some((entry, strategy)) = owned(lab, entry, deliveries, "confirm") else {
        return Ok(());
    };
    let keep_claimed = keep_claimed(
        conn.clone(),
        consumer,
        &entry.id,
        Duration::from_millis(lab.config.consumers.claim_idle_ms),
    );
    let handling = until_answered(1, || lab.runtime.handle_entry(&strategy, &entry));
    let handled = tokio::select! {
        handled = handling => handled,
        never = keep_claimed => match never {},
    };
    match handled {
        Ok(handled) => {
            if handled.disposition == Disposition::Ack {
                // Recorded before the ack: a crash in between redelivers the
                // entry, and the first outcome recorded stays.
                record(lab, &strategy.method, &handled.confirmation).await;
                let _: u64 = conn
                    .xack(ISSUE_STREAM.name, ISSUE_STREAM.group, &[&entry.id])
                    .await?;
            }
        }
        Err(err) => {
            tracing::error!(id = %entry.id, method = %strategy.method, error = %err, "stream entry failed; left pending")
        }
    }
    Ok(())
}

/// Resets the entry's idle time a few times per claim interval for as long
/// as it is polled (XCLAIM with JUSTID does not count a delivery).
async fn keep_claimed(
    mut conn: MultiplexedConnection,
    consumer: &str,
    id: &str,
    claim_idle: Duration,
) -> std::convert::Infallible {
    let every = (claim_idle / 3).max(Duration::from_millis(10));
    loop {
        tokio::time::sleep(every).await;
        let claimed: RedisResult<redis::Value> = redis::cmd("XCLAIM")
            .arg(ISSUE_STREAM.name)
            .arg(ISSUE_STREAM.group)
            .arg(consumer)
            .arg(0)
            .arg(id)
            .arg("JUSTID")
            .query_async(&mut conn)
            .await;
        if let Err(err) = claimed {
            tracing::warn!(id, error = %err, "could not keep a stream entry claimed");
        }
    }
}

/// Copies the entry to the dead-letter stream, lets its component remove
/// the reservation, then acks it.
async fn dead_letter(
    lab: &Lab,
    conn: &mut MultiplexedConnection,
    entry: StreamId,
    deliveries: u32,
) -> RedisResult<()> {
    let Some((entry, strategy)) = owned(lab, entry, deliveries, "compensate") else {
        return Ok(());
    };
    copy_to_dead_letters(conn, ISSUE_STREAM, &entry, deliveries).await?;
    match until_answered(1, || lab.runtime.dead_letter(&strategy, &entry)).await {
        Ok(confirmation) => {
            record(lab, &strategy.method, &confirmation).await;
            let _: u64 = conn
                .xack(ISSUE_STREAM.name, ISSUE_STREAM.group, &[&entry.id])
                .await?;
            tracing::warn!(id = %entry.id, deliveries, "stream entry dead-lettered");
        }
        // Not acked: the next claim copies it again and retries the
        // compensation; a duplicate dead letter beats a lost reservation.
        Err(err) => {
            tracing::error!(id = %entry.id, error = %err, "dead-letter compensation failed; left pending")
        }
    }
    Ok(())
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

/// The entry as its component sees it, with that component: the stream
/// issuer its `method` field names. `None` (logged) when none is loaded:
/// the entry stays pending, to be delivered again once one is, for the
/// component to `purpose` it.
fn owned(
    lab: &Lab,
    entry: StreamId,
    deliveries: u32,
    purpose: &str,
) -> Option<(StreamEntry, Arc<Strategy>)> {
    let entry = to_wit(entry, deliveries);
    let owner = field(&entry, fields::METHOD).and_then(|method| {
        lab.registry
            .get(method)
            .filter(|s| s.world.stream_consumer().is_some())
    });
    match owner {
        Some(strategy) => Some((entry, strategy)),
        None => {
            tracing::warn!(id = %entry.id, "no stream-issuer component to {purpose} this entry; left pending");
            None
        }
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
