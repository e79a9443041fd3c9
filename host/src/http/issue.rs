//! `POST /lab/coupons/{couponId}/issue`: run one issue request on the
//! component that serves the chosen method.
//!
//! The host only times, records and translates: which checks run, in which
//! order, and what is compensated is the component's business.

use std::collections::BTreeMap;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use serde::{Deserialize, Serialize};
use tracing::Instrument;
use utoipa::openapi::{ContentBuilder, RefOr, Response, ResponseBuilder};
use utoipa::{IntoResponses, ToSchema};

use super::envelope::{Answer, ApiError, AppJson, idempotency_key, positive, positive_up_to};
use super::integer::{integer, optional_integer};
use super::schema::{ComponentFailed, CouponPath, Success, refusal};
use crate::budget::{self, Stage};
use crate::confirmations;
use crate::consumers::announce;
use crate::lab::Lab;
use crate::outcome::Outcome;
use crate::recorder::Ending;
use crate::runtime::bindings::types::IssueRequest;
use crate::runtime::{IssueCall, Unanswered};
use crate::settlements;
use crate::traces::Finished;

/// Most coupons one request may ask for.
const MAX_QUANTITY: u64 = 100;

pub fn router() -> Router<Lab> {
    Router::new().route("/lab/coupons/{coupon_id}/issue", post(issue))
}

#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct IssueBody {
    /// The member asking, a positive id.
    #[schema(minimum = 1)]
    #[serde(deserialize_with = "integer")]
    member_id: i64,
    /// A loaded method (`GET /lab/strategies`; the document lists those
    /// loaded when it was read), case-insensitive.
    #[schema(example = "REDIS_LUA")]
    method: String,
    /// Isolation-level methods: false skips the member check.
    duplicate_check: Option<bool>,
    /// Passed to the component (the limited drop's request key), 1 to 128
    /// characters.
    #[schema(min_length = 1, max_length = 128)]
    idempotency_key: Option<String>,
    /// How many coupons, 1 to 100 (default 1).
    #[schema(minimum = 1, maximum = 100)]
    #[serde(default, deserialize_with = "optional_integer")]
    quantity: Option<i64>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct Issued {
    coupon_id: u64,
    member_id: u64,
    /// The method that served the request, as it is loaded.
    method: String,
    /// `ISSUED` (200) or `ACCEPTED` (202: confirmed later, see the result).
    #[schema(value_type = String, pattern = "^(ISSUED|ACCEPTED)$")]
    outcome: &'static str,
    /// Arrival order of this request on this coupon (in this server).
    sequence: u64,
    /// What the component said about it, when it said anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
    /// Retries the component made (optimistic version conflicts, ...).
    retries: u32,
}

/// The refusals of an issue request: by status, what it means and the
/// outcomes `error.outcome` names under it.
const REFUSALS: [(StatusCode, &str, &[Outcome]); 3] = [
    (
        StatusCode::NOT_FOUND,
        "`error.outcome` says which is unknown: UNKNOWN_MEMBER (no such member; the coupon exists) \
         or UNKNOWN_COUPON (no such coupon)",
        &[Outcome::UnknownMember, Outcome::UnknownCoupon],
    ),
    (
        StatusCode::CONFLICT,
        "SOLD_OUT, SOLD_OUT_AT_DB or DUPLICATE (`error.outcome`)",
        &[Outcome::SoldOut, Outcome::SoldOutAtDb, Outcome::Duplicate],
    ),
    (
        StatusCode::SERVICE_UNAVAILABLE,
        "VERSION_CONFLICT, DEADLOCK, LOCK_WAIT_TIMEOUT, THROTTLED, QUEUE_FULL, UNAVAILABLE or BUSY \
         (`error.outcome`): worth retrying",
        &[
            Outcome::VersionConflict,
            Outcome::Deadlock,
            Outcome::LockWaitTimeout,
            Outcome::Throttled,
            Outcome::QueueFull,
            Outcome::Unavailable,
            Outcome::Busy,
        ],
    ),
];

/// [`REFUSALS`] in the document: each status's error envelope requires
/// `error.outcome`, one of that status's outcomes.
struct Refused;

impl IntoResponses for Refused {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        REFUSALS
            .iter()
            .map(|(status, description, outcomes)| {
                let content = ContentBuilder::new().schema(Some(refusal(outcomes)));
                let response = ResponseBuilder::new()
                    .description(*description)
                    .content("application/json", content.build());
                (status.as_str().to_string(), response.build().into())
            })
            .collect()
    }
}

/// Issue with the chosen method. An error's message starts with its outcome
/// name (`SOLD_OUT: ...`), which a refusal's `error.outcome` also gives.
#[utoipa::path(
    post,
    path = "/lab/coupons/{couponId}/issue",
    tag = "coupons",
    params(CouponPath),
    request_body = IssueBody,
    responses(
        (status = 200, description = "ISSUED: the coupon was issued", body = Success<Issued>),
        (status = 202, description = "ACCEPTED: reserved, to be confirmed asynchronously", body = Success<Issued>),
        (status = 400, description = "A malformed body, a number out of range, or an unknown method", body = ApiError),
        Refused,
        ComponentFailed,
    )
)]
async fn issue(
    State(lab): State<Lab>,
    CouponPath(coupon_id): CouponPath,
    AppJson(body): AppJson<IssueBody>,
) -> Result<Answer<Issued>, ApiError> {
    budget::lap(Stage::Extract);
    let member_id = positive("memberId", body.member_id)?;
    let quantity = positive_up_to("quantity", body.quantity.unwrap_or(1), MAX_QUANTITY)?;
    if let Some(key) = &body.idempotency_key {
        idempotency_key(key)?;
    }
    let method = body.method.trim().to_ascii_uppercase();
    let Some(strategy) = lab.registry.get(&method) else {
        let loaded: Vec<String> = lab.registry.strategies().keys().cloned().collect();
        return Err(ApiError::bad_request(format!(
            "unknown method {:?}; loaded methods: {}",
            body.method,
            if loaded.is_empty() {
                "none (run `cargo xtask strategies`)".to_string()
            } else {
                loaded.join(", ")
            }
        )));
    };

    let request = IssueRequest {
        coupon_id,
        member_id,
        duplicate_check: body.duplicate_check.unwrap_or(true),
        idempotency_key: body.idempotency_key,
        quantity: quantity as u32,
    };
    let arrival = lab.recorder.arrive(coupon_id, member_id);
    let sequence = arrival.sequence;
    let span = tracing::debug_span!(
        "issue",
        method = %strategy.method,
        coupon = coupon_id,
        outcome = tracing::field::Empty
    );
    announce::announce(&lab, &strategy, coupon_id).await;
    let IssueCall {
        answer,
        scripts_killed,
        trace,
    } = lab
        .runtime
        .issue(&strategy, &request)
        .instrument(span.clone())
        .await;
    announce::announce_after(&lab, &strategy, coupon_id);
    let (ending, detail) = match answer {
        Ok(result) => {
            let detail = if result.settle_later {
                settlements::keep(&lab, &strategy, &request);
                Some(format!(
                    "{}; the result shows what it became once settled",
                    result.detail.as_deref().unwrap_or("outcome unknown")
                ))
            } else {
                result.detail
            };
            (
                Ending {
                    outcome: result.outcome.into(),
                    retries: result.retries,
                    compensations: result.compensations,
                    scripts_killed,
                    labels: result.labels,
                },
                detail,
            )
        }
        Err(Unanswered {
            error,
            compensation,
        }) => {
            tracing::error!(method = %strategy.method, %error, "strategy call failed");
            let outcome = Outcome::from(&error);
            // An undo that could not run now runs later.
            if compensation.as_ref().is_some_and(|done| {
                done.as_ref().is_err() || done.as_ref().is_ok_and(|done| done.unfinished)
            }) {
                settlements::keep(&lab, &strategy, &request);
            }
            let (compensations, undone) = match compensation {
                None => (0, String::new()),
                Some(Ok(done)) => (
                    done.undone,
                    format!(
                        "; compensated: {}",
                        done.detail.as_deref().unwrap_or("done")
                    ),
                ),
                Some(Err(failed)) => (0, format!("; the compensation failed too: {failed}")),
            };
            (
                Ending {
                    outcome,
                    retries: 0,
                    compensations,
                    scripts_killed,
                    labels: Vec::new(),
                },
                Some(format!("{error}{undone}")),
            )
        }
    };
    let outcome = ending.outcome;
    span.record("outcome", outcome.name());
    let retries = ending.retries;
    let finished = Finished {
        coupon_id,
        member_id,
        method: &strategy.method,
        sequence: Some(sequence),
        arrived_us: arrival.arrived_us(),
        outcome,
        compensations: ending.compensations,
    };
    lab.traces.request(finished, trace);
    let latency = lab.recorder.finish(arrival, &strategy.method, ending);
    let metrics = lab.runtime.metrics();
    metrics
        .issue_requests
        .with_label_values(&[&*strategy.method, outcome.name()])
        .inc();
    metrics
        .issue_duration
        .with_label_values(&[&*strategy.method])
        .observe(latency.as_secs_f64());
    if outcome == Outcome::Accepted {
        // Recorded off the response path: the 202 does not wait for it. The
        // record lives in Redis so a consumer in another process can pair its
        // confirmation with it.
        let lab = lab.clone();
        let method = strategy.method.clone();
        tokio::spawn(async move {
            if let Err(err) =
                confirmations::record_accepted(lab.redis(), coupon_id, member_id, &method).await
            {
                tracing::warn!(coupon = coupon_id, member = member_id, error = %err, "could not record an acceptance");
            }
        });
    }

    budget::lap(Stage::Record);
    let status = outcome.status();
    if status.is_success() {
        Ok(Answer(
            status,
            Issued {
                coupon_id,
                member_id,
                method: strategy.method.to_string(),
                outcome: outcome.name(),
                sequence,
                detail,
                retries,
            },
        ))
    } else {
        let detail = detail.unwrap_or_else(|| outcome.default_message(coupon_id, member_id));
        Err(ApiError::refused(outcome, detail))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_is_documented_under_its_own_status() {
        for (status, _, outcomes) in REFUSALS {
            for outcome in outcomes {
                assert_eq!(outcome.status(), status, "{}", outcome.name());
            }
        }
    }
}
