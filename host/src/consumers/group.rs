//! The consumer-group mechanics both stream roles share, the stream
//! consumers ([`super::stream`]) and the write-behind loader
//! ([`super::write_behind`]): the coupons' streams a role reads, reading
//! them, claiming idle entries, keeping entries claimed while they are
//! handled, delivery counts, dead letters.
//!
//! Each coupon has its own stream of each kind (so a script reserves and
//! enqueues in one slot of a cluster). A role reads the active ones
//! ([`super::active`]); nothing is created in a Redis no stream method
//! uses.

use std::future::Future;
use std::time::Duration;

use couponlab_contract::{Stream, fields};
use redis::streams::{
    StreamAutoClaimOptions, StreamAutoClaimReply, StreamId, StreamPendingCountReply,
    StreamReadOptions, StreamReadReply,
};
use redis::{AsyncCommands, RedisResult};
use tokio_util::sync::CancellationToken;

use super::active::{CouponStream, CouponStreams, LOOK_EVERY};
use super::pause_unless_cancelled;
use crate::lab::Lab;
use crate::redis_target::RedisConn;
use crate::runtime::bindings::types::StreamEntry;

/// How long XREADGROUP blocks waiting for new entries: no longer than
/// [`LOOK_EVERY`], so a new coupon's stream is not kept waiting by a read
/// blocked on the others.
pub(super) const BLOCK_MS: usize = 200;
/// Entries one XAUTOCLAIM takes at a time.
const CLAIM_PAGE: usize = 16;
/// On a cluster, where one read cannot span streams (a command's keys share
/// a slot) and so cannot block on them all: the pause after a round that
/// found nothing.
const CLUSTER_IDLE_PAUSE: Duration = Duration::from_millis(20);

/// What a role runs with, as [`keep_running`] hands it over: the lab, the
/// signal to stop, the consumer's name in its group, a connection of its
/// own, and the coupons' streams it reads.
pub(super) struct Consumer<'a> {
    pub lab: &'a Lab,
    pub cancel: &'a CancellationToken,
    pub name: &'a str,
    pub conn: &'a mut RedisConn,
    pub streams: &'a mut CouponStreams,
}

impl<'a> Consumer<'a> {
    /// The coupons' streams this consumer reads now.
    pub async fn current_streams(&mut self) -> RedisResult<Vec<CouponStream>> {
        self.streams.current(self.lab, self.conn).await
    }

    /// The claim, for this consumer, of `stream`'s entries idle past the
    /// lab's claim limit; `just_ids` as [`Claim::just_ids`].
    pub fn claim<'s>(&self, stream: &'s CouponStream, just_ids: bool) -> Claim<'s>
    where
        'a: 's,
    {
        Claim {
            stream,
            consumer: self.name,
            idle_ms: self.lab.config.consumers.claim_idle_ms,
            just_ids,
        }
    }

    /// Up to `count` entries of each current stream: new ones (`from`
    /// `>`) or this consumer's own pending ones (`0`), by stream. On one
    /// server one XREADGROUP over all of them, blocking up to [`BLOCK_MS`]
    /// when `block`; on a cluster one per stream, then a short pause when
    /// all were empty.
    pub async fn read(
        &mut self,
        from: &str,
        count: usize,
        block: bool,
    ) -> RedisResult<Vec<(CouponStream, Vec<StreamId>)>> {
        let current = self.current_streams().await?;
        if current.is_empty() {
            if block {
                tokio::time::sleep(LOOK_EVERY).await;
            }
            return Ok(Vec::new());
        }
        let mut options = StreamReadOptions::default()
            .group(self.streams.kind.group, self.name)
            .count(count);
        let one_read = !self.lab.redis_target.is_cluster();
        if block && one_read {
            options = options.block(BLOCK_MS);
        }
        let reads: Vec<Vec<CouponStream>> = if one_read {
            vec![current]
        } else {
            current.into_iter().map(|stream| vec![stream]).collect()
        };
        let mut found = Vec::new();
        for read in reads {
            let keys: Vec<&str> = read.iter().map(|stream| stream.key.as_str()).collect();
            let from = vec![from; keys.len()];
            let reply: RedisResult<Option<StreamReadReply>> =
                self.conn.xread_options(&keys, &from, &options).await;
            let reply = match reply {
                // A stream deleted under the read (`DELETE /lab/data`, a
                // canary's scratch coupon removed): not the connection's
                // fault, so no reconnect and no pause.
                Err(err) if matches!(err.code(), Some("NOGROUP" | "UNBLOCKED")) => {
                    self.streams.forget();
                    return Ok(found);
                }
                other => other?,
            };
            for stream in reply.into_iter().flat_map(|reply| reply.keys) {
                let read_from = read.iter().find(|coupon| coupon.key == stream.key);
                if let Some(read_from) = read_from
                    && !stream.ids.is_empty()
                {
                    found.push((read_from.clone(), stream.ids));
                }
            }
        }
        if block && !one_read && found.is_empty() {
            tokio::time::sleep(CLUSTER_IDLE_PAUSE).await;
        }
        Ok(found)
    }
}

/// Runs `role` as consumer `name` of the coupons' streams of `kind` until
/// cancelled, reconnecting after a failure; the role `trims` the entries
/// its group acknowledged when the lab trims its streams.
pub(super) async fn keep_running<F>(
    lab: &Lab,
    cancel: &CancellationToken,
    kind: Stream,
    name: &str,
    trims: bool,
    role: F,
) where
    F: AsyncFn(Consumer<'_>) -> RedisResult<()>,
{
    loop {
        // A connection of its own: XREADGROUP BLOCK would stall a shared one.
        let response_timeout = Duration::from_millis(BLOCK_MS as u64 + 5_000);
        let outcome = match lab.redis_target.connect(response_timeout).await {
            Ok(mut conn) => {
                let mut streams = CouponStreams::new(lab, kind, trims);
                role(Consumer {
                    lab,
                    cancel,
                    name,
                    conn: &mut conn,
                    streams: &mut streams,
                })
                .await
            }
            Err(err) => Err(err),
        };
        match outcome {
            Ok(()) => return,
            Err(err) => {
                tracing::warn!(consumer = name, streams = kind.prefix, error = %err, "consumer failed; reconnecting")
            }
        }
        if !pause_unless_cancelled(cancel, Duration::from_secs(1)).await {
            return;
        }
    }
}

/// An XAUTOCLAIM of a stream's entries idle past a limit, for a consumer.
pub(super) struct Claim<'a> {
    pub stream: &'a CouponStream,
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
    pub async fn next(&mut self, conn: &mut RedisConn) -> RedisResult<Option<Vec<StreamId>>> {
        let Some(cursor) = self.cursor.take() else {
            return Ok(None);
        };
        let claim = &self.claim;
        let mut options = StreamAutoClaimOptions::default().count(CLAIM_PAGE);
        if claim.just_ids {
            options = options.with_justid();
        }
        let reply: RedisResult<StreamAutoClaimReply> = conn
            .xautoclaim_options(
                &claim.stream.key,
                claim.stream.group(),
                claim.consumer,
                claim.idle_ms,
                &cursor,
                options,
            )
            .await;
        let reply = match reply {
            // Deleted since it was found: nothing of it is left to claim.
            Err(err) if err.code() == Some("NOGROUP") => return Ok(None),
            other => other?,
        };
        if reply.next_stream_id != "0-0" {
            self.cursor = Some(reply.next_stream_id);
        }
        Ok(Some(reply.claimed))
    }
}

/// How many times each of `entries` of `stream` has been delivered, this
/// delivery included: one XPENDING per entry, in one round trip.
pub(super) async fn delivery_counts(
    conn: &mut RedisConn,
    stream: &CouponStream,
    entries: &[StreamId],
) -> RedisResult<Vec<u32>> {
    let mut pipe = redis::pipe();
    for entry in entries {
        pipe.cmd("XPENDING")
            .arg(&stream.key)
            .arg(stream.group())
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

/// The entries a consumer holds: their stream and ids.
pub(super) type Held = Vec<(CouponStream, Vec<String>)>;

/// The ids of the entries of `batches`, by stream.
pub(super) fn held_ids<E>(batches: &[(CouponStream, Vec<E>)], id: fn(&E) -> &String) -> Held {
    batches
        .iter()
        .map(|(stream, entries)| {
            (
                stream.clone(),
                entries.iter().map(|e| id(e).clone()).collect(),
            )
        })
        .collect()
}

/// Runs `work` on entries `consumer` holds, keeping every one of them
/// claimed until it ends. A batch is handled one entry after another: one
/// still waiting its turn would otherwise go idle past the claim limit, be
/// claimed and delivered (or dead-lettered, its reservation removed) by
/// another consumer, and then be delivered here as well.
pub(super) async fn holding<T>(
    lab: &Lab,
    conn: RedisConn,
    consumer: &str,
    held: Held,
    work: impl Future<Output = T>,
) -> T {
    let claim_idle = Duration::from_millis(lab.config.consumers.claim_idle_ms);
    let keeping = async {
        let each = held
            .iter()
            .map(|(stream, ids)| keep_claimed(conn.clone(), stream, consumer, ids, claim_idle));
        futures::future::join_all(each).await;
        // Only when nothing is held: nothing to keep.
        std::future::pending::<std::convert::Infallible>().await
    };
    tokio::select! {
        done = work => done,
        never = keeping => match never {},
    }
}

/// Resets the idle time of `ids` of `stream` a few times per claim interval
/// for as long as it is polled (XCLAIM with JUSTID does not count a
/// delivery, and skips an id acked meanwhile).
async fn keep_claimed(
    mut conn: RedisConn,
    stream: &CouponStream,
    consumer: &str,
    ids: &[String],
    claim_idle: Duration,
) -> std::convert::Infallible {
    let every = (claim_idle / 3).max(Duration::from_millis(10));
    loop {
        tokio::time::sleep(every).await;
        let claimed: RedisResult<redis::Value> = redis::cmd("XCLAIM")
            .arg(&stream.key)
            .arg(stream.group())
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
    conn: &mut RedisConn,
    stream: &CouponStream,
    entry: &StreamEntry,
    deliveries: u32,
) -> RedisResult<()> {
    let mut copy = entry.fields.clone();
    copy.push((fields::ORIGINAL_ID.into(), entry.id.clone()));
    copy.push((fields::DELIVERIES.into(), deliveries.to_string()));
    let dead_letters = stream.kind.dead_letters(stream.coupon);
    let _: String = conn.xadd(dead_letters, "*", &copy).await?;
    Ok(())
}

/// Acks `ids` of `stream`.
pub(super) async fn ack(
    conn: &mut RedisConn,
    stream: &CouponStream,
    ids: &[&str],
) -> RedisResult<()> {
    let _: u64 = conn.xack(&stream.key, stream.group(), ids).await?;
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
