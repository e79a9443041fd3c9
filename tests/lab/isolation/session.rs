//! Real sessions for the isolation cases: each a task of its own running
//! its statements in order, so a step that blocks holds back only its own
//! session's later steps, as a client waiting on a lock would.

use std::time::Duration;

use sqlx::{Connection, Executor, MySqlConnection, PgConnection, Row};
use tokio::sync::{mpsc, oneshot};

const MARIADB: &str = "mysql://root@127.0.0.1:3306";
const POSTGRES: &str = "postgres://postgres@127.0.0.1:5432";
/// The first node of `cargo xtask galera up`'s cluster; the others follow.
const GALERA_FIRST_PORT: u16 = 3307;
/// What a Galera session waits for before each statement: every write set
/// the cluster committed before it, applied on its node (reads 1, updates
/// and deletes 2, inserts 4), so a case's steps meet what was committed
/// before them as on one node, and what differs is the locks and the
/// certification.
const GALERA_SYNC_WAIT: u8 = 7;
/// The database the cases' tables are made in, on each engine.
const DATABASE: &str = "couponlab_hermitage";
/// How long a blocked statement waits before the engine gives up on it:
/// what a case needs when its script waits on a session that waits on it.
const LOCK_WAIT_SECONDS: u32 = 5;
/// How often a step is checked for its answer.
const POLL: Duration = Duration::from_millis(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    MariaDb,
    MariaDbSnapshotIsolation,
    Postgres,
    /// The Galera cluster, session n on node n+1: two sessions of a case
    /// never share a node.
    Galera,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::MariaDb => "MariaDB",
            Engine::MariaDbSnapshotIsolation => "MariaDB, innodb_snapshot_isolation=ON",
            Engine::Postgres => "PostgreSQL",
            Engine::Galera => "Galera, each session on a node of its own (wsrep_sync_wait=7)",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Engine::MariaDb => "mariadb",
            Engine::MariaDbSnapshotIsolation => "mariadb_si",
            Engine::Postgres => "postgres",
            Engine::Galera => "galera",
        }
    }

    /// The server session `session` (0-2) connects to, the observer as
    /// session 0.
    fn server(self, session: usize) -> String {
        match self {
            Engine::Postgres => POSTGRES.to_string(),
            Engine::MariaDb | Engine::MariaDbSnapshotIsolation => MARIADB.to_string(),
            Engine::Galera => format!(
                "mysql://root@127.0.0.1:{}",
                GALERA_FIRST_PORT + session as u16
            ),
        }
    }

    /// What a session runs before its transaction: the lock wait bound,
    /// snapshot isolation on or off, the level.
    fn prologue(self, level: &str) -> Vec<String> {
        match self {
            Engine::Postgres => vec![
                format!("SET lock_timeout = '{LOCK_WAIT_SECONDS}s'"),
                format!("BEGIN ISOLATION LEVEL {level}"),
            ],
            Engine::MariaDb | Engine::MariaDbSnapshotIsolation | Engine::Galera => [
                format!("SET SESSION innodb_lock_wait_timeout = {LOCK_WAIT_SECONDS}"),
                format!(
                    "SET SESSION innodb_snapshot_isolation = {}",
                    if self == Engine::MariaDbSnapshotIsolation {
                        "ON"
                    } else {
                        "OFF"
                    }
                ),
            ]
            .into_iter()
            .chain(
                (self == Engine::Galera)
                    .then(|| format!("SET SESSION wsrep_sync_wait = {GALERA_SYNC_WAIT}")),
            )
            .chain([
                format!("SET TRANSACTION ISOLATION LEVEL {level}"),
                "BEGIN".to_string(),
            ])
            .collect(),
        }
    }
}

/// Whether the server on MariaDB's address is MariaDB (MySQL has no
/// `innodb_snapshot_isolation`).
pub async fn is_mariadb() -> bool {
    let mut conn = MySqlConnection::connect(MARIADB).await.expect("MariaDB");
    let version: String = sqlx::query_scalar("SELECT VERSION()")
        .fetch_one(&mut conn)
        .await
        .expect("VERSION()");
    version.contains("MariaDB")
}

/// Rows of `(id, value)` read, or the engine's error.
pub type Answer = Result<Vec<(i32, i32)>, String>;

enum Conn {
    MariaDb(MySqlConnection),
    Postgres(PgConnection),
}

/// Creates the cases' database on `engine` if it is missing.
pub async fn create_database(engine: Engine) {
    match engine {
        Engine::Postgres => {
            let url = format!("{POSTGRES}/postgres");
            let mut admin = PgConnection::connect(&url).await.expect("PostgreSQL");
            let exists = sqlx::query("SELECT 1 FROM pg_database WHERE datname = $1")
                .bind(DATABASE)
                .fetch_optional(&mut admin)
                .await
                .expect("pg_database");
            if exists.is_none() {
                sqlx::raw_sql(&format!("CREATE DATABASE {DATABASE}"))
                    .execute(&mut admin)
                    .await
                    .expect("the database");
            }
        }
        _ => {
            let server = engine.server(0);
            let mut admin = MySqlConnection::connect(&server).await.expect(&server);
            sqlx::raw_sql(&format!("CREATE DATABASE IF NOT EXISTS {DATABASE}"))
                .execute(&mut admin)
                .await
                .expect("the database");
        }
    }
}

impl Conn {
    /// A connection for session `session` (the observer: 0).
    async fn open(engine: Engine, session: usize) -> Conn {
        let url = format!("{}/{DATABASE}", engine.server(session));
        match engine {
            Engine::Postgres => {
                Conn::Postgres(PgConnection::connect(&url).await.expect("PostgreSQL"))
            }
            _ => Conn::MariaDb(MySqlConnection::connect(&url).await.expect(&url)),
        }
    }

    /// Runs `sql`; the rows it returns (a SELECT's) are its answer.
    async fn run(&mut self, sql: &str) -> Answer {
        let rows = match self {
            Conn::MariaDb(conn) => conn
                .fetch_all(sql)
                .await
                .map(|rows| rows.iter().map(|row| (row.get(0), row.get(1))).collect()),
            Conn::Postgres(conn) => conn
                .fetch_all(sql)
                .await
                .map(|rows| rows.iter().map(|row| (row.get(0), row.get(1))).collect()),
        };
        rows.map_err(|err| err.to_string())
    }

    /// Whether the session `id` waits for a lock, as the engine tells now.
    /// InnoDB's own report rather than `INNODB_TRX`: that view is refreshed
    /// only after 100 ms without a reader, and other tests read it too.
    async fn waits(&mut self, id: i64) -> bool {
        match self {
            Conn::MariaDb(conn) => {
                let row = sqlx::raw_sql("SHOW ENGINE INNODB STATUS")
                    .fetch_one(&mut *conn)
                    .await
                    .expect("SHOW ENGINE INNODB STATUS");
                let status: String = row.get(2);
                let thread = format!("thread id {id},");
                status.split("---TRANSACTION").any(|transaction| {
                    transaction.contains(&thread) && transaction.contains("LOCK WAIT")
                })
            }
            Conn::Postgres(_) => {
                let sql = format!(
                    "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = {id} AND wait_event_type = 'Lock'"
                );
                self.number(&sql).await > 0
            }
        }
    }

    /// A number the engine answers `sql` with.
    async fn number(&mut self, sql: &str) -> i64 {
        match self {
            Conn::MariaDb(conn) => {
                let row = sqlx::query(sql).fetch_one(conn).await.expect(sql);
                row.try_get::<i64, _>(0)
                    .or_else(|_| row.try_get::<u64, _>(0).map(|n| n as i64))
                    .expect(sql)
            }
            Conn::Postgres(conn) => {
                let row = sqlx::query(sql).fetch_one(conn).await.expect(sql);
                row.try_get::<i64, _>(0)
                    .or_else(|_| row.try_get::<i32, _>(0).map(i64::from))
                    .expect(sql)
            }
        }
    }
}

/// A step's answer, once it comes.
pub enum Pending {
    Answered(Answer),
    Waiting(oneshot::Receiver<Answer>),
}

impl Pending {
    pub async fn answer(self) -> Answer {
        match self {
            Pending::Answered(answer) => answer,
            Pending::Waiting(receiver) => receiver
                .await
                .unwrap_or_else(|_| Err("the session ended".into())),
        }
    }
}

struct Session {
    /// The engine's id of the session, to ask whether it waits.
    id: i64,
    steps: mpsc::UnboundedSender<(String, oneshot::Sender<Answer>)>,
    /// On a cluster, a connection to the session's node, which alone
    /// knows whether the session waits for a lock (the observer's, else).
    watcher: Option<Conn>,
}

/// One case on one engine and level: its table, three sessions in their
/// transactions, and a session of its own to watch them.
pub struct Run {
    table: String,
    observer: Conn,
    sessions: Vec<Session>,
    /// Whether a step was seen waiting for a lock.
    pub blocked: bool,
}

impl Run {
    pub async fn start(engine: Engine, level: &str, case: &str) -> Run {
        Run::start_as("hermitage", engine, level, case).await
    }

    /// The same, on a table of `owner`'s: tests that run at once never
    /// share one.
    pub async fn start_as(owner: &str, engine: Engine, level: &str, case: &str) -> Run {
        let table: String = format!("{owner}_{}_{level}_{case}", engine.tag())
            .to_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let mut observer = Conn::open(engine, 0).await;
        for sql in [
            format!("DROP TABLE IF EXISTS {table}"),
            format!("CREATE TABLE {table} (id int PRIMARY KEY, value int)"),
            format!("INSERT INTO {table} (id, value) VALUES (1, 10), (2, 20)"),
        ] {
            observer.run(&sql).await.expect(&sql);
        }
        let mut sessions = Vec::new();
        for session in 0..3 {
            let mut conn = Conn::open(engine, session).await;
            let id = conn
                .number(match engine {
                    Engine::Postgres => "SELECT pg_backend_pid()",
                    _ => "SELECT CONNECTION_ID()",
                })
                .await;
            for sql in engine.prologue(level) {
                let done = conn.run(&sql).await;
                // MySQL has no snapshot isolation to turn off.
                if !sql.ends_with("innodb_snapshot_isolation = OFF") {
                    done.expect(&sql);
                }
            }
            let (steps, mut queue) = mpsc::unbounded_channel::<(String, oneshot::Sender<Answer>)>();
            tokio::spawn(async move {
                let mut failed: Option<String> = None;
                while let Some((sql, reply)) = queue.recv().await {
                    let answer = match &failed {
                        Some(error) => Err(format!("not run: rolled back after {error}")),
                        None => conn.run(&sql).await,
                    };
                    if let (None, Err(error)) = (&failed, &answer) {
                        // A client whose statement failed rolls its
                        // transaction back, as PostgreSQL insists; MariaDB
                        // undoes only the statement (a lock wait timeout,
                        // a snapshot isolation refusal) and would commit
                        // the rest.
                        let _ = conn.run("ROLLBACK").await;
                        failed = Some(error.clone());
                    }
                    let _ = reply.send(answer);
                }
                let _ = conn.run("ROLLBACK").await;
            });
            let watcher = match engine {
                Engine::Galera => Some(Conn::open(engine, session).await),
                _ => None,
            };
            sessions.push(Session { id, steps, watcher });
        }
        Run {
            table,
            observer,
            sessions,
            blocked: false,
        }
    }

    /// Sends `sql` (`test` names the case's table) to session `t`, and
    /// returns once it is answered or the engine says the session waits
    /// for a lock.
    pub async fn step(&mut self, t: usize, sql: &str) -> Pending {
        let sql = sql.replace("test", &self.table);
        let (reply, mut answer) = oneshot::channel();
        let Run {
            sessions, observer, ..
        } = self;
        let session = &mut sessions[t];
        session
            .steps
            .send((sql, reply))
            .expect("the session's task");
        let watcher = session.watcher.as_mut().unwrap_or(observer);
        loop {
            match answer.try_recv() {
                Ok(answered) => return Pending::Answered(answered),
                Err(oneshot::error::TryRecvError::Closed) => {
                    return Pending::Answered(Err("the session ended".into()));
                }
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
            if watcher.waits(session.id).await {
                self.blocked = true;
                return Pending::Waiting(answer);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The table's rows once every session has ended its transaction.
    pub async fn rows(&mut self) -> Vec<(i32, i32)> {
        let sql = format!("SELECT id, value FROM {} ORDER BY id", self.table);
        self.observer.run(&sql).await.expect(&sql)
    }

    /// Ends the sessions (rolling back what is open) and drops the table.
    pub async fn finish(mut self) {
        self.sessions.clear();
        let sql = format!("DROP TABLE IF EXISTS {}", self.table);
        // The sessions roll back as their tasks end; the drop waits for them.
        let _ = self.observer.run(&sql).await;
    }
}
