//! `POST /lab/write-behind/coupons/{couponId}/reconcile` (stage 9): the
//! write-behind component compares the database with the Redis set, writes
//! the members only Redis has (reporting those that have no member row
//! rather than failing on them), puts the members only the database has
//! back into the set, and sets `issued_count` to the row count.

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use serde::Serialize;
use utoipa::ToSchema;

use super::envelope::{Answer, ApiError, component_refused};
use super::schema::{ComponentFailed, CouponId, CouponPath, Success};
use super::serving_coupon;
use crate::lab::Lab;
use crate::runtime::World;

pub fn router() -> Router<Lab> {
    Router::new().route(
        "/lab/write-behind/coupons/{coupon_id}/reconcile",
        post(reconcile),
    )
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct Reconciled {
    coupon_id: u64,
    /// The write-behind method that reconciled.
    method: String,
    /// Members reserved in Redis without a row, now written.
    inserted: Vec<u64>,
    /// Members with a row but no reservation in Redis when it was read.
    only_in_db: Vec<u64>,
    /// Of those, the members put back into the reservation set.
    restored: Vec<u64>,
    /// Units Redis would sell before the repair: the total less the
    /// reservation set's size (below 0: the set holds more than the total).
    remaining_before: i64,
    /// And after it.
    remaining_after: i64,
    /// Members reserved in Redis that have no member row, so no issue row
    /// can be written for them (reported, left in Redis; the rest are
    /// written all the same).
    unknown_members: Vec<u64>,
    /// The `issued_count` column, now the row count.
    issued_count: u64,
    total_count: u64,
    /// Rows beyond the total: what Redis losing its record cost.
    stock_excess: u64,
}

/// Write-behind: write the members only Redis has, put back into the set
/// those only the database has, and set `issued_count` to the row count.
#[utoipa::path(
    post,
    path = "/lab/write-behind/coupons/{couponId}/reconcile",
    tag = "write-behind",
    params(CouponPath),
    responses(
        (status = 200, description = "The coupon was reconciled", body = Success<Reconciled>),
        CouponId,
        (status = 503, description = "Not reconciled: the database is unavailable, no write-behind-issuer component is loaded, the component reported a failure, or no instance was free", body = ApiError),
        ComponentFailed,
    )
)]
async fn reconcile(
    State(lab): State<Lab>,
    CouponPath(coupon_id): CouponPath,
) -> Result<Answer<Reconciled>, ApiError> {
    let strategy = serving_coupon(&lab, coupon_id, World::WRITE_BEHIND_ISSUER).await?;
    let report = lab
        .runtime
        .reconcile(&strategy, coupon_id)
        .await
        .result?
        .map_err(|err| component_refused("reconciling", err))?;
    Ok(Answer(
        StatusCode::OK,
        Reconciled {
            coupon_id,
            method: strategy.method.to_string(),
            inserted: report.inserted,
            only_in_db: report.only_in_db,
            restored: report.restored,
            remaining_before: report.remaining_before,
            remaining_after: report.remaining_after,
            unknown_members: report.unknown_members,
            issued_count: report.issued_count,
            total_count: report.total,
            stock_excess: report.stock_excess,
        },
    ))
}
