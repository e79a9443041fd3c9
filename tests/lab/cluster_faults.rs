//! The Redis sandbox on a cluster: a runaway script takes only its own
//! master, and a master that was down when the server started gets the
//! components' user and scripts when it comes back.

use std::time::{Duration, Instant};

use couponlab_contract::keys;

use crate::cluster::LocalCluster;
use crate::common::{Setup, TestLab};
use crate::redis_server::cli;

const DEADLINE: Duration = Duration::from_millis(1_500);

async fn cluster_lab(cluster: &LocalCluster, components: &[&'static str]) -> TestLab {
    let seeds = cluster.seeds();
    Setup::with(components)
        .redis_url(seeds)
        .tune(|config| {
            config.redis_cluster = true;
            config.request_timeout_ms = DEADLINE.as_millis() as u64;
        })
        .start()
        .await
}

/// A new coupon whose keys the master on `port` owns (`on`), or does not.
async fn coupon_where(lab: &TestLab, cluster: &LocalCluster, port: u16, on: bool) -> u64 {
    loop {
        let coupon = lab.coupon(50).await;
        if (cluster.owner_of(&keys::issued(coupon)) == port) == on {
            return coupon;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runaway_script_takes_only_its_own_master_and_that_one_serves_again_after_the_deadline() {
    let cluster = LocalCluster::start();
    let lab = cluster_lab(&cluster, &["test_hostile", "redis_lua"]).await;
    let members = lab.members(10).await;
    let busy_master = cluster.ports[0];
    let looped = coupon_where(&lab, &cluster, busy_master, true).await;
    let elsewhere = coupon_where(&lab, &cluster, busy_master, false).await;

    let started = Instant::now();
    let looping = lab.issue_keyed(looped, members[0], "TEST_HOSTILE", "lua-loop");
    let meanwhile = async {
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert!(cli(busy_master, &["ping"]).contains("BUSY"));
        // The other masters never stop serving.
        for &member in &members[1..5] {
            lab.issue(elsewhere, member, "REDIS_LUA").await.expect_ok();
        }
        loop {
            if cli(busy_master, &["ping"]).trim() == "PONG" {
                return started.elapsed();
            }
            assert!(started.elapsed() < DEADLINE + Duration::from_secs(3));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let (reply, serving_again) = tokio::join!(looping, meanwhile);
    assert_eq!(reply.status, 504, "{}", reply.body);
    assert!(
        serving_again < DEADLINE + Duration::from_secs(1),
        "the master served again only {serving_again:?} after the call started"
    );
    println!("cluster: the looping master answered PONG {serving_again:?} after the call started");
    lab.issue(looped, members[5], "REDIS_LUA").await.expect_ok();
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_down_when_the_server_started_serves_every_method_once_it_is_back() {
    let mut cluster = LocalCluster::start();
    let late = cluster.ports[2];
    cluster.kill(late);
    let methods = [
        ("redis_lua", "REDIS_LUA"),
        ("redis_multi_exec", "REDIS_MULTI_EXEC"),
        ("redis_watch", "REDIS_WATCH"),
        ("redis_stream_atomic", "REDIS_STREAM_ATOMIC"),
        ("redis_write_behind", "REDIS_WRITE_BEHIND"),
    ];
    let components: Vec<&'static str> = methods.iter().map(|(file, _)| *file).collect();
    let lab = cluster_lab(&cluster, &components).await;
    let mut coupons = Vec::new();
    for _ in methods {
        coupons.push(coupon_where(&lab, &cluster, late, true).await);
    }

    let back = cluster.node(late).start_again();
    cluster.until_ok(Instant::now());
    for ((_, method), coupon) in methods.iter().zip(&coupons) {
        let started = Instant::now();
        loop {
            let member = lab.members(1).await[0];
            let reply = lab.issue(*coupon, member, method).await;
            if reply.status.is_success() {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{method} on the master that came back: {}",
                reply.body
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        println!(
            "{method}: served on the master that came back {:?} after it answered",
            back.elapsed()
        );
    }
    lab.finish().await;
}
