//! What the resource handlers share: the coupon a route names and the
//! component that serves it, and the statuses of their answers.

use std::sync::Arc;

use axum::http::StatusCode;

use super::envelope::{Answer, ApiError};
use crate::db;
use crate::lab::Lab;
use crate::runtime::Strategy;

impl<T> Answer<T> {
    /// 200 with `body`.
    pub(super) fn ok(body: T) -> Self {
        Answer(StatusCode::OK, body)
    }

    /// 201 with `body`, what was made.
    pub(super) fn created(body: T) -> Self {
        Answer(StatusCode::CREATED, body)
    }
}

/// 404 unless the coupon exists (a canary's scratch coupon does not).
pub(super) async fn existing_coupon(lab: &Lab, coupon_id: u64) -> Result<(), ApiError> {
    if db::coupon_exists(lab.db(), coupon_id).await? {
        Ok(())
    } else {
        Err(ApiError::not_found(format!(
            "coupon {coupon_id} does not exist"
        )))
    }
}

/// The loaded component of the world named `world` (the first by method
/// name) for a request about `coupon_id`: 404 unless the coupon exists,
/// then 503 unless such a component is loaded.
pub(super) async fn serving_coupon(
    lab: &Lab,
    coupon_id: u64,
    world: &str,
) -> Result<Arc<Strategy>, ApiError> {
    existing_coupon(lab, coupon_id).await?;
    lab.registry
        .strategies()
        .values()
        .find(|s| s.world.name() == world)
        .cloned()
        .ok_or_else(|| {
            ApiError::unavailable(format!(
                "no component of the {world} world is loaded; run `cargo xtask strategies`"
            ))
        })
}
