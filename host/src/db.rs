//! The server's own MySQL pool, through DATABASE_URL: the database is
//! created when missing and migrated at start. Routes, results, consumers'
//! bookkeeping and DELETE /lab/data run on it; components' SQL runs on the
//! pool of [`runtime::sql::user`](crate::runtime::sql::user), as a
//! restricted user.

use std::str::FromStr;

use anyhow::Context;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool};
use sqlx::{ConnectOptions, Connection, Executor};

use crate::config::Config;
use crate::runtime::sql::lent::StatementLimit;
use crate::runtime::sql::user::{self, pool_options, redacted};

/// The migrations in `migrations/`, embedded at build time.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// The server's pool, and what setting up the components' pool needs.
pub struct Server {
    pub pool: MySqlPool,
    pub options: MySqlConnectOptions,
    pub statement_limit: StatementLimit,
}

impl Server {
    /// What the components' pool is set up through.
    pub fn admin<'a>(&'a self, url: &'a str) -> user::Admin<'a> {
        user::Admin {
            pool: &self.pool,
            options: &self.options,
            url,
            statement_limit: self.statement_limit,
        }
    }
}

/// Connects the server's pool, creating and migrating the database as
/// needed.
pub async fn connect(config: &Config) -> anyhow::Result<Server> {
    let url = &config.database_url;
    let options = MySqlConnectOptions::from_str(url)
        .with_context(|| format!("DATABASE_URL is not a MySQL URL: {}", redacted(url)))?;
    let statement_limit = create_database_if_missing(&options).await?;
    let lock_wait = config.capabilities.sql.lock_wait_timeout_s;
    let pool = pool_options(config.admin_db_pool_size, lock_wait, None)
        .connect_with(options.clone())
        .await
        .with_context(|| format!("cannot connect to MySQL at {}", redacted(url)))?;
    MIGRATOR.run(&pool).await.context("migrations failed")?;
    Ok(Server {
        pool,
        options,
        statement_limit,
    })
}

/// Creates the URL's database unless it exists; tells MariaDB from MySQL
/// on the way.
async fn create_database_if_missing(
    options: &MySqlConnectOptions,
) -> anyhow::Result<StatementLimit> {
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
    let version: String = sqlx::query_scalar("SELECT VERSION()")
        .fetch_one(&mut conn)
        .await
        .context("cannot read the server's version")?;
    conn.close().await.ok();
    Ok(StatementLimit::of_version(&version))
}
