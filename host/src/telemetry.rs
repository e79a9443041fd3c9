//! Tracing set-up: `RUST_LOG` decides what is logged (`info` otherwise),
//! `COUPONLAB_LOG_FORMAT` how: `text` (the default) or `json`, one JSON
//! object per line for a log pipeline.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::FmtSpan;

/// The formats `COUPONLAB_LOG_FORMAT` takes.
const FORMATS: [&str; 2] = ["text", "json"];

/// Installs the subscriber; an unknown format is an error that names the
/// ones there are.
pub fn init() -> anyhow::Result<()> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let format = std::env::var("COUPONLAB_LOG_FORMAT").unwrap_or_else(|_| "text".into());
    // A span that closes logs a line with its busy and idle time: with
    // `RUST_LOG=couponlab=debug`, one per capability call, which shows where
    // a slow request spent its time. At the default level no span is
    // enabled and nothing is written.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_span_events(FmtSpan::CLOSE);
    let installed = match format.as_str() {
        "text" => builder.try_init(),
        "json" => builder.json().flatten_event(true).try_init(),
        other => anyhow::bail!(
            "COUPONLAB_LOG_FORMAT must be one of {}, got {other:?}",
            FORMATS.join(", ")
        ),
    };
    installed.map_err(|err| anyhow::anyhow!("cannot install the log subscriber: {err}"))
}
