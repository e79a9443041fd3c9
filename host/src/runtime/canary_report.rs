//! What a canary found, as `GET /lab/strategies` shows it and the database
//! remembers it. Every loaded strategy carries its report, so it stands
//! with the runtime; the canary (a module above) writes it.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A canary's figures by name (`requests`, `issued`, `overIssued`, ...).
pub type Figures = BTreeMap<String, u64>;

/// What a component's canary found.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryReport {
    pub passed: bool,
    pub ran_at: DateTime<Utc>,
    /// From the scratch coupon's creation to its removal.
    pub took_ms: u64,
    /// The figures of its requests: `requests`, `issued`, `accepted`, and
    /// one per check, 0 when the check held.
    pub figures: Figures,
    /// The median time of its calls, in milliseconds.
    pub p50_ms: f64,
    /// The first check that failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
    /// This report is the one remembered from an earlier load of the same
    /// file (by sha256); the canary did not run again.
    #[serde(default)]
    pub remembered: bool,
}

/// The first check a canary failed, its figure and one request that shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    pub check: String,
    pub figure: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub example: Option<String>,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the canary failed: {} ({} against 0)",
            self.check, self.figure
        )?;
        match &self.example {
            Some(example) => write!(f, "; e.g. {example}"),
            None => Ok(()),
        }
    }
}
