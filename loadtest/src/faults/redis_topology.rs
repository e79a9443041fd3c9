//! The Redis topologies with replicas that `cargo xtask` starts, as the
//! failover faults act on them: the primary behind the Sentinels of `cargo
//! xtask sentinel up` (data nodes 6480-6482, Sentinels 26480-26482, master
//! `couponlab`), or the master of slot 0 in the cluster of `cargo xtask
//! cluster up --replicas 1` (7000-7005). A node is killed, paused and
//! continued by its process id, and started again as xtask starts it
//! (`target/redis-sentinel/<port>/`, `target/redis-cluster/<port>/`, whose
//! `nodes.conf` makes a cluster node rejoin as what the cluster made it).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::paths::target_dir;

/// The master name the Sentinels watch.
pub const MASTER: &str = "couponlab";
const SENTINEL_PORTS: [u16; 3] = [26480, 26481, 26482];
const CLUSTER_PORTS: [u16; 6] = [7000, 7001, 7002, 7003, 7004, 7005];
/// How long a promotion and a rejoin may take: the Sentinels' failover
/// (about 2 s here) or the cluster's node timeout (5 s) and its election.
const LIMIT: Duration = Duration::from_secs(60);

/// Which topology the lab runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisTopology {
    Sentinel,
    Cluster,
}

impl RedisTopology {
    /// The `REDIS_URL` of a lab behind the Sentinels, database `db`.
    pub fn sentinel_url(db: u8) -> String {
        let sentinels: Vec<String> = SENTINEL_PORTS
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        format!("redis+sentinel://{}/{MASTER}/{db}", sentinels.join(","))
    }

    /// The port of the node a fault acts on: the primary every Sentinel
    /// names, or the master that serves slot 0. Sentinels that disagree (one
    /// not yet told of a failover) are waited for, at most [`LIMIT`].
    pub fn primary(self) -> anyhow::Result<u16> {
        let since = Instant::now();
        loop {
            if let Some(primary) = self.named_primary() {
                return Ok(primary);
            }
            if since.elapsed() > LIMIT {
                bail!(
                    "no primary agreed on within {LIMIT:?}: `cargo xtask sentinel up` or `cargo xtask cluster up --replicas 1` starts one"
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The primary as the topology names it now, when it names one.
    fn named_primary(self) -> Option<u16> {
        match self {
            RedisTopology::Sentinel => {
                let named: Vec<Option<u16>> = SENTINEL_PORTS
                    .iter()
                    .map(|&port| sentinel_primary(port))
                    .collect();
                let first = named[0]?;
                named
                    .iter()
                    .all(|port| *port == Some(first))
                    .then_some(first)
            }
            RedisTopology::Cluster => CLUSTER_PORTS
                .iter()
                .find_map(|&port| master_of_slot_zero(port)),
        }
    }

    /// Waits until a node other than `old` serves as the primary; which,
    /// and when.
    pub fn until_promoted(self, old: u16) -> anyhow::Result<(u16, Instant)> {
        let since = Instant::now();
        loop {
            if let Some(primary) = self.named_primary()
                && primary != old
                && role(primary).as_deref() == Some("master")
            {
                return Ok((primary, Instant::now()));
            }
            if since.elapsed() > LIMIT {
                bail!("no replica of 127.0.0.1:{old} was promoted within {LIMIT:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts the node on `port` again as xtask starts it, a replica of
    /// `primary` (a cluster node rejoins by its `nodes.conf`), and waits
    /// until it replicates with its link up.
    pub fn rejoin(self, port: u16, primary: u16) -> anyhow::Result<()> {
        let dir = self.node_dir(port);
        let mut command = Command::new("redis-server");
        command
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "yes"])
            .arg("--dir")
            .arg(&dir)
            .arg("--logfile")
            .arg(dir.join("redis.log"))
            .arg("--pidfile")
            .arg(dir.join("redis.pid"));
        match self {
            RedisTopology::Sentinel => {
                command.args(["--replicaof", "127.0.0.1", &primary.to_string()]);
            }
            RedisTopology::Cluster => {
                command
                    .args(["--cluster-enabled", "yes"])
                    .args(["--cluster-config-file", "nodes.conf"])
                    .args(["--cluster-node-timeout", "5000"]);
            }
        }
        let status = command.status().context("cannot run redis-server")?;
        if !status.success() {
            bail!("redis-server on port {port} did not start: {status}");
        }
        until_replicating(port)
    }

    fn node_dir(self, port: u16) -> PathBuf {
        let topology = match self {
            RedisTopology::Sentinel => "redis-sentinel",
            RedisTopology::Cluster => "redis-cluster",
        };
        target_dir().join(topology).join(port.to_string())
    }
}

/// Sends `signal` (`KILL`, `STOP`, `CONT`) to the node on `port`, by the
/// process id it reported before (a stopped node answers nothing).
pub fn signal(pid: u32, signal: &str) -> anyhow::Result<()> {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()?;
    if !status.success() {
        bail!("kill -{signal} {pid} failed");
    }
    Ok(())
}

/// The process id of the Redis on `port`.
pub fn pid(port: u16) -> anyhow::Result<u32> {
    let info = cli(port, &["info", "server"])
        .with_context(|| format!("127.0.0.1:{port} does not answer"))?;
    field(&info, "process_id")
        .and_then(|pid| pid.parse().ok())
        .with_context(|| format!("127.0.0.1:{port} names no process_id"))
}

/// Waits until the node on `port` is a replica whose link to its primary is
/// up and which is not loading a full copy.
pub fn until_replicating(port: u16) -> anyhow::Result<()> {
    let since = Instant::now();
    loop {
        if let Some(info) = cli(port, &["info", "replication"])
            && field(&info, "role").as_deref() == Some("slave")
            && field(&info, "master_link_status").as_deref() == Some("up")
            && field(&info, "master_sync_in_progress").as_deref() == Some("0")
        {
            return Ok(());
        }
        if since.elapsed() > LIMIT {
            bail!("127.0.0.1:{port} is not a replica in sync within {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn role(port: u16) -> Option<String> {
    field(&cli(port, &["info", "replication"])?, "role")
}

fn sentinel_primary(port: u16) -> Option<u16> {
    let reply = cli(port, &["sentinel", "get-master-addr-by-name", MASTER])?;
    reply.lines().nth(1)?.trim().parse().ok()
}

/// The port of the live master serving slot 0, as the node on `port` sees
/// the cluster (`CLUSTER NODES`: id, address, flags, ..., slot ranges).
fn master_of_slot_zero(port: u16) -> Option<u16> {
    let nodes = cli(port, &["cluster", "nodes"])?;
    nodes.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let flags = fields.get(2)?;
        let serves_zero = fields
            .iter()
            .skip(8)
            .any(|range| range.split('-').next() == Some("0"));
        let alive = flags.contains("master") && !flags.contains("fail");
        if !(alive && serves_zero) {
            return None;
        }
        let address = fields.get(1)?.split('@').next()?;
        address.rsplit(':').next()?.parse().ok()
    })
}

/// `field:value` of an INFO reply.
fn field(info: &str, name: &str) -> Option<String> {
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(|value| value.trim().to_string())
}

/// `redis-cli -p port args...`, its standard output when it answered.
fn cli(port: u16, args: &[&str]) -> Option<String> {
    // A paused node accepts a connection and answers nothing: two seconds
    // at most.
    let out = Command::new("timeout")
        .args(["2", "redis-cli", "-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.success() && !text.starts_with("Could not connect")).then_some(text)
}
