//! The database user components' SQL runs as, and their pool.
//!
//! The user is the lab's own, `couponlab_strategy_` and the first twelve
//! characters of the lab's id ([`strategy_user`]): users and roles are the
//! database server's, not a database's, and a user shared by the labs of
//! one server would carry every lab's grants, its password set by whichever
//! lab started last. It may, in the lab's database:
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

use std::time::Duration;

use anyhow::Context;
use sqlx::Executor;

use prometheus::IntCounter;

use super::GuestSql;
use super::engine::{Engine, SNAPSHOT_ISOLATION};
use super::lent::Limits;
use super::nodes::Nodes;
use super::orphans::Orphans;
use crate::credentials::derived_password;
use crate::db_target::{Pool, PoolSettings, STEP_LIMIT, Target, answered};

/// The `sql` capability's settings.
#[derive(Debug, Clone, clap::Args)]
pub struct SqlArgs {
    /// URL of the restricted user (PostgreSQL: role) components' SQL runs
    /// as, on the engine of DATABASE_URL. Unset: the server creates (or
    /// updates) the lab's own user `couponlab_strategy_<lab id>` with only
    /// the grants issuance needs, through DATABASE_URL.
    #[arg(long, env = "COUPONLAB_STRATEGY_DATABASE_URL")]
    pub strategy_database_url: Option<String>,

    /// Connections in the MySQL pool components' SQL runs on.
    #[arg(long, env = "COUPONLAB_DB_POOL_SIZE", default_value_t = 32)]
    pub db_pool_size: u32,

    /// innodb_lock_wait_timeout of every pooled connection, in seconds. Kept
    /// below the request timeout so a long lock wait surfaces as the typed
    /// lock-wait-timeout error rather than as a cancelled request.
    #[arg(long, env = "COUPONLAB_LOCK_WAIT_TIMEOUT_S", default_value_t = 5)]
    pub lock_wait_timeout_s: u32,

    /// Bytes of one SQL result.
    #[arg(long, env = "COUPONLAB_MAX_RESULT_BYTES", default_value_t = 8 << 20)]
    pub max_result_bytes: usize,

    /// Rows of one SQL result.
    #[arg(long, env = "COUPONLAB_MAX_RESULT_ROWS", default_value_t = 1_000_000)]
    pub max_result_rows: usize,

    /// Transactions one call may hold open at once.
    #[arg(long, env = "COUPONLAB_MAX_TRANSACTIONS_PER_CALL", default_value_t = 4)]
    pub max_transactions_per_call: u32,

    /// Connections of the pool named locks' sessions come from; 0 takes
    /// them from the components' pool, where lock waiters can hold every
    /// connection the lock's holder needs.
    #[arg(long, env = "COUPONLAB_LOCK_POOL_SIZE", default_value_t = 32)]
    pub lock_pool_size: u32,

    /// Named locks one call may hold at once.
    #[arg(long, env = "COUPONLAB_NAMED_LOCKS_PER_CALL", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub named_locks_per_call: u32,

    /// MariaDB's `innodb_snapshot_isolation` in components' sessions: `on`
    /// makes REPEATABLE READ refuse a write to a row changed since the
    /// transaction's snapshot (a serialization failure) instead of losing
    /// the update. Unset: the server's own setting.
    #[arg(long, env = "COUPONLAB_SNAPSHOT_ISOLATION")]
    pub snapshot_isolation: Option<Switch>,
}

/// A setting turned on or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Switch {
    On,
    Off,
}

/// How the user components' SQL runs as begins, unless the operator names
/// another: the lab's id follows.
const STRATEGY_USER_PREFIX: &str = "couponlab_strategy_";

/// Characters of the lab's id in its user's name: 48 bits tell labs apart,
/// and the name stays within MySQL's 32 characters.
const LAB_ID_IN_NAME: usize = 12;

/// The user (PostgreSQL: role) of the lab `lab_id`'s components. Only
/// letters and digits of the id are kept, so the name needs no quoting in
/// either engine's statements.
pub fn strategy_user(lab_id: &str) -> String {
    let id: String = lab_id
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(LAB_ID_IN_NAME)
        .collect();
    format!("{STRATEGY_USER_PREFIX}{}", id.to_ascii_lowercase())
}

/// What issuance needs, table by table (see the module's documentation).
const GRANTS: [&str; 3] = [
    "SELECT ON `{db}`.`members`",
    "SELECT, UPDATE (issued_count, version) ON `{db}`.`coupons`",
    "SELECT, INSERT, UPDATE, DELETE ON `{db}`.`coupon_issues`",
];

/// The administrative side the components' pool is set up through.
pub struct Admin<'a> {
    pub pool: &'a Pool,
    pub target: &'a Target,
    /// DATABASE_URL, from whose credentials the user's password is derived.
    pub url: &'a str,
    /// The lab's id, as its database keeps it (`lab_identity`), which names its user
    /// and sets its password apart from every other lab's.
    pub lab_id: &'a str,
    /// The server, as the server's own pool read it.
    pub engine: Engine,
}

/// Connects the components' pool as their user, creating the user (or
/// bringing it up to date) unless the operator named one. Every session
/// starts with its statements cut by the server within the call budget
/// `call`.
pub async fn connect(
    args: &SqlArgs,
    admin: Admin<'_>,
    call: Duration,
    sessions_ended: IntCounter,
) -> anyhow::Result<GuestSql> {
    let target = match &args.strategy_database_url {
        Some(url) => {
            let target = Target::parse(url, "COUPONLAB_STRATEGY_DATABASE_URL")?;
            anyhow::ensure!(
                target.dialect() == admin.target.dialect(),
                "COUPONLAB_STRATEGY_DATABASE_URL names another engine than DATABASE_URL"
            );
            target
        }
        None => {
            anyhow::ensure!(
                !admin.lab_id.is_empty(),
                "the lab's id is empty: its user would be every lab's"
            );
            let user = strategy_user(admin.lab_id);
            let password = derived_password(&format!("{user}\0{}", admin.lab_id), admin.url);
            let db = admin.target.database().unwrap_or_default();
            answered(
                "setting up the components' user",
                STEP_LIMIT,
                ensure_user(admin.pool, db, &user, &password),
            )
            .await?;
            admin.target.as_user(&user, &password)
        }
    };
    let mut engine = admin.engine;
    anyhow::ensure!(
        args.snapshot_isolation.is_none() || engine.is_mariadb(),
        "COUPONLAB_SNAPSHOT_ISOLATION is MariaDB's (10.6.18, 10.11.8 and later); this server is {}",
        engine.version
    );
    let limits = Limits {
        statement: engine.statement_limit(),
        call,
    };
    let session = || {
        let snapshot_isolation = match args.snapshot_isolation {
            Some(Switch::On) => format!("; SET SESSION {SNAPSHOT_ISOLATION} = ON"),
            Some(Switch::Off) => format!("; SET SESSION {SNAPSHOT_ISOLATION} = OFF"),
            None => String::new(),
        };
        Some(format!("{}{snapshot_isolation}", limits.session_default()))
    };
    let settings = |size| PoolSettings {
        size,
        lock_wait_timeout_s: args.lock_wait_timeout_s,
        extra: session(),
    };
    let pool = target
        .connect(&settings(args.db_pool_size), false)
        .await
        .context("cannot connect to the database as the components' user")?;
    // What components' sessions run with, read from one of them.
    answered("reading the components' sessions", STEP_LIMIT, async {
        Ok(engine.read_session_from(&pool).await?)
    })
    .await?;
    // Its connections open as named locks need them.
    let lock_pool =
        (args.lock_pool_size > 0).then(|| target.connect_lazy(&settings(args.lock_pool_size)));
    // On a cluster, every node, for the canary's calls spread over them.
    let addresses = engine
        .cluster
        .as_ref()
        .map(|cluster| &cluster.addresses[..]);
    let node_settings = (
        settings(args.db_pool_size),
        (args.lock_pool_size > 0).then(|| settings(args.lock_pool_size)),
    );
    let nodes = addresses.and_then(|addresses| {
        Nodes::new(&target, addresses, node_settings, sessions_ended.clone())
    });
    let orphans = Orphans::start(admin.pool.clone(), sessions_ended);
    Ok(GuestSql::new((pool, lock_pool), (limits, engine), args.clone(), orphans).with_nodes(nodes))
}

/// PostgreSQL's [`GRANTS`], one statement each, run in one transaction by
/// a superuser at every start. The lock on `pg_authid` makes servers that
/// start together take turns, whichever database each is on: run at once,
/// CREATE ROLE races (23505), and ALTER ROLE, GRANT and REVOKE fail with
/// "tuple concurrently updated". Each start revokes before it grants, so
/// grants given by hand since are gone again. Beyond the grants, what every
/// role may do by default and components may not: create in `public`, make
/// temporary tables (a `SELECT ... INTO TEMP` is a SELECT), store large
/// objects, end or cancel another session of their role. A role is the
/// server's, not the database's: each lab has its own ([`strategy_user`]).
const POSTGRES_ROLE: [&str; 14] = [
    "LOCK TABLE pg_catalog.pg_authid IN SHARE UPDATE EXCLUSIVE MODE",
    "DO $$ BEGIN \
         IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = '{role}') THEN \
             CREATE ROLE {role}; \
         END IF; \
     EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; \
     END $$",
    "ALTER ROLE {role} WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE \
     NOREPLICATION NOBYPASSRLS PASSWORD '{password}'",
    "REVOKE ALL ON DATABASE \"{db}\" FROM {role}",
    "REVOKE TEMPORARY ON DATABASE \"{db}\" FROM PUBLIC",
    "GRANT CONNECT ON DATABASE \"{db}\" TO {role}",
    "REVOKE CREATE ON SCHEMA public FROM PUBLIC, {role}",
    "GRANT USAGE ON SCHEMA public TO {role}",
    "REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {role}",
    "GRANT SELECT ON TABLE public.members TO {role}",
    "GRANT SELECT, UPDATE (issued_count, version) ON TABLE public.coupons TO {role}",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE public.coupon_issues TO {role}",
    "REVOKE EXECUTE ON FUNCTION pg_catalog.pg_terminate_backend(integer, bigint), \
     pg_catalog.pg_cancel_backend(integer) FROM PUBLIC",
    "REVOKE EXECUTE ON FUNCTION pg_catalog.lo_creat(integer), pg_catalog.lo_create(oid), \
     pg_catalog.lo_from_bytea(oid, bytea) FROM PUBLIC",
];

/// [`ensure_user`] on PostgreSQL: the role `role`, set up by
/// [`POSTGRES_ROLE`].
async fn ensure_role(
    admin: &sqlx::PgPool,
    db: &str,
    role: &str,
    password: &str,
) -> anyhow::Result<()> {
    let password = password.replace('\'', "''");
    let set_up = async {
        let mut tx = admin.begin().await?;
        for statement in POSTGRES_ROLE {
            let statement = statement
                .replace("{role}", role)
                .replace("{db}", db)
                .replace("{password}", &password);
            tx.execute(statement.as_str()).await?;
        }
        tx.commit().await
    };
    set_up.await.map_err(|err: sqlx::Error| {
        anyhow::anyhow!(
            "cannot set up the database role {role} that components' SQL runs as \
             ({err}). Connect DATABASE_URL as a superuser, or create a role yourself with the \
             grants in docs/architecture.md (the trust model) and give it as \
             COUPONLAB_STRATEGY_DATABASE_URL=postgres://user:password@host:port/{db}"
        )
    })
}

/// Creates the lab's `user` for the host this server connects from, or
/// brings its password and grants up to date. Every process of the lab
/// derives the same password from the lab's id and DATABASE_URL's
/// credentials, so none locks another out.
async fn ensure_user(admin: &Pool, db: &str, user: &str, password: &str) -> anyhow::Result<()> {
    let admin = match admin {
        Pool::MySql(admin) => admin,
        Pool::Postgres(admin) => return ensure_role(admin, db, user, password).await,
    };
    let mut conn = admin.acquire().await?;
    // The host part the server gives this connection: the user is created
    // for exactly that host.
    let host: String = sqlx::query_scalar("SELECT SUBSTRING_INDEX(USER(), '@', -1)")
        .fetch_one(&mut *conn)
        .await?;
    let account = format!("'{user}'@'{}'", host.replace('\'', "''"));
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
                "cannot set up the database user {user} that components' SQL runs as \
                 ({err}). Connect DATABASE_URL as a user that may CREATE USER and GRANT on the \
                 lab's tables, or create a user yourself with the grants in docs/architecture.md \
                 (the trust model) and give it as \
                 COUPONLAB_STRATEGY_DATABASE_URL=mysql://user:password@host:port/{db}"
            )
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::strategy_user;

    #[test]
    fn each_lab_has_a_user_of_its_own_that_mysql_can_name() {
        let lab = strategy_user("5f0c1d2e3a4b5c6d7e8f90a1b2c3d4e5");
        assert_eq!(lab, "couponlab_strategy_5f0c1d2e3a4b");
        assert!(lab.len() <= 32, "MySQL names a user in 32 characters");
        assert_ne!(lab, strategy_user("5f0c1d2e3a4c5c6d7e8f90a1b2c3d4e5"));
    }

    #[test]
    fn only_letters_and_digits_of_the_id_reach_the_statements() {
        assert_eq!(
            strategy_user("AB'; DROP ROLE x; --0123456789"),
            "couponlab_strategy_abdroprolex0"
        );
    }
}
