//! Waiting for a message on a `coupon:*` channel (REDIS_PUBSUB_LOCK's
//! waiters hear the unlock: each message wakes one waiter of the server),
//! and keeping a lease alive while the call works (its watchdog). Both end
//! with the call at the latest.

use crate::bindings::couponlab::strategy::{redis_channels, redis_watchdog};
use crate::redis::RedisError;

/// A share of one channel's messages from the moment it was subscribed to.
pub struct Subscription(redis_channels::Subscription);

impl Subscription {
    pub fn subscribe(channel: &str) -> Result<Self, RedisError> {
        redis_channels::subscribe(channel).map(Subscription)
    }

    /// A message, waiting at most `timeout_ms`: `None` when none came for
    /// this subscription (each goes to one waiter of the server).
    pub fn next(&self, timeout_ms: u32) -> Result<Option<String>, RedisError> {
        self.0.next(timeout_ms)
    }
}

/// A script the host runs every `every_ms` while this lives (and the call
/// runs), until it answers 0 or nil.
pub struct Renewal {
    _renewing: redis_watchdog::Renewal,
}

impl Renewal {
    pub fn start(
        script: &str,
        keys: &[String],
        args: &[String],
        every_ms: u32,
    ) -> Result<Self, RedisError> {
        redis_watchdog::renew(script, keys, args, every_ms).map(|renewing| Renewal {
            _renewing: renewing,
        })
    }
}
