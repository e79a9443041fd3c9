//! The `log` capability: a strategy's log lines, tagged with its method.

use super::bindings::log::{self, Level};
use super::store::HostState;

/// Longest message kept; a component cannot flood the log with one call.
const MAX_MESSAGE: usize = 2048;

impl log::Host for HostState {
    async fn write(&mut self, level: Level, mut message: String) -> wasmtime::Result<()> {
        if message.len() > MAX_MESSAGE {
            let mut end = MAX_MESSAGE;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
        }
        let method = &*self.method;
        match level {
            Level::Debug => tracing::debug!(target: "strategy", method, "{message}"),
            Level::Info => tracing::info!(target: "strategy", method, "{message}"),
            Level::Warn => tracing::warn!(target: "strategy", method, "{message}"),
            Level::Error => tracing::error!(target: "strategy", method, "{message}"),
        }
        Ok(())
    }
}
