//! How a call ends when it produces no answer, and what the host did
//! about it: the error, the compensation its strategy ran, the scripts it
//! left running that the host killed.

use std::time::Duration;

use super::bindings::types::{Compensation, IssueResult};
use super::trace::CallTrace;

/// Why a call produced no answer.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("the strategy trapped: {0}")]
    Trapped(String),
    #[error("the strategy ran past its {0:?} deadline")]
    DeadlineExceeded(Duration),
    #[error("all {0} strategy instances are busy")]
    Busy(u32),
    #[error("{0}")]
    Quarantined(String),
    #[error("{method} is a {world} and exports no {export}")]
    Unsupported {
        method: String,
        world: &'static str,
        export: &'static str,
    },
}

impl CallError {
    /// Whether the guest ran and stopped somewhere in the middle: what it
    /// did so far may need undoing.
    pub fn ended_midway(&self) -> bool {
        matches!(self, CallError::Trapped(_) | CallError::DeadlineExceeded(_))
    }

    /// The `reason` label of the failure metric.
    pub fn reason(&self) -> &'static str {
        match self {
            CallError::Trapped(_) => "trapped",
            CallError::DeadlineExceeded(_) => "deadline",
            CallError::Busy(_) => "busy",
            CallError::Quarantined(_) => "quarantined",
            CallError::Unsupported { .. } => "unsupported",
        }
    }
}

/// An issue call that produced no answer, and what its strategy undid.
#[derive(Debug)]
pub struct Unanswered {
    pub error: CallError,
    /// For a call that ended midway: the strategy's `compensate`, or why
    /// that failed too. `None` when the call never ran.
    pub compensation: Option<Result<Compensation, CallError>>,
}

/// How a call ended: its result, and what the host did about it.
pub(super) struct Ended<R> {
    pub(super) result: Result<R, CallError>,
    /// Scripts it sent that outlived its deadline and were killed.
    pub(super) scripts_killed: u32,
    /// The capability calls it made.
    pub(super) trace: CallTrace,
}

/// How an issue request's call ended.
pub struct IssueCall {
    pub answer: Result<IssueResult, Unanswered>,
    /// Scripts it sent that outlived the call's deadline and were killed.
    pub scripts_killed: u32,
    /// The capability calls it made, then those of its compensation.
    pub trace: CallTrace,
}

/// What a call of a world export answered, and the capability calls it made.
pub struct Traced<R> {
    pub result: Result<R, CallError>,
    pub trace: CallTrace,
}

impl<R> From<Ended<R>> for Traced<R> {
    fn from(ended: Ended<R>) -> Self {
        Traced {
            result: ended.result,
            trace: ended.trace,
        }
    }
}

impl<R> Ended<R> {
    pub(super) fn without_running(error: CallError) -> Self {
        Ended {
            result: Err(error),
            scripts_killed: 0,
            trace: CallTrace::default(),
        }
    }
}
