//! What each issue request asked and got, kept per coupon for the result
//! endpoint: arrival order, outcome, latency, retries and compensations.
//!
//! The record lives in this server's memory: requests answered by another
//! server process show up in that process's result, while the database
//! figures of the result endpoint cover every process.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use parking_lot::Mutex;
use serde::Serialize;

use crate::runtime::bindings::types::Outcome as WitOutcome;

/// Every way an issue request can end, as the result endpoint names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Outcome {
    Issued,
    Accepted,
    SoldOut,
    SoldOutAtDb,
    Duplicate,
    VersionConflict,
    Deadlock,
    LockWaitTimeout,
    Throttled,
    QueueFull,
    Unavailable,
    UnknownMember,
    UnknownCoupon,
    /// The component trapped.
    Failed,
    /// The component ran past its deadline.
    TimedOut,
    /// No instance slot was free.
    Busy,
}

impl From<WitOutcome> for Outcome {
    fn from(outcome: WitOutcome) -> Self {
        match outcome {
            WitOutcome::Issued => Outcome::Issued,
            WitOutcome::Accepted => Outcome::Accepted,
            WitOutcome::SoldOut => Outcome::SoldOut,
            WitOutcome::SoldOutAtDb => Outcome::SoldOutAtDb,
            WitOutcome::Duplicate => Outcome::Duplicate,
            WitOutcome::VersionConflict => Outcome::VersionConflict,
            WitOutcome::Deadlock => Outcome::Deadlock,
            WitOutcome::LockWaitTimeout => Outcome::LockWaitTimeout,
            WitOutcome::Throttled => Outcome::Throttled,
            WitOutcome::QueueFull => Outcome::QueueFull,
            WitOutcome::Unavailable => Outcome::Unavailable,
            WitOutcome::UnknownMember => Outcome::UnknownMember,
            WitOutcome::UnknownCoupon => Outcome::UnknownCoupon,
        }
    }
}

impl Outcome {
    /// The name used in responses and results.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Issued => "ISSUED",
            Outcome::Accepted => "ACCEPTED",
            Outcome::SoldOut => "SOLD_OUT",
            Outcome::SoldOutAtDb => "SOLD_OUT_AT_DB",
            Outcome::Duplicate => "DUPLICATE",
            Outcome::VersionConflict => "VERSION_CONFLICT",
            Outcome::Deadlock => "DEADLOCK",
            Outcome::LockWaitTimeout => "LOCK_WAIT_TIMEOUT",
            Outcome::Throttled => "THROTTLED",
            Outcome::QueueFull => "QUEUE_FULL",
            Outcome::Unavailable => "UNAVAILABLE",
            Outcome::UnknownMember => "UNKNOWN_MEMBER",
            Outcome::UnknownCoupon => "UNKNOWN_COUPON",
            Outcome::Failed => "FAILED",
            Outcome::TimedOut => "TIMED_OUT",
            Outcome::Busy => "BUSY",
        }
    }
}

/// A request that has arrived and not yet been answered.
pub struct Arrival {
    /// 1 for the first request on this coupon in this process, then 2, 3, ...
    pub sequence: u64,
    started: Instant,
    record: Arc<Mutex<CouponRecord>>,
}

#[derive(Default)]
pub struct Recorder {
    coupons: Mutex<HashMap<u64, Arc<Mutex<CouponRecord>>>>,
}

#[derive(Default)]
struct CouponRecord {
    arrivals: u64,
    methods: BTreeMap<Arc<str>, MethodRecord>,
}

struct MethodRecord {
    outcomes: BTreeMap<Outcome, u64>,
    latency_us: Histogram<u64>,
    retries: u64,
    compensations: u64,
    /// name → value → requests, from the labels components report.
    labels: BTreeMap<String, BTreeMap<String, u64>>,
}

impl MethodRecord {
    fn new() -> Self {
        Self {
            outcomes: BTreeMap::new(),
            // 1 µs to 10 minutes at 3 significant digits: a few tens of KiB.
            latency_us: Histogram::new_with_bounds(1, 600_000_000, 3)
                .expect("valid histogram bounds"),
            retries: 0,
            compensations: 0,
            labels: BTreeMap::new(),
        }
    }
}

/// What one request ended with.
pub struct Ending {
    pub outcome: Outcome,
    pub retries: u32,
    pub compensations: u32,
    /// Facts the component reported (`receivers = 1`).
    pub labels: Vec<(String, String)>,
}

impl Recorder {
    /// Gives the request its arrival sequence number on `coupon` and starts its clock.
    pub fn arrive(&self, coupon: u64) -> Arrival {
        let record = self.coupons.lock().entry(coupon).or_default().clone();
        let sequence = {
            let mut record = record.lock();
            record.arrivals += 1;
            record.arrivals
        };
        Arrival {
            sequence,
            started: Instant::now(),
            record,
        }
    }

    /// Records how the request ended; returns its latency.
    pub fn finish(&self, arrival: Arrival, method: &Arc<str>, ending: Ending) -> Duration {
        let latency = arrival.started.elapsed();
        let mut record = arrival.record.lock();
        let method = record
            .methods
            .entry(method.clone())
            .or_insert_with(MethodRecord::new);
        *method.outcomes.entry(ending.outcome).or_default() += 1;
        method
            .latency_us
            .saturating_record(latency.as_micros().max(1) as u64);
        method.retries += u64::from(ending.retries);
        method.compensations += u64::from(ending.compensations);
        for (name, value) in ending.labels {
            *method
                .labels
                .entry(name)
                .or_default()
                .entry(value)
                .or_default() += 1;
        }
        latency
    }

    pub fn summary(&self, coupon: u64) -> RequestSummary {
        let Some(record) = self.coupons.lock().get(&coupon).cloned() else {
            return RequestSummary::default();
        };
        let record = record.lock();
        let mut summary = RequestSummary::default();
        for (method, stats) in &record.methods {
            let total: u64 = stats.outcomes.values().sum();
            for (outcome, count) in &stats.outcomes {
                *summary.by_outcome.entry(outcome.name()).or_default() += count;
            }
            summary.total += total;
            summary.by_method.insert(
                method.to_string(),
                MethodSummary {
                    total,
                    by_outcome: stats.outcomes.iter().map(|(o, c)| (o.name(), *c)).collect(),
                    retries: stats.retries,
                    compensations: stats.compensations,
                    latency_ms: LatencySummary::of(&stats.latency_us),
                    labels: stats.labels.clone(),
                },
            );
        }
        summary
    }

    /// Forgets every coupon (DELETE /lab/data).
    pub fn clear(&self) {
        self.coupons.lock().clear();
    }
}

#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestSummary {
    pub total: u64,
    pub by_outcome: BTreeMap<&'static str, u64>,
    pub by_method: BTreeMap<String, MethodSummary>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MethodSummary {
    pub total: u64,
    pub by_outcome: BTreeMap<&'static str, u64>,
    pub retries: u64,
    pub compensations: u64,
    pub latency_ms: LatencySummary,
    /// name → value → requests (REDIS_PUBSUB: `receivers`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, BTreeMap<String, u64>>,
}

/// Request latency percentiles in milliseconds, measured in the server from
/// arrival to answer.
#[derive(Debug, Serialize)]
pub struct LatencySummary {
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

impl LatencySummary {
    pub fn of(histogram: &Histogram<u64>) -> Self {
        let ms = |us: u64| us as f64 / 1000.0;
        Self {
            p50: ms(histogram.value_at_quantile(0.50)),
            p95: ms(histogram.value_at_quantile(0.95)),
            p99: ms(histogram.value_at_quantile(0.99)),
            max: ms(histogram.max()),
        }
    }
}
