//! The test harness: a server per test, with its own database, its own
//! coupon id range (so Redis keys never collide between tests), and the
//! components it asks for.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use couponlab::Lab;
use couponlab::config::{CanaryMode, Config};
use couponlab::runtime::sql::statement::numbered_for_postgres;
use futures::future::join_all;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::Executor;
use sqlx::mysql::{MySqlPool, MySqlPoolOptions};
use sqlx::postgres::{PgPool, PgPoolOptions};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::turns::{self, Turn};

pub const MYSQL: &str = "mysql://root@127.0.0.1:3306";
pub const POSTGRES: &str = "postgres://postgres@127.0.0.1:5432";
pub const REDIS: &str = "redis://127.0.0.1:6379";

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A number unique to this test in this run, and across runs.
fn unique() -> u64 {
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    micros * 100 + NEXT.fetch_add(1, Ordering::Relaxed) % 100
}

/// Where `cargo xtask strategies` leaves every built component, fixtures included.
pub fn components_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../strategies/target/wasm32-wasip2/release")
}

pub fn component(name: &str) -> PathBuf {
    let file = format!("{name}.wasm");
    // The Python and JavaScript ones are built beside the Rust ones.
    let polyglot = components_dir().join("../../polyglot/out").join(&file);
    let path = if polyglot.exists() {
        polyglot
    } else {
        components_dir().join(file)
    };
    assert!(
        path.exists(),
        "{} is missing: run `cargo xtask strategies` (cargo xtask test does)",
        path.display()
    );
    path
}

/// The `couponlab` binary of this build. It is another package's, so cargo
/// names no path for it here: it lies beside the directory this test binary
/// is in (`<target>/release/deps/lab-…` and `<target>/release/couponlab`),
/// built by the same `cargo test --workspace`.
pub fn server_binary() -> PathBuf {
    let test = std::env::current_exe().expect("the test binary's path");
    let binary = test
        .parent()
        .and_then(Path::parent)
        .expect("the test binary lies in <target>/<profile>/deps")
        .join("couponlab");
    assert!(
        binary.exists(),
        "{} is missing: build the workspace (`cargo test --release --workspace`, as `cargo xtask test` does)",
        binary.display()
    );
    binary
}

/// One compile cache for every test server, the workspace's: each
/// component is compiled once per build of it, not once per test.
pub fn compile_cache() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/compile-cache")
}

/// Redis shared with the other tests, as a test server holds it: a test
/// that talks to Redis without a server holds this, so that it never runs
/// under a test that floods Redis for everyone.
pub async fn sharing_redis() -> Turn {
    turns::shared(REDIS_LOAD).await
}

pub struct TestLab {
    pub base: String,
    pub client: reqwest::Client,
    /// A pool on this test's database, for checking what the server wrote.
    pub db: TestDb,
    pub redis: couponlab::redis_target::RedisConn,
    pub strategy_dir: PathBuf,
    /// The server's configuration, for starting more processes like it.
    pub config: Config,
    pub db_name: String,
    stop: Option<oneshot::Sender<()>>,
    server: Option<ServerTask>,
    _redis_db: Option<RedisDb>,
    /// The test's hold on [`REDIS_LOAD`], released with the test.
    _load: Turn,
}

/// A pool on a test's database, of the engine its server runs on.
pub enum TestDb {
    MySql(MySqlPool),
    Postgres(PgPool),
}

impl TestDb {
    /// The pool of a test that runs on MySQL (the default).
    pub fn mysql(&self) -> &MySqlPool {
        match self {
            TestDb::MySql(pool) => pool,
            TestDb::Postgres(_) => panic!("this test's server runs on PostgreSQL"),
        }
    }

    /// `statement`, written with `?` placeholders, with its `binds`.
    async fn rows<T>(&self, statement: &str, binds: &[i64]) -> Vec<T>
    where
        T: Send + Unpin,
        for<'r> T:
            sqlx::FromRow<'r, sqlx::mysql::MySqlRow> + sqlx::FromRow<'r, sqlx::postgres::PgRow>,
    {
        match self {
            TestDb::MySql(pool) => {
                let mut query = sqlx::query_as(statement);
                for &bind in binds {
                    query = query.bind(bind);
                }
                query.fetch_all(pool).await.unwrap()
            }
            TestDb::Postgres(pool) => {
                let statement = numbered_for_postgres(statement);
                let mut query = sqlx::query_as(&statement);
                for &bind in binds {
                    query = query.bind(bind);
                }
                query.fetch_all(pool).await.unwrap()
            }
        }
    }

    async fn close(&self) {
        match self {
            TestDb::MySql(pool) => pool.close().await,
            TestDb::Postgres(pool) => pool.close().await,
        }
    }
}

/// Which database a test's server runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestEngine {
    MySql,
    Postgres,
}

/// How a test wants its server.
pub struct Setup {
    pub components: Vec<&'static str>,
    pub engine: TestEngine,
    pub redis_url: String,
    pub tune: Box<dyn FnOnce(&mut Config) + Send>,
    own_redis_db: bool,
    alone: bool,
    /// The database's name, when the test gives one (else one of its own).
    database_name: Option<String>,
}

/// Every test server holds this turn shared; a test that floods Redis for
/// everyone (MONITOR, a command storm) holds it alone, so other tests'
/// timings never run under its load.
const REDIS_LOAD: &str = "redis-load";

/// Redis logical databases tests may take for themselves (0 is shared, 15
/// belongs to the DELETE /lab/data test).
const OWN_REDIS_DBS: std::ops::RangeInclusive<u8> = 1..=14;

/// How long a test waits for a Redis database of its own.
const OWN_REDIS_DB_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

/// A Redis logical database held by one test (its turn at it); free again
/// when dropped.
pub struct RedisDb {
    pub number: u8,
    _turn: Turn,
}

impl RedisDb {
    /// Waits for a free database and empties it.
    pub async fn take() -> RedisDb {
        let names: Vec<String> = OWN_REDIS_DBS.map(|db| format!("redis-db-{db}")).collect();
        let (index, turn) = turns::first_free(&names, OWN_REDIS_DB_WAIT).await;
        let db = *OWN_REDIS_DBS.start() + index as u8;
        let mut redis = connect_redis(&format!("{REDIS}/{db}"), false)
            .await
            .expect("Redis answers");
        let _: () = redis::cmd("FLUSHDB").query_async(&mut redis).await.unwrap();
        RedisDb {
            number: db,
            _turn: turn,
        }
    }
}

impl Setup {
    pub fn with(components: &[&'static str]) -> Self {
        Setup {
            components: components.to_vec(),
            engine: TestEngine::MySql,
            redis_url: format!("{REDIS}/0"),
            tune: Box::new(|_| {}),
            own_redis_db: false,
            alone: false,
            database_name: None,
        }
    }

    /// Names the server's database `name`: another engine's lab may have
    /// a database of the same name.
    pub fn database_named(mut self, name: &str) -> Self {
        self.database_name = Some(name.to_string());
        self
    }

    /// Runs the server on PostgreSQL instead of MariaDB.
    pub fn on_postgres(mut self) -> Self {
        self.engine = TestEngine::Postgres;
        self
    }

    /// Runs with no other test at the same time: the test loads Redis for
    /// every client.
    pub fn alone(mut self) -> Self {
        self.alone = true;
        self
    }

    /// A Redis logical database of this test's own, for what Redis keeps
    /// under fixed names (streams, consumer groups); taken (and emptied) when
    /// the server starts, in place of `redis_url`.
    pub fn own_redis_db(mut self) -> Self {
        self.own_redis_db = true;
        self
    }

    pub fn redis_url(mut self, url: impl Into<String>) -> Self {
        self.redis_url = url.into();
        self
    }

    /// Changes the config after the tunings before it.
    pub fn tune(mut self, tune: impl FnOnce(&mut Config) + Send + 'static) -> Self {
        let before = std::mem::replace(&mut self.tune, Box::new(|_| {}));
        self.tune = Box::new(move |config| {
            before(config);
            tune(config);
        });
        self
    }

    pub async fn start(mut self) -> TestLab {
        let redis_db = if self.own_redis_db {
            let db = RedisDb::take().await;
            self.redis_url = format!("{REDIS}/{}", db.number);
            Some(db)
        } else {
            None
        };
        let load = if self.alone {
            turns::alone(REDIS_LOAD).await
        } else {
            turns::shared(REDIS_LOAD).await
        };
        STALE_DATABASES_DROPPED
            .get_or_init(drop_stale_databases)
            .await;
        let id = unique();
        let db_name = (self.database_name.take()).unwrap_or_else(|| format!("couponlab_test_{id}"));
        let strategy_dir = std::env::temp_dir().join(format!("couponlab-test-{id}"));
        std::fs::create_dir_all(&strategy_dir).unwrap();
        for name in &self.components {
            std::fs::copy(component(name), strategy_dir.join(format!("{name}.wasm"))).unwrap();
        }

        let mut config = Config::parse_from_env();
        config.bind = "127.0.0.1:0".parse().unwrap();
        let server = match self.engine {
            TestEngine::MySql => MYSQL,
            TestEngine::Postgres => POSTGRES,
        };
        // The test's own pool reaches the database directly, whatever link
        // the server's goes through.
        let direct_url = format!("{server}/{db_name}");
        config.database_url = direct_url.clone();
        config.redis_url = self.redis_url.clone();
        config.strategy_dir = strategy_dir.clone();
        config.compile_cache = compile_cache();
        config.capabilities.sql.db_pool_size = 20;
        config.max_instances = 600;
        // The many servers of the tests serve their components at once;
        // the canary's own tests turn it on.
        config.canary = CanaryMode::Off;
        // Every test is a lab of its own, its coupon ids apart from the
        // others' on the shared Redis database.
        config.share_redis_database = true;
        (self.tune)(&mut config);

        let (base, stop, server) = serve(&config).await;

        // Coupon ids start at a number unique to this test, so the Redis keys
        // named after them are this test's alone.
        let db = match self.engine {
            TestEngine::MySql => {
                let db = MySqlPoolOptions::new()
                    .max_connections(4)
                    .connect(&direct_url)
                    .await
                    .unwrap();
                db.execute(format!("ALTER TABLE coupons AUTO_INCREMENT = {id}").as_str())
                    .await
                    .unwrap();
                TestDb::MySql(db)
            }
            TestEngine::Postgres => {
                let db = PgPoolOptions::new()
                    .max_connections(4)
                    .connect(&direct_url)
                    .await
                    .unwrap();
                let restart = format!("ALTER TABLE coupons ALTER COLUMN id RESTART WITH {id}");
                db.execute(restart.as_str()).await.unwrap();
                TestDb::Postgres(db)
            }
        };
        // The server's Redis, or the default one when a test points the
        // server at a Redis that is down.
        let redis = match connect_redis(&self.redis_url, config.redis_cluster).await {
            Some(redis) => redis,
            None => connect_redis(&format!("{REDIS}/0"), false)
                .await
                .expect("Redis answers"),
        };
        TestLab {
            base,
            client: reqwest::Client::builder()
                .pool_max_idle_per_host(1024)
                .build()
                .unwrap(),
            db,
            redis,
            strategy_dir,
            config,
            db_name,
            stop: Some(stop),
            server: Some(server),
            _redis_db: redis_db,
            _load: load,
        }
    }
}

type ServerTask = tokio::task::JoinHandle<anyhow::Result<()>>;

/// Starts a server on `config` and a free port: its base URL, its stop
/// switch and its task.
async fn serve(config: &Config) -> (String, oneshot::Sender<()>, ServerTask) {
    let lab = Lab::start(config.clone()).await.expect("the server starts");
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(couponlab::serve(listener, lab, async move {
        let _ = stopped.await;
    }));
    (base, stop, server)
}

async fn connect_redis(url: &str, cluster: bool) -> Option<couponlab::redis_target::RedisConn> {
    couponlab::redis_target::RedisTarget::open(url, cluster)
        .ok()?
        .connect(std::time::Duration::from_secs(10))
        .await
        .ok()
}

static STALE_DATABASES_DROPPED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();

/// Drops the databases of test runs that ended an hour ago or more without
/// cleaning up (a test that panics never reaches `finish`). Test database
/// names carry their creation time, so runs going on now are left alone.
async fn drop_stale_databases() {
    // Once in a while for the whole machine, not once per test process
    // (`cargo nextest` runs a process for each test).
    let _turn = turns::alone("stale-sweep").await;
    if !turns::mark_unless_marked_within("stale-swept", std::time::Duration::from_secs(600)) {
        return;
    }
    let Ok(pool) = MySqlPoolOptions::new()
        .max_connections(1)
        .connect(MYSQL)
        .await
    else {
        return;
    };
    let names: Vec<String> = sqlx::query_scalar("SHOW DATABASES LIKE 'couponlab\\_test\\_%'")
        .fetch_all(&pool)
        .await
        .unwrap_or_default();
    let hour_ago = (SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
        - 3_600_000_000)
        * 100;
    for name in names {
        let created = name.trim_start_matches("couponlab_test_").parse::<u64>();
        if created.is_ok_and(|created| created < hour_ago) {
            let _ = pool
                .execute(format!("DROP DATABASE IF EXISTS `{name}`").as_str())
                .await;
        }
    }
    // Every test server makes its lab's components' user and grants it the
    // lab's tables; users and grants outlive the databases they name. A
    // user none of whose grants names a database left is a finished lab's.
    let stale_users: Vec<(String, String)> = sqlx::query_as(
        "SELECT DISTINCT User, Host FROM mysql.tables_priv t \
         WHERE User LIKE 'couponlab\\_strategy%' AND NOT EXISTS ( \
             SELECT 1 FROM mysql.tables_priv live \
             JOIN information_schema.SCHEMATA s ON s.SCHEMA_NAME = live.Db \
             WHERE live.User = t.User AND live.Host = t.Host)",
    )
    .fetch_all(&pool)
    .await
    .unwrap_or_default();
    for (user, host) in stale_users {
        let _ = pool
            .execute(format!("DROP USER IF EXISTS '{user}'@'{host}'").as_str())
            .await;
    }
    pool.close().await;
    drop_finished_labs_roles().await;
}

/// Drops the PostgreSQL roles of labs whose databases are gone: a role is
/// the server's and outlives them. A role with no privilege left in any
/// database depends on nothing; a lab's role gets its privileges in the
/// transaction that makes it, so a lab starting now keeps its role.
async fn drop_finished_labs_roles() {
    let Ok(pool) = PgPoolOptions::new()
        .max_connections(1)
        .connect(&format!("{POSTGRES}/postgres"))
        .await
    else {
        return;
    };
    let roles: Vec<String> = sqlx::query_scalar(
        "SELECT rolname::text FROM pg_roles r WHERE rolname LIKE 'couponlab\\_strategy%' \
         AND NOT EXISTS (SELECT 1 FROM pg_shdepend d \
                         WHERE d.refclassid = 'pg_authid'::regclass AND d.refobjid = r.oid)",
    )
    .fetch_all(&pool)
    .await
    .unwrap_or_default();
    for role in roles {
        let _ = pool
            .execute(format!("DROP ROLE IF EXISTS \"{role}\"").as_str())
            .await;
    }
    pool.close().await;
}

/// A response: its status and its JSON body.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub body: Value,
}

impl Reply {
    /// Asserts a success envelope and returns its `response`.
    pub fn expect_ok(&self) -> &Value {
        assert!(
            self.status.is_success(),
            "expected success, got {} {}",
            self.status,
            self.body
        );
        assert_eq!(self.body["success"], json!(true), "{}", self.body);
        assert_eq!(self.body["error"], Value::Null, "{}", self.body);
        &self.body["response"]
    }

    /// Asserts a failure envelope with `status` and returns its message.
    pub fn fails_with(&self, status: u16) -> &str {
        assert_eq!(self.status.as_u16(), status, "{}", self.body);
        assert_eq!(self.body["success"], json!(false), "{}", self.body);
        assert_eq!(self.body["response"], Value::Null, "{}", self.body);
        assert_eq!(self.body["error"]["status"], json!(status), "{}", self.body);
        let message = self.body["error"]["message"]
            .as_str()
            .expect("an error message");
        assert!(!message.is_empty());
        message
    }

    /// Asserts a failure envelope with `status` whose message starts with
    /// `prefix` (an outcome name, and maybe more); returns the message.
    pub fn fails_as(&self, status: u16, prefix: &str) -> &str {
        let message = self.fails_with(status);
        assert!(
            message.starts_with(prefix),
            "expected {prefix}, got {message}"
        );
        message
    }
}

/// Where a test process takes the ports it hands to servers of its own:
/// below the kernel's ephemeral range (32768 up), so no other test's
/// `bind(":0")` or outgoing connection takes one between the check and the
/// server's bind. Each test process takes ports from a block of its own.
const OWN_PORTS: std::ops::Range<u16> = 20_000..30_000;
const PORTS_PER_PROCESS: u16 = 50;

static NEXT_PORT: AtomicU64 = AtomicU64::new(0);

/// A port nobody listens on now, for a server of a test's own. The
/// couponlab binary binds `COUPONLAB_BIND` itself and takes no inherited
/// socket, so it is handed a number: [`TestLab::serve_process`] starts it
/// again on another port when the port was taken after all.
pub fn free_port() -> u16 {
    let blocks = (OWN_PORTS.end - OWN_PORTS.start) / PORTS_PER_PROCESS;
    let block_start =
        OWN_PORTS.start + (std::process::id() % u32::from(blocks)) as u16 * PORTS_PER_PROCESS;
    (0..u64::from(PORTS_PER_PROCESS) * 4)
        .map(|_| {
            let step = NEXT_PORT.fetch_add(1, Ordering::Relaxed) % u64::from(PORTS_PER_PROCESS);
            block_start + step as u16
        })
        .find(|&port| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok())
        .expect("a free port in this process's block")
}

/// A `couponlab serve` process of a test's own and where it answers.
pub struct ServerProcess {
    pub process: tokio::process::Child,
    /// `http://127.0.0.1:<port>`
    pub base: String,
}

/// How many ports a server process is tried on before the test gives up.
const SERVE_ATTEMPTS: usize = 5;

impl TestLab {
    pub async fn request(&self, method: reqwest::Method, path: &str, body: Option<&str>) -> Reply {
        self.request_at(&self.base, method, path, body).await
    }

    /// A request to the server at `base` (another process of the test's).
    pub async fn request_at(
        &self,
        base: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<&str>,
    ) -> Reply {
        let mut request = self.client.request(method, format!("{base}{path}"));
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        let response = request.send().await.expect("the server answers");
        let status = response.status();
        let text = response.text().await.unwrap();
        let body =
            serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON ({status}): {text}"));
        Reply { status, body }
    }

    /// `couponlab serve` as a process of its own on this test's database,
    /// Redis and components, with `env` on top, once it answers (at most
    /// `limit`). A port taken between [`free_port`] and the process's bind
    /// ends the process: it is started again on another port.
    pub async fn serve_process(
        &self,
        env: &[(&str, &str)],
        stdout: impl Fn() -> std::process::Stdio,
        limit: std::time::Duration,
    ) -> ServerProcess {
        self.serve_command(|| self.command(&["serve"], env), stdout, limit)
            .await
    }

    /// As [`TestLab::serve_process`], with `command` to be set further (its
    /// working directory, say) and given `COUPONLAB_BIND` here.
    pub async fn serve_command(
        &self,
        command: impl Fn() -> tokio::process::Command,
        stdout: impl Fn() -> std::process::Stdio,
        limit: std::time::Duration,
    ) -> ServerProcess {
        for _ in 0..SERVE_ATTEMPTS {
            let bind = format!("127.0.0.1:{}", free_port());
            let mut process = command()
                .env("COUPONLAB_BIND", &bind)
                .stdout(stdout())
                .spawn()
                .expect("the couponlab binary starts");
            let base = format!("http://{bind}");
            let started = std::time::Instant::now();
            let answered = loop {
                if process.try_wait().unwrap().is_some() {
                    break false;
                }
                let url = format!("{base}/lab/strategies");
                if self.client.get(url).send().await.is_ok() {
                    break true;
                }
                assert!(
                    started.elapsed() < limit,
                    "the server at {base} did not answer within {limit:?}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            };
            if answered {
                return ServerProcess { process, base };
            }
        }
        panic!("the server process exited on {SERVE_ATTEMPTS} ports in turn");
    }

    pub async fn post(&self, path: &str, body: Value) -> Reply {
        self.request(reqwest::Method::POST, path, Some(&body.to_string()))
            .await
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.request(reqwest::Method::GET, path, None).await
    }

    /// A route that answers plain text (`/metrics`).
    pub async fn get_text(&self, path: &str) -> String {
        let response = self.client.get(format!("{}{path}", self.base)).send();
        response
            .await
            .expect("the server answers")
            .text()
            .await
            .unwrap()
    }

    /// Creates `count` members; returns their ids.
    pub async fn members(&self, count: u64) -> Vec<u64> {
        let reply = self.post("/lab/members", json!({ "count": count })).await;
        let created = reply.expect_ok();
        let (first, last) = (
            created["firstId"].as_u64().unwrap(),
            created["lastId"].as_u64().unwrap(),
        );
        assert_eq!(last - first + 1, count);
        (first..=last).collect()
    }

    /// `count` new members and a new coupon of `total`: how most tests begin.
    pub async fn members_and_coupon(&self, count: u64, total: u64) -> (Vec<u64>, u64) {
        (self.members(count).await, self.coupon(total).await)
    }

    /// Creates a coupon with `total`; returns its id.
    pub async fn coupon(&self, total: u64) -> u64 {
        let reply = self
            .post(
                "/lab/coupons",
                json!({ "name": "test coupon", "totalCount": total }),
            )
            .await;
        reply.expect_ok()["id"].as_u64().unwrap()
    }

    /// Seeds the limited drop of `coupon` with a stock of `quantity`.
    pub async fn seed_drop(&self, coupon: u64, quantity: u64) -> Reply {
        self.post(
            &format!("/lab/drop/coupons/{coupon}/seed"),
            json!({ "quantity": quantity }),
        )
        .await
    }

    /// Gives back `member`'s reservation of the drop of `coupon`, made with
    /// the idempotency key `key`.
    pub async fn cancel_drop(&self, coupon: u64, member: u64, key: &str) -> Reply {
        self.post(
            &format!("/lab/drop/coupons/{coupon}/cancel"),
            json!({ "memberId": member, "idempotencyKey": key }),
        )
        .await
    }

    /// A new coupon of `total` that `method` can issue at once: the limited
    /// drop (REDIS_LUA_GATE) sells only a seeded stock, seeded here with the
    /// whole total.
    pub async fn coupon_for(&self, method: &str, total: u64) -> u64 {
        let coupon = self.coupon(total).await;
        if method == "REDIS_LUA_GATE" {
            self.seed_drop(coupon, total).await.expect_ok();
        }
        coupon
    }

    pub async fn issue(&self, coupon: u64, member: u64, method: &str) -> Reply {
        self.post(
            &format!("/lab/coupons/{coupon}/issue"),
            json!({ "memberId": member, "method": method }),
        )
        .await
    }

    /// An issue request with an idempotency key: what test components read
    /// as the scenario to play.
    pub async fn issue_keyed(&self, coupon: u64, member: u64, method: &str, key: &str) -> Reply {
        self.post(
            &format!("/lab/coupons/{coupon}/issue"),
            json!({ "memberId": member, "method": method, "idempotencyKey": key }),
        )
        .await
    }

    /// Every one of `members` asks for `coupon` at once; the replies in
    /// their order.
    pub async fn issue_all(&self, coupon: u64, members: &[u64], method: &str) -> Vec<Reply> {
        join_all(members.iter().map(|&m| self.issue(coupon, m, method))).await
    }

    pub async fn result(&self, coupon: u64) -> Value {
        self.get(&format!("/lab/coupons/{coupon}/result"))
            .await
            .expect_ok()
            .clone()
    }

    /// Waits (at most two minutes: a loaded shared machine can slow a drain
    /// tenfold) until `accepted` requests of `coupon` were answered 202 and
    /// every one has its outcome; returns the result.
    pub async fn drained(&self, coupon: u64, accepted: u64) -> Value {
        let started = std::time::Instant::now();
        loop {
            let result = self.result(coupon).await;
            if result["accepted"] == json!(accepted) && result["pending"] == json!(0) {
                return result;
            }
            assert!(
                started.elapsed() < DRAIN,
                "not drained after {DRAIN:?}: {result}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// The issue rows of `coupon`, counted in the table.
    pub async fn issue_rows(&self, coupon: u64) -> usize {
        let statement = "SELECT COUNT(*) FROM coupon_issues WHERE coupon_id = ?";
        self.number_of(statement, &[coupon]).await as usize
    }

    /// The one number `query` selects from this test's database.
    /// The lab's own id, as its first server made it in its database.
    pub async fn lab_id(&self) -> String {
        let rows: Vec<(String,)> = self.db.rows("SELECT id FROM lab_identity", &[]).await;
        rows[0].0.trim().to_string()
    }

    pub async fn number(&self, query: &str) -> i64 {
        self.number_of(query, &[]).await
    }

    /// The one number `query`, with `binds`, selects from this test's
    /// database.
    pub async fn number_of(&self, query: &str, binds: &[u64]) -> i64 {
        let binds: Vec<i64> = binds.iter().map(|&bind| bind as i64).collect();
        let rows: Vec<(i64,)> = self.db.rows(query, &binds).await;
        rows[0].0
    }

    /// Runs `statement` with `binds` on this test's database, for what a
    /// test writes behind the server's back.
    pub async fn execute(&self, statement: &str, binds: &[u64]) {
        match &self.db {
            TestDb::MySql(pool) => {
                let mut query = sqlx::query(statement);
                for &bind in binds {
                    query = query.bind(bind);
                }
                query.execute(pool).await.unwrap();
            }
            TestDb::Postgres(pool) => {
                let statement = numbered_for_postgres(statement);
                let mut query = sqlx::query(&statement);
                for &bind in binds {
                    query = query.bind(bind as i64);
                }
                query.execute(pool).await.unwrap();
            }
        }
    }

    /// Asserts that the database refuses what Redis let through for
    /// `method`: `member`, once `coupon` is sold out in the database alone
    /// (its guarded UPDATE touches no row), and a member the database does
    /// not know (its INSERT fails). Leaves the coupon sold out there.
    pub async fn assert_database_refuses(&self, coupon: u64, member: u64, method: &str) {
        self.execute(
            "UPDATE coupons SET issued_count = total_count WHERE id = ?",
            &[coupon],
        )
        .await;
        self.issue(coupon, member, method)
            .await
            .fails_as(409, "SOLD_OUT_AT_DB");
        self.issue(coupon, 999_999_999, method)
            .await
            .fails_as(422, "UNKNOWN_MEMBER");
    }

    /// Runs `command` on this test's Redis, which must not fail.
    pub async fn redis_query<T: redis::FromRedisValue>(&self, command: &redis::Cmd) -> T {
        command.query_async(&mut self.redis.clone()).await.unwrap()
    }

    /// Members with an issue row for `coupon`, sorted.
    pub async fn issued_members(&self, coupon: u64) -> Vec<u64> {
        let statement =
            "SELECT member_id FROM coupon_issues WHERE coupon_id = ? ORDER BY member_id";
        let rows: Vec<(i64,)> = self.db.rows(statement, &[coupon as i64]).await;
        rows.into_iter().map(|(m,)| m as u64).collect()
    }

    /// Members in `coupon:issued:{coupon}`, sorted.
    pub async fn reserved_members(&self, coupon: u64) -> Vec<u64> {
        let mut members: Vec<u64> = redis::cmd("SMEMBERS")
            .arg(couponlab_contract::keys::issued(coupon))
            .query_async(&mut self.redis.clone())
            .await
            .unwrap();
        members.sort_unstable();
        members
    }

    /// Members in the sets of every shard of `coupon` (REDIS_LUA_SHARDED),
    /// sorted; each set holds only members of its own shard.
    pub async fn reserved_on_shards(&self, coupon: u64) -> Vec<u64> {
        use couponlab_contract::{keys, shards};
        let mut members = Vec::new();
        for shard in 0..shards::COUNT {
            let on_shard: Vec<u64> = self
                .redis_query(redis::cmd("SMEMBERS").arg(keys::shard_issued(coupon, shard)))
                .await;
            assert!(
                on_shard.iter().all(|&m| shards::of(m) == shard),
                "shard {shard} holds another shard's member: {on_shard:?}"
            );
            members.extend(on_shard);
        }
        members.sort_unstable();
        members
    }

    /// `couponlab consume <role>` as a process of its own on this test's
    /// database, Redis and components, with `env` on top.
    pub fn consumer_process(&self, role: &str, env: &[(&str, &str)]) -> tokio::process::Child {
        self.process(&["consume", role], env, std::process::Stdio::null())
    }

    /// `couponlab <args>` as a process of its own on this test's database,
    /// Redis and components, with `env` on top and its stdout (where its
    /// log goes) to `stdout`.
    pub fn process(
        &self,
        args: &[&str],
        env: &[(&str, &str)],
        stdout: std::process::Stdio,
    ) -> tokio::process::Child {
        self.command(args, env)
            .stdout(stdout)
            .spawn()
            .expect("the couponlab binary starts")
    }

    /// The command [`TestLab::process`] runs, to be set further (its
    /// working directory, say) before it is spawned.
    pub fn command(&self, args: &[&str], env: &[(&str, &str)]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(server_binary());
        command
            .args(args)
            .env("DATABASE_URL", &self.config.database_url)
            .env("REDIS_URL", &self.config.redis_url)
            .env(
                "COUPONLAB_REDIS_CLUSTER",
                self.config.redis_cluster.to_string(),
            )
            .env("COUPONLAB_STRATEGY_DIR", &self.config.strategy_dir)
            .env("COUPONLAB_COMPILE_CACHE", &self.config.compile_cache)
            .env("COUPONLAB_MAX_INSTANCES", "100")
            // As the harness's own servers: the canary's tests turn it on.
            .env("COUPONLAB_CANARY", "off")
            .env("COUPONLAB_SHARE_REDIS_DATABASE", "true")
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true);
        command
    }

    /// `GET /lab/strategies` once every component of the directory serves
    /// or was refused (its canary done).
    pub async fn proved(&self) -> Value {
        let started = std::time::Instant::now();
        loop {
            let loaded = self.get("/lab/strategies").await.expect_ok().clone();
            if loaded["awaiting"].as_array().is_some_and(Vec::is_empty) {
                return loaded;
            }
            assert!(
                started.elapsed() < std::time::Duration::from_secs(180),
                "components still unproved: {loaded}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// Stops the server (SIGTERM-like: consumers finish what they hold).
    async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(30), server).await;
        }
    }

    /// Stops the server and starts a new one on the same database, Redis
    /// and components: what it remembers, it read from them.
    pub async fn restart(&mut self) {
        self.stop().await;
        let (base, stop, server) = serve(&self.config).await;
        (self.base, self.stop, self.server) = (base, Some(stop), Some(server));
    }

    /// Stops the server and drops the test's database and directory.
    pub async fn finish(mut self) {
        // Consumers finish what they hold before the database goes away.
        self.stop().await;
        // Bounded: a server that leaked a transaction would hold the
        // database's metadata lock; the stale-database sweep drops it later.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(10), async {
            match &self.db {
                TestDb::MySql(pool) => {
                    let drop_database = format!("DROP DATABASE IF EXISTS `{}`", self.db_name);
                    let _ = pool.execute(drop_database.as_str()).await;
                }
                // PostgreSQL drops a database from another one's session.
                TestDb::Postgres(_) => {
                    if let Ok(server) = PgPool::connect(&format!("{POSTGRES}/postgres")).await {
                        let drop_database =
                            format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.db_name);
                        let _ = server.execute(drop_database.as_str()).await;
                        server.close().await;
                    }
                }
            }
            self.db.close().await;
        })
        .await;
        let _ = std::fs::remove_dir_all(&self.strategy_dir);
    }
}

/// Asserts that exactly `accepted` of `replies` were accepted with 202 and
/// the rest refused with 409.
pub fn assert_accepts_exactly(replies: &[Reply], accepted: usize, method: &str) {
    assert_eq!(
        statuses(replies),
        std::collections::BTreeMap::from([(202, accepted), (409, replies.len() - accepted)]),
        "{method}"
    );
    for reply in replies.iter().filter(|r| r.status == 202) {
        assert_eq!(reply.expect_ok()["outcome"], json!("ACCEPTED"));
    }
}

/// Asserts that a coupon's `result` holds every invariant: never
/// over-issued, one coupon per member, the count matching the rows.
pub fn assert_invariants_hold(result: &Value) {
    assert_eq!(
        result["invariants"],
        json!({ "neverOverIssued": true, "onePerMember": true, "countMatchesRows": true }),
        "{result}"
    );
}

/// How long a test waits for accepted requests to be confirmed.
pub const DRAIN: std::time::Duration = std::time::Duration::from_secs(120);

/// Sends SIGTERM to a consumer process and asserts that it stops, within 10
/// seconds, with a clean exit: it stops reading and finishes what it holds.
pub async fn stops_cleanly_on_sigterm(mut consumer: tokio::process::Child) {
    let pid = consumer.id().unwrap().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = tokio::time::timeout(std::time::Duration::from_secs(10), consumer.wait())
        .await
        .expect("the consumer stops on SIGTERM")
        .unwrap();
    assert!(status.success(), "{status}");
}

/// Pub/sub channels span every Redis database: tests that publish take turns.
pub async fn pubsub_turn() -> Turn {
    turns::alone("pubsub").await
}

/// The outcome name of an answer: the success's `outcome`, or the failure
/// message's prefix (`SOLD_OUT: ...`).
pub fn outcome(reply: &Reply) -> String {
    if reply.status.is_success() {
        return reply.expect_ok()["outcome"]
            .as_str()
            .unwrap_or_default()
            .to_string();
    }
    let message = reply.fails_with(reply.status.as_u16());
    message.split(':').next().unwrap_or_default().to_string()
}

/// Holds the coupon row in a transaction of the test's own, so every
/// confirm of the coupon waits at its UPDATE until the holder ends.
pub async fn hold_coupon_row(
    lab: &TestLab,
    coupon: u64,
) -> sqlx::Transaction<'static, sqlx::MySql> {
    let mut holder = lab.db.mysql().begin().await.unwrap();
    sqlx::query("SELECT id FROM coupons WHERE id = ? FOR UPDATE")
        .bind(coupon)
        .execute(&mut *holder)
        .await
        .unwrap();
    holder
}

/// Waits until REDIS_PUBSUB serves, then until a pub/sub subscriber
/// listens on the requests channel. The server loads its components after
/// it answers: on a fresh checkout each is compiled first (no compile
/// cache yet), and with the suite's first tests beside it that took more
/// than the subscriber's own 10 s in two cold runs of `cargo xtask test`.
pub async fn subscriber_listening(lab: &TestLab) {
    lab.until_listed_as_serving("REDIS_PUBSUB", COMPONENTS_LOADED)
        .await;
    until(
        "the pub/sub subscriber listens",
        std::time::Duration::from_secs(10),
        || async { pubsub_subscribers(lab).await > 0 },
    )
    .await;
}

/// How long a server may take to load its components (compiling them on
/// a fresh checkout, on two busy cores).
const COMPONENTS_LOADED: std::time::Duration = std::time::Duration::from_secs(120);

/// Subscribers of the lab's pub/sub requests channel now.
pub async fn pubsub_subscribers(lab: &TestLab) -> u64 {
    let channel =
        couponlab::redis_target::RedisTarget::open(&lab.config.redis_url, lab.config.redis_cluster)
            .unwrap()
            .requests_channel();
    let counts: Vec<(String, u64)> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(&mut lab.redis.clone())
        .await
        .unwrap();
    counts.first().map_or(0, |(_, n)| *n)
}

/// How many replies had each status.
pub fn statuses(replies: &[Reply]) -> std::collections::BTreeMap<u16, usize> {
    let mut statuses = std::collections::BTreeMap::new();
    for reply in replies {
        *statuses.entry(reply.status.as_u16()).or_insert(0) += 1;
    }
    statuses
}

/// Waits until `check` holds, for at most `limit`; returns how long it took.
pub async fn until<F, Fut>(
    what: &str,
    limit: std::time::Duration,
    mut check: F,
) -> std::time::Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = std::time::Instant::now();
    while !check().await {
        assert!(
            started.elapsed() < limit,
            "timed out after {limit:?} waiting until {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    started.elapsed()
}

impl Setup {
    /// The permits of each gate (the limited drop's buffer in front of the
    /// database): `per_gate` of them, a request waiting at most `timeout_ms`
    /// for one.
    pub fn permits(self, per_gate: u64, timeout_ms: u64) -> Self {
        self.tune(move |c| {
            c.capabilities.permits.per_gate = per_gate;
            c.capabilities.permits.permit_timeout_ms = timeout_ms;
        })
    }

    /// Strategy calls end after `ms` milliseconds (`request_timeout_ms`):
    /// for the tests of what a deadline ends. In place of any other `tune`.
    pub fn call_deadline_ms(self, ms: u64) -> Self {
        self.tune(move |c| c.request_timeout_ms = ms)
    }
}

/// A server of `components` whose strategy calls end after `ms`
/// milliseconds: how the tests of what a deadline ends begin.
pub async fn with_call_deadline_ms(components: &[&'static str], ms: u64) -> TestLab {
    Setup::with(components).call_deadline_ms(ms).start().await
}

/// Waiting on what the servers show, not on the clock: each helper names
/// the observable it waits for, and every wait is bounded.
impl TestLab {
    /// Transactions of this test's database waiting for a row lock (MySQL).
    pub async fn row_lock_waits(&self) -> i64 {
        // InnoDB refreshes INNODB_TRX only after 100 ms without a reader: a
        // faster poll would read the same stale table forever.
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM information_schema.INNODB_TRX t \
             JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id \
             WHERE t.trx_state = 'LOCK WAIT' AND p.DB = DATABASE()",
        )
        .fetch_one(self.db.mysql())
        .await
        .unwrap()
    }

    /// Waits, at most `limit`, until `waiting` transactions of this test's
    /// database wait for a row lock.
    pub async fn until_row_lock_waits(&self, waiting: i64, limit: std::time::Duration) {
        let what = format!("{waiting} transaction(s) wait for a row lock");
        until(&what, limit, || async {
            self.row_lock_waits().await >= waiting
        })
        .await;
    }

    /// The value of the unlabelled gauge or counter `name` on `/metrics`.
    pub async fn metric(&self, name: &str) -> f64 {
        let text = self.get_text("/metrics").await;
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {name} on /metrics"))
            .parse()
            .unwrap()
    }

    /// Waits, at most `limit`, until the server holds nothing left to
    /// settle: no request whose outcome is to be settled later, no SQL
    /// session it must end.
    pub async fn until_nothing_to_settle(&self, limit: std::time::Duration) {
        until("every request is settled", limit, || async {
            self.metric("couponlab_settlements_pending").await == 0.0
                && self.metric("couponlab_sql_sessions_to_end").await == 0.0
        })
        .await;
    }

    /// The result of `coupon` once every 202 among `replies` is confirmed
    /// (at once when there is none).
    pub async fn result_once_confirmed(&self, coupon: u64, replies: &[Reply]) -> Value {
        let accepted = replies.iter().filter(|r| r.status == 202).count() as u64;
        if accepted == 0 {
            self.result(coupon).await
        } else {
            self.drained(coupon, accepted).await
        }
    }

    /// Asks `method` for `coupon` with a new member each time until one is
    /// served (200 or 202); how long that took, at most `limit`.
    pub async fn until_an_issue_is_served(
        &self,
        coupon: u64,
        method: &str,
        limit: std::time::Duration,
    ) -> std::time::Duration {
        let started = std::time::Instant::now();
        let mut last = None;
        while started.elapsed() < limit {
            let member = self.members(1).await[0];
            let reply = self.issue(coupon, member, method).await;
            if reply.status.is_success() {
                return started.elapsed();
            }
            last = Some(reply);
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        panic!("{method} was not served within {limit:?}: {last:?}");
    }

    /// Waits until `GET /lab/strategies` lists `method` as serving; how
    /// long that took, at most `limit`.
    pub async fn until_listed_as_serving(
        &self,
        method: &str,
        limit: std::time::Duration,
    ) -> std::time::Duration {
        until(&format!("{method} serves"), limit, || async {
            let listing = self.get("/lab/strategies").await;
            listing.expect_ok()["strategies"]
                .as_array()
                .is_some_and(|served| served.iter().any(|s| s["method"] == method))
        })
        .await
    }

    /// `members` ask for `coupon` `at_once` at a time, a group every
    /// `every`: a paced burst, the replies in their order and how long it
    /// took.
    pub async fn issue_paced(
        &self,
        coupon: u64,
        members: &[u64],
        method: &str,
        (at_once, every): (usize, std::time::Duration),
    ) -> (Vec<Reply>, std::time::Duration) {
        let started = std::time::Instant::now();
        let mut replies = Vec::new();
        for group in members.chunks(at_once) {
            replies.extend(self.issue_all(coupon, group, method).await);
            tokio::time::sleep(every).await;
        }
        (replies, started.elapsed())
    }
}
