//! One lab on the three-node Galera cluster of `cargo xtask galera up`
//! (127.0.0.1:3307-3309; `cargo xtask test` brings it up first): a host on
//! each node, one database replicated to all. What a node names of itself;
//! every method serving on every node after its canary; named locks that
//! are each node's own; row locks that are too, their losers answered 1213
//! at COMMIT with the certification conflict named; a COMMIT a paused node
//! stalls past its call's deadline, settled from the rows.
//!
//! A test that pauses a node stalls every node's writes: it takes the
//! cluster alone, the others share it.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use futures::future::join_all;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::mysql::{MySqlPool, MySqlPoolOptions};
use sqlx::{Connection, Executor, MySqlConnection};
use tokio::process::Child;

use crate::common::{
    REDIS, RedisDb, compile_cache, component, free_port, server_binary, sharing_redis,
};
use crate::turns::{self, Turn};

const NODES: [u16; 3] = [3307, 3308, 3309];
/// The turn of the tests on the cluster (shared, or alone for a fault).
pub const CLUSTER_TURN: &str = "galera-cluster";
const START: Duration = Duration::from_secs(60);
/// A first host proves every method's claims on the cluster.
const PROVED: Duration = Duration::from_secs(240);

fn node_url(port: u16) -> String {
    format!("mysql://root@127.0.0.1:{port}")
}

/// Waits until every node is `Synced` in a cluster of three; a test run
/// outside `cargo xtask test` is told how to start it.
async fn cluster_of_three() {
    let started = Instant::now();
    loop {
        let mut synced = 0;
        for port in NODES {
            if let Ok(mut conn) = MySqlConnection::connect(&node_url(port)).await {
                let status: Vec<(String, String)> = sqlx::query_as(
                    "SHOW GLOBAL STATUS WHERE Variable_name IN \
                     ('wsrep_cluster_size', 'wsrep_local_state_comment')",
                )
                .fetch_all(&mut conn)
                .await
                .unwrap_or_default();
                let status: BTreeMap<String, String> = status.into_iter().collect();
                if status.get("wsrep_cluster_size").map(String::as_str) == Some("3")
                    && status.get("wsrep_local_state_comment").map(String::as_str) == Some("Synced")
                {
                    synced += 1;
                }
            }
        }
        if synced == NODES.len() {
            return;
        }
        assert!(
            started.elapsed() < START,
            "the Galera cluster on 127.0.0.1:3307-3309 is not three Synced nodes: \
             `cargo xtask galera up` starts it (`cargo xtask test` does)"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A node's conflict counters: certification failures and brute-force
/// aborts of its own transactions since it started.
async fn conflicts(pool: &MySqlPool) -> u64 {
    let status: Vec<(String, String)> = sqlx::query_as(
        "SHOW GLOBAL STATUS WHERE Variable_name IN \
         ('wsrep_local_cert_failures', 'wsrep_local_bf_aborts')",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    status.iter().map(|(_, n)| n.parse::<u64>().unwrap()).sum()
}

/// A `couponlab serve` process on one node.
struct Host {
    base: String,
    _process: Child,
}

/// A lab of the test's own on the cluster: its database, its components,
/// its hosts, and a pool on each node.
struct GaleraLab {
    db_name: String,
    strategy_dir: std::path::PathBuf,
    nodes: Vec<MySqlPool>,
    hosts: Vec<Host>,
    client: reqwest::Client,
    /// The lab's own Redis database: on a shared one, another test's
    /// write-behind loader reads the announced streams too, and holds the
    /// entries of a coupon it has no component for as pending, unconfirmed.
    redis_db: RedisDb,
    _redis: Turn,
    _cluster: Turn,
}

impl GaleraLab {
    /// A lab on the cluster, which other tests use beside it.
    async fn new(components: &[&str]) -> GaleraLab {
        Self::taking(components, turns::shared(CLUSTER_TURN).await).await
    }

    /// A lab on the cluster, with the test's `turn` of it.
    async fn taking(components: &[&str], cluster: Turn) -> GaleraLab {
        cluster_of_three().await;
        let id = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros() as u64;
        let db_name = format!("couponlab_test_{id}");
        let strategy_dir = std::env::temp_dir().join(format!("couponlab-galera-{id}"));
        std::fs::create_dir_all(&strategy_dir).unwrap();
        for name in components {
            std::fs::copy(component(name), strategy_dir.join(format!("{name}.wasm"))).unwrap();
        }
        let mut nodes = Vec::new();
        for port in NODES {
            // The test's reads wait until their node has applied every
            // write set the cluster committed before them.
            let pool = MySqlPoolOptions::new()
                .max_connections(4)
                .after_connect(|conn, _| {
                    Box::pin(async move {
                        conn.execute("SET SESSION wsrep_sync_wait = 1").await?;
                        Ok(())
                    })
                })
                .connect(&node_url(port))
                .await
                .unwrap();
            nodes.push(pool);
        }
        GaleraLab {
            db_name,
            strategy_dir,
            nodes,
            hosts: Vec::new(),
            client: reqwest::Client::new(),
            redis_db: RedisDb::take().await,
            _redis: sharing_redis().await,
            _cluster: cluster,
        }
    }

    /// Starts a host on node `node` (0-2) and waits until it answers.
    async fn start_host(&mut self, node: usize, canary: &str) {
        self.start_host_with(node, canary, &[]).await;
    }

    /// Starts a host on node `node` (0-2) with the settings `env` besides
    /// the lab's, and waits until it answers.
    async fn start_host_with(&mut self, node: usize, canary: &str, env: &[(&str, &str)]) {
        let url = format!("{}/{}", node_url(NODES[node]), self.db_name);
        for _ in 0..3 {
            let bind = format!("127.0.0.1:{}", free_port());
            let mut process = tokio::process::Command::new(server_binary())
                .arg("serve")
                .env("DATABASE_URL", &url)
                .env("REDIS_URL", format!("{REDIS}/{}", self.redis_db.number))
                .env("COUPONLAB_STRATEGY_DIR", &self.strategy_dir)
                .env("COUPONLAB_COMPILE_CACHE", compile_cache())
                .env("COUPONLAB_BIND", &bind)
                .env("COUPONLAB_WATCH", "false")
                .env("COUPONLAB_CANARY", canary)
                .env("COUPONLAB_MAX_INSTANCES", "100")
                .env("COUPONLAB_DB_POOL_SIZE", "16")
                .env("RUST_LOG", "warn")
                .envs(env.iter().copied())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .kill_on_drop(true)
                .spawn()
                .expect("the couponlab binary starts");
            let base = format!("http://{bind}");
            let started = Instant::now();
            while process.try_wait().unwrap().is_none() {
                if self
                    .client
                    .get(format!("{base}/lab/strategies"))
                    .send()
                    .await
                    .is_ok()
                {
                    if self.hosts.is_empty() {
                        self.ids_of_our_own().await;
                    }
                    self.hosts.push(Host {
                        base,
                        _process: process,
                    });
                    return;
                }
                assert!(started.elapsed() < START, "no answer from {base}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        panic!("the host on 127.0.0.1:{} exited three times", NODES[node]);
    }

    /// Coupon ids from a number unique to the test, so the keys the
    /// components keep in the shared Redis database are its own.
    async fn ids_of_our_own(&self) {
        let first = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros() as u64
            * 100;
        let statement = format!(
            "ALTER TABLE `{}`.coupons AUTO_INCREMENT = {first}",
            self.db_name
        );
        self.nodes[0].execute(statement.as_str()).await.unwrap();
    }

    async fn request(&self, host: usize, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let url = format!("{}{path}", self.hosts[host].base);
        let request = match body {
            Some(body) => self.client.post(url).json(&body),
            None => self.client.get(url),
        };
        let response = request.send().await.expect("the host answers");
        let status = response.status();
        (status, response.json().await.unwrap())
    }

    async fn ok(&self, host: usize, path: &str, body: Option<Value>) -> Value {
        let (status, body) = self.request(host, path, body).await;
        assert!(status.is_success(), "{path}: {status} {body}");
        body["response"].clone()
    }

    /// `count` new members' ids: the run from `firstId` to `lastId`, as
    /// every client reads it, though Galera's nodes hand out AUTO_INCREMENT
    /// ids a cluster size apart (`wsrep_auto_increment_control`). Checked
    /// against the rows.
    async fn members(&self, count: u64) -> Vec<u64> {
        let created = self
            .ok(0, "/lab/members", Some(json!({ "count": count })))
            .await;
        let (first, last) = (created["firstId"].as_u64(), created["lastId"].as_u64());
        let said: Vec<u64> = (first.unwrap()..=last.unwrap()).collect();
        let statement = format!(
            "SELECT id FROM `{}`.members WHERE id >= ? ORDER BY id LIMIT ?",
            self.db_name
        );
        let ids: Vec<i64> = sqlx::query_scalar(&statement)
            .bind(said[0])
            .bind(count)
            .fetch_all(&self.nodes[0])
            .await
            .unwrap();
        let ids: Vec<u64> = ids.into_iter().map(|id| id as u64).collect();
        assert_eq!(ids, said, "{created}");
        ids
    }

    async fn coupon(&self, method: &str, total: u64) -> u64 {
        let body = json!({ "name": "galera", "totalCount": total });
        let coupon = self.ok(0, "/lab/coupons", Some(body)).await["id"]
            .as_u64()
            .unwrap();
        if method == "REDIS_LUA_GATE" {
            let seed = json!({ "quantity": total });
            self.ok(0, &format!("/lab/drop/coupons/{coupon}/seed"), Some(seed))
                .await;
        }
        coupon
    }

    async fn issue(
        &self,
        host: usize,
        coupon: u64,
        member: u64,
        method: &str,
    ) -> (StatusCode, Value) {
        let body = json!({ "memberId": member, "method": method });
        self.request(host, &format!("/lab/coupons/{coupon}/issue"), Some(body))
            .await
    }

    /// The conflicts `host`'s `/metrics` gives for its node, both kinds.
    async fn galera_conflicts_scraped(&self, host: usize) -> u64 {
        let url = format!("{}/metrics", self.hosts[host].base);
        let text = self.client.get(url).send().await.unwrap().text().await;
        let text = text.unwrap();
        let kinds: Vec<u64> = text
            .lines()
            .filter(|line| line.starts_with("couponlab_galera_conflicts{"))
            .map(|line| line.rsplit(' ').next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(kinds.len(), 2, "{text}");
        kinds.iter().sum()
    }

    /// Issue rows of `coupon`, as node `node` holds them.
    async fn rows(&self, node: usize, coupon: u64) -> i64 {
        let statement = format!(
            "SELECT COUNT(*) FROM `{}`.coupon_issues WHERE coupon_id = ?",
            self.db_name
        );
        sqlx::query_scalar(&statement)
            .bind(coupon)
            .fetch_one(&self.nodes[node])
            .await
            .unwrap()
    }

    /// The result of `coupon` from host 0 once its node has applied every
    /// issue row the cluster committed (it reads without waiting for them).
    async fn settled_result(&self, coupon: u64) -> Value {
        let started = Instant::now();
        loop {
            let rows = self.rows(0, coupon).await;
            let path = format!("/lab/coupons/{coupon}/result");
            let result = self.ok(0, &path, None).await;
            if result["issueRows"] == rows {
                return result;
            }
            assert!(started.elapsed() < START, "never settled: {result}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn finish(self) {
        drop(self.hosts);
        let drop_database = format!("DROP DATABASE IF EXISTS `{}`", self.db_name);
        let _ = self.nodes[0].execute(drop_database.as_str()).await;
        let _ = std::fs::remove_dir_all(&self.strategy_dir);
    }
}

/// Each of the lab's methods, by its component.
const EVERY_METHOD: [(&str, &str); 24] = [
    ("atomic_update", "ATOMIC_UPDATE"),
    ("read_committed", "READ_COMMITTED"),
    ("repeatable_read", "REPEATABLE_READ"),
    ("serializable", "SERIALIZABLE"),
    ("pessimistic", "PESSIMISTIC"),
    ("optimistic", "OPTIMISTIC"),
    ("optimistic_retry", "OPTIMISTIC_RETRY"),
    ("mysql_named_lock", "MYSQL_NAMED_LOCK"),
    ("in_process_lock", "IN_PROCESS_LOCK"),
    ("redis_set_only", "REDIS_SET_ONLY"),
    ("redis_multi_exec", "REDIS_MULTI_EXEC"),
    ("redis_watch", "REDIS_WATCH"),
    ("redis_lua", "REDIS_LUA"),
    ("redis_async", "REDIS_ASYNC"),
    ("redis_pubsub", "REDIS_PUBSUB"),
    ("redis_stream", "REDIS_STREAM"),
    ("redis_stream_atomic", "REDIS_STREAM_ATOMIC"),
    ("redis_write_behind", "REDIS_WRITE_BEHIND"),
    ("redis_write_behind_no_tx", "REDIS_WRITE_BEHIND_NO_TX"),
    ("redis_lua_gate", "REDIS_LUA_GATE"),
    ("redis_lua_sharded", "REDIS_LUA_SHARDED"),
    ("redis_incr", "REDIS_INCR"),
    ("redis_spin_lock", "REDIS_SPIN_LOCK"),
    ("redis_pubsub_lock", "REDIS_PUBSUB_LOCK"),
];

/// A host on each node names the engine `galera`, its node, the cluster's
/// size and the wsrep settings; the first proves every method with its
/// canary, the other two remember those passes (the settings they are
/// kept under are the cluster's, the same on every node), and each host
/// serves every method.
#[tokio::test]
async fn three_hosts_on_three_nodes_serve_every_method_after_its_canary() {
    let _pubsub = crate::common::pubsub_turn().await;
    let components: Vec<&str> = EVERY_METHOD.iter().map(|(file, _)| *file).collect();
    let mut lab = GaleraLab::new(&components).await;
    lab.start_host(0, "changed").await;
    let proved = until_proved(&lab, 0).await;
    for node in 1..3 {
        lab.start_host(node, "changed").await;
    }
    let mut nodes_named = Vec::new();
    for host in 0..3 {
        let strategies = until_proved(&lab, host).await;
        let engine = &strategies["engine"];
        assert_eq!(engine["name"], "galera", "{engine}");
        assert_eq!(engine["cluster"]["size"], 3, "{engine}");
        assert_eq!(engine["cluster"]["primary"], true, "{engine}");
        assert_eq!(
            engine["cluster"]["address"],
            format!("127.0.0.1:{}", NODES[host]),
            "{engine}"
        );
        for setting in [
            "wsrep_sync_wait",
            "innodb_flush_log_at_trx_commit",
            "pc.ignore_sb",
        ] {
            assert!(
                engine["settings"][setting].is_string(),
                "{setting}: {engine}"
            );
        }
        assert_eq!(engine["settings"], proved["engine"]["settings"]);
        nodes_named.push(engine["cluster"]["node"].as_str().unwrap().to_string());
        let served = strategies["strategies"].as_array().unwrap();
        let refused = strategies["rejected"].as_array().unwrap();
        assert_eq!(
            served.len() + refused.len(),
            EVERY_METHOD.len(),
            "{strategies}"
        );
        // Every claim holds: a COMMIT the cluster failed is answered as
        // failed (19-past-one-node.md).
        assert!(refused.is_empty(), "node {}: {refused:?}", host + 1);
        for strategy in served {
            assert_eq!(strategy["canary"]["passed"], true, "{strategy}");
            // The first host ran the canaries; the others found them passed
            // under the same settings (a method the first refused is proved
            // again).
            let proved_first = proved["strategies"]
                .as_array()
                .unwrap()
                .iter()
                .any(|first| first["sha256"] == strategy["sha256"]);
            assert_eq!(
                strategy["canary"]["remembered"],
                host > 0 && proved_first,
                "{strategy}"
            );
        }
    }
    nodes_named.dedup();
    assert_eq!(nodes_named.len(), 3, "{nodes_named:?}");

    let members = lab.members(3).await;
    // Each method every host serves (all of them, unless a canary above
    // was refused).
    let mut served_by = Vec::new();
    for host in 0..3 {
        served_by.push(lab.ok(host, "/lab/strategies", None).await["strategies"].clone());
    }
    for (_, method) in EVERY_METHOD {
        let everywhere = served_by.iter().all(|served| {
            served
                .as_array()
                .unwrap()
                .iter()
                .any(|strategy| strategy["method"] == *method)
        });
        if !everywhere {
            continue;
        }
        let coupon = lab.coupon(method, 10).await;
        for host in 0..3 {
            let (status, body) = lab.issue(host, coupon, members[host], method).await;
            assert!(
                status == StatusCode::OK || status == StatusCode::ACCEPTED,
                "{method} on node {}: {status} {body}",
                host + 1
            );
        }
    }
    lab.finish().await;
}

/// `GET /lab/strategies` of `host` once no component waits for its canary.
async fn until_proved(lab: &GaleraLab, host: usize) -> Value {
    let started = Instant::now();
    loop {
        let strategies = lab.ok(host, "/lab/strategies", None).await;
        if strategies["awaiting"].as_array().is_some_and(Vec::is_empty)
            && strategies["onTrial"].as_array().is_some_and(Vec::is_empty)
        {
            return strategies;
        }
        assert!(started.elapsed() < PROVED, "still unproved: {strategies}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `GET_LOCK` is each node's own: while the test's session on node 1
/// holds a coupon's lock, MYSQL_NAMED_LOCK through the host on node 1
/// waits and gives up, and through the host on node 2 takes the same name
/// and issues — two holders at once. A race of members over both hosts
/// then either keeps the total (the cluster's certification refusing the
/// second writer of the coupon row) or not, and the result counts it, the
/// same on both nodes; every client told ISSUED has its row.
#[tokio::test]
async fn mysql_named_lock_on_two_nodes_has_two_holders_at_once() {
    let mut lab = GaleraLab::new(&["mysql_named_lock"]).await;
    lab.start_host(0, "off").await;
    lab.start_host(1, "off").await;
    let members = lab.members(200).await;
    let coupon = lab.coupon("MYSQL_NAMED_LOCK", 50).await;

    let mut holder = lab.nodes[0].acquire().await.unwrap();
    let name = couponlab_contract::keys::lock(coupon);
    let held: i64 = sqlx::query_scalar("SELECT GET_LOCK(?, 0)")
        .bind(&name)
        .fetch_one(&mut *holder)
        .await
        .unwrap();
    assert_eq!(held, 1);
    let (status, body) = lab.issue(0, coupon, members[0], "MYSQL_NAMED_LOCK").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "node 1: {body}");
    let (status, body) = lab.issue(1, coupon, members[1], "MYSQL_NAMED_LOCK").await;
    assert_eq!(
        status,
        StatusCode::OK,
        "node 2 took the lock node 1 holds: {body}"
    );
    let _: Option<i64> = sqlx::query_scalar("SELECT RELEASE_LOCK(?)")
        .bind(&name)
        .fetch_one(&mut *holder)
        .await
        .unwrap();
    drop(holder);

    let racing = &members[2..];
    let replies = join_all(
        racing
            .iter()
            .enumerate()
            .map(|(i, &member)| lab.issue(i % 2, coupon, member, "MYSQL_NAMED_LOCK")),
    )
    .await;
    // The member node 2 issued to while node 1's lock was held, and the
    // race's.
    let issued = replies
        .iter()
        .filter(|(_, body)| body["response"]["outcome"] == "ISSUED")
        .count() as i64
        + 1;
    let result = lab.settled_result(coupon).await;
    let rows = lab.rows(0, coupon).await;
    assert_eq!(rows, lab.rows(1, coupon).await, "the nodes disagree");
    assert_eq!(result["issueRows"], rows, "{result}");
    assert_eq!(result["overIssued"], (rows - 50).max(0), "{result}");
    assert_eq!(
        result["invariants"]["neverOverIssued"],
        rows <= 50,
        "{result}"
    );
    // Every answer ISSUED has its row: a COMMIT that failed certification
    // is answered as failed (it was once batched with the statement after
    // it, which the node answered OK for it: 19-past-one-node.md).
    let statement = format!(
        "SELECT member_id FROM `{}`.coupon_issues WHERE coupon_id = ?",
        lab.db_name
    );
    let with_rows: Vec<i64> = sqlx::query_scalar(&statement)
        .bind(coupon)
        .fetch_all(&lab.nodes[0])
        .await
        .unwrap();
    let told_without_row: Vec<&Value> = replies
        .iter()
        .filter(|(_, body)| body["response"]["outcome"] == "ISSUED")
        .filter(|(_, body)| {
            let member = body["response"]["memberId"].as_i64();
            !member.is_some_and(|member| with_rows.contains(&member))
        })
        .map(|(_, body)| body)
        .collect();
    println!(
        "MYSQL_NAMED_LOCK over two nodes: {issued} told ISSUED, {rows} rows of 50, answers {:?}",
        statuses(&replies)
    );
    assert!(
        told_without_row.is_empty(),
        "told ISSUED without a row: {told_without_row:?}"
    );
    assert_eq!(issued, rows, "{:?}", statuses(&replies));
    lab.finish().await;
}

/// On Galera MYSQL_NAMED_LOCK claims `member` and `acked`, not `total`
/// (its descriptor's entry for `galera`: `GET_LOCK` is each node's own),
/// says why in `GET /lab/strategies`, and serves once its canary proved
/// those. The canary's requests went to every node, not only the host's:
/// each node lists sessions of the lab's components' user on the lab's
/// database, though the host (on node 1) opens its own pools there alone.
#[tokio::test]
async fn mysql_named_lock_on_galera_claims_member_and_acked_and_its_canary_reaches_every_node() {
    let mut lab = GaleraLab::new(&["mysql_named_lock"]).await;
    lab.start_host(0, "changed").await;
    let strategies = until_proved(&lab, 0).await;
    let served = &strategies["strategies"][0];
    assert_eq!(served["method"], "MYSQL_NAMED_LOCK", "{strategies}");
    assert_eq!(served["claims"], json!(["member", "acked"]), "{served}");
    let why = served["claimsWhy"].as_str().unwrap_or_default();
    assert!(why.contains("GET_LOCK is per node"), "{served}");
    assert_eq!(served["canary"]["passed"], true, "{served}");
    assert_eq!(served["canary"]["remembered"], false, "{served}");
    for (node, pool) in lab.nodes.iter().enumerate() {
        let sessions: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
             WHERE DB = ? AND USER LIKE 'couponlab\\_strategy\\_%'",
        )
        .bind(&lab.db_name)
        .fetch_one(pool)
        .await
        .unwrap();
        assert!(
            sessions > 0,
            "no session of the components' user on node {}",
            node + 1
        );
    }
    let members = lab.members(1).await;
    let coupon = lab.coupon("MYSQL_NAMED_LOCK", 1).await;
    let (status, body) = lab.issue(0, coupon, members[0], "MYSQL_NAMED_LOCK").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    lab.finish().await;
}

/// A named-lock component that claims `total` on Galera too is refused by
/// its canary, whose requests, spread over the nodes, take one name on
/// two nodes at once: over the total, shown by a request and its node.
/// Not deterministic (the race may be refused by certification at the
/// sold-out boundary), so a measurement run by hand, 20 times:
/// `cargo nextest run --release -p couponlab-tests --run-ignored only -E
/// 'test(/a_named_lock_component_claiming/)'` (19-past-one-node.md).
#[tokio::test]
#[ignore = "a measurement: the canary refuses it in 17 to 18 runs of 20, not every run"]
async fn a_named_lock_component_claiming_the_total_on_galera_is_refused_by_its_canary() {
    let mut lab = GaleraLab::new(&["test_galera_named_lock"]).await;
    lab.start_host(0, "changed").await;
    let strategies = until_proved(&lab, 0).await;
    assert_eq!(strategies["strategies"], json!([]), "{strategies}");
    let refused = &strategies["rejected"][0];
    let reason = refused["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("claims `total`: never more issued than the total"),
        "{refused}"
    );
    let example = refused["canary"]["failure"]["example"].as_str();
    assert!(
        example.unwrap_or_default().contains("through node"),
        "{refused}"
    );
    lab.finish().await;
}

fn statuses(replies: &[(StatusCode, Value)]) -> BTreeMap<u16, usize> {
    let mut counted = BTreeMap::new();
    for (status, _) in replies {
        *counted.entry(status.as_u16()).or_default() += 1;
    }
    counted
}

/// PESSIMISTIC and ATOMIC_UPDATE with a host on each node: a row lock is
/// its node's own, so requests on different nodes no longer queue; the
/// loser of two that wrote the coupon row learns it at COMMIT (1213), and
/// its 503 names the certification conflict. The total holds, the nodes'
/// conflict counters grew, and members answered 503 who ask again sell
/// the coupon out.
#[tokio::test]
async fn pessimistic_and_atomic_update_across_three_nodes_keep_the_total_and_name_the_conflict() {
    let mut lab = GaleraLab::new(&["pessimistic", "atomic_update"]).await;
    for node in 0..3 {
        lab.start_host(node, "off").await;
    }
    const TOTAL: i64 = 30;
    for method in ["PESSIMISTIC", "ATOMIC_UPDATE"] {
        let members = lab.members(120).await;
        let coupon = lab.coupon(method, TOTAL as u64).await;
        let before: u64 = join_all(lab.nodes.iter().map(conflicts)).await.iter().sum();
        let mut asking = members.clone();
        let mut conflicts_named = 0;
        let mut answered = BTreeMap::new();
        let mut told_issued = 0;
        for _ in 0..30 {
            let replies = join_all(
                asking
                    .iter()
                    .enumerate()
                    .map(|(i, &member)| lab.issue(i % 3, coupon, member, method)),
            )
            .await;
            let mut again = Vec::new();
            for (&member, (status, body)) in asking.iter().zip(&replies) {
                if *status == StatusCode::SERVICE_UNAVAILABLE {
                    let message = body["error"]["message"].as_str().unwrap_or_default();
                    assert!(message.starts_with("DEADLOCK"), "{method}: {body}");
                    assert!(message.contains("certification conflict"), "{body}");
                    conflicts_named += 1;
                    again.push(member);
                } else {
                    *answered.entry(status.as_u16()).or_insert(0) += 1;
                    told_issued += usize::from(body["response"]["outcome"] == "ISSUED");
                }
            }
            if again.is_empty() {
                break;
            }
            asking = again;
        }
        let after: u64 = join_all(lab.nodes.iter().map(conflicts)).await.iter().sum();
        let result = lab.settled_result(coupon).await;
        println!(
            "{method} over three nodes: answers {answered:?}, {conflicts_named} 503s naming \
             the conflict, node counters +{}",
            after - before
        );
        assert!(conflicts_named > 0, "{method}: no conflict across nodes");
        assert!(after > before, "{method}: the nodes counted no conflict");
        // Each host's /metrics gives its node's counters as read when
        // scraped: never fewer than the test read before.
        let mut scraped = 0;
        for host in 0..3 {
            scraped += lab.galera_conflicts_scraped(host).await;
        }
        assert!(
            scraped >= after,
            "{method}: /metrics {scraped}, nodes {after}"
        );
        assert_eq!(result["issueRows"], TOTAL, "{method}: {result}");
        assert_eq!(told_issued as i64, TOTAL, "{method}: every 200 has its row");
        assert_eq!(
            result["invariants"],
            json!({ "neverOverIssued": true, "onePerMember": true, "countMatchesRows": true }),
            "{method}: {result}"
        );
        let counted = &result["engine"]["cluster"];
        assert!(
            counted["certFailures"].is_u64() && counted["bfAborts"].is_u64(),
            "{result}"
        );
        // The coupon's traces come with their node's counters.
        let traces = lab
            .ok(0, &format!("/lab/coupons/{coupon}/traces"), None)
            .await;
        assert!(traces["cluster"]["bfAborts"].is_u64(), "{traces}");
        for node in 1..3 {
            assert_eq!(
                lab.rows(node, coupon).await,
                TOTAL,
                "{method}: node {}",
                node + 1
            );
        }
    }
    lab.finish().await;
}

/// A node's `mariadbd` stopped (SIGSTOP) until this is dropped (SIGCONT),
/// as the load runner's `galera-pause` fault stops it.
struct Paused(u32);

impl Paused {
    /// Stops node `node` (0-2) of `cargo xtask galera up`, by its pid file.
    fn node(node: usize) -> Paused {
        let pid_file = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join(format!("../target/galera/node{}/mariadbd.pid", node + 1));
        let pid = std::fs::read_to_string(&pid_file)
            .unwrap_or_else(|err| panic!("{}: {err}", pid_file.display()));
        let pid: u32 = pid.trim().parse().unwrap();
        assert!(signal(pid, "STOP"), "SIGSTOP {pid}");
        Paused(pid)
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        signal(self.0, "CONT");
    }
}

/// Sends signal `name` to `pid`: whether it was sent.
fn signal(pid: u32, name: &str) -> bool {
    std::process::Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .is_ok_and(|status| status.success())
}

/// A COMMIT sent while a node is paused waits for the cluster's
/// certification past its call's deadline (1 s here), and commits once the
/// node continues, whatever became of its connection (a KILL of its
/// session is answered at once, and the session stays until it has
/// committed). Its member is told the outcome is unknown, never that the
/// transaction rolled back; the host settles it from the rows once that
/// session is gone, and what it says it became is what the rows hold.
#[tokio::test]
async fn a_commit_a_paused_node_stalls_past_its_deadline_is_settled_from_the_rows_never_told_rolled_back()
 {
    const COUPONS: usize = 6;
    /// The calls end by their deadline (1 s), well inside a pause the
    /// cluster keeps its paused node through (`evs.suspect_timeout`, 5 s).
    const ANSWERED: Duration = Duration::from_secs(4);
    let cluster = turns::alone(CLUSTER_TURN).await;
    let mut lab = GaleraLab::taking(&["pessimistic"], cluster).await;
    lab.start_host_with(0, "off", &[("COUPONLAB_REQUEST_TIMEOUT_MS", "1000")])
        .await;
    let members = lab.members(COUPONS as u64).await;
    let mut coupons = Vec::new();
    for _ in 0..COUPONS {
        coupons.push(lab.coupon("PESSIMISTIC", 1).await);
    }
    let paused = Paused::node(2);
    // A coupon each: no request waits for another's row lock, every one
    // sends its COMMIT, and every COMMIT waits for the paused node.
    let asked = coupons
        .iter()
        .zip(&members)
        .map(|(&coupon, &member)| lab.issue(0, coupon, member, "PESSIMISTIC"));
    let replies = tokio::time::timeout(ANSWERED, join_all(asked))
        .await
        .expect("every call ends by its deadline");
    drop(paused);

    let (mut unknown, mut settled_issued) = (0, 0);
    for ((&coupon, &member), (status, body)) in coupons.iter().zip(&members).zip(&replies) {
        let result = lab.settled_result(coupon).await;
        let rows = lab.rows(0, coupon).await;
        let message = body["error"]["message"].as_str().unwrap_or_default();
        if status.is_success() {
            assert_eq!(rows, 1, "member {member} told {status} {body} has no row");
        } else if message.contains("outcome unknown") {
            unknown += 1;
            settled_issued += rows;
            let settled = until_settled(&lab, coupon).await;
            assert_eq!(
                settled,
                json!({ "asked": 1, "issued": rows, "notIssued": 1 - rows }),
                "member {member}, {rows} row: {body} {result}"
            );
        } else {
            assert_eq!(rows, 0, "member {member} told {status} {body} holds a row");
        }
    }
    println!(
        "PESSIMISTIC with node 3 paused: answers {:?}, {unknown} told the outcome is unknown, \
         {settled_issued} of them settled as issued",
        statuses(&replies)
    );
    assert!(
        unknown > 0,
        "no COMMIT was in flight at its call's deadline: {replies:?}"
    );
    lab.finish().await;
}

/// The settlements of `coupon`'s PESSIMISTIC requests from host 0, once
/// each one kept to settle is settled.
async fn until_settled(lab: &GaleraLab, coupon: u64) -> Value {
    let started = Instant::now();
    loop {
        let result = lab
            .ok(0, &format!("/lab/coupons/{coupon}/result"), None)
            .await;
        let settlements = &result["requests"]["byMethod"]["PESSIMISTIC"]["settlements"];
        let count = |name: &str| settlements[name].as_i64().unwrap_or(0);
        if count("asked") > 0 && count("asked") == count("issued") + count("notIssued") {
            return settlements.clone();
        }
        assert!(started.elapsed() < START, "never settled: {result}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
