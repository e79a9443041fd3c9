//! Named locks of the serving process (IN_PROCESS_LOCK's): they exclude the
//! calls of one host only, and the host releases what a call still holds
//! when it ends.

use crate::bindings::couponlab::strategy::process_lock as wit;

/// Takes the lock `name` (under `coupon:lock:`), waiting at most
/// `timeout_ms`: false when it was not free in time.
pub fn acquire(name: &str, timeout_ms: u32) -> Result<bool, String> {
    wit::acquire(name, timeout_ms)
}

/// Releases the lock `name`; false when this call did not hold it.
pub fn release(name: &str) -> bool {
    wit::release(name)
}
