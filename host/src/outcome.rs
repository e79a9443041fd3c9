//! Every way an issue request can end ([`Outcome`]): the name results and
//! responses use, the HTTP status it is answered with and what a refusal
//! says in the host's words; the runtime maps its answers onto it
//! (`runtime::Ended`). And the [`Ending`] of a request or a confirmation,
//! as the recorder counts it and the traces keep it. It takes nothing from
//! the crate: every floor speaks of outcomes.

use std::sync::Arc;

use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

/// How one request ended, or the confirmation of one answered 202.
pub struct Ending {
    pub coupon_id: u64,
    pub member_id: u64,
    pub method: Arc<str>,
    /// When and in which order it reached this server; a confirmation
    /// reaches it as a job, a message or an entry, and has neither.
    pub arrived: Option<Arrived>,
    pub outcome: Outcome,
    pub retries: u32,
    pub compensations: u32,
    /// Scripts the call sent that outlived its deadline and were killed.
    pub scripts_killed: u32,
    /// Facts the component reported (`receivers = 1`).
    pub labels: Vec<(String, String)>,
}

/// A request's arrival on this server.
#[derive(Debug, Clone, Copy)]
pub struct Arrived {
    /// 1 for the first request on its coupon in this process, then 2, 3, ...
    pub sequence: u64,
    /// Microseconds since the Unix epoch: the order across hosts.
    pub at_us: u64,
}

impl Ending {
    /// An ending of `method` with `outcome` and nothing else to count.
    #[cfg(test)]
    pub fn of(method: &str, outcome: Outcome) -> Self {
        Ending {
            coupon_id: 0,
            member_id: 0,
            method: Arc::from(method),
            arrived: None,
            outcome,
            retries: 0,
            compensations: 0,
            scripts_killed: 0,
            labels: Vec::new(),
        }
    }
}

/// Every way an issue request can end, as the result endpoint names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Outcome {
    Issued,
    Accepted,
    SoldOut,
    SoldOutAtDb,
    Duplicate,
    VersionConflict,
    Deadlock,
    LockWaitTimeout,
    SerializationFailure,
    Throttled,
    QueueFull,
    Unavailable,
    UnknownMember,
    UnknownCoupon,
    /// The component trapped.
    Failed,
    /// The component ran past its deadline.
    TimedOut,
    /// No instance slot was free.
    Busy,
}

/// How sqlx opens every error a database returned, which the `sql`
/// capability hands a component as it is.
const DATABASE_ERROR: &str = "error returned from database";

impl Outcome {
    /// The HTTP status an answer with this outcome has (the table in the
    /// README's *Using the API*): 2xx for a coupon issued or accepted, 409
    /// for a refusal the client caused, 503 for one it may retry, 404 for
    /// an unknown coupon (the resource the URL names), 422 for an unknown
    /// member (named in the body: the URL's coupon is there, the request
    /// cannot be served), 500 and 504 for a component that failed.
    pub fn status(self) -> StatusCode {
        match self {
            Outcome::Issued => StatusCode::OK,
            Outcome::Accepted => StatusCode::ACCEPTED,
            Outcome::SoldOut | Outcome::SoldOutAtDb | Outcome::Duplicate => StatusCode::CONFLICT,
            Outcome::VersionConflict
            | Outcome::Deadlock
            | Outcome::LockWaitTimeout
            | Outcome::SerializationFailure
            | Outcome::Throttled
            | Outcome::QueueFull
            | Outcome::Unavailable
            | Outcome::Busy => StatusCode::SERVICE_UNAVAILABLE,
            Outcome::UnknownCoupon => StatusCode::NOT_FOUND,
            Outcome::UnknownMember => StatusCode::UNPROCESSABLE_ENTITY,
            Outcome::Failed => StatusCode::INTERNAL_SERVER_ERROR,
            Outcome::TimedOut => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    /// What a refusal says when the component gave no detail, or when its
    /// detail is not for the client ([`Outcome::names_its_own_message`]).
    pub fn default_message(self, coupon_id: u64, member_id: u64) -> String {
        match self {
            Outcome::SoldOut => format!("coupon {coupon_id} is sold out"),
            Outcome::SoldOutAtDb => {
                format!("coupon {coupon_id} is sold out (caught by the database guard)")
            }
            Outcome::Duplicate => format!("member {member_id} already has coupon {coupon_id}"),
            Outcome::VersionConflict => {
                "the coupon row changed under this request (optimistic version conflict)".into()
            }
            Outcome::Deadlock => "the database chose this request as a deadlock victim".into(),
            Outcome::LockWaitTimeout => "a row lock was not granted in time".into(),
            Outcome::SerializationFailure => {
                "the database refused this request's transaction: a concurrent one changed what it read".into()
            }
            Outcome::Throttled => "no permit was free in time".into(),
            Outcome::QueueFull => "the confirmation queue is full".into(),
            Outcome::Unavailable => "a dependency is unavailable".into(),
            Outcome::UnknownMember => format!("member {member_id} does not exist"),
            Outcome::UnknownCoupon => format!("coupon {coupon_id} does not exist"),
            Outcome::Issued
            | Outcome::Accepted
            | Outcome::Failed
            | Outcome::TimedOut
            | Outcome::Busy => self.name().to_string(),
        }
    }

    /// Whether a refusal with this outcome is told in the host's words
    /// alone: an unknown member or coupon is the client's input, and its
    /// message names the member or coupon; what the component said of it
    /// (a foreign key's SQL text, the database's and constraint's names)
    /// goes to the traces and the log, not the client.
    pub fn names_its_own_message(self) -> bool {
        matches!(self, Outcome::UnknownMember | Outcome::UnknownCoupon)
    }

    /// Whether a component's `detail` of a refusal with this outcome is
    /// the database's own text of a constraint the request broke (a
    /// duplicate key names the key and its table), told in the host's
    /// words instead. A duplicate the component decided itself (a
    /// per-member limit, a reservation) keeps its words.
    pub fn hides_the_databases_words(self, detail: &str) -> bool {
        self == Outcome::Duplicate && detail.contains(DATABASE_ERROR)
    }

    /// The name used in responses and results.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Issued => "ISSUED",
            Outcome::Accepted => "ACCEPTED",
            Outcome::SoldOut => "SOLD_OUT",
            Outcome::SoldOutAtDb => "SOLD_OUT_AT_DB",
            Outcome::Duplicate => "DUPLICATE",
            Outcome::VersionConflict => "VERSION_CONFLICT",
            Outcome::Deadlock => "DEADLOCK",
            Outcome::LockWaitTimeout => "LOCK_WAIT_TIMEOUT",
            Outcome::SerializationFailure => "SERIALIZATION_FAILURE",
            Outcome::Throttled => "THROTTLED",
            Outcome::QueueFull => "QUEUE_FULL",
            Outcome::Unavailable => "UNAVAILABLE",
            Outcome::UnknownMember => "UNKNOWN_MEMBER",
            Outcome::UnknownCoupon => "UNKNOWN_COUPON",
            Outcome::Failed => "FAILED",
            Outcome::TimedOut => "TIMED_OUT",
            Outcome::Busy => "BUSY",
        }
    }
}
