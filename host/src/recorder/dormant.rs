//! Records of coupons nobody asks any more, kept small. A live record holds
//! two latency histograms of 3 significant digits up to ten minutes, 168
//! KiB each whatever the number of requests; a lab that has run a thousand
//! experiments would hold a thousand of them (the soak saw the server grow
//! by 2 MiB a minute). A record idle for [`DORMANT_AFTER`] and already
//! published is kept encoded instead, in the snapshot's own form (a few KiB
//! for a coupon whose requests took alike; 28 KiB for 5,000 requests spread
//! from 100 µs to a second), and decoded again by the next request,
//! settlement or result read of its coupon.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::tally::Tally;
use super::{CouponRecord, Recorder};

/// How long after its last change a published record goes dormant, unless
/// the server is told otherwise (`COUPONLAB_RECORD_DORMANT_AFTER_S`).
pub(super) const DORMANT_AFTER: Duration = Duration::from_secs(60);

/// How many records there are, live and dormant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordCount {
    pub live: usize,
    pub dormant: usize,
}

impl Recorder {
    /// A recorder whose published records sleep once idle for `idle`.
    pub fn sleeping_after(idle: Duration) -> Self {
        Recorder {
            coupons: Default::default(),
            dormant: Default::default(),
            generation: Default::default(),
            publishing: Default::default(),
            dormant_after: idle,
        }
    }

    /// The live record of `coupon`: the one in memory, the dormant one
    /// decoded, or a new one.
    pub(super) fn live_record(&self, coupon: u64) -> Arc<Mutex<CouponRecord>> {
        let mut coupons = self.coupons.lock();
        coupons
            .entry(coupon)
            .or_insert_with(|| {
                let tally = self.dormant.lock().remove(&coupon).and_then(decode);
                let tally = tally.unwrap_or_else(Tally::new);
                Arc::new(Mutex::new(CouponRecord {
                    // A record sleeps with no call running, so every arrival
                    // it counted is a request its tally holds: the sequence
                    // goes on from there rather than starting again at 1.
                    arrivals: tally.requests(),
                    tally,
                    ..CouponRecord::default()
                }))
            })
            .clone()
    }

    /// `coupon`'s record as it stands: the live one, or the dormant one
    /// decoded.
    pub(super) fn current_tally(&self, coupon: u64) -> Option<CurrentTally> {
        let asleep = {
            let coupons = self.coupons.lock();
            if let Some(record) = coupons.get(&coupon) {
                return Some(CurrentTally::Live(record.clone()));
            }
            self.dormant.lock().get(&coupon).cloned()
        };
        asleep.and_then(|encoded| decode(encoded).map(CurrentTally::Dormant))
    }

    /// Encodes the records idle for `dormant_after` that hold nothing
    /// unpublished and no call. Encoded outside the map's lock, which every
    /// arrival takes; a record that changed meanwhile stays live.
    pub fn put_idle_to_sleep(&self) {
        let idle: Vec<(u64, Arc<Mutex<CouponRecord>>)> = self
            .coupons
            .lock()
            .iter()
            .filter(|(_, record)| record.lock().is_idle(self.dormant_after))
            .map(|(coupon, record)| (*coupon, record.clone()))
            .collect();
        for (coupon, record) in idle {
            let tally = record.lock().tally.clone();
            let Ok(encoded) = serde_json::to_vec(&tally) else {
                continue;
            };
            let mut coupons = self.coupons.lock();
            // Still the same record, held by the map and this loop alone
            // (an arrival would hold it too), and still idle.
            let unchanged = coupons.get(&coupon).is_some_and(|current| {
                Arc::ptr_eq(current, &record)
                    && Arc::strong_count(&record) == 2
                    && record.lock().is_idle(self.dormant_after)
            });
            if unchanged {
                coupons.remove(&coupon);
                self.dormant.lock().insert(coupon, encoded);
            }
        }
    }

    /// How many coupons have a record, live and dormant.
    pub fn coupons(&self) -> RecordCount {
        let coupons = self.coupons.lock();
        RecordCount {
            live: coupons.len(),
            dormant: self.dormant.lock().len(),
        }
    }
}

impl CouponRecord {
    fn is_idle(&self, dormant_after: Duration) -> bool {
        !self.changed && self.in_flight.is_empty() && self.last_change.elapsed() >= dormant_after
    }
}

/// A record read for a summary.
pub(super) enum CurrentTally {
    Live(Arc<Mutex<CouponRecord>>),
    Dormant(Tally),
}

fn decode(encoded: Vec<u8>) -> Option<Tally> {
    serde_json::from_slice(&encoded)
        .inspect_err(
            |err| tracing::error!(error = %err, "a dormant request record could not be decoded"),
        )
        .ok()
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::outcome::{Ending, Outcome};

    const COUPON: u64 = 7;

    fn served(recorder: &Recorder, member: u64) {
        let arrival = recorder.arrive(COUPON, member);
        recorder.finish(arrival, Ending::of("M", Outcome::Issued));
    }

    /// Makes `coupon`'s record look published and idle long enough.
    fn age(recorder: &Recorder, coupon: u64) {
        let record = recorder.coupons.lock().get(&coupon).cloned().unwrap();
        let mut record = record.lock();
        record.changed = false;
        record.last_change = Instant::now() - DORMANT_AFTER;
    }

    #[test]
    fn an_idle_published_record_sleeps_and_wakes_with_its_figures() {
        let recorder = Recorder::default();
        served(&recorder, 1);
        served(&recorder, 2);
        recorder.put_idle_to_sleep();
        assert_eq!(
            recorder.coupons(),
            RecordCount {
                live: 1,
                dormant: 0
            },
            "not idle yet"
        );

        age(&recorder, COUPON);
        recorder.put_idle_to_sleep();
        assert_eq!(
            recorder.coupons(),
            RecordCount {
                live: 0,
                dormant: 1
            }
        );
        // A result read decodes it, and leaves it asleep.
        assert_eq!(recorder.summary(COUPON).total, 2);
        assert_eq!(recorder.coupons().dormant, 1);

        // The next request wakes it, figures, arrival order and all.
        let third = recorder.arrive(COUPON, 3);
        assert_eq!(third.sequence, 3, "the sequence goes on");
        recorder.finish(third, Ending::of("M", Outcome::Issued));
        assert_eq!(
            recorder.coupons(),
            RecordCount {
                live: 1,
                dormant: 0
            }
        );
        let summary = recorder.summary(COUPON);
        assert_eq!(summary.total, 3);
        assert_eq!(summary.by_outcome["ISSUED"], 3);
        assert!(summary.latency_ms.is_some());
    }

    #[test]
    fn a_dormant_record_is_a_tenth_of_a_live_one_at_most() {
        let recorder = Recorder::default();
        let method: Arc<str> = Arc::from("M");
        for member in 0..5_000u64 {
            let arrival = recorder.arrive(COUPON, member);
            let outcome = if member < 100 {
                Outcome::Issued
            } else {
                Outcome::SoldOut
            };
            // 100 µs to about a second, spread over the histogram's range.
            let latency = Duration::from_micros(100 + member * member / 25);
            Recorder::record(arrival, Ending::of(&method, outcome), latency);
        }
        age(&recorder, COUPON);
        recorder.put_idle_to_sleep();
        let size = recorder.dormant.lock()[&COUPON].len();
        eprintln!("a dormant record of 5,000 requests: {size} bytes");
        // A live one: two histograms of 21,504 counters of 8 bytes.
        let live = 2 * 21_504 * 8;
        assert!(size * 10 < live, "{size} bytes");
        assert_eq!(recorder.summary(COUPON).total, 5_000);
    }

    #[test]
    fn a_record_with_a_call_running_or_unpublished_figures_stays_live() {
        let recorder = Recorder::default();
        let running = recorder.arrive(COUPON, 1);
        age(&recorder, COUPON);
        recorder.put_idle_to_sleep();
        assert_eq!(recorder.coupons().live, 1, "a call is running");
        recorder.finish(running, Ending::of("M", Outcome::Issued));
        recorder.put_idle_to_sleep();
        assert_eq!(recorder.coupons().live, 1, "its ending is not published");
    }
}
