//! `GET /lab/coupons/{couponId}/result`, read by [`crate::results`].

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

use super::envelope::{Answer, ApiError};
use super::schema::{CouponId, CouponPath, ServerFailed, Success};
use crate::lab::Lab;
use crate::results::{self, CouponResult};

pub fn router() -> Router<Lab> {
    Router::new().route("/lab/coupons/{coupon_id}/result", get(result))
}

/// Counts, invariant checks, requests by method and outcome, latency.
#[utoipa::path(
    get,
    path = "/lab/coupons/{couponId}/result",
    tag = "coupons",
    params(CouponPath),
    responses(
        (status = 200, description = "The coupon's result", body = Success<CouponResult>),
        CouponId,
        (status = 503, description = "The database is unavailable (Redis being down is a figure of the result)", body = ApiError),
        ServerFailed,
    )
)]
async fn result(
    State(lab): State<Lab>,
    CouponPath(coupon_id): CouponPath,
) -> Result<Answer<CouponResult>, ApiError> {
    match results::read(&lab, coupon_id).await? {
        Some(result) => Ok(Answer(StatusCode::OK, result)),
        None => Err(ApiError::not_found(format!(
            "coupon {coupon_id} does not exist"
        ))),
    }
}
