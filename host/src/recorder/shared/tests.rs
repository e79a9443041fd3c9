//! The merge of several hosts' records, through the snapshots they publish.

use std::time::Duration;

use super::*;
use crate::outcome::{Ending, Outcome};
use crate::recorder::RequestSummary;

const COUPON: u64 = 7;
const HEADER: Header = Header {
    generation: 3,
    published_at_ms: 0,
    permits_per_gate: 32,
};

/// Requests of `COUPON`, each `(arrival µs, outcome, latency ms,
/// method)`, the arrival time doubling as the member.
fn play(recorder: &Recorder, script: &[(u64, Outcome, u64, &str)]) {
    for &(at, outcome, ms, method) in script {
        let arrival = recorder.arrive_at(COUPON, at, at);
        let ending = Ending {
            outcome,
            retries: (at % 3) as u32,
            compensations: u32::from(at % 5 == 0),
            labels: vec![("receivers".into(), (at % 2).to_string())],
            ..Ending::of(method, outcome)
        };
        Recorder::record(arrival, ending, Duration::from_millis(ms));
    }
}

/// What `recorder` publishes, as another host reads it.
fn published(recorder: &Recorder) -> Snapshot {
    let (coupon, json) = recorder.take_changed(HEADER).pop().unwrap();
    assert_eq!(coupon, COUPON);
    serde_json::from_str(&json).unwrap()
}

fn figures(summary: &RequestSummary) -> serde_json::Value {
    serde_json::to_value(summary).unwrap()
}

#[test]
fn two_hosts_merged_are_one_record_of_all_their_requests() {
    let script: Vec<(u64, Outcome, u64, &str)> = (1..=500)
        .map(|at| {
            let outcome = match at % 7 {
                0 => Outcome::Duplicate,
                _ if at <= 100 => Outcome::Issued,
                _ => Outcome::SoldOut,
            };
            let method = if at % 4 == 0 { "A_METHOD" } else { "B_METHOD" };
            (at, outcome, 1 + at * 37 % 900, method)
        })
        .collect();
    let (one, host_a, host_b) = (
        Recorder::default(),
        Recorder::default(),
        Recorder::default(),
    );
    play(&one, &script);
    let (even, odd): (Vec<_>, Vec<_>) = script.iter().partition(|(at, ..)| at % 2 == 0);
    play(&host_a, &even);
    play(&host_b, &odd);

    let merged = host_a.merged_with(COUPON, [&published(&host_b)]);
    assert_eq!(figures(&merged), figures(&one.summary(COUPON)));
    assert_eq!(merged.total, 500);
    assert!(merged.by_method["A_METHOD"].labels["receivers"]["0"] > 0);
    // Published once: nothing changed since.
    assert!(host_b.take_changed(HEADER).is_empty());
}

#[test]
fn fairness_compares_arrivals_across_hosts() {
    let host_a = Recorder::default();
    let host_b = Recorder::default();
    play(&host_a, &[(10, Outcome::SoldOut, 1, "M")]);
    play(
        &host_b,
        &[
            (5, Outcome::Issued, 1, "M"),
            (20, Outcome::Accepted, 1, "M"),
        ],
    );
    // Alone, neither host served anyone out of turn.
    assert_eq!(
        host_a
            .summary(COUPON)
            .fairness
            .served_after_earlier_sold_out,
        0
    );
    assert_eq!(
        host_b
            .summary(COUPON)
            .fairness
            .served_after_earlier_sold_out,
        0
    );
    // Together: arrival 20 was served after arrival 10 was refused.
    let merged = host_a.merged_with(COUPON, [&published(&host_b)]);
    assert_eq!(merged.fairness.first_sold_out_arrival_us, Some(10));
    assert_eq!(merged.fairness.served_after_earlier_sold_out, 1);
}

#[test]
fn members_in_flight_on_any_host_are_in_flight() {
    let host_a = Recorder::default();
    let host_b = Recorder::default();
    let _running_on_a = host_a.arrive_at(COUPON, 1, 1);
    let _running_on_b = host_b.arrive_at(COUPON, 2, 2);
    let merged = host_a.merged_with(COUPON, [&published(&host_b)]);
    assert_eq!(merged.in_flight_members, [1, 2].into());
    assert_eq!(merged.total, 0);
}

#[test]
fn a_new_generation_forgets_the_record() {
    let recorder = Recorder::default();
    play(&recorder, &[(1, Outcome::Issued, 1, "M")]);
    assert!(!recorder.enter_generation(3), "the first one is not new");
    assert_eq!(
        recorder.summary(COUPON).total,
        1,
        "the first generation read is taken as it is"
    );
    assert!(recorder.enter_generation(4));
    assert_eq!(recorder.summary(COUPON).total, 0);
    assert!(recorder.take_changed(HEADER).is_empty());
}

/// Not a pass/fail test: what publishing and merging cost for a coupon
/// of a million requests (1,000 served).
/// `cargo test --release --workspace --lib -- snapshot_benchmark --ignored --nocapture`
#[test]
#[ignore = "benchmark; run explicitly"]
fn snapshot_benchmark() {
    let recorder = Recorder::default();
    let script: Vec<(u64, Outcome, u64, &str)> = (1..=1_000_000)
        .map(|at| {
            let outcome = if at <= 1_000 {
                Outcome::Issued
            } else {
                Outcome::SoldOut
            };
            (at, outcome, 1 + at % 5, "BENCH")
        })
        .collect();
    play(&recorder, &script);
    let started = std::time::Instant::now();
    let (_, json) = recorder.take_changed(HEADER).pop().unwrap();
    let encoded = started.elapsed();
    let started = std::time::Instant::now();
    let snapshot: Snapshot = serde_json::from_str(&json).unwrap();
    let decoded = started.elapsed();
    let started = std::time::Instant::now();
    let merged = recorder.merged_with(COUPON, [&snapshot]);
    let summarized = started.elapsed();
    assert_eq!(merged.total, 2_000_000);
    println!(
        "snapshot of 1,000,000 requests: {} bytes, copied (under the coupon's lock) and encoded in {encoded:?}, \
         decoded in {decoded:?}, merged with the live record and summarized in {summarized:?}",
        json.len()
    );
}
