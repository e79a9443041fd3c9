//! Which database answers components' SQL: its name and version, the
//! level a transaction that names none runs at, and the settings that
//! change what its levels allow. `sql.engine()` tells components;
//! `GET /lab/strategies` and every result name it.

use std::collections::BTreeMap;

use serde::Serialize;
use sqlx::{MySqlConnection, PgConnection};
use utoipa::ToSchema;

use super::cluster::{self, Cluster, GALERA};
use super::lent::StatementLimit;
use crate::db_target::Pool;
use crate::runtime::bindings::sql::SqlError;

/// The database components' SQL runs on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct Engine {
    /// `mariadb`, `mysql`, `postgresql`, or `galera` (a MariaDB that is a
    /// node of a Galera cluster).
    pub name: &'static str,
    /// The server's own version string.
    pub version: String,
    /// Settings of the components' sessions that change what an isolation
    /// level allows (`innodb_snapshot_isolation`), and on Galera what a
    /// node answers (`wsrep_sync_wait`, `innodb_flush_log_at_trx_commit`,
    /// provider options), each as name → value.
    pub settings: BTreeMap<String, String>,
    /// On Galera: the cluster, as the host's node saw it when this was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<Cluster>,
    /// The level of a transaction that names none, as traces name levels:
    /// the components' sessions' own.
    #[serde(skip)]
    pub default_isolation: &'static str,
}

/// MariaDB's switch that makes REPEATABLE READ refuse a write to a row
/// changed since the transaction's snapshot (error 1020) instead of
/// losing the update (10.6.18, 10.11.8 and later).
pub const SNAPSHOT_ISOLATION: &str = "innodb_snapshot_isolation";

impl Engine {
    /// Reads the server's name and version on a session of `pool`.
    pub async fn read_from(pool: &Pool) -> Result<Self, sqlx::Error> {
        match pool {
            Pool::MySql(pool) => Engine::read(&mut *pool.acquire().await?).await,
            Pool::Postgres(pool) => Engine::read_postgres(&mut *pool.acquire().await?).await,
        }
    }

    /// [`Engine::read_session`] on a session of `pool`.
    pub async fn read_session_from(&mut self, pool: &Pool) -> Result<(), sqlx::Error> {
        match pool {
            Pool::MySql(pool) => self.read_session(&mut *pool.acquire().await?).await,
            Pool::Postgres(pool) => {
                let level: String =
                    sqlx::query_scalar("SELECT upper(current_setting('transaction_isolation'))")
                        .fetch_one(&mut *pool.acquire().await?)
                        .await?;
                self.default_isolation = level_name(&level.replace(' ', "-"));
                Ok(())
            }
        }
    }

    /// Reads PostgreSQL's version on `conn`. Its levels change with no
    /// setting: there is nothing else to name.
    pub async fn read_postgres(conn: &mut PgConnection) -> Result<Self, sqlx::Error> {
        let version: String =
            sqlx::query_scalar("SELECT 'PostgreSQL ' || current_setting('server_version')")
                .fetch_one(conn)
                .await?;
        Ok(Engine {
            name: "postgresql",
            version,
            settings: BTreeMap::new(),
            cluster: None,
            default_isolation: "READ COMMITTED",
        })
    }

    /// Reads the server's name and version on `conn`, and its cluster
    /// when it is a Galera node.
    pub async fn read(conn: &mut MySqlConnection) -> Result<Self, sqlx::Error> {
        let version: String = sqlx::query_scalar("SELECT VERSION()")
            .fetch_one(&mut *conn)
            .await?;
        let mariadb = version.contains("MariaDB");
        let cluster = match mariadb && cluster::is_node(&mut *conn).await? {
            true => Some(Cluster::read(conn).await?),
            false => None,
        };
        Ok(Engine {
            name: match (mariadb, &cluster) {
                (true, Some(_)) => GALERA,
                (true, None) => "mariadb",
                (false, _) => "mysql",
            },
            version,
            settings: BTreeMap::new(),
            cluster,
            default_isolation: "REPEATABLE READ",
        })
    }

    /// Whether the server is MariaDB's, alone or a Galera node: its
    /// settings, statements and errors are MariaDB's either way.
    pub fn is_mariadb(&self) -> bool {
        matches!(self.name, "mariadb" | GALERA)
    }

    /// This engine with its cluster as the node reads it now (its size, its
    /// state and its conflict counters change as the cluster runs); as it
    /// was, with the failure as its state, when the node does not answer.
    pub async fn now(&self, pool: &Pool) -> Engine {
        let mut engine = self.clone();
        if let (Some(known), Pool::MySql(pool)) = (&mut engine.cluster, pool) {
            let read = match pool.acquire().await {
                Ok(mut conn) => Cluster::read(&mut conn).await,
                Err(err) => Err(err),
            };
            match read {
                Ok(cluster) => *known = cluster,
                Err(err) => known.state = format!("not read: {err}"),
            }
        }
        engine
    }

    /// A 1213 named for what it may be on this engine: on Galera, another
    /// node's write; elsewhere a deadlock, as the server said.
    pub fn conflict_named<T>(
        &self,
        answer: Result<T, SqlError>,
        at_commit: bool,
    ) -> Result<T, SqlError> {
        match self.cluster {
            Some(_) => answer.map_err(|err| cluster::conflict_named(err, at_commit)),
            None => answer,
        }
    }

    /// Reads, on a session of the components' pool, what their
    /// transactions run with: the level of one that names none, and the
    /// settings that change what a level allows (none on a server without
    /// them).
    pub async fn read_session(&mut self, conn: &mut MySqlConnection) -> Result<(), sqlx::Error> {
        // MariaDB before 11.1 knows only the older name; MySQL 8 only the newer.
        let variable = match self.is_mariadb() {
            true => "tx_isolation",
            false => "transaction_isolation",
        };
        let level: String = sqlx::query_scalar(&format!("SELECT @@SESSION.{variable}"))
            .fetch_one(&mut *conn)
            .await?;
        self.default_isolation = level_name(&level);
        if !self.is_mariadb() {
            return Ok(());
        }
        if self.cluster.is_some() {
            cluster::read_settings(&mut *conn, &mut self.settings).await?;
        }
        let read: Result<String, _> = sqlx::query_scalar(&format!(
            "SELECT IF(@@SESSION.{SNAPSHOT_ISOLATION}, 'ON', 'OFF')"
        ))
        .fetch_one(conn)
        .await;
        // Before 10.6.18 the setting does not exist: nothing to name.
        if let Ok(value) = read {
            self.settings.insert(SNAPSHOT_ISOLATION.to_string(), value);
        }
        Ok(())
    }

    /// The settings as `name=value`, comma separated: what a canary's pass
    /// is remembered under.
    pub fn settings_text(&self) -> String {
        let settings: Vec<String> = self
            .settings
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect();
        settings.join(",")
    }

    /// How this server cuts a statement that outlives its call.
    pub fn statement_limit(&self) -> StatementLimit {
        match self.name {
            "postgresql" => StatementLimit::Postgres,
            _ if self.is_mariadb() => StatementLimit::MariaDb,
            _ => StatementLimit::MySql,
        }
    }
}

/// A level as the server spells it (`REPEATABLE-READ`), as traces name it.
fn level_name(server: &str) -> &'static str {
    match server {
        "READ-UNCOMMITTED" => "READ UNCOMMITTED",
        "READ-COMMITTED" => "READ COMMITTED",
        "SERIALIZABLE" => "SERIALIZABLE",
        _ => "REPEATABLE READ",
    }
}

#[cfg(test)]
mod tests {
    use sqlx::{Connection, Executor};

    use super::*;

    /// The name from the server, the level and the settings from the
    /// session components' transactions run in.
    #[tokio::test]
    async fn the_machines_mariadb_reads_as_mariadb_with_its_sessions_level() {
        let mut conn = MySqlConnection::connect("mysql://root@127.0.0.1:3306")
            .await
            .expect("MariaDB on 127.0.0.1:3306");
        let mut engine = Engine::read(&mut conn).await.unwrap();
        assert_eq!(engine.name, "mariadb");
        assert!(engine.version.contains("MariaDB"), "{}", engine.version);
        assert_eq!(engine.statement_limit(), StatementLimit::MariaDb);
        let session = format!(
            "SET SESSION {SNAPSHOT_ISOLATION} = ON; SET SESSION tx_isolation = 'READ-COMMITTED'"
        );
        conn.execute(session.as_str()).await.unwrap();
        engine.read_session(&mut conn).await.unwrap();
        assert_eq!(engine.default_isolation, "READ COMMITTED");
        assert_eq!(engine.settings[SNAPSHOT_ISOLATION], "ON");
        assert_eq!(engine.settings_text(), "innodb_snapshot_isolation=ON");
    }

    /// PostgreSQL's default level is READ COMMITTED, read from the session.
    #[tokio::test]
    async fn the_machines_postgresql_reads_as_postgresql_with_its_sessions_level() {
        let url = "postgres://postgres@127.0.0.1:5432/postgres";
        let pool = Pool::Postgres(sqlx::PgPool::connect(url).await.expect("PostgreSQL"));
        let mut engine = Engine::read_from(&pool).await.unwrap();
        assert_eq!(engine.name, "postgresql");
        assert!(
            engine.version.starts_with("PostgreSQL 1"),
            "{}",
            engine.version
        );
        assert_eq!(engine.statement_limit(), StatementLimit::Postgres);
        engine.default_isolation = "SERIALIZABLE";
        engine.read_session_from(&pool).await.unwrap();
        assert_eq!(engine.default_isolation, "READ COMMITTED");
        assert_eq!(engine.settings_text(), "");
    }

    #[test]
    fn a_level_reads_as_traces_name_it() {
        assert_eq!(level_name("READ-COMMITTED"), "READ COMMITTED");
        assert_eq!(level_name("SERIALIZABLE"), "SERIALIZABLE");
        assert_eq!(level_name("REPEATABLE-READ"), "REPEATABLE READ");
    }
}
