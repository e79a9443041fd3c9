//! couponlab: a lab server that measures first-come-first-served coupon
//! issuance strategies, each one a WebAssembly component.
//!
//! # Layers
//!
//! The modules stand on floors, and a module imports only from the floors
//! below its own (`docs/architecture.md`, *Layers*; xtask's `layers` test
//! keeps it so). Lowest first:
//!
//! 1. Leaves, which import no other module of the crate:
//!    - [`budget`]: where a request's time goes, stage by stage, when
//!      `COUPONLAB_BUDGET` asks for it (`cargo xtask bench --budget`).
//!    - [`metrics`]: the Prometheus metrics `GET /metrics` serves.
//!    - [`telemetry`]: tracing set-up.
//!    - [`redis_target`]: the lab's Redis, a server or a Redis Cluster, the
//!      connection every Redis command of the host goes through, and what
//!      a Redis error says (`errors`).
//!    - [`db_target`]: the lab's database as the host reaches it: a URL
//!      without its password, the pools' settings, a bound on each step.
//!    - [`recently`]: keys done at most once an interval.
//!    - [`credentials`]: the passwords of the users the lab makes on its
//!      servers, derived from the administrative URL.
//!    - [`outcome`]: every way a request ends, its name and its status,
//!      and a request's ending as the record keeps it.
//! 2. [`runtime`]: the wasmtime engine, the WIT bindings, the world a
//!    component implements, one call into it, one module per capability
//!    given to components (`redis`, `sql` with its named locks, `broker`,
//!    `jobs`, `permits`, `process_lock`, `clock`, `log`), each on its own
//!    view of a call's store and handed the call's context, the `trace` of
//!    what each call did, and the registry of loaded strategies, watched
//!    and tried.
//! 3. The lab's state, each module above the one before:
//!    - [`traces`]: what each request's component did, call by call.
//!    - [`config`]: command line and environment configuration; each
//!      capability's settings come from its own module.
//!    - [`db`]: the server's own database pool, database creation and
//!      migrations.
//!    - [`recorder`]: what each issue request asked and got, per coupon,
//!      and the snapshots every host publishes of it.
//!    - [`confirmations`]: what became of each 202, recorded in Redis so
//!      every process sees it.
//!    - [`settlements`]: the requests whose outcome is to be settled later.
//!    - [`redis_claim`]: one lab per Redis database.
//!    - [`lab`]: the shared state of one server: its pools, the runtime,
//!      the strategy registry, the recorder, the traces.
//! 4. The roles, which act on a lab, each above the one before:
//!    - [`announcements`]: which coupons' streams the stream roles read.
//!    - [`snapshots`]: this host's record published, every host's read.
//!    - [`issuing`]: the one path of an issue request and of a 202's
//!      confirmation.
//!    - [`consumers`]: the roles that confirm requests answered 202, and
//!      the settle loop.
//!    - [`canary`]: a new or changed component proves its claims on a
//!      scratch coupon before it serves; it loads and watches the
//!      strategy directory.
//!    - [`results`]: the result of one coupon, from the database, the
//!      recorder and Redis.
//! 5. [`http`]: the `/lab` API, one module per resource, and the response
//!    envelope every route answers with.
//! 6. This file: the commands, and a server's start and stop.

pub mod announcements;
pub mod budget;
pub mod canary;
pub mod config;
pub mod confirmations;
pub mod consumers;
pub mod credentials;
pub mod db;
pub mod db_target;
pub mod http;
pub mod issuing;
pub mod lab;
pub mod metrics;
pub mod outcome;
pub mod recently;
pub mod recorder;
pub mod redis_claim;
pub mod redis_target;
pub mod results;
pub mod runtime;
pub mod settlements;
pub mod snapshots;
pub mod telemetry;
pub mod traces;

use std::future::Future;

use anyhow::Context;
use tokio::net::TcpListener;

pub use lab::Lab;

/// The binary's whole work on a multi-threaded runtime: tracing, the
/// command line, [`run`]. Here and not in `main.rs` (`#[tokio::main]`),
/// because the runtime's loop and everything the future it drives reaches
/// were compiled again in the binary's crate: 57 s of CPU for a 16-line
/// file, against 2 s now.
pub fn main() -> anyhow::Result<()> {
    use clap::Parser;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(async {
            telemetry::init()?;
            run(config::Cli::parse()).await
        })
}

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
            config.canary = config::CanaryMode::Off;
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
    config.canary = config::CanaryMode::Off;
    config.watch = false;
    let lab = Lab::start(config).await?;
    let roles = Roles::start(&lab, consumers::Selection::all()).await?;
    let mut refused = 0;
    for file in &files {
        let (verdict, answer) = canary::check(&lab, file).await;
        println!("{}", serde_json::to_string_pretty(&answer)?);
        eprintln!("{}: {verdict}", file.display());
        refused += usize::from(verdict != "passed");
    }
    roles.stop().await;
    anyhow::ensure!(
        refused == 0,
        "{refused} of {} components failed their canary",
        files.len()
    );
    Ok(())
}

/// Serves the `/lab` API on `listener` until `shutdown` completes, with the
/// job workers, the publisher of its request record and, unless configured
/// off, the subscriber and the stream consumers; the strategy directory is
/// loaded once they run, and watched. On shutdown the HTTP server stops
/// first, then the consumers finish what they hold, and the record is
/// published a last time.
pub async fn serve(
    listener: TcpListener,
    lab: Lab,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let in_process = lab.config.consumers.in_process;
    let roles = Roles::start(
        &lab,
        consumers::Selection {
            jobs: true,
            ..consumers::Selection::all_if(in_process)
        },
    )
    .await?;
    let publisher = snapshots::Publisher::start(&lab);
    let served = axum::serve(listener, http::router(lab))
        .with_graceful_shutdown(shutdown)
        .await
        .context("the HTTP server failed");
    roles.stop().await;
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
    let roles = Roles::start(&lab, consumers::Selection::only(consumer)).await?;
    shutdown.await;
    roles.stop().await;
    Ok(())
}

/// The roles a process runs on its lab: the consumers it was asked for,
/// then the canaries, which load and watch the strategy directory (the
/// canary of a method that answers 202 waits for its confirmations). It is
/// started once the roles what was loaded needs listen.
struct Roles {
    consumers: consumers::Consumers,
    canaries: canary::Canaries,
}

impl Roles {
    async fn start(lab: &Lab, selected: consumers::Selection) -> anyhow::Result<Roles> {
        let mut consumers = consumers::start(lab, selected);
        match canary::start(lab).await {
            Ok(canaries) => {
                consumers.before_serving(lab).await;
                Ok(Roles {
                    consumers,
                    canaries,
                })
            }
            Err(err) => {
                consumers.stop().await;
                Err(err)
            }
        }
    }

    /// Stops watching the directory, then lets the consumers finish what
    /// they hold.
    async fn stop(self) {
        drop(self.canaries);
        self.consumers.stop().await;
    }
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
