//! The stream consumers (stage 6): group `coupon-issuers` on every
//! coupon's `coupon:issue:stream:{couponId}`, as the seed runs them.
//!
//! - Several consumers XREADGROUP new entries and hand each one to the
//!   component its `method` field names; the component confirms and says
//!   ack (XACK after the commit) or retry (leave it pending).
//! - A claimer, every second, XAUTOCLAIMs entries idle for 5 s — including
//!   those of a consumer that died, in this process or another — and
//!   delivers them again.
//! - Consumers are named after the process's identity (host name, pid, a
//!   random part), so no two processes share a name. The names of dead
//!   processes stay in the group: XGROUP DELCONSUMER would delete the
//!   entries they still hold from the pending list, never to be delivered
//!   again, and no process can tell a dead consumer from a slow one.
//! - An entry delivered more than 3 times is copied to
//!   `coupon:issue:stream:{couponId}:dead`, its component removes the
//!   reservation, and it is acked.
//!
//! Entries are never deleted, nor trimmed unless `COUPONLAB_STREAM_TRIM` says
//! so ([`super::active`]). How the streams are found and
//! their groups created: [`super::group`].

use std::sync::Arc;
use std::time::Duration;

use couponlab_contract::{ISSUE_STREAM, fields};
use redis::RedisResult;
use redis::streams::StreamId;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::active::CouponStream;
use super::group::{
    Consumer, ack, copy_to_dead_letters, delivery_counts, field, held_ids, holding, keep_running,
    to_wit,
};
use super::{pause_unless_cancelled, until_answered};
use crate::issuing;
use crate::lab::Lab;
use crate::redis_target::RedisConn;
use crate::runtime::Strategy;
use crate::runtime::bindings::types::{Disposition, StreamEntry};

/// How long a dead letter waits for the database sessions of lost
/// connections to be ended before it is left for the next claim.
const SESSIONS_ENDED_WITHIN: Duration = Duration::from_secs(2);

/// Entries one XREADGROUP (of each stream) or XAUTOCLAIM takes at a time.
const BATCH: usize = 16;

pub fn spawn(lab: &Lab, cancel: CancellationToken) -> Vec<JoinHandle<()>> {
    // Named after the process's identity: unique across hosts and
    // containers, so two processes never read as one consumer.
    let identity = &lab.identity;
    let mut names: Vec<String> = (0..lab.config.consumers.stream_consumers.max(1))
        .map(|n| format!("{identity}-consumer-{n}"))
        .collect();
    names.push(format!("{identity}-claimer"));
    names
        .into_iter()
        .map(|name| {
            let (lab, cancel) = (lab.clone(), cancel.clone());
            tokio::spawn(async move {
                if name.ends_with("claimer") {
                    let trims = lab.config.consumers.stream_trim;
                    keep_running(&lab, &cancel, ISSUE_STREAM, &name, trims, claim_idle).await
                } else {
                    keep_running(&lab, &cancel, ISSUE_STREAM, &name, false, read_new).await
                }
            })
        })
        .collect()
}

/// A consumer: new entries, one batch at a time, until cancelled. A batch
/// in hand is finished before stopping, all of it kept claimed meanwhile.
async fn read_new(mut consumer: Consumer<'_>) -> RedisResult<()> {
    while !consumer.cancel.is_cancelled() {
        let batches = consumer.read(">", BATCH, true).await?;
        let held = held_ids(&batches, |entry| &entry.id);
        let (lab, conn, name) = (consumer.lab, consumer.conn.clone(), consumer.name);
        holding(lab, conn, name, held, async {
            for (stream, entries) in batches {
                for entry in entries {
                    deliver(&mut consumer, &stream, entry, 1).await?;
                }
            }
            RedisResult::Ok(())
        })
        .await?;
    }
    Ok(())
}

/// The claimer: every interval, entries idle past the limit are claimed and
/// delivered again, or dead-lettered once delivered too often.
async fn claim_idle(mut consumer: Consumer<'_>) -> RedisResult<()> {
    let lab = consumer.lab;
    let settings = &lab.config.consumers;
    let every = Duration::from_millis(settings.claim_interval_ms.max(10));
    while pause_unless_cancelled(consumer.cancel, every).await {
        for stream in consumer.current_streams().await? {
            let mut pages = consumer.claim(&stream, false).pages();
            while let Some(claimed) = pages.next(consumer.conn).await? {
                if !claimed.is_empty() {
                    // XAUTOCLAIM counted this claim as a delivery; read the
                    // count of exactly the entries claimed.
                    let deliveries = delivery_counts(consumer.conn, &stream, &claimed).await?;
                    let held = vec![(
                        stream.clone(),
                        claimed.iter().map(|e| e.id.clone()).collect(),
                    )];
                    let (conn, name) = (consumer.conn.clone(), consumer.name);
                    holding(lab, conn, name, held, async {
                        for (entry, delivered) in claimed.into_iter().zip(deliveries) {
                            if delivered > settings.max_deliveries {
                                // This claim is not a delivery to the component.
                                let conn = &mut *consumer.conn;
                                dead_letter(lab, conn, &stream, entry, delivered - 1).await?;
                            } else {
                                deliver(&mut consumer, &stream, entry, delivered).await?;
                            }
                        }
                        RedisResult::Ok(())
                    })
                    .await?;
                }
                if consumer.cancel.is_cancelled() {
                    return Ok(());
                }
            }
        }
    }
    Ok(())
}

/// Hands one entry to its component; acks it when the component says so.
/// The caller holds the entry ([`holding`]), so the claimer never hands an
/// entry still being confirmed to anyone else.
async fn deliver(
    consumer: &mut Consumer<'_>,
    stream: &CouponStream,
    entry: StreamId,
    deliveries: u32,
) -> RedisResult<()> {
    let (lab, conn) = (consumer.lab, &mut *consumer.conn);
    let Some((entry, strategy)) = owned(lab, entry, deliveries, "confirm") else {
        return Ok(());
    };
    let handled = until_answered(1, || lab.runtime.handle_entry(&strategy, &entry)).await;
    match handled.result {
        Ok(answer) => {
            if answer.disposition == Disposition::Ack {
                // Recorded before the ack: a crash in between redelivers the
                // entry, and the first outcome recorded stays.
                issuing::confirmed(lab, &strategy, &answer.confirmation, Some(handled.trace)).await;
                ack(conn, stream, &[&entry.id]).await?;
            }
        }
        Err(err) => {
            tracing::error!(id = %entry.id, method = %strategy.method, error = %err, "stream entry failed; left pending")
        }
    }
    Ok(())
}

/// Copies the entry to the dead-letter stream, lets its component remove
/// the reservation, then acks it.
async fn dead_letter(
    lab: &Lab,
    conn: &mut RedisConn,
    stream: &CouponStream,
    entry: StreamId,
    deliveries: u32,
) -> RedisResult<()> {
    let Some((entry, strategy)) = owned(lab, entry, deliveries, "compensate") else {
        return Ok(());
    };
    // The component reads the rows to decide what to undo: a delivery
    // whose COMMIT was lost may still land until its session is ended, as
    // for every settlement. Not yet: the entry stays pending for the next
    // claim.
    if !lab.runtime.lost_sessions_ended(SESSIONS_ENDED_WITHIN).await {
        tracing::warn!(id = %entry.id, "a lost database session is not ended yet; the entry is dead-lettered later");
        return Ok(());
    }
    copy_to_dead_letters(conn, stream, &entry, deliveries).await?;
    let answered = until_answered(1, || lab.runtime.dead_letter(&strategy, &entry)).await;
    match answered.result {
        Ok(confirmation) => {
            issuing::confirmed(lab, &strategy, &confirmation, Some(answered.trace)).await;
            ack(conn, stream, &[&entry.id]).await?;
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
    // A canary's scratch coupon goes to the component on trial there.
    let coupon = field(&entry, fields::COUPON_ID).and_then(|id| id.parse().ok());
    let owner = field(&entry, fields::METHOD).and_then(|method| {
        lab.registry
            .owner(coupon.unwrap_or(0), method)
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
