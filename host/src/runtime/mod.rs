//! The WebAssembly side of the host.
//!
//! One engine (pooling allocator, epoch interruption) and one linker serve
//! every component ([`engine`]). A component is compiled and checked once,
//! when it is loaded, and its [`World`] found; each call then gets a fresh
//! store instantiated from the component's `InstancePre`, with a wall-clock
//! deadline and a memory limit, so a looping or greedy component fails its
//! own call and nothing else ([`call`]).
//!
//! Capabilities, one module each: [`redis`], [`sql`], [`jobs`], [`permits`],
//! [`process_lock`], [`broker`], `clock`, `log`; [`store`] is the state a call's imports work on.
//! [`registry`] maps method names to loaded components; [`watcher`] reloads
//! them when the strategy directory changes.

pub mod bindings;
pub mod broker;
mod call;
#[cfg(test)]
mod call_benchmark;
pub mod canary_report;
pub mod capabilities;
mod clock;
mod ended;
mod engine;
mod exports;
pub mod jobs;
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

pub use self::capabilities::{Admin, Capabilities, CapabilityArgs};
pub use self::ended::{CallError, Ended, Traced};
pub use self::engine::{Limits, Runtime};
pub use self::loaded::{Quarantine, Strategy};
pub use self::registry::Registry;
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
