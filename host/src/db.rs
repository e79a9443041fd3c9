//! The MySQL pool: the database is created when missing, migrations run at start.

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::{ConnectOptions, Connection, Executor};

/// The migrations in `migrations/`, embedded at build time.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

pub struct PoolSettings {
    pub max_connections: u32,
    pub lock_wait_timeout_s: u32,
}

/// Connects to `url`, creating its database if needed, and migrates it.
pub async fn connect(url: &str, settings: PoolSettings) -> anyhow::Result<MySqlPool> {
    let options = MySqlConnectOptions::from_str(url)
        .with_context(|| format!("DATABASE_URL is not a MySQL URL: {url}"))?;
    create_database_if_missing(&options).await?;

    let lock_wait = settings.lock_wait_timeout_s;
    let pool = MySqlPoolOptions::new()
        .max_connections(settings.max_connections)
        .acquire_timeout(Duration::from_secs(5))
        // No ping before each use: it would add a round trip to every
        // transaction on the request path, and a broken connection already
        // surfaces as a typed connection error (503) on first use.
        .test_before_acquire(false)
        .after_connect(move |conn, _meta| {
            Box::pin(async move {
                conn.execute(
                    format!("SET SESSION innodb_lock_wait_timeout = {lock_wait}").as_str(),
                )
                .await?;
                Ok(())
            })
        })
        .connect_with(options.clone())
        .await
        .with_context(|| format!("cannot connect to MySQL at {}", redacted(url)))?;
    MIGRATOR.run(&pool).await.context("migrations failed")?;
    Ok(pool)
}

async fn create_database_if_missing(options: &MySqlConnectOptions) -> anyhow::Result<()> {
    let Some(name) = options.get_database() else {
        anyhow::bail!("DATABASE_URL names no database");
    };
    anyhow::ensure!(
        name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
        "database name {name:?} may only hold letters, digits and underscores"
    );
    let server = options.clone().database("");
    let mut conn = server
        .connect()
        .await
        .context("cannot connect to the MySQL server")?;
    conn.execute(format!("CREATE DATABASE IF NOT EXISTS `{name}`").as_str())
        .await
        .with_context(|| format!("cannot create database {name}"))?;
    conn.close().await.ok();
    Ok(())
}

/// The URL without its password, for messages.
fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            let user = credentials.split(':').next().unwrap_or("");
            format!("{}{user}@{}", &url[..scheme + 3], &url[at + 1..])
        }
        _ => url.to_string(),
    }
}
