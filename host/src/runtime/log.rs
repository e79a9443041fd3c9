//! The `log` capability: a strategy's log lines, tagged with its method.

use wasmtime::component::HasData;

use super::bindings::log::{self, Level};
use super::call_context::CallContext;

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

/// The `log` capability as the linker knows it: its imports work on a
/// [`LogView`].
pub struct Log;

impl HasData for Log {
    type Data<'a> = LogView<'a>;
}

/// What one call wrote to the log.
#[derive(Debug, Default)]
pub struct Written {
    lines: u32,
    /// The last error line (a Rust panic's message, which the sdk's panic
    /// hook logs), for the message of a trap.
    pub last_error: Option<String>,
}

/// What the log reaches of one call.
pub struct LogView<'a> {
    pub settings: LogArgs,
    pub written: &'a mut Written,
    pub call: &'a CallContext,
}

impl log::Host for LogView<'_> {
    /// At most `COUPONLAB_MAX_LOG_LINES` lines per call; the first line
    /// past the cap says the rest are dropped.
    #[tracing::instrument(name = "log.write", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn write(&mut self, level: Level, mut message: String) -> wasmtime::Result<()> {
        let cap = self.settings.max_lines;
        let method = &*self.call.method;
        self.written.lines = self.written.lines.saturating_add(1);
        if self.written.lines > cap {
            if self.written.lines == cap + 1 {
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
        match level {
            Level::Debug => tracing::debug!(target: "strategy", method, "{message}"),
            Level::Info => tracing::info!(target: "strategy", method, "{message}"),
            Level::Warn => tracing::warn!(target: "strategy", method, "{message}"),
            Level::Error => {
                tracing::error!(target: "strategy", method, "{message}");
                self.written.last_error = Some(message);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::runtime::call_context::tests::call_ending_in;

    #[tokio::test]
    async fn the_last_error_is_kept_cut_short_and_lines_past_the_cap_are_dropped() {
        let call = call_ending_in(Duration::from_secs(5));
        let mut written = Written::default();
        let mut view = LogView {
            settings: LogArgs { max_lines: 2 },
            written: &mut written,
            call: &call,
        };
        let long = "é".repeat(MAX_MESSAGE);
        log::Host::write(&mut view, Level::Error, long)
            .await
            .unwrap();
        let kept = view.written.last_error.clone().unwrap();
        assert!(kept.len() <= MAX_MESSAGE && kept.chars().all(|c| c == 'é'));
        log::Host::write(&mut view, Level::Info, "second".into())
            .await
            .unwrap();
        log::Host::write(&mut view, Level::Error, "dropped".into())
            .await
            .unwrap();
        assert_eq!(
            view.written.last_error,
            Some(kept),
            "the third line is past the cap"
        );
    }
}
