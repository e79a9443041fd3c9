//! The server's own MySQL pool, through DATABASE_URL: the database is
//! created when missing and migrated at start. Routes, results, consumers'
//! bookkeeping and DELETE /lab/data run on it; components' SQL runs on the
//! pool of [`runtime::sql::user`](crate::runtime::sql::user), as a
//! restricted user.

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool};
use sqlx::{ConnectOptions, Connection, Executor};

use crate::config::Config;
use crate::db_target::{STEP_LIMIT, answered, pool_options, redacted};
use crate::runtime::sql::engine::Engine;
use crate::runtime::sql::user;

/// The migrations in `migrations/`, embedded at build time.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// The server's pool, and what setting up the components' pool needs.
pub struct Server {
    pub pool: MySqlPool,
    pub options: MySqlConnectOptions,
    /// The server, as read at start.
    pub engine: Engine,
}

impl Server {
    /// What the components' pool is set up through.
    pub fn admin<'a>(&'a self, url: &'a str) -> user::Admin<'a> {
        user::Admin {
            pool: &self.pool,
            options: &self.options,
            url,
            engine: self.engine.clone(),
        }
    }
}

/// Connects the server's pool, creating and migrating the database as
/// needed.
pub async fn connect(config: &Config) -> anyhow::Result<Server> {
    let url = &config.database_url;
    let options = MySqlConnectOptions::from_str(url)
        .with_context(|| format!("DATABASE_URL is not a MySQL URL: {}", redacted(url)))?;
    let engine = answered(
        "creating the database",
        STEP_LIMIT,
        create_database_if_missing(&options),
    )
    .await?;
    let lock_wait = config.capabilities.sql.lock_wait_timeout_s;
    let pool = pool_options(config.admin_db_pool_size, lock_wait, None)
        // Unlike the components' pool, which the measured requests use, the
        // server's own work can afford a ping before each use: a link cut
        // and back would otherwise fail one of its requests (a coupon
        // created, a result read, a session to end) per dead connection.
        .test_before_acquire(true)
        .connect_with(options.clone())
        .await
        .with_context(|| format!("cannot connect to MySQL at {}", redacted(url)))?;
    migrate(&pool).await?;
    Ok(Server {
        pool,
        options,
        engine,
    })
}

/// How long a server waits for another one's migrations to finish.
const MIGRATION_LOCK_WAIT_S: u32 = 300;

/// Runs the migrations, one server at a time: several servers starting on
/// one new database would otherwise apply the same migration at once, and
/// all but one fail ("partially applied"). sqlx's own migration lock asks
/// `GET_LOCK(name, -1)`, which MariaDB answers NULL at once instead of
/// waiting, so the lock is taken here with a positive timeout.
async fn migrate(pool: &MySqlPool) -> anyhow::Result<()> {
    let mut holder = pool.acquire().await?;
    let name = "couponlab_migrations";
    let lock_wait = Duration::from_secs(MIGRATION_LOCK_WAIT_S.into()) + STEP_LIMIT;
    let locked: Option<i64> = answered("the migration lock", lock_wait, async {
        Ok(
            sqlx::query_scalar("SELECT GET_LOCK(CONCAT(?, '_', DATABASE()), ?)")
                .bind(name)
                .bind(MIGRATION_LOCK_WAIT_S)
                .fetch_one(&mut *holder)
                .await?,
        )
    })
    .await?;
    anyhow::ensure!(
        locked == Some(1),
        "another server held the migration lock for {MIGRATION_LOCK_WAIT_S} s"
    );
    // As long as another server waits for the lock: migrations that take
    // longer fail the servers waiting for them anyway.
    let migrations_limit = Duration::from_secs(MIGRATION_LOCK_WAIT_S.into());
    let migrated = answered("the migrations", migrations_limit, async {
        MIGRATOR.run(pool).await.context("migrations failed")
    })
    .await;
    answered("releasing the migration lock", STEP_LIMIT, async {
        sqlx::query("SELECT RELEASE_LOCK(CONCAT(?, '_', DATABASE()))")
            .bind(name)
            .execute(&mut *holder)
            .await?;
        Ok(())
    })
    .await?;
    migrated
}

/// Creates the URL's database unless it exists; reads which server it is
/// on the way.
async fn create_database_if_missing(options: &MySqlConnectOptions) -> anyhow::Result<Engine> {
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
    let engine = Engine::read(&mut conn)
        .await
        .context("cannot read the server's version")?;
    conn.close().await.ok();
    Ok(engine)
}

/// The ids of the lab's coupons (a signed column: the ids are positive).
pub async fn coupon_ids(pool: &MySqlPool) -> Result<Vec<u64>, sqlx::Error> {
    let ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM coupons")
        .fetch_all(pool)
        .await?;
    Ok(ids
        .into_iter()
        .filter_map(|id| u64::try_from(id).ok())
        .collect())
}
