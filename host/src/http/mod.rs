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
mod resource;
mod results;
mod schema;
mod strategies;
mod traces;
mod write_behind;

use axum::Router;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};

use crate::budget;
use crate::lab::Lab;

pub use envelope::{ApiError, Envelope};
use resource::serving_coupon;

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
