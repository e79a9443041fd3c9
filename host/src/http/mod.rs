//! The `/lab` API: one module per resource, each exposing `router()`, and one
//! envelope every answer travels in, errors and unknown paths included.

mod coupons;
mod data;
mod envelope;
mod issue;
mod members;
mod results;
mod strategies;

use axum::Router;

use crate::lab::Lab;

pub use envelope::{ApiError, Envelope};

pub fn router(lab: Lab) -> Router {
    Router::new()
        .merge(members::router())
        .merge(coupons::router())
        .merge(issue::router())
        .merge(results::router())
        .merge(data::router())
        .merge(strategies::router())
        .fallback(|| async { ApiError::not_found("no such path") })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .with_state(lab)
}
