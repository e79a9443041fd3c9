//! `POST /lab/coupons`: create a coupon and warm `coupon:total:{id}`;
//! `GET /lab/coupons`: the newest coupons, for the console to pick from.
//!
//! `perMemberLimit` (default 1) is how many coupons one member may hold in a
//! limited drop; REDIS_LUA_GATE enforces it in Redis.

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::envelope::{Answer, ApiError, AppJson, positive_up_to, sized};
use super::integer::{integer, optional_integer};
use super::schema::{DatabaseFailed, Success};
use crate::db::{on_engine, signed};
use crate::db_target::Pool;
use crate::lab::Lab;

const MAX_TOTAL: u64 = 100_000_000;
const MAX_NAME: usize = 100;
/// Coupons the listing answers: the newest, as many as a person follows
/// at once (a load test makes one per method).
const LISTED: u32 = 100;

pub fn router() -> Router<Lab> {
    Router::new().route("/lab/coupons", get(list).post(create))
}

#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct CreateCoupon {
    /// 1 to 100 characters as sent, not all whitespace, no NUL; kept
    /// trimmed. The pattern names the whitespace (Unicode's White_Space,
    /// what the server trims) one by one: regex dialects disagree on `\s`.
    #[schema(
        min_length = 1,
        max_length = 100,
        pattern = r"^[^\u0000]*[^\t\n\x0B\f\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000\u0000][^\u0000]*$"
    )]
    name: String,
    /// How many coupons there are, 1 to 100,000,000.
    #[schema(minimum = 1, maximum = 100_000_000)]
    #[serde(deserialize_with = "integer")]
    total_count: i64,
    /// How many coupons one member may hold in a limited drop (default 1).
    #[schema(minimum = 1, maximum = 100_000_000)]
    #[serde(default, deserialize_with = "optional_integer")]
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
        (status = 400, description = "A malformed body, an empty or long name, one with a NUL character, or a count out of range", body = ApiError),
        DatabaseFailed,
    )
)]
async fn create(
    State(lab): State<Lab>,
    AppJson(body): AppJson<CreateCoupon>,
) -> Result<Answer<Created>, ApiError> {
    // Counted as sent, as the document's `maxLength` counts it.
    let sent = &body.name;
    sized("name", sent, sent.chars().count(), MAX_NAME, "characters")?;
    let name = sent.trim().to_string();
    if name.is_empty() {
        return Err(ApiError::bad_request(
            "name must hold a character that is not whitespace",
        ));
    }
    let total_count = positive_up_to("totalCount", body.total_count, MAX_TOTAL)?;
    let per_member_limit = body.per_member_limit.unwrap_or(1);
    let per_member_limit = positive_up_to("perMemberLimit", per_member_limit, MAX_TOTAL)?;
    let insert = "INSERT INTO coupons (name, total_count, per_member_limit) VALUES (?, ?, ?)";
    let id = match lab.db() {
        Pool::MySql(db) => sqlx::query(insert)
            .bind(&name)
            .bind(total_count)
            .bind(per_member_limit)
            .execute(db)
            .await?
            .last_insert_id(),
        Pool::Postgres(db) => {
            let id: i64 = sqlx::query_scalar("INSERT INTO coupons (name, total_count, per_member_limit) VALUES ($1, $2, $3) RETURNING id")
                .bind(&name)
                .bind(signed(total_count))
                .bind(signed(per_member_limit))
                .fetch_one(db)
                .await?;
            id as u64
        }
    };
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
    Ok(Answer::created(Created {
        id,
        name,
        total_count,
        per_member_limit,
        warmed,
    }))
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct Coupons {
    /// Every coupon in the database (a canary's scratch coupon is none).
    count: u64,
    /// The newest 100, newest first; each one's figures are its result's.
    coupons: Vec<Listed>,
}

/// A coupon as it was created.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct Listed {
    id: u64,
    name: String,
    total_count: u64,
    per_member_limit: u64,
    created_at: DateTime<Utc>,
}

/// The newest coupons (id, name, total), newest first.
#[utoipa::path(
    get,
    path = "/lab/coupons",
    operation_id = "coupons",
    tag = "coupons",
    responses(
        (status = 200, description = "The newest 100 coupons and how many there are", body = Success<Coupons>),
        DatabaseFailed,
    )
)]
async fn list(State(lab): State<Lab>) -> Result<Answer<Coupons>, ApiError> {
    let statement = "SELECT COUNT(*) FROM coupons WHERE NOT scratch";
    let count: i64 = on_engine!(lab.db(), statement, |db, sql| {
        sqlx::query_scalar(sql).fetch_one(db).await
    })?;
    // Through the epoch: the column is in the session's time zone,
    // whatever the server's is.
    let listed = (
        "CAST(UNIX_TIMESTAMP(created_at) * 1000 AS SIGNED)",
        "CAST(EXTRACT(EPOCH FROM created_at::timestamptz) * 1000 AS BIGINT)",
    );
    let statement = |created_ms: &str| {
        format!(
            "SELECT id, name, total_count, per_member_limit, {created_ms} AS created_ms \
             FROM coupons WHERE NOT scratch ORDER BY id DESC LIMIT {LISTED}"
        )
    };
    let rows: Vec<(i64, String, i64, i64, i64)> = on_engine!(
        lab.db(),
        mysql: &statement(listed.0),
        postgres: &statement(listed.1),
        |db, sql| sqlx::query_as(sql).fetch_all(db).await
    )?;
    let coupons = rows
        .into_iter()
        .map(
            |(id, name, total_count, per_member_limit, created_ms)| Listed {
                id: id as u64,
                name,
                total_count: total_count as u64,
                per_member_limit: per_member_limit as u64,
                created_at: DateTime::from_timestamp_millis(created_ms).unwrap_or_default(),
            },
        )
        .collect();
    Ok(Answer::ok(Coupons {
        count: count as u64,
        coupons,
    }))
}
