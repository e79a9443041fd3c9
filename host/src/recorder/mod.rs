//! What each issue request asked and got, kept per coupon for the result
//! endpoint: arrival time, outcome, latency, retries and compensations.
//!
//! Each server process keeps its record in memory, where recording a
//! request costs a lock and a few additions ([`tally`]), and publishes a
//! snapshot of it to Redis in the background ([`shared`]); a result read
//! merges the other processes' snapshots with its own live record, so any
//! host answers for every host's requests.

mod dormant;
pub mod shared;
mod tally;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

pub use self::dormant::RecordCount;
use self::dormant::{CurrentTally, DORMANT_AFTER};
use self::tally::Tally;
pub use self::tally::{
    FairnessSummary, HostRecord, HostsSummary, LatencySummary, MethodSummary, RequestSummary,
    Settlement,
};
use crate::outcome::{Arrived, Ending};

/// A request that has arrived and not yet been answered.
pub struct Arrival {
    /// 1 for the first request on this coupon in this process, then 2, 3, ...
    pub sequence: u64,
    /// Microseconds since the Unix epoch: the order across hosts.
    arrived_us: u64,
    member: u64,
    started: Instant,
    record: Arc<Mutex<CouponRecord>>,
}

pub struct Recorder {
    coupons: Mutex<HashMap<u64, Arc<Mutex<CouponRecord>>>>,
    /// The records of coupons idle for a while, encoded ([`dormant`]).
    dormant: Mutex<HashMap<u64, Vec<u8>>>,
    /// The lab's generation this record belongs to (see [`shared`]); `None`
    /// until Redis was first read.
    generation: Mutex<Option<u64>>,
    /// Held while a snapshot is published (see [`shared`]).
    publishing: tokio::sync::Mutex<()>,
    /// How long a published record stays idle before it sleeps.
    dormant_after: Duration,
}

impl Default for Recorder {
    fn default() -> Self {
        Self::sleeping_after(DORMANT_AFTER)
    }
}

struct CouponRecord {
    arrivals: u64,
    /// Members with a call running now, and how many each: a reservation
    /// without a row is in flight, not stranded, while its call runs.
    in_flight: HashMap<u64, u32>,
    tally: Tally,
    /// Changed since its snapshot was last published.
    changed: bool,
    /// When it last changed.
    last_change: Instant,
}

impl Default for CouponRecord {
    fn default() -> Self {
        Self {
            arrivals: 0,
            in_flight: HashMap::new(),
            tally: Tally::new(),
            changed: false,
            last_change: Instant::now(),
        }
    }
}

impl CouponRecord {
    fn mark_changed(&mut self) {
        self.changed = true;
        self.last_change = Instant::now();
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_micros() as u64)
}

impl Arrival {
    /// Its order and time, as an [`Ending`] carries them.
    pub fn arrived(&self) -> Arrived {
        Arrived {
            sequence: self.sequence,
            at_us: self.arrived_us,
        }
    }
}

impl Recorder {
    /// Gives `member`'s request its arrival sequence number and time on
    /// `coupon` and starts its clock.
    pub fn arrive(&self, coupon: u64, member: u64) -> Arrival {
        self.arrive_at(coupon, member, now_us())
    }

    fn arrive_at(&self, coupon: u64, member: u64, arrived_us: u64) -> Arrival {
        let record = self.live_record(coupon);
        let sequence = {
            let mut record = record.lock();
            record.arrivals += 1;
            record.mark_changed();
            *record.in_flight.entry(member).or_default() += 1;
            record.arrivals
        };
        Arrival {
            sequence,
            arrived_us,
            member,
            started: Instant::now(),
            record,
        }
    }

    /// Records how the request ended; returns its latency.
    pub fn finish(&self, arrival: Arrival, ending: Ending) -> Duration {
        let latency = arrival.started.elapsed();
        Self::record(arrival, ending, latency);
        latency
    }

    /// Whether a call for `member` on `coupon` is running in this process.
    pub fn in_flight(&self, coupon: u64, member: u64) -> bool {
        let record = self.coupons.lock().get(&coupon).cloned();
        record.is_some_and(|record| record.lock().in_flight.contains_key(&member))
    }

    /// Counts a request of `method` on `coupon` kept to be settled, or what
    /// it became once settled.
    pub fn settlement(&self, coupon: u64, method: &Arc<str>, what: Settlement) {
        let record = self.live_record(coupon);
        let mut record = record.lock();
        record.mark_changed();
        record.tally.settlement(method, what);
    }

    fn record(arrival: Arrival, ending: Ending, latency: Duration) {
        let latency_us = latency.as_micros().max(1) as u64;
        let mut record = arrival.record.lock();
        if let Some(calls) = record.in_flight.get_mut(&arrival.member) {
            *calls -= 1;
            if *calls == 0 {
                record.in_flight.remove(&arrival.member);
            }
        }
        record.mark_changed();
        record.tally.record(arrival.arrived_us, ending, latency_us);
    }

    /// This process's record of `coupon` alone.
    #[cfg(test)]
    pub fn summary(&self, coupon: u64) -> RequestSummary {
        self.merged_with(coupon, std::iter::empty())
    }

    /// This process's live record of `coupon` with `others` (other hosts'
    /// records of it) added: the request figures of every host. The host
    /// list is the caller's to fill.
    fn merged_with<'a>(
        &self,
        coupon: u64,
        others: impl IntoIterator<Item = &'a shared::Snapshot>,
    ) -> RequestSummary {
        let mut merged = Tally::new();
        let mut in_flight = std::collections::BTreeSet::new();
        match self.current_tally(coupon) {
            Some(CurrentTally::Live(record)) => {
                let record = record.lock();
                merged.add(&record.tally);
                in_flight.extend(record.in_flight.keys());
            }
            Some(CurrentTally::Dormant(tally)) => merged.add(&tally),
            None => {}
        }
        for other in others {
            merged.add(&other.tally);
            in_flight.extend(&other.in_flight);
        }
        RequestSummary {
            in_flight_members: in_flight,
            ..merged.summary()
        }
    }

    /// Forgets every coupon (DELETE /lab/data, or another host's).
    fn clear(&self) {
        let mut coupons = self.coupons.lock();
        coupons.clear();
        self.dormant.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Outcome;

    fn ending(outcome: Outcome) -> Ending {
        Ending::of("TEST", outcome)
    }

    /// Requests arrive in order 1..=n; `script[i]` is how arrival i+1 ends,
    /// after how many milliseconds.
    fn play(script: &[(Outcome, u64)]) -> RequestSummary {
        let recorder = Recorder::default();
        // Arrival times 1, 2, 3, ... µs.
        let arrivals: Vec<Arrival> = (0..script.len() as u64)
            .map(|member| recorder.arrive_at(7, member, member + 1))
            .collect();
        // Answers come back in reverse order: arrival order is what counts.
        for (arrival, (outcome, ms)) in arrivals.into_iter().zip(script).rev() {
            Recorder::record(arrival, ending(*outcome), Duration::from_millis(*ms));
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
        assert_eq!(summary.fairness.first_sold_out_arrival_us, Some(2));
        // Arrivals 3 and 5 were served after arrival 2 was refused.
        assert_eq!(summary.fairness.served_after_earlier_sold_out, 2);
    }

    #[test]
    fn in_order_service_has_no_inversion() {
        use Outcome::*;
        let summary = play(&[(Issued, 1), (Issued, 1), (SoldOut, 1), (SoldOut, 1)]);
        assert_eq!(summary.fairness.first_sold_out_arrival_us, Some(3));
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
    /// the summary cost. `cargo test --release --workspace --lib -- recorder_benchmark --ignored --nocapture`
    #[test]
    #[ignore = "benchmark; run explicitly"]
    fn recorder_benchmark() {
        let recorder = Recorder::default();
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
