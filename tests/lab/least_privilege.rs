//! Least privilege, enforced by the servers: a component reaches Redis as an
//! ACL user limited to `coupon:*` and the commands issuance needs, and MySQL
//! as its lab's own user with only issuance's grants. A hostile component
//! tries what it must not do; each attempt is refused with a clear error,
//! and afterwards the lab is exactly as it was.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use sqlx::Executor;

use couponlab::runtime::sql::user::strategy_user;

use crate::common::{MYSQL, REDIS, Reply, Setup, TestLab, compile_cache, sharing_redis};

const HOSTILE: &str = "TEST_HOSTILE";

async fn attack(lab: &TestLab, coupon: u64, member: u64, attack: &str) -> Reply {
    lab.issue_keyed(coupon, member, HOSTILE, attack).await
}

/// Every table with its row count, and every key of the test's Redis
/// database but the host's own with its type.
async fn snapshot(lab: &TestLab) -> (BTreeMap<String, i64>, BTreeMap<String, String>) {
    let tables: Vec<String> = sqlx::query_scalar("SHOW TABLES")
        .fetch_all(lab.db.mysql())
        .await
        .unwrap();
    let mut rows = BTreeMap::new();
    for table in tables {
        let count = lab.number(&format!("SELECT COUNT(*) FROM `{table}`")).await;
        rows.insert(table, count);
    }
    let keys: Vec<String> = lab.redis_query(redis::cmd("KEYS").arg("*")).await;
    let mut types = BTreeMap::new();
    // Left out: the host's own record of requests (`couponlab:hosts:*`),
    // which it publishes as the attacks are answered, out of the
    // components' reach.
    for key in keys
        .into_iter()
        .filter(|key| !key.starts_with("couponlab:"))
    {
        let kind: String = lab.redis_query(redis::cmd("TYPE").arg(&key)).await;
        types.insert(key, kind);
    }
    (rows, types)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_component_is_refused_everything_and_changes_nothing() {
    // Alone: the 100 MB reply keeps Redis busy for everyone for seconds.
    let lab = Setup::with(&["test_hostile", "pessimistic", "redis_lua"])
        .own_redis_db()
        .alone()
        .call_deadline_ms(5_000)
        .start()
        .await;
    let (members, coupon) = lab.members_and_coupon(3, 10).await;
    lab.issue(coupon, members[0], "REDIS_LUA").await.expect_ok();
    let before = snapshot(&lab).await;

    // Each attack and a word its refusal must carry.
    let refusals = [
        ("flushdb", "no permissions"),
        ("eval-flushdb", "can't run this command"),
        ("lua-del-total", "can't access"),
        ("set-outside", "no permissions"),
        ("lua-set-outside", "can't access"),
        ("keys", "no permissions"),
        ("script-flush", "no permissions"),
        ("xread-block", "no permissions"),
        ("client-pause", "no permissions"),
        ("reset", "RESET is not allowed"),
        ("auth", "AUTH is not allowed"),
        ("big-reply", "COUPONLAB_MAX_REPLY_BYTES"),
        ("many-connections", "COUPONLAB_MAX_CONNECTIONS_PER_CALL"),
        ("drop-table", "DROP statements are not allowed"),
        ("truncate", "TRUNCATE statements are not allowed"),
        ("create-user", "CREATE statements are not allowed"),
        ("read-mysql-user", "may not"),
        ("raise-total", "may not"),
        ("insert-member", "may not"),
        ("set-session", "SET statements are not allowed"),
        ("autocommit-off", "SET statements are not allowed"),
        ("sleep", "max_statement_time"),
        ("big-result", "COUPONLAB_MAX_RESULT_BYTES"),
        ("many-transactions", "COUPONLAB_MAX_TRANSACTIONS_PER_CALL"),
        ("big-payload", "too-large"),
        ("lock-outside", "starts with coupon:lock:"),
        ("many-locks", "at most 4 locks"),
        ("named-lock-outside", "starts with coupon:lock:"),
        ("many-named-locks", "COUPONLAB_NAMED_LOCKS_PER_CALL"),
        ("subscribe-outside", "no permissions"),
        ("subscribe-command", "SUBSCRIBE is not allowed"),
        ("many-subscriptions", "COUPONLAB_SUBSCRIPTIONS_PER_CALL"),
        ("many-renewals", "COUPONLAB_RENEWALS_PER_CALL"),
    ];
    let mut wrong = Vec::new();
    for (name, word) in refusals {
        let started = Instant::now();
        let reply = attack(&lab, coupon, members[1], name).await;
        let message = reply.body["error"]["message"].as_str().unwrap_or_default();
        if reply.status != 503 || !message.starts_with("UNAVAILABLE") || !message.contains(word) {
            wrong.push(format!("{name}: {} {}", reply.status, reply.body));
        }
        assert!(
            started.elapsed() < Duration::from_secs(6),
            "{name} took {:?}",
            started.elapsed()
        );
    }
    assert!(
        wrong.is_empty(),
        "refused without saying why:\n{}",
        wrong.join("\n")
    );

    // A named lock is allowed, but it leaves with its call: the connection
    // that holds it is closed, not handed to the next borrower.
    attack(&lab, coupon, members[1], "get-lock")
        .await
        .expect_ok();
    let free = lab.number("SELECT IS_FREE_LOCK('couponlab-hostile')").await;
    assert_eq!(free, 1, "the component's named lock outlived its call");

    assert_eq!(snapshot(&lab).await, before);
    let outside: Option<String> = lab
        .redis_query(redis::cmd("GET").arg("victim:outside"))
        .await;
    assert_eq!(outside, None);
    // Every method still issues.
    lab.issue(coupon, members[1], "PESSIMISTIC")
        .await
        .expect_ok();
    lab.issue(coupon, members[2], "REDIS_LUA").await.expect_ok();
    lab.finish().await;
}

/// Users are the MySQL server's, not a database's: two labs on one server
/// each have a user of their own, named after the lab, granted only that
/// lab's tables. A user shared by every lab held each lab's grants, so one
/// lab's components reached the other's tables, and its password was set
/// by whichever lab started last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_labs_on_one_server_have_users_of_their_own() {
    let labs = [
        Setup::with(&["pessimistic"]).start().await,
        Setup::with(&["pessimistic"]).start().await,
    ];
    let mut users = Vec::new();
    for lab in &labs {
        let granted: Vec<String> = sqlx::query_scalar(
            "SELECT DISTINCT CAST(User AS CHAR) FROM mysql.tables_priv \
             WHERE Db = ? AND User LIKE 'couponlab\\_strategy%'",
        )
        .bind(&lab.db_name)
        .fetch_all(lab.db.mysql())
        .await
        .unwrap();
        let user = strategy_user(&lab.lab_id().await);
        assert_eq!(granted, std::slice::from_ref(&user), "{}", lab.db_name);
        users.push(user);
    }
    assert_ne!(users[0], users[1]);
    for lab in &labs {
        let (members, coupon) = lab.members_and_coupon(1, 1).await;
        lab.issue(coupon, members[0], "PESSIMISTIC")
            .await
            .expect_ok();
    }
    for lab in labs {
        lab.finish().await;
    }
}

/// Starts a server on these URLs, which must refuse to start with a message
/// that names each of `needs`: what the operator has to provide.
async fn refused_start_names(database_url: &str, redis_url: &str, needs: &[&str]) {
    // A directory of this call's own: both tests start at once.
    let strategy_dir = std::env::temp_dir().join(format!(
        "couponlab-refused-{}-{}",
        std::process::id(),
        database_url.len() + redis_url.len() * 1000
    ));
    let mut config = couponlab::config::Config::parse_from_env();
    config.database_url = database_url.to_string();
    config.redis_url = redis_url.to_string();
    config.strategy_dir = strategy_dir.clone();
    config.compile_cache = compile_cache();
    config.watch = false;
    let refused = couponlab::Lab::start(config)
        .await
        .err()
        .expect("the start is refused");
    let _ = std::fs::remove_dir_all(strategy_dir);
    let message = format!("{refused:#}");
    for need in needs {
        assert!(message.contains(need), "{message}");
    }
}

/// A Redis user that may do everything but administer users.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_up_without_permission_to_create_the_redis_user_says_what_it_needs() {
    let _redis = sharing_redis().await;
    let name = format!("couponlab-test-noacl-{}", std::process::id());
    let _dropped_however_the_test_ends = (
        MySqlLeftovers(vec![
            "DROP DATABASE IF EXISTS couponlab_test_noacl".to_string(),
        ]),
        RedisUserLeftover(name.clone()),
    );
    let mut admin = redis::Client::open(format!("{REDIS}/0"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(&name)
        .arg("on")
        .arg(">secret")
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .arg("-@admin")
        .query_async(&mut admin)
        .await
        .unwrap();
    refused_start_names(
        &format!("{MYSQL}/couponlab_test_noacl"),
        &format!("redis://{name}:secret@127.0.0.1:6379/0"),
        &["ACL SETUSER", "COUPONLAB_STRATEGY_REDIS_URL"],
    )
    .await;
}

/// A Redis ACL user a test made, deleted when the test ends, a failed
/// assertion included.
struct RedisUserLeftover(String);

impl Drop for RedisUserLeftover {
    fn drop(&mut self) {
        let deleted = redis::Client::open(format!("{REDIS}/0"))
            .and_then(|client| client.get_connection())
            .and_then(|mut admin| {
                redis::cmd("ACL")
                    .arg("DELUSER")
                    .arg(&self.0)
                    .query::<()>(&mut admin)
            });
        if let Err(error) = deleted
            && !std::thread::panicking()
        {
            panic!("the Redis user {} was not deleted: {error}", self.0);
        }
    }
}

/// A database user with every privilege on the lab's database, but none to
/// create users or grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_up_without_permission_to_create_the_database_user_says_what_it_needs() {
    let suffix = std::process::id();
    let (user, db) = (
        format!("couponlab_nogrant_{suffix}"),
        format!("couponlab_test_nogrant_{suffix}"),
    );
    let root = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .connect(MYSQL)
        .await
        .unwrap();
    let _dropped_however_the_test_ends = MySqlLeftovers(vec![
        format!("DROP USER IF EXISTS '{user}'@'localhost'"),
        format!("DROP USER IF EXISTS '{user}'@'127.0.0.1'"),
        format!("DROP DATABASE IF EXISTS `{db}`"),
    ]);
    for statement in [
        format!("CREATE DATABASE IF NOT EXISTS `{db}`"),
        format!("CREATE USER IF NOT EXISTS '{user}'@'localhost' IDENTIFIED BY 'secret'"),
        format!("CREATE USER IF NOT EXISTS '{user}'@'127.0.0.1' IDENTIFIED BY 'secret'"),
        format!("GRANT ALL ON `{db}`.* TO '{user}'@'localhost'"),
        format!("GRANT ALL ON `{db}`.* TO '{user}'@'127.0.0.1'"),
    ] {
        root.execute(statement.as_str()).await.unwrap();
    }
    refused_start_names(
        &format!("mysql://{user}:secret@127.0.0.1:3306/{db}"),
        &format!("{REDIS}/0"),
        &["CREATE USER and GRANT", "COUPONLAB_STRATEGY_DATABASE_URL"],
    )
    .await;
    root.close().await;
}

/// MySQL statements that undo what a test made on the server (its users,
/// its databases), run when the test ends, a failed assertion included.
struct MySqlLeftovers(Vec<String>);

impl Drop for MySqlLeftovers {
    fn drop(&mut self) {
        let statements = std::mem::take(&mut self.0);
        // Drop cannot await: the statements run on a thread and a runtime
        // of their own, which the test's runtime does not have to drive.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let root = sqlx::mysql::MySqlPoolOptions::new()
                    .max_connections(1)
                    .connect(MYSQL)
                    .await
                    .expect("MySQL answers");
                for statement in &statements {
                    root.execute(statement.as_str()).await.unwrap();
                }
                root.close().await;
            });
        })
        .join();
        // A cleanup that fails while the test is unwinding would abort the
        // process and hide the test's own failure.
        if dropped.is_err() && !std::thread::panicking() {
            panic!("the test's users and databases were not dropped");
        }
    }
}
