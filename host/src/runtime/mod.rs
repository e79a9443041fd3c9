//! The WebAssembly side of the host.
//!
//! One engine (pooling allocator, epoch interruption) and one linker serve
//! every component ([`engine`]). A component is compiled and checked once,
//! when it is loaded ([`load`]), and its [`World`] found; each call then
//! gets a fresh store instantiated from the component's `InstancePre`, with
//! a wall-clock deadline and a memory limit, so a looping or greedy
//! component fails its own call and nothing else ([`call`]).
//!
//! Capabilities, one module each: [`redis`], [`sql`], [`jobs`], [`permits`],
//! [`process_lock`], [`broker`], `clock`, `log`. Each owns its settings,
//! its shared state and what a call holds of it, and implements its imports
//! on a view of the call's [`store`], handed the call's [`call_context`]
//! rather than the loaded component; [`capabilities`] builds them all, and
//! what the roles above read of them is a method of the runtime ([`face`]).
//! [`registry`] maps method names to loaded components; [`watcher`] reloads
//! them when the strategy directory changes.

pub mod bindings;
pub mod broker;
mod call;
#[cfg(test)]
mod call_benchmark;
mod call_context;
pub mod canary_report;
pub mod capabilities;
pub mod claims;
mod clock;
mod ended;
mod engine;
mod exports;
mod face;
#[cfg(test)]
mod future_sizes;
pub mod jobs;
mod load;
mod loaded;
mod log;
pub mod permits;
pub mod process_lock;
pub mod redis;
pub mod registry;
pub mod sql;
mod store;
pub mod trace;
pub mod trials;
pub mod watcher;
mod world;
mod world_calls;

pub use self::call_context::on_node;
pub use self::capabilities::{Admin, CapabilityArgs};
pub use self::ended::{CallError, Ended, Traced};
pub use self::engine::{Limits, Runtime};
pub use self::loaded::{Quarantine, Strategy};
/// Every capability, as the server builds and holds them.
pub type Capabilities = capabilities::Capabilities<Strategy>;
/// A job queued by a component, for the workers that run it.
pub type Job = jobs::Job<Strategy>;
pub use self::registry::Registry;
pub use self::sql::cluster::Cluster as SqlCluster;
pub use self::sql::engine::Engine as SqlEngine;
pub use self::sql::statement::numbered_for_postgres;
pub use self::sql::user::Admin as SqlAdmin;
pub use self::world::World;

/// The ways a connection breaks once a request went out: whatever the server
/// did, its answer is lost. The Redis and SQL capabilities' tests check that
/// each reads every one of them so.
#[cfg(test)]
const BROKEN_CONNECTION: [std::io::ErrorKind; 6] = [
    std::io::ErrorKind::BrokenPipe,
    std::io::ErrorKind::ConnectionReset,
    std::io::ErrorKind::ConnectionAborted,
    std::io::ErrorKind::UnexpectedEof,
    std::io::ErrorKind::NotConnected,
    std::io::ErrorKind::TimedOut,
];
