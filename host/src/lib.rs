//! couponlab: a lab server that measures first-come-first-served coupon
//! issuance strategies, each one a WebAssembly component.
//!
//! # Layout
//!
//! - [`budget`]: where a request's time goes, stage by stage, when
//!   `COUPONLAB_BUDGET` asks for it (`cargo xtask bench --budget`).
//! - [`canary`]: a new or changed component proves its claims on a scratch
//!   coupon before it serves.
//! - [`config`]: command line and environment configuration; each
//!   capability's settings come from its own module.
//! - [`lab`]: the shared state of one server: its own pools, the runtime,
//!   the strategy registry, the request recorder.
//! - [`db`]: the server's own MySQL pool, database creation and migrations.
//! - [`redis_target`]: the lab's Redis, a server or a Redis Cluster, and the
//!   connection every Redis command of the host goes through.
//! - [`redis_claim`]: one lab per Redis database: each host claims it for
//!   its lab, and a server refuses to start on another lab's.
//! - [`runtime`]: the wasmtime engine, the WIT bindings, the world a
//!   component implements, one call into it, one module per capability
//!   given to components (`redis`, `sql`, `jobs`, `permits`, `clock`,
//!   `log`), and the registry of loaded strategies.
//! - [`http`]: the `/lab` API, one module per resource, and the response
//!   envelope every route answers with.
//! - [`metrics`]: the Prometheus metrics `GET /metrics` serves.
//! - [`outcome`]: how an issue request ended, its name and its status.
//! - [`recorder`]: what each issue request asked and got, per coupon, and
//!   the snapshots through which every host's result covers every host's
//!   requests.
//! - [`results`]: the result of one coupon, from the database, the recorder
//!   and Redis.
//! - [`consumers`]: the roles that confirm requests answered 202 — job
//!   workers, the pub/sub subscriber, the stream consumers, the write-behind
//!   loader.
//! - [`confirmations`]: what became of each 202, recorded in Redis so every
//!   process sees it.
//! - [`telemetry`]: tracing set-up.

pub mod budget;
pub mod canary;
pub mod config;
pub mod confirmations;
pub mod consumers;
pub mod db;
pub mod http;
pub mod lab;
pub mod metrics;
pub mod outcome;
pub mod recorder;
pub mod redis_claim;
pub mod redis_target;
pub mod results;
pub mod runtime;
pub mod settlements;
pub mod telemetry;
pub mod traces;

use std::future::Future;

use anyhow::Context;
use tokio::net::TcpListener;

pub use lab::Lab;

/// Runs the command the user asked for.
pub async fn run(cli: config::Cli) -> anyhow::Result<()> {
    match cli.command.unwrap_or_default() {
        config::Command::Serve(config) => {
            let listener = TcpListener::bind(config.bind)
                .await
                .with_context(|| format!("cannot listen on {}", config.bind))?;
            let lab = Lab::start(config).await?;
            tracing::info!(address = %listener.local_addr()?, "couponlab is serving /lab");
            let served = serve(listener, lab, shutdown_signal()).await;
            budget::write()?;
            served
        }
        config::Command::Consume {
            consumer,
            mut config,
        } => {
            // The serving processes decide what is proved; a consumer takes
            // the directory as it is.
            config.canary = canary::CanaryMode::Off;
            let lab = Lab::start(config).await?;
            consume(lab, consumer, shutdown_signal()).await
        }
        config::Command::Check { files, config } => check(files, config).await,
    }
}

/// Runs the canary of each of `files` in a lab of its own that serves the
/// strategy directory as it is (no canary of its own, no watcher), with
/// every consumer role, and prints each report.
async fn check(files: Vec<std::path::PathBuf>, mut config: config::Config) -> anyhow::Result<()> {
    config.canary = canary::CanaryMode::Off;
    config.watch = false;
    let lab = Lab::start(config).await?;
    let consumers = consumers::start(&lab, consumers::Selection::all());
    let mut refused = 0;
    for file in &files {
        let (verdict, answer) = canary::check(&lab, file).await;
        println!("{}", serde_json::to_string_pretty(&answer)?);
        eprintln!("{}: {verdict}", file.display());
        refused += usize::from(verdict != "passed");
    }
    consumers.stop().await;
    anyhow::ensure!(
        refused == 0,
        "{refused} of {} components failed their canary",
        files.len()
    );
    Ok(())
}

/// Serves the `/lab` API on `listener` until `shutdown` completes, with the
/// job workers, the publisher of its request record and, unless configured
/// off, the subscriber and the stream consumers. On shutdown the HTTP
/// server stops first, then the consumers finish what they hold, and the
/// record is published a last time.
pub async fn serve(
    listener: TcpListener,
    lab: Lab,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let in_process = lab.config.consumers.in_process;
    let consumers = consumers::start(
        &lab,
        consumers::Selection {
            jobs: true,
            ..consumers::Selection::all_if(in_process)
        },
    );
    // The canaries of 202 methods need the consumers just started.
    lab.provers.open();
    let publisher = recorder::shared::Publisher::start(&lab);
    let served = axum::serve(listener, http::router(lab))
        .with_graceful_shutdown(shutdown)
        .await
        .context("the HTTP server failed");
    consumers.stop().await;
    publisher.stop().await;
    served
}

/// Runs one consumer alone until `shutdown` completes.
pub async fn consume(
    lab: Lab,
    consumer: config::Consumer,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    tracing::info!(?consumer, "couponlab is consuming");
    let consumers = consumers::start(&lab, consumers::Selection::only(consumer));
    shutdown.await;
    consumers.stop().await;
    Ok(())
}

/// Completes on ctrl-c or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutting down");
}
