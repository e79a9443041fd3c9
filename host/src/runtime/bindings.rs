//! The host side of the `couponlab:strategy` WIT package, generated once.
//!
//! Every import is async (host calls await pools without blocking a thread)
//! and trappable (a broken resource handle traps the guest instead of being
//! a WIT-level error it could mistake for a Redis or SQL failure).

wasmtime::component::bindgen!({
    world: "issuer",
    path: "../wit",
    imports: { default: async | trappable },
    exports: { default: async },
    with: {
        "couponlab:strategy/redis.connection": crate::runtime::redis::RedisConnection,
        "couponlab:strategy/sql.transaction": crate::runtime::sql::SqlTransaction,
    },
});

pub use self::couponlab::strategy::{clock, log, redis, sql, types};
