//! `POST /lab/coupons`: create a coupon and warm `coupon:total:{id}`.
//!
//! `perMemberLimit` (default 1) is how many coupons one member may hold in a
//! limited drop; REDIS_LUA_GATE enforces it in Redis.

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::envelope::{Answer, ApiError, AppJson, positive_up_to, sized};
use super::schema::Success;
use crate::lab::Lab;

const MAX_TOTAL: u64 = 100_000_000;
const MAX_NAME: usize = 100;

pub fn router() -> Router<Lab> {
    Router::new().route("/lab/coupons", post(create))
}

#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct CreateCoupon {
    /// 1 to 100 characters, trimmed.
    #[schema(min_length = 1, max_length = 100)]
    name: String,
    /// How many coupons there are, 1 to 100,000,000.
    #[schema(minimum = 1, maximum = 100_000_000)]
    total_count: i64,
    /// How many coupons one member may hold in a limited drop (default 1).
    #[schema(minimum = 1, maximum = 100_000_000)]
    per_member_limit: Option<i64>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = CreatedCoupon)]
struct Created {
    /// The coupon's id.
    id: u64,
    name: String,
    total_count: u64,
    per_member_limit: u64,
    /// Whether `coupon:total:{id}` was set. When Redis is down the coupon is
    /// still created: Redis methods re-read the total from the database.
    warmed: bool,
}

/// Create a coupon and warm `coupon:total:{id}`.
#[utoipa::path(
    post,
    path = "/lab/coupons",
    operation_id = "createCoupon",
    tag = "coupons",
    request_body = CreateCoupon,
    responses(
        (status = 201, description = "The coupon was created", body = Success<Created>),
        (status = 400, description = "A malformed body, an empty or long name, or a count out of range", body = ApiError),
        (status = 503, description = "The database is unavailable", body = ApiError),
        (status = 500, description = "The server failed while answering", body = ApiError),
    )
)]
async fn create(
    State(lab): State<Lab>,
    AppJson(body): AppJson<CreateCoupon>,
) -> Result<Answer<Created>, ApiError> {
    let name = body.name.trim().to_string();
    sized("name", &name, name.chars().count(), MAX_NAME, "characters")?;
    let total_count = positive_up_to("totalCount", body.total_count, MAX_TOTAL)?;
    let per_member_limit = body.per_member_limit.unwrap_or(1);
    let per_member_limit = positive_up_to("perMemberLimit", per_member_limit, MAX_TOTAL)?;
    let id =
        sqlx::query("INSERT INTO coupons (name, total_count, per_member_limit) VALUES (?, ?, ?)")
            .bind(&name)
            .bind(total_count)
            .bind(per_member_limit)
            .execute(lab.db())
            .await?
            .last_insert_id();
    let warmed = match redis::cmd("SET")
        .arg(couponlab_contract::keys::total(id))
        .arg(total_count)
        .query_async::<()>(&mut lab.redis().clone())
        .await
    {
        Ok(()) => true,
        Err(err) => {
            tracing::warn!(coupon = id, error = %err, "could not warm coupon:total; Redis methods will re-read it");
            false
        }
    };
    Ok(Answer(
        StatusCode::CREATED,
        Created {
            id,
            name,
            total_count,
            per_member_limit,
            warmed,
        },
    ))
}
