//! The JetStream consumers of REDIS_LUA_JETSTREAM: one durable pull
//! consumer on the lab's stream, shared by every process that runs them
//! (each pulls its own messages from it, as competing consumers).
//!
//! - Each message goes to the component its `method` names; the host acks
//!   it after the commit with a double ack (`AckSync`: the server answers
//!   that it recorded the ack), or, when the confirm must be tried again,
//!   naks it with a delay.
//! - The consumer delivers a message `COUPONLAB_STREAM_MAX_DELIVERIES`
//!   times at most, then publishes an advisory. On it the host copies the
//!   message to the dead-letter stream, hands it back to its component,
//!   which undoes the reservation, and deletes it from the work queue. The
//!   advisory is a plain NATS message: one sent while no process of the
//!   lab listened is not sent again, and its message stays in the stream.

use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, PullConsumer, pull};
use async_nats::jetstream::{self, AckKind, Context};
use futures::StreamExt;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::broker::{
    Event, IN_FLIGHT, confirm, count, give_back, keep_consuming, of_this_lab, owned, retry_pause,
};
use super::pause_unless_cancelled;
use crate::lab::Lab;
use crate::runtime::bindings::types::Disposition;
use crate::runtime::broker::{Topology, jetstream as js};

/// The broker's name in logs and metrics.
const BROKER: &str = "jetstream";

/// How long connecting may take.
const CONNECT_WITHIN: Duration = Duration::from_secs(5);

pub fn spawn(lab: &Lab, cancel: CancellationToken) -> Vec<JoinHandle<()>> {
    let confirming = {
        let (lab, cancel) = (lab.clone(), cancel.clone());
        tokio::spawn(async move {
            keep_consuming(&lab, &cancel, BROKER, || confirm_all(&lab, &cancel)).await
        })
    };
    let giving_back = {
        let (lab, cancel) = (lab.clone(), cancel.clone());
        tokio::spawn(async move {
            keep_consuming(&lab, &cancel, BROKER, || give_back_dead(&lab, &cancel)).await
        })
    };
    vec![confirming, giving_back]
}

/// Connects, and makes sure the lab's streams are there.
async fn open(lab: &Lab) -> Result<(async_nats::Client, Context, &Topology), String> {
    let topology = lab.runtime.broker_topology();
    let client = js::connect(&lab.config.capabilities.broker.nats_url, CONNECT_WITHIN).await?;
    let context = jetstream::new(client.clone());
    js::declare(&context, topology).await?;
    Ok((client, context, topology))
}

/// Pulls the lab's messages and hands each to its component, until
/// cancelled (then finishes what it holds) or until the link breaks.
async fn confirm_all(lab: &Lab, cancel: &CancellationToken) -> Result<(), String> {
    let (_client, context, topology) = open(lab).await?;
    let names = &topology.names;
    let stream = context
        .get_stream(&names.stream)
        .await
        .map_err(|err| format!("JetStream: {err}"))?;
    let config = pull::Config {
        durable_name: Some(names.durable.clone()),
        ack_policy: AckPolicy::Explicit,
        ack_wait: Duration::from_millis(lab.config.capabilities.broker.jetstream_ack_wait_ms),
        max_deliver: i64::from(topology.max_deliveries),
        max_ack_pending: 10_000,
        filter_subject: names.subject.clone(),
        ..pull::Config::default()
    };
    // Created, or updated to this configuration: a lab started with
    // another ack wait changes its consumer's.
    let consumer: PullConsumer = stream
        .create_consumer(config)
        .await
        .map_err(|err| format!("JetStream: {err}"))?;
    let messages = consumer
        .messages()
        .await
        .map_err(|err| format!("JetStream: {err}"))?;
    let mut failure = None;
    messages
        .take_until(cancel.cancelled())
        .for_each_concurrent(IN_FLIGHT, |message| {
            let handling = match message {
                Ok(message) => Some(handle(lab, message)),
                Err(err) => {
                    failure.get_or_insert_with(|| format!("JetStream: {err}"));
                    None
                }
            };
            async move {
                if let Some(handling) = handling
                    && let Err(err) = handling.await
                {
                    tracing::warn!(error = %err, "could not settle a JetStream message");
                }
            }
        })
        .await;
    match failure {
        Some(err) => Err(err),
        None if cancel.is_cancelled() => Ok(()),
        None => Err("JetStream ended the consumer".into()),
    }
}

/// Hands one message to its component and acks or naks it.
async fn handle(lab: &Lab, message: jetstream::Message) -> Result<(), async_nats::Error> {
    let info = message.info()?;
    let deliveries = u32::try_from(info.delivered.max(1)).unwrap_or(u32::MAX);
    let id = message_id(message.headers.as_ref())
        .unwrap_or_else(|| format!("sequence {}", info.stream_sequence));
    let Some(fields) = of_this_lab(lab, BROKER, &message.payload) else {
        return message.double_ack().await;
    };
    let owner = owned(lab, id, fields, deliveries);
    let done = match &owner {
        Some((entry, strategy)) => confirm(lab, strategy, entry).await == Disposition::Ack,
        None => false,
    };
    let entry = owner.as_ref().map(|(entry, _)| entry);
    if done {
        count(lab, BROKER, Event::Acked, entry).await;
        message.double_ack().await
    } else {
        count(lab, BROKER, Event::Redelivered, entry).await;
        let pause = retry_pause(deliveries);
        message.ack_with(AckKind::Nak(Some(pause))).await
    }
}

/// The `Nats-Msg-Id` the component gave the message.
fn message_id(headers: Option<&async_nats::HeaderMap>) -> Option<String> {
    let id = headers?.get(async_nats::header::NATS_MESSAGE_ID)?;
    Some(id.as_str().to_string())
}

/// One max-deliveries advisory, as far as it is read here.
#[derive(serde::Deserialize)]
struct MaxDeliveries {
    stream_seq: u64,
    deliveries: u32,
}

/// Listens for the consumer's max-deliveries advisories and dead-letters
/// each message they name.
async fn give_back_dead(lab: &Lab, cancel: &CancellationToken) -> Result<(), String> {
    let (client, context, topology) = open(lab).await?;
    let names = &topology.names;
    let subject = format!(
        "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{}.{}",
        names.stream, names.durable
    );
    let mut advisories = client
        .subscribe(subject)
        .await
        .map_err(|err| format!("NATS: {err}"))?;
    let stream = context
        .get_stream(&names.stream)
        .await
        .map_err(|err| format!("JetStream: {err}"))?;
    loop {
        let advisory = tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            advisory = advisories.next() => advisory.ok_or("NATS ended the subscription")?,
        };
        let Ok(dead) = serde_json::from_slice::<MaxDeliveries>(&advisory.payload) else {
            continue;
        };
        let Ok(stored) = stream.get_raw_message(dead.stream_seq).await else {
            // Acked or dead-lettered by another process meanwhile.
            continue;
        };
        let id = message_id(Some(&stored.headers))
            .unwrap_or_else(|| format!("sequence {}", dead.stream_seq));
        let Some(fields) = of_this_lab(lab, BROKER, &stored.payload) else {
            continue;
        };
        let copied = context
            .publish(names.dead_subject.clone(), stored.payload.clone())
            .await
            .map_err(|err| format!("JetStream: {err}"))?
            .await;
        if let Err(err) = copied {
            tracing::warn!(id, error = %err, "could not copy a dead letter; it stays in the stream");
            continue;
        }
        let Some((entry, strategy)) = owned(lab, id, fields, dead.deliveries) else {
            continue;
        };
        // No second advisory comes: tried until it answers.
        let event = loop {
            if let Some(event) = give_back(lab, &strategy, &entry).await {
                break event;
            }
            if !pause_unless_cancelled(cancel, Duration::from_secs(1)).await {
                return Ok(());
            }
        };
        count(lab, BROKER, event, Some(&entry)).await;
        let _ = stream.delete_message(dead.stream_seq).await;
    }
}
