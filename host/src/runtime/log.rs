//! The `log` capability: a strategy's log lines, tagged with its method.

use super::bindings::log::{self, Level};
use super::store::HostState;

/// Longest message kept; a component cannot flood the log with one call.
const MAX_MESSAGE: usize = 2048;

/// The `log` capability's settings.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct LogArgs {
    /// Log lines one call may write; the rest are dropped, and one line
    /// says how many.
    #[arg(
        long = "max-log-lines",
        env = "COUPONLAB_MAX_LOG_LINES",
        default_value_t = 100
    )]
    pub max_lines: u32,
}

impl log::Host for HostState {
    /// At most `COUPONLAB_MAX_LOG_LINES` lines per call; the first line
    /// past the cap says the rest are dropped.
    #[tracing::instrument(name = "log.write", level = "debug", skip_all, fields(method = %self.method))]
    async fn write(&mut self, level: Level, mut message: String) -> wasmtime::Result<()> {
        let cap = self.caps.log.max_lines;
        self.log_lines = self.log_lines.saturating_add(1);
        if self.log_lines > cap {
            if self.log_lines == cap + 1 {
                let method = &*self.method;
                tracing::warn!(target: "strategy", method, "this call wrote {cap} log lines (COUPONLAB_MAX_LOG_LINES); the rest are dropped");
            }
            return Ok(());
        }
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
            Level::Error => {
                tracing::error!(target: "strategy", method, "{message}");
                self.error_logged = Some(message);
            }
        }
        Ok(())
    }
}
