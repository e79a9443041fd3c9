//! `POST /lab/coupons/{couponId}/issue`: the body checked, one issue
//! request run on the component that serves the chosen method
//! ([`crate::issuing`]), its answer in the envelope.

use std::collections::BTreeMap;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use serde::{Deserialize, Serialize};
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Type};
use utoipa::openapi::{ContentBuilder, RefOr, Response, ResponseBuilder};
use utoipa::{IntoResponses, ToSchema};

use super::envelope::{
    Answer, ApiError, AppJson, idempotency_key, positive, positive_up_to, storable,
};
use super::integer::{integer, optional_integer};
use super::schema::{ComponentFailed, CouponPath, Success, no_refusal, refusal};
use crate::budget::{self, Stage};
use crate::issuing::{self, Asker};
use crate::lab::Lab;
use crate::outcome::Outcome;
use crate::runtime::bindings::types::IssueRequest;
use crate::runtime::registry::Unready;

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
    #[schema(example = "REDIS_LUA", pattern = r"^[^\u0000]*$")]
    method: String,
    /// Isolation-level methods: false skips the member check.
    duplicate_check: Option<bool>,
    /// Passed to the component (the limited drop's request key), 1 to 128
    /// characters, no NUL.
    #[schema(min_length = 1, max_length = 128, pattern = r"^[^\u0000]*$")]
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
const REFUSALS: [(StatusCode, &str, &[Outcome]); 4] = [
    (
        StatusCode::NOT_FOUND,
        "UNKNOWN_COUPON (`error.outcome`): no such coupon",
        &[Outcome::UnknownCoupon],
    ),
    (
        StatusCode::UNPROCESSABLE_ENTITY,
        "UNKNOWN_MEMBER (`error.outcome`): the body's member does not exist (the coupon does)",
        &[Outcome::UnknownMember],
    ),
    (
        StatusCode::CONFLICT,
        "SOLD_OUT, SOLD_OUT_AT_DB or DUPLICATE (`error.outcome`)",
        &[Outcome::SoldOut, Outcome::SoldOutAtDb, Outcome::Duplicate],
    ),
    (
        StatusCode::SERVICE_UNAVAILABLE,
        "VERSION_CONFLICT, DEADLOCK, LOCK_WAIT_TIMEOUT, SERIALIZATION_FAILURE, THROTTLED, \
         QUEUE_FULL, UNAVAILABLE or BUSY (`error.outcome`): worth retrying",
        &[
            Outcome::VersionConflict,
            Outcome::Deadlock,
            Outcome::LockWaitTimeout,
            Outcome::SerializationFailure,
            Outcome::Throttled,
            Outcome::QueueFull,
            Outcome::Unavailable,
            Outcome::Busy,
        ],
    ),
];

/// What else a 503 of an issue request can be: a method known but not
/// served ([`not_served`]), with no `error.outcome`.
const NOT_SERVED: &str = "Or, without `error.outcome`: the method is known but not served yet. \
     Its component is on trial (its canary runs), waits for a canary that reached no verdict \
     (the message says why, e.g. `REDIS_LUA is waiting for its canary: Redis is unavailable`), \
     both with `Retry-After` (seconds); or its canary refused it (the message says why; no \
     `Retry-After`: nothing changes until its file does)";

/// [`REFUSALS`] in the document: each status's error envelope requires
/// `error.outcome`, one of that status's outcomes; the 503 may also be a
/// method not served ([`NOT_SERVED`]), with its `Retry-After`.
struct Refused;

impl IntoResponses for Refused {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        REFUSALS
            .iter()
            .map(|(status, description, outcomes)| {
                let response = if *status == StatusCode::SERVICE_UNAVAILABLE {
                    let either = OneOfBuilder::new()
                        .item(refusal(outcomes))
                        .item(no_refusal());
                    let retry_after = HeaderBuilder::new()
                        .schema(
                            ObjectBuilder::new()
                                .schema_type(Type::Integer)
                                .minimum(Some(1)),
                        )
                        .description(Some("Seconds after which the method may serve"));
                    ResponseBuilder::new()
                        .description(format!("{description}. {NOT_SERVED}"))
                        .header("Retry-After", retry_after.build())
                        .content(
                            "application/json",
                            ContentBuilder::new().schema(Some(either)).build(),
                        )
                } else {
                    let content = ContentBuilder::new().schema(Some(refusal(outcomes)));
                    ResponseBuilder::new()
                        .description(*description)
                        .content("application/json", content.build())
                };
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
        (status = 400, description = "A malformed body, a number out of range, a text with a NUL character, or a method no component names", body = ApiError),
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
    storable("method", &body.method)?;
    let method = body.method.trim().to_ascii_uppercase();
    let Some(strategy) = lab.registry.get(&method) else {
        return Err(not_served(&lab, &method, &body.method));
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
    let ended = issuing::issue(&lab, &strategy, request, Asker::User(arrival)).await;
    let outcome = ended.outcome();
    let status = outcome.status();
    let told = ended.told();
    if status.is_success() {
        Ok(Answer(
            status,
            Issued {
                coupon_id,
                member_id,
                method: strategy.method.to_string(),
                outcome: outcome.name(),
                sequence,
                detail: told,
                retries: ended.retries(),
            },
        ))
    } else {
        Err(ApiError::refused(outcome, told.unwrap_or_default()))
    }
}

/// Why `method` (`sent` as the client spelled it) has no component serving
/// it: 503 for a method a file names whose component is on trial, awaits a
/// canary that reached no verdict (with when to ask again) or was refused;
/// 400 for one no file names.
fn not_served(lab: &Lab, method: &str, sent: &str) -> ApiError {
    if let Some(unserved) = lab.registry.unserved(method) {
        let file = unserved.file.display();
        let message = match &unserved.why {
            Unready::OnTrial => {
                format!("{method} is on trial: its canary proves {file} before it serves")
            }
            Unready::NoVerdict(reason) => {
                format!("{method} is waiting for its canary: {reason}")
            }
            Unready::Refused(reason) => format!(
                "{method} was refused by its canary ({file}): {reason}; it serves once its \
                 file changes and the canary passes"
            ),
        };
        let unavailable = ApiError::unavailable(message);
        return match unserved.retry_after {
            // Whole seconds, at least one: the header has no fractions.
            Some(after) => unavailable.retry_after(after.as_secs().max(1)),
            None => unavailable,
        };
    }
    let loaded: Vec<String> = lab.registry.strategies().keys().cloned().collect();
    ApiError::bad_request(format!(
        "unknown method {sent:?}; loaded methods: {}",
        if loaded.is_empty() {
            "none (run `cargo xtask strategies`)".to_string()
        } else {
            loaded.join(", ")
        }
    ))
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
