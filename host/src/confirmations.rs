//! What became of the requests answered 202, kept in Redis: the process that
//! accepted a request and the process that confirmed it may differ (the
//! seed's publisher and consumer profiles), and the result endpoint of any
//! of them must see the whole record.
//!
//! - `coupon:accepted:{couponId}`: hash, member → accepted at (Unix ms);
//! - `coupon:confirmed:{couponId}`: hash, member → `OUTCOME confirmedAtMs`,
//!   the first outcome recorded;
//! - `coupon:accepted-methods:{couponId}`: set of the methods that answered
//!   202, so a restarted server still knows which stream served the coupon;
//! - `coupon:broker-events:{couponId}`: hash, event (`redelivered`,
//!   `deadLettered`) → messages, what a broker's consumers did besides
//!   acking.
//!
//! They sit under `coupon:*`, so `DELETE /lab/data` clears them, and carry
//! the coupon's hash tag, so on a cluster one pipeline reaches them all.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use couponlab_contract::keys;
use hdrhistogram::Histogram;
use redis::RedisError;
use serde::Serialize;
use utoipa::ToSchema;

use crate::outcome::Outcome;
use crate::recorder::LatencySummary;
use crate::redis_target::RedisConn;
use crate::runtime::bindings::types::Confirmation;

fn methods_key(coupon_id: u64) -> String {
    format!("coupon:accepted-methods:{}", keys::tag(coupon_id))
}

fn broker_events_key(coupon_id: u64) -> String {
    format!("coupon:broker-events:{}", keys::tag(coupon_id))
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Notes that `member_id` got a 202 for `coupon_id` from `method` now.
pub async fn record_accepted(
    redis: &RedisConn,
    coupon_id: u64,
    member_id: u64,
    method: &str,
) -> Result<(), RedisError> {
    redis::pipe()
        .hset(keys::accepted(coupon_id), member_id, now_ms())
        .ignore()
        .sadd(methods_key(coupon_id), method)
        .ignore()
        .query_async(&mut redis.clone())
        .await
}

/// The methods that ever answered 202 for `coupon_id`, in any process.
pub async fn accepting_methods(
    redis: &RedisConn,
    coupon_id: u64,
) -> Result<Vec<String>, RedisError> {
    redis::cmd("SMEMBERS")
        .arg(methods_key(coupon_id))
        .query_async(&mut redis.clone())
        .await
}

/// Notes the outcome of an accepted request's confirmation. The first
/// outcome stays: a redelivery that finds the coupon already issued (a
/// duplicate) does not change what became of the request.
///
/// Answers, for the first outcome of a request that was issued, how long
/// after its 202 it was confirmed.
pub async fn record_confirmed(
    redis: &RedisConn,
    confirmation: &Confirmation,
) -> Result<Option<Duration>, RedisError> {
    let outcome = Outcome::from(confirmation.outcome);
    let now = now_ms();
    let (first, accepted): (bool, Option<i64>) = redis::pipe()
        .hset_nx(
            keys::confirmed(confirmation.coupon_id),
            confirmation.member_id,
            format!("{} {now}", outcome.name()),
        )
        .hget(
            keys::accepted(confirmation.coupon_id),
            confirmation.member_id,
        )
        .query_async(&mut redis.clone())
        .await?;
    let lag = accepted
        .filter(|_| first && outcome == Outcome::Issued)
        .map(|accepted| Duration::from_millis(now.saturating_sub(accepted).max(0) as u64));
    Ok(lag)
}

/// What a broker's consumers did besides acking, counted per coupon in
/// Redis; counts Redis did not take (it was down) wait here and go with
/// the next count that reaches it, so an outage loses none of them.
#[derive(Default)]
pub struct BrokerEvents {
    unrecorded: parking_lot::Mutex<BTreeMap<(u64, &'static str), u64>>,
}

impl BrokerEvents {
    /// Counts one `event` (`redelivered`, `deadLettered`) of a broker's
    /// message for its coupon, if given, with every count still waiting
    /// (none given: only those).
    pub async fn record(
        &self,
        redis: &RedisConn,
        counted: Option<(u64, &'static str)>,
    ) -> Result<(), RedisError> {
        let taken = {
            let mut unrecorded = self.unrecorded.lock();
            if let Some(key) = counted {
                *unrecorded.entry(key).or_default() += 1;
            }
            std::mem::take(&mut *unrecorded)
        };
        // What is not known to be counted goes back when this ends, by an
        // error or dropped midway (its consumer stopping): an answer lost
        // after Redis counted it counts it twice, so an outage's figures
        // are at least what happened.
        let mut unsent = Unsent {
            events: self,
            left: taken,
        };
        while let Some((&(coupon, event), &count)) = unsent.left.iter().next() {
            redis::cmd("HINCRBY")
                .arg(broker_events_key(coupon))
                .arg(event)
                .arg(count)
                .query_async::<()>(&mut redis.clone())
                .await?;
            unsent.left.remove(&(coupon, event));
        }
        Ok(())
    }

    /// Counts waiting for Redis.
    pub fn waiting(&self) -> u64 {
        self.unrecorded.lock().values().sum()
    }
}

/// Counts taken out to be sent to Redis, put back unless sent.
struct Unsent<'a> {
    events: &'a BrokerEvents,
    left: BTreeMap<(u64, &'static str), u64>,
}

impl Drop for Unsent<'_> {
    fn drop(&mut self) {
        let mut unrecorded = self.events.unrecorded.lock();
        for (key, count) in std::mem::take(&mut self.left) {
            *unrecorded.entry(key).or_default() += count;
        }
    }
}

/// The async part of a coupon's result.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AsyncSummary {
    /// Requests answered 202.
    pub accepted: u64,
    /// The real outcome of each confirmed 202 (the seed's `asyncResults`).
    pub async_results: BTreeMap<String, u64>,
    /// Answered 202, no outcome yet.
    pub pending: u64,
    /// Who they are.
    #[serde(skip)]
    pub pending_members: BTreeSet<u64>,
    /// Accepted → committed, for the issued ones, in milliseconds.
    pub confirmation_lag_ms: Option<LatencySummary>,
    /// What a broker's consumers did besides acking: event (`redelivered`,
    /// `deadLettered`) → messages. Left out when they did nothing else.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub broker_events: BTreeMap<String, u64>,
}

/// Reads the record of `coupon_id`; `None` when nothing was ever accepted.
pub async fn summary(
    redis: &RedisConn,
    coupon_id: u64,
) -> Result<Option<AsyncSummary>, RedisError> {
    let accepted: HashMap<u64, i64> = hash(redis, &keys::accepted(coupon_id)).await?;
    let confirmed: HashMap<u64, String> = hash(redis, &keys::confirmed(coupon_id)).await?;
    if accepted.is_empty() && confirmed.is_empty() {
        return Ok(None);
    }
    let broker_events: BTreeMap<String, u64> = redis::cmd("HGETALL")
        .arg(broker_events_key(coupon_id))
        .query_async(&mut redis.clone())
        .await?;
    let mut async_results = BTreeMap::new();
    let mut lag =
        Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds");
    for (member, value) in &confirmed {
        let (outcome, at) = value.split_once(' ').unwrap_or((value, ""));
        *async_results.entry(outcome.to_string()).or_default() += 1;
        if let (Some(accepted_at), Ok(confirmed_at), "ISSUED") =
            (accepted.get(member), at.parse::<i64>(), outcome)
        {
            let micros = (confirmed_at - accepted_at).max(0) as u64 * 1000;
            lag.saturating_record(micros.max(1));
        }
    }
    let pending_members: BTreeSet<u64> = accepted
        .keys()
        .filter(|member| !confirmed.contains_key(member))
        .copied()
        .collect();
    Ok(Some(AsyncSummary {
        accepted: accepted.len() as u64,
        async_results,
        pending: pending_members.len() as u64,
        pending_members,
        confirmation_lag_ms: (!lag.is_empty()).then(|| LatencySummary::of(&lag)),
        broker_events,
    }))
}

async fn hash<V: redis::FromRedisValue>(
    redis: &RedisConn,
    key: &str,
) -> Result<HashMap<u64, V>, RedisError> {
    let entries: HashMap<String, V> = redis::cmd("HGETALL")
        .arg(key)
        .query_async(&mut redis.clone())
        .await?;
    Ok(entries
        .into_iter()
        .filter_map(|(member, v)| Some((member.parse().ok()?, v)))
        .collect())
}
