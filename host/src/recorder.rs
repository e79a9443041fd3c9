//! What each issue request asked and got, kept per coupon for the result
//! endpoint: arrival order, outcome, latency, retries and compensations.
//!
//! The record lives in this server's memory: requests answered by another
//! server process show up in that process's result, while the database
//! figures of the result endpoint cover every process.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use parking_lot::Mutex;
use serde::Serialize;
use utoipa::ToSchema;

use crate::outcome::Outcome;

/// A request that has arrived and not yet been answered.
pub struct Arrival {
    /// 1 for the first request on this coupon in this process, then 2, 3, ...
    pub sequence: u64,
    member: u64,
    started: Instant,
    record: Arc<Mutex<CouponRecord>>,
}

#[derive(Default)]
pub struct Recorder {
    coupons: Mutex<HashMap<u64, Arc<Mutex<CouponRecord>>>>,
}

struct CouponRecord {
    arrivals: u64,
    /// Members with a call running now, and how many each: a reservation
    /// without a row is in flight, not stranded, while its call runs.
    in_flight: HashMap<u64, u32>,
    methods: BTreeMap<Arc<str>, MethodRecord>,
    /// Every method's requests together.
    latency_us: Histogram<u64>,
    fairness: Fairness,
}

impl Default for CouponRecord {
    fn default() -> Self {
        Self {
            arrivals: 0,
            in_flight: HashMap::new(),
            methods: BTreeMap::new(),
            latency_us: latency_histogram(),
            fairness: Fairness::default(),
        }
    }
}

/// First come, first served, checked: a member served after an earlier
/// arrival was refused as sold out got the coupon out of turn.
#[derive(Default)]
struct Fairness {
    /// The arrival number of the first request refused as sold out.
    first_sold_out: Option<u64>,
    /// Arrival numbers of the requests served (issued or accepted): at most
    /// the coupon's total for a method that keeps it, so a million refused
    /// requests cost nothing here.
    served: Vec<u64>,
}

/// 1 µs to 10 minutes at 3 significant digits: a few tens of KiB, whatever
/// the number of requests.
fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
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
            latency_us: latency_histogram(),
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
    /// Gives `member`'s request its arrival sequence number on `coupon` and
    /// starts its clock.
    pub fn arrive(&self, coupon: u64, member: u64) -> Arrival {
        let record = self.coupons.lock().entry(coupon).or_default().clone();
        let sequence = {
            let mut record = record.lock();
            record.arrivals += 1;
            *record.in_flight.entry(member).or_default() += 1;
            record.arrivals
        };
        Arrival {
            sequence,
            member,
            started: Instant::now(),
            record,
        }
    }

    /// Members of `coupon` with a call running in this process now.
    pub fn in_flight(&self, coupon: u64) -> BTreeSet<u64> {
        let Some(record) = self.coupons.lock().get(&coupon).cloned() else {
            return BTreeSet::new();
        };
        record.lock().in_flight.keys().copied().collect()
    }

    /// Records how the request ended; returns its latency.
    pub fn finish(&self, arrival: Arrival, method: &Arc<str>, ending: Ending) -> Duration {
        let latency = arrival.started.elapsed();
        Self::record(arrival, method, ending, latency);
        latency
    }

    fn record(arrival: Arrival, method: &Arc<str>, ending: Ending, latency: Duration) {
        let latency_us = latency.as_micros().max(1) as u64;
        let mut record = arrival.record.lock();
        if let Some(calls) = record.in_flight.get_mut(&arrival.member) {
            *calls -= 1;
            if *calls == 0 {
                record.in_flight.remove(&arrival.member);
            }
        }
        record.latency_us.saturating_record(latency_us);
        match ending.outcome {
            Outcome::Issued | Outcome::Accepted => record.fairness.served.push(arrival.sequence),
            Outcome::SoldOut | Outcome::SoldOutAtDb => {
                let first = record
                    .fairness
                    .first_sold_out
                    .get_or_insert(arrival.sequence);
                *first = (*first).min(arrival.sequence);
            }
            _ => {}
        }
        let method = record
            .methods
            .entry(method.clone())
            .or_insert_with(MethodRecord::new);
        *method.outcomes.entry(ending.outcome).or_default() += 1;
        method.latency_us.saturating_record(latency_us);
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
    }

    pub fn summary(&self, coupon: u64) -> RequestSummary {
        let Some(record) = self.coupons.lock().get(&coupon).cloned() else {
            return RequestSummary::default();
        };
        let record = record.lock();
        let mut summary = RequestSummary {
            latency_ms: (!record.latency_us.is_empty())
                .then(|| LatencySummary::of(&record.latency_us)),
            fairness: record.fairness.summary(),
            ..RequestSummary::default()
        };
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

#[derive(Debug, Default, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequestSummary {
    pub total: u64,
    pub by_outcome: BTreeMap<&'static str, u64>,
    /// Every method's requests together, arrival to answer.
    pub latency_ms: Option<LatencySummary>,
    pub fairness: FairnessSummary,
    pub by_method: BTreeMap<String, MethodSummary>,
}

/// Whether the coupon went to members in arrival order.
#[derive(Debug, Default, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FairnessSummary {
    /// The arrival number of the first request refused as sold out.
    pub first_sold_out_arrival: Option<u64>,
    /// Requests served (issued, or accepted for later) although they arrived
    /// after one refused as sold out: out-of-turn wins.
    pub served_after_earlier_sold_out: u64,
}

impl Fairness {
    fn summary(&self) -> FairnessSummary {
        FairnessSummary {
            first_sold_out_arrival: self.first_sold_out,
            served_after_earlier_sold_out: self.first_sold_out.map_or(0, |first| {
                self.served.iter().filter(|&&served| served > first).count() as u64
            }),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
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
#[derive(Debug, Clone, Serialize, ToSchema)]
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ending(outcome: Outcome) -> Ending {
        Ending {
            outcome,
            retries: 0,
            compensations: 0,
            labels: Vec::new(),
        }
    }

    /// Requests arrive in order 1..=n; `script[i]` is how arrival i+1 ends,
    /// after how many milliseconds.
    fn play(script: &[(Outcome, u64)]) -> RequestSummary {
        let recorder = Recorder::default();
        let method: Arc<str> = Arc::from("TEST");
        let arrivals: Vec<Arrival> = (0..script.len() as u64)
            .map(|member| recorder.arrive(7, member))
            .collect();
        // Answers come back in reverse order: arrival order is what counts.
        for (arrival, (outcome, ms)) in arrivals.into_iter().zip(script).rev() {
            Recorder::record(
                arrival,
                &method,
                ending(*outcome),
                Duration::from_millis(*ms),
            );
        }
        recorder.summary(7)
    }

    #[test]
    fn a_member_served_after_an_earlier_sold_out_refusal_is_an_inversion() {
        use Outcome::*;
        let summary = play(&[
            (Issued, 1),
            (SoldOut, 1),
            (Issued, 1),
            (Duplicate, 1),
            (Accepted, 1),
            (SoldOutAtDb, 1),
        ]);
        assert_eq!(summary.fairness.first_sold_out_arrival, Some(2));
        // Arrivals 3 and 5 were served after arrival 2 was refused.
        assert_eq!(summary.fairness.served_after_earlier_sold_out, 2);
    }

    #[test]
    fn in_order_service_has_no_inversion() {
        use Outcome::*;
        let summary = play(&[(Issued, 1), (Issued, 1), (SoldOut, 1), (SoldOut, 1)]);
        assert_eq!(summary.fairness.first_sold_out_arrival, Some(3));
        assert_eq!(summary.fairness.served_after_earlier_sold_out, 0);
    }

    #[test]
    fn latency_percentiles_come_from_the_histogram() {
        // 1..=100 ms, one each: p50 50 ms, p95 95 ms, p99 99 ms, max 100 ms
        // (within the histogram's 3 significant digits).
        let script: Vec<(Outcome, u64)> = (1..=100).map(|ms| (Outcome::SoldOut, ms)).collect();
        let summary = play(&script);
        let latency = summary.latency_ms.expect("requests were recorded");
        for (got, want) in [
            (latency.p50, 50.0),
            (latency.p95, 95.0),
            (latency.p99, 99.0),
            (latency.max, 100.0),
        ] {
            assert!(
                (got - want).abs() <= want * 0.001 + 0.001,
                "got {got}, want {want}"
            );
        }
        assert_eq!(summary.by_method["TEST"].total, 100);
        assert_eq!(summary.by_outcome["SOLD_OUT"], 100);
    }

    /// Not a pass/fail test: what recording a million requests and reading
    /// the summary cost. `cargo test --release -p couponlab --lib -- recorder_benchmark --ignored --nocapture`
    #[test]
    #[ignore = "benchmark; run explicitly"]
    fn recorder_benchmark() {
        let recorder = Recorder::default();
        let method: Arc<str> = Arc::from("BENCH");
        let started = Instant::now();
        for n in 0..1_000_000u64 {
            let arrival = recorder.arrive(1, n);
            let outcome = if n < 1_000 {
                Outcome::Issued
            } else {
                Outcome::SoldOut
            };
            Recorder::record(
                arrival,
                &method,
                ending(outcome),
                Duration::from_micros(200 + n % 5_000),
            );
        }
        let recorded = started.elapsed();
        let started = Instant::now();
        let summary = recorder.summary(1);
        let summarized = started.elapsed();
        assert_eq!(summary.total, 1_000_000);
        println!(
            "1,000,000 requests recorded in {recorded:?} ({:.0} ns each); summary in {summarized:?}",
            recorded.as_nanos() as f64 / 1e6
        );
    }
}
