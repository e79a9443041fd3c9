//! The lab's database as the host reaches it, the SQL counterpart of
//! [`crate::redis_target`]: which engine it is (MySQL/MariaDB or
//! PostgreSQL), a pool of either, a URL shown without its password, the
//! settings of every pool (the server's own and the components'), and a
//! bound on each step of the start that waits for the database.

use std::future::Future;
use std::time::Duration;

use std::str::FromStr;

use anyhow::Context;
use sqlx::Executor;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::pool::PoolOptions;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

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

/// A pool of the lab's database, whichever engine it is.
#[derive(Debug, Clone)]
pub enum Pool {
    MySql(MySqlPool),
    Postgres(PgPool),
}

impl Pool {
    pub fn dialect(&self) -> Dialect {
        match self {
            Pool::MySql(_) => Dialect::MySql,
            Pool::Postgres(_) => Dialect::Postgres,
        }
    }

    pub async fn close(&self) {
        match self {
            Pool::MySql(pool) => pool.close().await,
            Pool::Postgres(pool) => pool.close().await,
        }
    }

    /// Connections open now, and of them idle.
    pub fn open_and_idle(&self) -> (u32, usize) {
        match self {
            Pool::MySql(pool) => (pool.size(), pool.num_idle()),
            Pool::Postgres(pool) => (pool.size(), pool.num_idle()),
        }
    }
}

/// Where a pool connects, in its engine's terms.
#[derive(Debug, Clone)]
pub enum Target {
    MySql(MySqlConnectOptions),
    Postgres(PgConnectOptions),
}

impl Target {
    /// Reads a database URL; `what` names it in the error.
    pub fn parse(url: &str, what: &str) -> anyhow::Result<Target> {
        let unreadable = || format!("{what} is not a MySQL or PostgreSQL URL: {}", redacted(url));
        Ok(match Dialect::of_url(url).with_context(unreadable)? {
            Dialect::MySql => {
                Target::MySql(MySqlConnectOptions::from_str(url).with_context(unreadable)?)
            }
            Dialect::Postgres => {
                Target::Postgres(PgConnectOptions::from_str(url).with_context(unreadable)?)
            }
        })
    }

    pub fn dialect(&self) -> Dialect {
        match self {
            Target::MySql(_) => Dialect::MySql,
            Target::Postgres(_) => Dialect::Postgres,
        }
    }

    pub fn database(&self) -> Option<&str> {
        match self {
            Target::MySql(options) => options.get_database(),
            Target::Postgres(options) => options.get_database(),
        }
    }

    /// The same server and database, as another user.
    pub fn as_user(&self, user: &str, password: &str) -> Target {
        match self {
            Target::MySql(options) => {
                Target::MySql(options.clone().username(user).password(password))
            }
            Target::Postgres(options) => {
                Target::Postgres(options.clone().username(user).password(password))
            }
        }
    }

    /// The same user and database on the server at `address`
    /// (`host:port`): another node of a cluster. `None` for an address
    /// that names no port.
    pub fn at(&self, address: &str) -> Option<Target> {
        let (host, port) = address.rsplit_once(':')?;
        let port = port.parse().ok()?;
        Some(match self {
            Target::MySql(options) => Target::MySql(options.clone().host(host).port(port)),
            Target::Postgres(options) => Target::Postgres(options.clone().host(host).port(port)),
        })
    }

    /// A pool of `settings`, connected now; `ping`: each connection is
    /// pinged before it is handed out.
    pub async fn connect(&self, settings: &PoolSettings, ping: bool) -> sqlx::Result<Pool> {
        Ok(match self {
            Target::MySql(options) => Pool::MySql(
                settings
                    .mysql()
                    .test_before_acquire(ping)
                    .connect_with(options.clone())
                    .await?,
            ),
            Target::Postgres(options) => Pool::Postgres(
                settings
                    .postgres()
                    .test_before_acquire(ping)
                    .connect_with(options.clone())
                    .await?,
            ),
        })
    }

    /// A pool of `settings` whose connections open as they are needed.
    pub fn connect_lazy(&self, settings: &PoolSettings) -> Pool {
        match self {
            Target::MySql(options) => {
                Pool::MySql(settings.mysql().connect_lazy_with(options.clone()))
            }
            Target::Postgres(options) => {
                Pool::Postgres(settings.postgres().connect_lazy_with(options.clone()))
            }
        }
    }
}

/// How every pool's sessions start: waiting for row locks
/// `lock_wait_timeout_s` at most (below a call's budget, so a long lock
/// wait is a typed error, not a cancelled call), with `extra` session
/// settings in the pool's dialect.
#[derive(Debug, Clone)]
pub struct PoolSettings {
    pub size: u32,
    pub lock_wait_timeout_s: u32,
    pub extra: Option<String>,
}

impl PoolSettings {
    fn session(&self, dialect: Dialect) -> String {
        let lock_wait = match dialect {
            Dialect::MySql => format!(
                "SET SESSION innodb_lock_wait_timeout = {}",
                self.lock_wait_timeout_s
            ),
            Dialect::Postgres => format!("SET lock_timeout = '{}s'", self.lock_wait_timeout_s),
        };
        match &self.extra {
            Some(extra) => format!("{lock_wait}; {extra}"),
            None => lock_wait,
        }
    }

    fn mysql(&self) -> MySqlPoolOptions {
        self.options(Dialect::MySql)
    }

    fn postgres(&self) -> PgPoolOptions {
        self.options(Dialect::Postgres)
    }

    fn options<DB: sqlx::Database>(&self, dialect: Dialect) -> PoolOptions<DB>
    where
        for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    {
        let session = self.session(dialect);
        PoolOptions::<DB>::new()
            .max_connections(self.size)
            .acquire_timeout(ACQUIRE_TIMEOUT)
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
}

/// How long a call waits for a pooled connection.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

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

/// The SQL dialect a database speaks: where MySQL and PostgreSQL differ in
/// placeholders, errors and the statements that keep session state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// MySQL and MariaDB: `?` placeholders.
    MySql,
    /// PostgreSQL: `$1`, `$2`, ... placeholders.
    Postgres,
}

impl Dialect {
    /// The dialect of a database URL, by its scheme.
    pub fn of_url(url: &str) -> Option<Dialect> {
        let scheme = url.split("://").next()?;
        match scheme {
            "mysql" => Some(Dialect::MySql),
            "postgres" | "postgresql" => Some(Dialect::Postgres),
            _ => None,
        }
    }
}
