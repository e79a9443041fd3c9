//! `cargo xtask cluster up|down [--replicas 1]`: a Redis Cluster of three
//! masters on this machine, from Debian's `redis-server` — cluster-enabled
//! nodes on ports 7000-7002, joined by `redis-cli --cluster create` — with
//! its files under `target/redis-cluster/<port>/`. With `--replicas 1`,
//! each master has a replica (ports 7003-7005), which the cluster promotes
//! when its master fails. `up` prints the seed list a server takes as
//! `REDIS_URL`; a cluster already up is left as it is.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::packages::ensure_debian;
use crate::target_dir;

/// The nodes' ports: 7000, 7001, 7002, as Redis's own cluster tutorial has
/// them, and 7003-7005 for the replicas of `--replicas 1`.
pub const PORTS: [u16; 3] = [7000, 7001, 7002];
const WITH_REPLICAS: [u16; 6] = [7000, 7001, 7002, 7003, 7004, 7005];

/// How long the nodes may take to answer, and the cluster to agree it is up.
const READY_LIMIT: Duration = Duration::from_secs(30);

pub fn main(args: &[String]) -> anyhow::Result<()> {
    let replicas = match &args.get(1..).unwrap_or_default() {
        [] => 0,
        [flag, count] if flag == "--replicas" && (count == "0" || count == "1") => count.parse()?,
        _ => bail!("usage: cargo xtask cluster up|down [--replicas 0|1]"),
    };
    let ports: &[u16] = if replicas == 1 {
        &WITH_REPLICAS
    } else {
        &PORTS
    };
    match args.first().map(String::as_str) {
        Some("up") => {
            let seeds = up(ports, replicas)?;
            let each = if replicas == 1 {
                ", a replica each,"
            } else {
                ""
            };
            println!("a Redis Cluster of 3 masters{each} is up; its seed nodes: {seeds}");
            Ok(())
        }
        // Whichever way it was started, replicas too.
        Some("down") => {
            down(&WITH_REPLICAS)?;
            println!("the local Redis Cluster is down");
            Ok(())
        }
        _ => bail!("usage: cargo xtask cluster up|down [--replicas 0|1]"),
    }
}

/// Starts a node on each of `ports` and joins them into one cluster, each
/// master with `replicas` replicas, unless they already form one; returns
/// the seed list (`redis://127.0.0.1:7000,...`).
pub fn up(ports: &[u16], replicas: u8) -> anyhow::Result<String> {
    let seeds = ports
        .iter()
        .map(|port| format!("redis://127.0.0.1:{port}"))
        .collect::<Vec<_>>()
        .join(",");
    if ports.iter().all(|&port| cluster_is_ok(port)) {
        return Ok(seeds);
    }
    ensure_debian("redis-server", "redis-server")?;
    ensure_debian("redis-cli", "redis-tools")?;
    for &port in ports {
        if answers(port) {
            bail!(
                "port {port} already has a Redis that is not a node of a working cluster; `cargo xtask cluster down` stops the one this task started"
            );
        }
        let dir = node_dir(port);
        // A node's nodes.conf remembers its old cluster: start afresh.
        std::fs::remove_dir_all(&dir).ok();
        std::fs::create_dir_all(&dir)?;
        start_daemon(
            redis_daemon(port, &dir)
                .args([
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                ])
                .args(["--cluster-node-timeout", "5000"]),
            port,
            &dir,
        )?;
    }
    wait_for(
        || ports.iter().all(|&port| answers(port)),
        "the nodes to answer",
    )?;
    let nodes: Vec<String> = ports
        .iter()
        .map(|port| format!("127.0.0.1:{port}"))
        .collect();
    let created = Command::new("redis-cli")
        .arg("--cluster")
        .arg("create")
        .args(&nodes)
        .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
        .output()
        .context("cannot run redis-cli --cluster create")?;
    if !created.status.success() {
        bail!(
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&created.stdout)
        );
    }
    wait_for(
        || ports.iter().all(|&port| cluster_is_ok(port)),
        "the cluster to be ok",
    )?;
    // A replica is told its master once the nodes met: until the others
    // hear of it, a master's failure has no replica to promote.
    let replicas_expected = ports.len() / (1 + usize::from(replicas)) * usize::from(replicas);
    wait_for(
        || {
            ports
                .iter()
                .all(|&port| replicas_known(port) == replicas_expected)
        },
        "every node to know each master's replica",
    )?;
    Ok(seeds)
}

/// Stops the nodes on `ports` without saving and removes their files.
pub fn down(ports: &[u16]) -> anyhow::Result<()> {
    for &port in ports {
        if answers(port) {
            let _ = redis_cli(port, &["shutdown", "nosave"]);
        }
        std::fs::remove_dir_all(node_dir(port)).ok();
    }
    wait_for(
        || ports.iter().all(|&port| !answers(port)),
        "the nodes to stop",
    )
}

/// `redis-server` on 127.0.0.1:`port` as a daemon keeping nothing on disk,
/// working in `dir` with its log and pid file there.
pub fn redis_daemon(port: u16, dir: &Path) -> Command {
    let mut command = Command::new("redis-server");
    command
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "yes"])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(dir.join("redis.log"))
        .arg("--pidfile")
        .arg(dir.join("redis.pid"));
    command
}

/// Runs a `redis-server` that daemonizes, failing with where its log is.
pub fn start_daemon(command: &mut Command, port: u16, dir: &Path) -> anyhow::Result<()> {
    let status = command.status().context("cannot run redis-server")?;
    if !status.success() {
        bail!(
            "redis-server on port {port} failed with {status}; see {}",
            dir.join("redis.log").display()
        );
    }
    Ok(())
}

fn node_dir(port: u16) -> PathBuf {
    target_dir().join("redis-cluster").join(port.to_string())
}

/// `redis-cli -p port args...`, its standard output when it succeeded.
pub fn redis_cli(port: u16, args: &[&str]) -> Option<String> {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn answers(port: u16) -> bool {
    redis_cli(port, &["ping"]).is_some_and(|reply| reply.trim() == "PONG")
}

/// Whether the node on `port` says its cluster serves every slot.
fn cluster_is_ok(port: u16) -> bool {
    redis_cli(port, &["cluster", "info"]).is_some_and(|info| info.contains("cluster_state:ok"))
}

/// How many connected replicas the node on `port` knows of.
fn replicas_known(port: u16) -> usize {
    redis_cli(port, &["cluster", "nodes"]).map_or(0, |nodes| {
        nodes
            .lines()
            .filter(|line| line.contains("slave") && line.contains(" connected"))
            .count()
    })
}

fn wait_for(done: impl Fn() -> bool, what: &str) -> anyhow::Result<()> {
    let since = Instant::now();
    while !done() {
        if since.elapsed() > READY_LIMIT {
            bail!("gave up waiting {READY_LIMIT:?} for {what}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ports of their own, so a cluster someone runs on 7000-7002 is left alone.
    const TEST_PORTS: [u16; 3] = [7100, 7101, 7102];

    fn info(port: u16, field: &str) -> String {
        let info = redis_cli(port, &["cluster", "info"]).expect("the node answers");
        info.lines()
            .find_map(|line| line.strip_prefix(&format!("{field}:")))
            .unwrap_or_default()
            .trim()
            .to_string()
    }

    #[test]
    fn a_local_cluster_of_three_masters_serves_every_slot_and_goes_away() {
        down(&TEST_PORTS).unwrap();
        let seeds = up(&TEST_PORTS, 0).unwrap();
        assert_eq!(
            seeds,
            "redis://127.0.0.1:7100,redis://127.0.0.1:7101,redis://127.0.0.1:7102"
        );
        for port in TEST_PORTS {
            assert_eq!(info(port, "cluster_state"), "ok");
            assert_eq!(info(port, "cluster_slots_assigned"), "16384");
            assert_eq!(info(port, "cluster_known_nodes"), "3");
            assert_eq!(info(port, "cluster_size"), "3", "three masters");
        }
        // Up twice is the same cluster.
        assert_eq!(up(&TEST_PORTS, 0).unwrap(), seeds);
        // A hash tag puts a coupon's keys in one slot, its shards in others.
        let slot = |key: &str| redis_cli(7100, &["cluster", "keyslot", key]).unwrap();
        assert_eq!(slot("coupon:issued:{42}"), slot("coupon:total:{42}"));
        assert_ne!(slot("coupon:issued:{42}"), slot("coupon:issued:{43}"));
        down(&TEST_PORTS).unwrap();
        assert!(TEST_PORTS.iter().all(|&port| !answers(port)));
    }
}
