//! Time from the host.

use crate::bindings::couponlab::strategy::clock as wit;

/// Milliseconds since the Unix epoch.
pub fn now_millis() -> u64 {
    wit::now_millis()
}

/// Suspends this request (never past its deadline) without holding a host thread.
pub fn sleep(millis: u32) {
    wit::sleep(millis)
}
