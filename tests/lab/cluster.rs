//! The lab on a Redis Cluster: three masters started here from Debian's
//! `redis-server`, joined by `redis-cli --cluster create`, and a server
//! with `COUPONLAB_REDIS_CLUSTER` on their seed list. Every method, 400
//! concurrent requests for a coupon of 80; REDIS_LUA_SHARDED at 500.

use std::time::{Duration, Instant};

use couponlab_contract::{ISSUE_STREAM, WRITE_BEHIND_STREAM, keys, shards};
use serde_json::{Value, json};

use crate::common::{Reply, Setup, TestLab};
use crate::redis_server::{RedisServer, cli};

/// Three cluster-enabled nodes, stopped when dropped (a failed test too).
pub struct LocalCluster {
    nodes: Vec<RedisServer>,
    pub ports: Vec<u16>,
}

impl LocalCluster {
    pub fn start() -> LocalCluster {
        let dir = std::env::temp_dir().join(format!(
            "couponlab-cluster-{}-{}",
            std::process::id(),
            crate::redis_server::node_port()
        ));
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| RedisServer::start_with(&["--cluster-enabled", "yes"], Some(dir.clone())))
            .collect();
        for node in &nodes {
            node.until_answering();
        }
        let ports: Vec<u16> = nodes.iter().map(|node| node.port).collect();
        let cluster = LocalCluster { nodes, ports };
        let started = Instant::now();
        let addresses: Vec<String> = cluster
            .ports
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        let created = std::process::Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(created.success(), "redis-cli --cluster create failed");
        cluster.until_ok(started);
        cluster
    }

    /// Until every node says the cluster is ok (30 s from `started` at most).
    pub fn until_ok(&self, started: Instant) {
        while !self
            .ports
            .iter()
            .all(|&port| cli(port, &["cluster", "info"]).contains("cluster_state:ok"))
        {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the cluster never came up"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn seeds(&self) -> String {
        self.ports
            .iter()
            .map(|port| format!("redis://127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The port of the node that owns `key`.
    pub fn owner_of(&self, key: &str) -> u16 {
        let slot: u16 = cli(self.ports[0], &["cluster", "keyslot", key])
            .trim()
            .parse()
            .unwrap();
        cli(self.ports[0], &["cluster", "nodes"])
            .lines()
            .find(|line| line_owns(line, slot))
            .and_then(|line| {
                let address = line.split_whitespace().nth(1)?.split('@').next()?;
                address.rsplit(':').next()?.parse().ok()
            })
            .expect("a master owns every slot")
    }

    /// The node on `port`.
    pub fn node(&mut self, port: u16) -> &mut RedisServer {
        let at = self.ports.iter().position(|&p| p == port).unwrap();
        &mut self.nodes[at]
    }

    /// SIGKILLs the node on `port`.
    pub fn kill(&mut self, port: u16) {
        self.node(port).kill();
    }

    /// Until the server's subscriber listens on the first seed, where it
    /// subscribes.
    async fn subscriber_listening(&self) {
        let started = Instant::now();
        let subscribers = || {
            let numsub = ["pubsub", "numsub", couponlab_contract::REQUESTS_CHANNEL];
            let reply = cli(self.ports[0], &numsub);
            reply
                .lines()
                .nth(1)
                .and_then(|n| n.trim().parse::<u64>().ok())
        };
        while subscribers().unwrap_or(0) == 0 {
            assert!(started.elapsed() < Duration::from_secs(10), "no subscriber");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Whether a `CLUSTER NODES` line lists `slot` among its ranges.
fn line_owns(line: &str, slot: u16) -> bool {
    line.split_whitespace()
        .skip(8)
        .any(|range| match range.split_once('-') {
            Some((from, to)) => match (from.parse::<u16>(), to.parse::<u16>()) {
                (Ok(from), Ok(to)) => (from..=to).contains(&slot),
                _ => false,
            },
            None => range.parse() == Ok(slot),
        })
}

/// The Redis methods' components; the database methods' are
/// [`crate::mysql_methods::COMPONENTS`].
const REDIS_COMPONENTS: [&str; 15] = [
    "redis_set_only",
    "redis_multi_exec",
    "redis_watch",
    "redis_lua",
    "redis_async",
    "redis_pubsub",
    "redis_stream",
    "redis_stream_atomic",
    "redis_write_behind",
    "redis_write_behind_no_tx",
    "redis_lua_gate",
    "redis_lua_sharded",
    "redis_incr",
    "redis_spin_lock",
    "redis_pubsub_lock",
];

/// Every method's component, and the probe of the WIT round trips.
fn every_component() -> Vec<&'static str> {
    crate::mysql_methods::COMPONENTS
        .into_iter()
        .chain(REDIS_COMPONENTS)
        .chain(["mysql_named_lock", "test_probe"])
        .collect()
}

/// The methods that reserve in `coupon:issued:{couponId}`: their set must
/// end equal to the issue rows.
const RESERVE_IN_THE_SET: [&str; 11] = [
    "REDIS_SET_ONLY",
    "REDIS_MULTI_EXEC",
    "REDIS_WATCH",
    "REDIS_LUA",
    "REDIS_ASYNC",
    "REDIS_PUBSUB",
    "REDIS_STREAM",
    "REDIS_STREAM_ATOMIC",
    "REDIS_WRITE_BEHIND",
    "REDIS_WRITE_BEHIND_NO_TX",
    "REDIS_INCR",
];

/// READ_COMMITTED and REPEATABLE_READ read the count without a lock: under
/// a spike they may issue more than the total, which is their lesson and
/// has nothing to do with Redis. Every other method must issue the total.
const MAY_OVER_ISSUE: [&str; 2] = ["READ_COMMITTED", "REPEATABLE_READ"];

const TOTAL: u64 = 80;
const REQUESTS: u64 = 400;

async fn cluster_lab(cluster: &LocalCluster) -> TestLab {
    let seeds = cluster.seeds();
    Setup::with(&every_component())
        .redis_url(seeds)
        .tune(|config| {
            config.redis_cluster = true;
            config.capabilities.sql.db_pool_size = 30;
        })
        .start()
        .await
}

/// Every member asks once, all at once; a member answered 503 (a deadlock,
/// a version conflict, a gate's throttle: nothing decided) asks again,
/// until every member has its answer.
async fn every_member_answered(
    lab: &TestLab,
    coupon: u64,
    members: &[u64],
    method: &str,
) -> Vec<Reply> {
    let mut asking: Vec<u64> = members.to_vec();
    let mut answered = Vec::new();
    for _ in 0..20 {
        let replies = lab.issue_all(coupon, &asking, method).await;
        let mut again = Vec::new();
        for (member, reply) in asking.iter().zip(replies) {
            match reply.status.as_u16() {
                200 | 202 | 409 => answered.push(reply),
                503 | 429 => again.push(*member),
                other => panic!("{method}: unexpected {other}: {}", reply.body),
            }
        }
        if again.is_empty() {
            return answered;
        }
        asking = again;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{method}: {} members never got an answer", asking.len());
}

/// 400 members race for a coupon of 80 through `method`; the invariants
/// and the record, checked after the asynchronous methods drained.
async fn the_total_is_issued_on_the_cluster(
    cluster: &LocalCluster,
    lab: &TestLab,
    method: &str,
) -> Value {
    let (members, coupon) = lab.members_and_coupon(REQUESTS, TOTAL).await;
    if method == "REDIS_PUBSUB" {
        cluster.subscriber_listening().await;
    }
    let replies = every_member_answered(lab, coupon, &members, method).await;
    let accepted = replies.iter().filter(|reply| reply.status == 202).count() as u64;
    let result = if accepted > 0 {
        lab.drained(coupon, accepted).await
    } else {
        lab.result(coupon).await
    };
    let issued = lab.issued_members(coupon).await;
    assert!(
        issued.windows(2).all(|w| w[0] < w[1]),
        "{method}: a member twice"
    );
    if MAY_OVER_ISSUE.contains(&method) {
        assert!(
            issued.len() as u64 >= TOTAL,
            "{method}: {} rows",
            issued.len()
        );
    } else {
        assert_eq!(issued.len() as u64, TOTAL, "{method}: {result}");
        assert_eq!(
            result["invariants"]["neverOverIssued"],
            json!(true),
            "{method}"
        );
    }
    assert_eq!(
        result["invariants"]["onePerMember"],
        json!(true),
        "{method}"
    );
    // The write-behind methods keep the count in Redis; their reconcile
    // writes it to the coupon's row.
    if !method.starts_with("REDIS_WRITE_BEHIND") {
        assert_eq!(
            result["invariants"]["countMatchesRows"],
            json!(true),
            "{method}: {result}"
        );
    }
    if RESERVE_IN_THE_SET.contains(&method) {
        assert_eq!(
            lab.reserved_members(coupon).await,
            issued,
            "{method}: the set"
        );
    }
    match method {
        "REDIS_LUA_SHARDED" => {
            assert_eq!(
                lab.reserved_on_shards(coupon).await,
                issued,
                "{method}: the shards"
            );
        }
        "REDIS_LUA_GATE" => {
            let left: Option<u64> = lab
                .redis_query(redis::cmd("GET").arg(keys::gate_remaining(coupon)))
                .await;
            assert_eq!(left, Some(0), "{method}: the drop's stock");
        }
        _ => {}
    }
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_method_keeps_its_promise_on_a_three_master_cluster() {
    let mut cluster = LocalCluster::start();
    let lab = cluster_lab(&cluster).await;
    // What each method did, for the record (`--nocapture` prints it).
    eprintln!("method | issue rows of {TOTAL} | distinct members | requests | outcomes | ms");
    for component in every_component() {
        if component == "test_probe" {
            continue;
        }
        let method = component.to_ascii_uppercase();
        let started = Instant::now();
        let result = the_total_is_issued_on_the_cluster(&cluster, &lab, &method).await;
        let requests = &result["requests"];
        eprintln!(
            "{method} | {} | {} | {} | {} | {}",
            result["issueRows"],
            result["distinctMembers"],
            requests["total"],
            requests["byOutcome"],
            started.elapsed().as_millis()
        );
    }

    // A coupon's keys and its streams share one node; coupons spread.
    let owner = |key: String| cluster.owner_of(&key);
    let coupon = lab.coupon(1).await;
    let node = owner(keys::issued(coupon));
    assert_eq!(owner(keys::total(coupon)), node);
    assert_eq!(owner(ISSUE_STREAM.key(coupon)), node);
    assert_eq!(owner(WRITE_BEHIND_STREAM.key(coupon)), node);
    let nodes: std::collections::BTreeSet<u16> =
        (1..=30).map(|c| owner(keys::issued(coupon + c))).collect();
    assert_eq!(nodes.len(), 3, "30 coupons on {nodes:?}");

    // A dedicated connection's MULTI, sent before any key, opens the
    // transaction on the node of the keys that follow.
    let coupon = lab.coupon(1).await;
    assert_eq!(
        crate::wit_roundtrip::probe(&lab, "exec", coupon, 1).await,
        r#"[OK, 1, 2, ["1", "2"]]"#
    );

    // REDIS_LUA_SHARDED at 500 concurrent requests, its shards on several
    // nodes: 250 members ask twice at once for a coupon of 100.
    let (members, coupon) = lab.members_and_coupon(250, 100).await;
    let shard_nodes: std::collections::BTreeSet<u16> = (0..shards::COUNT)
        .map(|shard| owner(keys::shard_stock(coupon, shard)))
        .collect();
    assert!(shard_nodes.len() > 1, "every shard on {shard_nodes:?}");
    let twice: Vec<u64> = members.iter().chain(&members).copied().collect();
    let replies = lab.issue_all(coupon, &twice, "REDIS_LUA_SHARDED").await;
    assert!(
        replies
            .iter()
            .all(|r| matches!(r.status.as_u16(), 200 | 409))
    );
    let issued = lab.issued_members(coupon).await;
    assert!(issued.len() <= 100, "{} rows of 100", issued.len());
    assert!(issued.windows(2).all(|w| w[0] < w[1]), "a member twice");
    let answered = replies.iter().filter(|r| r.status == 200).count();
    assert_eq!(answered, issued.len(), "every 200 is one row");
    assert_eq!(lab.reserved_on_shards(coupon).await, issued);

    // DELETE /lab/data reaches every node.
    let deleted = lab
        .request(reqwest::Method::DELETE, "/lab/data", None)
        .await;
    assert!(deleted.expect_ok()["deletedRedisKeys"].as_u64().unwrap() > 0);
    for &port in &cluster.ports {
        assert_eq!(
            cli(port, &["--scan", "--pattern", "coupon:*"]).trim(),
            "",
            "node {port} kept coupon keys"
        );
    }

    // A master lost: a coupon it held answers 503 with a message, one on a
    // master still up is served (the cluster declares the lost slots
    // failed only after its node timeout, 15 s).
    let members = lab.members(2).await;
    let (on_lost, on_live) = (lab.coupon(5).await, lab.coupon(5).await);
    let lost = cluster.owner_of(&keys::issued(on_lost));
    let live_coupon = {
        let mut coupon = on_live;
        while cluster.owner_of(&keys::issued(coupon)) == lost {
            coupon = lab.coupon(5).await;
        }
        coupon
    };
    cluster.kill(lost);
    let refused = lab.issue(on_lost, members[0], "REDIS_LUA").await;
    let message = refused.fails_with(503);
    assert!(message.contains("Redis"), "{message}");
    lab.issue(live_coupon, members[1], "REDIS_LUA")
        .await
        .expect_ok();
    lab.finish().await;
}
