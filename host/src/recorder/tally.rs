//! What a coupon's requests came to, in a form that adds up: the record of
//! one host, or the records of several hosts merged into one. Counts add,
//! HDR histograms add bucket by bucket (percentiles are read from the sum,
//! never averaged), and fairness compares arrival times, which mean the same
//! on every host (see [`Fairness`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::outcome::{Ending, Outcome};

#[derive(Clone, Serialize, Deserialize)]
pub(super) struct Tally {
    methods: BTreeMap<Arc<str>, MethodTally>,
    /// Every method's requests together.
    #[serde(with = "v2")]
    latency_us: Histogram<u64>,
    fairness: Fairness,
}

/// First come, first served, checked: a member served after an earlier
/// arrival was refused as sold out got the coupon out of turn.
///
/// Arrivals are wall-clock stamps (microseconds since the Unix epoch), not
/// numbers a process counts, so the records of several hosts compare: the
/// order is global as far as the hosts' clocks agree (exactly, for hosts on
/// one machine; within NTP's error, usually well under a millisecond,
/// across machines). Requests stamped in the same microsecond are in no
/// order, and none is out of turn against another.
#[derive(Clone, Default, Serialize, Deserialize)]
struct Fairness {
    /// When the first request refused as sold out arrived.
    first_sold_out: Option<u64>,
    /// When the requests served (issued or accepted) arrived: at most the
    /// coupon's total for a method that keeps it, so a million refused
    /// requests cost nothing here.
    served: Vec<u64>,
}

#[derive(Clone, Serialize, Deserialize)]
struct MethodTally {
    outcomes: BTreeMap<Outcome, u64>,
    #[serde(with = "v2")]
    latency_us: Histogram<u64>,
    retries: u64,
    compensations: u64,
    /// Scripts that outlived their call and were killed.
    #[serde(default)]
    scripts_killed: u64,
    /// Requests kept to be settled later, and what they became.
    #[serde(default)]
    settlements: Settlements,
    /// name → value → requests, from the labels components report.
    labels: BTreeMap<String, BTreeMap<String, u64>>,
}

/// 1 µs to 10 minutes at 3 significant digits: a few tens of KiB, whatever
/// the number of requests.
fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

impl MethodTally {
    fn new() -> Self {
        Self {
            outcomes: BTreeMap::new(),
            latency_us: latency_histogram(),
            retries: 0,
            compensations: 0,
            scripts_killed: 0,
            settlements: Settlements::default(),
            labels: BTreeMap::new(),
        }
    }

    fn add(&mut self, other: &MethodTally) {
        for (outcome, count) in &other.outcomes {
            *self.outcomes.entry(*outcome).or_default() += count;
        }
        add_histogram(&mut self.latency_us, &other.latency_us);
        self.retries += other.retries;
        self.compensations += other.compensations;
        self.scripts_killed += other.scripts_killed;
        self.settlements.asked += other.settlements.asked;
        self.settlements.issued += other.settlements.issued;
        self.settlements.not_issued += other.settlements.not_issued;
        add_labels(&mut self.labels, &other.labels);
    }
}

fn add_histogram(sum: &mut Histogram<u64>, other: &Histogram<u64>) {
    // Both come from `latency_histogram`: the same bounds, so nothing is
    // out of range unless a host of another version sent other bounds.
    if let Err(err) = sum.add(other) {
        tracing::warn!(?err, "a latency histogram could not be merged");
    }
}

fn add_labels(
    sum: &mut BTreeMap<String, BTreeMap<String, u64>>,
    other: &BTreeMap<String, BTreeMap<String, u64>>,
) {
    for (name, values) in other {
        let sum = sum.entry(name.clone()).or_default();
        for (value, count) in values {
            *sum.entry(value.clone()).or_default() += count;
        }
    }
}

impl Tally {
    pub(super) fn new() -> Self {
        Self {
            methods: BTreeMap::new(),
            latency_us: latency_histogram(),
            fairness: Fairness::default(),
        }
    }

    /// Adds one request, which arrived at `arrived_us` and took `latency_us`.
    pub(super) fn record(&mut self, arrived_us: u64, ending: Ending, latency_us: u64) {
        self.latency_us.saturating_record(latency_us);
        match ending.outcome {
            Outcome::Issued | Outcome::Accepted => self.fairness.served.push(arrived_us),
            Outcome::SoldOut | Outcome::SoldOutAtDb => {
                let first = self.fairness.first_sold_out.get_or_insert(arrived_us);
                *first = (*first).min(arrived_us);
            }
            _ => {}
        }
        let method = self
            .methods
            .entry(ending.method.clone())
            .or_insert_with(MethodTally::new);
        *method.outcomes.entry(ending.outcome).or_default() += 1;
        method.latency_us.saturating_record(latency_us);
        method.retries += u64::from(ending.retries);
        method.compensations += u64::from(ending.compensations);
        method.scripts_killed += u64::from(ending.scripts_killed);
        for (name, value) in ending.labels {
            *method
                .labels
                .entry(name)
                .or_default()
                .entry(value)
                .or_default() += 1;
        }
    }

    /// Counts a settlement of `method`.
    pub(super) fn settlement(&mut self, method: &Arc<str>, what: Settlement) {
        let method = self
            .methods
            .entry(method.clone())
            .or_insert_with(MethodTally::new);
        let count = match what {
            Settlement::Asked => &mut method.settlements.asked,
            Settlement::Issued => &mut method.settlements.issued,
            Settlement::NotIssued => &mut method.settlements.not_issued,
        };
        *count += 1;
    }

    /// Adds another record of the same coupon (another host's).
    pub(super) fn add(&mut self, other: &Tally) {
        for (method, tally) in &other.methods {
            self.methods
                .entry(method.clone())
                .or_insert_with(MethodTally::new)
                .add(tally);
        }
        add_histogram(&mut self.latency_us, &other.latency_us);
        if let Some(theirs) = other.fairness.first_sold_out {
            let first = self.fairness.first_sold_out.get_or_insert(theirs);
            *first = (*first).min(theirs);
        }
        self.fairness.served.extend(&other.fairness.served);
    }

    /// Requests recorded.
    pub(super) fn requests(&self) -> u64 {
        self.methods
            .values()
            .flat_map(|method| method.outcomes.values())
            .sum()
    }

    pub(super) fn summary(&self) -> RequestSummary {
        let mut summary = RequestSummary {
            latency_ms: (!self.latency_us.is_empty()).then(|| LatencySummary::of(&self.latency_us)),
            latency_histogram_us: (!self.latency_us.is_empty()).then(|| v2::hex(&self.latency_us)),
            fairness: self.fairness.summary(),
            ..RequestSummary::default()
        };
        for (method, stats) in &self.methods {
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
                    scripts_killed: stats.scripts_killed,
                    settlements: stats.settlements.clone(),
                    latency_ms: LatencySummary::of(&stats.latency_us),
                    labels: stats.labels.clone(),
                },
            );
        }
        summary
    }
}

impl Fairness {
    fn summary(&self) -> FairnessSummary {
        FairnessSummary {
            first_sold_out_arrival_us: self.first_sold_out,
            served_after_earlier_sold_out: self.first_sold_out.map_or(0, |first| {
                self.served.iter().filter(|&&served| served > first).count() as u64
            }),
        }
    }
}

/// A histogram as a string: hdrhistogram's V2 serialization (the format
/// every HdrHistogram implementation reads), hex-encoded for JSON.
mod v2 {
    use hdrhistogram::Histogram;
    use hdrhistogram::serialization::{Deserializer as V2Reader, Serializer as _, V2Serializer};
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(histogram: &Histogram<u64>, out: S) -> Result<S::Ok, S::Error> {
        out.serialize_str(&hex(histogram))
    }

    pub fn hex(histogram: &Histogram<u64>) -> String {
        let mut bytes = Vec::new();
        // Into a Vec the serialization cannot fail.
        let _ = V2Serializer::new().serialize(histogram, &mut bytes);
        hex::encode(bytes)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(input: D) -> Result<Histogram<u64>, D::Error> {
        let bytes = hex::decode(String::deserialize(input)?).map_err(D::Error::custom)?;
        V2Reader::new()
            .deserialize(&mut bytes.as_slice())
            .map_err(|err| D::Error::custom(format!("{err:?}")))
    }
}

#[derive(Debug, Default, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequestSummary {
    pub total: u64,
    pub by_outcome: BTreeMap<&'static str, u64>,
    /// Every method's requests together, arrival to answer.
    pub latency_ms: Option<LatencySummary>,
    /// The same latencies whole, microseconds: hdrhistogram's V2
    /// serialization, hex-encoded, so a report redraws the distribution.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_histogram_us: Option<String>,
    pub fairness: FairnessSummary,
    pub by_method: BTreeMap<String, MethodSummary>,
    /// Whose requests these are: every host serving this lab.
    pub hosts: HostsSummary,
    /// Members with a call running now on one of those hosts.
    #[serde(skip)]
    pub in_flight_members: BTreeSet<u64>,
}

/// Whether the coupon went to members in arrival order, over every host's
/// requests.
#[derive(Debug, Default, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FairnessSummary {
    /// When the first request refused as sold out arrived, on whichever
    /// host: microseconds since the Unix epoch.
    pub first_sold_out_arrival_us: Option<u64>,
    /// Requests served (issued, or accepted for later) although they arrived
    /// after one refused as sold out: out-of-turn wins.
    pub served_after_earlier_sold_out: u64,
}

/// The hosts whose records the request figures merge.
#[derive(Debug, Default, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostsSummary {
    /// The host answering first, then the others that published a record
    /// of this coupon.
    pub merged: Vec<HostRecord>,
    /// Permits of each REDIS_LUA_GATE gate added up over the hosts merged:
    /// every host has a semaphore of its own, so together they let this
    /// many admitted requests confirm at once.
    pub gate_permits: u64,
    /// Why other hosts' records are missing (Redis could not be read): the
    /// figures are then this host's alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostRecord {
    /// The process: host name, pid and a random part.
    pub id: String,
    /// The host answering (its live record, not a snapshot).
    pub this_host: bool,
    /// How old the snapshot is: a host publishes its record within the
    /// snapshot interval of any change, so for a live host this is the time
    /// since it last served the coupon; 0 for the host answering.
    pub age_ms: u64,
    /// Requests of this coupon that host answered.
    pub requests: u64,
    /// The permits of each gate on that host.
    pub permits_per_gate: u64,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MethodSummary {
    pub total: u64,
    pub by_outcome: BTreeMap<&'static str, u64>,
    pub retries: u64,
    pub compensations: u64,
    /// Scripts its calls sent that outlived the call's deadline and were
    /// ended with SCRIPT KILL.
    pub scripts_killed: u64,
    /// Requests whose outcome was not settled when they were answered (an
    /// unknown outcome: a lost answer to a COMMIT or a script; an undo
    /// that could not run), and what they became once settled.
    pub settlements: Settlements,
    pub latency_ms: LatencySummary,
    /// name → value → requests (REDIS_PUBSUB: `receivers`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, BTreeMap<String, u64>>,
}

/// Requests of a method kept to be settled later (`asked`), and what the
/// settled ones became: `issued` (the member has its row) or `notIssued`
/// (the strategy undid what the request had reserved). The rest are still
/// being settled.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Settlements {
    pub asked: u64,
    pub issued: u64,
    pub not_issued: u64,
}

/// A request kept to be settled, or what it became.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settlement {
    Asked,
    Issued,
    NotIssued,
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
