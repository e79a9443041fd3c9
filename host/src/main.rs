//! The `couponlab` binary: parse the command line, start tracing, run.

use clap::Parser;

/// Every call allocates its store, its instance's bookkeeping and its
/// replies; mimalloc's thread-local free lists serve that churn from both
/// cores without the contention of glibc's arenas.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    couponlab::telemetry::init()?;
    let cli = couponlab::config::Cli::parse();
    couponlab::run(cli).await
}
