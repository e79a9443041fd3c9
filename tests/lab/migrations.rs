//! Several servers starting at once on one new database: each waits for
//! the one migrating it, and all of them come up. A database that never
//! answers fails the start instead of holding it.

use std::process::Stdio;
use std::time::Duration;

use sqlx::Executor;

use crate::common::{MYSQL, Setup, compile_cache, free_port};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_starting_together_on_a_new_database_migrate_it_once_and_all_come_up() {
    // The in-process server only lends its Redis and components; the
    // servers under test get a database nobody has migrated.
    let lab = Setup::with(&["pessimistic"]).start().await;
    let fresh = format!("couponlab_test_fresh_{}", std::process::id());
    let database_url = format!("{MYSQL}/{fresh}");
    lab.db
        .mysql()
        .execute(format!("DROP DATABASE IF EXISTS `{fresh}`").as_str())
        .await
        .unwrap();
    let binds: Vec<String> = (0..3)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let mut servers: Vec<_> = binds
        .iter()
        .map(|bind| {
            lab.process(
                &["serve"],
                &[
                    ("DATABASE_URL", &database_url),
                    ("COUPONLAB_BIND", bind),
                    ("COUPONLAB_CONSUMERS", "false"),
                ],
                Stdio::null(),
            )
        })
        .collect();
    let started = std::time::Instant::now();
    for (bind, server) in binds.iter().zip(&mut servers) {
        loop {
            // One that failed its migrations has exited.
            assert!(
                server.try_wait().unwrap().is_none(),
                "the server on {bind} exited"
            );
            let url = format!("http://{bind}/lab/strategies");
            if lab.client.get(url).send().await.is_ok() {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the server on {bind} did not answer within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let (applied, failed): (i64, i64) = sqlx::query_as(&format!(
        "SELECT COUNT(*), CAST(COALESCE(SUM(success = 0), 0) AS SIGNED) FROM `{fresh}`._sqlx_migrations"
    ))
    .fetch_one(lab.db.mysql())
    .await
    .unwrap();
    assert_eq!(failed, 0);
    assert_eq!(
        applied,
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../migrations/mysql"))
            .unwrap()
            .filter(|file| {
                file.as_ref()
                    .is_ok_and(|f| f.path().extension().is_some_and(|e| e == "sql"))
            })
            .count() as i64,
        "every migration applied once"
    );
    for mut server in servers {
        server.kill().await.unwrap();
    }
    lab.db
        .mysql()
        .execute(format!("DROP DATABASE IF EXISTS `{fresh}`").as_str())
        .await
        .unwrap();
    lab.finish().await;
}

/// A peer that takes the connection and never says a word, as a link that
/// lost the database's answers: the start fails, naming the step, once its
/// limit passed, so a supervisor can start the server again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_never_answers_fails_the_start_within_its_step_limit() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = silent.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut connections = Vec::new();
        while let Ok((connection, _)) = silent.accept().await {
            connections.push(connection);
        }
    });
    let strategy_dir =
        std::env::temp_dir().join(format!("couponlab-silent-db-{}", std::process::id()));
    let mut config = couponlab::config::Config::parse_from_env();
    config.database_url = format!("mysql://root@{address}/couponlab_silent");
    config.strategy_dir = strategy_dir.clone();
    config.compile_cache = compile_cache();
    config.watch = false;
    let limit = couponlab::db_target::STEP_LIMIT + Duration::from_secs(30);
    let refused = tokio::time::timeout(limit, couponlab::Lab::start(config))
        .await
        .unwrap_or_else(|_| panic!("the start still waited after {limit:?}"))
        .err()
        .expect("a start on a silent database fails");
    held.abort();
    let _ = std::fs::remove_dir_all(strategy_dir);
    let message = format!("{refused:#}");
    assert!(
        message.contains("the database did not answer creating the database within"),
        "{message}"
    );
}
