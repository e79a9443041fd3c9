//! The `/lab` API: one module per resource, each exposing `router()`, and one
//! envelope every answer travels in, errors and unknown paths included; and
//! the console at `/`, which reads that API.

mod console;
mod coupons;
mod data;
mod drop;
mod envelope;
mod gate;
mod integer;
mod issue;
mod members;
mod metrics;
mod openapi;
mod reports;
mod results;
mod schema;
mod strategies;
mod traces;
mod write_behind;

use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};

use crate::budget;
use crate::db;
use crate::lab::Lab;
use crate::runtime::Strategy;

pub use envelope::{ApiError, Envelope};

pub fn router(lab: Lab) -> Router {
    Router::new()
        .merge(members::router())
        .merge(coupons::router())
        .merge(issue::router())
        .merge(results::router())
        .merge(traces::router())
        .merge(data::router())
        .merge(strategies::router())
        .merge(write_behind::router())
        .merge(drop::router())
        .merge(gate::router())
        .merge(metrics::router())
        .merge(openapi::router())
        .merge(reports::router())
        .merge(console::router())
        .fallback(|| async { ApiError::not_found("no such path") })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .layer(middleware::from_fn(run_to_end))
        .with_state(lab)
}

/// A client that hangs up changes nothing: hyper drops a request's future
/// when its connection closes, so every handler runs in a task of its own,
/// which finishes — the strategy call, its recording, its connections
/// given back clean — whether anyone still waits for the answer.
async fn run_to_end(request: Request, next: Next) -> Response {
    match tokio::spawn(budget::timed(next.run(request))).await {
        Ok(response) => response,
        Err(failed) => {
            tracing::error!(error = %failed, "a request handler panicked");
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the server failed while answering this request",
            )
            .into_response()
        }
    }
}

/// The loaded component of the world named `world` (the first by method
/// name) for a request about `coupon_id`: 404 unless the coupon exists (a
/// canary's scratch coupon does not), then 503 unless such a component is
/// loaded.
async fn serving_coupon(lab: &Lab, coupon_id: u64, world: &str) -> Result<Arc<Strategy>, ApiError> {
    if !db::coupon_exists(lab.db(), coupon_id).await? {
        return Err(ApiError::not_found(format!(
            "coupon {coupon_id} does not exist"
        )));
    }
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
