//! `GET /lab/strategies`: what this server can run, what it is proving,
//! and what it refused.

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use super::envelope::{Answer, ApiError};
use super::schema::{ServerFailed, Success};
use crate::lab::Lab;
use crate::runtime::SqlEngine as Engine;
use crate::runtime::canary_report::CanaryReport;
use crate::runtime::registry::components_in;

pub fn router() -> Router<Lab> {
    Router::new().route("/lab/strategies", get(list))
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct Strategies {
    /// The directory components are loaded from.
    directory: String,
    /// The database components' SQL runs on (on Galera, with its cluster
    /// as the host's node reads it now).
    engine: Engine,
    strategies: Vec<Loaded>,
    /// Files that failed a check, each with why.
    rejected: Vec<Rejected>,
    /// Components whose canary runs now (`--canary`): they serve once it
    /// passed.
    on_trial: Vec<OnTrial>,
    /// Files of the directory neither served nor refused yet: their canary
    /// is running or waits its turn.
    awaiting: Vec<String>,
}

/// A component proving its claims before it serves.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct OnTrial {
    method: String,
    file: String,
    sha256: String,
    /// The scratch coupon its canary runs on (shown nowhere else).
    scratch_coupon: u64,
}

/// A loaded component.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct Loaded {
    /// The method it serves (`describe`).
    method: String,
    summary: String,
    /// What the method promises on this lab's engine (`total`, `member`,
    /// `acked`): its descriptor's entry for the engine, else its claims;
    /// the canary and the load runner check each.
    claims: Vec<&'static str>,
    /// Why the claims on this engine differ from the method's claims
    /// elsewhere, as its descriptor says; absent when they do not.
    #[serde(skip_serializing_if = "Option::is_none")]
    claims_why: Option<String>,
    file: String,
    /// Of the file's bytes, in hex.
    sha256: String,
    /// The WIT world it implements (`issuer`, `stream-issuer`, ...).
    world: &'static str,
    loaded_at: DateTime<Utc>,
    /// Why a replacement of its file was refused, this version serving on.
    last_error: Option<String>,
    /// Set when it stopped serving (its method answers 503 with the
    /// reason) until its file changes.
    quarantined: Option<Quarantined>,
    /// What its canary found (`remembered` when this file passed here
    /// before); absent with the canary off.
    canary: Option<CanaryReport>,
}

/// Why a loaded component stopped serving, and since when.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct Quarantined {
    reason: String,
    since: DateTime<Utc>,
}

/// A file that failed a check.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct Rejected {
    file: String,
    sha256: Option<String>,
    reason: String,
    at: DateTime<Utc>,
    /// The canary that refused it, when one did: the first failing check,
    /// its figure and one request that shows it.
    canary: Option<CanaryReport>,
}

/// Loaded components (method, claims, file, sha256, world, loaded at, canary
/// report), components on trial, and rejected files.
#[utoipa::path(
    get,
    path = "/lab/strategies",
    operation_id = "strategies",
    tag = "strategies",
    responses(
        (status = 200, description = "What this server can run, and what it refused", body = Success<Strategies>),
        ServerFailed,
    )
)]
async fn list(State(lab): State<Lab>) -> Result<Answer<Strategies>, ApiError> {
    let rejections = lab.registry.rejections();
    let engine_name = lab.runtime.sql_engine().name;
    let strategies = lab
        .registry
        .strategies()
        .values()
        .map(|s| Loaded {
            method: s.method.to_string(),
            summary: s.summary.clone(),
            claims: s.claims_on(engine_name).words(),
            claims_why: s.claims_on(engine_name).why.map(str::to_string),
            file: s.file.display().to_string(),
            sha256: s.sha256.clone(),
            world: s.world.name(),
            loaded_at: s.loaded_at,
            // A broken replacement of this method's file, which left this
            // version serving.
            last_error: rejections.get(&s.file).map(|r| r.reason.clone()),
            quarantined: s.quarantined().map(|q| Quarantined {
                reason: q.reason.clone(),
                since: q.at,
            }),
            canary: s.canary.get().cloned(),
        })
        .collect();
    let rejected = rejections
        .values()
        .map(|r| Rejected {
            file: r.file.display().to_string(),
            sha256: r.sha256.clone(),
            reason: r.reason.clone(),
            at: r.at,
            canary: r.canary.clone(),
        })
        .collect();
    let mut on_trial: Vec<OnTrial> = lab
        .registry
        .trials
        .all()
        .iter()
        .map(|(coupon, s)| OnTrial {
            method: s.method.to_string(),
            file: s.file.display().to_string(),
            sha256: s.sha256.clone(),
            scratch_coupon: *coupon,
        })
        .collect();
    // A trial holds its scratch coupon and, next, the unknown coupon its
    // canary asks for.
    on_trial.dedup_by(|later, first| later.sha256 == first.sha256);
    let served = lab.registry.strategies();
    let awaiting = components_in(&lab.config.strategy_dir)
        .unwrap_or_default()
        .into_iter()
        .filter(|file| !served.values().any(|s| &s.file == file) && !rejections.contains_key(file))
        .map(|file| file.display().to_string())
        .collect();
    Ok(Answer(
        StatusCode::OK,
        Strategies {
            directory: lab.config.strategy_dir.display().to_string(),
            engine: lab.runtime.sql_engine().now(lab.db()).await,
            strategies,
            rejected,
            on_trial,
            awaiting,
        },
    ))
}
