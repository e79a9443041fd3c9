//! `GET /lab/coupons/{couponId}/result`: what happened to one coupon, and
//! whether the two invariants held.

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use std::collections::BTreeMap;

use serde::Serialize;
use sqlx::Row;

use super::envelope::{Answer, ApiError, AppPath, positive};
use crate::confirmations::{self, AsyncSummary};
use crate::consumers::stream::{self, StreamSummary};
use crate::lab::Lab;
use crate::recorder::RequestSummary;
use crate::runtime::Role;

pub fn router() -> Router<Lab> {
    Router::new().route("/lab/coupons/{coupon_id}/result", get(result))
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CouponResult {
    coupon_id: u64,
    name: String,
    total_count: i64,
    /// The `issued_count` column.
    issued_count: i64,
    /// Rows in `coupon_issues` for this coupon.
    issue_rows: i64,
    distinct_members: i64,
    /// Rows beyond the total (0 when the total held).
    over_issued: i64,
    /// Rows beyond one per member.
    duplicate_members: i64,
    /// `issued_count` minus the rows: non-zero when the counter and the rows disagree.
    count_mismatch: i64,
    invariants: Invariants,
    /// Requests this server answered for this coupon.
    requests: RequestSummary,
    /// Requests answered 202 and what became of them (every process's).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    confirmations: Option<AsyncSummary>,
    /// REDIS_PUBSUB: requests by how many subscribers received the message.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    publish_receivers: BTreeMap<String, u64>,
    /// The confirmation stream, when a stream method served this coupon.
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<StreamSummary>,
    /// Why a Redis figure above is missing.
    #[serde(skip_serializing_if = "Option::is_none")]
    redis_error: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Invariants {
    /// Never more issued than the total (rows and counter alike).
    never_over_issued: bool,
    /// At most one coupon per member.
    one_per_member: bool,
    /// The counter equals the rows.
    count_matches_rows: bool,
}

async fn result(
    State(lab): State<Lab>,
    AppPath(coupon_id): AppPath<i64>,
) -> Result<Answer<CouponResult>, ApiError> {
    let coupon_id = positive("couponId", coupon_id)?;
    let row = sqlx::query(
        "SELECT c.name, c.total_count, c.issued_count, \
                (SELECT COUNT(*) FROM coupon_issues i WHERE i.coupon_id = c.id) AS issue_rows, \
                (SELECT COUNT(DISTINCT i.member_id) FROM coupon_issues i WHERE i.coupon_id = c.id) AS distinct_members \
         FROM coupons c WHERE c.id = ?",
    )
    .bind(coupon_id)
    .fetch_optional(lab.db())
    .await?
    .ok_or_else(|| ApiError::not_found(format!("coupon {coupon_id} does not exist")))?;

    let total_count: i32 = row.try_get("total_count")?;
    let issued_count: i32 = row.try_get("issued_count")?;
    let issue_rows: i64 = row.try_get("issue_rows")?;
    let distinct_members: i64 = row.try_get("distinct_members")?;
    let (total_count, issued_count) = (i64::from(total_count), i64::from(issued_count));
    let requests = lab.recorder.summary(coupon_id);
    let publish_receivers = requests
        .by_method
        .values()
        .filter_map(|method| method.labels.get("receivers"))
        .flatten()
        .fold(BTreeMap::new(), |mut all, (receivers, count)| {
            *all.entry(receivers.clone()).or_default() += count;
            all
        });
    let mut redis_error = None;
    let confirmations = confirmations::summary(lab.redis(), coupon_id)
        .await
        .unwrap_or_else(|err| {
            redis_error = Some(err.to_string());
            None
        });
    let served_by_stream = requests.by_method.keys().any(|method| {
        lab.registry
            .get(method)
            .is_some_and(|s| s.role == Role::StreamIssuer)
    });
    let stream = if served_by_stream {
        stream::summary(lab.redis(), stream::ISSUERS)
            .await
            .unwrap_or_else(|err| {
                redis_error = Some(err.to_string());
                None
            })
    } else {
        None
    };
    Ok(Answer(
        StatusCode::OK,
        CouponResult {
            coupon_id,
            name: row.try_get("name")?,
            total_count,
            issued_count,
            issue_rows,
            distinct_members,
            over_issued: (issue_rows - total_count).max(0),
            duplicate_members: issue_rows - distinct_members,
            count_mismatch: issued_count - issue_rows,
            invariants: Invariants {
                never_over_issued: issue_rows <= total_count && issued_count <= total_count,
                one_per_member: issue_rows == distinct_members,
                count_matches_rows: issued_count == issue_rows,
            },
            requests,
            confirmations,
            publish_receivers,
            stream,
            redis_error: redis_error.map(|err| format!("Redis could not be read: {err}")),
        },
    ))
}
