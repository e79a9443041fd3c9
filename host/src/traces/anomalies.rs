//! Anomalies named, each with the traces that witness it: the result of a
//! coupon says not only that it was over-issued but which transactions
//! read a stale count and which ones committed in between.
//!
//! The analysis knows the lab's schema and key names (the coupon row's
//! `issued_count`, the reservation set `coupon:issued:{id}`), never a
//! method: whatever component read a count, wrote on it and committed is
//! judged alike. It sees this process's kept traces; on several hosts each
//! explains its own requests.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use utoipa::ToSchema;

use super::{Kept, RequestTrace};
use crate::runtime::trace::{Text, TracedCall};

/// Every kind of anomaly, as `kind` names it.
pub const KINDS: [&str; 6] = [
    "lost-update",
    "check-then-act",
    "out-of-turn",
    "stranded-stock",
    "acked-lost",
    "refused-but-issued",
];

/// Most witnesses one anomaly lists besides the one it is about.
const MAX_WITNESSES: usize = 8;

/// One anomaly and the requests that make it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Anomaly {
    /// `lost-update`, `check-then-act`, `out-of-turn`, `stranded-stock`,
    /// `acked-lost` or `refused-but-issued`.
    pub kind: &'static str,
    /// Its name in Adya's or Elle's taxonomy, where one applies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub taxonomy: Option<&'static str>,
    /// What happened, in a sentence, with the values read.
    pub explanation: String,
    /// The requests, the one it is about first.
    pub witnesses: Vec<Witness>,
}

/// A request in an anomaly: what it read and when it wrote.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Witness {
    pub trace_id: u64,
    pub member_id: u64,
    pub method: String,
    pub outcome: String,
    /// Its part: `stale-read`, `committed-between`, `refused-earlier`,
    /// `served-later`, `last-call`, `acked`, `refused`.
    pub role: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sequence: Option<u64>,
    pub arrived_us: u64,
    /// The integers its deciding read brought back.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(value_type = BTreeMap<String, i64>)]
    pub read: BTreeMap<Text, i64>,
    /// When that read started and when its write took effect (the COMMIT
    /// or the SADD answered), microseconds since the Unix epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_at_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wrote_at_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub isolation: Option<&'static str>,
}

/// What the analysis needs besides the traces.
pub struct Facts<'a> {
    pub total: i64,
    /// Members with an issue row.
    pub issued_members: &'a BTreeSet<u64>,
    /// Members reserved in Redis with no row and no call in flight.
    pub stranded_members: &'a [u64],
    /// The coupon's reservation set's key.
    pub reservation_key: &'a str,
}

/// A read of a count followed by a write that counted: a decision.
struct Decision<'a> {
    trace: &'a RequestTrace,
    read: &'a TracedCall,
    count: i64,
    read_at: u64,
    wrote_at: u64,
}

impl Decision<'_> {
    fn witness(&self, role: &'static str) -> Witness {
        Witness {
            read: self.read.read.clone(),
            read_at_us: Some(self.read_at),
            wrote_at_us: Some(self.wrote_at),
            isolation: self.read.isolation,
            ..plain(self.trace, role)
        }
    }
}

fn plain(trace: &RequestTrace, role: &'static str) -> Witness {
    Witness {
        trace_id: trace.id,
        member_id: trace.member_id,
        method: trace.method.clone(),
        outcome: trace.outcome.clone(),
        role,
        sequence: trace.sequence,
        arrived_us: trace.arrived_us,
        read: BTreeMap::new(),
        read_at_us: None,
        wrote_at_us: None,
        isolation: None,
    }
}

fn at(trace: &RequestTrace, call: &TracedCall) -> (u64, u64) {
    let start = trace.started_us + call.start_us;
    (start, start + call.duration_us)
}

/// Transactions that read the coupon row's `issued_count` and committed a
/// write in the same transaction.
fn committed_counts(trace: &RequestTrace) -> Option<Decision<'_>> {
    let calls = &trace.calls;
    let read = calls.iter().find(|call| {
        call.capability == "sql"
            && &*call.op == "SELECT"
            && call.target.as_deref() == Some("coupons")
            && call.read.contains_key("issued_count")
            && call.transaction.is_some()
    })?;
    let same_tx = |call: &&TracedCall| call.transaction == read.transaction;
    let wrote = calls.iter().filter(same_tx).any(|call| {
        matches!(&*call.op, "INSERT" | "UPDATE")
            && call.rows.unwrap_or(0) > 0
            && &*call.reply == "ok"
    });
    let commit = calls
        .iter()
        .filter(same_tx)
        .find(|call| &*call.op == "COMMIT" && &*call.reply == "ok")?;
    wrote.then(|| Decision {
        trace,
        read,
        count: read.read["issued_count"],
        read_at: at(trace, read).0,
        wrote_at: at(trace, commit).1,
    })
}

/// Requests that read the reservation set's size (SCARD) and then added
/// to it (an SADD that added).
fn reserved_counts<'a>(trace: &'a RequestTrace, key: &str) -> Option<Decision<'a>> {
    let on_set = |call: &&TracedCall, op: &str| {
        call.capability == "redis" && &*call.op == op && call.target.as_deref() == Some(key)
    };
    let read = trace.calls.iter().find(|call| on_set(call, "SCARD"))?;
    let added = trace
        .calls
        .iter()
        .find(|call| on_set(call, "SADD") && call.read.get("reply") == Some(&1))?;
    Some(Decision {
        trace,
        read,
        count: *read.read.get("reply")?,
        read_at: at(trace, read).0,
        wrote_at: at(trace, added).1,
    })
}

/// Writes that took a unit back (an SREM that removed), by when.
fn released(traces: &[&RequestTrace], key: &str) -> Vec<u64> {
    let mut times: Vec<u64> = traces
        .iter()
        .flat_map(|trace| {
            trace
                .calls
                .iter()
                .filter(|call| {
                    call.capability == "redis"
                        && &*call.op == "SREM"
                        && call.target.as_deref() == Some(key)
                        && call.read.get("reply") == Some(&1)
                })
                .map(|call| at(trace, call).1)
        })
        .collect();
    times.sort_unstable();
    times
}

/// Every decision that took the count past the total, with the decisions
/// that wrote between its read and its write: what made its read stale.
fn past_the_total(
    mut decisions: Vec<Decision<'_>>,
    released: &[u64],
    total: i64,
    kind: &'static str,
    taxonomy: Option<&'static str>,
    counted: &str,
) -> Vec<Anomaly> {
    decisions.sort_by_key(|d| d.wrote_at);
    let mut anomalies = Vec::new();
    for (index, decision) in decisions.iter().enumerate() {
        let taken_back = released.partition_point(|&t| t <= decision.wrote_at) as i64;
        let after = index as i64 + 1 - taken_back;
        if after <= total || decision.count >= total {
            continue;
        }
        let between: Vec<&Decision<'_>> = decisions
            .iter()
            .filter(|other| {
                other.wrote_at > decision.read_at
                    && other.wrote_at < decision.wrote_at
                    && other.count < total
            })
            .collect();
        let mut witnesses = vec![decision.witness("stale-read")];
        witnesses.extend(
            between
                .iter()
                .take(MAX_WITNESSES)
                .map(|d| d.witness("committed-between")),
        );
        anomalies.push(Anomaly {
            kind,
            taxonomy,
            explanation: format!(
                "member {} read {counted} = {} (below the total {total}) and its write made it {after}; \
                 {} other request(s) wrote between its read and its write, each having read a count below the total",
                decision.trace.member_id,
                decision.count,
                between.len(),
            ),
            witnesses,
        });
    }
    anomalies
}

/// The anomalies `traces` (one coupon's, in start order) witness.
pub fn find(traces: &[&RequestTrace], facts: &Facts<'_>) -> Vec<Anomaly> {
    let requests: Vec<&RequestTrace> = traces
        .iter()
        .copied()
        .filter(|t| t.kept != Kept::Confirmation)
        .collect();
    let mut anomalies = past_the_total(
        traces.iter().filter_map(|t| committed_counts(t)).collect(),
        &[],
        facts.total,
        "lost-update",
        Some("G-single"),
        "issued_count",
    );
    anomalies.extend(past_the_total(
        traces
            .iter()
            .filter_map(|t| reserved_counts(t, facts.reservation_key))
            .collect(),
        &released(traces, facts.reservation_key),
        facts.total,
        "check-then-act",
        None,
        "SCARD",
    ));
    anomalies.extend(out_of_turn(&requests));
    anomalies.extend(stranded(traces, facts.stranded_members));
    anomalies.extend(answers_against_rows(&requests, facts.issued_members));
    anomalies
}

/// Members served after the earliest sold-out refusal arrived.
fn out_of_turn(requests: &[&RequestTrace]) -> Option<Anomaly> {
    let refused = requests.iter().find(|t| t.kept == Kept::FirstRefusal)?;
    let later: Vec<&&RequestTrace> = requests
        .iter()
        .filter(|t| t.kept == Kept::Served && t.arrived_us > refused.arrived_us)
        .collect();
    let first = later.first()?;
    let mut witnesses = vec![plain(refused, "refused-earlier")];
    witnesses.extend(
        later
            .iter()
            .take(MAX_WITNESSES)
            .map(|t| plain(t, "served-later")),
    );
    Some(Anomaly {
        kind: "out-of-turn",
        taxonomy: None,
        explanation: format!(
            "member {} was refused SOLD_OUT, and {} request(s) that arrived after it were served, \
             the first {} µs later: fairness, which no isolation level promises (Adya and Elle have no name for it)",
            refused.member_id,
            later.len(),
            first.arrived_us - refused.arrived_us,
        ),
        witnesses,
    })
}

/// Each stranded member's last traced call: what the call that reserved it
/// did before it ended.
fn stranded(traces: &[&RequestTrace], members: &[u64]) -> Vec<Anomaly> {
    members
        .iter()
        .map(|&member| {
            let last = traces.iter().rev().find(|t| t.member_id == member);
            let explanation = match last {
                Some(trace) => format!(
                    "member {member} is reserved in Redis with no row and no call in flight; its last call here ended {} \
                     after {} capability call(s), the last {}",
                    trace.outcome,
                    trace.calls.len(),
                    trace.calls.last().map_or("none".into(), |c| format!("{} {}", c.op, c.reply)),
                ),
                None => format!(
                    "member {member} is reserved in Redis with no row and no call in flight; no call of this process \
                     traced it (another host's, or one whose server ended before it answered)"
                ),
            };
            Anomaly {
                kind: "stranded-stock",
                taxonomy: None,
                explanation,
                witnesses: last.map(|t| plain(t, "last-call")).into_iter().collect(),
            }
        })
        .collect()
}

/// 200s without a row, and refusals with one.
fn answers_against_rows(requests: &[&RequestTrace], rows: &BTreeSet<u64>) -> Vec<Anomaly> {
    let served: BTreeSet<u64> = requests
        .iter()
        .filter(|t| t.kept == Kept::Served)
        .map(|t| t.member_id)
        .collect();
    let mut anomalies = Vec::new();
    for trace in requests {
        if trace.outcome == "ISSUED" && !rows.contains(&trace.member_id) {
            anomalies.push(Anomaly {
                kind: "acked-lost",
                taxonomy: Some("lost"),
                explanation: format!(
                    "member {} was answered ISSUED and has no issue row: an acknowledged write missing",
                    trace.member_id
                ),
                witnesses: vec![plain(trace, "acked")],
            });
        }
        let refused = matches!(trace.kept, Kept::Wrote | Kept::Failed | Kept::Compensated);
        if refused && rows.contains(&trace.member_id) && !served.contains(&trace.member_id) {
            anomalies.push(Anomaly {
                kind: "refused-but-issued",
                taxonomy: None,
                explanation: format!(
                    "member {} was answered {} and has an issue row, which no served request of this process explains: \
                     a write whose answer said otherwise (Elle counts such an operation as indeterminate)",
                    trace.member_id, trace.outcome
                ),
                witnesses: vec![plain(trace, "refused")],
            });
        }
    }
    anomalies
}

#[cfg(test)]
mod tests;
