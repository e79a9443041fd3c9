//! Latency as a distribution: every request's client latency (k6's records)
//! and the server's own (its result's histogram) as HdrHistograms of three
//! significant digits, kept in results.json in HdrHistogram's log encoding
//! (V2 with DEFLATE, base64) so a report is redrawn, and two compared,
//! without the raw records; and the figures of each second of a run.

use std::collections::BTreeMap;

use anyhow::Context;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use chrono::DateTime;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer as _, V2DeflateSerializer};
use serde::{Deserialize, Serialize};

use crate::records::Record;

/// HdrHistogram's precision: values are told apart to 1 part in 1,000.
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// The highest percentile the curve shows, as a fraction: 99.99 %.
pub const CURVE_END: f64 = 0.9999;

/// An empty histogram of microseconds, growing as values need.
pub fn empty() -> Histogram<u64> {
    let mut histogram = Histogram::new(SIGNIFICANT_DIGITS).expect("3 digits are supported");
    histogram.auto(true);
    histogram
}

/// The client latency of every request, microseconds (a timed-out request
/// counts with the time it waited).
pub fn client(records: &[Record]) -> Histogram<u64> {
    let mut histogram = empty();
    for record in records {
        record_ms(&mut histogram, record.latency_ms);
    }
    histogram
}

/// No latency is longer than an hour: a longer one is counted as an hour.
const LONGEST_US: u64 = 3_600_000_000;

fn record_ms(histogram: &mut Histogram<u64>, ms: f64) {
    histogram
        .record(microseconds(ms).min(LONGEST_US))
        .expect("a histogram that grows takes any value up to an hour");
}

fn microseconds(ms: f64) -> u64 {
    (ms * 1000.0).round().max(1.0) as u64
}

/// HdrHistogram's log encoding of `histogram`.
pub fn encode(histogram: &Histogram<u64>) -> String {
    let mut bytes = Vec::new();
    // Into a Vec the serialization cannot fail.
    let _ = V2DeflateSerializer::new().serialize(histogram, &mut bytes);
    BASE64.encode(bytes)
}

/// A histogram from its log encoding.
pub fn decode(text: &str) -> anyhow::Result<Histogram<u64>> {
    let bytes = BASE64.decode(text).context("a histogram not in base64")?;
    Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(|err| anyhow::anyhow!("an unreadable histogram: {err:?}"))
}

/// The server's histogram as its result carries it (V2, hex).
pub fn from_server(hex_text: &str) -> anyhow::Result<Histogram<u64>> {
    let bytes = hex::decode(hex_text).context("a server histogram not in hex")?;
    Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(|err| anyhow::anyhow!("an unreadable server histogram: {err:?}"))
}

/// A method's two histograms, as results.json keeps them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Encoded {
    pub client: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
}

/// The latency-by-percentile curve: (percentile as a fraction, ms), as
/// HdrHistogram's percentile distribution steps it (five ticks each time
/// the distance to 100 % halves), ending at the highest value drawn at
/// `1 - 1/n`, the rank one request in `n` stands for, and never beyond
/// [`CURVE_END`].
pub fn curve(histogram: &Histogram<u64>) -> Vec<(f64, f64)> {
    let count = histogram.len();
    if count == 0 {
        return Vec::new();
    }
    let last = (1.0 - 1.0 / count as f64).min(CURVE_END);
    let ms = |us: u64| us as f64 / 1000.0;
    let mut points: Vec<(f64, f64)> = histogram
        .iter_quantiles(5)
        .map(|step| (step.quantile_iterated_to(), ms(step.value_iterated_to())))
        .filter(|(quantile, _)| *quantile < last)
        .collect();
    points.dedup_by(|b, a| a.0 == b.0);
    points.push((last, ms(histogram.max())));
    points
}

/// The value at `quantile`, ms: the highest value of its bucket, as
/// HdrHistogram reports it.
pub fn percentile_ms(histogram: &Histogram<u64>, quantile: f64) -> f64 {
    histogram.value_at_quantile(quantile) as f64 / 1000.0
}

/// One second of a run, from its start: what the clients were told.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Second {
    /// Seconds since the first request was sent.
    pub second: u64,
    /// Answers received in this second, by outcome.
    pub outcomes: BTreeMap<String, u64>,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Told issued or accepted (200 or 202), up to the end of this second.
    pub issued_so_far: u64,
    /// 202s whose issue was recorded in this second.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub confirmed: u64,
    /// Their confirmation lag, from the 202 to the recorded issue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_p50_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_p99_ms: Option<f64>,
}

fn is_zero(count: &u64) -> bool {
    *count == 0
}

/// A 202 confirmed as issued: when it was accepted and when its issue was
/// recorded, ms since the Unix epoch (the host's clock, which on this
/// machine is k6's).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Confirmed {
    pub accepted_at_ms: i64,
    pub confirmed_at_ms: i64,
}

/// The run second by second, from the first request sent to the last
/// answer or confirmation; seconds without one are there with none.
pub fn per_second(records: &[Record], confirmations: &[Confirmed]) -> anyhow::Result<Vec<Second>> {
    let mut answered = Vec::with_capacity(records.len());
    for record in records {
        let at = DateTime::parse_from_rfc3339(&record.time)
            .with_context(|| format!("a record's time is not RFC 3339: {}", record.time))?;
        let at_us = at.timestamp_micros();
        answered.push((
            at_us,
            at_us - microseconds(record.latency_ms) as i64,
            record,
        ));
    }
    let Some(start_us) = answered.iter().map(|(_, sent, _)| *sent).min() else {
        return Ok(Vec::new());
    };
    let second_of = |at_us: i64| ((at_us - start_us).max(0) / 1_000_000) as usize;
    let confirmed_us = |c: &Confirmed| c.confirmed_at_ms * 1000;
    let last = answered
        .iter()
        .map(|(at, _, _)| second_of(*at))
        .chain(confirmations.iter().map(|c| second_of(confirmed_us(c))))
        .max()
        .unwrap_or(0);
    let mut seconds: Vec<(Second, Histogram<u64>, Histogram<u64>)> = (0..=last)
        .map(|second| {
            let second = Second {
                second: second as u64,
                ..Second::default()
            };
            (second, empty(), empty())
        })
        .collect();
    for confirmed in confirmations {
        let (second, _, lags) = &mut seconds[second_of(confirmed_us(confirmed))];
        second.confirmed += 1;
        let lag_ms = (confirmed.confirmed_at_ms - confirmed.accepted_at_ms).max(0);
        record_ms(lags, lag_ms as f64);
    }
    for (at, _, record) in &answered {
        let (second, latencies, _) = &mut seconds[second_of(*at)];
        *second.outcomes.entry(record.outcome.clone()).or_default() += 1;
        if record.told_success() {
            second.issued_so_far += 1;
        }
        record_ms(latencies, record.latency_ms);
    }
    let mut issued = 0;
    Ok(seconds
        .into_iter()
        .map(|(mut second, latencies, lags)| {
            issued += second.issued_so_far;
            second.issued_so_far = issued;
            if !latencies.is_empty() {
                second.p50_ms = percentile_ms(&latencies, 0.50);
                second.p99_ms = percentile_ms(&latencies, 0.99);
            }
            if !lags.is_empty() {
                second.lag_p50_ms = Some(percentile_ms(&lags, 0.50));
                second.lag_p99_ms = Some(percentile_ms(&lags, 0.99));
            }
            second
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 3,000 requests whose latencies spread over three decades, as a
    /// spike's do: most fast, a long tail.
    fn records() -> Vec<Record> {
        (0..3000u64)
            .map(|i| {
                let spread = (i * 7919 % 3000) as f64 / 3000.0;
                Record {
                    member: i,
                    status: if i < 100 { 200 } else { 409 },
                    outcome: if i < 100 { "ISSUED" } else { "SOLD_OUT" }.into(),
                    latency_ms: 0.4 + 900.0 * spread.powi(6),
                    time: format!("2026-12-01T10:00:0{}.{:06}Z", i / 1000, i % 1000 * 1000),
                    message: String::new(),
                }
            })
            .collect()
    }

    /// The exact percentile of the raw latencies (nearest rank).
    fn raw_percentile(records: &[Record], quantile: f64) -> f64 {
        let mut latencies: Vec<f64> = records.iter().map(|r| r.latency_ms).collect();
        latencies.sort_by(f64::total_cmp);
        let rank = ((quantile * latencies.len() as f64).ceil() as usize).max(1);
        latencies[rank - 1]
    }

    #[test]
    fn percentiles_redrawn_from_results_json_equal_the_raw_records_within_precision() {
        let records = records();
        let encoded = Encoded {
            client: encode(&client(&records)),
            server: None,
        };
        let results = serde_json::to_string(&encoded).unwrap();
        let redrawn = decode(&serde_json::from_str::<Encoded>(&results).unwrap().client).unwrap();
        assert_eq!(redrawn.len(), 3000);
        for quantile in [0.0, 0.5, 0.9, 0.99, 0.999, 0.9999, 1.0] {
            let raw = raw_percentile(&records, quantile);
            let drawn = percentile_ms(&redrawn, quantile);
            // Three significant digits: within 1 part in 1,000, and the
            // microsecond the records are rounded to.
            let tolerance = raw / 1000.0 + 0.001;
            assert!(
                (drawn - raw).abs() <= tolerance,
                "p{}: {drawn} ms redrawn, {raw} ms raw",
                quantile * 100.0
            );
        }
    }

    #[test]
    fn the_curve_rises_to_the_highest_value_past_the_99_9th_percentile() {
        let histogram = client(&records());
        let points = curve(&histogram);
        assert!(
            points
                .windows(2)
                .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1)
        );
        let (last_quantile, last_ms) = *points.last().unwrap();
        assert!((0.999..=CURVE_END).contains(&last_quantile));
        assert_eq!(
            last_ms,
            histogram.highest_equivalent(histogram.max()) as f64 / 1000.0
        );
        assert!(curve(&empty()).is_empty());
    }

    #[test]
    fn the_run_second_by_second_from_the_first_request_sent() {
        let answer = |time: &str, latency_ms: f64, status: u16| Record {
            member: 1,
            status,
            outcome: if status == 200 { "ISSUED" } else { "SOLD_OUT" }.into(),
            latency_ms,
            time: time.into(),
            message: String::new(),
        };
        let records = [
            // Sent at 10:00:00.000, the run's start.
            answer("2026-12-01T10:00:00.100Z", 100.0, 200),
            answer("2026-12-01T10:00:00.900Z", 4.0, 200),
            answer("2026-12-01T10:00:02.500+00:00", 1.0, 409),
        ];
        let seconds = per_second(&records, &[]).unwrap();
        assert_eq!(seconds.len(), 3, "{seconds:?}");
        assert_eq!(seconds[0].outcomes["ISSUED"], 2);
        // Within HdrHistogram's precision, 1 part in 1,000.
        assert!((seconds[0].p50_ms - 4.0).abs() <= 0.004, "{seconds:?}");
        assert!((seconds[0].p99_ms - 100.0).abs() <= 0.1, "{seconds:?}");
        assert!(seconds[1].outcomes.is_empty(), "a second without answers");
        assert_eq!(seconds[2].outcomes["SOLD_OUT"], 1);
        let issued: Vec<u64> = seconds.iter().map(|s| s.issued_so_far).collect();
        assert_eq!(issued, [2, 2, 2]);
        let answers: u64 = per_second(&super::tests::records(), &[])
            .unwrap()
            .iter()
            .flat_map(|s| s.outcomes.values())
            .sum();
        assert_eq!(answers, 3000);
    }

    #[test]
    fn each_second_has_the_lag_of_the_202s_confirmed_in_it() {
        let accepted = Record {
            member: 1,
            status: 202,
            outcome: "ACCEPTED".into(),
            latency_ms: 1.0,
            time: "2026-12-01T10:00:00.001Z".into(),
            message: String::new(),
        };
        // The run starts at 10:00:00.000 (ms since the epoch below); two
        // 202s confirmed in its second second, one in its fourth.
        let start_ms = 1_796_119_200_000;
        let confirmed = |accepted: i64, confirmed: i64| Confirmed {
            accepted_at_ms: start_ms + accepted,
            confirmed_at_ms: start_ms + confirmed,
        };
        let confirmations = [
            confirmed(0, 1_100),
            confirmed(0, 1_900),
            confirmed(500, 3_500),
        ];
        let seconds = per_second(&[accepted], &confirmations).unwrap();
        assert_eq!(
            seconds.len(),
            4,
            "the run lasts until its last confirmation"
        );
        let confirmed: Vec<u64> = seconds.iter().map(|s| s.confirmed).collect();
        assert_eq!(confirmed, [0, 2, 0, 1]);
        assert_eq!(seconds[0].lag_p50_ms, None);
        let lag = |second: &Second| (second.lag_p50_ms.unwrap(), second.lag_p99_ms.unwrap());
        let (p50, p99) = lag(&seconds[1]);
        assert!(
            (p50 - 1100.0).abs() <= 1.1 && (p99 - 1900.0).abs() <= 1.9,
            "{seconds:?}"
        );
        assert!((lag(&seconds[3]).0 - 3000.0).abs() <= 3.0, "{seconds:?}");
        // A second without a confirmation writes none of its figures.
        let written = serde_json::to_value(&seconds[0]).unwrap();
        assert_eq!(written.get("confirmed"), None);
    }

    #[test]
    fn a_server_histogram_is_read_from_its_hex() {
        let mut histogram = empty();
        histogram.record(1500).unwrap();
        let mut bytes = Vec::new();
        hdrhistogram::serialization::V2Serializer::new()
            .serialize(&histogram, &mut bytes)
            .unwrap();
        assert_eq!(from_server(&hex::encode(bytes)).unwrap().max(), 1500);
    }
}
