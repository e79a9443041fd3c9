//! The limited drop's switch (seed 000's rollback plan,
//! `limited-drop.redis-gate.enabled`): off, every request of the drop is
//! served by the gate component's database path instead of its Redis gate.
//!
//! - `GET /lab/drop/coupons/{couponId}/gate`
//! - `POST /lab/drop/coupons/{couponId}/gate` `{"enabled": false}`
//!
//! The switch is a Redis key the component reads in its reserve script
//! (`coupon:gate:{id}:switch`), so every host of the lab sees one switch and
//! the host decides nothing about the drop: what off means — the database
//! path, and the gate set from the rows when it is on again — is the
//! component's. A switch that cannot be read (Redis down) leaves the gate
//! unable to answer, which fails open to the same path.

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use couponlab_contract::keys;
use redis::AsyncCommands;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::envelope::{Answer, ApiError, AppJson};
use super::resource::existing_coupon;
use super::schema::{CouponId, CouponPath, ServerFailed, Success, UnknownCoupon};
use crate::lab::Lab;

/// The value the component reads as off; any other (or none) is on.
const OFF: &str = "off";

pub fn router() -> Router<Lab> {
    Router::new().route("/lab/drop/coupons/{coupon_id}/gate", get(read).post(switch))
}

#[derive(Deserialize, ToSchema)]
struct SwitchBody {
    /// False sends every request of the drop to the database path; true
    /// gives them back to the gate, which is set from the rows first.
    enabled: bool,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct GateSwitch {
    coupon_id: u64,
    /// Whether the drop's requests go through the Redis gate.
    enabled: bool,
}

/// REDIS_LUA_GATE: whether the drop's gate is switched on.
#[utoipa::path(
    get,
    path = "/lab/drop/coupons/{couponId}/gate",
    operation_id = "dropGate",
    tag = "drop",
    params(CouponPath),
    responses(
        (status = 200, description = "The switch", body = Success<GateSwitch>),
        CouponId,
        (status = 503, description = "The database or Redis is unavailable", body = ApiError),
        ServerFailed,
    )
)]
async fn read(
    State(lab): State<Lab>,
    CouponPath(coupon_id): CouponPath,
) -> Result<Answer<GateSwitch>, ApiError> {
    existing_coupon(&lab, coupon_id).await?;
    let value: Option<String> = lab
        .redis()
        .clone()
        .get(keys::gate_switch(coupon_id))
        .await?;
    let enabled = value.as_deref() != Some(OFF);
    Ok(Answer::ok(GateSwitch { coupon_id, enabled }))
}

/// REDIS_LUA_GATE: switch the drop's gate off (every request takes the
/// database path) or on again.
#[utoipa::path(
    post,
    path = "/lab/drop/coupons/{couponId}/gate",
    operation_id = "switchDropGate",
    tag = "drop",
    params(CouponPath),
    request_body = SwitchBody,
    responses(
        (status = 200, description = "The switch as it is now", body = Success<GateSwitch>),
        (status = 400, description = "A malformed body, or a coupon id that is not a positive integer", body = ApiError),
        UnknownCoupon,
        (status = 503, description = "Not switched: the database or Redis is unavailable (with Redis down the gate cannot answer, and the drop fails open to the database path anyway)", body = ApiError),
        ServerFailed,
    )
)]
async fn switch(
    State(lab): State<Lab>,
    CouponPath(coupon_id): CouponPath,
    AppJson(body): AppJson<SwitchBody>,
) -> Result<Answer<GateSwitch>, ApiError> {
    existing_coupon(&lab, coupon_id).await?;
    let mut redis = lab.redis().clone();
    let key = keys::gate_switch(coupon_id);
    if body.enabled {
        let () = redis.del(key).await?;
    } else {
        // No time to live: off stays off until someone switches it on.
        let () = redis.set(key, OFF).await?;
    }
    let enabled = body.enabled;
    Ok(Answer::ok(GateSwitch { coupon_id, enabled }))
}
