//! The representation of the WIT `renewal` resource, the type the
//! bindings' `with:` maps it to: its own file, taking nothing from the
//! bindings, so they take from no file that takes from them. What starts a
//! renewal is in [`super::watchdog`].

use tokio::task::AbortHandle;

/// A renewal running; dropping it stops it.
pub struct Renewal(pub(super) AbortHandle);

impl Drop for Renewal {
    fn drop(&mut self) {
        self.0.abort();
    }
}
