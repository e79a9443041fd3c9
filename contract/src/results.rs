//! The result of one coupon as the lab serves it
//! (`GET /lab/coupons/{couponId}/result`): the host writes it, the load
//! runner and the tests read it through the same types, so a field renamed
//! on one side fails the other's read by its name instead of reading as
//! nothing.
//!
//! The sections the result module of the host builds are here whole. The
//! four parts other host modules own (the request figures, the 202s'
//! confirmations, the engine, the anomalies) are type parameters: the host
//! fills them with its own types, a reader with the views below, which
//! name the fields readers use.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::string::String;
use alloc::vec::Vec;

use serde::{Deserialize, Serialize};

/// How many member ids each list of differences shows.
pub const SAMPLE: usize = 10;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct CouponResult<
    Requests = RequestFigures,
    Confirmations = ConfirmationFigures,
    Engine = EngineFigures,
    Anomaly = AnomalyFigures,
> {
    pub coupon_id: u64,
    pub name: String,
    /// The database the rows were read from and components' SQL ran on; on
    /// Galera with its cluster as the host's node reads it now, whose
    /// conflict counters, read before and after a run, say how many of its
    /// 1213s were the cluster's.
    pub engine: Engine,
    pub total_count: i64,
    /// The `issued_count` column.
    pub issued_count: i64,
    /// Rows in `coupon_issues` for this coupon.
    pub issue_rows: i64,
    pub distinct_members: i64,
    /// Rows beyond the total (0 when the total held).
    pub over_issued: i64,
    /// Rows beyond one per member.
    pub duplicate_members: i64,
    /// `issued_count` minus the rows: non-zero when the counter and the rows disagree.
    pub count_mismatch: i64,
    pub invariants: Invariants,
    /// Requests every host answered for this coupon (`hosts` says which).
    pub requests: Requests,
    /// The Redis reservation set against the issue rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis: Option<RedisFigures>,
    /// The stock's shards, for a coupon whose stock is split over them
    /// (REDIS_LUA_SHARDED), in shard order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<Vec<ShardFigures>>,
    /// Requests answered 202 and what became of them (every process's).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "schema",
        schema(schema_with = crate::schema::optional_fields::<Confirmations>)
    )]
    pub confirmations: Option<Confirmations>,
    /// The labels the serving methods' descriptors ask to total, each under
    /// its field: value → requests (REDIS_PUBSUB's `publishReceivers`:
    /// requests by how many subscribers received the message). Left out of
    /// the document's schema: their names are the components' to choose,
    /// and a schema of "any other field" would also claim the fields the
    /// confirmations flatten in.
    #[serde(flatten)]
    #[cfg_attr(feature = "schema", schema(ignore))]
    pub label_totals: BTreeMap<String, BTreeMap<String, u64>>,
    /// The stream a stream or write-behind method served this coupon through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<StreamSummary>,
    /// What went wrong, each with the requests that witness it, from this
    /// host's traces (`GET /lab/coupons/{couponId}/traces` shows them).
    pub anomalies: Vec<Anomaly>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Invariants {
    /// Never more issued than the total (rows and counter alike).
    pub never_over_issued: bool,
    /// At most one coupon per member.
    pub one_per_member: bool,
    /// The counter equals the rows.
    pub count_matches_rows: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RedisFigures {
    /// False when Redis could not be read; `error` then says why, and the
    /// figures above still come from the database.
    pub readable: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Times this host found Redis without the components' user (Redis
    /// restarted empty, a cluster node came back) and set it up again.
    /// Whatever only Redis held then — reservations, streams, the records
    /// of 202s — was lost: the rows it no longer matches show as
    /// `dbOnlyMembers`.
    pub set_up_again: u64,
    #[serde(flatten)]
    #[cfg_attr(
        feature = "schema",
        schema(schema_with = crate::schema::optional_fields::<SetComparison>)
    )]
    pub comparison: Option<SetComparison>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SetComparison {
    /// Members in `coupon:issued:{id}`.
    pub set_size: usize,
    /// Reserved in Redis, with no issue row: a confirm in flight, or a
    /// reservation a failed confirm did not take back.
    pub redis_only_members: Difference,
    /// Issued in the database, missing from the set: Redis lost the
    /// reservation (restart without persistence, deleted keys), or the coupon
    /// was issued by a method that does not reserve in Redis.
    pub db_only_members: Difference,
    /// Reserved in Redis only, with no 202 waiting for its confirmation and
    /// no call running for it on any host (by the hosts' latest records):
    /// left by a process that died between two steps. Nothing releases them
    /// on its own — only the strategy may decide that, and no process can be
    /// sure that another has no call in flight — so they stay stock that
    /// cannot be sold, counted here.
    pub stranded_members: Difference,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct Difference {
    pub count: usize,
    /// The smallest member ids, at most [`SAMPLE`].
    pub sample: Vec<u64>,
}

impl Difference {
    /// The members of `these` not in `those`: how many, and the smallest.
    pub fn between(these: &BTreeSet<u64>, those: &BTreeSet<u64>) -> Self {
        let mut only = these.difference(those).copied();
        let sample: Vec<u64> = only.by_ref().take(SAMPLE).collect();
        Difference {
            count: sample.len() + only.count(),
            sample,
        }
    }
}

impl RedisFigures {
    /// The smallest stranded members, when the set could be compared.
    pub fn stranded_sample(&self) -> &[u64] {
        self.comparison
            .as_ref()
            .map_or(&[], |c| c.stranded_members.sample.as_slice())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ShardFigures {
    pub shard: u32,
    /// The shard's part of the total (`coupon:shard:{couponId-shard}:stock`);
    /// null when Redis has none (never set, or lost).
    pub stock: Option<u64>,
    /// Members reserved on the shard (`coupon:shard:{couponId-shard}:issued`).
    pub reserved: u64,
    /// Issue rows of the members this shard serves.
    pub issued: u64,
    /// What the shard would still sell: its stock less its reservations.
    pub remaining: Option<u64>,
}

/// A coupon's stream as a whole, for the result endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct StreamSummary {
    /// Entries ever added, whether they are still there (acked entries
    /// stay unless the lab trims its streams, `COUPONLAB_STREAM_TRIM`).
    pub length: u64,
    /// Delivered to a consumer, not acked yet.
    pub pending: u64,
    /// Not delivered to any consumer yet (the group's lag). With `pending`,
    /// what the consumers still owe: an entry whose request got no answer
    /// has no 202 on record, yet it is confirmed all the same.
    pub undelivered: u64,
    /// Entries in its dead-letter stream.
    pub dead_letters: u64,
}

impl StreamSummary {
    /// Entries delivered and not acked, or not delivered yet.
    pub fn owed(&self) -> u64 {
        self.pending + self.undelivered
    }
}

/// The request figures as a reader takes them (the host's recorder writes
/// more: each host's record, settlements, labels).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestFigures {
    pub total: u64,
    /// Outcome → requests.
    pub by_outcome: BTreeMap<String, u64>,
    /// Arrival to answer, every method's requests together.
    pub latency_ms: Option<Latency>,
    /// The same latencies whole, microseconds: hdrhistogram's V2
    /// serialization, hex-encoded.
    #[serde(default)]
    pub latency_histogram_us: Option<String>,
    pub fairness: Fairness,
    pub by_method: BTreeMap<String, MethodFigures>,
}

/// One method's requests.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MethodFigures {
    pub total: u64,
    pub by_outcome: BTreeMap<String, u64>,
    pub latency_ms: Latency,
}

impl RequestFigures {
    /// The requests answered with `outcome`.
    pub fn answered(&self, outcome: &str) -> u64 {
        self.by_outcome.get(outcome).copied().unwrap_or(0)
    }
}

/// Latency percentiles, milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fairness {
    /// When the first request refused as sold out arrived, on whichever
    /// host: microseconds since the Unix epoch.
    pub first_sold_out_arrival_us: Option<u64>,
    /// Requests served although they arrived after one refused as sold
    /// out: out-of-turn wins.
    pub served_after_earlier_sold_out: u64,
}

/// What became of the requests answered 202, as a reader takes it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfirmationFigures {
    pub accepted: u64,
    /// The real outcome of each confirmed 202.
    pub async_results: BTreeMap<String, u64>,
    /// Answered 202, no outcome yet.
    pub pending: u64,
    /// Accepted → committed, for the issued ones.
    pub confirmation_lag_ms: Option<Latency>,
    #[serde(default)]
    pub broker_events: BTreeMap<String, u64>,
}

/// The database that answered, as a reader takes it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct EngineFigures {
    /// `mariadb`, `mysql`, `postgresql` or `galera`.
    pub name: String,
    pub version: String,
    #[serde(default)]
    pub settings: BTreeMap<String, String>,
}

/// One anomaly the result names, as a reader takes it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct AnomalyFigures {
    /// `lost-update`, `check-then-act`, `out-of-turn`, ...
    pub kind: String,
    /// What happened, in a sentence.
    pub explanation: String,
}

impl<Requests, Engine, Anomaly> CouponResult<Requests, ConfirmationFigures, Engine, Anomaly> {
    /// Answered 202 with no outcome yet; 0 for a coupon without 202s.
    pub fn pending(&self) -> u64 {
        self.confirmations.as_ref().map_or(0, |c| c.pending)
    }
}

/// The Redis list (host-only, out of the components' `coupon:*`) of what
/// the host had the components rebuild from the rows after it saw its Redis
/// primary change, newest first, [`REBUILDS_KEEP`] at most.
pub const REBUILDS_KEY: &str = "couponlab:rebuilds";
pub const REBUILDS_KEEP: usize = 1000;

/// One coupon's rebuild after a failover, as the host asked its component
/// for it and the component answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rebuild {
    pub coupon_id: u64,
    /// The method whose component rebuilt it.
    pub method: String,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: i64,
    /// Members with a row that Redis had lost, put back (write-behind's
    /// reservation set; the gate's buyers whose counts were behind).
    pub members_restored: u64,
    /// What Redis would sell before and after: the write-behind set's room,
    /// the gate's stock (`None` when the gate was not set).
    pub remaining_before: Option<i64>,
    pub remaining_after: Option<i64>,
    /// Why it could not be rebuilt, when it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
