//! The host side of the `couponlab:strategy` WIT package, generated once
//! from the `lab-host` world: every import the host provides and every
//! export it can call. Components target narrower worlds; the host finds
//! their exports one interface at a time and calls them with these types
//! (see `exports` and `world::World`).
//!
//! Every import is async (host calls await pools without blocking a thread)
//! and trappable (a broken resource handle traps the guest instead of being
//! a WIT-level error it could mistake for a Redis or SQL failure).

wasmtime::component::bindgen!({
    world: "lab-host",
    path: "../wit",
    imports: { default: async | trappable },
    exports: { default: async },
    // Replies and rows are compared in the host's unit tests.
    additional_derives: [PartialEq],
    with: {
        "couponlab:strategy/redis.connection": crate::runtime::redis::connection::RedisConnection,
        "couponlab:strategy/sql.transaction": crate::runtime::sql::resource::SqlTransaction,
        "couponlab:strategy/redis-channels.subscription": crate::runtime::redis::subscription::Subscription,
        "couponlab:strategy/redis-watchdog.renewal": crate::runtime::redis::renewal::Renewal,
    },
});

pub use self::couponlab::strategy::{
    broker, clock, jobs, log, named_lock, permits, process_lock, redis, redis_channels,
    redis_watchdog, sql, types,
};
