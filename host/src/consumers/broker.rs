//! What the RabbitMQ and JetStream consumers share: waiting for a
//! component that publishes, handing a message to the component that
//! published it (or to the one on trial for a canary's scratch coupon),
//! recording what it answered, and the pause before a redelivery.
//!
//! A message reaches its component as a `stream-entry` (its id, its
//! fields, its deliveries so far, this one included), through the stream
//! world's export: the component confirms and says ack or retry, and when
//! the message was delivered too often, undoes its reservation.

use std::sync::Arc;
use std::time::Duration;

use couponlab_contract::fields;
use tokio_util::sync::CancellationToken;

use super::{pause_unless_cancelled, until_answered};
use crate::issuing;
use crate::lab::Lab;
use crate::outcome::Outcome;
use crate::runtime::Strategy;
use crate::runtime::bindings::types::{Disposition, StreamEntry};
use crate::runtime::broker::message;

/// Messages one process confirms at once, from each broker.
pub const IN_FLIGHT: usize = 16;

/// How often an idle consumer looks for a loaded component that publishes,
/// and how long it waits before connecting again after a broken link.
const LOOK_AGAIN: Duration = Duration::from_secs(1);

/// How long a dead letter waits for the database sessions of lost
/// connections to be ended, so the rows it reads are final.
const SESSIONS_ENDED_WITHIN: Duration = Duration::from_secs(2);

/// Waits until a component that publishes to a broker serves or is on
/// trial: a lab without one never connects to either broker. False once
/// cancelled.
pub async fn until_wanted(lab: &Lab, cancel: &CancellationToken) -> bool {
    loop {
        let publishes = |strategy: &Arc<Strategy>| strategy.world.publishes_to_broker();
        let registry = &lab.registry;
        // One on trial too: its canary waits for its confirmations.
        let wanted = registry.strategies().values().any(publishes)
            || registry.trials.all().values().any(publishes);
        if wanted {
            return true;
        }
        if !pause_unless_cancelled(cancel, LOOK_AGAIN).await {
            return false;
        }
    }
}

/// Runs `consume` until cancelled, connecting again a second after it
/// fails; the first failure of a run of them is logged as a warning.
pub async fn keep_consuming<F>(
    lab: &Lab,
    cancel: &CancellationToken,
    broker: &str,
    mut consume: impl FnMut() -> F,
) where
    F: Future<Output = Result<(), String>>,
{
    let mut failing = false;
    while until_wanted(lab, cancel).await {
        match consume().await {
            Ok(()) if cancel.is_cancelled() => return,
            Ok(()) => failing = false,
            Err(err) if !failing => {
                failing = true;
                tracing::warn!(broker, error = %err, "broker consumer stopped; connecting again");
            }
            Err(err) => tracing::debug!(broker, error = %err, "broker consumer still failing"),
        }
        if !pause_unless_cancelled(cancel, LOOK_AGAIN).await {
            return;
        }
    }
}

/// The fields of a message `body` this lab published; `None` for another
/// lab's, or a body none of the labs wrote, which is counted (`foreign`)
/// and never handed to a component here: confirmed against this lab's
/// database, another lab's request could be issued in this one.
pub fn of_this_lab(lab: &Lab, broker: &str, body: &[u8]) -> Option<Vec<(String, String)>> {
    let decoded = message::decode(body).filter(|fields| message::is_of_lab(fields, &lab.lab_id));
    if decoded.is_none() {
        tracing::warn!(
            broker,
            "a message of another lab (or of none) in this lab's queue; dropped unread"
        );
        let metrics = lab.runtime.metrics();
        let foreign = Event::Foreign.label();
        metrics
            .broker_messages
            .with_label_values(&[broker, foreign])
            .inc();
    }
    decoded
}

/// The message as its component sees it, with that component: the broker
/// issuer its `method` names. `None` (logged) when none is loaded here.
pub fn owned(
    lab: &Lab,
    id: String,
    message: Vec<(String, String)>,
    deliveries: u32,
) -> Option<(StreamEntry, Arc<Strategy>)> {
    let entry = StreamEntry {
        id,
        fields: message,
        deliveries,
    };
    let field = |name: &str| {
        let found = entry.fields.iter().find(|(key, _)| key == name);
        found.map(|(_, value)| value.as_str())
    };
    // A canary's scratch coupon goes to the component on trial there.
    let coupon = field(fields::COUPON_ID).and_then(|id| id.parse().ok());
    let owner = field(fields::METHOD).and_then(|method| {
        lab.registry
            .owner(coupon.unwrap_or(0), method)
            .filter(|strategy| strategy.world.publishes_to_broker())
    });
    match owner {
        Some(strategy) => Some((entry, strategy)),
        None => {
            tracing::warn!(id = %entry.id, "no broker-issuer component here for this message");
            None
        }
    }
}

/// Hands one message to its component and records what it became: ack
/// once recorded (a crash in between redelivers it, and the first outcome
/// recorded stays), retry when the component says so, its call failed or
/// the outcome could not be recorded — a broker forgets an acked message,
/// and its 202 would stay pending for good.
pub async fn confirm(lab: &Lab, strategy: &Arc<Strategy>, entry: &StreamEntry) -> Disposition {
    let handled = until_answered(1, || lab.runtime.handle_entry(strategy, entry)).await;
    match handled.result {
        Ok(answer) if answer.disposition == Disposition::Ack => {
            let confirmation = &answer.confirmation;
            if issuing::confirmed(lab, strategy, confirmation, Some(handled.trace)).await {
                Disposition::Ack
            } else {
                Disposition::Retry
            }
        }
        Ok(answer) => answer.disposition,
        Err(err) => {
            tracing::error!(id = %entry.id, method = %strategy.method, error = %err, "broker message failed; redelivered");
            Disposition::Retry
        }
    }
}

/// Lets the component of a message delivered too often undo its
/// reservation, once the sessions of lost connections are ended. Answers
/// what the dead letter became once its outcome is recorded (so it may be
/// acked): dead-lettered when its reservation was given back, acked when
/// one of its deliveries had committed its row (its outcome could not be
/// recorded then: Redis was away); `None` when it is to be tried again.
pub async fn give_back(lab: &Lab, strategy: &Arc<Strategy>, entry: &StreamEntry) -> Option<Event> {
    if !lab.runtime.lost_sessions_ended(SESSIONS_ENDED_WITHIN).await {
        tracing::warn!(id = %entry.id, "a lost database session is not ended yet; the dead letter waits");
        return None;
    }
    let answered = until_answered(1, || lab.runtime.dead_letter(strategy, entry)).await;
    match answered.result {
        Ok(confirmation) => {
            let issued = Outcome::from(confirmation.outcome) == Outcome::Issued;
            let recorded =
                issuing::confirmed(lab, strategy, &confirmation, Some(answered.trace)).await;
            match (recorded, issued) {
                (false, _) => None,
                (true, true) => Some(Event::Acked),
                (true, false) => {
                    tracing::warn!(id = %entry.id, deliveries = entry.deliveries, "broker message dead-lettered");
                    Some(Event::DeadLettered)
                }
            }
        }
        Err(err) => {
            tracing::error!(id = %entry.id, error = %err, "dead-letter compensation failed; tried again");
            None
        }
    }
}

/// What became of one delivery of a broker's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Acked,
    Redelivered,
    DeadLettered,
    /// Another lab's message, dropped unread ([`of_this_lab`]).
    Foreign,
}

impl Event {
    /// Its `event` label in `/metrics`.
    fn label(self) -> &'static str {
        match self {
            Event::Acked => "acked",
            Event::Redelivered => "redelivered",
            Event::DeadLettered => "dead_lettered",
            Event::Foreign => "foreign",
        }
    }

    /// Its name in the coupon's result; `None` for an ack, which the
    /// result counts as a confirmation already.
    fn result_name(self) -> Option<&'static str> {
        match self {
            Event::Acked | Event::Foreign => None,
            Event::Redelivered => Some("redelivered"),
            Event::DeadLettered => Some("deadLettered"),
        }
    }
}

/// Counts one delivery's `event` for `broker` in `/metrics` and, when the
/// message names its coupon, in that coupon's result.
pub async fn count(lab: &Lab, broker: &str, event: Event, entry: Option<&StreamEntry>) {
    let coupon = entry.and_then(|entry| {
        let found = entry
            .fields
            .iter()
            .find(|(key, _)| key == fields::COUPON_ID);
        found.and_then(|(_, id)| id.parse::<u64>().ok())
    });
    // A canary's messages reach no figure of the lab's.
    if coupon.is_some_and(|coupon| lab.registry.trials.on(coupon).is_some()) {
        return;
    }
    let metrics = lab.runtime.metrics();
    metrics
        .broker_messages
        .with_label_values(&[broker, event.label()])
        .inc();
    let counted = coupon.zip(event.result_name());
    // Any delivery also brings in the counts Redis could not take before.
    if counted.is_none() && lab.broker_events.waiting() == 0 {
        return;
    }
    if let Err(err) = lab.broker_events.record(lab.redis(), counted).await {
        let waiting = lab.broker_events.waiting();
        tracing::warn!(waiting, error = %err, "could not count broker events in Redis; counted with a later delivery");
    }
}

/// The pause before a message whose confirm must be tried again goes back:
/// 100 ms for each delivery so far, at most a second.
pub fn retry_pause(deliveries: u32) -> Duration {
    Duration::from_millis(100 * u64::from(deliveries.clamp(1, 10)))
}
