//! `GET /lab/coupons/{couponId}/result`, read by [`crate::results`].

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

use super::envelope::{Answer, ApiError, AppPath, positive};
use crate::lab::Lab;
use crate::results::{self, CouponResult};

pub fn router() -> Router<Lab> {
    Router::new().route("/lab/coupons/{coupon_id}/result", get(result))
}

async fn result(
    State(lab): State<Lab>,
    AppPath(coupon_id): AppPath<i64>,
) -> Result<Answer<CouponResult>, ApiError> {
    let coupon_id = positive("couponId", coupon_id)?;
    match results::read(&lab, coupon_id).await? {
        Some(result) => Ok(Answer(StatusCode::OK, result)),
        None => Err(ApiError::not_found(format!(
            "coupon {coupon_id} does not exist"
        ))),
    }
}
