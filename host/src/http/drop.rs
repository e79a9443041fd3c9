//! The limited drop's store contract besides issuing (seed 000), answered by
//! the gate component: seed the stock idempotently, cancel a reservation.
//!
//! - `POST /lab/drop/coupons/{couponId}/seed` `{"quantity": 100, "ttlSeconds": 86400}`
//! - `POST /lab/drop/coupons/{couponId}/cancel` `{"memberId": 1, "idempotencyKey": "k"}`

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::envelope::{
    Answer, ApiError, AppJson, component_refused, idempotency_key, positive, positive_up_to,
};
use super::integer::{integer, optional_integer};
use super::schema::{ComponentFailed, CouponPath, Success, UnknownCoupon};
use super::serving_coupon;
use crate::lab::Lab;
use crate::runtime::World;

const MAX_QUANTITY: u64 = 100_000_000;
const DEFAULT_TTL_SECONDS: u64 = 24 * 60 * 60;
const MAX_TTL_SECONDS: u64 = 30 * 24 * 60 * 60;

pub fn router() -> Router<Lab> {
    Router::new()
        .route("/lab/drop/coupons/{coupon_id}/seed", post(seed))
        .route("/lab/drop/coupons/{coupon_id}/cancel", post(cancel))
}

#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct SeedBody {
    /// The drop's stock, 1 to 100,000,000.
    #[schema(minimum = 1, maximum = 100_000_000)]
    #[serde(deserialize_with = "integer")]
    quantity: i64,
    /// How long the stock key lives, at most 30 days (default 24 hours).
    #[schema(minimum = 1, maximum = 2_592_000)]
    #[serde(default, deserialize_with = "optional_integer")]
    ttl_seconds: Option<i64>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct Seeded {
    coupon_id: u64,
    /// False when the stock was already seeded and kept (SET NX).
    seeded: bool,
    /// The stock left.
    remaining: i64,
}

/// REDIS_LUA_GATE: set the drop's stock unless already set (SET NX).
#[utoipa::path(
    post,
    path = "/lab/drop/coupons/{couponId}/seed",
    operation_id = "seedDrop",
    tag = "drop",
    params(CouponPath),
    request_body = SeedBody,
    responses(
        (status = 200, description = "The stock is set (`seeded` false when it already was)", body = Success<Seeded>),
        (status = 400, description = "A malformed body, or a number out of range", body = ApiError),
        UnknownCoupon,
        (status = 503, description = "Not seeded: the database is unavailable, no gate-issuer component is loaded, the component reported a failure, or no instance was free", body = ApiError),
        ComponentFailed,
    )
)]
async fn seed(
    State(lab): State<Lab>,
    CouponPath(coupon_id): CouponPath,
    AppJson(body): AppJson<SeedBody>,
) -> Result<Answer<Seeded>, ApiError> {
    let quantity = positive_up_to("quantity", body.quantity, MAX_QUANTITY)?;
    let ttl = body.ttl_seconds.unwrap_or(DEFAULT_TTL_SECONDS as i64);
    let ttl = positive_up_to("ttlSeconds", ttl, MAX_TTL_SECONDS)?;
    let strategy = serving_coupon(&lab, coupon_id, World::GATE_ISSUER).await?;
    let answer = lab
        .runtime
        .seed(&strategy, coupon_id, quantity as u32, ttl as u32)
        .await
        .result?
        .map_err(|err| component_refused("seeding", err))?;
    Ok(Answer::ok(Seeded {
        coupon_id,
        seeded: answer.seeded,
        remaining: answer.remaining,
    }))
}

#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct CancelBody {
    /// The member whose reservation is given back.
    #[schema(minimum = 1)]
    #[serde(deserialize_with = "integer")]
    member_id: i64,
    /// The key the reservation was issued with, 1 to 128 characters, no
    /// NUL.
    #[schema(min_length = 1, max_length = 128, pattern = r"^[^\u0000]*$")]
    idempotency_key: String,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct Cancelled {
    coupon_id: u64,
    member_id: u64,
    /// False when there was nothing to cancel (a second cancel included).
    cancelled: bool,
}

/// REDIS_LUA_GATE: give a reservation back (issue row, stock, member's count,
/// permit).
#[utoipa::path(
    post,
    path = "/lab/drop/coupons/{couponId}/cancel",
    operation_id = "cancelDrop",
    tag = "drop",
    params(CouponPath),
    request_body = CancelBody,
    responses(
        (status = 200, description = "Cancelled, or nothing was left to cancel (`cancelled` false)", body = Success<Cancelled>),
        (status = 400, description = "A malformed body, a member id that is not positive, or a bad key (empty, long, or with a NUL character)", body = ApiError),
        UnknownCoupon,
        (status = 503, description = "Not cancelled: the database is unavailable, no gate-issuer component is loaded, the component reported a failure, or no instance was free", body = ApiError),
        ComponentFailed,
    )
)]
async fn cancel(
    State(lab): State<Lab>,
    CouponPath(coupon_id): CouponPath,
    AppJson(body): AppJson<CancelBody>,
) -> Result<Answer<Cancelled>, ApiError> {
    let member_id = positive("memberId", body.member_id)?;
    idempotency_key(&body.idempotency_key)?;
    let strategy = serving_coupon(&lab, coupon_id, World::GATE_ISSUER).await?;
    let cancelled = lab
        .runtime
        .cancel(&strategy, coupon_id, member_id, &body.idempotency_key)
        .await
        .result?
        .map_err(|err| component_refused("cancelling", err))?;
    Ok(Answer::ok(Cancelled {
        coupon_id,
        member_id,
        cancelled,
    }))
}
