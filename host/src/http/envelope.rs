//! The response envelope of seed 004, and the one error type that becomes it.
//!
//! ```json
//! { "success": true,  "response": { }, "error": null }
//! { "success": false, "response": null, "error": { "message": "...", "status": 409 } }
//! ```

use axum::extract::FromRequest;
use axum::extract::FromRequestParts;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::http::header::RETRY_AFTER;
use axum::http::{HeaderValue, StatusCode};
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
    /// Seconds after which asking again may be answered otherwise: the
    /// answer's `Retry-After` header.
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            outcome: None,
            retry_after: None,
        }
    }

    /// This error, telling the client to ask again after `seconds`.
    pub fn retry_after(self, seconds: u64) -> Self {
        Self {
            retry_after: Some(seconds),
            ..self
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
        let mut response = (self.status, axum::Json(envelope)).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// A dependency failing is the dependency's fault, not the client's: 503.
/// The answer says what kind of failure it was and no more: the database's
/// own words can hold a statement, the database's name or a constraint's,
/// which are the server's business; the log has them.
impl From<sqlx::Error> for ApiError {
    fn from(err: sqlx::Error) -> Self {
        tracing::warn!(error = %err, "database call failed");
        Self::unavailable(format!(
            "the database is unavailable: {}",
            failure_kind(&err)
        ))
    }
}

/// What kind of failure `err` is, in words that name nothing of the
/// database's.
fn failure_kind(err: &sqlx::Error) -> String {
    match err {
        sqlx::Error::Io(io) => format!("the connection failed ({})", io.kind()),
        sqlx::Error::Tls(_) => "the connection's TLS failed".into(),
        sqlx::Error::PoolTimedOut => "no connection was free in time".into(),
        sqlx::Error::PoolClosed => "its pool is closed (the server is stopping)".into(),
        sqlx::Error::Protocol(_) => "its answer broke the protocol".into(),
        sqlx::Error::Database(db) => match db.code() {
            Some(code) => format!("it answered an error (SQLSTATE {code})"),
            None => "it answered an error".into(),
        },
        _ => "a database call failed".into(),
    }
}

/// A component's call that answered an error of its own (`err`, its
/// words): 503, saying that `what` failed. The words go to the log and
/// not to the client: a component's error can carry the database's text.
pub fn component_refused(what: &str, err: impl std::fmt::Display) -> ApiError {
    tracing::warn!(error = %err, "{what} failed");
    ApiError::unavailable(format!(
        "{what} failed: the component reported an error (the server's log has its words)"
    ))
}

impl From<redis::RedisError> for ApiError {
    fn from(err: redis::RedisError) -> Self {
        tracing::warn!(error = %err, "Redis call failed");
        if crate::redis_target::errors::is_busy(&err) {
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

/// Checks that a text input has 1 to `max` of `unit` (`len` counts them),
/// and is [`storable`].
pub fn sized(name: &str, text: &str, len: usize, max: usize, unit: &str) -> Result<(), ApiError> {
    storable(name, text)?;
    if text.is_empty() || len > max {
        return Err(ApiError::bad_request(format!(
            "{name} must be 1 to {max} {unit}"
        )));
    }
    Ok(())
}

/// Checks that a text input holds no NUL character, which PostgreSQL
/// cannot store in a text column (it refuses the statement) and MariaDB
/// stores where most tools cut the text short. Every route that takes text
/// checks it before the text goes anywhere, and the document's pattern of
/// each text (`^[^\u0000]*$`, or one that rules NUL out with more) says so.
pub fn storable(name: &str, text: &str) -> Result<(), ApiError> {
    if text.contains('\0') {
        return Err(ApiError::bad_request(format!(
            "{name} must not hold a NUL character (U+0000): the database cannot store it"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nul_character_is_refused_by_name() {
        let refused = storable("name", "a\0b").unwrap_err();
        assert_eq!(refused.status, StatusCode::BAD_REQUEST);
        assert!(refused.message.starts_with("name must not hold a NUL"));
        assert!(storable("name", "a b").is_ok());
        assert!(idempotency_key("k\0").is_err());
    }

    #[test]
    fn a_database_error_is_answered_without_its_text() {
        let err = sqlx::Error::Protocol("SELECT secret FROM `lab`.`coupons`".into());
        let answered = ApiError::from(err);
        assert_eq!(answered.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            answered.message,
            "the database is unavailable: its answer broke the protocol"
        );
    }

    #[test]
    fn retry_after_is_a_header_of_the_answer() {
        let answer = ApiError::unavailable("later")
            .retry_after(2)
            .into_response();
        assert_eq!(answer.headers()[RETRY_AFTER], "2");
        let answer = ApiError::unavailable("now").into_response();
        assert!(answer.headers().get(RETRY_AFTER).is_none());
    }

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
