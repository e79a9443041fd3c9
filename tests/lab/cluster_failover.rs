//! A Redis Cluster master killed mid-burst: three masters with a replica
//! each (`redis-cli --cluster create --cluster-replicas 1`), a node timeout
//! of 5 s, as `cargo xtask cluster up --replicas 1` sets. The cluster promotes the dead master's replica; the lab follows
//! `MOVED` to it, and REDIS_LUA_SHARDED, whose stock is split over shards
//! of their own hash tags, sells the coupon out exactly.

use std::time::{Duration, Instant};

use couponlab_contract::{keys, shards};

use crate::common::{Setup, assert_invariants_hold};
use crate::failover_burst::{Lane, burst, members_of, rows_keep_the_invariants};
use crate::redis_server::{RedisServer, cli, node_port};

const NODE_TIMEOUT: Duration = Duration::from_millis(5_000);
/// How long the cluster may take to form, and to promote a replica.
const READY_LIMIT: Duration = Duration::from_secs(60);

/// Six cluster-enabled nodes, the first three masters, each of the others
/// a replica of one; stopped when dropped.
struct ReplicatedCluster {
    nodes: Vec<RedisServer>,
}

impl ReplicatedCluster {
    fn start() -> ReplicatedCluster {
        let dir = std::env::temp_dir().join(format!(
            "couponlab-cluster-failover-{}-{}",
            std::process::id(),
            node_port()
        ));
        let timeout = NODE_TIMEOUT.as_millis().to_string();
        let nodes: Vec<RedisServer> = (0..6)
            .map(|_| {
                let args = [
                    "--cluster-enabled",
                    "yes",
                    "--cluster-node-timeout",
                    &timeout,
                ];
                RedisServer::start_with(&args, Some(dir.clone()))
            })
            .collect();
        for node in &nodes {
            node.until_answering();
        }
        let addresses: Vec<String> = nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port))
            .collect();
        let created = std::process::Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(created.success(), "redis-cli --cluster create failed");
        let cluster = ReplicatedCluster { nodes };
        let started = Instant::now();
        // Ok, every node knows the three replicas, and each replica has
        // copied its master: a replica that never finished its first sync
        // counts as disconnected from the start, and will not fail over.
        while !cluster.ports().iter().all(|&port| {
            let replication = cli(port, &["info", "replication"]);
            cli(port, &["cluster", "info"]).contains("cluster_state:ok")
                && cli(port, &["cluster", "nodes"]).matches("slave").count() == 3
                && (replication.contains("role:master")
                    || replication.contains("master_link_status:up"))
        }) {
            assert!(
                started.elapsed() < READY_LIMIT,
                "the cluster never came up with its replicas"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        cluster
    }

    fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|node| node.port).collect()
    }

    fn seeds(&self) -> String {
        self.nodes
            .iter()
            .map(|node| format!("redis://127.0.0.1:{}", node.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The port of the master that owns `key`, as the node on `asked`
    /// answers: itself, or the one its `MOVED` names.
    fn owner_of(asked: u16, key: &str) -> Option<u16> {
        let reply = cli(asked, &["exists", key]);
        let reply = reply.trim();
        match reply.trim_start_matches("(error) ").strip_prefix("MOVED ") {
            Some(moved) => moved.rsplit(':').next()?.trim().parse().ok(),
            None => reply.parse::<u64>().ok().map(|_| asked),
        }
    }

    fn node(&mut self, port: u16) -> &mut RedisServer {
        self.nodes
            .iter_mut()
            .find(|node| node.port == port)
            .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_lua_sharded_follows_a_cluster_failover_mid_burst_and_sells_out_exactly() {
    const TOTAL: u64 = 200;
    const MEMBERS: u64 = 800;
    const FAULT_AFTER: usize = 60;
    let mut cluster = tokio::task::spawn_blocking(ReplicatedCluster::start)
        .await
        .unwrap();
    let lab = Setup::with(&["redis_lua_sharded"])
        .redis_url(cluster.seeds())
        .tune(|config| config.redis_cluster = true)
        .start()
        .await;
    let lane = Lane {
        method: "REDIS_LUA_SHARDED",
        coupon: lab.coupon(TOTAL).await,
        members: lab.members(MEMBERS).await,
    };
    // The master of shard 0's keys dies.
    let shard_set = keys::shard_issued(lane.coupon, 0);
    let asked = cluster.nodes[0].port;
    let killed = ReplicatedCluster::owner_of(asked, &shard_set).expect("a master owns shard 0");
    let kill = async { cluster.node(killed).kill() };
    let seen = burst(&lab, std::slice::from_ref(&lane), 8, FAULT_AFTER, kill).await;
    let served_again = seen.served_again[lane.method];

    // The promoted replica owns the shard's keys now.
    let started = Instant::now();
    let promoted = loop {
        let survivor = cluster
            .ports()
            .into_iter()
            .find(|&port| port != killed)
            .unwrap();
        if let Some(owner) = ReplicatedCluster::owner_of(survivor, &shard_set)
            && owner != killed
        {
            break owner;
        }
        assert!(
            started.elapsed() < READY_LIMIT,
            "no replica of 127.0.0.1:{killed} was promoted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    lab.until_nothing_to_settle(Duration::from_secs(30)).await;

    let issued = rows_keep_the_invariants(&lab, lane.method, lane.coupon, TOTAL).await;
    assert_eq!(issued.len() as u64, TOTAL, "the coupon sells out exactly");
    assert_invariants_hold(&lab.result(lane.coupon).await);
    // What the promoted master sells on shard 0: its stock, set from the
    // coupon's total, less its set; the members with a row there it lost.
    let stock: u64 = cli(promoted, &["get", &keys::shard_stock(lane.coupon, 0)])
        .trim()
        .parse()
        .expect("shard 0 has a stock on the promoted master");
    assert_eq!(stock, shards::stock(TOTAL, 0));
    let reserved = members_of(promoted, &shard_set);
    let lost = issued
        .iter()
        .filter(|&&member| shards::of(member) == 0 && !reserved.contains(&member))
        .count();

    // The old master comes back as a replica of the promoted one.
    let rejoined = cluster.node(killed).start_again();
    while !cli(killed, &["info", "replication"]).contains("role:slave") {
        assert!(
            rejoined.elapsed() < READY_LIMIT,
            "127.0.0.1:{killed} did not rejoin as a replica"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "REDIS_LUA_SHARDED on a cluster, master 127.0.0.1:{killed} (shard 0) SIGKILLed after {FAULT_AFTER} served: \
         127.0.0.1:{promoted} promoted; served again {served_again:?} after the kill; rows {} of {TOTAL}; \
         shard 0's reservations lost {lost}; outcomes {:?}",
        issued.len(),
        seen.outcomes.get(lane.method)
    );
    lab.finish().await;
}
