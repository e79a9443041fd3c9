//! Several hosts, one lab: every server process publishes its record of
//! requests to Redis, and the result endpoint of any of them merges them
//! all.
//!
//! Why snapshots and not one record in Redis: an issue request is recorded
//! in memory as before (a lock and a few additions), and what reaches Redis
//! is one HSET per changed coupon per interval (`COUPONLAB_SNAPSHOT_INTERVAL_MS`,
//! 200 ms), whatever the request rate; a round trip per request (an INCR for
//! an arrival number, an HINCRBY per outcome) would put Redis on every
//! request's path twice. The price: another host's requests of its last
//! interval may be missing from an answer, so each snapshot's age is shown.
//! A host publishes in the background when its record changed, and right
//! before answering a result read of its own, which merges the other
//! hosts' snapshots with its live record.
//!
//! Keys, the host's own and outside `coupon:*`, so that no component (whose
//! ACL user reaches `coupon:*` only) can read or forge them:
//! - `couponlab:hosts:{couponId}`: hash, host id → that host's snapshot
//!   (JSON; histograms in hdrhistogram's V2 format), kept a day after its
//!   last change;
//! - `couponlab:generation`: what DELETE /lab/data increments. Every host
//!   reads it before publishing (each interval) and forgets its record when
//!   it changed; a read ignores snapshots of another generation. A request
//!   another host served between the reset and its next look (one interval
//!   at most) is forgotten with the old record.

use std::collections::HashMap;

use redis::{AsyncCommands, RedisResult};
use serde::{Deserialize, Serialize};

use super::tally::Tally;
use super::{HostRecord, HostsSummary, Recorder, RequestSummary};
use crate::redis_target::RedisConn;

/// The pattern of every snapshot key, for DELETE /lab/data.
pub const SNAPSHOTS: &str = "couponlab:hosts:*";
const GENERATION: &str = "couponlab:generation";
/// How long a snapshot outlives its host's last change of it.
const KEEP_MS: i64 = 24 * 60 * 60 * 1000;

fn snapshot_key(coupon: u64) -> String {
    format!("couponlab:hosts:{coupon}")
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// One host's record of one coupon, as it published it.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Snapshot<T = Tally> {
    generation: u64,
    published_at_ms: i64,
    permits_per_gate: u64,
    /// Members with a call running on that host when it published.
    pub(super) in_flight: Vec<u64>,
    pub(super) tally: T,
}

/// What every snapshot this host publishes says besides its record.
#[derive(Clone, Copy)]
struct Header {
    generation: u64,
    published_at_ms: i64,
    permits_per_gate: u64,
}

impl Recorder {
    /// Takes note of the lab's generation; a new one (another host reset
    /// the lab) forgets this host's record, and is said. The first one read
    /// is taken as it is.
    fn enter_generation(&self, generation: u64) -> bool {
        let mut known = self.generation.lock();
        let new = known.is_some_and(|known| known != generation);
        if new {
            self.clear();
        }
        *known = Some(generation);
        new
    }

    /// The snapshots of the coupons changed since last published, marked
    /// published.
    fn take_changed(&self, header: Header) -> Vec<(u64, String)> {
        let records: Vec<_> = self
            .coupons
            .lock()
            .iter()
            .map(|(coupon, record)| (*coupon, record.clone()))
            .collect();
        records
            .into_iter()
            .filter_map(|(coupon, record)| {
                // Copied under the record's lock, which every request of the
                // coupon takes, and encoded after it: encoding the histograms
                // takes 0.1-0.2 ms for a busy coupon, a copy a fraction.
                let (in_flight, tally) = {
                    let mut record = record.lock();
                    if !record.changed {
                        return None;
                    }
                    record.changed = false;
                    let in_flight: Vec<u64> = record.in_flight.keys().copied().collect();
                    (in_flight, record.tally.clone())
                };
                let snapshot = Snapshot {
                    generation: header.generation,
                    published_at_ms: header.published_at_ms,
                    permits_per_gate: header.permits_per_gate,
                    in_flight,
                    tally,
                };
                Some((coupon, serde_json::to_string(&snapshot).ok()?))
            })
            .collect()
    }

    /// Marks `coupons` changed again: their snapshots did not reach Redis.
    fn mark_changed(&self, coupons: impl IntoIterator<Item = u64>) {
        let records = self.coupons.lock();
        for coupon in coupons {
            if let Some(record) = records.get(&coupon) {
                record.lock().changed = true;
            }
        }
    }
}

/// What a publication needs besides the record: where, as whom, and the
/// setting every snapshot carries.
#[derive(Clone, Copy)]
pub struct Publication<'a> {
    pub redis: &'a RedisConn,
    pub host: &'a str,
    pub permits_per_gate: u64,
}

/// Publishes this host's changed records after reading the lab's
/// generation; answers it, and whether it was new: another host deleted
/// the lab's data, and this host forgot its record.
pub async fn publish(recorder: &Recorder, to: Publication<'_>) -> RedisResult<(u64, bool)> {
    // One publication at a time: two could otherwise land in the wrong
    // order, an older snapshot over a newer one.
    let _one_at_a_time = recorder.publishing.lock().await;
    let mut redis = to.redis.clone();
    let generation: Option<u64> = redis.get(GENERATION).await?;
    let generation = generation.unwrap_or(0);
    let new = recorder.enter_generation(generation);
    let header = Header {
        generation,
        published_at_ms: now_ms(),
        permits_per_gate: to.permits_per_gate,
    };
    let snapshots = recorder.take_changed(header);
    if snapshots.is_empty() {
        return Ok((generation, new));
    }
    let mut commands = Vec::with_capacity(2 * snapshots.len());
    for (coupon, snapshot) in &snapshots {
        commands.push(redis::Cmd::hset(snapshot_key(*coupon), to.host, snapshot));
        commands.push(redis::Cmd::pexpire(snapshot_key(*coupon), KEEP_MS));
    }
    let published: RedisResult<()> = redis.each(commands).await.map(drop);
    if let Err(err) = published {
        recorder.mark_changed(snapshots.into_iter().map(|(coupon, _)| coupon));
        return Err(err);
    }
    Ok((generation, new))
}

/// The request figures of `coupon` over every host: this host's live
/// record and the snapshots the others published, after publishing this
/// host's own (all it changed: a host read once stands published for every
/// coupon). Redis failing leaves this host's alone, and says so. Answers
/// too whether the lab's generation was new to this host (see [`publish`]).
/// A snapshot older than `calls_over_ms` names no member in flight: a host
/// that published nothing for that long has no call running (its calls
/// ended at their deadline, their compensations soon after), and its
/// in-flight members would otherwise hide stranded ones forever.
pub async fn every_host(
    recorder: &Recorder,
    to: Publication<'_>,
    coupon: u64,
    calls_over_ms: i64,
) -> (RequestSummary, bool) {
    let (others, new, error) = match publish(recorder, to).await {
        Ok((generation, new)) => match others(to, coupon, generation, calls_over_ms).await {
            Ok(others) => (others, new, None),
            Err(err) => (Vec::new(), new, Some(err)),
        },
        Err(err) => (Vec::new(), false, Some(err)),
    };
    let error = error.map(|err| format!("Redis could not be read: {err}"));
    let mut summary = recorder.merged_with(coupon, others.iter().map(|(_, snapshot)| snapshot));
    let theirs: u64 = others.iter().map(|(_, s)| s.tally.requests()).sum();
    let now = now_ms();
    let this_host = HostRecord {
        id: to.host.to_string(),
        this_host: true,
        age_ms: 0,
        requests: summary.total.saturating_sub(theirs),
        permits_per_gate: to.permits_per_gate,
    };
    let merged: Vec<HostRecord> = std::iter::once(this_host)
        .chain(others.iter().map(|(id, snapshot)| HostRecord {
            id: id.clone(),
            this_host: false,
            age_ms: (now - snapshot.published_at_ms).max(0) as u64,
            requests: snapshot.tally.requests(),
            permits_per_gate: snapshot.permits_per_gate,
        }))
        .collect();
    summary.hosts = HostsSummary {
        gate_permits: merged.iter().map(|host| host.permits_per_gate).sum(),
        merged,
        error,
    };
    (summary, new)
}

/// The snapshots of `coupon` other hosts published in `generation`, by
/// host id, those older than `calls_over_ms` without members in flight.
async fn others(
    to: Publication<'_>,
    coupon: u64,
    generation: u64,
    calls_over_ms: i64,
) -> RedisResult<Vec<(String, Snapshot)>> {
    let published: HashMap<String, String> = to.redis.clone().hgetall(snapshot_key(coupon)).await?;
    let now = now_ms();
    let mut others: Vec<(String, Snapshot)> = published
        .into_iter()
        .filter(|(host, _)| host != to.host)
        .filter_map(
            |(host, json)| match serde_json::from_str::<Snapshot>(&json) {
                Ok(snapshot) => Some((host, snapshot)),
                Err(err) => {
                    tracing::warn!(%host, error = %err, "an unreadable request snapshot; left out");
                    None
                }
            },
        )
        .filter(|(_, snapshot)| snapshot.generation == generation)
        .map(|(host, mut snapshot)| {
            if now - snapshot.published_at_ms > calls_over_ms {
                snapshot.in_flight.clear();
            }
            (host, snapshot)
        })
        .collect();
    others.sort_by(|(a, _), (b, _)| a.cmp(b));
    Ok(others)
}

/// Starts a new generation of the lab (DELETE /lab/data): this host forgets
/// its record now, the others at their next look. The caller deletes the
/// snapshots ([`SNAPSHOTS`]).
pub async fn start_new_generation(recorder: &Recorder, redis: &RedisConn) -> RedisResult<()> {
    let _one_at_a_time = recorder.publishing.lock().await;
    let generation: u64 = redis.clone().incr(GENERATION, 1).await?;
    recorder.clear();
    *recorder.generation.lock() = Some(generation);
    Ok(())
}

#[cfg(test)]
mod tests;
