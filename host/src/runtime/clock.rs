//! The `clock` capability: wall time and a sleep that yields the thread.

use std::time::Duration;

use super::bindings::clock;
use super::store::HostState;

impl clock::Host for HostState {
    #[tracing::instrument(name = "clock.now_millis", level = "debug", skip_all, fields(method = %self.method))]
    async fn now_millis(&mut self) -> wasmtime::Result<u64> {
        Ok(chrono::Utc::now().timestamp_millis().max(0) as u64)
    }

    /// Sleeps at most until the request's deadline: a strategy cannot use
    /// sleep to outlive its budget.
    #[tracing::instrument(name = "clock.sleep", level = "debug", skip_all, fields(method = %self.method))]
    async fn sleep(&mut self, millis: u32) -> wasmtime::Result<()> {
        let wanted = Duration::from_millis(u64::from(millis));
        let left = self
            .deadline
            .saturating_duration_since(tokio::time::Instant::now().into_std());
        tokio::time::sleep(wanted.min(left)).await;
        Ok(())
    }
}
