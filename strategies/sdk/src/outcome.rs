//! Building an [`IssueResult`], and the outcome each capability error, or
//! a Redis reply a strategy cannot decide on, means.
//!
//! Strategies are written as functions returning [`Step`]: `?` on a Redis or
//! SQL call ends the request with the outcome the contract gives that error.

use crate::bindings::couponlab::strategy::types::{Confirmation, IssueResult, Outcome};
use crate::redis::RedisError;
use crate::reply::Reply;
use crate::sql::SqlError;

/// A step of a strategy: `Err` ends the request early with that result.
pub type Step<T> = Result<T, IssueResult>;

/// The result of a strategy, whichever way it ended.
pub fn settle(step: Step<IssueResult>) -> IssueResult {
    step.unwrap_or_else(|result| result)
}

impl IssueResult {
    pub fn of(outcome: Outcome) -> Self {
        IssueResult {
            outcome,
            detail: None,
            retries: 0,
            compensations: 0,
            labels: Vec::new(),
            settle_later: false,
        }
    }

    pub fn issued() -> Self {
        Self::of(Outcome::Issued)
    }

    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    pub fn retries(mut self, retries: u32) -> Self {
        self.retries = retries;
        self
    }

    /// Adds to the compensations done (SREM, stock restored).
    pub fn compensated(mut self, count: u32) -> Self {
        self.compensations += count;
        self
    }

    /// Asks the host to settle the request later: its outcome is unknown,
    /// or an undo could not run now. The host calls the strategy's
    /// `compensate` once the dependency answers.
    pub fn settle_later(mut self) -> Self {
        self.settle_later = true;
        self
    }

    /// A fact the host counts per method (`receivers = 1`).
    pub fn label(mut self, name: &str, value: impl ToString) -> Self {
        self.labels.push((name.to_string(), value.to_string()));
        self
    }

    /// The same outcome as the confirmation of an accepted request.
    pub fn confirmation(self, coupon_id: u64, member_id: u64) -> Confirmation {
        Confirmation {
            coupon_id,
            member_id,
            outcome: self.outcome,
            detail: self.detail,
            compensations: self.compensations,
            settle_later: self.settle_later,
        }
    }
}

impl From<SqlError> for IssueResult {
    fn from(err: SqlError) -> Self {
        let outcome = match &err {
            SqlError::Deadlock(_) => Outcome::Deadlock,
            SqlError::LockWaitTimeout(_) => Outcome::LockWaitTimeout,
            SqlError::SerializationFailure(_) => Outcome::SerializationFailure,
            SqlError::DuplicateKey(_) => Outcome::Duplicate,
            // coupon_issues has one foreign key: member_id.
            SqlError::ForeignKey(_) => Outcome::UnknownMember,
            SqlError::Connection(_)
            | SqlError::Indeterminate(_)
            | SqlError::Refused(_)
            | SqlError::Other(_) => Outcome::Unavailable,
        };
        let result = IssueResult::of(outcome).detail(err.message());
        match err {
            // Only the database can say what became of it, once the
            // session that sent the COMMIT is gone.
            SqlError::Indeterminate(_) => result.settle_later(),
            _ => result,
        }
    }
}

impl From<RedisError> for IssueResult {
    fn from(err: RedisError) -> Self {
        IssueResult::of(Outcome::Unavailable).detail(format!("Redis: {}", err.message()))
    }
}

impl Reply {
    /// The reply as an integer, or the request ends as UNAVAILABLE naming the
    /// command whose reply was not one: a strategy cannot decide on it.
    pub fn expect_int(&self, command: &str) -> Step<i64> {
        self.as_int().ok_or_else(|| {
            IssueResult::of(Outcome::Unavailable).detail(format!(
                "Redis answered {command} with {self}, not an integer"
            ))
        })
    }
}

/// A Redis command that writes failed: when its connection failed, the
/// command may have run while its answer was lost (a reservation made that
/// nobody knows of), so the request is settled later by `compensate`, which
/// undoes it unless the member has a row.
pub fn unanswered_write(err: RedisError) -> IssueResult {
    let lost = matches!(err, RedisError::Connection(_));
    let result = IssueResult::from(err);
    if lost {
        let detail = format!(
            "outcome unknown: {}",
            result.detail.as_deref().unwrap_or_default()
        );
        result.detail(detail).settle_later()
    } else {
        result
    }
}
