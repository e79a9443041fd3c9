//! The one path of an issue request, from its announcement to its record,
//! and of the confirmation of one answered 202: `POST …/issue`, the
//! canary's requests and the consumers' confirmations all go through here.
//!
//! The host only times, records and translates: which checks run, in which
//! order, and what is compensated is the component's business. A user's
//! request is recorded, traced and counted; a canary's is seen nowhere a
//! user looks. Either gets the call's [`Ended`] back, to answer from.

use std::sync::Arc;

use tracing::Instrument;

use crate::announcements;
use crate::budget::{self, Stage};
use crate::confirmations;
use crate::lab::Lab;
use crate::outcome::{Ending, Outcome};
use crate::recorder::{Arrival, Settlement};
use crate::runtime::bindings::types::{Confirmation, IssueRequest};
use crate::runtime::trace::CallTrace;
use crate::runtime::{Ended, Strategy};

/// Who asks.
pub enum Asker {
    /// A user, through the API, with its arrival on the coupon: recorded,
    /// traced, counted in `/metrics`, and what it leaves unsettled is
    /// settled later.
    User(Arrival),
    /// A canary, proving a component on its scratch coupon.
    Canary,
}

/// Runs `request` on `strategy` for `asker`.
pub async fn issue(
    lab: &Lab,
    strategy: &Arc<Strategy>,
    request: IssueRequest,
    asker: Asker,
) -> Ended {
    let coupon = request.coupon_id;
    let span = tracing::debug_span!(
        "issue",
        method = %strategy.method,
        coupon,
        outcome = tracing::field::Empty
    );
    announcements::announce(lab, strategy, coupon).await;
    let mut ended = lab
        .runtime
        .issue(strategy, &request)
        .instrument(span.clone())
        .await;
    announcements::announce_after(lab, strategy, coupon);
    let outcome = ended.outcome();
    span.record("outcome", outcome.name());
    let Asker::User(arrival) = asker else {
        return ended;
    };
    if let Some(error) = ended.error() {
        tracing::error!(method = %strategy.method, %error, "strategy call failed");
    }
    if ended.needs_settling() {
        keep_to_settle(lab, strategy, &request);
    }
    let ending = ended.ending(strategy.method.clone(), arrival.arrived());
    lab.traces
        .request(&ending, std::mem::take(&mut ended.trace));
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
    ended
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
