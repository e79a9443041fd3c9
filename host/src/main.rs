//! The `couponlab` binary: parse the command line, start tracing, run.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    couponlab::telemetry::init();
    let cli = couponlab::config::Cli::parse();
    couponlab::run(cli).await
}
