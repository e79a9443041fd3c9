//! The write-behind loader (stages 9-10): group `coupon-wb-loaders` on
//! every coupon's `coupon:wb:stream:{couponId}`, one consumer per process (the seed runs one, named
//! `loader`), named after the process's identity. Redis decided and
//! answered 202; this writes the database after it.
//!
//! Every claim interval a loader claims the entries idle past the claim
//! limit (those of a loader that died: another process's, or a predecessor
//! of this one), without reading them; each round then reads the loader's
//! own pending entries first, then new ones, up to 100 of each coupon's
//! stream, and loads each coupon's entries as one batch. While a round
//! runs, its entries are kept claimed, so no other loader takes them. The
//! entries go to the component their `method` field names, which writes them
//! in one transaction of `INSERT ... ON DUPLICATE KEY UPDATE`; XACK follows
//! the commit. A failed batch is retried one entry at a time. An entry
//! delivered more than 3 times is copied to `coupon:wb:stream:{couponId}:dead` and
//! acked: its reservation stays in Redis and reconcile writes it later.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use couponlab_contract::{WRITE_BEHIND_STREAM, fields};
use redis::RedisResult;
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
use crate::runtime::bindings::types::StreamEntry;

/// Entries one round loads.
const BATCH: usize = 100;
/// The pause after a round in which something failed, so a failing entry
/// spends its deliveries over seconds, not microseconds.
const AFTER_FAILURE: Duration = Duration::from_secs(1);

pub fn spawn(lab: &Lab, cancel: CancellationToken) -> JoinHandle<()> {
    let lab = lab.clone();
    let name = format!("{}-loader", lab.identity);
    tokio::spawn(async move {
        let trims = lab.config.consumers.stream_trim;
        keep_running(&lab, &cancel, WRITE_BEHIND_STREAM, &name, trims, load).await
    })
}

async fn load(mut consumer: Consumer<'_>) -> RedisResult<()> {
    let lab = consumer.lab;
    let settings = &lab.config.consumers;
    let claim_every = Duration::from_millis(settings.claim_interval_ms.max(10));
    let mut next_claim = Instant::now();
    let mut own_pending_first = true;
    while !consumer.cancel.is_cancelled() {
        if Instant::now() >= next_claim {
            next_claim = Instant::now() + claim_every;
            own_pending_first |= claim_idle(&mut consumer).await? > 0;
        }
        let mut rounds: Vec<(CouponStream, Vec<StreamEntry>)> = Vec::new();
        if own_pending_first {
            let pending = consumer.read("0", BATCH, false).await?;
            own_pending_first = !pending.is_empty();
            for (stream, entries) in pending {
                // Reading pending entries again counted a delivery; read the
                // count of exactly these entries.
                let counts = delivery_counts(consumer.conn, &stream, &entries).await?;
                let entries = entries.into_iter().zip(counts);
                rounds.push((stream, entries.map(|(e, n)| to_wit(e, n)).collect()));
            }
        } else {
            for (stream, entries) in consumer.read(">", BATCH, true).await? {
                rounds.push((stream, entries.into_iter().map(|e| to_wit(e, 1)).collect()));
            }
        }
        if rounds.is_empty() {
            continue;
        }
        let held = held_ids(&rounds, |entry| &entry.id);
        let conn = &mut *consumer.conn;
        let all_loaded = holding(lab, conn.clone(), consumer.name, held, async {
            let mut all_loaded = true;
            for (stream, entries) in rounds {
                all_loaded &= load_round(lab, conn, &stream, entries).await?;
            }
            RedisResult::Ok(all_loaded)
        })
        .await?;
        // Whatever failed is pending now; the next round starts with it.
        own_pending_first = true;
        if !all_loaded && !pause_unless_cancelled(consumer.cancel, AFTER_FAILURE).await {
            return Ok(());
        }
    }
    Ok(())
}

/// Claims, without reading them, the entries idle past the claim limit;
/// returns how many. They are this loader's pending entries now, read (and
/// counted as delivered) at its next round.
async fn claim_idle(consumer: &mut Consumer<'_>) -> RedisResult<usize> {
    let mut claimed = 0;
    for stream in consumer.current_streams().await? {
        let mut pages = consumer.claim(&stream, true).pages();
        while let Some(ids) = pages.next(consumer.conn).await? {
            claimed += ids.len();
            if consumer.cancel.is_cancelled() {
                break;
            }
        }
    }
    if claimed > 0 {
        tracing::info!(
            loader = consumer.name,
            claimed,
            "claimed the entries of a loader that stopped"
        );
    }
    Ok(claimed)
}

/// Loads one round; true when every entry was written (or dead-lettered).
async fn load_round(
    lab: &Lab,
    conn: &mut RedisConn,
    stream: &CouponStream,
    entries: Vec<StreamEntry>,
) -> RedisResult<bool> {
    let mut by_method: BTreeMap<String, Vec<StreamEntry>> = BTreeMap::new();
    for entry in entries {
        if entry.fields.is_empty() {
            // Deleted from the stream since: nothing left to load.
            ack(conn, stream, &[&entry.id]).await?;
        } else {
            let method = field(&entry, fields::METHOD)
                .unwrap_or_default()
                .to_string();
            by_method.entry(method).or_default().push(entry);
        }
    }
    let max = lab.config.consumers.max_deliveries;
    let mut all_loaded = true;
    for (method, entries) in by_method {
        let Some(strategy) = lab
            .registry
            .owner(stream.coupon, &method)
            .filter(|s| s.world.write_behind().is_some())
        else {
            tracing::warn!(%method, entries = entries.len(), "no write-behind component for these entries; left pending");
            all_loaded = false;
            continue;
        };
        let (dead, live): (Vec<_>, Vec<_>) = entries.into_iter().partition(|e| e.deliveries > max);
        for entry in dead {
            all_loaded &= dead_letter(lab, conn, stream, &strategy, entry).await?;
        }
        if !live.is_empty() {
            all_loaded &= load_batch(lab, conn, stream, &strategy, &live).await?;
        }
    }
    Ok(all_loaded)
}

/// One transaction for the batch; when it fails, one per entry. What the
/// component answers for each entry is recorded before the ack: a crash in
/// between redelivers the entries, and the first outcome recorded stays.
async fn load_batch(
    lab: &Lab,
    conn: &mut RedisConn,
    stream: &CouponStream,
    strategy: &Arc<Strategy>,
    entries: &[StreamEntry],
) -> RedisResult<bool> {
    // A batch's one trace is no single request's: it is not kept.
    match until_answered(1, || lab.runtime.load_batch(strategy, entries))
        .await
        .result
    {
        Ok(Ok(confirmations)) => {
            if confirmations.len() != entries.len() {
                // Written all the same: the entries are acked.
                tracing::error!(method = %strategy.method, entries = entries.len(), confirmations = confirmations.len(), "a loaded batch's confirmations do not match its entries");
            }
            for confirmation in &confirmations {
                issuing::confirmed(lab, strategy, confirmation, None).await;
            }
            let ids: Vec<&str> = entries.iter().map(|e| e.id.as_str()).collect();
            ack(conn, stream, &ids).await?;
            return Ok(true);
        }
        Ok(Err(err)) => {
            tracing::warn!(method = %strategy.method, entries = entries.len(), error = %err, "batch failed; loading one by one")
        }
        Err(err) => {
            tracing::error!(method = %strategy.method, error = %err, "batch call failed; loading one by one")
        }
    }
    let mut all_loaded = true;
    for entry in entries {
        let loaded = until_answered(1, || lab.runtime.load_entry(strategy, entry)).await;
        match loaded.result {
            Ok(Ok(confirmation)) => {
                issuing::confirmed(lab, strategy, &confirmation, Some(loaded.trace)).await;
                ack(conn, stream, &[&entry.id]).await?;
            }
            Ok(Err(err)) => {
                tracing::warn!(id = %entry.id, deliveries = entry.deliveries, error = %err, "entry failed; left pending");
                all_loaded = false;
            }
            Err(err) => {
                tracing::error!(id = %entry.id, error = %err, "entry call failed; left pending");
                all_loaded = false;
            }
        }
    }
    Ok(all_loaded)
}

/// Copies the entry to the dead-letter stream, records what its component
/// says its request became, and acks it; false when the component did not
/// answer (then it is left pending, and copied again next round). The
/// reservation stays in Redis, the source of truth here; reconcile writes
/// its row.
async fn dead_letter(
    lab: &Lab,
    conn: &mut RedisConn,
    stream: &CouponStream,
    strategy: &Arc<Strategy>,
    mut entry: StreamEntry,
) -> RedisResult<bool> {
    // The read that found it over the limit is not a delivery to the component.
    entry.deliveries -= 1;
    copy_to_dead_letters(conn, stream, &entry, entry.deliveries).await?;
    let answered =
        until_answered(1, || lab.runtime.write_behind_dead_letter(strategy, &entry)).await;
    match answered.result {
        Ok(confirmation) => {
            issuing::confirmed(lab, strategy, &confirmation, Some(answered.trace)).await;
            ack(conn, stream, &[&entry.id]).await?;
            tracing::warn!(id = %entry.id, "write-behind entry dead-lettered; reconcile will write it");
            Ok(true)
        }
        Err(err) => {
            tracing::error!(id = %entry.id, method = %strategy.method, error = %err, "dead-letter call failed; left pending");
            Ok(false)
        }
    }
}
