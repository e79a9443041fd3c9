//! The server's own pool, MySQL/MariaDB or PostgreSQL by DATABASE_URL's
//! scheme: the database is created when missing and migrated at start.
//! Routes, results, consumers' bookkeeping and DELETE /lab/data run on it; components' SQL runs on the
//! pool of the runtime's SQL capability ([`crate::runtime::SqlAdmin`]), as a
//! restricted user.

use std::time::Duration;

use anyhow::Context;
use sqlx::mysql::MySqlConnectOptions;
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, Executor};

use crate::config::Config;
use crate::db_target::{Pool, PoolSettings, STEP_LIMIT, Target, answered, redacted};
use crate::runtime::{SqlAdmin, SqlEngine as Engine};

/// Runs `$body` on whichever engine `$pool` is, with `$pool` bound to that
/// engine's pool and `$sql` to the statement written with `?`
/// placeholders, numbered `$1, $2, ...` for PostgreSQL. Each arm is typed
/// on its own, so the same body decodes either engine's rows.
/// Where the engines' SQL differs, `mysql: "...", postgres: "..."` gives
/// each its own.
macro_rules! on_engine {
    ($pool:expr, $statement:expr, |$p:ident, $sql:ident| $body:expr) => {
        on_engine!($pool, mysql: $statement, postgres: $statement, |$p, $sql| $body)
    };
    ($pool:expr, mysql: $mysql:expr, postgres: $postgres:expr, |$p:ident, $sql:ident| $body:expr) => {
        match $pool {
            $crate::db_target::Pool::MySql($p) => {
                let $sql: &str = $mysql;
                $body
            }
            $crate::db_target::Pool::Postgres($p) => {
                let numbered = $crate::runtime::numbered_for_postgres($postgres);
                let $sql: &str = &numbered;
                $body
            }
        }
    };
}

/// Runs `statement`, whose one parameter is the id `id`.
pub async fn execute_for(pool: &Pool, statement: &str, id: u64) -> sqlx::Result<()> {
    on_engine!(pool, statement, |pool, sql| {
        sqlx::query(sql)
            .bind(signed(id))
            .execute(pool)
            .await
            .map(drop)
    })
}

/// Whether coupon `id` exists, and is a user's (not a canary's scratch
/// coupon).
pub async fn coupon_exists(pool: &Pool, id: u64) -> sqlx::Result<bool> {
    let statement = "SELECT id FROM coupons WHERE id = ? AND NOT scratch";
    let found: Option<i64> = on_engine!(pool, statement, |pool, sql| {
        sqlx::query_scalar(sql)
            .bind(signed(id))
            .fetch_optional(pool)
            .await
    })?;
    Ok(found.is_some())
}

/// An id as the lab's signed BIGINT columns hold it: one past their range
/// matches no row.
pub fn signed(id: u64) -> i64 {
    i64::try_from(id).unwrap_or(-1)
}
pub(crate) use on_engine;

/// The migrations of each engine, embedded at build time: the same tables
/// and columns in each engine's types.
pub static MYSQL_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/mysql");
pub static POSTGRES_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

/// The server's pool, and what setting up the components' pool needs.
pub struct Server {
    pub pool: Pool,
    pub target: Target,
    /// The server, as read at start.
    pub engine: Engine,
    /// The lab's own identity, kept in its database (`lab_identity`): the
    /// same for every host of the lab, whichever address or node each
    /// reaches the database by, and different for every other lab.
    pub lab_id: String,
}

impl Server {
    /// What the components' pool is set up through.
    pub fn admin<'a>(&'a self, url: &'a str) -> SqlAdmin<'a> {
        SqlAdmin {
            pool: &self.pool,
            target: &self.target,
            url,
            lab_id: &self.lab_id,
            engine: self.engine.clone(),
        }
    }
}

/// Connects the server's pool, creating and migrating the database as
/// needed.
pub async fn connect(config: &Config) -> anyhow::Result<Server> {
    let url = &config.database_url;
    let target = Target::parse(url, "DATABASE_URL")?;
    answered(
        "creating the database",
        STEP_LIMIT,
        create_database_if_missing(&target),
    )
    .await?;
    let settings = PoolSettings {
        size: config.admin_db_pool_size,
        lock_wait_timeout_s: config.capabilities.sql.lock_wait_timeout_s,
        extra: None,
    };
    // Unlike the components' pool, which the measured requests use, the
    // server's own work can afford a ping before each use: a link cut and
    // back would otherwise fail one of its requests (a coupon created, a
    // result read, a session to end) per dead connection.
    let pool = target
        .connect(&settings, true)
        .await
        .with_context(|| format!("cannot connect to the database at {}", redacted(url)))?;
    let engine = answered("reading the server's version", STEP_LIMIT, async {
        Ok(Engine::read_from(&pool).await?)
    })
    .await?;
    migrate(&pool).await?;
    let lab_id = answered("reading the lab's identity", STEP_LIMIT, lab_id(&pool)).await?;
    Ok(Server {
        pool,
        target,
        engine,
        lab_id,
    })
}

/// The lab's identity, which its first migration made.
async fn lab_id(pool: &Pool) -> anyhow::Result<String> {
    let id: String = on_engine!(pool, "SELECT id FROM lab_identity", |pool, sql| {
        sqlx::query_scalar(sql).fetch_one(pool).await
    })
    .context("cannot read the lab's identity from its database")?;
    Ok(id.trim().to_string())
}

/// How long a server waits for another one's migrations to finish.
const MIGRATION_LOCK_WAIT_S: u32 = 300;

/// Runs the migrations, one server at a time: several servers starting on
/// one new database would otherwise apply the same migration at once, and
/// all but one fail ("partially applied"). On PostgreSQL sqlx's own lock
/// (`pg_advisory_lock`) waits its turn; on MySQL it asks
/// `GET_LOCK(name, -1)`, which MariaDB answers NULL at once instead of
/// waiting, so the lock is taken here with a positive timeout.
async fn migrate(pool: &Pool) -> anyhow::Result<()> {
    // As long as another server waits for the lock: migrations that take
    // longer fail the servers waiting for them anyway.
    let migrations_limit = Duration::from_secs(MIGRATION_LOCK_WAIT_S.into());
    let pool = match pool {
        Pool::MySql(pool) => pool,
        Pool::Postgres(pool) => {
            return answered("the migrations", migrations_limit + STEP_LIMIT, async {
                POSTGRES_MIGRATOR
                    .run(pool)
                    .await
                    .context("migrations failed")
            })
            .await;
        }
    };
    let mut holder = pool.acquire().await?;
    let name = "couponlab_migrations";
    let lock_wait = migrations_limit + STEP_LIMIT;
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
    let migrated = answered("the migrations", migrations_limit, async {
        MYSQL_MIGRATOR.run(pool).await.context("migrations failed")
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

/// Creates the URL's database unless it exists.
async fn create_database_if_missing(target: &Target) -> anyhow::Result<()> {
    let Some(name) = target.database() else {
        anyhow::bail!("DATABASE_URL names no database");
    };
    anyhow::ensure!(
        name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
        "database name {name:?} may only hold letters, digits and underscores"
    );
    match target {
        Target::MySql(options) => create_mysql_database(options, name).await,
        Target::Postgres(options) => create_postgres_database(options, name).await,
    }
    .with_context(|| format!("cannot create database {name}"))
}

async fn create_mysql_database(options: &MySqlConnectOptions, name: &str) -> anyhow::Result<()> {
    let mut conn = options
        .clone()
        .database("")
        .connect()
        .await
        .context("cannot connect to the MySQL server")?;
    conn.execute(format!("CREATE DATABASE IF NOT EXISTS `{name}`").as_str())
        .await?;
    conn.close().await.ok();
    Ok(())
}

/// PostgreSQL has no `CREATE DATABASE IF NOT EXISTS`: the database is
/// looked up first, and a server that loses the race to create it finds it
/// created (42P04, or 23505 from the catalog's unique index).
async fn create_postgres_database(options: &PgConnectOptions, name: &str) -> anyhow::Result<()> {
    let mut conn = options
        .clone()
        .database("postgres")
        .connect()
        .await
        .context("cannot connect to the PostgreSQL server's `postgres` database")?;
    let exists: Option<i32> = sqlx::query_scalar("SELECT 1 FROM pg_database WHERE datname = $1")
        .bind(name)
        .fetch_optional(&mut conn)
        .await?;
    if exists.is_none() {
        let created = conn
            .execute(format!("CREATE DATABASE \"{name}\"").as_str())
            .await;
        if let Err(err) = created {
            let raced = err
                .as_database_error()
                .and_then(|err| err.code())
                .is_some_and(|code| code == "42P04" || code == "23505");
            if !raced {
                return Err(err.into());
            }
        }
    }
    conn.close().await.ok();
    Ok(())
}

/// The ids of the lab's coupons (a signed column: the ids are positive).
pub async fn coupon_ids(pool: &Pool) -> Result<Vec<u64>, sqlx::Error> {
    let ids: Vec<i64> = on_engine!(pool, "SELECT id FROM coupons", |pool, sql| {
        sqlx::query_scalar(sql).fetch_all(pool).await
    })?;
    Ok(ids
        .into_iter()
        .filter_map(|id| u64::try_from(id).ok())
        .collect())
}
