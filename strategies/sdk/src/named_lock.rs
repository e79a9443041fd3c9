//! MySQL's named locks (MYSQL_NAMED_LOCK's), on a session the host holds
//! for the call from its first `acquire` to its end, when it releases what
//! the call still holds.

use crate::bindings::couponlab::strategy::named_lock as wit;
use crate::sql::SqlError;

/// `GET_LOCK(name, timeout)` for a name under `coupon:lock:`: false when
/// the lock was not free within `timeout_ms`.
pub fn acquire(name: &str, timeout_ms: u32) -> Result<bool, SqlError> {
    wit::acquire(name, timeout_ms)
}

/// `RELEASE_LOCK(name)`: false when this call did not hold it.
pub fn release(name: &str) -> Result<bool, SqlError> {
    wit::release(name)
}
