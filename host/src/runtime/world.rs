//! Which world of `wit/strategy.wit` a component implements, found once when
//! it is loaded, with where that world's exports are.
//!
//! Every world exports `strategy`; each but `issuer` adds one interface the
//! host calls besides `issue`. A component exporting more than one of them
//! is refused: its method would be served by one of two consumers, chosen by
//! nothing the author wrote.

use wasmtime::Store;
use wasmtime::component::{Component, Instance};

use super::exports::{
    DropGateExport, JobRunnerExport, MessageHandlerExport, StrategyExport, StreamConsumerExport,
    WriteBehindExport,
};
use super::store::HostState;

/// A world of `wit/strategy.wit`, carrying the indices of its own export.
pub enum World {
    /// Answers each issue request itself.
    Issuer,
    /// Confirms later on the host's job workers (REDIS_ASYNC).
    AsyncIssuer(JobRunnerExport),
    /// Confirms as the pub/sub subscriber (REDIS_PUBSUB).
    PubsubIssuer(MessageHandlerExport),
    /// Confirms as the stream consumer (REDIS_STREAM, REDIS_STREAM_ATOMIC).
    StreamIssuer(StreamConsumerExport),
    /// Publishes to a broker, and confirms as the broker's consumer through
    /// the stream world's export (REDIS_LUA_RABBITMQ, REDIS_LUA_JETSTREAM).
    BrokerIssuer(StreamConsumerExport),
    /// Is loaded into the DB by the write-behind loader, and reconciles
    /// (REDIS_WRITE_BEHIND, REDIS_WRITE_BEHIND_NO_TX).
    WriteBehindIssuer(WriteBehindExport),
    /// Holds permits across requests, cancels and seeds (the limited drop).
    GateIssuer(DropGateExport),
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

    pub fn job_runner(&self) -> Option<&JobRunnerExport> {
        match self {
            World::AsyncIssuer(export) => Some(export),
            _ => None,
        }
    }

    pub fn message_handler(&self) -> Option<&MessageHandlerExport> {
        match self {
            World::PubsubIssuer(export) => Some(export),
            _ => None,
        }
    }

    pub fn stream_consumer(&self) -> Option<&StreamConsumerExport> {
        match self {
            World::StreamIssuer(export) | World::BrokerIssuer(export) => Some(export),
            _ => None,
        }
    }

    /// Whether it publishes to a broker, whose consumers then hand its
    /// messages back.
    pub fn publishes_to_broker(&self) -> bool {
        matches!(self, World::BrokerIssuer(_))
    }

    pub fn write_behind(&self) -> Option<&WriteBehindExport> {
        match self {
            World::WriteBehindIssuer(export) => Some(export),
            _ => None,
        }
    }

    pub fn drop_gate(&self) -> Option<&DropGateExport> {
        match self {
            World::GateIssuer(export) => Some(export),
            _ => None,
        }
    }

    /// The world `component`'s exports make, with the `strategy` export
    /// every world has.
    pub(super) fn find(component: &Component) -> anyhow::Result<(StrategyExport, World)> {
        let strategy = StrategyExport::find(component)?.ok_or_else(|| {
            anyhow::anyhow!("it does not export the couponlab:strategy/strategy interface")
        })?;
        let mut worlds = Vec::new();
        if let Some(export) = JobRunnerExport::find(component)? {
            worlds.push(World::AsyncIssuer(export));
        }
        if let Some(export) = MessageHandlerExport::find(component)? {
            worlds.push(World::PubsubIssuer(export));
        }
        if let Some(export) = StreamConsumerExport::find(component)? {
            worlds.push(if imports_broker(component) {
                World::BrokerIssuer(export)
            } else {
                World::StreamIssuer(export)
            });
        }
        if let Some(export) = WriteBehindExport::find(component)? {
            worlds.push(World::WriteBehindIssuer(export));
        }
        if let Some(export) = DropGateExport::find(component)? {
            worlds.push(World::GateIssuer(export));
        }
        let world = match worlds.len() {
            0 => World::Issuer,
            1 => worlds.remove(0),
            _ => anyhow::bail!(
                "it exports the interfaces of {} worlds ({}); a component implements one",
                worlds.len(),
                worlds
                    .iter()
                    .map(World::name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        Ok((strategy, world))
    }

    /// Type-checks the world's own export (the `strategy` export is
    /// checked beside it, before `describe` is called).
    pub(super) fn check(
        &self,
        store: &mut Store<HostState>,
        instance: &Instance,
    ) -> anyhow::Result<()> {
        let checked = match self {
            World::Issuer => Ok(()),
            World::AsyncIssuer(export) => export.check(store, instance),
            World::PubsubIssuer(export) => export.check(store, instance),
            World::StreamIssuer(export) | World::BrokerIssuer(export) => {
                export.check(store, instance)
            }
            World::WriteBehindIssuer(export) => export.check(store, instance),
            World::GateIssuer(export) => export.check(store, instance),
        };
        checked.map_err(|err| {
            anyhow::anyhow!(
                "its exports do not have the {} world's types: {err}",
                self.name()
            )
        })
    }
}

/// Whether the component imports the `broker` interface.
fn imports_broker(component: &Component) -> bool {
    component
        .component_type()
        .imports(component.engine())
        .any(|(name, _)| name.starts_with("couponlab:strategy/broker@"))
}
