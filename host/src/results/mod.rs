//! The result of one coupon (`GET /lab/coupons/{couponId}/result`): what
//! happened to it, and whether the two invariants held.
//!
//! The Redis section compares the reservation set `coupon:issued:{id}` with
//! the issue rows; it is left out for a coupon no method reserved in Redis.
//! The shards section shows a sharded stock shard by shard; it is left out
//! for a coupon whose stock was never split.
//! Reads come in the order that keeps the figures consistent: the outcomes
//! of 202s, then the rows, then the reservation set. A reservation whose
//! confirm is still running shows up as Redis-only, but a committed issue
//! never shows up as DB-only for having committed between the two reads.
//!
//! The result's types are the contract's (`couponlab_contract::results`),
//! which the load runner and the tests read it through.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use couponlab_contract::keys;
use couponlab_contract::results::{self, Invariants};

use crate::announcements;
use crate::confirmations::{self, AsyncSummary};
use crate::db::{on_engine, signed};
use crate::lab::Lab;
use crate::recorder::RequestSummary;
use crate::runtime::SqlEngine as Engine;
use crate::runtime::Strategy;
use crate::runtime::bindings::types::ResultLabel;
use crate::snapshots;
use crate::traces::RequestTrace;
use crate::traces::anomalies::{self, Anomaly, Facts};

mod reservations;
mod shards;
mod stream;

use self::reservations::{noting_failure, redis_figures};
use self::shards::shard_figures;
pub use self::stream::stream_summary;

/// The result as the host serves it: the contract's, filled with the
/// host's own request figures, confirmations, engine and anomalies.
pub type CouponResult = results::CouponResult<RequestSummary, AsyncSummary, Engine, Anomaly>;

/// Reads the result of `coupon_id`; `None` when there is no such coupon.
/// Only the database failing fails it: Redis being down is a figure of the
/// result.
pub async fn read(lab: &Lab, coupon_id: u64) -> Result<Option<CouponResult>, sqlx::Error> {
    // The outcomes of 202s are read before the rows: a consumer records an
    // outcome after its commit, so every outcome read here has its row in
    // the reads below, and `pending: 0` means every row is counted.
    let confirmations_read = confirmations::summary(lab.redis(), coupon_id).await;
    let statement = "SELECT c.name, c.total_count, c.issued_count, \
                (SELECT COUNT(*) FROM coupon_issues i WHERE i.coupon_id = c.id) AS issue_rows, \
                (SELECT COUNT(DISTINCT i.member_id) FROM coupon_issues i WHERE i.coupon_id = c.id) AS distinct_members \
         FROM coupons c WHERE c.id = ? AND NOT c.scratch";
    let row: Option<(String, i64, i64, i64, i64)> = on_engine!(lab.db(), statement, |db, sql| {
        sqlx::query_as(sql)
            .bind(signed(coupon_id))
            .fetch_optional(db)
            .await
    })?;
    let Some((name, total_count, issued_count, issue_rows, distinct_members)) = row else {
        return Ok(None);
    };
    let statement = "SELECT member_id FROM coupon_issues WHERE coupon_id = ?";
    let issued_members: Vec<i64> = on_engine!(lab.db(), statement, |db, sql| {
        sqlx::query_scalar(sql)
            .bind(signed(coupon_id))
            .fetch_all(db)
            .await
    })?;
    let issued_members: BTreeSet<u64> = issued_members
        .into_iter()
        .map(|member| member as u64)
        .collect();
    let requests = snapshots::every_host(lab, coupon_id).await;
    // The methods that served the coupon: those any host answered for,
    // and those any process answered 202 for (a restarted server's record
    // of requests starts empty, Redis's does not).
    let accepting = confirmations::accepting_methods(lab.redis(), coupon_id).await;
    let mut methods: BTreeSet<String> = requests.by_method.keys().cloned().collect();
    methods.extend(accepting.as_ref().cloned().unwrap_or_default());
    let serving: Vec<Arc<Strategy>> = methods
        .iter()
        .filter_map(|method| lab.registry.get(method))
        .collect();
    let label_totals = label_totals(
        &requests,
        serving.iter().flat_map(|strategy| &strategy.result_labels),
    );
    // A coupon served by no method that reserves in `coupon:issued:{id}` has
    // no Redis section unless the set has members: database-only methods
    // never touch Redis, and the drop gate keeps keys of its own.
    let reserving = serving.iter().any(|s| s.reservation_set);
    // A reservation waiting for its 202's confirmation, or for a call
    // running now, is not stranded.
    let mut waiting = requests.in_flight_members.clone();
    if let Ok(Some(read)) = &confirmations_read {
        waiting.extend(&read.pending_members);
    }
    let mut redis = redis_figures(lab, coupon_id, &issued_members, &waiting, reserving).await;
    let confirmations = noting_failure(lab, confirmations_read, &mut redis);
    noting_failure(lab, accepting.map(Some), &mut redis);
    // The stream behind the coupon's asynchronous method, if it has one.
    let stream = serving
        .iter()
        .find_map(|strategy| announcements::stream_of(&strategy.world));
    let stream = match stream {
        Some(kind) => noting_failure(
            lab,
            stream_summary(lab.redis(), kind, coupon_id).await,
            &mut redis,
        ),
        None => None,
    };
    let shards = noting_failure(
        lab,
        shard_figures(lab.redis(), coupon_id, &issued_members).await,
        &mut redis,
    );
    let traces = lab.traces.of_coupon(coupon_id);
    let traces: Vec<&RequestTrace> = traces.iter().map(|trace| &**trace).collect();
    let facts = Facts {
        total: total_count,
        issued_members: &issued_members,
        stranded_members: redis.as_ref().map_or(&[], |r| r.stranded_sample()),
        reservation_key: &keys::issued(coupon_id),
    };
    let anomalies = anomalies::find(&traces, &facts);
    Ok(Some(CouponResult {
        coupon_id,
        name,
        engine: lab.runtime.sql_engine().now(lab.db()).await,
        total_count,
        issued_count,
        issue_rows,
        distinct_members,
        over_issued: (issue_rows - total_count).max(0),
        duplicate_members: issue_rows - distinct_members,
        count_mismatch: issued_count - issue_rows,
        invariants: Invariants {
            never_over_issued: issue_rows <= total_count && issued_count <= total_count,
            one_per_member: issue_rows == distinct_members,
            count_matches_rows: issued_count == issue_rows,
        },
        requests,
        redis,
        shards,
        confirmations,
        label_totals,
        stream,
        anomalies,
    }))
}

/// The labels the serving methods ask the result to total, each summed over
/// every method's requests: field → label value → requests. A field no
/// request reported its label for is left out.
fn label_totals<'a>(
    requests: &RequestSummary,
    asked: impl IntoIterator<Item = &'a ResultLabel>,
) -> BTreeMap<String, BTreeMap<String, u64>> {
    let asked: BTreeSet<(&str, &str)> = asked
        .into_iter()
        .map(|asked| (asked.label.as_str(), asked.field.as_str()))
        .collect();
    let mut totals: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for (label, field) in asked {
        let reported = requests
            .by_method
            .values()
            .filter_map(|method| method.labels.get(label))
            .flatten();
        for (value, count) in reported {
            *totals
                .entry(field.to_string())
                .or_default()
                .entry(value.clone())
                .or_default() += count;
        }
    }
    totals
}

#[cfg(test)]
mod tests {
    use serde::Serialize;

    use super::*;
    use crate::outcome::{Ending, Outcome};
    use crate::recorder::Recorder;

    fn accepted(method: &str, labels: &[(&str, &str)]) -> Ending {
        Ending {
            labels: labels
                .iter()
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .collect(),
            ..Ending::of(method, Outcome::Accepted)
        }
    }

    /// The label totals as the result's JSON shows them, next to a field of
    /// its own.
    fn shown(totals: BTreeMap<String, BTreeMap<String, u64>>) -> String {
        #[derive(Serialize)]
        struct Shown {
            before: u8,
            #[serde(flatten)]
            totals: BTreeMap<String, BTreeMap<String, u64>>,
        }
        serde_json::to_string(&Shown { before: 1, totals }).unwrap()
    }

    #[test]
    fn an_asked_label_is_totalled_across_methods_under_its_field() {
        let recorder = Recorder::default();
        let requests = [
            accepted("REDIS_PUBSUB", &[("receivers", "1")]),
            accepted("REDIS_PUBSUB", &[("receivers", "0")]),
            accepted("OTHER", &[("receivers", "1"), ("unasked", "x")]),
        ];
        for (member, ending) in requests.into_iter().enumerate() {
            let arrival = recorder.arrive(7, member as u64);
            recorder.finish(arrival, ending);
        }
        let receivers = ResultLabel {
            label: "receivers".into(),
            field: "publishReceivers".into(),
        };
        let summary = recorder.summary(7);
        assert_eq!(
            shown(label_totals(&summary, [&receivers])),
            r#"{"before":1,"publishReceivers":{"0":1,"1":2}}"#
        );
        // Nobody asked, or nobody reported it: no field at all.
        assert_eq!(shown(label_totals(&summary, [])), r#"{"before":1}"#);
        let unreported = ResultLabel {
            label: "absent".into(),
            field: "absentTotals".into(),
        };
        assert_eq!(
            shown(label_totals(&summary, [&unreported])),
            r#"{"before":1}"#
        );
    }
}
