//! The `broker` capability: a component publishes one issue request to the
//! lab's own RabbitMQ queue or JetStream subject and learns whether the
//! broker confirmed it. The host names the queue and subject (from the
//! lab's id, [`message::Names`]) and sets the message's method to the
//! component's and its lab to this lab, so a component can publish nowhere
//! else, for no other method and to no other lab's consumers. The consumers a floor above hand each message back to the
//! component.
//!
//! Neither broker needs to run for the lab to serve: each is connected on
//! first use, and a publish to one that is down is refused at once.

pub mod amqp;
pub mod jetstream;
pub mod message;

use std::time::Duration;

use wasmtime::component::HasData;

use super::bindings::broker::{self as wit, Kind, PublishError};
use super::call_context::CallContext;
use super::trace::Read;

/// The `broker` capability's settings.
#[derive(Debug, Clone, clap::Args)]
pub struct BrokerArgs {
    /// RabbitMQ, for REDIS_LUA_RABBITMQ (`amqp://user:password@host:port/vhost`).
    #[arg(
        long,
        env = "RABBITMQ_URL",
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f"
    )]
    pub rabbitmq_url: String,

    /// NATS with JetStream, for REDIS_LUA_JETSTREAM.
    #[arg(long, env = "NATS_URL", default_value = "nats://127.0.0.1:4222")]
    pub nats_url: String,

    /// How long a publish waits for the broker's confirm (and a connection
    /// to open), at most; never past the call's deadline.
    #[arg(long, env = "COUPONLAB_BROKER_CONFIRM_MS", default_value_t = 2_000)]
    pub broker_confirm_ms: u64,

    /// How long a JetStream message delivered to a process may go unacked
    /// before it is delivered again: a process killed holding it delays
    /// its confirmation this long. As long as a Redis stream entry waits
    /// to be claimed (`COUPONLAB_STREAM_CLAIM_IDLE_MS`), and longer than a
    /// confirm takes.
    #[arg(long, env = "COUPONLAB_JETSTREAM_ACK_WAIT_MS", default_value_t = 5_000)]
    pub jetstream_ack_wait_ms: u64,
}

/// Where this lab's messages go, and how often one is delivered before it
/// is dead-lettered: the same for every process of the lab, which declare
/// the same queues and streams.
#[derive(Debug, Clone)]
pub struct Topology {
    /// The lab's id, which every message carries.
    pub lab_id: String,
    pub names: message::Names,
    pub max_deliveries: u32,
}

/// What became of a publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Published {
    Confirmed,
    /// The broker does not have it.
    Refused(String),
    /// Sent; its confirm was lost, so the broker may have it.
    Unconfirmed(String),
}

/// Both brokers' publishers and the lab's topology.
pub struct Brokers {
    pub args: BrokerArgs,
    pub topology: Topology,
    rabbitmq: amqp::Publisher,
    jetstream: jetstream::Publisher,
}

impl Brokers {
    pub fn new(args: &BrokerArgs, topology: Topology) -> Self {
        Self {
            rabbitmq: amqp::Publisher::new(&args.rabbitmq_url),
            jetstream: jetstream::Publisher::new(&args.nats_url),
            args: args.clone(),
            topology,
        }
    }

    fn confirm_within(&self) -> Duration {
        Duration::from_millis(self.args.broker_confirm_ms)
    }
}

/// A broker's name in traces and messages.
fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Rabbitmq => "rabbitmq",
        Kind::Jetstream => "jetstream",
    }
}

/// The `broker` capability as the linker knows it: its imports work on a
/// [`BrokerView`].
impl HasData for Brokers {
    type Data<'a> = BrokerView<'a>;
}

/// What the broker reaches of one call: both brokers, and the call's
/// method, deadline and trace.
pub struct BrokerView<'a> {
    pub brokers: &'a Brokers,
    pub call: &'a mut CallContext,
}

impl wit::Host for BrokerView<'_> {
    #[tracing::instrument(name = "broker.publish", level = "debug", skip_all, fields(method = %self.call.method, broker = kind_name(to)))]
    async fn publish(
        &mut self,
        to: Kind,
        id: String,
        fields: Vec<(String, String)>,
    ) -> wasmtime::Result<Result<(), PublishError>> {
        let brokers = self.brokers;
        let body = match message::encode(&self.call.method, &brokers.topology.lab_id, &fields) {
            Ok(body) => body,
            Err(why) => return Ok(Err(PublishError::Refused(why))),
        };
        if id.is_empty() || id.len() > 200 {
            let why = "a message id is 1 to 200 bytes".to_string();
            return Ok(Err(PublishError::Refused(why)));
        }
        let within = brokers.confirm_within().min(self.call.left());
        let topology = &brokers.topology;
        let target = match to {
            Kind::Rabbitmq => topology.names.queue.as_str(),
            Kind::Jetstream => topology.names.subject.as_str(),
        };
        let pending = self.call.trace.start("broker", "PUBLISH").target(target);
        let published = match to {
            Kind::Rabbitmq => brokers.rabbitmq.publish(topology, &id, &body, within).await,
            Kind::Jetstream => {
                brokers
                    .jetstream
                    .publish(topology, &id, &body, within)
                    .await
            }
        };
        let answer = match published {
            Published::Confirmed => Ok(()),
            Published::Refused(why) => Err(PublishError::Refused(why)),
            Published::Unconfirmed(why) => Err(PublishError::Unconfirmed(why)),
        };
        let traced = match &answer {
            Ok(()) => Ok(Read::default()),
            Err(PublishError::Refused(why)) => Err(format!("refused: {why}")),
            Err(PublishError::Unconfirmed(why)) => Err(format!("unconfirmed: {why}")),
        };
        self.call.trace.finish(pending, traced);
        Ok(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::call_context::tests::call_ending_in;

    /// Brokers nobody listens for: a publish that reached for one would
    /// come back refused for the connection, not for its message.
    fn brokers() -> Brokers {
        let args = BrokerArgs {
            rabbitmq_url: "amqp://guest:guest@127.0.0.1:1/%2f".into(),
            nats_url: "nats://127.0.0.1:1".into(),
            broker_confirm_ms: 100,
            jetstream_ack_wait_ms: 100,
        };
        let topology = Topology {
            lab_id: "lab".into(),
            names: message::Names::for_lab("db", "lab"),
            max_deliveries: 3,
        };
        Brokers::new(&args, topology)
    }

    #[tokio::test]
    async fn a_message_id_out_of_bounds_is_refused_before_any_broker_is_reached() {
        let brokers = brokers();
        let mut call = call_ending_in(Duration::from_secs(5));
        let mut view = BrokerView {
            brokers: &brokers,
            call: &mut call,
        };
        for id in [String::new(), "x".repeat(201)] {
            let published = wit::Host::publish(&mut view, Kind::Rabbitmq, id, Vec::new())
                .await
                .unwrap();
            assert!(
                matches!(&published, Err(PublishError::Refused(why)) if why.contains("1 to 200 bytes")),
                "{published:?}"
            );
        }
        assert!(view.call.trace.calls.is_empty(), "nothing was sent");
    }
}
