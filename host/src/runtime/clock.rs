//! The `clock` capability: wall time and a sleep that yields the thread.
//! It has no settings and no state: the call's deadline is all it needs.

use std::time::Duration;

use wasmtime::component::HasData;

use super::bindings::clock;
use super::call_context::CallContext;

/// The `clock` capability as the linker knows it: its imports work on a
/// [`ClockView`].
pub struct Clock;

impl HasData for Clock {
    type Data<'a> = ClockView<'a>;
}

/// What the clock reaches of one call.
pub struct ClockView<'a> {
    pub call: &'a CallContext,
}

impl clock::Host for ClockView<'_> {
    #[tracing::instrument(name = "clock.now_millis", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn now_millis(&mut self) -> wasmtime::Result<u64> {
        Ok(chrono::Utc::now().timestamp_millis().max(0) as u64)
    }

    /// Sleeps at most until the request's deadline: a strategy cannot use
    /// sleep to outlive its budget.
    #[tracing::instrument(name = "clock.sleep", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn sleep(&mut self, millis: u32) -> wasmtime::Result<()> {
        let wanted = Duration::from_millis(u64::from(millis));
        tokio::time::sleep(wanted.min(self.call.left())).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::runtime::call_context::tests::call_ending_in;

    #[tokio::test]
    async fn a_sleep_ends_at_the_calls_deadline() {
        let call = call_ending_in(Duration::from_millis(50));
        let started = Instant::now();
        clock::Host::sleep(&mut ClockView { call: &call }, 60_000)
            .await
            .unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "slept {:?}",
            started.elapsed()
        );
        assert!(Instant::now() >= call.deadline);
    }
}
