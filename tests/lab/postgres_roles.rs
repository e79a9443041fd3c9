//! Two labs on one PostgreSQL server that checks passwords: each has a
//! components' role of its own, with its own password, and each serves
//! while the other runs.
//!
//! Roles are the server's, not a database's. When every lab's components
//! ran as the one role `couponlab_strategy`, whose password was derived
//! from the administrative URL's credentials, a second lab started with
//! other credentials set another password on that role: the first lab's
//! components then failed to log in on every new connection ("password
//! authentication failed"), and the role carried both labs' grants, so
//! one lab's components reached the other's tables. The shared PostgreSQL
//! of the other tests trusts every connection, which hides the first;
//! this test starts a server of its own that does not.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use couponlab::Lab;
use couponlab::config::{CanaryMode, Config};
use couponlab::runtime::sql::user::strategy_user;
use futures::future::join_all;
use serde_json::{Value, json};
use sqlx::Executor;
use sqlx::postgres::{PgPool, PgPoolOptions};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::common::{REDIS, compile_cache, component, sharing_redis};

/// Where the PostgreSQL 15 programs are.
const PG_BIN: &str = "/usr/lib/postgresql/15/bin";
/// The superuser `initdb` makes, and a second one made through it.
const ADMINS: [(&str, &str); 2] = [
    ("couponlab_admin_a", "first-secret"),
    ("couponlab_admin_b", "second-secret"),
];
/// How long a lab may take to serve its component after a cut.
const SERVE_AGAIN: Duration = Duration::from_secs(20);

/// A PostgreSQL server of the test's own, on a port of the test's, stopped
/// and its files removed when dropped, however the test ends.
struct OwnPostgres {
    dir: PathBuf,
    port: u16,
}

impl OwnPostgres {
    /// `initdb` with password (SCRAM) authentication on TCP and the first
    /// of [`ADMINS`] as superuser, then started.
    fn start() -> OwnPostgres {
        let dir = std::env::temp_dir().join(format!("couponlab-pg-roles-{}", unique()));
        std::fs::create_dir_all(&dir).unwrap();
        let server = OwnPostgres {
            dir,
            port: crate::common::free_port(),
        };
        let password_file = server.dir.join("password");
        std::fs::write(&password_file, ADMINS[0].1).unwrap();
        // PostgreSQL will not run as root: its files are its own user's.
        if running_as_root() {
            run(Command::new("chown")
                .arg("-R")
                .arg("postgres:")
                .arg(&server.dir));
        }
        run(server
            .as_postgres("initdb")
            .arg("-D")
            .arg(server.data())
            .args([
                "-U",
                ADMINS[0].0,
                "--auth-host=scram-sha-256",
                "--auth-local=trust",
            ])
            .arg(format!("--pwfile={}", password_file.display())));
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1",
            server.port,
            server.dir.display()
        );
        run(server
            .as_postgres("pg_ctl")
            .arg("-D")
            .arg(server.data())
            .args(["-o", &options, "-w", "-t", "60", "-l"])
            .arg(server.dir.join("log"))
            .arg("start"));
        server
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// A PostgreSQL program, as the user PostgreSQL runs as, in the
    /// server's directory (that user may not read the test's own).
    fn as_postgres(&self, program: &str) -> Command {
        let program = Path::new(PG_BIN).join(program);
        let mut command = if running_as_root() {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        };
        command.current_dir(&self.dir);
        command
    }

    /// The URL of `database` as the superuser `user`.
    fn url(&self, (user, password): (&str, &str), database: &str) -> String {
        format!(
            "postgres://{user}:{password}@127.0.0.1:{}/{database}",
            self.port
        )
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        let _ = self
            .as_postgres("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "-w", "stop"])
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `command`, which must succeed.
fn run(command: &mut Command) {
    let output = command.output().expect("the command starts");
    assert!(
        output.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|me| me.uid() == 0)
}

/// A number no other test of this run or an earlier one has.
fn unique() -> u64 {
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    micros * 100 + u64::from(std::process::id() % 100)
}

/// One lab on the test's server: its server task and how to stop it.
struct RoleLab {
    base: String,
    database: String,
    client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    server: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl RoleLab {
    /// A lab on `database_url` serving PESSIMISTIC from `strategy_dir`,
    /// its coupon ids starting at a number of this test's own (the labs
    /// share Redis with every other test).
    async fn start(database_url: String, database: &str, strategy_dir: PathBuf) -> RoleLab {
        std::fs::create_dir_all(&strategy_dir).unwrap();
        std::fs::copy(
            component("pessimistic"),
            strategy_dir.join("pessimistic.wasm"),
        )
        .unwrap();
        let mut config = Config::parse_from_env();
        config.bind = "127.0.0.1:0".parse().unwrap();
        config.database_url = database_url.clone();
        config.redis_url = format!("{REDIS}/0");
        config.share_redis_database = true;
        config.strategy_dir = strategy_dir;
        config.compile_cache = compile_cache();
        config.capabilities.sql.db_pool_size = 4;
        config.canary = CanaryMode::Off;
        let lab = Lab::start(config).await.expect("the lab starts");
        let admin = connect(&database_url).await;
        let restart = format!(
            "ALTER TABLE coupons ALTER COLUMN id RESTART WITH {}",
            unique()
        );
        admin.execute(restart.as_str()).await.unwrap();
        admin.close().await;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(couponlab::serve(listener, lab, async move {
            let _ = stopped.await;
        }));
        RoleLab {
            base,
            database: database.to_string(),
            client: reqwest::Client::new(),
            stop: Some(stop),
            server,
        }
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .expect("the lab answers");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap())
    }

    /// `count` new members and a coupon of `count`.
    async fn members_and_coupon(&self, count: u64) -> (Vec<u64>, u64) {
        let (_, members) = self.post("/lab/members", json!({ "count": count })).await;
        let first = members["response"]["firstId"].as_u64().unwrap();
        let body = json!({ "name": "roles", "totalCount": count });
        let (_, coupon) = self.post("/lab/coupons", body).await;
        let coupon = coupon["response"]["id"].as_u64().unwrap();
        ((first..first + count).collect(), coupon)
    }

    /// Asks PESSIMISTIC for `coupon` for `member` until the lab issues it:
    /// a request on a connection cut under it fails, the next one opens a
    /// new connection, which logs in as the lab's role. Panics with the
    /// last answer if none is issued within [`SERVE_AGAIN`].
    async fn issued(&self, coupon: u64, member: u64) {
        let path = format!("/lab/coupons/{coupon}/issue");
        let body = json!({ "memberId": member, "method": "PESSIMISTIC" });
        let started = Instant::now();
        loop {
            let (status, reply) = self.post(&path, body.clone()).await;
            if status == 200 && reply["response"]["outcome"] == "ISSUED" {
                return;
            }
            assert!(
                started.elapsed() < SERVE_AGAIN,
                "the lab on {} does not issue: {status} {reply}",
                self.database
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(30), self.server).await;
    }
}

async fn connect(url: &str) -> PgPool {
    PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .unwrap_or_else(|err| panic!("cannot connect to {url}: {err}"))
}

/// The roles that may insert issues in the database at `url`: the
/// components' role of the lab there, and no other lab's.
async fn issuing_roles(url: &str) -> Vec<String> {
    let pool = connect(url).await;
    let roles = sqlx::query_scalar(
        "SELECT rolname::text FROM pg_roles WHERE rolname LIKE 'couponlab\\_strategy%' \
         AND has_table_privilege(oid, 'public.coupon_issues', 'INSERT') ORDER BY rolname",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;
    roles
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_labs_with_other_superusers_each_log_in_as_a_role_of_their_own() {
    let _redis = sharing_redis().await;
    let server = OwnPostgres::start();
    let first_admin = server.url(ADMINS[0], "postgres");
    let admin = connect(&first_admin).await;
    let (user, password) = ADMINS[1];
    let second_superuser = format!("CREATE ROLE {user} WITH LOGIN SUPERUSER PASSWORD '{password}'");
    admin.execute(second_superuser.as_str()).await.unwrap();

    let databases = ["couponlab_roles_a", "couponlab_roles_b"];
    let urls = [
        server.url(ADMINS[0], databases[0]),
        server.url(ADMINS[1], databases[1]),
    ];
    let first = RoleLab::start(urls[0].clone(), databases[0], server.dir.join("a")).await;
    let second = RoleLab::start(urls[1].clone(), databases[1], server.dir.join("b")).await;
    let labs = [&first, &second];

    // Each lab's tables take inserts from its own role alone, named after
    // the lab.
    let mut roles = Vec::new();
    for url in &urls {
        let pool = connect(url).await;
        let lab_id: String = sqlx::query_scalar("SELECT id FROM lab_identity")
            .fetch_one(&pool)
            .await
            .unwrap();
        pool.close().await;
        let role = strategy_user(lab_id.trim());
        assert_eq!(issuing_roles(url).await, vec![role.clone()], "{url}");
        roles.push(role);
    }
    assert_ne!(roles[0], roles[1]);

    // Every session of the components is cut: each lab logs in again, with
    // the password of its role as the other lab left it.
    let cut = "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
               WHERE usename LIKE 'couponlab\\_strategy%'";
    admin.execute(cut).await.unwrap();
    let coupons = join_all(labs.map(|lab| lab.members_and_coupon(20))).await;
    // Both labs serve at once, each on connections opened after the cut.
    let serving = labs
        .iter()
        .zip(&coupons)
        .map(|(lab, (members, coupon))| async move {
            for &member in members {
                lab.issued(*coupon, member).await;
            }
        });
    join_all(serving).await;
    let logged_in: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT usename::text FROM pg_stat_activity \
         WHERE usename LIKE 'couponlab\\_strategy%' ORDER BY 1",
    )
    .fetch_all(&admin)
    .await
    .unwrap();
    let mut expected = roles.clone();
    expected.sort();
    assert_eq!(logged_in, expected);

    admin.close().await;
    first.stop().await;
    second.stop().await;
}
