//! The MySQL pools: the server's own, through DATABASE_URL (the database is
//! created when missing, migrations run at start), and the one components'
//! SQL runs on, as a user with only the grants issuance needs.
//!
//! The components' user `couponlab_strategy` may, in the lab's database:
//!
//! - read `members`;
//! - read `coupons`, and update its `issued_count` and `version` columns;
//! - read, insert and delete `coupon_issues`, and update it: write-behind's
//!   `INSERT ... ON DUPLICATE KEY UPDATE`, which lets a redelivered entry
//!   neither fail nor rewrite its row, needs UPDATE on every column it
//!   inserts. That grants no power INSERT and DELETE do not already give.
//!
//! Nothing else: no DDL, no other schema, no `mysql.*`, no GRANT, no
//! SET GLOBAL. The server creates the user (or updates its password and
//! grants) at start through DATABASE_URL, unless the operator gives
//! COUPONLAB_STRATEGY_DATABASE_URL.

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use sha2::{Digest, Sha256};
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::{ConnectOptions, Connection, Executor};

use crate::config::Config;
use crate::runtime::sql::lent::{Limits, StatementLimit};

/// The migrations in `migrations/`, embedded at build time.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// The user components' SQL runs as, unless the operator names another.
pub const STRATEGY_USER: &str = "couponlab_strategy";

/// What issuance needs, table by table (see the module's documentation).
const GRANTS: [&str; 3] = [
    "SELECT ON `{db}`.`members`",
    "SELECT, UPDATE (issued_count, version) ON `{db}`.`coupons`",
    "SELECT, INSERT, UPDATE, DELETE ON `{db}`.`coupon_issues`",
];

/// The pools of one server.
pub struct Databases {
    /// The server's own: routes, results, DELETE /lab/data, migrations.
    pub admin: MySqlPool,
    /// Components' SQL, as the restricted user.
    pub strategies: MySqlPool,
    /// How the server cuts the components' statements.
    pub limits: Limits,
}

/// Connects both pools, creating and migrating the database and the
/// components' user as needed.
pub async fn connect(config: &Config) -> anyhow::Result<Databases> {
    let url = &config.database_url;
    let options = MySqlConnectOptions::from_str(url)
        .with_context(|| format!("DATABASE_URL is not a MySQL URL: {}", redacted(url)))?;
    let limit = create_database_if_missing(&options).await?;

    let admin = pool(config, config.admin_db_pool_size, None)
        .connect_with(options.clone())
        .await
        .with_context(|| format!("cannot connect to MySQL at {}", redacted(url)))?;
    MIGRATOR.run(&admin).await.context("migrations failed")?;

    let strategy_options = match &config.strategy_database_url {
        Some(url) => MySqlConnectOptions::from_str(url).with_context(|| {
            format!(
                "COUPONLAB_STRATEGY_DATABASE_URL is not a MySQL URL: {}",
                redacted(url)
            )
        })?,
        None => {
            let password = derived_password(STRATEGY_USER, url);
            ensure_strategy_user(&admin, &options, &password).await?;
            options.clone().username(STRATEGY_USER).password(&password)
        }
    };
    // Every session of the components' pool starts with its statements cut
    // by the server within the call budget.
    let limits = Limits {
        statement: limit,
        call: config.request_timeout(),
    };
    let strategies = pool(config, config.db_pool_size, Some(limits.session_default()))
        .connect_with(strategy_options)
        .await
        .context("cannot connect to MySQL as the components' user")?;
    Ok(Databases {
        admin,
        strategies,
        limits,
    })
}

/// A password for `user` derived from an administrative URL's scheme,
/// credentials, host and port — not its path, so servers of different
/// databases on one server derive the same one. Every process sharing a
/// server sets the same password for the user and none locks another out;
/// anyone who can derive it already holds the administrative credentials.
pub fn derived_password(user: &str, admin_url: &str) -> String {
    let server = match url::Url::parse(admin_url) {
        Ok(mut url) => {
            url.set_path("");
            url.set_query(None);
            url.to_string()
        }
        Err(_) => admin_url.to_string(),
    };
    hex::encode(Sha256::digest(format!("{user}\0{server}")))
}

/// A pool whose sessions wait for row locks less than a call's budget (so a
/// long lock wait is a typed error, not a cancelled call), with `extra`
/// session settings.
fn pool(config: &Config, size: u32, extra: Option<String>) -> MySqlPoolOptions {
    let mut session = format!(
        "SET SESSION innodb_lock_wait_timeout = {}",
        config.lock_wait_timeout_s
    );
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

/// Creates [`STRATEGY_USER`] for the host this server connects from, or
/// brings its password and grants up to date. Every process sharing the
/// database derives the same password from DATABASE_URL, so none locks
/// another out.
async fn ensure_strategy_user(
    admin: &MySqlPool,
    options: &MySqlConnectOptions,
    password: &str,
) -> anyhow::Result<()> {
    let db = options.get_database().unwrap_or_default();
    let mut conn = admin.acquire().await?;
    // The host part the server gives this connection: the user is created
    // for exactly that host.
    let host: String = sqlx::query_scalar("SELECT SUBSTRING_INDEX(USER(), '@', -1)")
        .fetch_one(&mut *conn)
        .await?;
    let account = format!("'{STRATEGY_USER}'@'{}'", host.replace('\'', "''"));
    let password = password.replace('\'', "''");
    let mut statements = vec![
        format!("CREATE USER IF NOT EXISTS {account} IDENTIFIED BY '{password}'"),
        format!("ALTER USER {account} IDENTIFIED BY '{password}'"),
    ];
    statements.extend(
        GRANTS
            .iter()
            .map(|grant| format!("GRANT {} TO {account}", grant.replace("{db}", db))),
    );
    for statement in statements {
        conn.execute(statement.as_str()).await.map_err(|err| {
            anyhow::anyhow!(
                "cannot set up the database user {STRATEGY_USER} that components' SQL runs as \
                 ({err}). Connect DATABASE_URL as a user that may CREATE USER and GRANT on the \
                 lab's tables, or create a user yourself with the grants in docs/architecture.md \
                 (the trust model) and give it as \
                 COUPONLAB_STRATEGY_DATABASE_URL=mysql://user:password@host:port/{db}"
            )
        })?;
    }
    Ok(())
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
