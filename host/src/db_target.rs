//! The lab's database as the host reaches it, the MySQL counterpart of
//! [`crate::redis_target`]: a URL shown without its password, the settings
//! of every pool (the server's own and the components'), and a bound on
//! each step of the start that waits for the database.

use std::future::Future;
use std::time::Duration;

use sqlx::Executor;
use sqlx::mysql::MySqlPoolOptions;

/// How long one step of the start may wait for the database's answer.
pub const STEP_LIMIT: Duration = Duration::from_secs(30);

/// `step`, or an error once `limit` passed without its answer. A link that
/// lost a statement or its answer on the way leaves the connection waiting
/// for ever (sqlx sets no read timeout): failing the start instead lets
/// whoever supervises the server start it again, on new connections.
pub async fn answered<T>(
    what: &str,
    limit: Duration,
    step: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tokio::time::timeout(limit, step).await.unwrap_or_else(|_| {
        Err(anyhow::anyhow!(
            "the database did not answer {what} within {limit:?}"
        ))
    })
}

/// A pool whose sessions wait for row locks `lock_wait_timeout_s` at most
/// (below a call's budget, so a long lock wait is a typed error, not a
/// cancelled call), with `extra` session settings.
pub fn pool_options(
    size: u32,
    lock_wait_timeout_s: u32,
    extra: Option<String>,
) -> MySqlPoolOptions {
    let mut session = format!("SET SESSION innodb_lock_wait_timeout = {lock_wait_timeout_s}");
    if let Some(extra) = extra {
        session = format!("{session}; {extra}");
    }
    MySqlPoolOptions::new()
        .max_connections(size)
        .acquire_timeout(Duration::from_secs(5))
        // No ping before each use: it would add a round trip to every
        // transaction on the request path, and a broken connection already
        // surfaces as a typed connection error (503) on first use.
        .test_before_acquire(false)
        .after_connect(move |conn, _meta| {
            let session = session.clone();
            Box::pin(async move {
                conn.execute(session.as_str()).await?;
                Ok(())
            })
        })
}

/// The URL without its password, for messages.
pub fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            let user = credentials.split(':').next().unwrap_or("");
            format!("{}{user}@{}", &url[..scheme + 3], &url[at + 1..])
        }
        _ => url.to_string(),
    }
}
