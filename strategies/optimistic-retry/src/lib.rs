//! OPTIMISTIC_RETRY (stage 2): OPTIMISTIC, and on a version conflict try
//! again from the read, at most 10 times, pausing between attempts for a
//! jittered backoff whose ceiling starts at 10 ms and doubles up to 500 ms
//! (at most 2.6 s of pauses in all). See `couponlab_sdk::optimistic`.
//!
//! Why 10: a conflict means another request issued a coupon between this
//! one's read and its update, so a request that gives up has watched at
//! least 11 coupons go to others during its own attempts; and each retry
//! costs a whole transaction, so the bound caps one request's database work
//! at 11 transactions. It is also the bound the seed gives REDIS_WATCH, the
//! Redis form of the same idea.
//!
//! Why the pauses grow that long: retries multiply the load exactly when the
//! coupon row is most contended. With pauses of a few milliseconds a burst
//! of conflicts comes straight back, fills the connection pool, and every
//! attempt then races every other one: the method stops issuing and answers
//! 503 with stock left. Pauses that grow to half a second let the crowd that
//! won drain first. docs/learning/02-locks.md has the measurements.

use couponlab_sdk::optimistic::{self, RetryPolicy};

const POLICY: RetryPolicy = RetryPolicy {
    max_retries: 10,
    first_backoff_ms: 10,
    max_backoff_ms: 500,
};

couponlab_sdk::strategy! {
    struct OptimisticRetry { method: "OPTIMISTIC_RETRY", claims: [Total, Member, Acked], summary: "version-checked update, retried on conflict at most 10 times with jittered backoff" }
    fn issue(request) { optimistic::issue_with_retries(&request, &POLICY) }
}
