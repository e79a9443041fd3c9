//! RabbitMQ through lapin: the lab's topology, and the publisher the
//! `broker` capability sends through.
//!
//! The queue is a durable quorum queue (replicated by Raft, the type
//! RabbitMQ recommends for data that must not be lost) with a delivery
//! limit: a message redelivered past it goes, at least once, to a fanout
//! exchange that keeps it in one queue for people and in another for the
//! host, which hands it back to its component to undo its reservation.

use std::time::Duration;

use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{
    BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, ExchangeKind,
};
use tokio::sync::Mutex;

use super::message::Names;
use super::{Published, Topology};

/// The AMQP delivery mode of a message written to disk.
const PERSISTENT: u8 = 2;

/// Opens a connection to `url`, within `within`.
pub async fn connect(url: &str, within: Duration) -> Result<Connection, String> {
    let connecting = Connection::connect(url, ConnectionProperties::default());
    match tokio::time::timeout(within, connecting).await {
        Ok(Ok(connection)) => Ok(connection),
        Ok(Err(err)) => Err(format!("RabbitMQ at {} refused: {err}", redacted(url))),
        Err(_) => Err(format!(
            "RabbitMQ at {} did not answer within {within:?}",
            redacted(url)
        )),
    }
}

/// The URL without its password, for messages.
fn redacted(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        _ => url.to_string(),
    }
}

/// Declares the lab's queues and exchange on `channel` (each declaration
/// is idempotent while the arguments agree, which every process of the lab
/// derives the same way).
pub async fn declare(channel: &Channel, topology: &Topology) -> lapin::Result<()> {
    let Names {
        queue,
        dead_exchange,
        dead_queue,
        dead_to_compensate,
        ..
    } = &topology.names;
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    channel
        .exchange_declare(
            dead_exchange.as_str().into(),
            ExchangeKind::Fanout,
            ExchangeDeclareOptions {
                durable: true,
                ..ExchangeDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await?;
    for dead in [dead_queue, dead_to_compensate] {
        channel
            .queue_declare(dead.as_str().into(), durable, quorum())
            .await?;
        channel
            .queue_bind(
                dead.as_str().into(),
                dead_exchange.as_str().into(),
                "".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await?;
    }
    let mut arguments = quorum();
    let limit = i64::from(topology.max_deliveries);
    arguments.insert("x-delivery-limit".into(), AMQPValue::LongLongInt(limit));
    arguments.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString(dead_exchange.as_str().into()),
    );
    // At least once: the default, at most once, drops a dead letter the
    // exchange's queues did not confirm.
    arguments.insert(
        "x-dead-letter-strategy".into(),
        AMQPValue::LongString("at-least-once".into()),
    );
    arguments.insert(
        "x-overflow".into(),
        AMQPValue::LongString("reject-publish".into()),
    );
    channel
        .queue_declare(queue.as_str().into(), durable, arguments)
        .await?;
    Ok(())
}

fn quorum() -> FieldTable {
    let mut arguments = FieldTable::default();
    arguments.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("quorum".into()),
    );
    arguments
}

/// One connection and confirm-mode channel, opened on first use and again
/// after it broke; publishes share it.
pub struct Publisher {
    url: String,
    open: Mutex<Option<(Connection, Channel)>>,
}

impl Publisher {
    pub fn new(url: &str) -> Self {
        Self {
            url: url.to_string(),
            open: Mutex::new(None),
        }
    }

    /// The channel, opened (and the topology declared) if there is none
    /// or it broke.
    async fn channel(&self, topology: &Topology, within: Duration) -> Result<Channel, String> {
        let mut open = self.open.lock().await;
        if let Some((connection, channel)) = &*open
            && connection.status().connected()
            && channel.status().connected()
        {
            return Ok(channel.clone());
        }
        *open = None;
        let connection = connect(&self.url, within).await?;
        let setup = async {
            let channel = connection.create_channel().await?;
            channel
                .confirm_select(ConfirmSelectOptions::default())
                .await?;
            declare(&channel, topology).await?;
            lapin::Result::Ok(channel)
        };
        let channel = match tokio::time::timeout(within, setup).await {
            Ok(Ok(channel)) => channel,
            Ok(Err(err)) => return Err(format!("RabbitMQ refused the lab's queue: {err}")),
            Err(_) => return Err(format!("RabbitMQ did not set up within {within:?}")),
        };
        *open = Some((connection, channel.clone()));
        Ok(channel)
    }

    /// Publishes `body` as `id` to the lab's queue, persistent and
    /// mandatory, and waits `within` at most for the broker's confirm.
    pub async fn publish(
        &self,
        topology: &Topology,
        id: &str,
        body: &[u8],
        within: Duration,
    ) -> Published {
        let channel = match self.channel(topology, within).await {
            Ok(channel) => channel,
            Err(err) => return Published::Refused(err),
        };
        let properties = BasicProperties::default()
            .with_message_id(ShortString::from(id))
            .with_content_type("application/json".into())
            .with_delivery_mode(PERSISTENT);
        let options = BasicPublishOptions {
            mandatory: true,
            ..BasicPublishOptions::default()
        };
        let queue = topology.names.queue.as_str();
        // lapin refuses before sending on a channel that is not open.
        let confirm = match channel
            .basic_publish("".into(), queue.into(), options, body, properties)
            .await
        {
            Ok(confirm) => confirm,
            Err(err) => return Published::Refused(format!("RabbitMQ: {err}")),
        };
        match tokio::time::timeout(within, confirm).await {
            Ok(Ok(Confirmation::Ack(None))) => Published::Confirmed,
            Ok(Ok(Confirmation::Ack(Some(returned)))) => Published::Refused(format!(
                "RabbitMQ returned it unroutable: {} {}",
                returned.reply_code, returned.reply_text
            )),
            Ok(Ok(Confirmation::Nack(_))) => {
                Published::Refused("RabbitMQ refused it (a nack: the queue is full or down)".into())
            }
            Ok(Ok(Confirmation::NotRequested)) => {
                Published::Unconfirmed("the channel is not in confirm mode".into())
            }
            Ok(Err(err)) => Published::Unconfirmed(format!("RabbitMQ: {err}")),
            Err(_) => Published::Unconfirmed(format!("no confirm from RabbitMQ within {within:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_password_never_reaches_a_message() {
        let url = "amqp://guest:secret@127.0.0.1:5672/%2f";
        assert!(!super::redacted(url).contains("secret"));
        assert_eq!(super::redacted("amqp://127.0.0.1"), "amqp://127.0.0.1");
    }
}
