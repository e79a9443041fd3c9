//! How a call ends. A call of any export ends in a [`Run`]: its result or
//! why there was none ([`CallError`]), the scripts it left running that the
//! host killed, the capability calls it made. An issue call ends in an
//! [`Ended`], with the compensation its strategy ran: its [`Outcome`],
//! whether it needs settling and what is told of it are each made here,
//! once, as is every mapping of the runtime's answers onto [`Outcome`].

use std::sync::Arc;
use std::time::Duration;

use super::bindings::types::{Compensation, IssueResult, Outcome as WitOutcome};
use super::trace::CallTrace;
use crate::outcome::{Arrived, Ending, Outcome};

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

/// How a call of any export ended: its result, and what the host did
/// about it.
pub(super) struct Run<R> {
    pub(super) result: Result<R, CallError>,
    /// Scripts it sent that outlived its deadline and were killed.
    pub(super) scripts_killed: u32,
    /// The capability calls it made.
    pub(super) trace: CallTrace,
}

/// What a call of a world export answered, and the capability calls it made.
pub struct Traced<R> {
    pub result: Result<R, CallError>,
    pub trace: CallTrace,
}

impl<R> From<Run<R>> for Traced<R> {
    fn from(run: Run<R>) -> Self {
        Traced {
            result: run.result,
            trace: run.trace,
        }
    }
}

impl<R> Run<R> {
    pub(super) fn without_running(error: CallError) -> Self {
        Run {
            result: Err(error),
            scripts_killed: 0,
            trace: CallTrace::default(),
        }
    }
}

/// How an issue request's call ended: the one value its end travels in,
/// from the runtime through the record and the traces to the client's
/// answer, or to the canary that asked.
pub struct Ended {
    pub coupon_id: u64,
    pub member_id: u64,
    /// The component's answer, or why there was none.
    pub(super) answer: Result<IssueResult, CallError>,
    /// For a call that ended midway: its strategy's `compensate`, or why
    /// that failed too. `None` when the call answered or never ran.
    pub(super) compensation: Option<Result<Compensation, CallError>>,
    /// Scripts it sent that outlived the call's deadline and were killed.
    pub scripts_killed: u32,
    /// How long the call took, its compensation included.
    pub took: Duration,
    /// The capability calls it made, then those of its compensation.
    pub trace: CallTrace,
}

impl Ended {
    pub fn outcome(&self) -> Outcome {
        match &self.answer {
            Ok(result) => result.outcome.into(),
            Err(error) => error.into(),
        }
    }

    /// Whether what the request did is still to be settled: the component
    /// said its outcome is not known yet, or the undo its call needed could
    /// not run, or not finish, now.
    pub fn needs_settling(&self) -> bool {
        match (&self.answer, &self.compensation) {
            (Ok(result), _) => result.settle_later,
            (Err(_), Some(Ok(undone))) => undone.unfinished,
            (Err(_), Some(Err(_))) => true,
            (Err(_), None) => false,
        }
    }

    /// Whether the component answered and left its outcome to be settled
    /// later.
    pub fn settle_later(&self) -> bool {
        matches!(&self.answer, Ok(result) if result.settle_later)
    }

    /// Why the call produced no answer.
    pub fn error(&self) -> Option<&CallError> {
        self.answer.as_ref().err()
    }

    /// Retries the component made (optimistic version conflicts, ...).
    pub fn retries(&self) -> u32 {
        self.answer.as_ref().map_or(0, |result| result.retries)
    }

    /// Undo steps done: the component's on the way, or its strategy's
    /// `compensate` after a call that ended midway.
    pub fn compensations(&self) -> u32 {
        match (&self.answer, &self.compensation) {
            (Ok(result), _) => result.compensations,
            (Err(_), Some(Ok(undone))) => undone.undone,
            (Err(_), _) => 0,
        }
    }

    /// What the component said of its answer, or why there was none and
    /// what its strategy undid: in its own words, as a canary keeps it.
    pub fn detail(&self) -> Option<String> {
        match (&self.answer, &self.compensation) {
            (Ok(result), _) => result.detail.clone(),
            (Err(error), None) => Some(error.to_string()),
            (Err(error), Some(Ok(undone))) => Some(format!(
                "{error}; compensated: {}",
                undone.detail.as_deref().unwrap_or("done")
            )),
            (Err(error), Some(Err(failed))) => {
                Some(format!("{error}; the compensation failed too: {failed}"))
            }
        }
    }

    /// What a user is told of it after its outcome: the [`Ended::detail`],
    /// saying so when the outcome is to be settled; for a refusal always
    /// something, in the host's words when the component gave none or its
    /// words are not for the client (the member or coupon of a refusal of
    /// the client's input, never the database's text).
    pub fn told(&self) -> Option<String> {
        let mut detail = self.detail();
        if self.settle_later() {
            detail = Some(format!(
                "{}; the result shows what it became once settled",
                detail.as_deref().unwrap_or("outcome unknown")
            ));
        }
        let outcome = self.outcome();
        if outcome.status().is_success() {
            return detail;
        }
        let host_words = outcome.default_message(self.coupon_id, self.member_id);
        Some(match detail {
            // Which guard refused it is the lesson; the key's text is not.
            Some(detail) if outcome.hides_the_databases_words(&detail) => {
                format!("{host_words} (the database's unique key refused it)")
            }
            Some(detail) if !outcome.names_its_own_message() => detail,
            _ => host_words,
        })
    }

    /// The request's end as the recorder counts it and the traces keep it.
    pub fn ending(&self, method: Arc<str>, arrived: Arrived) -> Ending {
        Ending {
            coupon_id: self.coupon_id,
            member_id: self.member_id,
            method,
            arrived: Some(arrived),
            outcome: self.outcome(),
            retries: self.retries(),
            compensations: self.compensations(),
            scripts_killed: self.scripts_killed,
            labels: self
                .answer
                .as_ref()
                .map(|result| result.labels.clone())
                .unwrap_or_default(),
        }
    }
}

impl From<WitOutcome> for Outcome {
    fn from(outcome: WitOutcome) -> Self {
        match outcome {
            WitOutcome::Issued => Outcome::Issued,
            WitOutcome::Accepted => Outcome::Accepted,
            WitOutcome::SoldOut => Outcome::SoldOut,
            WitOutcome::SoldOutAtDb => Outcome::SoldOutAtDb,
            WitOutcome::Duplicate => Outcome::Duplicate,
            WitOutcome::VersionConflict => Outcome::VersionConflict,
            WitOutcome::Deadlock => Outcome::Deadlock,
            WitOutcome::LockWaitTimeout => Outcome::LockWaitTimeout,
            WitOutcome::SerializationFailure => Outcome::SerializationFailure,
            WitOutcome::Throttled => Outcome::Throttled,
            WitOutcome::QueueFull => Outcome::QueueFull,
            WitOutcome::Unavailable => Outcome::Unavailable,
            WitOutcome::UnknownMember => Outcome::UnknownMember,
            WitOutcome::UnknownCoupon => Outcome::UnknownCoupon,
        }
    }
}

impl From<&CallError> for Outcome {
    fn from(error: &CallError) -> Self {
        match error {
            CallError::Trapped(_) | CallError::Unsupported { .. } => Outcome::Failed,
            CallError::DeadlineExceeded(_) => Outcome::TimedOut,
            CallError::Busy(_) => Outcome::Busy,
            CallError::Quarantined(_) => Outcome::Unavailable,
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;

    fn answered(outcome: WitOutcome, detail: Option<&str>) -> Ended {
        Ended {
            coupon_id: 7,
            member_id: 42,
            answer: Ok(IssueResult {
                outcome,
                detail: detail.map(String::from),
                retries: 0,
                compensations: 0,
                labels: Vec::new(),
                settle_later: false,
            }),
            compensation: None,
            scripts_killed: 0,
            took: Duration::ZERO,
            trace: CallTrace::default(),
        }
    }

    #[test]
    fn an_unknown_member_is_told_by_its_id_not_by_the_database() {
        let leaked = "foreign key: error returned from database: 1452 (23000): Cannot add or \
                      update a child row: a foreign key constraint fails (`lab`.`coupon_issues`, \
                      CONSTRAINT `fk_coupon_issues_member` ...)";
        let ended = answered(WitOutcome::UnknownMember, Some(leaked));
        assert_eq!(ended.outcome().status(), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(ended.told().unwrap(), "member 42 does not exist");
        // The canary keeps the component's words.
        assert_eq!(ended.detail().unwrap(), leaked);
        let duplicate = "duplicate key: error returned from database: 1062 (23000): Duplicate \
                         entry '7-42' for key 'uq_coupon_member'";
        let ended = answered(WitOutcome::Duplicate, Some(duplicate));
        assert_eq!(
            ended.told().unwrap(),
            "member 42 already has coupon 7 (the database's unique key refused it)"
        );
        // A duplicate the component decided keeps its words.
        let limit = "PER_USER_LIMIT_EXCEEDED: member 42 holds 1 of 1";
        let ended = answered(WitOutcome::Duplicate, Some(limit));
        assert_eq!(ended.told().unwrap(), limit);
        let ended = answered(WitOutcome::UnknownCoupon, None);
        assert_eq!(ended.outcome().status(), StatusCode::NOT_FOUND);
        assert_eq!(ended.told().unwrap(), "coupon 7 does not exist");
        // Other refusals keep what the component said of them.
        let ended = answered(WitOutcome::SoldOut, Some("stock 0"));
        assert_eq!(ended.told().unwrap(), "stock 0");
        // A success tells what the component said, and nothing else.
        assert_eq!(answered(WitOutcome::Issued, None).told(), None);
    }

    #[test]
    fn an_outcome_to_be_settled_says_so() {
        let mut ended = answered(WitOutcome::Accepted, None);
        if let Ok(result) = &mut ended.answer {
            result.settle_later = true;
        }
        assert!(ended.needs_settling());
        assert_eq!(
            ended.told().unwrap(),
            "outcome unknown; the result shows what it became once settled"
        );
        assert_eq!(ended.detail(), None);
    }

    #[test]
    fn a_call_ended_midway_tells_what_its_compensation_did() {
        let midway = |compensation| Ended {
            answer: Err(CallError::DeadlineExceeded(Duration::from_secs(1))),
            compensation: Some(compensation),
            ..answered(WitOutcome::Issued, None)
        };
        let undone = |unfinished| Compensation {
            undone: 1,
            detail: Some("the reservation was removed".into()),
            unfinished,
        };
        let ended = midway(Ok(undone(false)));
        assert_eq!(ended.outcome(), Outcome::TimedOut);
        assert_eq!(ended.compensations(), 1);
        assert!(!ended.needs_settling());
        assert_eq!(
            ended.told().unwrap(),
            "the strategy ran past its 1s deadline; compensated: the reservation was removed"
        );
        assert!(midway(Ok(undone(true))).needs_settling());
        let failed = midway(Err(CallError::Busy(1)));
        assert!(failed.needs_settling());
        assert_eq!(
            failed.detail().unwrap(),
            "the strategy ran past its 1s deadline; the compensation failed too: all 1 \
             strategy instances are busy"
        );
    }
}
