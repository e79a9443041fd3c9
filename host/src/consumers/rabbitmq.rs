//! The RabbitMQ consumers of REDIS_LUA_RABBITMQ: competing consumers on
//! the lab's quorum queue, in every process that runs them.
//!
//! - Each message goes to the component its `method` names; the host acks
//!   it (manual ack, after the commit) or, when the confirm must be tried
//!   again, nacks it back into the queue after a pause.
//! - The queue counts deliveries (`x-delivery-count`): past
//!   `COUPONLAB_STREAM_MAX_DELIVERIES` RabbitMQ itself dead-letters the
//!   message, at least once, into the dead-letter exchange. Of its two
//!   queues one keeps the dead letters; from the other the host hands each
//!   back to its component, which undoes the reservation, then acks it.

use futures::StreamExt;
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions};
use lapin::types::{AMQPValue, FieldTable};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::broker::{
    Event, IN_FLIGHT, confirm, count, give_back, keep_consuming, of_this_lab, owned, retry_pause,
};
use crate::lab::Lab;
use crate::runtime::bindings::types::Disposition;
use crate::runtime::broker::amqp;

/// The broker's name in logs and metrics.
const BROKER: &str = "rabbitmq";

/// What one consumer of the lab's queues does with its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Confirms the requests of the lab's queue.
    Confirm,
    /// Gives back the reservations of its dead letters.
    GiveBack,
}

pub fn spawn(lab: &Lab, cancel: CancellationToken) -> Vec<JoinHandle<()>> {
    [Role::Confirm, Role::GiveBack]
        .into_iter()
        .map(|role| {
            let (lab, cancel) = (lab.clone(), cancel.clone());
            tokio::spawn(async move {
                keep_consuming(&lab, &cancel, BROKER, || consume(&lab, &cancel, role)).await
            })
        })
        .collect()
}

/// Consumes the role's queue until cancelled (then finishes what it holds)
/// or until the link breaks.
async fn consume(lab: &Lab, cancel: &CancellationToken, role: Role) -> Result<(), String> {
    let topology = lab.runtime.broker_topology();
    let url = &lab.config.capabilities.broker.rabbitmq_url;
    let connection = amqp::connect(url, CONNECT_WITHIN).await?;
    let broken = |err: lapin::Error| format!("RabbitMQ: {err}");
    let channel = connection.create_channel().await.map_err(broken)?;
    amqp::declare(&channel, topology).await.map_err(broken)?;
    let prefetch = u16::try_from(IN_FLIGHT).unwrap_or(u16::MAX);
    channel
        .basic_qos(prefetch, BasicQosOptions::default())
        .await
        .map_err(broken)?;
    let queue = match role {
        Role::Confirm => &topology.names.queue,
        Role::GiveBack => &topology.names.dead_to_compensate,
    };
    let tag = format!("{}-{role:?}", lab.identity);
    let consumer = channel
        .basic_consume(
            queue.as_str().into(),
            tag.as_str().into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(broken)?;
    let mut failure = None;
    consumer
        .take_until(cancel.cancelled())
        .for_each_concurrent(IN_FLIGHT, |delivery| {
            let handling = match delivery {
                Ok(delivery) => Some(handle(lab, role, delivery)),
                Err(err) => {
                    failure.get_or_insert_with(|| broken(err));
                    None
                }
            };
            async move {
                if let Some(handling) = handling
                    && let Err(err) = handling.await
                {
                    tracing::warn!(error = %err, "could not settle a RabbitMQ delivery");
                }
            }
        })
        .await;
    let _ = connection.close(200, "stopping".into()).await;
    match failure {
        Some(err) => Err(err),
        None if cancel.is_cancelled() => Ok(()),
        None => Err("RabbitMQ ended the consumer".into()),
    }
}

/// How long connecting may take.
const CONNECT_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Hands one delivery to its component and settles it with RabbitMQ.
async fn handle(lab: &Lab, role: Role, delivery: Delivery) -> lapin::Result<bool> {
    let id = delivery.properties.message_id().as_ref().map_or_else(
        || format!("tag {}", delivery.delivery_tag),
        |id| id.to_string(),
    );
    let deliveries = redeliveries(delivery.properties.headers()) + 1;
    let Some(fields) = of_this_lab(lab, BROKER, &delivery.data) else {
        return delivery.ack(BasicAckOptions::default()).await;
    };
    let Some((entry, strategy)) = owned(lab, id.clone(), fields, deliveries) else {
        return match role {
            // Its component is not loaded here: back into the queue, which
            // counts it towards its dead letter.
            Role::Confirm => {
                tokio::time::sleep(retry_pause(deliveries)).await;
                delivery.nack(requeue()).await
            }
            // It stays in the queue kept for people to look at.
            Role::GiveBack => delivery.ack(BasicAckOptions::default()).await,
        };
    };
    let done = match role {
        Role::Confirm => {
            let acked = confirm(lab, &strategy, &entry).await == Disposition::Ack;
            acked.then_some(Event::Acked)
        }
        Role::GiveBack => give_back(lab, &strategy, &entry).await,
    };
    if let Some(event) = done {
        count(lab, BROKER, event, Some(&entry)).await;
        delivery.ack(BasicAckOptions::default()).await
    } else {
        count(lab, BROKER, Event::Redelivered, Some(&entry)).await;
        tokio::time::sleep(retry_pause(deliveries)).await;
        delivery.nack(requeue()).await
    }
}

fn requeue() -> BasicNackOptions {
    BasicNackOptions {
        requeue: true,
        ..BasicNackOptions::default()
    }
}

/// The deliveries before this one, as a quorum queue counts them in the
/// `x-delivery-count` header (absent on the first).
fn redeliveries(headers: &Option<FieldTable>) -> u32 {
    let Some(value) = headers
        .as_ref()
        .and_then(|h| h.inner().get("x-delivery-count"))
    else {
        return 0;
    };
    let count = match value {
        AMQPValue::LongLongInt(n) => *n,
        AMQPValue::LongInt(n) => i64::from(*n),
        AMQPValue::LongUInt(n) => i64::from(*n),
        AMQPValue::ShortInt(n) => i64::from(*n),
        AMQPValue::ShortUInt(n) => i64::from(*n),
        _ => 0,
    };
    u32::try_from(count.max(0)).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use lapin::types::{AMQPValue, FieldTable};

    #[test]
    fn the_delivery_count_is_read_in_any_integer_width() {
        assert_eq!(super::redeliveries(&None), 0);
        for value in [
            AMQPValue::LongLongInt(2),
            AMQPValue::LongInt(2),
            AMQPValue::ShortUInt(2),
        ] {
            let mut headers = FieldTable::default();
            headers.insert("x-delivery-count".into(), value);
            assert_eq!(super::redeliveries(&Some(headers)), 2);
        }
    }
}
