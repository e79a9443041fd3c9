//! The one path of an issue request, from its announcement to its record,
//! and of the confirmation of one answered 202: `POST …/issue`, the
//! canary's requests and the consumers' confirmations all go through here.
//!
//! The host only times, records and translates: which checks run, in which
//! order, and what is compensated is the component's business. A user's
//! request is recorded, traced and counted; a canary's is seen nowhere a
//! user looks.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument;

use crate::announcements;
use crate::budget::{self, Stage};
use crate::confirmations;
use crate::lab::Lab;
use crate::outcome::{Ending, Outcome};
use crate::recorder::Settlement;
use crate::runtime::bindings::types::{Confirmation, IssueRequest};
use crate::runtime::trace::CallTrace;
use crate::runtime::{IssueCall, Strategy, Unanswered};

/// Who asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asker {
    /// A user, through the API: recorded, traced, counted in `/metrics`,
    /// and what it leaves unsettled is settled later.
    User,
    /// A canary, proving a component on its scratch coupon.
    Canary,
}

/// What a request was answered.
pub struct Answered {
    pub outcome: Outcome,
    /// What the component said, or why there was no answer.
    pub detail: Option<String>,
    /// Retries the component made (optimistic version conflicts, ...).
    pub retries: u32,
    /// Its arrival order on the coupon in this server (a user's request).
    pub sequence: Option<u64>,
    /// The component left its outcome to be settled later.
    pub settle_later: bool,
    /// How long the component's call took.
    pub took: Duration,
}

/// Runs `request` on `strategy` for `asker`.
pub async fn issue(
    lab: &Lab,
    strategy: &Arc<Strategy>,
    request: IssueRequest,
    asker: Asker,
) -> Answered {
    let user = asker == Asker::User;
    let (coupon, member) = (request.coupon_id, request.member_id);
    let arrival = user.then(|| lab.recorder.arrive(coupon, member));
    let span = tracing::debug_span!(
        "issue",
        method = %strategy.method,
        coupon,
        outcome = tracing::field::Empty
    );
    announcements::announce(lab, strategy, coupon).await;
    let started = Instant::now();
    let IssueCall {
        answer,
        scripts_killed,
        trace,
    } = lab
        .runtime
        .issue(strategy, &request)
        .instrument(span.clone())
        .await;
    let took = started.elapsed();
    announcements::announce_after(lab, strategy, coupon);

    let mut ending = Ending {
        coupon_id: coupon,
        member_id: member,
        method: strategy.method.clone(),
        arrived: arrival.as_ref().map(|arrival| arrival.arrived()),
        outcome: Outcome::Issued,
        retries: 0,
        compensations: 0,
        scripts_killed,
        labels: Vec::new(),
    };
    let (detail, settle_later, unsettled) = match answer {
        Ok(result) => {
            ending.outcome = result.outcome.into();
            ending.retries = result.retries;
            ending.compensations = result.compensations;
            ending.labels = result.labels;
            let detail = if result.settle_later && user {
                Some(format!(
                    "{}; the result shows what it became once settled",
                    result.detail.as_deref().unwrap_or("outcome unknown")
                ))
            } else {
                result.detail
            };
            (detail, result.settle_later, result.settle_later)
        }
        Err(Unanswered {
            error,
            compensation,
        }) => {
            if user {
                tracing::error!(method = %strategy.method, %error, "strategy call failed");
            }
            ending.outcome = Outcome::from(&error);
            // An undo that could not run now runs later.
            let unfinished = compensation.as_ref().is_some_and(|done| {
                done.as_ref().is_err() || done.as_ref().is_ok_and(|done| done.unfinished)
            });
            let undone = match compensation {
                None => String::new(),
                Some(Ok(done)) => {
                    ending.compensations = done.undone;
                    let detail = done.detail.as_deref().unwrap_or("done");
                    format!("; compensated: {detail}")
                }
                Some(Err(failed)) => format!("; the compensation failed too: {failed}"),
            };
            (Some(format!("{error}{undone}")), false, unfinished)
        }
    };
    let outcome = ending.outcome;
    span.record("outcome", outcome.name());
    let mut answered = Answered {
        outcome,
        detail,
        retries: ending.retries,
        sequence: arrival.as_ref().map(|arrival| arrival.sequence),
        settle_later,
        took,
    };
    match arrival {
        Some(arrival) => {
            if unsettled {
                keep_to_settle(lab, strategy, &request);
            }
            lab.traces.request(&ending, trace);
            let latency = lab.recorder.finish(arrival, ending);
            let metrics = lab.runtime.metrics();
            metrics
                .issue_requests
                .with_label_values(&[&*strategy.method, outcome.name()])
                .inc();
            metrics
                .issue_duration
                .with_label_values(&[&*strategy.method])
                .observe(latency.as_secs_f64());
            if outcome == Outcome::Accepted {
                record_accepted_later(lab, &request, strategy);
            }
            budget::lap(Stage::Record);
        }
        // The canary judges a 202 by its confirmation, which it waits for:
        // one not recorded cannot be judged, and says so.
        None if outcome == Outcome::Accepted => {
            if let Err(err) =
                confirmations::record_accepted(lab.redis(), coupon, member, &strategy.method).await
            {
                answered.detail = Some(format!("the canary could not record its 202: {err}"));
            }
        }
        None => {}
    }
    answered
}

/// Records an acceptance off the response path: the 202 does not wait for
/// it. The record lives in Redis so a consumer in another process can pair
/// its confirmation with it.
fn record_accepted_later(lab: &Lab, request: &IssueRequest, strategy: &Arc<Strategy>) {
    let lab = lab.clone();
    let (coupon, member) = (request.coupon_id, request.member_id);
    let method = strategy.method.clone();
    tokio::spawn(async move {
        if let Err(err) = confirmations::record_accepted(lab.redis(), coupon, member, &method).await
        {
            tracing::warn!(coupon, member, error = %err, "could not record an acceptance");
        }
    });
}

/// Records what an accepted request became, and for an issued one how long
/// after its 202 it was confirmed; one the component could not settle is
/// kept to be settled later. `trace`: the call that confirmed it alone,
/// kept with the request's traces. Whether the outcome was recorded (Redis
/// answered): a consumer whose broker forgets a message once acked acks
/// only then.
pub async fn confirmed(
    lab: &Lab,
    strategy: &Arc<Strategy>,
    confirmation: &Confirmation,
    trace: Option<CallTrace>,
) -> bool {
    let method = &*strategy.method;
    if let Some(trace) = trace {
        let ending = Ending {
            coupon_id: confirmation.coupon_id,
            member_id: confirmation.member_id,
            method: strategy.method.clone(),
            arrived: None,
            outcome: confirmation.outcome.into(),
            retries: 0,
            compensations: confirmation.compensations,
            scripts_killed: 0,
            labels: Vec::new(),
        };
        lab.traces.confirmation(&ending, trace);
    }
    if confirmation.settle_later {
        let request = IssueRequest {
            coupon_id: confirmation.coupon_id,
            member_id: confirmation.member_id,
            duplicate_check: true,
            idempotency_key: None,
            quantity: 1,
        };
        keep_to_settle(lab, strategy, &request);
    }
    match confirmations::record_confirmed(lab.redis(), confirmation).await {
        Ok(Some(lag)) if strategy.serving() => {
            lab.runtime
                .metrics()
                .confirmation_lag
                .with_label_values(&[method])
                .observe(lag.as_secs_f64());
            true
        }
        Ok(_) => true,
        Err(err) => {
            tracing::warn!(method, error = %err, "could not record a confirmation");
            false
        }
    }
}

/// Keeps `request` of `strategy` to be settled (the consumers' settle
/// loop tries it), counted in the coupon's result and in `/metrics`.
fn keep_to_settle(lab: &Lab, strategy: &Arc<Strategy>, request: &IssueRequest) {
    if lab.settlements.push(strategy, request) {
        lab.recorder
            .settlement(request.coupon_id, &strategy.method, Settlement::Asked);
        lab.runtime
            .metrics()
            .settlements
            .with_label_values(&[&strategy.method, "kept"])
            .inc();
    }
}
