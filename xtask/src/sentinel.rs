//! `cargo xtask sentinel up|down|status`: a Redis primary with two replicas
//! watched by three Redis Sentinels, from the machine's `redis-server`, on
//! ports of their own: data nodes 6480-6482 (6480 the first primary),
//! Sentinels 26480-26482, monitoring the master `couponlab` with a quorum
//! of 2. Each process keeps its config, log and pid file in
//! `target/redis-sentinel/<port>/`. `up` returns once the three Sentinels
//! name the same primary, know each other and see both replicas online; a
//! topology already up is left as it is (whichever node a failover made
//! primary), and a node that is down is started again, as a replica of the
//! primary the Sentinels name. `down` stops them all and removes their
//! files.
//!
//! Sentinels fail over fast here (`down-after-milliseconds` 1000, a
//! failover timeout of 3 s), so a test or a fault sees a failover within a
//! few seconds of the kill.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::cluster::{answers, redis_cli, redis_daemon, start_daemon};
use crate::packages::ensure_debian;
use crate::target_dir;

/// The name the Sentinels know the primary by, in `REDIS_URL`.
pub const MASTER: &str = "couponlab";
/// The data nodes; the first is the primary of a new topology.
const DATA_PORTS: [u16; 3] = [6480, 6481, 6482];
const SENTINEL_PORTS: [u16; 3] = [26480, 26481, 26482];
/// How long the processes may take to start and the Sentinels to agree.
const READY_LIMIT: Duration = Duration::from_secs(60);

pub fn main(args: &[String]) -> anyhow::Result<()> {
    crate::up_down_status("sentinel", args, up, down, print_status)
}

/// Starts what is down and waits until the topology is ready; then prints
/// its status and the `REDIS_URL` a server takes.
pub fn up() -> anyhow::Result<()> {
    if !ready() {
        ensure_debian("redis-server", "redis-server")?;
        ensure_debian("redis-cli", "redis-tools")?;
        start_missing()?;
        let since = Instant::now();
        while !ready() {
            if since.elapsed() > READY_LIMIT {
                print_status();
                bail!(
                    "the Sentinels do not agree on a primary with two replicas online after {READY_LIMIT:?}; see the logs under {}",
                    base_dir().display()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    print_status();
    println!("REDIS_URL={}", url());
    Ok(())
}

/// The `REDIS_URL` of this topology, database 0.
pub fn url() -> String {
    let sentinels: Vec<String> = SENTINEL_PORTS
        .iter()
        .map(|port| format!("127.0.0.1:{port}"))
        .collect();
    format!("redis+sentinel://{}/{MASTER}/0", sentinels.join(","))
}

/// Stops every process of the topology and removes its files.
pub fn down() -> anyhow::Result<()> {
    for port in SENTINEL_PORTS.into_iter().chain(DATA_PORTS) {
        if answers(port) {
            let _ = redis_cli(port, &["shutdown", "nosave"]);
        }
    }
    let since = Instant::now();
    while SENTINEL_PORTS.into_iter().chain(DATA_PORTS).any(answers) {
        if since.elapsed() > READY_LIMIT {
            bail!("the Sentinel topology's processes do not stop");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::remove_dir_all(base_dir()).ok();
    println!("the Redis Sentinel topology is down");
    Ok(())
}

/// Whether every Sentinel names the same primary, one of the data nodes,
/// knows the two other Sentinels, and that primary has both replicas
/// online.
fn ready() -> bool {
    let Some(primary) = agreed_primary() else {
        return false;
    };
    let knows_the_others = SENTINEL_PORTS
        .iter()
        .all(|&port| sentinel_field(port, "num-other-sentinels").as_deref() == Some("2"));
    knows_the_others && replicas_online(primary) == 2
}

/// The primary's port when every Sentinel names the same data node.
fn agreed_primary() -> Option<u16> {
    let named: Vec<Option<u16>> = SENTINEL_PORTS
        .iter()
        .map(|&port| named_primary(port))
        .collect();
    let first = named[0]?;
    (named.iter().all(|port| *port == Some(first)) && DATA_PORTS.contains(&first)).then_some(first)
}

/// The primary the Sentinel on `port` names.
fn named_primary(port: u16) -> Option<u16> {
    let reply = redis_cli(port, &["sentinel", "get-master-addr-by-name", MASTER])?;
    reply.lines().nth(1)?.trim().parse().ok()
}

/// A field of `SENTINEL MASTER couponlab` as the Sentinel on `port` sees it.
fn sentinel_field(port: u16, field: &str) -> Option<String> {
    let reply = redis_cli(port, &["sentinel", "master", MASTER])?;
    let lines: Vec<&str> = reply.lines().map(str::trim).collect();
    let at = lines.iter().position(|line| *line == field)?;
    lines.get(at + 1).map(|value| value.to_string())
}

/// How many replicas the data node on `port`, a primary, has online.
fn replicas_online(port: u16) -> usize {
    let Some(info) = redis_cli(port, &["info", "replication"]) else {
        return 0;
    };
    if !info.contains("role:master") {
        return 0;
    }
    info.lines()
        .filter(|line| line.starts_with("slave") && line.contains("state=online"))
        .count()
}

/// Starts the data nodes and Sentinels that do not answer. A data node
/// joins the primary the running Sentinels name (a failover may have moved
/// it); with no Sentinel running, the topology starts afresh from the first
/// data node.
fn start_missing() -> anyhow::Result<()> {
    let running_sentinel = SENTINEL_PORTS.iter().any(|&port| answers(port));
    let primary = SENTINEL_PORTS
        .iter()
        .find_map(|&port| named_primary(port))
        .filter(|_| running_sentinel)
        .unwrap_or(DATA_PORTS[0]);
    if !running_sentinel && !answers(primary) {
        // No Sentinel remembers a topology: start one afresh.
        for port in DATA_PORTS {
            if !answers(port) {
                std::fs::remove_dir_all(node_dir(port)).ok();
            }
        }
        for port in SENTINEL_PORTS {
            std::fs::remove_dir_all(node_dir(port)).ok();
        }
    }
    for port in DATA_PORTS {
        if answers(port) {
            continue;
        }
        let replica_of = (port != primary).then_some(primary);
        start_data_node(port, replica_of)?;
    }
    for port in SENTINEL_PORTS {
        if !answers(port) {
            start_sentinel(port, primary)?;
        }
    }
    Ok(())
}

fn start_data_node(port: u16, replica_of: Option<u16>) -> anyhow::Result<()> {
    let dir = node_dir(port);
    std::fs::create_dir_all(&dir)?;
    let mut command = redis_daemon(port, &dir);
    if let Some(primary) = replica_of {
        command.args(["--replicaof", "127.0.0.1", &primary.to_string()]);
    }
    start_daemon(&mut command, port, &dir)
}

/// A Sentinel's config is its own state (it rewrites it with what it
/// learns), so it is written only when the Sentinel has none.
fn start_sentinel(port: u16, primary: u16) -> anyhow::Result<()> {
    let dir = node_dir(port);
    std::fs::create_dir_all(&dir)?;
    let config = dir.join("sentinel.conf");
    if !config.exists() {
        let text = format!(
            "port {port}\nbind 127.0.0.1\ndir {dir}\n\
             sentinel monitor {MASTER} 127.0.0.1 {primary} 2\n\
             sentinel down-after-milliseconds {MASTER} 1000\n\
             sentinel failover-timeout {MASTER} 3000\n\
             sentinel parallel-syncs {MASTER} 2\n",
            dir = dir.display()
        );
        std::fs::write(&config, text)?;
    }
    let mut command = Command::new("redis-server");
    command
        .arg(&config)
        .arg("--sentinel")
        .args(["--daemonize", "yes"])
        .arg("--logfile")
        .arg(dir.join("redis.log"))
        .arg("--pidfile")
        .arg(dir.join("redis.pid"));
    start_daemon(&mut command, port, &dir)
}

fn print_status() {
    for port in DATA_PORTS {
        let role = redis_cli(port, &["info", "replication"])
            .and_then(|info| {
                info.lines()
                    .find_map(|line| line.strip_prefix("role:"))
                    .map(|role| role.trim().to_string())
            })
            .unwrap_or_else(|| "down".to_string());
        let online = if role == "master" {
            format!(", {} replicas online", replicas_online(port))
        } else {
            String::new()
        };
        println!("redis     127.0.0.1:{port}  {role}{online}");
    }
    for port in SENTINEL_PORTS {
        let state = match named_primary(port) {
            Some(primary) => format!(
                "names primary 127.0.0.1:{primary}, {} other Sentinels",
                sentinel_field(port, "num-other-sentinels").unwrap_or_default()
            ),
            None if answers(port) => "answering, names no primary".to_string(),
            None => "down".to_string(),
        };
        println!("sentinel  127.0.0.1:{port}  {state}");
    }
}

fn base_dir() -> PathBuf {
    target_dir().join("redis-sentinel")
}

fn node_dir(port: u16) -> PathBuf {
    base_dir().join(port.to_string())
}
