//! `GET /lab/strategies`: what this server can run, and what it refused.

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::envelope::{Answer, ApiError};
use crate::lab::Lab;

pub fn router() -> Router<Lab> {
    Router::new().route("/lab/strategies", get(list))
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Strategies {
    directory: String,
    strategies: Vec<Loaded>,
    rejected: Vec<Rejected>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Loaded {
    method: String,
    summary: String,
    file: String,
    sha256: String,
    world: &'static str,
    loaded_at: DateTime<Utc>,
    last_error: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Rejected {
    file: String,
    sha256: Option<String>,
    reason: String,
    at: DateTime<Utc>,
}

async fn list(State(lab): State<Lab>) -> Result<Answer<Strategies>, ApiError> {
    let rejections = lab.registry.rejections();
    let strategies = lab
        .registry
        .strategies()
        .values()
        .map(|s| Loaded {
            method: s.method.to_string(),
            summary: s.summary.clone(),
            file: s.file.display().to_string(),
            sha256: s.sha256.clone(),
            world: s.world.name(),
            loaded_at: s.loaded_at,
            // A broken replacement of this method's file, which left this
            // version serving.
            last_error: rejections.get(&s.file).map(|r| r.reason.clone()),
        })
        .collect();
    let rejected = rejections
        .values()
        .map(|r| Rejected {
            file: r.file.display().to_string(),
            sha256: r.sha256.clone(),
            reason: r.reason.clone(),
            at: r.at,
        })
        .collect();
    Ok(Answer(
        StatusCode::OK,
        Strategies {
            directory: lab.config.strategy_dir.display().to_string(),
            strategies,
            rejected,
        },
    ))
}
