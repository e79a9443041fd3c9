//! The response envelope of seed 004, and the one error type that becomes it.
//!
//! ```json
//! { "success": true,  "response": { }, "error": null }
//! { "success": false, "response": null, "error": { "message": "...", "status": 409 } }
//! ```

use axum::extract::FromRequest;
use axum::extract::FromRequestParts;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::outcome::Outcome;
use crate::runtime::CallError;

#[derive(Debug, Serialize)]
pub struct Envelope<T> {
    pub success: bool,
    pub response: Option<T>,
    pub error: Option<ErrorBody>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// What went wrong; an issue error's starts with its outcome name
    /// (`SOLD_OUT: ...`).
    pub message: String,
    /// The HTTP status of the answer.
    pub status: u16,
    /// An issue request's refusal only: its outcome, the name the message
    /// starts with, for a client to tell refusals of one status apart (an
    /// unknown member from an unknown coupon) without parsing the message.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = String, required = false)]
    pub outcome: Option<Outcome>,
}

/// A successful answer with its status.
pub struct Answer<T>(pub StatusCode, pub T);

impl<T: Serialize> IntoResponse for Answer<T> {
    fn into_response(self) -> Response {
        let envelope = Envelope {
            success: true,
            response: Some(self.1),
            error: None,
        };
        (self.0, axum::Json(envelope)).into_response()
    }
}

/// Every failure a route can answer with.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// What an issue request was refused as; `error.outcome` of the answer.
    pub outcome: Option<Outcome>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            outcome: None,
        }
    }

    /// An issue request refused as `outcome`: the outcome's status, and a
    /// message that starts with its name.
    pub fn refused(outcome: Outcome, detail: impl std::fmt::Display) -> Self {
        Self {
            outcome: Some(outcome),
            ..Self::new(outcome.status(), format!("{}: {detail}", outcome.name()))
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, message)
    }

    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "this path does not accept this HTTP method",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let envelope = Envelope::<()> {
            success: false,
            response: None,
            error: Some(ErrorBody {
                message: self.message,
                status: self.status.as_u16(),
                outcome: self.outcome,
            }),
        };
        (self.status, axum::Json(envelope)).into_response()
    }
}

/// A dependency failing is the dependency's fault, not the client's: 503.
impl From<sqlx::Error> for ApiError {
    fn from(err: sqlx::Error) -> Self {
        tracing::warn!(error = %err, "database call failed");
        Self::unavailable(format!("the database is unavailable: {err}"))
    }
}

impl From<redis::RedisError> for ApiError {
    fn from(err: redis::RedisError) -> Self {
        tracing::warn!(error = %err, "Redis call failed");
        if crate::runtime::redis::is_busy(&err) {
            return Self::unavailable(format!(
                "Redis is busy running a script and serves nobody until it ends: {err}"
            ));
        }
        Self::unavailable(format!("Redis is unavailable: {err}"))
    }
}

/// A component call that produced no answer: its trap is the server's fault
/// (500), its deadline a timeout (504), no free instance a 503.
impl From<CallError> for ApiError {
    fn from(err: CallError) -> Self {
        tracing::error!(error = %err, "strategy call failed");
        Self::new(Outcome::from(&err).status(), err.to_string())
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        Self::bad_request(rejection.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        Self::bad_request(rejection.body_text())
    }
}

/// `axum::Json` whose rejection is an [`ApiError`], so malformed bodies get
/// the envelope too.
#[derive(FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct AppJson<T>(pub T);

/// `axum::extract::Path` whose rejection is an [`ApiError`].
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct AppPath<T>(pub T);

/// Checks that a numeric input is positive.
pub fn positive(name: &str, value: i64) -> Result<u64, ApiError> {
    u64::try_from(value).ok().filter(|v| *v > 0).ok_or_else(|| {
        ApiError::bad_request(format!("{name} must be a positive integer, got {value}"))
    })
}

/// Checks that a numeric input is positive and at most `max`.
pub fn positive_up_to(name: &str, value: i64, max: u64) -> Result<u64, ApiError> {
    let value = positive(name, value)?;
    if value > max {
        return Err(ApiError::bad_request(format!(
            "{name} must be at most {max}, got {value}"
        )));
    }
    Ok(value)
}

/// The longest idempotency key a request may carry, in characters.
const MAX_IDEMPOTENCY_KEY: usize = 128;

/// Checks an idempotency key (the limited drop's request key): 1 to 128
/// characters (Unicode code points), the unit of the `maxLength` the issue
/// and cancel bodies document it with, as JSON Schema counts one.
pub fn idempotency_key(key: &str) -> Result<(), ApiError> {
    sized(
        "idempotencyKey",
        key,
        key.chars().count(),
        MAX_IDEMPOTENCY_KEY,
        "characters",
    )
}

/// Checks that a text input has 1 to `max` of `unit` (`len` counts them).
pub fn sized(name: &str, text: &str, len: usize, max: usize, unit: &str) -> Result<(), ApiError> {
    if text.is_empty() || len > max {
        return Err(ApiError::bad_request(format!(
            "{name} must be 1 to {max} {unit}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idempotency_key_is_measured_in_characters() {
        // Three bytes each in UTF-8: 384 bytes, 128 characters.
        let longest = "가".repeat(MAX_IDEMPOTENCY_KEY);
        assert!(idempotency_key(&longest).is_ok());
        let over = format!("{longest}k");
        let refused = idempotency_key(&over).unwrap_err();
        assert_eq!(refused.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            refused.message,
            "idempotencyKey must be 1 to 128 characters"
        );
        assert!(idempotency_key("").is_err());
    }
}
