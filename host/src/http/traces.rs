//! `GET /lab/coupons/{couponId}/traces`: the request traces this host kept
//! for a coupon ([`crate::traces`]), filtered, each with the anomalies it
//! witnesses and, for a 202, the trace of its confirmation; on a Galera
//! node, the node's conflict counters beside them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::Router;
use axum::extract::{FromRequestParts, Query, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::routing::get;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::envelope::{Answer, ApiError, storable};
use super::schema::{CouponPath, DatabaseFailed, Success, UnknownCoupon};
use crate::lab::Lab;
use crate::results;
use crate::runtime::SqlCluster as Cluster;
use crate::traces::anomalies::KINDS;
use crate::traces::{Kept, RequestTrace};

/// Traces one answer lists when `limit` is not given, and at most.
const DEFAULT_LIMIT: usize = 50;
const MAX_LIMIT: usize = 1000;

pub fn router() -> Router<Lab> {
    Router::new().route("/lab/coupons/{coupon_id}/traces", get(traces))
}

/// Which traces to list; every filter given must match.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TraceFilter {
    /// An outcome name (`ISSUED`, `SOLD_OUT`, ...), case-insensitive; any
    /// other text (but one with a NUL) matches no trace.
    #[param(pattern = r"^[^\u0000]*$")]
    outcome: Option<String>,
    /// A method name, case-insensitive; any other text (but one with a
    /// NUL) matches no trace.
    #[param(pattern = r"^[^\u0000]*$")]
    method: Option<String>,
    /// An anomaly kind: only the traces that witness one of that kind.
    #[param(value_type = Option<String>, pattern = "^(lost-update|check-then-act|out-of-turn|stranded-stock|acked-lost|refused-but-issued)$")]
    anomaly: Option<String>,
    /// How many traces at most, 1 to 1000 (default 50); the first by start.
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

impl<S: Send + Sync> FromRequestParts<S> for TraceFilter {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Query(filter) = Query::<TraceFilter>::from_request_parts(parts, state)
            .await
            .map_err(|err| ApiError::bad_request(err.body_text()))?;
        for (name, text) in [("outcome", &filter.outcome), ("method", &filter.method)] {
            if let Some(text) = text {
                storable(name, text)?;
            }
        }
        if let Some(limit) = filter.limit
            && !(1..=MAX_LIMIT as i64).contains(&limit)
        {
            return Err(ApiError::bad_request(format!(
                "limit must be from 1 to {MAX_LIMIT}, not {limit}"
            )));
        }
        if let Some(kind) = &filter.anomaly
            && !KINDS.contains(&kind.as_str())
        {
            return Err(ApiError::bad_request(format!(
                "unknown anomaly kind {kind:?}; the kinds are {}",
                KINDS.join(", ")
            )));
        }
        Ok(filter)
    }
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct TraceList {
    coupon_id: u64,
    /// Traces this host holds for the coupon, before the filters.
    held: usize,
    /// Those that passed them, at most `limit`, in the order they started.
    traces: Vec<TraceView>,
    /// On a Galera node, its cluster as read with the list: a trace's 1213
    /// at a statement is a brute-force abort or a local deadlock, told
    /// apart only by the node's counters (`certFailures`, `bfAborts`).
    #[serde(skip_serializing_if = "Option::is_none")]
    cluster: Option<Cluster>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct TraceView {
    #[serde(flatten)]
    #[schema(inline, value_type = RequestTrace)]
    trace: Arc<RequestTrace>,
    /// The kinds of the anomalies it witnesses.
    anomalies: Vec<&'static str>,
    /// For a 202: the trace of the call that confirmed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<RequestTrace>)]
    confirmation: Option<Arc<RequestTrace>>,
}

/// Each request's capability calls, with start and duration: a waterfall.
#[utoipa::path(
    get,
    path = "/lab/coupons/{couponId}/traces",
    operation_id = "traces",
    tag = "coupons",
    params(CouponPath, TraceFilter),
    responses(
        (status = 200, description = "The coupon's traces on this host", body = Success<TraceList>),
        (status = 400, description = "A coupon id that is not a positive integer, a limit out of range, an unknown anomaly kind or a filter with a NUL character", body = ApiError),
        UnknownCoupon,
        DatabaseFailed,
    )
)]
async fn traces(
    State(lab): State<Lab>,
    CouponPath(coupon_id): CouponPath,
    filter: TraceFilter,
) -> Result<Answer<TraceList>, ApiError> {
    let Some(result) = results::read(&lab, coupon_id).await? else {
        return Err(ApiError::not_found(format!(
            "coupon {coupon_id} does not exist"
        )));
    };
    let mut witnessed: HashMap<u64, Vec<&'static str>> = HashMap::new();
    for anomaly in &result.anomalies {
        for witness in &anomaly.witnesses {
            let kinds = witnessed.entry(witness.trace_id).or_default();
            if !kinds.contains(&anomaly.kind) {
                kinds.push(anomaly.kind);
            }
        }
    }
    let all = lab.traces.of_coupon(coupon_id);
    let mut confirmations: BTreeMap<(u64, &str), Vec<&Arc<RequestTrace>>> = BTreeMap::new();
    for trace in all.iter().filter(|t| t.kept == Kept::Confirmation) {
        confirmations
            .entry((trace.member_id, trace.method.as_str()))
            .or_default()
            .push(trace);
    }
    let same = |wanted: &Option<String>, value: &str| {
        wanted
            .as_ref()
            .is_none_or(|wanted| wanted.trim().eq_ignore_ascii_case(value))
    };
    let limit = filter.limit.map_or(DEFAULT_LIMIT, |limit| limit as usize);
    let traces = all
        .iter()
        .filter(|t| same(&filter.outcome, &t.outcome) && same(&filter.method, &t.method))
        .map(|trace| TraceView {
            anomalies: witnessed.get(&trace.id).cloned().unwrap_or_default(),
            confirmation: (trace.outcome == "ACCEPTED")
                .then(|| confirmations.get(&(trace.member_id, trace.method.as_str())))
                .flatten()
                .and_then(|found| found.iter().find(|c| c.started_us >= trace.started_us))
                .map(|found| Arc::clone(found)),
            trace: Arc::clone(trace),
        })
        .filter(|view| {
            filter
                .anomaly
                .as_ref()
                .is_none_or(|kind| view.anomalies.contains(&kind.as_str()))
        })
        .take(limit)
        .collect();
    Ok(Answer(
        StatusCode::OK,
        TraceList {
            coupon_id,
            held: all.len(),
            traces,
            cluster: result.engine.cluster,
        },
    ))
}
