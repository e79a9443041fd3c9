//! The pub/sub subscriber (stage 5): SUBSCRIBE `coupon:issue:requests` (on
//! a Redis database other than 0, the lab's own name of it: see
//! [`RedisTarget::requests_channel`](crate::redis_target::RedisTarget::requests_channel)) and
//! hand each message to the component of the pub/sub role (on a canary's
//! scratch coupon, the one on trial). It listens only while such a
//! component is loaded or on trial: a subscriber that could only drop
//! messages would count as a receiver and hide their loss. A message
//! published while no subscriber listens is gone — that is the lesson of the
//! stage, and the result shows those members as reserved in Redis only.

use std::sync::Arc;
use std::time::Duration;

use couponlab_contract::message;
use futures::StreamExt;
use tokio::sync::{Semaphore, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use super::{pause_unless_cancelled, until_answered};
use crate::issuing;
use crate::lab::Lab;
use crate::runtime::Strategy;

/// How often the subscriber looks for (or re-checks) a component to serve.
const HANDLER_CHECK: Duration = Duration::from_secs(1);

/// How long a starting server waits for its subscriber before it serves.
const SUBSCRIBER_WAIT: Duration = Duration::from_secs(3);

/// Whether the subscriber is subscribed, as its task tells it.
pub struct Subscribed(watch::Receiver<bool>);

impl Subscribed {
    /// Waits, at most a few seconds, until the subscriber listens when a
    /// component of the pub/sub role is loaded: a 202 answered before it
    /// listens publishes into nothing, and a server that serves a component
    /// from its first request must not open with that gap.
    pub async fn before_serving(&mut self, lab: &Lab) {
        if !listening(lab) {
            return;
        }
        let subscribed = self.0.wait_for(|subscribed| *subscribed);
        if tokio::time::timeout(SUBSCRIBER_WAIT, subscribed)
            .await
            .is_err()
        {
            tracing::warn!(
                "the pub/sub subscriber did not listen within {SUBSCRIBER_WAIT:?}; serving anyway"
            );
        }
    }
}

pub fn spawn(lab: &Lab, cancel: CancellationToken) -> (JoinHandle<()>, Subscribed) {
    let lab = lab.clone();
    let (subscribed, told) = watch::channel(false);
    let task = tokio::spawn(async move {
        loop {
            if listening(&lab) {
                let result = subscribe(&lab, &cancel, &subscribed).await;
                subscribed.send_replace(false);
                match result {
                    Ok(()) if cancel.is_cancelled() => return,
                    Ok(()) => tracing::info!("no pubsub-issuer component is loaded; unsubscribed"),
                    Err(err) => {
                        tracing::warn!(error = %err, "pub/sub subscriber lost its connection; resubscribing")
                    }
                }
            }
            if !pause_unless_cancelled(&cancel, HANDLER_CHECK).await {
                return;
            }
        }
    });
    (task, Subscribed(told))
}

/// Listens until cancelled or until no component handles the messages
/// (`Ok`), or until the connection fails (`Err`).
async fn subscribe(
    lab: &Lab,
    cancel: &CancellationToken,
    subscribed: &watch::Sender<bool>,
) -> anyhow::Result<()> {
    // On a cluster, one node: every node hands on every PUBLISH.
    let mut pubsub = lab
        .redis_target
        .subscriber()
        .await?
        .get_async_pubsub()
        .await?;
    let channel = lab.redis_target.requests_channel();
    pubsub.subscribe(&channel).await?;
    subscribed.send_replace(true);
    tracing::info!(%channel, "pub/sub subscriber listening");
    let mut messages = pubsub.on_message();
    // The seed hands messages to a bounded executor; so do we.
    let workers = Arc::new(Semaphore::new(
        lab.config.consumers.subscriber_workers.max(1),
    ));
    let mut in_flight = JoinSet::new();
    let mut check = tokio::time::interval(HANDLER_CHECK);
    let result = loop {
        tokio::select! {
            () = cancel.cancelled() => break Ok(()),
            _ = check.tick() => if !listening(lab) { break Ok(()) },
            message = messages.next() => {
                let Some(message) = message else { break Err(anyhow::anyhow!("the subscription closed")) };
                let payload: String = match message.get_payload() {
                    Ok(payload) => payload,
                    Err(err) => { tracing::warn!(error = %err, "unreadable pub/sub message"); continue; }
                };
                let worker = workers.clone().acquire_owned().await?;
                let lab = lab.clone();
                in_flight.spawn(async move {
                    handle(&lab, &payload).await;
                    drop(worker);
                });
            }
        }
    };
    // Messages in hand are finished, whether stopping or reconnecting.
    while in_flight.join_next().await.is_some() {}
    result
}

async fn handle(lab: &Lab, payload: &str) {
    // A canary's scratch coupon goes to the component on trial there.
    let on_trial = message::parse(payload)
        .and_then(|(coupon, _)| lab.registry.trials.on(coupon))
        .filter(|s| s.world.message_handler().is_some());
    let Some(strategy) = on_trial.or_else(|| handler(lab)) else {
        tracing::warn!(
            payload,
            "no component of the pubsub-issuer world is loaded; message dropped"
        );
        return;
    };
    let attempts = lab.config.consumers.max_deliveries;
    let handled = until_answered(attempts, || lab.runtime.handle_message(&strategy, payload)).await;
    match handled.result {
        Ok(Some(confirmation)) => {
            // Not recorded: warned about; Pub/Sub delivers a message once.
            issuing::confirmed(lab, &strategy, &confirmation, Some(handled.trace)).await;
        }
        Ok(None) => tracing::warn!(method = %strategy.method, payload, "message not understood"),
        // Failed every attempt: the member stays reserved and the request
        // pending in the result.
        Err(err) => {
            tracing::error!(method = %strategy.method, payload, error = %err, attempts, "message handler failed on every attempt")
        }
    }
}

/// The loaded component of the pub/sub role (the first by method name).
fn handler(lab: &Lab) -> Option<Arc<Strategy>> {
    lab.registry
        .strategies()
        .values()
        .find(|s| s.world.message_handler().is_some())
        .cloned()
}

/// Whether a component of the pub/sub role is loaded or on trial: then
/// the subscriber listens.
fn listening(lab: &Lab) -> bool {
    handler(lab).is_some()
        || lab
            .registry
            .trials
            .all()
            .values()
            .any(|s| s.world.message_handler().is_some())
}
