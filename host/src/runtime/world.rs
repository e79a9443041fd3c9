//! Which world of `wit/strategy.wit` a component implements, found once when
//! it is loaded, with where that world's exports are.
//!
//! Every world exports `strategy`; each but `issuer` adds one interface the
//! host calls besides `issue`. A component exporting more than one of them
//! is refused: its method would be served by one of two consumers, chosen by
//! nothing the author wrote.

use wasmtime::Store;
use wasmtime::component::{Instance, InstancePre};

use super::bindings::{
    drop_gate, job_runner, message_handler, strategy, stream_consumer, write_behind,
};
use super::store::HostState;

/// A world of `wit/strategy.wit`, carrying the indices of its own export.
pub enum World {
    /// Answers each issue request itself.
    Issuer,
    /// Confirms later on the host's job workers (REDIS_ASYNC).
    AsyncIssuer(job_runner::GuestIndices),
    /// Confirms as the pub/sub subscriber (REDIS_PUBSUB).
    PubsubIssuer(message_handler::GuestIndices),
    /// Confirms as the stream consumer (REDIS_STREAM, REDIS_STREAM_ATOMIC).
    StreamIssuer(stream_consumer::GuestIndices),
    /// Publishes to a broker, and confirms as the broker's consumer through
    /// the stream world's export (REDIS_LUA_RABBITMQ, REDIS_LUA_JETSTREAM).
    BrokerIssuer(stream_consumer::GuestIndices),
    /// Is loaded into the DB by the write-behind loader, and reconciles
    /// (REDIS_WRITE_BEHIND, REDIS_WRITE_BEHIND_NO_TX).
    WriteBehindIssuer(write_behind::GuestIndices),
    /// Holds permits across requests, cancels and seeds (the limited drop).
    GateIssuer(drop_gate::GuestIndices),
}

impl World {
    pub const ISSUER: &str = "issuer";
    pub const ASYNC_ISSUER: &str = "async-issuer";
    pub const PUBSUB_ISSUER: &str = "pubsub-issuer";
    pub const STREAM_ISSUER: &str = "stream-issuer";
    pub const BROKER_ISSUER: &str = "broker-issuer";
    pub const WRITE_BEHIND_ISSUER: &str = "write-behind-issuer";
    pub const GATE_ISSUER: &str = "gate-issuer";

    /// The WIT world's name.
    pub fn name(&self) -> &'static str {
        match self {
            World::Issuer => Self::ISSUER,
            World::AsyncIssuer(_) => Self::ASYNC_ISSUER,
            World::PubsubIssuer(_) => Self::PUBSUB_ISSUER,
            World::StreamIssuer(_) => Self::STREAM_ISSUER,
            World::BrokerIssuer(_) => Self::BROKER_ISSUER,
            World::WriteBehindIssuer(_) => Self::WRITE_BEHIND_ISSUER,
            World::GateIssuer(_) => Self::GATE_ISSUER,
        }
    }

    pub fn job_runner(&self) -> Option<&job_runner::GuestIndices> {
        match self {
            World::AsyncIssuer(indices) => Some(indices),
            _ => None,
        }
    }

    pub fn message_handler(&self) -> Option<&message_handler::GuestIndices> {
        match self {
            World::PubsubIssuer(indices) => Some(indices),
            _ => None,
        }
    }

    pub fn stream_consumer(&self) -> Option<&stream_consumer::GuestIndices> {
        match self {
            World::StreamIssuer(indices) | World::BrokerIssuer(indices) => Some(indices),
            _ => None,
        }
    }

    /// Whether it publishes to a broker, whose consumers then hand its
    /// messages back.
    pub fn publishes_to_broker(&self) -> bool {
        matches!(self, World::BrokerIssuer(_))
    }

    pub fn write_behind(&self) -> Option<&write_behind::GuestIndices> {
        match self {
            World::WriteBehindIssuer(indices) => Some(indices),
            _ => None,
        }
    }

    pub fn drop_gate(&self) -> Option<&drop_gate::GuestIndices> {
        match self {
            World::GateIssuer(indices) => Some(indices),
            _ => None,
        }
    }

    /// The world `pre`'s exports make, with the `strategy` export every
    /// world has.
    pub(super) fn find(
        pre: &InstancePre<HostState>,
    ) -> anyhow::Result<(strategy::GuestIndices, World)> {
        let strategy = strategy::GuestIndices::new(pre).map_err(|err| {
            anyhow::anyhow!("it does not export the couponlab:strategy/strategy interface ({err})")
        })?;
        let mut found = Vec::new();
        if let Ok(indices) = job_runner::GuestIndices::new(pre) {
            found.push(World::AsyncIssuer(indices));
        }
        if let Ok(indices) = message_handler::GuestIndices::new(pre) {
            found.push(World::PubsubIssuer(indices));
        }
        if let Ok(indices) = stream_consumer::GuestIndices::new(pre) {
            found.push(if imports_broker(pre) {
                World::BrokerIssuer(indices)
            } else {
                World::StreamIssuer(indices)
            });
        }
        if let Ok(indices) = write_behind::GuestIndices::new(pre) {
            found.push(World::WriteBehindIssuer(indices));
        }
        if let Ok(indices) = drop_gate::GuestIndices::new(pre) {
            found.push(World::GateIssuer(indices));
        }
        let world = match found.len() {
            0 => World::Issuer,
            1 => found.remove(0),
            _ => anyhow::bail!(
                "it exports the interfaces of {} worlds ({}); a component implements one",
                found.len(),
                found.iter().map(World::name).collect::<Vec<_>>().join(", ")
            ),
        };
        Ok((strategy, world))
    }

    /// Loads the world's own export, which checks its types (the `strategy`
    /// export is checked by calling `describe`).
    pub(super) fn check(
        &self,
        store: &mut Store<HostState>,
        instance: &Instance,
    ) -> anyhow::Result<()> {
        let loaded = match self {
            World::Issuer => Ok(()),
            World::AsyncIssuer(indices) => indices.load(&mut *store, instance).map(drop),
            World::PubsubIssuer(indices) => indices.load(&mut *store, instance).map(drop),
            World::StreamIssuer(indices) | World::BrokerIssuer(indices) => {
                indices.load(&mut *store, instance).map(drop)
            }
            World::WriteBehindIssuer(indices) => indices.load(&mut *store, instance).map(drop),
            World::GateIssuer(indices) => indices.load(&mut *store, instance).map(drop),
        };
        loaded.map_err(|err| {
            anyhow::anyhow!(
                "its exports do not have the {} world's types: {err}",
                self.name()
            )
        })
    }
}

/// Whether the component imports the `broker` interface.
fn imports_broker(pre: &InstancePre<HostState>) -> bool {
    let component = pre.component();
    component
        .component_type()
        .imports(component.engine())
        .any(|(name, _)| name.starts_with("couponlab:strategy/broker@"))
}
